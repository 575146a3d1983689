#include "model/layer_layout.h"

#include <algorithm>
#include <cmath>

#include "common/parallel.h"
#include "common/rng.h"
#include "model/backend_streams.h"

namespace dslide {

namespace {

/// out (cols x rows) = the transpose of in (rows x cols), both row-major: tiles of kTile x
/// kTile, so that each tile's reads and writes stay within a few cache lines, a band of
/// tile rows per task. The strided loop it replaces took a cache miss a weight (a checkpoint
/// of the first layer, its moments and the best model's snapshot each made one pass).
void Transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t kTile = 32;
  ParallelFor((rows + kTile - 1) / kTile, [&](int64_t band) {
    const int64_t r0 = band * kTile, r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
    }
  });
}

}  // namespace

void StorageToRows(const LayerSpec& s, const float* storage, std::vector<float>* rows) {
  const int64_t n = s.local(), d = s.in_dim;
  rows->resize(static_cast<size_t>(n) * d);
  // Input-major storage is in_dim x local: its transpose is a row per neuron.
  if (s.input_major)
    Transpose(storage, d, n, rows->data());
  else
    std::copy(storage, storage + n * d, rows->data());
}

void RowsToStorage(const LayerSpec& s, const std::vector<float>& rows, float* storage) {
  const int64_t n = s.local(), d = s.in_dim;
  if (s.input_major)
    Transpose(rows.data(), n, d, storage);
  else
    std::copy(rows.data(), rows.data() + n * d, storage);
}

double InitialStddev(const LayerSpec& s, size_t layer) {
  const double fan_in = static_cast<double>(s.in_dim), fan_out = static_cast<double>(s.out_dim);
  if (!s.dense() && layer > 0 && fan_out > kWideLayer * fan_in) return std::sqrt(2.0 / fan_in);
  return std::sqrt(2.0 / (fan_in + fan_out));
}

void InitialWeights(const LayerSpec& s, size_t layer, uint64_t seed, float* storage) {
  // Uniform on [-h, h), h = sqrt(3) x the standard deviation (the uniform forms of Glorot's
  // and He's rules, as PyTorch's nn.Linear starts): one 64-bit draw gives two weights of 24
  // bits each, without the logarithm and square root a pair of normals costs (gcide8-
  // skipgram's 53 M weights: 1.04 -> 0.2 CPU seconds, docs/user-guide.md "Initial weights").
  const double half = std::sqrt(3.0) * InitialStddev(s, layer);
  // Neuron i's weights come from its stream, two per draw, in input order. kBlock neurons'
  // streams advance side by side, so that an input-major layer's writes of one input land
  // on one cache line.
  constexpr int64_t kBlock = 16;
  const int64_t n_in = s.in_dim;
  ParallelFor((s.local() + kBlock - 1) / kBlock, [&](int64_t blk) {
    const int64_t i0 = blk * kBlock, n = std::min(kBlock, s.local() - i0);
    Rng rng[kBlock];
    for (int64_t k = 0; k < n; ++k)
      rng[k].Seed(StreamSeed(seed, streams::kInit, layer, s.begin + i0 + k));
    for (int64_t j = 0; j < n_in; j += 2)
      for (int64_t k = 0; k < n; ++k) {
        double a, b;
        rng[k].SymmetricPair(&a, &b);
        storage[WeightAt(s, i0 + k, j)] = static_cast<float>(a * half);
        if (j + 1 < n_in) storage[WeightAt(s, i0 + k, j + 1)] = static_cast<float>(b * half);
      }
  });
}

}  // namespace dslide
