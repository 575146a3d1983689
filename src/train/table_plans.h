// The LSH tables' rebuild policy, above the seam and the same for every backend: each sparse
// layer's last build (its hash functions' draw and its build count) and the seeds of the
// next, derived here only. The trainer builds the first tables after Init, rebuilds on the
// schedule (new hash functions every --rehash-every), after keep-best restores weights and
// after a resharded resume, and restores the counts a checkpoint holds.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/layer_backend.h"
#include "model/model.h"

namespace dslide {

class TablePlans {
 public:
  TablePlans() = default;
  /// The plans of `spec`'s sparse layers on this rank (spec.rank), from the run's seed.
  TablePlans(const ModelSpec& spec, uint64_t seed);

  /// Every sparse layer's first tables: hash functions of draw 1, build 1.
  void BuildFirst(LayerBackend* backend);
  /// BuildFirst's plans without building (a model loaded for scoring alone: its tables are
  /// imported or built from the loaded weights, as after BuildFirst).
  void PlanFirst();
  /// Every sparse layer's tables built again with the hash functions they have.
  void Rebuild(LayerBackend* backend);
  /// Every sparse layer's tables built again with the next draw of hash functions.
  void Redraw(LayerBackend* backend);
  /// One layer's tables built again with the hash functions it has.
  void RebuildLayer(LayerBackend* backend, int layer);
  /// One layer's tables built again as its last build was (a resharded resume: the
  /// checkpoint's counts, the tables made from the loaded weights).
  void RepeatLast(LayerBackend* backend, int layer);

  /// The plan of tables a checkpoint holds (their draw and build count), kept as the layer's
  /// last build.
  RebuildPlan Restore(int layer, int64_t hash_version, int64_t rebuild);
  /// The layer's last build.
  const RebuildPlan& last(int layer) const { return last_[static_cast<size_t>(layer)]; }

 private:
  RebuildPlan Plan(int layer, int64_t hash_version, int64_t rebuild) const;
  void Build(LayerBackend* backend, int layer, int64_t hash_version, int64_t rebuild);

  uint64_t seed_ = 0;
  int rank_ = 0;
  std::vector<bool> sparse_;
  std::vector<RebuildPlan> last_;
};

}  // namespace dslide
