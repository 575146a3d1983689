// Budget selection: vanilla, top-k by collision count, hard threshold; then uniform
// sampling down to the budget or uniform random filling up to it.
#include "lsh/budget_sampler.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"
#include "lsh/select_kernel.h"

namespace dslide {

/// SelectIds' marks over stamp arrays covering the whole shard: O(1) per lookup, reused
/// across calls (a new epoch per call instead of clearing).
struct CpuMarks {
  SamplerScratch* s;
  uint32_t ep = 0;
  int64_t size() const { return s->size(); }
  void BeginCall() {
    if (++s->epoch_ == 0) {  // stamps wrapped: clear them once every 2^32 calls
      std::fill(s->stamp_.begin(), s->stamp_.end(), 0);
      s->epoch_ = 1;
    }
    ep = s->epoch_;
  }
  bool Stamped(int32_t id) const { return s->stamp_[id] == ep; }
  void Stamp(int32_t id) { s->stamp_[id] = ep; }
  void Unstamp(int32_t id) { s->stamp_[id] = ep - 1; }
  int Count(int32_t id) const { return s->count_[id]; }
  void SetCount(int32_t id, int c) { s->count_[id] = static_cast<uint16_t>(c); }
  void AddCount(int32_t id) { ++s->count_[id]; }
  void SortByCount(int32_t* v, int64_t n) const {
    std::sort(v, v + n, [this](int32_t a, int32_t b) {
      return s->count_[a] != s->count_[b] ? s->count_[a] > s->count_[b] : a < b;
    });
  }
  int32_t* Cand() { return s->cand_.data(); }
  int32_t* Order() { return s->order_.data(); }
};

int64_t BudgetSampler::Select(const LshTables* tables, const uint32_t* buckets,
                              const int32_t* forced, int64_t n_forced, int64_t budget,
                              int64_t min_negatives, Rng* rng, SamplerScratch* s, int32_t* out,
                              const std::vector<int32_t>* shared,
                              const Inclusion* inclusion) const {
  size_t room = static_cast<size_t>(s->size());
  if (tables != nullptr) {
    room = std::max(room, static_cast<size_t>(tables->num_tables()) * tables->capacity());
    if (s->order_.size() < static_cast<size_t>(tables->num_tables()))
      s->order_.resize(tables->num_tables());
  }
  if (s->cand_.size() < room) s->cand_.resize(room);
  CpuMarks marks{s};
  return SelectIds(policy_, tables, buckets, forced, n_forced, budget, min_negatives, rng, marks,
                   out, shared ? shared->data() : nullptr,
                   shared ? static_cast<int64_t>(shared->size()) : 0, inclusion);
}

void BudgetSampler::BatchFill(int64_t n, int64_t count, Rng* rng, std::vector<int32_t>* out) {
  out->resize(BatchFillRoom(n, count));
  out->resize(BatchFillInto(n, count, rng, out->data()));
}

int64_t BudgetSampler::BatchList(int64_t begin, int64_t end, int64_t budget,
                                 const std::vector<int32_t>* labels, Rng* rng,
                                 std::vector<int32_t>* out) {
  const int64_t nl = labels != nullptr ? static_cast<int64_t>(labels->size()) : 0;
  const int64_t room = BatchFillRoom(end - begin, budget);
  std::vector<int32_t> fill(room), own(2 * nl);
  out->resize(nl + room);
  int64_t listed = 0;
  out->resize(BatchListInto(begin, end, budget, labels != nullptr ? labels->data() : nullptr, nl,
                            rng, fill.data(), own.data(), out->data(), &listed));
  return listed;
}

}  // namespace dslide
