#include "layer_layout.h"

#include <cmath>

#include "backend_streams.h"
#include "parallel.h"
#include "rng.h"

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
  const double stddev = InitialStddev(s, layer);
  ParallelFor(s.local(), 64, [&](int64_t i) {
    Rng rng(StreamSeed(seed, streams::kInit, layer, s.begin + i));
    for (int64_t j = 0; j < s.in_dim; ++j)
      storage[WeightAt(s, i, j)] = static_cast<float>(rng.Normal() * stddev);
  });
}

}  // namespace dslide
