// Budget selection: vanilla, top-k by collision count, hard threshold; then uniform
// sampling down to the budget or uniform random filling up to it.
#include "budget_sampler.h"

#include <algorithm>
#include <numeric>

#include "error.h"

namespace dslide {

namespace {
/// Moves a uniform random subset of size k of v[0..n) to its front (partial Fisher-Yates).
void SampleDown(int32_t* v, int64_t n, int64_t k, Rng* rng) {
  for (int64_t i = 0; i < k; ++i) std::swap(v[i], v[i + static_cast<int64_t>(rng->Below(n - i))]);
}
}  // namespace

int64_t BudgetSampler::Select(const LshTables* tables, const uint32_t* buckets,
                              const int32_t* forced, int64_t n_forced, int64_t budget, Rng* rng,
                              SamplerScratch* s, int32_t* out,
                              const std::vector<int32_t>* shared) const {
  const int64_t n = s->size();
  budget = std::min(budget, n);
  if (++s->epoch_ == 0) {  // stamps wrapped: clear them once every 2^32 calls
    std::fill(s->stamp_.begin(), s->stamp_.end(), 0);
    s->epoch_ = 1;
  }
  const uint32_t ep = s->epoch_;
  int64_t k = 0;
  for (int64_t i = 0; i < n_forced; ++i) {
    if (s->stamp_[forced[i]] != ep) {
      s->stamp_[forced[i]] = ep;
      out[k++] = forced[i];
    }
  }
  if (k >= budget) return k;
  const int64_t room = budget - k;

  // Every neuron is wanted: no need to look at tables.
  if (budget == n) {
    for (int32_t i = 0; i < n; ++i)
      if (s->stamp_[i] != ep) out[k++] = i;
    return k;
  }

  auto& cand = s->cand_;
  cand.clear();
  if (tables != nullptr) {
    const int L = tables->num_tables();
    if (query_ == QueryStrategy::kVanilla) {
      // Tables in random order, whole tables at a time, until the budget is met.
      auto& order = s->order_;
      order.resize(L);
      std::iota(order.begin(), order.end(), 0);
      for (int i = L - 1; i > 0; --i) std::swap(order[i], order[rng->Below(i + 1)]);
      for (int i = 0; i < L && static_cast<int64_t>(cand.size()) < room; ++i) {
        const auto b = tables->Get(order[i], buckets[order[i]]);
        for (int32_t j = 0; j < b.size; ++j) {
          const int32_t id = b.ids[j];
          if (s->stamp_[id] != ep) {
            s->stamp_[id] = ep;
            cand.push_back(id);
          }
        }
      }
      if (static_cast<int64_t>(cand.size()) > room) SampleDown(cand.data(), cand.size(), room, rng);
    } else {
      // Count collisions over all tables (forced ids are stamped already and not counted).
      const uint32_t mark = ep;
      for (int t = 0; t < L; ++t) {
        const auto b = tables->Get(t, buckets[t]);
        for (int32_t j = 0; j < b.size; ++j) {
          const int32_t id = b.ids[j];
          if (s->stamp_[id] != mark) {
            s->stamp_[id] = mark;
            s->count_[id] = 1;
            cand.push_back(id);
          } else if (s->count_[id] > 0) {
            ++s->count_[id];
          }
        }
      }
      // Forced ids carry count 0 from a previous call at most; make sure they never rank.
      for (int64_t i = 0; i < k; ++i) s->count_[out[i]] = 0;
      auto& collected = s->order_;  // every id stamped above, to undo stamps and counts
      collected.assign(cand.begin(), cand.end());
      if (query_ == QueryStrategy::kThreshold) {
        auto keep = std::remove_if(cand.begin(), cand.end(),
                                   [&](int32_t id) { return s->count_[id] < threshold_; });
        cand.erase(keep, cand.end());
        if (static_cast<int64_t>(cand.size()) > room) SampleDown(cand.data(), cand.size(), room, rng);
      } else if (static_cast<int64_t>(cand.size()) > room) {
        // Top-k: sort by count; the tied group at the cut is sampled uniformly.
        std::sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) {
          return s->count_[a] != s->count_[b] ? s->count_[a] > s->count_[b] : a < b;
        });
        const uint16_t cut = s->count_[cand[room - 1]];
        int64_t lo = room - 1, hi = room;
        while (lo > 0 && s->count_[cand[lo - 1]] == cut) --lo;
        while (hi < static_cast<int64_t>(cand.size()) && s->count_[cand[hi]] == cut) ++hi;
        SampleDown(cand.data() + lo, hi - lo, room - lo, rng);
      }
      for (int32_t id : collected) {
        s->count_[id] = 0;
        s->stamp_[id] = ep - 1;
      }
      for (int32_t id : cand) s->stamp_[id] = ep;
    }
    const int64_t take = std::min<int64_t>(room, cand.size());
    // Unselected candidates must not block the random fill below: unstamp them.
    for (size_t i = take; i < cand.size(); ++i) s->stamp_[cand[i]] = ep - 1;
    std::copy(cand.begin(), cand.begin() + take, out + k);
    k += take;
  }
  if (k < budget && fill_ == FillPolicy::kBatch && shared != nullptr) {
    for (size_t j = 0; j < shared->size() && k < budget; ++j) {
      const int32_t id = (*shared)[j];
      if (s->stamp_[id] != ep) {
        s->stamp_[id] = ep;
        out[k++] = id;
      }
    }
  }
  if (k < budget && fill_ != FillPolicy::kStop) {
    const int64_t free = n - k;
    if (budget - k > free / 2) {
      // Dense fill: scan the remaining ids and sample uniformly among them.
      auto& rest = s->cand_;
      rest.clear();
      for (int32_t i = 0; i < n; ++i)
        if (s->stamp_[i] != ep) rest.push_back(i);
      const int64_t need = budget - k;
      SampleDown(rest.data(), rest.size(), need, rng);
      std::copy(rest.begin(), rest.begin() + need, out + k);
      k += need;
    } else {
      while (k < budget) {
        const int32_t id = static_cast<int32_t>(rng->Below(n));
        if (s->stamp_[id] != ep) {
          s->stamp_[id] = ep;
          out[k++] = id;
        }
      }
    }
  }
  return k;
}

void BudgetSampler::BatchFill(int64_t n, int64_t count, Rng* rng, std::vector<int32_t>* out) {
  count = std::min(count, n);
  out->clear();
  if (count <= 0) return;
  if (count > n / 2) {
    out->resize(n);
    std::iota(out->begin(), out->end(), 0);
    for (int64_t i = 0; i < count; ++i) std::swap((*out)[i], (*out)[i + rng->Below(n - i)]);
    out->resize(count);
    return;
  }
  // Draw, sort, drop repeats, top up; then shuffle away the sorted order.
  while (static_cast<int64_t>(out->size()) < count) {
    while (static_cast<int64_t>(out->size()) < count)
      out->push_back(static_cast<int32_t>(rng->Below(n)));
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
  }
  for (int64_t i = count - 1; i > 0; --i) std::swap((*out)[i], (*out)[rng->Below(i + 1)]);
}

}  // namespace dslide
