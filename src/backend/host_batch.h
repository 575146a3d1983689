// BatchOps over host batch buffers: the batch state of a backend whose StepOps take host
// rows (the CPU backend, whose memory is the host's; the GPU backend keeps its batch in
// device memory behind the same BatchOps).
#pragma once

#include <cstdint>
#include <vector>

#include "activation.h"
#include "layer_backend.h"

namespace dslide {

class HostBatchBackend : public LayerBackend {
 public:
  void SetLabels(const BatchLabels* labels) override {
    has_labels_ = labels != nullptr;
    if (has_labels_) labels_ = *labels;
  }
  void BatchSelect(int layer, bool with_labels, int64_t iter) override {
    Buffers& b = At(layer);
    SelectActive(layer, b.in, with_labels && has_labels_ ? &labels_ : nullptr, iter, &b.out);
  }
  void BatchForward(int layer) override {
    Buffers& b = At(layer);
    Forward(layer, b.in, &b.out);
  }
  void ChainForward(int layer) override {
    BatchRows& next = At(layer + 1).in;  // first: At may grow the buffers
    const BatchRows& out = At(layer).out;
    const LayerSpec& s = Spec(layer);
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
  }
  void BatchSoftmax(int layer, unsigned phases, SoftmaxStats* st) override {
    Buffers& b = At(layer);
    Softmax(layer, b.out, labels_, phases, st != nullptr ? st : &stats_, &b.delta);
  }
  void QueueLoss(int) override {
    StepStatus s;
    s.loss = SoftmaxMeanLoss(stats_, labels_);
    for (int l = 0; l < NumLayers(); ++l)
      if (TakeNonFinite(l)) s.bad_layers |= uint64_t{1} << l;
    queued_.push_back(s);
  }
  std::vector<StepStatus> TakeQueued() override {
    std::vector<StepStatus> out;
    out.swap(queued_);
    return out;
  }
  void BatchBackward(int layer, bool in_grad, const AdamStep* step, bool dense_adam) override {
    Buffers& b = At(layer);
    if (in_grad) b.in_grad.LikeZero(b.in);
    if (step != nullptr)
      BackwardUpdate(layer, b.in, b.delta, in_grad ? &b.in_grad : nullptr, *step, dense_adam);
    else
      Backward(layer, b.in, b.delta, in_grad ? &b.in_grad : nullptr);
  }
  void ChainBackward(int layer) override {
    const BatchRows& grad = At(layer).in_grad;  // packed, like layer's input
    Buffers& prev = At(layer - 1);
    // Back into the strided layout of layer - 1's output: what SnapshotExchange::ScatterGrad
    // returns on one rank.
    UnpackLike(grad.vals.data(), prev.out, &prev.delta);
    ReluBackward(prev.out, &prev.delta);
  }
  void BatchTopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
                 const BatchLabels* labels, SoftmaxStats* st) override {
    TopK(layer, At(layer).in, k, ids, scores, labels, st);
  }
  const BatchRows& HostRows(int layer, Rows which) override { return Of(layer, which); }
  BatchRows* StageRows(int layer, Rows which) override { return &Of(layer, which); }
  void CommitRows(int, Rows) override {}

 protected:
  /// The layer's shape (the backend's copy of the model spec), and the number of layers.
  virtual const LayerSpec& Spec(int layer) const = 0;
  virtual int NumLayers() const = 0;

 private:
  struct Buffers {
    BatchRows in, out, delta, in_grad;
  };
  Buffers& At(int layer) {
    if (static_cast<int>(buffers_.size()) <= layer) buffers_.resize(layer + 1);
    return buffers_[layer];
  }
  BatchRows& Of(int layer, Rows which) {
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

  std::vector<Buffers> buffers_;
  BatchLabels labels_;
  bool has_labels_ = false;
  SoftmaxStats stats_;  // of the last BatchSoftmax without a caller's statistics
  std::vector<StepStatus> queued_;
};

}  // namespace dslide
