// Precision@k from ranked predictions, and merging of per-rank top-k lists.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "data/dataset.h"

namespace dslide {

struct EvalResult {
  std::vector<int> k;          ///< cut-offs
  std::vector<double> p_at_k;  ///< precision at each cut-off
  int64_t points = 0;
  double seconds = 0;
  /// Mean loss over the labelled points with every output neuron: the full softmax's
  /// cross-entropy (target spread over the labels) or the one-vs-rest sum of binary
  /// cross-entropies; NaN where not computed (LSH-sampled).
  double loss = std::numeric_limits<double>::quiet_NaN();
  double At(int kk) const;  ///< precision at cut-off kk (NaN if not computed)
};

/// Accumulates P@k over samples: `ranked` holds kmax predicted label ids per sample, best
/// first (-1 = none); `labels` the sample's sorted true labels.
class PrecisionCounter {
 public:
  explicit PrecisionCounter(std::vector<int> k);
  void Add(const int32_t* ranked, int kmax, const int32_t* labels, int64_t num_labels);
  EvalResult Result() const;
  int max_k() const { return kmax_; }

 private:
  std::vector<int> k_;
  std::vector<double> hits_;
  int64_t points_ = 0;
  int kmax_ = 0;
};

}  // namespace dslide
