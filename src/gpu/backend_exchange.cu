// The GPU backend's side of the snapshot exchange (RowExchange): with P ranks, kernels pack
// this rank's rows and regroup what arrived. Under CUDA-aware MPI the trainer's collectives
// send from and receive into device buffers and only the per-sample counts come to the
// host; otherwise the packed entries are staged through host memory (they come down, the
// gathered ones go up), never the padded rows.
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

namespace {

// Entry e of sample i in a row made of the ranks' segments (seg[r * B + i] entries each,
// rank 0's first): its position in the rank-major buffer (src[r * B + i]: where rank r's
// entries of sample i start).
DSLIDE_HD inline int64_t RankMajorPos(const int64_t* seg, const int64_t* src, int64_t B, int64_t i,
                                      int64_t e) {
  int64_t r = 0;
  while (e >= seg[r * B + i]) e -= seg[r++ * B + i];
  return src[r * B + i] + e;
}

}  // namespace

template <class X>
std::vector<int64_t> GpuBackendT<X>::OutputCounts(int layer) {
  Batch& b = *batch_[layer];
  b.out_n.resize(b.out.B);
  if (b.out.B > 0) x_.Download(b.out.n, b.out_n.data(), b.out.B);
  return b.out_n;
}

template <class X>
ExchangeBuffers GpuBackendT<X>::PackOutput(int layer, bool with_ids, int64_t total) {
  Batch& b = *batch_[layer];
  const DevRows& out = b.out;
  const int64_t B = out.B, cap = out.cap;
  DSLIDE_ASSERT(static_cast<int64_t>(b.out_n.size()) == B, "PackOutput before OutputCounts");
  std::vector<int64_t> pos(std::max<int64_t>(B, 1), 0);
  int64_t mine = 0;
  for (int64_t i = 0; i < B; ++i) {
    pos[i] = mine;
    mine += b.out_n[i];
  }
  x_.Upload(&b.out_pos, pos.data(), pos.size());
  snap_send_.Resize(std::max<int64_t>(mine, 1));
  if (with_ids) snap_send_ids_.Resize(std::max<int64_t>(mine, 1));
  const int64_t* n = out.n.data();
  const int64_t* p = b.out_pos.data();
  const int32_t* ids = out.ids.data();
  const float* vals = out.vals.data();
  float* sv = snap_send_.data();
  int32_t* si = with_ids ? snap_send_ids_.data() : nullptr;
  x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / cap, e = t % cap;
    if (e >= n[i]) return;
    sv[p[i] + e] = vals[t];
    if (si != nullptr) si[p[i] + e] = ids[t];
  });
  if (exchange_on_device_) x_.Synchronize();  // MPI reads the buffers outside the stream
  ExchangeBuffers x;
  x.send_vals = SendFrom(snap_send_, &host_send_, mine);
  x.recv_vals = RecvInto(&snap_recv_, &host_recv_, total);
  if (with_ids) {
    x.send_ids = SendFrom(snap_send_ids_, &host_send_ids_, mine);
    x.recv_ids = RecvInto(&snap_recv_ids_, &host_recv_ids_, total);
  }
  return x;
}

