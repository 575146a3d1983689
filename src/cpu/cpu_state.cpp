// The CPU backend's layer state in and out: checkpoints and export (SaveLayer, LoadLayer),
// the pending gradient for data parallelism (ExportGradient, ApplyGradient) and what it holds
// (Info).
#include <algorithm>

#include "common/error.h"
#include "common/parallel.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_layer.h"

namespace dslide::cpu {

BackendCapabilities CpuBackend::Capabilities() const {
  BackendCapabilities c;
  c.name = "cpu";
  return c;  // synchronous, host views for the exchange, collectives on host memory
}

RowExchange& CpuBackend::InPlaceExchange() {
  DSLIDE_ASSERT(false, "the CPU backend has no RowExchange: its rows are host views");
}

BackendInfo CpuBackend::Info() const {
  BackendInfo info;
  for (const auto& L : layers_) {
    size_t& bytes = info.state_bytes;
    bytes += (L->w.size() + L->g.size() + L->m.size() + L->v.size()) * sizeof(float);
    bytes += (L->m16.size() + L->v16.size() + L->mb16.size() + L->vb16.size()) * sizeof(uint16_t);
    bytes += (L->b.size() + L->gb.size() + L->mb.size() + L->vb.size()) * sizeof(float);
    bytes += L->touched.size() + L->btouched.size() + L->moved.size();
    bytes += (L->row_step.size() + L->bias_step.size()) * sizeof(int64_t);
    for (const auto* a : {&L->batch.active, &L->batch.by_feature}) {
      for (const auto& c : a->count) bytes += c.size() * sizeof(int32_t);
      for (const auto& m : a->mark) bytes += m.size() * sizeof(uint64_t);
    }
    bytes += (L->batch.dense_g.size() + L->batch.dense_gb.size()) * sizeof(float);
    bytes += L->tables.MemoryBytes();
  }
  return info;
}

void CpuBackend::SaveLayer(int layer, unsigned parts, LayerState* st) const {
  const Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  DSLIDE_ASSERT(!(parts & (kMoments | kTables)) || !L.batch.pending,
                "checkpoint with a pending gradient");
  if (parts & kWeights) {
    L.ToRows(L.w, &st->w);
    st->b = L.b;
  }
  if (parts & kMoments) {
    if (L.bf16) {  // stored as floats (exact), so that any run can load them
      std::vector<float> f;
      FromBf16(L.m16, &f);
      L.ToRows(f, &st->m);
      FromBf16(L.v16, &f);
      L.ToRows(f, &st->v);
    } else {
      L.ToRows(L.m, &st->m);
      L.ToRows(L.v, &st->v);
    }
    if (L.bf16) {
      FromBf16(L.mb16, &st->mb);
      FromBf16(L.vb16, &st->vb);
    } else {
      st->mb = L.mb;
      st->vb = L.vb;
    }
    st->row_step = L.row_step;
    st->bias_step = L.bias_step;
  }
  if (parts & kTables) {
    st->tables_plan = L.plan;
    st->table_offsets.clear();
    st->table_ids.clear();
    st->table_sizes.clear();
    if (!s.dense()) L.tables.Export(&st->table_offsets, &st->table_ids, &st->table_sizes);
  }
  if (parts & kGradient) GradientAsRows(layer, &st->gw, &st->gb);
}

void CpuBackend::LoadLayer(int layer, unsigned parts, const LayerState& st) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  DSLIDE_ASSERT(!(parts & kGradient), "a pending gradient is not loaded");
  CheckLayerState(s, layer, st, parts);
  if (parts & kWeights) {
    L.FromRows(st.w, &L.w);
    L.b = st.b;
    L.buckets_of = 0;  // the next rebuild hashes every neuron
  }
  if (parts & kMoments) {
    if (L.bf16) {
      std::vector<float> f;
      L.FromRows(st.m, &f);
      ToBf16(f, &L.m16);
      L.FromRows(st.v, &f);
      ToBf16(f, &L.v16);
    } else {
      L.FromRows(st.m, &L.m);
      L.FromRows(st.v, &L.v);
    }
    if (L.bf16) {
      ToBf16(st.mb, &L.mb16);
      ToBf16(st.vb, &L.vb16);
    } else {
      L.mb = st.mb;
      L.vb = st.vb;
    }
    LoadLastSteps(st.row_step, &L.row_step);
    LoadLastSteps(st.bias_step, &L.bias_step);
  }
  if (!(parts & kTables) || s.dense()) return;
  if (st.table_sizes.empty()) {  // none until the caller's RebuildTables
    L.hash.reset();
    L.plan = RebuildPlan{};
    return;
  }
  L.plan = st.tables_plan;
  MakeHash(layer);
  L.tables.Import(st.table_offsets, st.table_ids, st.table_sizes, s.local());
}

