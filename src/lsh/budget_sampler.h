// Picks exactly a fixed budget of active neurons per sample from LSH candidates (D-SLIDE
// section 3.3: a fixed per-rank budget keeps ranks load-balanced).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "config/config.h"
#include "lsh/lsh_table.h"
#include "lsh/select_kernel.h"

namespace dslide {

/// Per-thread scratch over a shard of `n` neurons: visit stamps and collision counts.
class SamplerScratch {
 public:
  explicit SamplerScratch(int64_t n = 0) { Resize(n); }
  void Resize(int64_t n) {
    stamp_.assign(n, 0);
    count_.assign(n, 0);
    epoch_ = 0;
  }
  int64_t size() const { return static_cast<int64_t>(stamp_.size()); }

 private:
  friend class BudgetSampler;
  friend struct CpuMarks;
  std::vector<uint32_t> stamp_;
  std::vector<uint16_t> count_;
  std::vector<int32_t> cand_;
  std::vector<int32_t> order_;
  uint32_t epoch_ = 0;
};

/// Stateless apart from its settings; thread safe with one SamplerScratch per thread.
class BudgetSampler {
 public:
  explicit BudgetSampler(const SelectPolicy& policy) : policy_(policy) {}

  /// Writes the active local ids of one sample to `out` and returns how many.
  /// `forced` (local ids, e.g. the labels this shard owns) come first and always stay;
  /// the rest is drawn from the candidates of `buckets` (one per table; may be null when
  /// `tables` is null, then only filling applies) until `budget` is reached: more
  /// candidates than room are sampled down uniformly (after ranking by collision count for
  /// top-k); fewer are filled with uniform random neurons or left short (FillPolicy::kStop).
  /// With FillPolicy::kBatch the fill takes, in order, the ids of `shared` (the batch's
  /// common random set, see BatchFill) not already chosen, then random ids if it runs out.
  /// The budget is raised to n_forced + min_negatives where the forced ids would leave
  /// fewer negatives (never beyond the shard). `out` must hold
  /// ActiveCap(budget, n_forced, min_negatives, shard) ids. The result has no duplicates.
  int64_t Select(const LshTables* tables, const uint32_t* buckets, const int32_t* forced,
                 int64_t n_forced, int64_t budget, int64_t min_negatives, Rng* rng,
                 SamplerScratch* s, int32_t* out, const std::vector<int32_t>* shared = nullptr,
                 const Inclusion* inclusion = nullptr) const;

  /// The most active ids a sample with `forced` ids can get on a shard of `n` neurons.
  static int64_t ActiveCap(int64_t budget, int64_t forced, int64_t min_negatives, int64_t n) {
    const int64_t want = std::max(budget, forced + min_negatives);
    return std::max(forced, std::min(want, n));
  }

  /// The batch's common fill for FillPolicy::kBatch: min(count, n) distinct ids drawn
  /// uniformly from [0, n), in random order (so every id is equally likely at every
  /// position, and each sample's fill is marginally uniform).
  static void BatchFill(int64_t n, int64_t count, Rng* rng, std::vector<int32_t>* out);

  /// The shared list of FillPolicy::kBatch for a shard [begin, end) of n neurons: the
  /// batch's labels that the shard owns (local ids, in random order; skipped when
  /// `labels` is null), then a BatchFill of `budget` ids not already listed. Returns how many
  /// labels it listed.
  static int64_t BatchList(int64_t begin, int64_t end, int64_t budget,
                           const std::vector<int32_t>* labels, Rng* rng, std::vector<int32_t>* out);

 private:
  SelectPolicy policy_;
};

}  // namespace dslide
