// The GPU backend's forward pass: the activations of each sample's active neurons.
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

template <class X>
void GpuBackendT<X>::Forward(int layer) {
  Layer& L = *layers_[layer];
  const DevRows& in = InRows(layer);
  DevRows& out = batch_[layer]->out;
  const LayerSpec& s = L.spec;
  const int64_t B = in.B;
  out.vals.Resize(B * out.cap);
  if (s.input_major) {
    ForwardInputMajor k;
    k.in = in.View();
    k.act = out.View();
    k.cols = L.cols;
    k.begin = s.begin;
    k.kept = std::min<int64_t>(in.cap, tune_.shared_entries);
    k.relu = !s.is_output;
    k.w = L.w.data();
    k.bias = L.b.data();
    k.z = out.vals.data();
    x_.Launch(k);
    SubtractLogQ(layer);
    return;
  }
  // Row-per-neuron: the densified input row in shared memory, or in global memory (xd_)
  // when it does not fit.
  ForwardRows k;
  k.in = in.View();
  k.act = out.View();
  k.cols = L.cols;
  k.begin = s.begin;
  k.relu = !s.is_output;
  k.shared = L.cols <= tune_.shared_floats;
  if (!k.shared) xd_.Resize(static_cast<size_t>(B * L.cols));
  k.w = L.w.data();
  k.bias = L.b.data();
  k.xg = xd_.data();
  k.z = out.vals.data();
  x_.Launch(k);
  SubtractLogQ(layer);
}

template <class X>
void GpuBackendT<X>::SubtractLogQ(int layer) {
  Batch& b = *batch_[layer];
  if (!b.log_q_valid) return;
  // The sampled logits, corrected: z - log q on each sample's active slots.
  DevRows& out = b.out;
  const int64_t cap = out.cap;
  const int64_t* n = out.n.data();
  const float* lq = b.log_q.data();
  float* z = out.vals.data();
  x_.For(out.B * cap, [=] DSLIDE_HD(int64_t t) {
    if (t % cap < n[t / cap]) z[t] -= lq[t];
  });
}

#define DSLIDE_GPU_MEMBERS(X)                       \
  template void GpuBackendT<X>::Forward(int layer); \
  template void GpuBackendT<X>::SubtractLogQ(int layer);
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
