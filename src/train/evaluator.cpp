// P@k bookkeeping (XC convention: P@k = hits in the top k / k, averaged over all points).
#include "evaluator.h"

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

void MergeTopK(const std::vector<int32_t>& ids, const std::vector<float>& scores, int ranks,
               int64_t batch, int k, std::vector<int32_t>* out, std::vector<float>* out_scores) {
  out->assign(batch * k, -1);
  if (out_scores) out_scores->assign(batch * k, -std::numeric_limits<float>::infinity());
  std::vector<std::pair<float, int32_t>> cand;
  for (int64_t i = 0; i < batch; ++i) {
    cand.clear();
    for (int r = 0; r < ranks; ++r)
      for (int j = 0; j < k; ++j) {
        const size_t o = (static_cast<size_t>(r) * batch + i) * k + j;
        if (ids[o] >= 0) cand.push_back({scores[o], ids[o]});
      }
    const size_t take = std::min<size_t>(k, cand.size());
    std::partial_sort(cand.begin(), cand.begin() + take, cand.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (size_t j = 0; j < take; ++j) {
      (*out)[i * k + j] = cand[j].second;
      if (out_scores) (*out_scores)[i * k + j] = cand[j].first;
    }
  }
}

}  // namespace dslide
