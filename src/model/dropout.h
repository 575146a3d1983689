// Dropout of the hidden layers' activations in training (--dropout): each activation is
// dropped with chance `rate` and the kept ones are scaled by 1 / (1 - rate) ("inverted"
// dropout), so evaluation, prediction and exported models use the layers as they are. Which
// entries drop is a hash of the batch's key, the sample's place in the batch and the neuron's
// global id alone: the same on every rank, at any thread count, on the CPU and the GPU.
#pragma once

#include <cstdint>

#include "common/hd.h"
#include "common/rng.h"
#include "data/batch_rows.h"

namespace dslide {

struct DropoutStep {
  float rate = 0.0f;  ///< in [0, 1): the chance that an activation is dropped
  uint64_t key = 0;   ///< the batch's (DropoutKey)

  /// Whether sample i's activation of neuron `id` (a global id) is kept.
  DSLIDE_HD bool Keeps(int64_t i, int64_t id) const {
    const uint64_t h =
        Mix64(key ^ Mix64(static_cast<uint64_t>(i) << 32 ^ static_cast<uint64_t>(id)));
    // The top 24 bits as a uniform draw in [0, 1), exact in a float.
    return static_cast<float>(h >> 40) * 0x1.0p-24f >= rate;
  }
  /// The factor of the kept activations and of the gradients that reach them.
  DSLIDE_HD float Scale() const { return 1.0f / (1.0f - rate); }
};

/// The key of the batch of iteration `iter` that starts with data point `first`: every rank
/// of a model-parallel step draws the same masks; data-parallel ranks, whose batches differ,
/// draw their own.
inline uint64_t DropoutKey(uint64_t seed, int64_t iter, int64_t first) {
  constexpr uint64_t kDropoutStream = 0x64726f706f7574ULL;  // "dropout"
  return StreamSeed(seed, kDropoutStream, static_cast<uint64_t>(iter),
                    static_cast<uint64_t>(first));
}

/// Forward: the dropped activations of `out` set to 0, the kept ones scaled.
inline void DropoutForward(const DropoutStep& d, BatchRows* out) {
  const float scale = d.Scale();
  for (int64_t i = 0; i < out->samples(); ++i) {
    float* v = out->Vals(i);
    const int32_t* id = out->Ids(i);
    for (int64_t j = 0; j < out->n[i]; ++j) v[j] = d.Keeps(i, id[j]) ? v[j] * scale : 0.0f;
  }
}

/// Backward, on a delta that ReLU' of the dropped-out activations has already masked (a
/// dropped activation is 0, so its delta is): the kept ones' gradients scaled.
inline void DropoutBackward(const DropoutStep& d, BatchRows* delta) {
  const float scale = d.Scale();
  for (int64_t i = 0; i < delta->samples(); ++i) {
    float* v = delta->Vals(i);
    for (int64_t j = 0; j < delta->n[i]; ++j) v[j] *= scale;
  }
}

}  // namespace dslide
