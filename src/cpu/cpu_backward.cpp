// The CPU backend's backward pass of row-per-neuron layers: the touched rows walked once
// (input gradient, weight gradient, Adam), and the pending gradient of an exchange.
#include "cpu/cpu_backend.h"

#include <algorithm>

#include "common/error.h"
#include "common/parallel.h"
#include "cpu/cpu_layer.h"
#include "cpu/cpu_tuning.h"
#include "cpu/kernels/row_gradients.h"
#include "cpu/kernels/simd.h"

namespace dslide::cpu {

void CpuBackend::BackwardRows(int layer, const BatchRows& in, const BatchRows& delta,
                              BatchRows* in_grad) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  DSLIDE_ASSERT(!(s.input_major && in_grad != nullptr), "the first layer has no input gradient");
  if (L.indexed && s.dense() && in.dense) {
    DenseRows(L, in, delta, in_grad, nullptr);
    return;
  }
  if (L.indexed) {
    IndexBatch(L, in, delta);
    // Input gradient: each touched row is read once and scattered into a private
    // per-thread buffer aligned with `in`; the buffers are summed afterwards.
    if (in_grad != nullptr) TouchedRows(L, &in, in_grad, nullptr);
    return;
  }
  if (L.g.empty()) L.g.assign(static_cast<size_t>(L.rows) * L.cols, 0.0f);
  // The input-major first layer: HOGWILD over samples into the gradient rows of the
  // sample's features.
  const bool all = s.dense();
  ParallelFor(B, 4, [&](int64_t i) {
    const SparseView x = in.Row(i);
    const SparseView d = delta.Row(i);
    for (int64_t k = 0; k < d.n; ++k) {
      const int64_t c = d.ids[k] - s.begin;
      L.gb[c] += d.vals[k];
      L.btouched[c] = 1;
    }
    for (int64_t e = 0; e < x.n; ++e) {
      const int64_t f = x.ids[e];
      L.touched[f] = 1;
      float* gr = L.GRow(f);
      if (all) {
        Axpy(x.vals[e], d.vals, gr, d.n);
      } else {
        for (int64_t k = 0; k < d.n; ++k) gr[d.ids[k] - s.begin] += x.vals[e] * d.vals[k];
      }
    }
  });
}

void CpuBackend::InputGradRow(const Layer& L, int64_t q, const BatchRows& in, float* buf) const {
  const float* wr = L.Row(L.batch.grad_rows[q]);
  for (int64_t e = L.batch.grad_off[q]; e < L.batch.grad_off[q + 1]; ++e) {
    const int64_t i = L.batch.ent_sample[e];
    const float dk = L.batch.ent_delta[e];
    const SparseView x = in.Row(i);
    float* gin = buf + in.off[i];
    if (in.dense) {
      Axpy(dk, wr, gin, x.n);
    } else {
      for (int64_t j = 0; j < x.n; ++j) gin[j] += dk * wr[x.ids[j]];
    }
  }
}

void CpuBackend::RowGradients(const Layer& L, int64_t q, const BatchRows& x, float* buf, float* g,
                              float* gb) const {
  const int64_t e0 = L.batch.grad_off[q], count = L.batch.grad_off[q + 1] - e0;
  RowEntriesGradients(L.Row(L.batch.grad_rows[q]), L.batch.ent_sample.data() + e0,
                      L.batch.ent_delta.data() + e0, count, L.cols, x, buf, g, gb);
}

void CpuBackend::RowsGradients(const Layer& L, const int64_t* q, const BatchRows& x, float* buf,
                               float* const* g, float* gb) const {
  constexpr int kR = CpuTuning::kRowsAtOnce;
  const int64_t e0 = L.batch.grad_off[q[0]], count = L.batch.grad_off[q[0] + 1] - e0;
  const float* delta[kR];
  const float* wr[kR];
  for (int k = 0; k < kR; ++k) {
    delta[k] = L.batch.ent_delta.data() + L.batch.grad_off[q[k]];
    wr[k] = L.Row(L.batch.grad_rows[q[k]]);
  }
  RowsEntriesGradients(wr, L.batch.ent_sample.data() + e0, delta, count, L.cols, x, buf, g, gb);
}

void CpuBackend::ClearInputGrads(size_t width) {
  for (auto& ts : scratch_) ts->gin.assign(width, 0.0f);
}

void CpuBackend::AddInputGrads(BatchRows* in_grad) const {
  ParallelFor(static_cast<int64_t>(in_grad->vals.size()), 4096, [&](int64_t j) {
    float acc = 0.0f;
    for (const auto& ts : scratch_) acc += ts->gin[j];
    in_grad->vals[j] += acc;
  });
}

