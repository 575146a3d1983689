// P@k bookkeeping (XC convention: P@k = hits in the top k / k, averaged over all points).
#include "train/evaluator.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dslide {

double EvalResult::At(int kk) const {
  for (size_t i = 0; i < k.size(); ++i)
    if (k[i] == kk) return p_at_k[i];
  return std::numeric_limits<double>::quiet_NaN();
}

PrecisionCounter::PrecisionCounter(std::vector<int> k) : k_(std::move(k)), hits_(k_.size(), 0.0) {
  for (int v : k_) kmax_ = std::max(kmax_, v);
}

void PrecisionCounter::Add(const int32_t* ranked, int kmax, const int32_t* labels,
                           int64_t num_labels) {
  int hits = 0;
  for (int j = 0; j < kmax; ++j) {
    if (ranked[j] >= 0 && std::binary_search(labels, labels + num_labels, ranked[j])) ++hits;
    for (size_t c = 0; c < k_.size(); ++c)
      if (k_[c] == j + 1) hits_[c] += static_cast<double>(hits) / k_[c];
  }
  ++points_;
}

EvalResult PrecisionCounter::Result() const {
  EvalResult r;
  r.k = k_;
  r.points = points_;
  for (double h : hits_) r.p_at_k.push_back(points_ ? h / points_ : 0.0);
  return r;
}

}  // namespace dslide
