#include "train/step_strategy.h"

#include <algorithm>
#include <chrono>

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
  std::optional<double> Step(const StepContext& c, const Dataset& data,
                             const std::vector<int64_t>& points, const AdamStep& step) override {
    return c.backpropagate(data, points, &step, /*queue=*/true);
  }
  bool Replicated() const override { return false; }
  bool WritesShard(int) const override { return true; }
};

/// data-parallel: a replica per rank, its slice of the batch, the fused gradient all-reduced.
class DataParallelStep : public StepStrategy {
 public:
  std::optional<double> Step(const StepContext& c, const Dataset& data,
                             const std::vector<int64_t>& points, const AdamStep& step) override;
  bool Replicated() const override { return true; }
  bool WritesShard(int rank) const override { return rank == 0; }
};

std::optional<double> DataParallelStep::Step(const StepContext& c, const Dataset& data,
                                             const std::vector<int64_t>& points,
                                             const AdamStep& step) {
  // Horovod's algorithm: each replica takes its slice of the global batch, then one
  // all-reduce over a fused buffer of every gradient, then the same update everywhere.
  const int P = c.comm->size(), r = c.comm->rank();
  const int64_t B = static_cast<int64_t>(points.size());
  const int64_t b0 = B * r / P, b1 = B * (r + 1) / P;
  const std::vector<int64_t> mine(points.begin() + b0, points.begin() + b1);
  double loss = mine.empty() ? 0.0 : *c.backpropagate(data, mine, nullptr, false);
  auto t0 = Clock::now();
  const int n = c.layers;
  std::vector<int64_t> at(n + 1, 0);
  for (int l = 0; l < n; ++l) at[l + 1] = at[l] + c.backend->GradientSize(l);
  // The fused buffer: in the backend's device memory when MPI can reduce it there (no
  // copies through the host), else in host memory.
  float* fused = c.backend->ExchangeBuffer(at[n], /*zero=*/mine.empty());
  // Each slice's gradient is a mean over its points: weight it by its share of the batch.
  const float share = static_cast<float>(b1 - b0) / static_cast<float>(B);
  if (!mine.empty())
    for (int l = 0; l < n; ++l) c.backend->ExportGradient(l, fused + at[l], share);
  c.phases->backward += Seconds(t0);
  t0 = Clock::now();
  c.comm->Allreduce(fused, at[n], ReduceOp::kSum, Traffic::kGradients);
  c.phases->comm += Seconds(t0);
  t0 = Clock::now();
  for (int l = 0; l < n; ++l) c.backend->ApplyGradient(l, fused + at[l], step);
  c.phases->update += Seconds(t0);
  double weighted = loss * static_cast<double>(b1 - b0);
  c.comm->Allreduce(&weighted, 1, ReduceOp::kSum, Traffic::kControl);
  return weighted / static_cast<double>(B);
}

std::unique_ptr<StepStrategy> MakeStepStrategy(Strategy strategy) {
  if (strategy == Strategy::kDataParallel) return std::make_unique<DataParallelStep>();
  return std::make_unique<ModelParallelStep>();
}

}  // namespace dslide
