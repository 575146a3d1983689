#include "model/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/parallel.h"

namespace dslide {

namespace {

/// The slots j < n of a row with neuron ids `id` that hold one of the k labels `lb`
/// (sorted), ascending. A few labels: a vectorised scan of the row per label; many (a point
/// may carry hundreds of thousands): a binary search among the labels per slot, n log k
/// where the scans would take n k. Both give the same slots.
void LabelSlots(const int32_t* id, int64_t n, const int32_t* lb, int64_t k,
                std::vector<int64_t>* out) {
  out->clear();
  constexpr int64_t kBlock = 64;
  // A row of consecutive ids (every neuron of a dense layer's shard): label l sits at slot
  // l - id[0]. Checked a block at a time, so that a sampled row stops at its first block.
  bool consecutive = n > 0;
  for (int64_t j0 = 0; consecutive && j0 < n; j0 += kBlock) {
    const int64_t j1 = std::min(n, j0 + kBlock);
    int off = 0;
    for (int64_t j = j0; j < j1; ++j) off |= id[j] != id[0] + static_cast<int32_t>(j);
    consecutive = off == 0;
  }
  if (consecutive) {
    for (int64_t t = 0; t < k; ++t) {
      if (t > 0 && lb[t] == lb[t - 1]) continue;
      if (lb[t] >= id[0] && lb[t] - id[0] < n) out->push_back(lb[t] - id[0]);
    }
    return;  // ascending already: the labels are sorted
  }
  // Above this many labels a search per slot costs less than a scan per label.
  constexpr int64_t kScanLabels = 64;
  if (k > kScanLabels) {
    for (int64_t j = 0; j < n; ++j)
      if (std::binary_search(lb, lb + k, id[j])) out->push_back(j);
    return;  // ascending: slots in order
  }
  for (int64_t t = 0; t < k; ++t) {
    if (t > 0 && lb[t] == lb[t - 1]) continue;
    const int32_t l = lb[t];
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
      const int64_t j1 = std::min(n, j0 + kBlock);
      int hit = 0;
      for (int64_t j = j0; j < j1; ++j) hit |= id[j] == l;
      if (!hit) continue;
      for (int64_t j = j0; j < j1; ++j)
        if (id[j] == l) out->push_back(j);
    }
  }
  std::sort(out->begin(), out->end());
}

}  // namespace

void SoftmaxOnHost(const BatchRows& z, const BatchLabels& labels, unsigned phases, SoftmaxStats* st,
                   BatchRows* delta, OutputLoss loss) {
  const bool ovr = loss == OutputLoss::kOneVsRest;
  const int64_t B = z.samples();
  st->Resize(B);
  float* mx = st->mx.data();
  float* red = st->red.data();
  if ((phases & kSoftmaxMax) && ovr) std::fill_n(mx, B, 0.0f);
  if ((phases & kSoftmaxMax) && !ovr) {
    ParallelFor(B, 8, [&](int64_t i) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < z.n[i]; ++j) m = std::max(m, z.vals[z.off[i] + j]);
      mx[i] = m;
    });
  }
  if (phases & kSoftmaxSums) {
    // delta keeps exp(z - mx) for the delta phase: z's layout and ids, values zeroed
    // (LikeZero and a copy of the ids, in parallel blocks).
    delta->off = z.off;
    delta->n = z.n;
    delta->dense = z.dense;
    delta->width = z.width;
    delta->ids.resize(z.ids.size());
    delta->vals.resize(z.vals.size());
    constexpr int64_t kBlock = int64_t{1} << 16;
    const int64_t ni = static_cast<int64_t>(z.ids.size());
    const int64_t nv = static_cast<int64_t>(z.vals.size());
    ParallelFor((std::max(ni, nv) + kBlock - 1) / kBlock, [&](int64_t blk) {
      const int64_t j0 = blk * kBlock;
      if (j0 < ni)
        std::copy_n(z.ids.data() + j0, std::min(kBlock, ni - j0), delta->ids.data() + j0);
      if (j0 < nv) std::fill_n(delta->vals.data() + j0, std::min(kBlock, nv - j0), 0.0f);
    });
    ParallelFor(B, 8, [&](int64_t i) {
      double sum = 0, lab = 0;
      const int32_t* lb = labels.Of(i);
      const int64_t k = labels.Count(i);
      const float* v = z.vals.data() + z.off[i];
      const int32_t* id = z.ids.data() + z.off[i];
      float* e = delta->vals.data() + z.off[i];
      const float m = mx[i];
      const int64_t n = z.n[i];
      if (ovr) {
        // sigmoid(z) for the delta phase; the loss's sum of softplus(z).
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) e[j] = SigmoidFast(v[j]);
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < n; ++j) sum += SoftplusFast(v[j]);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) e[j] = ExpNonPositive(v[j] - m);
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < n; ++j) sum += e[j];
      }
      thread_local std::vector<int64_t> slots;
      LabelSlots(id, z.n[i], lb, k, &slots);
      for (int64_t j : slots) lab += v[j] - mx[i];
      red[i] = static_cast<float>(sum);
      red[B + i] = static_cast<float>(lab);
    });
  }
  if (phases & kSoftmaxDelta) SoftmaxDeltaOnHost(z, labels, *st, delta, loss);
}

void SoftmaxDeltaOnHost(const BatchRows& z, const BatchLabels& labels, const SoftmaxStats& st,
                        BatchRows* delta, OutputLoss loss) {
  const bool ovr = loss == OutputLoss::kOneVsRest;
  const int64_t B = z.samples();
  const float* red = st.red.data();
  DSLIDE_CHECK(delta->vals.size() == z.vals.size() && delta->n == z.n,
               "softmax: the delta phase needs the rows the sums phase wrote");
  const float inv_b = 1.0f / static_cast<float>(B);
  ParallelFor(B, 8, [&](int64_t i) {
    const int64_t k = labels.Count(i);
    float* e = delta->vals.data() + z.off[i];
    if (k == 0) {  // no labels: no loss and no gradient
      std::fill(e, e + z.n[i], 0.0f);
      return;
    }
    const int32_t* lb = labels.Of(i);
    const int32_t* id = z.ids.data() + z.off[i];
    // softmax: exp(z - mx) / sum - 1 / k at the labels; one-vs-rest: sigmoid(z) - 1 there.
    const float scale = ovr ? inv_b : inv_b / red[i],
                t = ovr ? inv_b : inv_b / static_cast<float>(k);
    for (int64_t j = 0; j < z.n[i]; ++j) e[j] *= scale;
    thread_local std::vector<int64_t> slots;
    LabelSlots(id, z.n[i], lb, k, &slots);
    for (int64_t j : slots) e[j] -= t;
  });
}

double SoftmaxMeanLoss(const SoftmaxStats& st, const BatchLabels& labels, OutputLoss kind) {
  const int64_t B = static_cast<int64_t>(st.mx.size());
  double loss = 0;
  int64_t labelled = 0;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t k = labels.Count(i);
    if (k == 0) continue;
    ++labelled;
    loss += SampleLoss(kind, st.red[i], st.red[B + i], k);
  }
  return labelled ? loss / labelled : 0.0;
}

}  // namespace dslide
