// Storage layouts of a layer's weights, shared by the backends: a row per neuron
// (local x in_dim), or a row per input feature (in_dim x local) for the input-major first
// layer; and the initial weights, a function of (seed, layer, global neuron) only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace dslide {

/// Offset of the weight from input j to local neuron i in the layer's storage layout.
inline size_t WeightAt(const LayerSpec& s, int64_t i, int64_t j) {
  return static_cast<size_t>(s.input_major ? j * s.local() + i : i * s.in_dim + j);
}
/// A weight-shaped array in storage order (local * in_dim floats) -> row per neuron
/// (local x in_dim), and back.
void StorageToRows(const LayerSpec& s, const float* storage, std::vector<float>* rows);
void RowsToStorage(const LayerSpec& s, const std::vector<float>& rows, float* storage);
inline void StorageToRows(const LayerSpec& s, const std::vector<float>& storage,
                          std::vector<float>* rows) {
  StorageToRows(s, storage.data(), rows);
}
inline void RowsToStorage(const LayerSpec& s, const std::vector<float>& rows,
                          std::vector<float>* storage) {
  storage->resize(static_cast<size_t>(s.local()) * s.in_dim);
  RowsToStorage(s, rows, storage->data());
}
/// A sampled layer more than this many times wider than its input starts from He's weights
/// (InitialStddev): there Glorot's are below a third of He's.
constexpr double kWideLayer = 8.0;
/// The standard deviation of layer `layer`'s initial (normal) weights: Glorot's, sqrt(2 /
/// (fan_in + fan_out)), but He's, sqrt(2 / fan_in), for a sampled layer that reads a hidden
/// layer's ReLU output and is more than kWideLayer times wider than it. A row of a wide
/// sampled layer changes only when it is active, by Adam steps of about the learning rate
/// whatever its gradient's size; Glorot's width-scaled value (0.003 at 2 x 10^5 outputs,
/// 0.0017 at 6.7 x 10^5) is gone after a few such steps, the rows lose their random
/// differences, and the model predicts the same labels for every input for hundreds of steps
/// (docs/user-guide.md, "Initial weights", has the measurements).
double InitialStddev(const LayerSpec& s, size_t layer);
/// Weights of layer `layer`, uniform with InitialStddev's standard deviation, in storage
/// order (local() x in_dim floats); a random stream per global neuron, so any number of ranks
/// starts from the same model.
void InitialWeights(const LayerSpec& s, size_t layer, uint64_t seed, float* storage);

}  // namespace dslide
