#include "model/layer_layout.h"

#include <algorithm>
#include <cmath>

#include "common/parallel.h"
#include "common/rng.h"
#include "model/backend_streams.h"

namespace dslide {

void StorageToRows(const LayerSpec& s, const float* storage, std::vector<float>* rows) {
  rows->resize(static_cast<size_t>(s.local()) * s.in_dim);
  for (int64_t i = 0; i < s.local(); ++i)
    for (int64_t j = 0; j < s.in_dim; ++j) (*rows)[i * s.in_dim + j] = storage[WeightAt(s, i, j)];
}

void RowsToStorage(const LayerSpec& s, const std::vector<float>& rows, float* storage) {
  for (int64_t i = 0; i < s.local(); ++i)
    for (int64_t j = 0; j < s.in_dim; ++j) storage[WeightAt(s, i, j)] = rows[i * s.in_dim + j];
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
