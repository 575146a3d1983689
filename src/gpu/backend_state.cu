// The GPU backend's state: initialisation, checkpoints in and out (SaveLayer, LoadLayer),
// the gradient of data parallelism, and what it holds (Info).
#include "common/memory_limit.h"
#include "common/parallel.h"
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

template <class X>
void GpuBackendT<X>::Init(const ModelSpec& spec, const BackendOptions& options) {
  CheckLshResolved(spec, options.lsh);
  {
    // Refused before anything is allocated where the shard's least state exceeds the
    // device's free memory (a failed allocation halfway through would name neither the
    // size nor the cause).
    const ShardNeed need =
        ShardStateNeed(spec, options, /*first_layer_gradient=*/!options.scoring_only);
    std::pair<int64_t, int64_t> room = X::DeviceFreeAndTotal();
    if (tune_.device_free_bytes >= 0) room = {tune_.device_free_bytes, room.second};
    CheckDeviceMemoryFits(need.bytes, room.first, room.second, need.what, "the GPU");
  }
  spec_ = spec;
  opt_ = options;
  exchange_on_device_ = tune_.device_exchange == 1 ||
                        (tune_.device_exchange < 0 && X::kDevice && MpiReadsDeviceMemory());
  layers_.clear();
  batch_.clear();
  for (size_t li = 0; li < spec.layers.size(); ++li) batch_.push_back(std::make_unique<Batch>());
  Zeros(&bad_, spec.layers.size());
  DSLIDE_CHECK(spec.layers.size() <= 64, "at most 64 layers");
  Zeros(&ring_loss_, kLossRing);
  Zeros(&ring_bad_, kLossRing);
  queued_ = 0;
  taken_.clear();
  for (size_t li = 0; li < spec.layers.size(); ++li) {
    auto L = std::make_unique<Layer>();
    L->index = static_cast<int>(li);
    L->spec = spec.layers[li];
    const LayerSpec& s = L->spec;
    L->rows = s.input_major ? s.in_dim : s.local();
    L->cols = s.input_major ? s.local() : s.in_dim;
    const size_t n = static_cast<size_t>(L->rows) * L->cols;
    // Scoring alone (eval, predict): the weights are loaded next, and there are no moments
    // or gradient rows (nothing trains).
    if (options.scoring_only) {
      Zeros(&L->w, n);
    } else {
      std::vector<float> host(n);
      InitialWeights(s, li, options.seed, host.data());
      x_.Upload(&L->w, host.data(), n);
    }
    if (!options.scoring_only && options.bf16_moments) {
      Zeros(&L->m16, n);
      Zeros(&L->v16, n);
      Zeros(&L->mb16, s.local());
      Zeros(&L->vb16, s.local());
    } else if (!options.scoring_only) {
      Zeros(&L->m, n);
      Zeros(&L->v, n);
      Zeros(&L->mb, s.local());
      Zeros(&L->vb, s.local());
    }
    if (StartsFromOutputBias(s, options)) {
      x_.Upload(&L->b, options.output_bias.data(), s.local());
    } else {
      Zeros(&L->b, s.local());
    }
    Zeros(&L->row_step, L->rows);
    Zeros(&L->bias_step, s.local());
    Zeros(&L->counts, 2);
    if (s.input_major && !options.scoring_only) {
      Zeros(&L->g, n);
      Zeros(&L->gb, s.local());
      Zeros(&L->touched, L->rows);
      Zeros(&L->btouched, s.local());
    } else if (!s.input_major) {
      L->rowq.Resize(s.local());
      Fill(L->rowq.data(), s.local(), int32_t{-1});
    }
    layers_.push_back(std::move(L));
  }
}

template <class X>
int64_t GpuBackendT<X>::GradientSize(int layer) const {
  const Layer& L = *layers_[layer];
  return static_cast<int64_t>(L.rows) * L.cols + L.spec.local();
}

