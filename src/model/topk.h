// The one top-k rule of the project: the best k (score, id) candidates, best first, higher
// score first and ties to the smaller id. Used to merge per-thread, per-segment and per-rank
// lists and to rank a sample's sampled outputs.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/hd.h"

namespace dslide {

/// A running top-k list (scores descending, ids beside them; a tie keeps the earlier id, as
/// candidates scanned in id order give the smaller one): (z, id) inserted where it belongs
/// when it beats the k-th, which drops out. On the host and the device.
DSLIDE_HD inline void InsertTopK(float z, int32_t id, int k, float* sc, int32_t* ids) {
  if (!(z > sc[k - 1])) return;
  int p = k - 1;
  while (p > 0 && sc[p - 1] < z) {
    sc[p] = sc[p - 1];
    ids[p] = ids[p - 1];
    --p;
  }
  sc[p] = z;
  ids[p] = id;
}

/// Collects candidates and takes the best k of them. Reuse one selector across samples: its
/// scratch keeps its capacity.
class TopKSelector {
 public:
  void Clear() { cand_.clear(); }
  /// A candidate; ids below 0 (padding of shorter lists) are ignored.
  void Push(float score, int32_t id) {
    if (id >= 0) cand_.emplace_back(score, id);
  }
  /// Pushes n candidates laid out as two arrays.
  void PushAll(const float* scores, const int32_t* ids, int64_t n) {
    for (int64_t j = 0; j < n; ++j) Push(scores[j], ids[j]);
  }
  /// Writes the best k: ids[0..k) and, when not null, scores[0..k); -1 and -inf past the
  /// candidates there are.
  void Take(int k, int32_t* ids, float* scores);

 private:
  std::vector<std::pair<float, int32_t>> cand_;
};

/// Merges L lists of k candidates for each of B samples, laid out list-major
/// ([list][sample][k], -1 ids as padding), into the best k per sample ([sample][k]).
void MergeTopKLists(const int32_t* ids, const float* scores, int lists, int64_t batch, int k,
                    int32_t* out_ids, float* out_scores);

}  // namespace dslide
