// The CPU backend's step on its batch buffers (host rows): each seam call runs the host-row
// kernel of cpu_*.cpp on the layer's buffers.
#include <cstdint>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_layer.h"
#include "model/activation.h"
#include "model/dropout.h"

namespace dslide::cpu {

CpuBackend::Buffers& CpuBackend::At(int layer) {
  if (static_cast<int>(buffers_.size()) <= layer) buffers_.resize(layer + 1);
  return buffers_[layer];
}

BatchRows& CpuBackend::Of(int layer, Rows which) {
  Buffers& b = At(layer);
  switch (which) {
    case Rows::kInput:
      return b.in;
    case Rows::kOutput:
      return b.out;
    case Rows::kDelta:
      return b.delta;
    case Rows::kInputGrad:
      break;
  }
  return b.in_grad;
}

BatchRows* CpuBackend::HostRows(int layer, Rows which, Access) { return &Of(layer, which); }

void CpuBackend::SetLabels(const BatchLabels* labels) {
  has_labels_ = labels != nullptr;
  if (has_labels_) labels_ = *labels;
}

void CpuBackend::Select(int layer, bool with_labels, int64_t iter) {
  Buffers& b = At(layer);
  SelectRows(layer, b.in, with_labels && has_labels_ ? &labels_ : nullptr, iter, &b.out);
}

void CpuBackend::Forward(int layer) {
  Buffers& b = At(layer);
  ForwardRows(layer, b.in, &b.out);
  const Layer::Batch& lb = layers_[layer]->batch;
  if (lb.log_q_valid) SubtractRows(lb.log_q, &b.out);  // the sampled logits, corrected
}

void CpuBackend::Chain(int from, int to) {
  if (to == from + 1) {
    BatchRows& next = At(to).in;  // first: At may grow the buffers
    const BatchRows& out = At(from).out;
    const LayerSpec& s = spec_.layers[from];
    // Packed, sample after sample: what SnapshotExchange::Gather assembles on one rank.
    const int64_t B = out.samples();
    next.off.resize(B);
    next.n.assign(out.n.begin(), out.n.end());
    int64_t total = 0;
    for (int64_t i = 0; i < B; ++i) {
      next.off[i] = total;
      total += out.n[i];
    }
    next.ids.resize(total);
    next.vals.resize(total);
    PackRows(out, next.vals.data(), next.ids.data());
    next.dense = s.dense();
    next.width = s.out_dim;
    return;
  }
  DSLIDE_ASSERT(to == from - 1, "Chain links neighbouring layers");
  const BatchRows& grad = At(from).in_grad;  // packed, like from's input
  Buffers& prev = At(to);
  // Back into the strided layout of the previous layer's output: what
  // SnapshotExchange::ScatterGrad returns on one rank.
  UnpackLike(grad.vals.data(), prev.out, &prev.delta);
  ReluBackward(prev.out, &prev.delta);
}

void CpuBackend::Dropout(int layer, const DropoutStep& d, bool backward) {
  Buffers& b = At(layer);
  if (backward)
    DropoutBackward(d, &b.delta);
  else
    DropoutForward(d, &b.out);
}

void CpuBackend::Softmax(int layer) {
  Buffers& b = At(layer);
  SoftmaxOnHost(b.out, labels_, kSoftmaxAll, &stats_, &b.delta, opt_.loss);
}

void CpuBackend::SoftmaxPartials(int layer, SoftmaxStats* st) {
  Buffers& b = At(layer);
  SoftmaxOnHost(b.out, labels_, kSoftmaxMax | kSoftmaxSums, st, &b.delta, opt_.loss);
}

void CpuBackend::SoftmaxDelta(int layer, const SoftmaxStats& st) {
  Buffers& b = At(layer);
  SoftmaxDeltaOnHost(b.out, labels_, st, &b.delta, opt_.loss);
}

void CpuBackend::QueueStatus(int loss_layer) {
  StepStatus s;
  if (loss_layer >= 0) s.loss = SoftmaxMeanLoss(stats_, labels_, opt_.loss);
  for (size_t l = 0; l < layers_.size(); ++l)
    if (layers_[l]->nonfinite.exchange(false)) s.bad_layers |= uint64_t{1} << l;
  queued_.push_back(s);
}

std::vector<StepStatus> CpuBackend::TakeQueued() {
  std::vector<StepStatus> out;
  out.swap(queued_);
  return out;
}

BatchRows* CpuBackend::ZeroedInputGrad(int layer) {
  if (layer == 0) return nullptr;  // the first layer's input is the data
  Buffers& b = At(layer);
  b.in_grad.LikeZero(b.in);
  return &b.in_grad;
}

void CpuBackend::Backward(int layer) {
  Buffers& b = At(layer);
  BackwardRows(layer, b.in, b.delta, ZeroedInputGrad(layer));
}

void CpuBackend::BackwardStep(int layer, const AdamStep& step) {
  Buffers& b = At(layer);
  BackwardUpdate(layer, b.in, b.delta, ZeroedInputGrad(layer), step, opt_.dense_adam);
}

void CpuBackend::TopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
                      const BatchLabels* labels, SoftmaxStats* st) {
  TopKRows(layer, At(layer).in, k, ids, scores, labels, st);
}

}  // namespace dslide::cpu
