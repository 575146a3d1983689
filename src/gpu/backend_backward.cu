// The GPU backend's backward pass and Adam: the input gradient from the old weights, the
// batch's (neuron, sample, delta) index, and the lazy (or dense) update of the touched rows.
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

template <class X>
void GpuBackendT<X>::Backward(int layer) {
  Layer& L = *layers_[layer];
  DSLIDE_ASSERT(L.spec.input_major == (layer == 0), "the first layer alone is input-major");
  if (L.spec.input_major)
    FirstLayerBackward(L, InRows(layer), *batch_[layer]);
  else
    IndexBatch(L, InRows(layer), *batch_[layer]);
}

template <class X>
void GpuBackendT<X>::BackwardStep(int layer, const AdamStep& step) {
  // The input gradient is formed from the old weights before the update kernel runs.
  Backward(layer);
  Update(layer, step, opt_.dense_adam);
}

template <class X>
void GpuBackendT<X>::Update(int layer, const AdamStep& step, bool dense) {
  Layer& L = *layers_[layer];
  if (L.spec.input_major) {
    FirstLayerAdam(L, AdamConsts::Of(step, /*first_layer=*/true), dense);
    return;
  }
  RowAdam(L, AdamConsts::Of(step, /*first_layer=*/false), dense);
}

template <class X>
void GpuBackendT<X>::FirstLayerBackward(Layer& L, const DevRows& in, const Batch& b) {
  const int64_t icap = in.cap;
  const int64_t* xn = in.n.data();
  const int32_t* xid = in.ids.data();
  uint8_t* touched = L.touched.data();
  x_.For(in.B * icap, [=] DSLIDE_HD(int64_t t) {
    if (t % icap < xn[t / icap]) touched[xid[t]] = 1;
  });
  FirstLayerGradient k;
  k.in = in.View();
  k.delta = b.out.View(&b.delta);
  k.cols = L.cols;
  k.begin = L.spec.begin;
  k.g = L.g.data();
  k.gb = L.gb.data();
  k.btouched = L.btouched.data();
  x_.Launch(k);
}

template <class X>
void GpuBackendT<X>::FirstLayerAdam(Layer& L, const AdamConsts& a, bool dense) {
  const AdamTargets to = Targets(L);
  float* gb = L.gb.data();
  uint8_t* touched = L.touched.data();
  uint8_t* btouched = L.btouched.data();
  const int64_t rows = L.rows;
  L.row_flag.Resize(rows + 1);
  L.row_pos.Resize(rows + 1);
  L.row_list.Resize(std::max<int64_t>(rows, 1));
  uint32_t* flag = L.row_flag.data();
  const uint32_t* pos = L.row_pos.data();
  int32_t* list = L.row_list.data();
  int64_t* count = L.counts.data();
  if (!dense) {
    x_.For(rows + 1, [=] DSLIDE_HD(int64_t r) { flag[r] = r < rows && touched[r] ? 1u : 0u; });
    x_.ExclusiveScan(flag, L.row_pos.data(), rows + 1);
    x_.For(rows + 1, [=] DSLIDE_HD(int64_t r) {
      if (r == rows) {
        count[0] = pos[rows];
      } else if (flag[r]) {
        list[pos[r]] = static_cast<int32_t>(r);
        touched[r] = 0;
      }
    });
  } else {
    x_.For(rows, [=] DSLIDE_HD(int64_t r) { touched[r] = 0; });
  }
  FirstLayerUpdate k;
  k.a = a;
  k.to = to;
  k.max_rows = rows;
  k.cols = L.cols;
  k.dense = dense;
  k.count = count;
  k.list = list;
  k.g = L.g.data();
  x_.Launch(k);
  StampRows(L, a.t, dense, rows, count, list);
  x_.For(L.spec.local(), [=] DSLIDE_HD(int64_t c) {
    if (!dense && !btouched[c]) return;
    to.Bias(a, c, gb[c]);
    gb[c] = 0.0f;
    btouched[c] = 0;
  });
}

