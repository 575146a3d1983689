// The GPU backend's batch buffers: host rows up into the padded device layout and back
// (HostRows, CommitRows), the labels, and the one-rank chain between layers.
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

template <class X>
void GpuBackendT<X>::SendRows(const BatchRows& r, typename X::SendStage* stage, DevRows* d) {
  const int64_t B = r.samples(), cap = std::max<int64_t>(1, MaxCount(r));
  const int64_t ni = static_cast<int64_t>(r.ids.size()), nv = static_cast<int64_t>(r.vals.size());
  char* p = static_cast<char*>(
      stage->Get(2 * B * sizeof(int64_t) + ni * sizeof(int32_t) + nv * sizeof(float)));
  int64_t* h_off = reinterpret_cast<int64_t*>(p);
  int64_t* h_n = h_off + B;
  int32_t* h_ids = reinterpret_cast<int32_t*>(h_n + B);
  float* h_vals = reinterpret_cast<float*>(h_ids + ni);
  std::copy(r.off.begin(), r.off.end(), h_off);
  std::copy(r.n.begin(), r.n.end(), h_n);
  std::copy(r.ids.begin(), r.ids.end(), h_ids);
  std::copy(r.vals.begin(), r.vals.end(), h_vals);
  raw_off_.Resize(std::max<int64_t>(B, 1));
  raw_ids_.Resize(std::max<int64_t>(ni, 1));
  raw_vals_.Resize(std::max<int64_t>(nv, 1));
  d->B = B;
  d->cap = cap;
  d->dense = r.dense;
  d->width = r.width;
  d->n.Resize(std::max<int64_t>(B, 1));
  d->ids.Resize(B * cap);
  d->vals.Resize(B * cap);
  x_.CopyIn(raw_off_.data(), h_off, B);
  x_.CopyIn(d->n.data(), h_n, B);
  x_.CopyIn(raw_ids_.data(), h_ids, ni);
  x_.CopyIn(raw_vals_.data(), h_vals, nv);
  stage->Done();
  const int64_t* off = raw_off_.data();
  const int64_t* n = d->n.data();
  const int32_t* rid = raw_ids_.data();
  const float* rv = raw_vals_.data();
  int32_t* ids = d->ids.data();
  float* vals = d->vals.data();
  const bool has_ids = ni > 0, has_vals = nv > 0;
  x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / cap, e = t % cap;
    const bool in = e < n[i];
    ids[t] = !in ? 0 : has_ids ? rid[off[i] + e] : static_cast<int32_t>(e);
    vals[t] = in && has_vals ? rv[off[i] + e] : 0.0f;
  });
}

template <class X>
void GpuBackendT<X>::SendValues(const BatchRows& r, const DevRows& like,
                                typename X::SendStage* stage, Buf<float>* to) {
  const int64_t B = like.B, cap = like.cap;
  DSLIDE_ASSERT(r.samples() == B, "staged rows of another batch");
  float* h = static_cast<float*>(stage->Get(B * cap * sizeof(float)));
  for (int64_t i = 0; i < B; ++i) {
    std::copy(r.vals.begin() + r.off[i], r.vals.begin() + r.off[i] + r.n[i], h + i * cap);
    std::fill(h + i * cap + r.n[i], h + (i + 1) * cap, 0.0f);
  }
  to->Resize(B * cap);
  x_.CopyIn(to->data(), h, B * cap);
  stage->Done();
}

template <class X>
void GpuBackendT<X>::HostCopy(const DevRows& d, const Buf<float>* vals, BatchRows* r) const {
  const int64_t B = d.B, cap = d.cap;
  r->Strided(B, cap);
  r->ids.resize(B * cap);
  r->vals.resize(B * cap);
  if (B > 0) {
    x_.Download(d.n, r->n.data(), B);
    x_.Download(d.ids, r->ids.data(), B * cap);
    x_.Download(vals != nullptr ? *vals : d.vals, r->vals.data(), B * cap);
  }
}

template <class X>
void GpuBackendT<X>::Densify(const DevRows& d, int64_t width, Buf<float>* out,
                             bool by_column) const {
  const int64_t B = d.B, cap = d.cap;
  const bool dense_rows = d.dense;
  Zeros(out, static_cast<size_t>(B * width));
  float* o = out->data();
  const int64_t* n = d.n.data();
  const int32_t* ids = d.ids.data();
  const float* vals = d.vals.data();
  x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / cap, e = t % cap;
    if (e >= n[i]) return;
    const int64_t col = dense_rows ? e : ids[t];
    o[by_column ? col * B + i : i * width + col] = vals[t];
  });
}

template <class X>
void GpuBackendT<X>::SetLabels(const BatchLabels* labels) {
  has_labels_ = labels != nullptr;
  if (!has_labels_) return;
  const int64_t no = static_cast<int64_t>(labels->off.size()),
                ni = static_cast<int64_t>(labels->ids.size());
  label_shape_ = {no - 1, ni, 0};
  for (int64_t i = 0; i + 1 < no; ++i)
    label_shape_.most = std::max(label_shape_.most, labels->Count(i));
  char* p = static_cast<char*>(send_labels_.Get(no * sizeof(int64_t) + ni * sizeof(int32_t)));
  int64_t* h_off = reinterpret_cast<int64_t*>(p);
  int32_t* h_ids = reinterpret_cast<int32_t*>(h_off + no);
  std::copy(labels->off.begin(), labels->off.end(), h_off);
  std::copy(labels->ids.begin(), labels->ids.end(), h_ids);
  lab_off_.Resize(no);
  lab_ids_.Resize(std::max<int64_t>(ni, 1));
  x_.CopyIn(lab_off_.data(), h_off, no);
  x_.CopyIn(lab_ids_.data(), h_ids, ni);
  send_labels_.Done();
}

