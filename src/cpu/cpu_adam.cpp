// The CPU backend's Adam steps: lazy (the rows a batch touched) or dense, on fp32 or bfloat16
// moments.
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>

#include "common/parallel.h"
#include "cpu/cpu_layer.h"
#include "model/adam.h"

namespace dslide::cpu {

void CpuBackend::ApplyRow(Layer& L, int64_t r, int64_t q, const AdamStep& step) {
  ThreadScratch& ts = *scratch_[ThreadId()];
  ts.grad.resize(L.cols);
  float gb = 0.0f;
  if (q >= 0) {
    GradientRow(L, q, ts.grad.data(), &gb);
  } else {
    std::fill(ts.grad.begin(), ts.grad.end(), 0.0f);
  }
  const size_t o = static_cast<size_t>(r) * L.cols;
  AdamRow(L, step, o, L.cols, ts.grad.data());
  AdamBias(L, step, r, &gb);
}

void CpuBackend::Update(int layer, const AdamStep& step, bool dense) {
  Layer& L = *layers_[layer];
  if (L.indexed) {
    UpdateIndexed(L, step, dense);
    return;
  }
  ParallelFor(L.rows, 256, [&](int64_t r) {
    if (!dense && !L.touched[r]) return;
    const size_t o = static_cast<size_t>(r) * L.cols;
    AdamRow(L, step, o, L.cols, L.g.data() + o);
    L.touched[r] = 0;
  });
  for (int64_t i = 0; i < L.spec.local(); ++i) {
    if (!dense && !L.btouched[i]) continue;
    AdamBias(L, step, i, &L.gb[i]);
    L.btouched[i] = 0;
  }
}

void CpuBackend::UpdateIndexed(Layer& L, const AdamStep& step, bool dense) {
  if (L.batch.dense_pending) {
    ApplyGradient(L, L.batch.dense_g.data(), L.batch.dense_gb.data(), step);
    L.batch.pending = L.batch.dense_pending = false;
    return;
  }
  if (!dense) {
    if (L.batch.pending) TouchedRows(L, nullptr, nullptr, &step);
  } else {
    ParallelFor(L.spec.local(), 256, [&](int64_t r) {
      int64_t q = -1;
      if (L.batch.pending) {
        auto it = std::lower_bound(L.batch.grad_rows.begin(), L.batch.grad_rows.end(),
                                   static_cast<int32_t>(r));
        if (it != L.batch.grad_rows.end() && *it == r) q = it - L.batch.grad_rows.begin();
      }
      ApplyRow(L, r, q, step);
    });
  }
  L.batch.pending = false;
}

void CpuBackend::AdamRow(Layer& L, const AdamStep& layer_step, size_t o, int64_t n, float* g) {
  AdamStep step = layer_step;
  step.lr = layer_step.WeightLr(L.index == 0);
  int64_t& last = L.row_step[o / L.cols];
  const AdamCatchUp c = AdamCatchUp::Since(step, last, L.index == 0);
  last = step.t;
  const bool ok = L.bf16
                      ? AdamUpdateBf16(step, n, L.w.data() + o, g, L.m16.data() + o,
                                       L.v16.data() + o, o, static_cast<uint32_t>(L.index), c)
                      : AdamUpdate(step, n, L.w.data() + o, g, L.m.data() + o, L.v.data() + o, c);
  if (!ok) L.nonfinite.store(true, std::memory_order_relaxed);
  if (!L.moved.empty()) L.moved[o / L.cols] = 1;  // a row per neuron: its buckets may change
}

void CpuBackend::AdamBias(Layer& L, const AdamStep& step, int64_t c, float* g) {
  const AdamCatchUp up = AdamCatchUp::Since(step, L.bias_step[c], L.index == 0);
  L.bias_step[c] = step.t;
  // Bias c's noise stream follows the weights' (positions past rows x cols).
  const bool ok = L.bf16 ? AdamUpdateBf16(step, 1, &L.b[c], g, &L.mb16[c], &L.vb16[c],
                                          static_cast<uint64_t>(L.rows * L.cols + c),
                                          static_cast<uint32_t>(L.index), up)
                         : AdamUpdate(step, 1, &L.b[c], g, &L.mb[c], &L.vb[c], up);
  if (!ok) L.nonfinite.store(true, std::memory_order_relaxed);
  if (!L.moved.empty()) L.moved[c] = 1;
}

}  // namespace dslide::cpu