void CpuBackend::GradientAsRows(int layer, std::vector<float>* gw, std::vector<float>* gb) const {
  const Layer& L = *layers_[layer];
  if (!L.indexed) {
    if (L.g.empty())  // never pending yet: zero
      gw->assign(static_cast<size_t>(L.rows) * L.cols, 0.0f);
    else
      L.ToRows(L.g, gw);
    *gb = L.gb;
    return;
  }
  // Row-per-neuron storage: the exported gradient is already in the rows' layout.
  std::vector<float> flat(GradientSize(layer));
  ExportGradient(layer, flat.data(), 1.0f);
  const size_t nw = flat.size() - L.spec.local();
  gw->assign(flat.begin(), flat.begin() + nw);
  gb->assign(flat.begin() + nw, flat.end());
}

int64_t CpuBackend::GradientSize(int layer) const {
  const Layer& L = *layers_[layer];
  return static_cast<int64_t>(L.rows) * L.cols + L.spec.local();
}

float* CpuBackend::ExchangeBuffer(int64_t n, bool zero) {
  return HostExchangeBuffer(&exchange_, n, zero);
}

void CpuBackend::ExportGradient(int layer, float* out, float scale) const {
  const Layer& L = *layers_[layer];
  const size_t nw = static_cast<size_t>(L.rows) * L.cols;
  const int64_t size = GradientSize(layer);
  float* ob = out + nw;
  if (!L.indexed) {
    if (L.g.empty())  // never pending yet: zero
      std::fill(out, ob, 0.0f);
    else
      std::copy(L.g.begin(), L.g.end(), out);
    std::copy(L.gb.begin(), L.gb.end(), ob);
  } else if (L.batch.dense_pending) {
    std::copy(L.batch.dense_g.begin(), L.batch.dense_g.end(), out);
    std::copy(L.batch.dense_gb.begin(), L.batch.dense_gb.end(), ob);
  } else {
    std::fill(out, out + size, 0.0f);
    if (!L.batch.pending) return;
    ParallelFor(static_cast<int64_t>(L.batch.grad_rows.size()), 64, [&](int64_t q) {
      const int64_t r = L.batch.grad_rows[q];
      GradientRow(L, q, out + r * L.cols, ob + r);
    });
  }
  if (scale != 1.0f) ParallelFor(size, 1 << 16, [&](int64_t j) { out[j] *= scale; });
}

void CpuBackend::ApplyGradient(int layer, const float* grad, const AdamStep& step) {
  Layer& L = *layers_[layer];
  ApplyGradient(L, grad, grad + static_cast<size_t>(L.rows) * L.cols, step);
  if (!L.indexed) {
    std::fill(L.g.begin(), L.g.end(), 0.0f);
    std::fill(L.gb.begin(), L.gb.end(), 0.0f);
    std::fill(L.touched.begin(), L.touched.end(), 0);
    std::fill(L.btouched.begin(), L.btouched.end(), 0);
  }
  L.batch.pending = L.batch.dense_pending = false;
  L.batch.grad_rows.clear();
  L.batch.grad_off.clear();
}

void CpuBackend::ApplyGradient(Layer& L, const float* gw, const float* gb, const AdamStep& step) {
  // Every storage row and bias takes a step (dense Adam), from a copy of its gradient.
  ParallelFor(L.rows, 256, [&](int64_t r) {
    ThreadScratch& ts = *scratch_[ThreadId()];
    const size_t o = static_cast<size_t>(r) * L.cols;
    ts.grad.assign(gw + o, gw + o + L.cols);
    AdamRow(L, step, o, L.cols, ts.grad.data());
  });
  for (int64_t i = 0; i < L.spec.local(); ++i) {
    float g = gb[i];
    AdamBias(L, step, i, &g);
  }
}

}  // namespace dslide::cpu
