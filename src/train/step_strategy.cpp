#include "train/step_strategy.h"

#include <algorithm>
#include <chrono>

#include "train/trainer.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

}  // namespace

/// sparse and dense-model-parallel: backpropagation through the sharded model, each layer
/// updated inside its backward pass.
class ModelParallelStep : public StepStrategy {
 public:
  std::optional<double> Step(Trainer& t, const Dataset& data, const std::vector<int64_t>& points,
                             const AdamStep& step) override {
    return t.Backpropagate(data, points, &step, /*queue=*/true);
  }
  bool Replicated() const override { return false; }
  bool WritesShard(int) const override { return true; }
};

/// data-parallel: a replica per rank, its slice of the batch, the fused gradient all-reduced.
class DataParallelStep : public StepStrategy {
 public:
  std::optional<double> Step(Trainer& t, const Dataset& data, const std::vector<int64_t>& points,
                             const AdamStep& step) override;
  bool Replicated() const override { return true; }
  bool WritesShard(int rank) const override { return rank == 0; }
};

std::optional<double> DataParallelStep::Step(Trainer& t, const Dataset& data,
                                             const std::vector<int64_t>& points,
                                             const AdamStep& step) {
  // Horovod's algorithm: each replica takes its slice of the global batch, then one
  // all-reduce over a fused buffer of every gradient, then the same update everywhere.
  const int P = t.comm_->size(), r = t.comm_->rank();
  const int64_t B = static_cast<int64_t>(points.size());
  const int64_t b0 = B * r / P, b1 = B * (r + 1) / P;
  const std::vector<int64_t> mine(points.begin() + b0, points.begin() + b1);
  double loss = mine.empty() ? 0.0 : *t.Backpropagate(data, mine, nullptr);
  auto t0 = Clock::now();
  const int n = static_cast<int>(t.spec_.layers.size());
  std::vector<int64_t> at(n + 1, 0);
  for (int l = 0; l < n; ++l) at[l + 1] = at[l] + t.backend_->ExportGradient(l, nullptr, 1.0f);
  // The fused buffer: in the backend's device memory when MPI can reduce it there (no
  // copies through the host), else in host memory.
  float* fused = t.backend_->ExchangeBuffer(at[n], /*zero=*/mine.empty());
  const bool on_device = fused != nullptr;
  if (!on_device) {
    t.fused_.resize(at[n]);
    fused = t.fused_.data();
    if (mine.empty()) std::fill(t.fused_.begin(), t.fused_.end(), 0.0f);
  }
  // Each slice's gradient is a mean over its points: weight it by its share of the batch.
  const float share = static_cast<float>(b1 - b0) / static_cast<float>(B);
  if (!mine.empty())
    for (int l = 0; l < n; ++l) t.backend_->ExportGradient(l, fused + at[l], share);
  t.phases_.backward += Seconds(t0);
  t0 = Clock::now();
  t.comm_->Allreduce(fused, at[n], ReduceOp::kSum, Traffic::kGradients);
  t.phases_.comm += Seconds(t0);
  t0 = Clock::now();
  for (int l = 0; l < n; ++l) t.backend_->ApplyGradient(l, fused + at[l], step);
  t.phases_.update += Seconds(t0);
  double weighted = loss * static_cast<double>(b1 - b0);
  t.comm_->Allreduce(&weighted, 1, ReduceOp::kSum, Traffic::kControl);
  return weighted / static_cast<double>(B);
}

std::unique_ptr<StepStrategy> MakeStepStrategy(Strategy strategy) {
  if (strategy == Strategy::kDataParallel) return std::make_unique<DataParallelStep>();
  return std::make_unique<ModelParallelStep>();
}

}  // namespace dslide
