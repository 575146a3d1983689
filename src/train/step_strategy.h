// How a training step turns a batch into an update: one type per --strategy behind one
// small interface, instead of branches in the trainer.
//   ModelParallelStep  (sparse, dense-model-parallel) every layer sharded over the ranks:
//                      each rank computes its neurons for the whole batch, the hidden
//                      layers' active rows are exchanged (SnapshotExchange) and the softmax
//                      normaliser all-reduced; the dense variant differs only in that every
//                      neuron is active (TrainConfig::LayerSparsity).
//   DataParallelStep   (data-parallel) a full replica per rank: each takes its slice of the
//                      batch and the gradients are all-reduced, as Horovod does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/layer_backend.h"
#include "config/config.h"
#include "data/dataset.h"
#include "dist/communicator.h"
#include "model/adam.h"

namespace dslide {

/// What a step strategy may use of its trainer, and nothing more: the model's
/// backpropagation (forward, loss and backward, and with a step the fused update; `queue`:
/// the loss queued in the backend), its backend and communicator, its layer count and the
/// phase clocks.
struct StepContext {
  std::function<std::optional<double>(const Dataset& data, const std::vector<int64_t>& points,
                                      const AdamStep* step, bool queue)>
      backpropagate;
  LayerBackend* backend = nullptr;
  Communicator* comm = nullptr;
  int layers = 0;
  PhaseTimes* phases = nullptr;
};

class StepStrategy {
 public:
  virtual ~StepStrategy() = default;
  /// One step on the batch `points` (the same global batch on every rank): forward, loss,
  /// backward and update. Returns the batch's mean loss (the same on every rank), or none
  /// when it is queued in the backend (Trainer::TakeSteps reads it).
  virtual std::optional<double> Step(const StepContext& c, const Dataset& data,
                                     const std::vector<int64_t>& points, const AdamStep& step) = 0;
  /// True when every rank holds the whole model (the model's communicator is then local).
  virtual bool Replicated() const = 0;
  /// Whether rank `rank` writes its shard into a checkpoint (of replicas, one does).
  virtual bool WritesShard(int rank) const = 0;
};

std::unique_ptr<StepStrategy> MakeStepStrategy(Strategy strategy);

}  // namespace dslide