template <class X>
void GpuBackendT<X>::Chain(int from, int to) {
  if (to == from + 1) {
    DevRows& out = batch_[from]->out;
    out.dense = spec_.layers[from].dense();
    out.width = spec_.layers[from].out_dim;
    batch_[to]->chained = true;
    return;
  }
  DSLIDE_ASSERT(to == from - 1, "Chain links neighbouring layers");
  const DevRows& act = batch_[to]->out;
  const float* g = batch_[from]->in_grad.data();
  Buf<float>& delta = batch_[to]->delta;
  const int64_t B = act.B, cap = act.cap;
  delta.Resize(B * cap);
  const int64_t* n = act.n.data();
  const float* a = act.vals.data();
  float* d = delta.data();
  x_.For(B * cap,
         [=] DSLIDE_HD(int64_t t) { d[t] = t % cap < n[t / cap] && a[t] > 0.0f ? g[t] : 0.0f; });
}

template <class X>
void GpuBackendT<X>::Dropout(int layer, const DropoutStep& d, bool backward) {
  Batch& b = *batch_[layer];
  const DevRows& act = b.out;
  const int64_t cap = act.cap;
  const int64_t* n = act.n.data();
  const float scale = d.Scale();
  if (backward) {
    float* g = b.delta.data();
    x_.For(act.B * cap, [=] DSLIDE_HD(int64_t t) {
      if (t % cap < n[t / cap]) g[t] *= scale;
    });
    return;
  }
  const int32_t* ids = act.ids.data();
  float* v = b.out.vals.data();
  x_.For(act.B * cap, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / cap;
    if (t % cap < n[i]) v[t] = d.Keeps(i, ids[t]) ? v[t] * scale : 0.0f;
  });
}

template <class X>
void GpuBackendT<X>::SendInput(int layer, const BatchRows& rows) {
  batch_[layer]->chained = false;
  SendRows(rows, &send_rows_, &batch_[layer]->in);
}

template <class X>
BatchRows* GpuBackendT<X>::HostRows(int layer, Rows which, Access access) {
  Batch& b = *batch_[layer];
  BatchRows& h = b.host[static_cast<int>(which)];
  if (access == Access::kWrite) return &h;
  switch (which) {
    case Rows::kInput:
      HostCopy(InRows(layer), nullptr, &h);
      h.dense = InRows(layer).dense;
      h.width = InRows(layer).width;
      break;
    case Rows::kOutput:
      HostCopy(b.out, nullptr, &h);
      break;
    case Rows::kDelta:
      HostCopy(b.out, &b.delta, &h);
      break;
    case Rows::kInputGrad:
      HostCopy(InRows(layer), &b.in_grad, &h);
      h.dense = InRows(layer).dense;
      h.width = InRows(layer).width;
      break;
  }
  return &h;
}

template <class X>
void GpuBackendT<X>::CommitRows(int layer, Rows which) {
  Batch& b = *batch_[layer];
  const BatchRows& h = b.host[static_cast<int>(which)];
  switch (which) {
    case Rows::kInput:
      SendInput(layer, h);
      break;
    case Rows::kOutput:
      SendRows(h, &send_rows_, &b.out);
      break;
    case Rows::kDelta:
      SendValues(h, b.out, &send_rows_, &b.delta);
      break;
    case Rows::kInputGrad:
      SendValues(h, InRows(layer), &send_rows_, &b.in_grad);
      break;
  }
}

#define DSLIDE_GPU_MEMBERS(X)                                                                    \
  template void GpuBackendT<X>::SendRows(const BatchRows& r, typename X::SendStage* stage,       \
                                         DevRows* d);                                            \
  template void GpuBackendT<X>::SendValues(const BatchRows& r, const DevRows& like,              \
                                           typename X::SendStage* stage, Buf<float>* to);        \
  template void GpuBackendT<X>::HostCopy(const DevRows& d, const Buf<float>* vals, BatchRows* r) \
      const;                                                                                     \
  template void GpuBackendT<X>::Densify(const DevRows& d, int64_t width, Buf<float>* out,        \
                                        bool by_column) const;                                   \
  template void GpuBackendT<X>::SetLabels(const BatchLabels* labels);                            \
  template void GpuBackendT<X>::Chain(int from, int to);                                         \
  template void GpuBackendT<X>::Dropout(int layer, const DropoutStep& d, bool backward);         \
  template void GpuBackendT<X>::SendInput(int layer, const BatchRows& rows);                     \
  template BatchRows* GpuBackendT<X>::HostRows(int layer, Rows which, Access access);            \
  template void GpuBackendT<X>::CommitRows(int layer, Rows which);
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