template <class X>
void GpuBackendT<X>::IndexBatch(Layer& L, const DevRows& in, Batch& b) {
  const LayerSpec& s = L.spec;
  DSLIDE_ASSERT(!L.pending, "Backward called twice on a layer without an Update between");
  Densify(in, s.in_dim, &L.x);
  const int64_t B = in.B, dcap = b.out.cap, begin = s.begin;
  const int64_t* dn = b.out.n.data();
  const int32_t* did = b.out.ids.data();
  const float* dv = b.delta.data();
  b.in_grad.Resize(B * in.cap);
  InputGradient ig;
  ig.in = in.View();
  ig.delta = b.out.View(&b.delta);
  ig.cols = L.cols;
  ig.begin = s.begin;
  ig.w = L.w.data();
  ig.gin = b.in_grad.data();
  x_.Launch(ig);
  // (local neuron, position) keys of the non-zero deltas; the rest sort to the end.
  const int64_t nkeys = B * dcap;
  DSLIDE_CHECK(nkeys < (int64_t{1} << 32), "batch too large for the GPU backend's index");
  L.keys.Resize(std::max<int64_t>(nkeys, 1));
  uint64_t* keys = L.keys.data();
  x_.For(nkeys, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / dcap, k = t % dcap;
    keys[t] = k < dn[i] && dv[t] != 0.0f
                  ? (static_cast<uint64_t>(did[t] - begin) << 32) | static_cast<uint64_t>(t)
                  : ~uint64_t{0};
  });
  x_.SortKeys(keys, nkeys);
  // Bounds known on the host: every key an entry, every entry a row of its own.
  L.max_q = std::min<int64_t>(nkeys, s.local());
  L.flags.Resize(nkeys + 1);
  L.qidx.Resize(nkeys + 1);
  L.qrow.Resize(L.max_q + 1);
  L.qoff.Resize(L.max_q + 1);
  L.ent_sample.Resize(nkeys + 1);
  L.ent_delta.Resize(nkeys + 1);
  int64_t* count = L.counts.data();  // [entries, touched rows]
  uint32_t* flags = L.flags.data();
  // The entries: the keys before the first empty one (a binary search), and the start of
  // each run of equal neurons.
  x_.For(1, [=] DSLIDE_HD(int64_t) {
    int64_t lo = 0, hi = nkeys;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (keys[mid] != ~uint64_t{0})
        lo = mid + 1;
      else
        hi = mid;
    }
    count[0] = lo;
  });
  x_.For(nkeys + 1, [=] DSLIDE_HD(int64_t e) {
    const int64_t nent = count[0];
    flags[e] = e < nent && (e == 0 || (keys[e] >> 32) != (keys[e - 1] >> 32)) ? 1u : 0u;
  });
  const uint32_t* qidx = L.qidx.data();
  x_.ExclusiveScan(flags, L.qidx.data(), nkeys + 1);
  x_.For(1, [=] DSLIDE_HD(int64_t) { count[1] = qidx[count[0]]; });
  // Runs of equal neurons -> touched rows q with their entry ranges.
  int32_t* qrow = L.qrow.data();
  int64_t* qoff = L.qoff.data();
  int32_t* rowq = L.rowq.data();
  int32_t* es = L.ent_sample.data();
  float* ed = L.ent_delta.data();
  x_.For(nkeys + 1, [=] DSLIDE_HD(int64_t e) {
    const int64_t nent = count[0];
    if (e > nent) return;
    if (e == nent) {
      qoff[count[1]] = nent;
      return;
    }
    const uint64_t pos = keys[e] & 0xffffffffu;
    es[e] = static_cast<int32_t>(pos / dcap);
    ed[e] = dv[pos];
    if (flags[e]) {
      const int32_t r = static_cast<int32_t>(keys[e] >> 32);
      qrow[qidx[e]] = r;
      qoff[qidx[e]] = e;
      rowq[r] = static_cast<int32_t>(qidx[e]);
    }
  });
  L.pending = true;
}

template <class X>
void GpuBackendT<X>::RowAdam(Layer& L, const AdamConsts& a, bool dense) {
  RowUpdate k;
  k.a = a;
  k.to = Targets(L);
  k.max_rows = dense ? L.spec.local() : L.max_q;
  k.cols = L.cols;
  k.dense = dense;
  k.pending = L.pending;
  k.count = L.counts.data() + 1;
  k.x = L.x.data();
  k.qrow = L.qrow.data();
  k.rowq = L.rowq.data();
  k.es = L.ent_sample.data();
  k.qoff = L.qoff.data();
  k.ed = L.ent_delta.data();
  x_.Launch(k);
  if (!k.Empty()) StampRows(L, a.t, dense, L.max_q, L.counts.data() + 1, L.qrow.data());
  ClearPending(L);
}

template <class X>
void GpuBackendT<X>::ClearPending(Layer& L) {
  if (L.pending) {
    int32_t* rowq = L.rowq.data();
    const int32_t* qrow = L.qrow.data();
    x_.ForCounted(L.max_q, L.counts.data() + 1, 1,
                  [=] DSLIDE_HD(int64_t q) { rowq[qrow[q]] = -1; });
  }
  L.pending = false;
}

#define DSLIDE_GPU_MEMBERS(X)                                                                    \
  template void GpuBackendT<X>::Backward(int layer);                                             \
  template void GpuBackendT<X>::BackwardStep(int layer, const AdamStep& step);                   \
  template void GpuBackendT<X>::Update(int layer, const AdamStep& step, bool dense);             \
  template void GpuBackendT<X>::FirstLayerBackward(Layer& L, const DevRows& in, const Batch& b); \
  template void GpuBackendT<X>::FirstLayerAdam(Layer& L, const AdamConsts& a, bool dense);       \
  template void GpuBackendT<X>::IndexBatch(Layer& L, const DevRows& in, Batch& b);               \
  template void GpuBackendT<X>::RowAdam(Layer& L, const AdamConsts& a, bool dense);              \
  template void GpuBackendT<X>::ClearPending(Layer& L);
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