template <class X>
void GpuBackendT<X>::ExportGradient(int layer, float* out, float scale) const {
  const Layer& L = *layers_[layer];
  const int64_t size = GradientSize(layer);
  const bool on_device = InExchange(out);
  if (on_device) {
    DSLIDE_ASSERT(InExchange(out + size - 1), "a gradient beyond the exchange buffer");
    ExportGradientTo(L, out);
    if (scale != 1.0f) x_.For(size, [=] DSLIDE_HD(int64_t t) { out[t] *= scale; });
    x_.Synchronize();
  } else {
    ExportGradientTo(L, out);
    // Host memory: as the trainer scaled its host buffer before (threads over chunks).
    if (scale != 1.0f) ParallelFor(size, 1 << 16, [&](int64_t t) { out[t] *= scale; });
  }
}

template <class X>
void GpuBackendT<X>::ExportGradientTo(const Layer& L, float* out) const {
  const size_t nw = static_cast<size_t>(L.rows) * L.cols;
  const bool on_device = InExchange(out);
  if (L.spec.input_major) {
    if (on_device) {
      const float* g = L.g.data();
      const float* gb = L.gb.data();
      x_.For(static_cast<int64_t>(nw + L.spec.local()), [=] DSLIDE_HD(int64_t t) {
        out[t] = t < static_cast<int64_t>(nw) ? g[t] : gb[t - nw];
      });
      return;
    }
    x_.Download(L.g, out, nw);
    x_.Download(L.gb, out + nw, L.spec.local());
    return;
  }
  Buf<float> dg;
  float* g = out;
  if (on_device) {
    Fill(out, static_cast<int64_t>(nw + L.spec.local()), 0.0f);
  } else {
    std::fill(out, out + nw + L.spec.local(), 0.0f);
    if (!L.pending) return;
    Zeros(&dg, nw + L.spec.local());
    g = dg.data();
  }
  if (!L.pending) return;
  const int64_t cols = L.cols;
  const float* x = L.x.data();
  const int32_t* qrow = L.qrow.data();
  const int64_t* qoff = L.qoff.data();
  const int32_t* es = L.ent_sample.data();
  const float* ed = L.ent_delta.data();
  x_.ForCounted(L.max_q * cols, L.counts.data() + 1, cols, [=] DSLIDE_HD(int64_t t) {
    const int64_t q = t / cols, j = t % cols, r = qrow[q];
    float gbias;
    RowGradient(qoff, es, ed, x, cols, q, j, g + r * cols + j, &gbias);
    if (j == 0) g[nw + r] = gbias;
  });
  if (!on_device) x_.Download(dg, out, nw + L.spec.local());
}

template <class X>
void GpuBackendT<X>::ApplyGradient(int layer, const float* grad, const AdamStep& step) {
  Layer& L = *layers_[layer];
  const size_t nw = static_cast<size_t>(L.rows) * L.cols;
  const float* g = grad;
  if (!InExchange(grad)) {
    x_.Upload(&grad_, grad, nw + L.spec.local());
    g = grad_.data();
  }
  const AdamConsts a = AdamConsts::Of(step, /*first_layer=*/layer == 0);
  const AdamTargets to = Targets(L);
  x_.For(static_cast<int64_t>(nw), [=] DSLIDE_HD(int64_t t) { to.Weight(a, t, g[t]); });
  x_.For(L.spec.local(), [=] DSLIDE_HD(int64_t c) { to.Bias(a, c, g[nw + c]); });
  StampRows(L, step.t, /*dense=*/true);
  if (L.spec.input_major) {
    Fill(L.g.data(), static_cast<int64_t>(nw), 0.0f);
    Fill(L.gb.data(), L.spec.local(), 0.0f);
    Fill(L.touched.data(), L.rows, uint8_t{0});
    Fill(L.btouched.data(), L.spec.local(), uint8_t{0});
  }
  ClearPending(L);
}

