// The LSH settings of a sparse layer: what the backends and the selection code see of the
// options (config.h holds the rest, with the names, parsing and help of every option).
#pragma once

#include <cstdint>

namespace dslide {

/// kAuto (and 0 for K, L and the LSH share) means: chosen from the layer's size (auto_settings.h).
enum class HashFamily { kSrp, kWta, kDwta, kAuto };
enum class InsertPolicy { kReservoir, kFifo };
enum class QueryStrategy { kVanilla, kTopK, kThreshold, kAuto };
enum class FillPolicy { kRandom, kBatch, kStop };

/// LSH settings of a sparse layer (docs/user-guide.md, "Defaults and how they were chosen").
/// Family, K, L and query may be left to ResolveAuto (kAuto, 0), which picks them from the layer's
/// size; backends only ever see resolved settings.
struct LshConfig {
  HashFamily family = HashFamily::kAuto;
  int k = 0;  ///< hash functions concatenated per table (0: auto)
  int l = 0;  ///< tables (0: auto)
  int bucket_capacity = 128;
  int bin_size = 8;  ///< WTA/DWTA bin size m
  InsertPolicy insert = InsertPolicy::kReservoir;
  QueryStrategy query = QueryStrategy::kAuto;
  int threshold = 2;  ///< minimum collisions for the threshold strategy
  FillPolicy fill = FillPolicy::kBatch;
  /// Share of a sample's slots (beyond its labels) that LSH candidates may take; the fill
  /// supplies the rest (0: auto).
  double lsh_share = 0;
  int64_t rebuild_n0 = 50;       ///< first table rebuild after this many iterations
  double rebuild_lambda = 0.05;  ///< interval growth: t-th interval is n0 * e^(lambda t)
  int64_t rehash_every = 1000;   ///< draw new hash functions every this many iterations (0: never)
  bool mips = false;             ///< index rows with the MIPS (norm-completing) transform
  /// Correct a sampled output layer's training logits by the log of each negative's chance of
  /// being drawn (InclusionRates, lsh/select_kernel.h).
  bool log_q = true;

  /// True when no setting is left to ResolveAuto.
  bool resolved() const {
    return family != HashFamily::kAuto && k > 0 && l > 0 && query != QueryStrategy::kAuto &&
           lsh_share > 0;
  }
};

}  // namespace dslide
