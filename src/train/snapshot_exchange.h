// The exchange between the ranks that share a model, per hidden layer (docs/architecture.md, "The
// protocol"): forward, every rank's active (id, value) pairs of each sample are all-gathered into
// the next layer's input ("the snapshot"); backward, the input gradient of that snapshot is
// reduce-scattered back, each rank receiving the summed gradient of its own entries.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/layer_backend.h"
#include "data/batch_rows.h"
#include "dist/communicator.h"
#include "model/model.h"

namespace dslide {

class SnapshotExchange {
 public:
  explicit SnapshotExchange(Communicator* comm) : comm_(comm) {}

  /// Collective: `full` receives, per sample, rank 0's entries of `local` (this layer's
  /// output on each rank, shaped by `s`), then rank 1's, ...; `seg[r * B + i]` how many
  /// entries rank r contributed to sample i. A dense layer sends values only (its ids and
  /// sizes follow from the sharding); a sparse one sends counts, ids and values.
  void Gather(const LayerSpec& s, const BatchRows& local, BatchRows* full,
              std::vector<int64_t>* seg);

  /// Collective, the inverse of Gather: the gradient `full_grad` (laid out like the gathered
  /// snapshot) is summed over ranks and this rank's entries are written to `local_grad` in
  /// the layout of this rank's layer output `act` (which Gather sent).
  void ScatterGrad(const BatchRows& full_grad, const std::vector<int64_t>& seg,
                   const BatchRows& act, BatchRows* local_grad);

  /// Collective: hidden layer `layer`'s output on `backend` becomes layer + 1's input. With
  /// one rank the backend links them itself (Chain: nothing leaves it); where the backend
  /// packs and regroups (InPlaceExchange) the collectives run on its buffers; else the host
  /// view of this rank's output is gathered into layer + 1's staged input.
  void PassForward(LayerBackend* backend, const LayerSpec& s, int layer, std::vector<int64_t>* seg);
  /// Collective, the inverse: layer `layer`'s input gradient becomes layer - 1's delta,
  /// times ReLU' of layer - 1's output (Chain with one rank; else ScatterGrad of
  /// the host views, with `seg` from layer - 1's PassForward).
  void PassBackward(LayerBackend* backend, int layer, const std::vector<int64_t>& seg);

 private:
  /// seg (P x B: rank r's entries of sample i at seg[r * B + i]) from the sharding (dense
  /// layer) or from every rank's `local_n` (gathered), and each rank's total.
  void Segments(const LayerSpec& s, const int64_t* local_n, int64_t B, std::vector<int64_t>* seg,
                std::vector<int64_t>* rank_total);
  std::vector<int64_t> RankTotals(const std::vector<int64_t>& seg) const;

  Communicator* comm_;
  std::vector<float> pack_vals_, gathered_vals_;
  std::vector<int32_t> pack_ids_, gathered_ids_;
};

}  // namespace dslide
