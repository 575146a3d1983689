// The CPU backend's steps of layers with every neuron active: row blocks of a dense layer
// (DenseRows) and the input-major first layer (InputMajorStep).
#include "cpu/cpu_backend.h"

#include <algorithm>

#include "common/error.h"
#include "common/parallel.h"
#include "cpu/cpu_layer.h"
#include "cpu/cpu_tuning.h"
#include "cpu/kernels/row_gradients.h"
#include "cpu/kernels/simd.h"

namespace dslide::cpu {

void CpuBackend::DenseRows(Layer& L, const BatchRows& in, const BatchRows& delta,
                           BatchRows* in_grad, const AdamStep* step) {
  // Every neuron active: walk row blocks; each row gathers its deltas over the batch (a
  // cache line per sample for the block), forms its gradient, adds its input-gradient
  // share from the old weights, then takes its Adam step (with `step`; a row whose deltas
  // are all zero is not touched and does not step, as in the indexed path) or keeps the
  // gradient in dense_g (without).
  DSLIDE_ASSERT(!L.batch.pending, "Backward called twice on a layer without an Update between");
  if (step == nullptr) {
    L.batch.dense_g.resize(static_cast<size_t>(L.rows) * L.cols);
    L.batch.dense_gb.resize(L.spec.local());
    L.batch.pending = L.batch.dense_pending = true;
  }
  const int64_t B = in.samples();
  if (in_grad) ClearInputGrads(in_grad->vals.size());
  constexpr int64_t kRows = CpuTuning::kDenseRows;
  const int64_t n = L.spec.local();
  // Over dense inputs of the full width (a multiple of the vector width), with an input
  // gradient: each row in registers over its non-zero deltas (RowEntriesGradients), the
  // same operations in the same order.
  const bool in_registers = in_grad != nullptr && L.cols % kLanesN == 0 && in.FullRows(L.cols);
  ParallelFor((n + kRows - 1) / kRows, [&](int64_t blk) {
    ThreadScratch& ts = *scratch_[ThreadId()];
    const int64_t r0 = blk * kRows, r1 = std::min(n, r0 + kRows);
    constexpr int kR = CpuTuning::kRowsAtOnce;
    ts.grad.resize(kR * L.cols);
    for (int64_t r = r0; r < r1; ++r) {
      // kR rows whose non-zero deltas are the same samples (a softmax's rows, but for samples
      // without labels, whose deltas are all zero) go together: gradients, then the steps.
      if (in_registers && r + kR <= r1 && DenseRowsAtOnce(L, r, in, delta, step, &ts)) {
        r += kR - 1;
        continue;
      }
      float* g = step ? ts.grad.data() : L.batch.dense_g.data() + static_cast<size_t>(r) * L.cols;
      float gb = 0.0f;
      float* wr = L.Row(r);
      int64_t touched = 0;  // samples with a non-zero delta for the row
      if (in_registers) {
        ts.qids.clear();
        ts.qvals.clear();
        for (int64_t i = 0; i < B; ++i) {
          const float dk = delta.vals[delta.off[i] + r];
          if (dk == 0.0f) continue;
          ts.qids.push_back(static_cast<int32_t>(i));
          ts.qvals.push_back(dk);
        }
        touched = static_cast<int64_t>(ts.qids.size());
        if (touched == 0 && step) continue;
        RowEntriesGradients(wr, ts.qids.data(), ts.qvals.data(), touched, L.cols, in, ts.gin.data(),
                            g, &gb);
      } else {
        std::fill(g, g + L.cols, 0.0f);
        for (int64_t i = 0; i < B; ++i) {
          const float dk = delta.vals[delta.off[i] + r];
          if (dk == 0.0f) continue;
          const SparseView x = in.Row(i);
          ++touched;
          gb += dk;
          Axpy(dk, x.vals, g, x.n);
          if (in_grad) Axpy(dk, wr, ts.gin.data() + in.off[i], x.n);
        }
      }
      if (step == nullptr) {
        L.batch.dense_gb[r] = gb;
        continue;
      }
      if (touched == 0) continue;  // lazy Adam: only the rows the batch touched step
      const size_t o = static_cast<size_t>(r) * L.cols;
      AdamRow(L, *step, o, L.cols, g);
      AdamBias(L, *step, r, &gb);
    }
  });
  if (in_grad) AddInputGrads(in_grad);
}

bool CpuBackend::DenseRowsAtOnce(Layer& L, int64_t r, const BatchRows& in, const BatchRows& delta,
                                 const AdamStep* step, ThreadScratch* scratch) {
  // Rows r .. r + kR - 1, when each sample's deltas for them are all non-zero or all zero:
  // their gradients in one pass, then their steps (or their gradients kept pending).
  ThreadScratch& ts = *scratch;
  constexpr int kR = CpuTuning::kRowsAtOnce;
  const int64_t B = in.samples();
  ts.qids.clear();
  ts.qvals.clear();
  for (int64_t i = 0; i < B; ++i) {
    const float* d = delta.vals.data() + delta.off[i] + r;
    int nz = 0;
    for (int k = 0; k < kR; ++k) nz += d[k] != 0.0f;
    if (nz == 0) continue;
    if (nz != kR) return false;
    ts.qids.push_back(static_cast<int32_t>(i));
  }
  const int64_t count = static_cast<int64_t>(ts.qids.size());
  if (count == 0 && step) return true;  // no row touched: lazy Adam leaves them
  ts.qvals.resize(kR * count);
  const float* dk[kR];
  const float* wr[kR];
  float* g[kR];
  float gb[kR];
  for (int k = 0; k < kR; ++k) {
    float* d = ts.qvals.data() + k * count;
    for (int64_t e = 0; e < count; ++e) d[e] = delta.vals[delta.off[ts.qids[e]] + r + k];
    dk[k] = d;
    wr[k] = L.Row(r + k);
    g[k] = step ? ts.grad.data() + k * L.cols
                : L.batch.dense_g.data() + static_cast<size_t>(r + k) * L.cols;
  }
  RowsEntriesGradients(wr, ts.qids.data(), dk, count, L.cols, in, ts.gin.data(), g, gb);
  for (int k = 0; k < kR; ++k) {
    if (step == nullptr) {
      L.batch.dense_gb[r + k] = gb[k];
      continue;
    }
    AdamRow(L, *step, static_cast<size_t>(r + k) * L.cols, L.cols, g[k]);
    AdamBias(L, *step, r + k, &gb[k]);
  }
  return true;
}

void CpuBackend::InputMajorStep(Layer& L, const BatchRows& in, const BatchRows& delta,
                                const AdamStep& step) {
  // The batch's (feature, sample) entries indexed by feature (features ascending, each
  // feature's entries by sample), then one pass over the features: each row's gradient
  // sum_i x_if delta_i in sample order in a scratch row (the operations and order of the
  // HOGWILD accumulation on one thread, so the same bits), then its Adam step. Gradient
  // rows are neither written, re-read nor zeroed, and two threads do not race on them.
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  if (B == 0) return;
  Layer::ActiveIndex& f = L.batch.by_feature;
  f.Build(in, 0, L.rows);
  const int64_t nf = static_cast<int64_t>(f.rows.size());
  const int64_t local = s.local();
  constexpr int64_t kChunk = CpuTuning::kInputMajorChunk;
  ParallelFor((nf + kChunk - 1) / kChunk, [&](int64_t c) {
    ThreadScratch& ts = *scratch_[ThreadId()];
    ts.grad.assign(L.cols, 0.0f);  // AdamUpdate leaves it zero again
    const int64_t k0 = c * kChunk, k1 = std::min(nf, k0 + kChunk);
    for (int64_t k = k0; k < k1; ++k) {
      float* g = ts.grad.data();
      for (int64_t e = f.off[k]; e < f.off[k + 1]; ++e) {
        const int32_t i = f.entry[e].sample;
        const SparseView d = delta.Row(i);
        Axpy(in.vals[in.off[i] + f.entry[e].slot], d.vals, g, d.n);
      }
      AdamRow(L, step, static_cast<size_t>(f.rows[k]) * L.cols, L.cols, g);
    }
  });
  // The bias: its gradient summed over the samples in order, then its step.
  for (int64_t i = 0; i < B; ++i) {
    const SparseView d = delta.Row(i);
    DSLIDE_ASSERT(d.n == local, "an input-major layer with every neuron active");
    for (int64_t k = 0; k < d.n; ++k) L.gb[d.ids[k] - s.begin] += d.vals[k];
  }
  for (int64_t k = 0; k < local; ++k) AdamBias(L, step, k, &L.gb[k]);
}

}  // namespace dslide::cpu