template <class X>
void GpuBackendT<X>::UnpackInput(int layer, const std::vector<int64_t>& seg, bool dense,
                                 int64_t width) {
  Batch& b = *batch_[layer];
  const int64_t B = batch_[layer - 1]->out.B;
  DSLIDE_ASSERT(B > 0 && seg.size() % B == 0, "segments of another batch");
  const int64_t P = static_cast<int64_t>(seg.size()) / B;
  // Each sample's row, its capacity, and where each rank's entries of it start.
  std::vector<int64_t> n(B, 0), src(seg.size());
  int64_t at = 0;
  for (int64_t r = 0; r < P; ++r)
    for (int64_t i = 0; i < B; ++i) {
      src[r * B + i] = at;
      at += seg[r * B + i];
      n[i] += seg[r * B + i];
    }
  int64_t cap = 1;
  for (int64_t c : n) cap = std::max(cap, c);
  b.in_total = at;
  b.chained = false;
  DevRows& d = b.in;
  d.B = B;
  d.cap = cap;
  d.dense = dense;
  d.width = width;
  x_.Upload(&d.n, n.data(), n.size());
  x_.Upload(&b.in_seg, seg.data(), seg.size());
  x_.Upload(&b.in_src, src.data(), src.size());
  Received(&snap_recv_, host_recv_, at);
  if (!dense) Received(&snap_recv_ids_, host_recv_ids_, at);
  d.ids.Resize(B * cap);
  d.vals.Resize(B * cap);
  const int64_t* dn = d.n.data();
  const int64_t* sg = b.in_seg.data();
  const int64_t* sr = b.in_src.data();
  const float* rv = snap_recv_.data();
  const int32_t* ri = dense ? nullptr : snap_recv_ids_.data();
  int32_t* ids = d.ids.data();
  float* vals = d.vals.data();
  x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / cap, e = t % cap;
    if (e >= dn[i]) {  // padding, as SendRows leaves it
      ids[t] = 0;
      vals[t] = 0.0f;
      return;
    }
    const int64_t q = RankMajorPos(sg, sr, B, i, e);
    vals[t] = rv[q];
    ids[t] = ri != nullptr ? ri[q] : static_cast<int32_t>(e);
  });
}

template <class X>
ExchangeBuffers GpuBackendT<X>::PackInputGrad(int layer, int64_t mine) {
  Batch& b = *batch_[layer];
  const DevRows& in = InRows(layer);
  DSLIDE_ASSERT(!b.chained && b.in_seg.size() > 0, "PackInputGrad of an input not exchanged");
  const int64_t B = in.B, cap = in.cap;
  snap_send_.Resize(std::max<int64_t>(b.in_total, 1));
  const int64_t* n = in.n.data();
  const int64_t* sg = b.in_seg.data();
  const int64_t* sr = b.in_src.data();
  const float* g = b.in_grad.data();
  float* sv = snap_send_.data();
  x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / cap, e = t % cap;
    if (e < n[i]) sv[RankMajorPos(sg, sr, B, i, e)] = g[t];
  });
  if (exchange_on_device_) x_.Synchronize();
  ExchangeBuffers x;
  x.send_vals = SendFrom(snap_send_, &host_send_, b.in_total);
  x.recv_vals = RecvInto(&snap_grad_, &host_grad_, mine);
  snap_mine_ = mine;
  return x;
}

template <class X>
void GpuBackendT<X>::UnpackDelta(int layer) {
  Batch& b = *batch_[layer];
  const DevRows& act = b.out;
  const int64_t B = act.B, cap = act.cap;
  Received(&snap_grad_, host_grad_, snap_mine_);
  b.delta.Resize(B * cap);
  const int64_t* n = act.n.data();
  const int64_t* p = b.out_pos.data();
  const float* a = act.vals.data();
  const float* g = snap_grad_.data();
  float* d = b.delta.data();
  x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / cap, e = t % cap;
    d[t] = e < n[i] && a[t] > 0.0f ? g[p[i] + e] : 0.0f;
  });
}

#define DSLIDE_GPU_MEMBERS(X)                                                                   \
  template std::vector<int64_t> GpuBackendT<X>::OutputCounts(int layer);                        \
  template ExchangeBuffers GpuBackendT<X>::PackOutput(int layer, bool with_ids, int64_t total); \
  template void GpuBackendT<X>::UnpackInput(int layer, const std::vector<int64_t>& seg,         \
                                            bool dense, int64_t width);                         \
  template ExchangeBuffers GpuBackendT<X>::PackInputGrad(int layer, int64_t mine);              \
  template void GpuBackendT<X>::UnpackDelta(int layer);
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