template <class X>
float* GpuBackendT<X>::ExchangeBuffer(int64_t n, bool zero) {
  if (!exchange_on_device_) return HostExchangeBuffer(&host_exchange_, n, zero);
  exch_.Resize(static_cast<size_t>(n));
  if (zero) {
    Fill(exch_.data(), n, 0.0f);
    x_.Synchronize();  // MPI reads the buffer outside the backend's stream
  }
  return exch_.data();
}

template <class X>
void GpuBackendT<X>::SaveLayer(int layer, unsigned parts, LayerState* st) const {
  const Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  DSLIDE_ASSERT(!(parts & (kMoments | kTables)) || !L.pending,
                "checkpoint with a pending gradient");
  if (parts & kWeights) {
    StorageToRows(s, Host(L.w), &st->w);
    st->b = Host(L.b);
  }
  if (parts & kMoments && opt_.bf16_moments) {  // stored as floats (exact)
    std::vector<float> f;
    FromBf16(Host(L.m16), &f);
    StorageToRows(s, f, &st->m);
    FromBf16(Host(L.v16), &f);
    StorageToRows(s, f, &st->v);
    FromBf16(Host(L.mb16), &st->mb);
    FromBf16(Host(L.vb16), &st->vb);
  } else if (parts & kMoments) {
    StorageToRows(s, Host(L.m), &st->m);
    StorageToRows(s, Host(L.v), &st->v);
    st->mb = Host(L.mb);
    st->vb = Host(L.vb);
  }
  if (parts & kMoments) {
    st->row_step = Host(L.row_step);
    st->bias_step = Host(L.bias_step);
  }
  if (parts & kGradient) {
    std::vector<float> flat(GradientSize(layer));
    ExportGradient(layer, flat.data(), 1.0f);
    const size_t nw = flat.size() - s.local();
    StorageToRows(s, std::vector<float>(flat.begin(), flat.begin() + nw), &st->gw);
    st->gb.assign(flat.begin() + nw, flat.end());
  }
  if (!(parts & kTables)) return;
  st->tables_plan = L.plan;
  st->table_offsets.clear();
  st->table_ids.clear();
  st->table_sizes.clear();
  if (s.dense()) return;
  st->table_offsets = Host(L.toff);
  st->table_ids = Host(L.tids);
  st->table_ids.resize(L.host_base.back());
  for (size_t t = 0; t + 1 < L.host_base.size(); ++t)
    st->table_sizes.push_back(L.host_base[t + 1] - L.host_base[t]);
}

