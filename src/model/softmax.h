// The output layer's softmax cross-entropy over sharded logits, in phases; with P ranks the
// trainer runs max and sums on each rank's own logits, combines them in one all-reduce
// (CombineSoftmax, communicator.h) and hands the delta phase red[i] rescaled to this rank's
// mx[i] (the normaliser S times exp(M - mx[i]), M the max over the ranks):
//   kSoftmaxMax    mx[i]     = max_j z_ij                       (-inf for an empty row)
//   kSoftmaxSums   red[i]    = sum_j exp(z_ij - mx[i])
//                  red[B+i]  = sum over labelled j of (z_ij - mx[i])
//   kSoftmaxDelta  delta_ij  = (exp(z_ij - mx[i]) / red[i] - [j labelled] / k_i) / B
//                  (0 for a sample without labels), aligned with z
// Each phase reads what the earlier ones wrote (reduced over ranks by the caller), delta
// included: between the sums and the delta phase it may hold exp(z - mx), so both get the
// same rows. On one rank all three run in one call (kSoftmaxAll), which a backend may fuse
// into one kernel.
// Under the one-vs-rest loss (OutputLoss::kOneVsRest, output_loss.h) the same phases run with
// mx[i] = 0, so that every combination over ranks is a plain sum:
//   kSoftmaxMax    mx[i]     = 0
//   kSoftmaxSums   red[i]    = sum_j softplus(z_ij), red[B+i] = sum over labelled j of z_ij
//   kSoftmaxDelta  delta_ij  = (sigmoid(z_ij) - [j labelled]) / B (0 without labels)
// and a sample's loss is red[i] - red[B+i], the sum of its neurons' binary cross-entropies.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "config/output_loss.h"
#include "data/batch_rows.h"

namespace dslide {

enum SoftmaxPhase : unsigned {
  kSoftmaxMax = 1,
  kSoftmaxSums = 2,
  kSoftmaxDelta = 4,
  kSoftmaxAll = kSoftmaxMax | kSoftmaxSums | kSoftmaxDelta,
};

/// Per-sample softmax statistics of a batch of B samples.
struct SoftmaxStats {
  std::vector<float> mx;   ///< B
  std::vector<float> red;  ///< 2B: the sums, then the label terms (one buffer to reduce)
  void Resize(int64_t batch) {
    mx.resize(batch);
    red.resize(2 * batch);
  }
};

/// exp(x) for x <= 0 (x = -inf gives ~1e-38, not 0; NaN stays NaN) to about 2e-7 relative,
/// in plain arithmetic so that loops over it vectorise (with -fno-trapping-math, which lets
/// floorf vectorise): exp(x) = 2^n exp(r), |r| <= ln2/2, with a degree-6 Taylor polynomial
/// for exp(r).
inline float ExpNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693145751953125f) - n * 1.42860676533018e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/// The phases of `phases` on the host (the CPU backend's implementation).
void SoftmaxOnHost(const BatchRows& z, const BatchLabels& labels, unsigned phases, SoftmaxStats* st,
                   BatchRows* delta, OutputLoss loss = OutputLoss::kSoftmax);

/// The kSoftmaxDelta phase on the host from the normaliser `st` (SoftmaxOnHost's sums phase
/// left exp(z - mx), or sigmoid(z) under one-vs-rest, in `delta`).
void SoftmaxDeltaOnHost(const BatchRows& z, const BatchLabels& labels, const SoftmaxStats& st,
                        BatchRows* delta, OutputLoss loss = OutputLoss::kSoftmax);

/// The mean loss over the labelled samples, from reduced statistics.
double SoftmaxMeanLoss(const SoftmaxStats& st, const BatchLabels& labels,
                       OutputLoss loss = OutputLoss::kSoftmax);

/// One labelled sample's loss from its reduced statistics: log(red) - lab / k (softmax) or
/// red - lab (one-vs-rest).
inline double SampleLoss(OutputLoss loss, double red, double lab, int64_t k) {
  return loss == OutputLoss::kOneVsRest ? red - lab : std::log(red) - lab / static_cast<double>(k);
}

/// softplus(z) = log(1 + exp(z)) for a float z to about 1e-7 relative, in plain arithmetic so
/// that loops vectorise: max(z, 0) + log1p(t), t = exp(-|z|) in (0, 1], and log1p(t) =
/// 2 atanh(u), u = t / (2 + t) <= 1/3, by its series to u^13.
inline float SoftplusFast(float z) {
  const float t = ExpNonPositive(-std::fabs(z));
  const float u = t / (2.0f + t), u2 = u * u;
  float p = 1.0f / 13.0f;
  p = p * u2 + 1.0f / 11.0f;
  p = p * u2 + 1.0f / 9.0f;
  p = p * u2 + 1.0f / 7.0f;
  p = p * u2 + 1.0f / 5.0f;
  p = p * u2 + 1.0f / 3.0f;
  p = p * u2 + 1.0f;
  return (z > 0.0f ? z : 0.0f) + 2.0f * u * p;
}

/// sigmoid(z) for a float z, in plain arithmetic (ExpNonPositive) so that loops vectorise.
inline float SigmoidFast(float z) {
  const float e = ExpNonPositive(-std::fabs(z));
  return z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

}  // namespace dslide