void CpuBackend::TouchedRows(Layer& L, const BatchRows* in, BatchRows* in_grad,
                             const AdamStep* step) {
  if (in_grad) ClearInputGrads(in_grad->vals.size());
  const int64_t nrows = static_cast<int64_t>(L.batch.grad_rows.size());
  // Both gradients and the step over dense inputs: one pass over each row's entries.
  const bool fused = in_grad && step && in->dense && L.cols % 16 == 0;
  const int64_t batch = in ? in->samples() : 0;
  constexpr int64_t kChunk = CpuTuning::kTouchedChunk;
  ParallelFor((nrows + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t q0 = c * kChunk, q1 = std::min(nrows, q0 + kChunk);
    float* buf = in_grad ? scratch_[ThreadId()]->gin.data() : nullptr;
    // Rows with an entry of every sample (the same samples, in order) wait in `fq` and go
    // four at a time: their gradients in one pass, then their steps.
    int64_t fq[4];
    int nf = 0;
    auto full_rows = [&] {
      ThreadScratch& ts = *scratch_[ThreadId()];
      ts.grad.resize(4 * L.cols);
      float* g[4];
      float gb[4];
      for (int k = 0; k < 4; ++k) g[k] = ts.grad.data() + k * L.cols;
      RowsGradients(L, fq, *in, buf, g, gb);
      for (int k = 0; k < 4; ++k) {
        AdamRow(L, *step, static_cast<size_t>(L.batch.grad_rows[fq[k]]) * L.cols, L.cols, g[k]);
        AdamBias(L, *step, L.batch.grad_rows[fq[k]], &gb[k]);
      }
      nf = 0;
    };
    auto fused_row = [&](int64_t q) {
      ThreadScratch& ts = *scratch_[ThreadId()];
      ts.grad.resize(L.cols);
      float gb;
      RowGradients(L, q, *in, buf, ts.grad.data(), &gb);
      AdamRow(L, *step, static_cast<size_t>(L.batch.grad_rows[q]) * L.cols, L.cols, ts.grad.data());
      AdamBias(L, *step, L.batch.grad_rows[q], &gb);
    };
    for (int64_t q = q0; q < q1; ++q) {
      if (q + CpuTuning::kPrefetchFar < q1) {
        const size_t o =
            static_cast<size_t>(L.batch.grad_rows[q + CpuTuning::kPrefetchFar]) * L.cols;
        PrefetchToL2(L.w.data() + o, L.cols * sizeof(float));
        if (step && L.bf16) {
          PrefetchToL2(L.m16.data() + o, L.cols * sizeof(uint16_t));
          PrefetchToL2(L.v16.data() + o, L.cols * sizeof(uint16_t));
        } else if (step) {
          PrefetchToL2(L.m.data() + o, L.cols * sizeof(float));
          PrefetchToL2(L.v.data() + o, L.cols * sizeof(float));
        }
      }
      if (q + CpuTuning::kPrefetchNear < q1) {
        const size_t o =
            static_cast<size_t>(L.batch.grad_rows[q + CpuTuning::kPrefetchNear]) * L.cols;
        PrefetchRow(L.w.data() + o, L.cols);
        const int32_t r = L.batch.grad_rows[q + CpuTuning::kPrefetchNear];
        if (step && L.bf16) {
          PrefetchLines<3>(L.m16.data() + o, L.cols * sizeof(uint16_t));
          PrefetchLines<3>(L.v16.data() + o, L.cols * sizeof(uint16_t));
          __builtin_prefetch(&L.mb16[r]);
          __builtin_prefetch(&L.vb16[r]);
        } else if (step) {
          PrefetchRow(L.m.data() + o, L.cols);
          PrefetchRow(L.v.data() + o, L.cols);
          __builtin_prefetch(&L.mb[r]);
          __builtin_prefetch(&L.vb[r]);
        }
        if (step) __builtin_prefetch(&L.b[r]);
      }
      if (fused && L.batch.grad_off[q + 1] - L.batch.grad_off[q] == batch) {
        fq[nf++] = q;
        if (nf == 4) full_rows();
      } else if (fused) {
        fused_row(q);
      } else {
        if (buf) InputGradRow(L, q, *in, buf);  // before the row changes
        if (step) ApplyRow(L, L.batch.grad_rows[q], q, *step);
      }
    }
    for (int k = 0; k < nf; ++k) fused_row(fq[k]);
  });
  if (in_grad) AddInputGrads(in_grad);
}

void CpuBackend::BackwardUpdate(int layer, const BatchRows& in, const BatchRows& delta,
                                BatchRows* in_grad, const AdamStep& step, bool dense) {
  Layer& L = *layers_[layer];
  if (!L.indexed && !dense && in_grad == nullptr && L.spec.dense()) {
    InputMajorStep(L, in, delta, step);
    return;
  }
  if (!L.indexed || dense) {
    BackwardRows(layer, in, delta, in_grad);
    Update(layer, step, dense);
    return;
  }
  if (L.spec.dense() && in.dense) {
    DenseRows(L, in, delta, in_grad, &step);
    return;
  }
  // One pass over the touched rows: the input gradient from the old row, then Adam.
  IndexBatch(L, in, delta);
  TouchedRows(L, &in, in_grad, &step);
  L.batch.pending = false;
}

/// The pending gradient of local neuron grad_rows[q] into g (cols floats) and its bias
/// gradient into *gb.
void CpuBackend::GradientRow(const Layer& L, int64_t q, float* g, float* gb) const {
  std::fill(g, g + L.cols, 0.0f);
  float sb = 0.0f;
  for (int64_t e = L.batch.grad_off[q]; e < L.batch.grad_off[q + 1]; ++e) {
    const float dk = L.batch.ent_delta[e];
    const SparseView x = L.batch.saved_in.Row(L.batch.ent_sample[e]);
    sb += dk;
    if (L.batch.saved_in.dense) {
      Axpy(dk, x.vals, g, x.n);
    } else {
      for (int64_t j = 0; j < x.n; ++j) g[x.ids[j]] += dk * x.vals[j];
    }
  }
  *gb = sb;
}

}  // namespace dslide::cpu
