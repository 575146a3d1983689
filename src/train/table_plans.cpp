#include "train/table_plans.h"

#include "common/rng.h"
#include "model/backend_streams.h"

namespace dslide {

TablePlans::TablePlans(const ModelSpec& spec, uint64_t seed) : seed_(seed), rank_(spec.rank) {
  for (const LayerSpec& l : spec.layers) sparse_.push_back(!l.dense());
  last_.resize(spec.layers.size());
}

RebuildPlan TablePlans::Plan(int layer, int64_t hash_version, int64_t rebuild) const {
  // Both from the run's seed, the layer and the rank: any backend with the same weights
  // builds the same tables.
  RebuildPlan p;
  p.hash_version = hash_version;
  p.hash_seed = StreamSeed(seed_, streams::kHash, static_cast<uint64_t>(layer),
                           static_cast<uint64_t>(hash_version), static_cast<uint64_t>(rank_));
  p.rebuild = rebuild;
  p.table_seed = StreamSeed(seed_, streams::kHash, static_cast<uint64_t>(layer),
                            static_cast<uint64_t>(rebuild), static_cast<uint64_t>(rank_));
  return p;
}

void TablePlans::Build(LayerBackend* backend, int layer, int64_t hash_version, int64_t rebuild) {
  const RebuildPlan p = Plan(layer, hash_version, rebuild);
  backend->RebuildTables(layer, p);
  last_[static_cast<size_t>(layer)] = p;
}

void TablePlans::BuildFirst(LayerBackend* backend) {
  for (size_t l = 0; l < sparse_.size(); ++l)
    if (sparse_[l]) Build(backend, static_cast<int>(l), 1, 1);
}

void TablePlans::PlanFirst() {
  for (size_t l = 0; l < sparse_.size(); ++l)
    if (sparse_[l]) last_[l] = Plan(static_cast<int>(l), 1, 1);
}

void TablePlans::Rebuild(LayerBackend* backend) {
  for (size_t l = 0; l < sparse_.size(); ++l)
    if (sparse_[l]) RebuildLayer(backend, static_cast<int>(l));
}

void TablePlans::Redraw(LayerBackend* backend) {
  for (size_t l = 0; l < sparse_.size(); ++l)
    if (sparse_[l])
      Build(backend, static_cast<int>(l), last_[l].hash_version + 1, last_[l].rebuild + 1);
}

void TablePlans::RebuildLayer(LayerBackend* backend, int layer) {
  const RebuildPlan& p = last(layer);
  Build(backend, layer, p.hash_version, p.rebuild + 1);
}

void TablePlans::RepeatLast(LayerBackend* backend, int layer) {
  const RebuildPlan p = last(layer);
  Build(backend, layer, p.hash_version, p.rebuild);
}

RebuildPlan TablePlans::Restore(int layer, int64_t hash_version, int64_t rebuild) {
  // Checkpoints of earlier versions may hold 0 for a layer never redrawn.
  const RebuildPlan p = Plan(layer, hash_version > 1 ? hash_version : 1, rebuild);
  last_[static_cast<size_t>(layer)] = p;
  return p;
}

}  // namespace dslide
