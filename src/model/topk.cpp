#include "model/topk.h"

#include <algorithm>
#include <limits>

namespace dslide {

void TopKSelector::Take(int k, int32_t* ids, float* scores) {
  const size_t take = std::min<size_t>(static_cast<size_t>(std::max(k, 0)), cand_.size());
  std::partial_sort(cand_.begin(), cand_.begin() + take, cand_.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  for (int j = 0; j < k; ++j) {
    const bool have = static_cast<size_t>(j) < take;
    ids[j] = have ? cand_[j].second : -1;
    if (scores != nullptr)
      scores[j] = have ? cand_[j].first : -std::numeric_limits<float>::infinity();
  }
}

void MergeTopKLists(const int32_t* ids, const float* scores, int lists, int64_t batch, int k,
                    int32_t* out_ids, float* out_scores) {
  TopKSelector sel;
  for (int64_t i = 0; i < batch; ++i) {
    sel.Clear();
    for (int r = 0; r < lists; ++r) {
      const size_t o = (static_cast<size_t>(r) * batch + i) * k;
      sel.PushAll(scores + o, ids + o, k);
    }
    sel.Take(k, out_ids + i * k, out_scores != nullptr ? out_scores + i * k : nullptr);
  }
}

}  // namespace dslide
