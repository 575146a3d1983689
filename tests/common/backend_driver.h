// Host rows through a backend's batch interface, for tests: each call stages the given
// rows into the layer's buffers (HostRows for writing, CommitRows), runs the phase, and
// reads the result back (HostRows for reading). Training drives the same calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/layer_backend.h"
#include "common/rng.h"
#include "train/table_plans.h"

namespace dslide::testing {

/// First-layer inputs: `samples` rows of `k` distinct ids drawn uniformly from [0, range),
/// sorted, with values in [0.1, 1.1), in rows of room `room` (>= k); width `width`.
inline BatchRows SparseInputs(int64_t samples, int64_t k, int64_t room, int64_t range,
                              int64_t width, uint64_t seed) {
  Rng rng(seed);
  BatchRows r;
  r.Strided(samples, room);
  for (int64_t i = 0; i < samples; ++i) {
    std::vector<int32_t> ids;
    while (static_cast<int64_t>(ids.size()) < k) {
      const int32_t f = static_cast<int32_t>(rng.Below(range));
      if (std::find(ids.begin(), ids.end(), f) == ids.end()) ids.push_back(f);
    }
    std::sort(ids.begin(), ids.end());
    for (size_t e = 0; e < ids.size(); ++e) {
      r.Ids(i)[e] = ids[e];
      r.Vals(i)[e] = static_cast<float>(rng.Uniform() + 0.1);
    }
    r.n[i] = k;
  }
  r.width = width;
  return r;
}

/// Makes `rows` the layer's `which` buffer.
/// Init, then the sparse layers' first tables as the trainer builds them (TablePlans).
inline void InitBackend(LayerBackend& b, const ModelSpec& spec, const BackendOptions& options) {
  b.Init(spec, options);
  TablePlans(spec, options.seed).BuildFirst(&b);
}

inline void Stage(LayerBackend& b, int layer, Rows which, const BatchRows& rows) {
  *b.HostRows(layer, which, Access::kWrite) = rows;
  b.CommitRows(layer, which);
}

/// The values of `from` into `to`, sample by sample (the two may be laid out differently).
inline void CopyValues(const BatchRows& from, BatchRows* to) {
  for (int64_t i = 0; i < to->samples(); ++i)
    for (int64_t e = 0; e < to->n[i]; ++e) to->vals[to->off[i] + e] = from.vals[from.off[i] + e];
}

/// The active sets (ids and counts) of `in` on this shard.
inline void SelectActive(LayerBackend& b, int layer, const BatchRows& in, const BatchLabels* labels,
                         int64_t iter, BatchRows* out) {
  Stage(b, layer, Rows::kInput, in);
  b.SetLabels(labels);
  b.Select(layer, labels != nullptr, iter);
  *out = *b.HostRows(layer, Rows::kOutput, Access::kRead);
}

/// out->vals for the active ids already in `out`.
inline void Forward(LayerBackend& b, int layer, const BatchRows& in, BatchRows* out) {
  Stage(b, layer, Rows::kInput, in);
  Stage(b, layer, Rows::kOutput, *out);
  b.Forward(layer);
  CopyValues(*b.HostRows(layer, Rows::kOutput, Access::kRead), out);
}

/// The one-rank softmax (LayerBackend::Softmax) on the logits `z`: the delta, laid out like
/// z; returns the batch's mean loss (QueueStatus, which takes the non-finite flags too).
inline double Softmax(LayerBackend& b, int layer, const BatchRows& z, const BatchLabels& labels,
                      BatchRows* delta) {
  Stage(b, layer, Rows::kOutput, z);
  b.SetLabels(&labels);
  b.Softmax(layer);
  delta->LikeZero(z);
  delta->ids = z.ids;
  CopyValues(*b.HostRows(layer, Rows::kDelta, Access::kRead), delta);
  b.QueueStatus(layer);
  return b.TakeQueued().back().loss;
}

/// The shard's part of the softmax's normaliser on the logits `z` (SoftmaxPartials).
inline void SoftmaxPartials(LayerBackend& b, int layer, const BatchRows& z,
                            const BatchLabels& labels, SoftmaxStats* st) {
  Stage(b, layer, Rows::kOutput, z);
  b.SetLabels(&labels);
  b.SoftmaxPartials(layer, st);
}

/// The softmax's delta after SoftmaxPartials on the same logits `z`, from `st`, laid out like z.
inline void SoftmaxDelta(LayerBackend& b, int layer, const BatchRows& z, const SoftmaxStats& st,
                         BatchRows* delta) {
  b.SoftmaxDelta(layer, st);
  delta->LikeZero(z);
  delta->ids = z.ids;
  CopyValues(*b.HostRows(layer, Rows::kDelta, Access::kRead), delta);
}

/// Backward from `delta` (its ids the layer's active sets), with `step` BackwardStep (Adam
/// fused); with in_grad (a layer above the first), adds this shard's input gradient into it
/// (aligned with `in`).
inline void Backward(LayerBackend& b, int layer, const BatchRows& in, const BatchRows& delta,
                     BatchRows* in_grad, const AdamStep* step = nullptr) {
  Stage(b, layer, Rows::kInput, in);
  Stage(b, layer, Rows::kOutput, delta);  // the delta's ids and counts are the output's
  Stage(b, layer, Rows::kDelta, delta);
  if (step != nullptr)
    b.BackwardStep(layer, *step);
  else
    b.Backward(layer);
  if (in_grad == nullptr) return;
  const BatchRows& g = *b.HostRows(layer, Rows::kInputGrad, Access::kRead);
  for (int64_t i = 0; i < in.samples(); ++i)
    for (int64_t e = 0; e < in.n[i]; ++e)
      in_grad->vals[in_grad->off[i] + e] += g.vals[g.off[i] + e];
}

/// Exact top-k of the output layer for `in`.
inline void TopK(LayerBackend& b, int layer, const BatchRows& in, int k, std::vector<int32_t>* ids,
                 std::vector<float>* scores, const BatchLabels* labels = nullptr,
                 SoftmaxStats* st = nullptr) {
  Stage(b, layer, Rows::kInput, in);
  b.TopK(layer, k, ids, scores, labels, st);
}

/// The shard's weights (rows per neuron) and biases.
inline void GetLayer(const LayerBackend& b, int layer, std::vector<float>* w,
                     std::vector<float>* bias) {
  LayerState st;
  b.SaveLayer(layer, kWeights, &st);
  *w = std::move(st.w);
  *bias = std::move(st.b);
}
inline void SetLayer(LayerBackend& b, int layer, const std::vector<float>& w,
                     const std::vector<float>& bias) {
  LayerState st;
  st.w = w;
  st.b = bias;
  b.LoadLayer(layer, kWeights, st);
}
/// The pending gradient, laid out like GetLayer.
inline void GetGradient(const LayerBackend& b, int layer, std::vector<float>* gw,
                        std::vector<float>* gb) {
  LayerState st;
  b.SaveLayer(layer, kGradient, &st);
  *gw = std::move(st.gw);
  *gb = std::move(st.gb);
}
inline int64_t GradientSize(const LayerBackend& b, int layer) { return b.GradientSize(layer); }
/// True when an update of `layer` went NaN or infinite since the last read (which clears
/// every layer's flag).
inline bool TakeNonFinite(LayerBackend& b, int layer) {
  b.QueueStatus(-1);
  const std::vector<StepStatus> q = b.TakeQueued();
  return (q.back().bad_layers >> layer & 1) != 0;
}

}  // namespace dslide::testing
