// The GPU backend's softmax cross-entropy phases and the queued step status (loss and
// non-finite flags) that the host reads at its own cadence.
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

template <class X>
void GpuBackendT<X>::Softmax(int layer) {
  SoftmaxPhases(layer, kSoftmaxAll, nullptr, nullptr);
}

template <class X>
void GpuBackendT<X>::SoftmaxPartials(int layer, SoftmaxStats* st) {
  SoftmaxPhases(layer, kSoftmaxMax | kSoftmaxSums, nullptr, st);
}

template <class X>
void GpuBackendT<X>::SoftmaxDelta(int layer, const SoftmaxStats& st) {
  SoftmaxPhases(layer, kSoftmaxDelta, &st, nullptr);
}

template <class X>
void GpuBackendT<X>::SoftmaxPhases(int layer, unsigned phases, const SoftmaxStats* in,
                                   SoftmaxStats* out) {
  const DevRows& z = batch_[layer]->out;
  const int64_t B = z.B;
  DSLIDE_ASSERT(has_labels_ && label_shape_.samples == B, "the softmax needs the batch's labels");
  const bool do_max = phases & kSoftmaxMax, do_sums = phases & kSoftmaxSums,
             do_delta = phases & kSoftmaxDelta;
  DSLIDE_ASSERT(in != nullptr || (do_max && do_sums), "softmax statistics to read");
  sm_mx_.Resize(B);
  sm_red_.Resize(2 * B);
  if (!do_max || !do_sums) {
    float* h = static_cast<float*>(send_misc_.Get(3 * B * sizeof(float)));
    if (!do_max) {
      std::copy(in->mx.begin(), in->mx.end(), h);
      x_.CopyIn(sm_mx_.data(), h, B);
    }
    if (!do_sums) {
      std::copy(in->red.begin(), in->red.end(), h + B);
      x_.CopyIn(sm_red_.data(), h + B, 2 * B);
    }
    send_misc_.Done();
  }
  if (do_delta) batch_[layer]->delta.Resize(B * z.cap);
  gpu::Softmax k;
  k.z = z.View();
  k.do_max = do_max;
  k.do_sums = do_sums;
  k.do_delta = do_delta;
  k.ovr = opt_.loss == OutputLoss::kOneVsRest;
  k.lo = lab_off_.data();
  k.li = lab_ids_.data();
  k.inv_b = 1.0f / static_cast<float>(B);
  k.mx = sm_mx_.data();
  k.red = sm_red_.data();
  k.d = batch_[layer]->delta.data();
  x_.Launch(k);
  if (out == nullptr) return;
  out->Resize(B);
  if (do_max) x_.Download(sm_mx_, out->mx.data(), B);
  if (do_sums) x_.Download(sm_red_, out->red.data(), 2 * B);
}

template <class X>
void GpuBackendT<X>::QueueStatus(int loss_layer) {
  if (queued_ == kLossRing) DrainQueue();
  StepLoss k;
  k.B = loss_layer >= 0 ? batch_[loss_layer]->out.B : 0;
  k.n_layers = static_cast<int64_t>(layers_.size());
  k.ovr = opt_.loss == OutputLoss::kOneVsRest;
  k.lo = lab_off_.data();
  k.red = sm_red_.data();
  k.bad = bad_.data();
  k.out = ring_loss_.data() + queued_;
  k.out_bad = ring_bad_.data() + queued_;
  ++queued_;
  x_.Launch(k);
}

template <class X>
std::vector<StepStatus> GpuBackendT<X>::TakeQueued() {
  DrainQueue();
  std::vector<StepStatus> out;
  out.swap(taken_);
  return out;
}

template <class X>
void GpuBackendT<X>::DrainQueue() {
  if (queued_ == 0) return;
  const int64_t n = queued_;
  char* p = static_cast<char*>(x_.Stage(n * (sizeof(double) + sizeof(uint64_t))));
  double* h_loss = reinterpret_cast<double*>(p);
  uint64_t* h_bad = reinterpret_cast<uint64_t*>(h_loss + n);
  x_.CopiesAfterCompute();
  x_.CopyOut(h_loss, ring_loss_.data(), n);
  x_.CopyOut(h_bad, ring_bad_.data(), n);
  x_.WaitMark(x_.MarkCopies());
  for (int64_t i = 0; i < n; ++i) taken_.push_back({h_loss[i], h_bad[i]});
  queued_ = 0;
}

#define DSLIDE_GPU_MEMBERS(X)                                                                     \
  template void GpuBackendT<X>::Softmax(int layer);                                               \
  template void GpuBackendT<X>::SoftmaxPartials(int layer, SoftmaxStats* st);                     \
  template void GpuBackendT<X>::SoftmaxDelta(int layer, const SoftmaxStats& st);                  \
  template void GpuBackendT<X>::SoftmaxPhases(int layer, unsigned phases, const SoftmaxStats* in, \
                                              SoftmaxStats* out);                                 \
  template void GpuBackendT<X>::QueueStatus(int loss_layer);                                      \
  template std::vector<StepStatus> GpuBackendT<X>::TakeQueued();                                  \
  template void GpuBackendT<X>::DrainQueue();
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
