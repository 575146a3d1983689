// Top-k kernels: the exact top-k logits of a row-per-neuron output layer (LayerBackend::TopK)
// per (sample, segment of neurons), and the logits of the samples' labels.
#pragma once

#include <cmath>
#include <cstdint>

#include "gpu/kernels/common.h"
#include "model/topk.h"

namespace dslide::gpu {

/// A thread per (segment of `segment` neurons, sample): the segment's k largest logits
/// (ids and scores, descending), its max and its sum of exp(z - max) (one-vs-rest: 0 and the
/// sum of softplus(z)), from the sample's
/// dense input, a column of x (cols x B), at (sample, segment) of the outputs. Consecutive
/// threads take consecutive samples of one segment: a warp's lanes read the same weight row
/// at once, and consecutive addresses of x.
struct TopKSegments : PerIndex<TopKSegments> {
  /// The longest list: predict's --top-k up to it, and an ensemble's members' lists
  /// (kEnsembleListLength, 100). The lists live in local memory (InsertTopK indexes them at
  /// run time) and a thread touches only the first k entries of each.
  static constexpr int kMaxK = 128;
  int k = 0;
  bool ovr = false;  // one-vs-rest: max 0 and the sum of softplus(z) (softmax.h)
  int64_t B = 0, n = 0, nseg = 0, segment = 0, cols = 0, begin = 0;
  const float *x = nullptr, *w = nullptr, *bias = nullptr;  // x: cols x B
  int32_t* oid = nullptr;                                   // B x nseg x k
  float* osc = nullptr;
  float *omx = nullptr, *osum = nullptr;  // B x nseg

  DSLIDE_HD int64_t Size() const { return B * nseg; }
  DSLIDE_HD void operator()(int64_t u) const {
    const int64_t sg = u / B, i = u % B, t = i * nseg + sg;
    float sc[kMaxK];
    int32_t id[kMaxK];
    for (int j = 0; j < k; ++j) {
      sc[j] = -HUGE_VALF;
      id[j] = -1;
    }
    float m = -HUGE_VALF, sum = 0.0f;
    const int64_t r1 = (sg + 1) * segment < n ? (sg + 1) * segment : n;
    for (int64_t r = sg * segment; r < r1; ++r) {
      float z = 0.0f;
      for (int64_t j = 0; j < cols; ++j) z += w[r * cols + j] * x[j * B + i];
      z += bias[r];
      if (ovr) {
        m = 0.0f;
        sum += fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z)));
      } else if (z > m) {
        sum = sum * expf(m - z) + 1.0f;
        m = z;
      } else {
        sum += expf(z - m);
      }
      InsertTopK(z, static_cast<int32_t>(begin + r), k, sc, id);
    }
    for (int j = 0; j < k; ++j) {
      oid[t * k + j] = id[j];
      osc[t * k + j] = sc[j];
    }
    omx[t] = m;
    osum[t] = sum;
  }
};
void LaunchTopKSegments(StreamHandle s, const TopKSegments& k);
inline void LaunchKernel(StreamHandle s, const TopKSegments& k) { LaunchTopKSegments(s, k); }
inline void RunOnHost(const TopKSegments& k, HostOrderSalt* salt) { RunPerIndexOnHost(k, salt); }

/// A thread per (sample, label on this shard): the label's logit, from the sample's column of
/// x (cols x B).
struct LabelLogits : PerIndex<LabelLogits> {
  int64_t nl = 0, cols = 0, B = 0;
  const int64_t* ls = nullptr;  // the label's sample
  const int32_t* lr = nullptr;  // its row
  const float *x = nullptr, *w = nullptr, *bias = nullptr;
  float* lz = nullptr;

  DSLIDE_HD int64_t Size() const { return nl; }
  DSLIDE_HD void operator()(int64_t e) const {
    const int64_t i = ls[e], r = lr[e];
    float z = 0.0f;
    for (int64_t j = 0; j < cols; ++j) z += w[r * cols + j] * x[j * B + i];
    lz[e] = z + bias[r];
  }
};
void LaunchLabelLogits(StreamHandle s, const LabelLogits& k);
inline void LaunchKernel(StreamHandle s, const LabelLogits& k) { LaunchLabelLogits(s, k); }
inline void RunOnHost(const LabelLogits& k, HostOrderSalt* salt) { RunPerIndexOnHost(k, salt); }

}  // namespace dslide::gpu