template <class X>
void GpuBackendT<X>::LoadLayer(int layer, unsigned parts, const LayerState& st) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  const size_t n = static_cast<size_t>(s.local()) * s.in_dim;
  DSLIDE_ASSERT(!(parts & kGradient), "a pending gradient is not loaded");
  CheckLayerState(s, layer, st, parts);
  std::vector<float> tmp;
  if (parts & kWeights) {
    RowsToStorage(s, st.w, &tmp);
    x_.Upload(&L.w, tmp.data(), n);
    x_.Upload(&L.b, st.b.data(), st.b.size());
  }
  if (parts & kMoments && opt_.bf16_moments) {
    std::vector<uint16_t> h;
    RowsToStorage(s, st.m, &tmp);
    ToBf16(tmp, &h);
    x_.Upload(&L.m16, h.data(), n);
    RowsToStorage(s, st.v, &tmp);
    ToBf16(tmp, &h);
    x_.Upload(&L.v16, h.data(), n);
    ToBf16(st.mb, &h);
    x_.Upload(&L.mb16, h.data(), h.size());
    ToBf16(st.vb, &h);
    x_.Upload(&L.vb16, h.data(), h.size());
  } else if (parts & kMoments) {
    RowsToStorage(s, st.m, &tmp);
    x_.Upload(&L.m, tmp.data(), n);
    RowsToStorage(s, st.v, &tmp);
    x_.Upload(&L.v, tmp.data(), n);
    x_.Upload(&L.mb, st.mb.data(), st.mb.size());
    x_.Upload(&L.vb, st.vb.data(), st.vb.size());
  }
  if (parts & kMoments) {
    std::vector<int64_t> steps(static_cast<size_t>(L.rows));
    LoadLastSteps(st.row_step, &steps);
    x_.Upload(&L.row_step, steps.data(), steps.size());
    steps.resize(static_cast<size_t>(s.local()));
    LoadLastSteps(st.bias_step, &steps);
    x_.Upload(&L.bias_step, steps.data(), steps.size());
  }
  if (!(parts & kTables) || s.dense()) return;
  if (st.table_sizes.empty()) {  // none until the caller's RebuildTables
    L.hash.reset();
    L.plan = RebuildPlan{};
    return;
  }
  L.plan = st.tables_plan;
  MakeHash(layer);
  // Validate through LshTables::Import (the CPU's checks), then copy.
  LshTables check(opt_.lsh.l, L.hash->table_bits(), opt_.lsh.bucket_capacity, opt_.lsh.insert);
  check.Import(st.table_offsets, st.table_ids, st.table_sizes, s.local());
  x_.Upload(&L.toff, st.table_offsets.data(), st.table_offsets.size());
  UploadAtLeastOne(st.table_ids, &L.tids);
  L.host_base.assign(1, 0);
  for (int64_t sz : st.table_sizes) L.host_base.push_back(L.host_base.back() + sz);
  x_.Upload(&L.tbase, L.host_base.data(), L.host_base.size());
}

template <class X>
BackendCapabilities GpuBackendT<X>::Capabilities() const {
  BackendCapabilities c;
  c.name = X::kName;
  c.asynchronous = X::kDevice;
  c.row_exchange = true;
  // With the host executor: the collectives read its emulated device memory (tests).
  c.collectives_on_device = exchange_on_device_;
  return c;
}

template <class X>
BackendInfo GpuBackendT<X>::Info() const {
  BackendInfo info;
  info.traffic = x_.Traffic();
  info.device_peak_bytes = X::PeakBytes();
  info.device_used_bytes = X::DeviceUsedBytes();
  size_t& bytes = info.state_bytes;
  for (const auto& L : layers_) {
    bytes += L->w.bytes() + L->m.bytes() + L->v.bytes() + L->g.bytes();
    bytes += L->b.bytes() + L->mb.bytes() + L->vb.bytes() + L->gb.bytes();
    bytes += L->m16.bytes() + L->v16.bytes() + L->mb16.bytes() + L->vb16.bytes();
    bytes += L->touched.bytes() + L->btouched.bytes() + L->rowq.bytes();
    bytes += L->row_step.bytes() + L->bias_step.bytes();
    bytes += L->toff.bytes() + L->tids.bytes();
  }
  return info;
}

#define DSLIDE_GPU_MEMBERS(X)                                                                      \
  template void GpuBackendT<X>::Init(const ModelSpec& spec, const BackendOptions& options);        \
  template int64_t GpuBackendT<X>::GradientSize(int layer) const;                                  \
  template void GpuBackendT<X>::ExportGradient(int layer, float* out, float scale) const;          \
  template void GpuBackendT<X>::ExportGradientTo(const Layer& L, float* out) const;                \
  template void GpuBackendT<X>::ApplyGradient(int layer, const float* grad, const AdamStep& step); \
  template float* GpuBackendT<X>::ExchangeBuffer(int64_t n, bool zero);                            \
  template void GpuBackendT<X>::SaveLayer(int layer, unsigned parts, LayerState* st) const;        \
  template void GpuBackendT<X>::LoadLayer(int layer, unsigned parts, const LayerState& st);        \
  template BackendCapabilities GpuBackendT<X>::Capabilities() const;                               \
  template BackendInfo GpuBackendT<X>::Info() const;
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
