// Softmax kernels: per sample the row's max, the sums of exp(z - max) and of the labels'
// z - max, and the delta (LayerBackend::Softmax); the batch's mean loss (SoftmaxMeanLoss).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/kernels/common.h"
#include "lsh/select_kernel.h"

namespace dslide::gpu {

/// softplus(v) = log(1 + exp(v)) and sigmoid(v) without overflow.
DSLIDE_HD inline float SoftplusF(float v) { return fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v))); }
DSLIDE_HD inline float SigmoidF(float v) {
  const float e = expf(-fabsf(v));
  return v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/// A block per sample: block reductions (CUB) of the max and of the sums, then the delta.
/// Phases not run read their results from mx and red. With ovr, the one-vs-rest loss's
/// phases (softmax.h): max 0, the sums of softplus(z) and of the labels' z, the delta
/// (sigmoid(z) - [labelled]) / B.
struct Softmax {
  static constexpr int kThreads = 256;
  RowsView z;  // the logits of the active neurons
  bool do_max = false, do_sums = false, do_delta = false, ovr = false;
  const int64_t* lo = nullptr;  // the labels
  const int32_t* li = nullptr;
  float inv_b = 0;
  float* mx = nullptr;   // B
  float* red = nullptr;  // 2B: sums, then label terms
  float* d = nullptr;    // laid out as z

  bool Empty() const { return z.B <= 0; }
  DSLIDE_HD float PartMax(int64_t i, int tid, int nt) const {
    if (ovr) return 0.0f;
    float m = -HUGE_VALF;
    for (int64_t j = tid; j < z.n[i]; j += nt) m = fmaxf(m, z.vals[i * z.cap + j]);
    return m;
  }
  /// Thread tid's part of the sum of exp(z - m) (*s) and of the labels' z - m (*l).
  DSLIDE_HD void PartSums(int64_t i, int tid, int nt, float m, double* s, double* l) const {
    const int64_t k = lo[i + 1] - lo[i];
    double ss = 0.0, ll = 0.0;
    for (int64_t j = tid; j < z.n[i]; j += nt) {
      const float v = z.vals[i * z.cap + j];
      ss += ovr ? SoftplusF(v) : expf(v - m);
      if (k > 0 && SortedHas(li + lo[i], k, z.ids[i * z.cap + j])) ll += v - m;
    }
    *s = ss;
    *l = ll;
  }
  DSLIDE_HD void Delta(int64_t i, int tid, int nt, float m, float sum) const {
    const int64_t k = lo[i + 1] - lo[i];
    const float scale = ovr ? inv_b : inv_b / sum, t = k == 0 ? 0.0f
                                                       : ovr  ? inv_b
                                                              : inv_b / static_cast<float>(k);
    for (int64_t j = tid; j < z.cap; j += nt) {
      float e = 0.0f;
      if (k > 0 && j < z.n[i]) {
        const float v = z.vals[i * z.cap + j];
        e = (ovr ? SigmoidF(v) : expf(v - m)) * scale;
        if (SortedHas(li + lo[i], k, z.ids[i * z.cap + j])) e -= t;
      }
      d[i * z.cap + j] = e;
    }
  }
};
void LaunchSoftmax(StreamHandle s, const Softmax& k);
inline void LaunchKernel(StreamHandle s, const Softmax& k) { LaunchSoftmax(s, k); }

inline void RunOnHost(const Softmax& k, HostOrderSalt* salt) {
  constexpr int nt = Softmax::kThreads;
  HostShuffled(k.z.B, salt, [&](int64_t i) {
    if (k.do_max) {
      std::vector<float> part(nt);
      HostShuffled(nt, salt, [&](int64_t t) { part[t] = k.PartMax(i, static_cast<int>(t), nt); });
      float m = -HUGE_VALF;
      for (float p : part) m = fmaxf(m, p);
      k.mx[i] = m;
    }
    const float m = k.mx[i];
    if (k.do_sums) {
      std::vector<double> s(nt), l(nt);
      HostShuffled(nt, salt,
                   [&](int64_t t) { k.PartSums(i, static_cast<int>(t), nt, m, &s[t], &l[t]); });
      double ss = 0.0, ll = 0.0;
      for (int t = 0; t < nt; ++t) {
        ss += s[t];
        ll += l[t];
      }
      k.red[i] = static_cast<float>(ss);
      k.red[k.z.B + i] = static_cast<float>(ll);
    }
    if (k.do_delta) {
      const float sum = k.red[i];
      HostShuffled(nt, salt, [&](int64_t t) { k.Delta(i, static_cast<int>(t), nt, m, sum); });
    }
  });
}

/// The batch's mean loss from the softmax statistics (SoftmaxMeanLoss's formula) into *out,
/// and the layers' non-finite flags (then cleared) as bits into *out_bad: one block, its
/// threads over the samples, the sums reduced with CUB.
struct StepLoss {
  static constexpr int kThreads = 256;
  int64_t B = 0, n_layers = 0;
  bool ovr = false;  // one-vs-rest: a sample's loss is red[i] - red[B + i]
  const int64_t* lo = nullptr;
  const float* red = nullptr;
  uint32_t* bad = nullptr;
  double* out = nullptr;
  uint64_t* out_bad = nullptr;

  bool Empty() const { return false; }
  /// Thread tid's part of the summed losses (*loss) and of the labelled samples (*labelled).
  DSLIDE_HD void Part(int tid, int nt, double* loss, double* labelled) const {
    double s = 0.0, c = 0.0;
    for (int64_t i = tid; i < B; i += nt) {
      const int64_t k = lo[i + 1] - lo[i];
      if (k == 0) continue;
      c += 1.0;
      s += ovr ? static_cast<double>(red[i]) - red[B + i]
               : log(static_cast<double>(red[i])) - red[B + i] / static_cast<double>(k);
    }
    *loss = s;
    *labelled = c;
  }
  /// By thread 0, from the block's totals.
  DSLIDE_HD void Finish(double loss, double labelled) const {
    *out = labelled > 0.0 ? loss / labelled : 0.0;
    uint64_t bits = 0;
    for (int64_t l = 0; l < n_layers; ++l) {
      if (bad[l] != 0) bits |= uint64_t{1} << l;
      bad[l] = 0;
    }
    *out_bad = bits;
  }
};
void LaunchStepLoss(StreamHandle s, const StepLoss& k);
inline void LaunchKernel(StreamHandle s, const StepLoss& k) { LaunchStepLoss(s, k); }

inline void RunOnHost(const StepLoss& k, HostOrderSalt* salt) {
  constexpr int nt = StepLoss::kThreads;
  std::vector<double> loss(nt), labelled(nt);
  HostShuffled(nt, salt,
               [&](int64_t t) { k.Part(static_cast<int>(t), nt, &loss[t], &labelled[t]); });
  double s = 0.0, c = 0.0;
  for (int t = 0; t < nt; ++t) {
    s += loss[t];
    c += labelled[t];
  }
  k.Finish(s, c);
}

}  // namespace dslide::gpu
