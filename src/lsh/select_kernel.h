// Budget selection and bucket filling as templates over their storage, shared by the CPU
// backend (stamp arrays over the shard, see BudgetSampler) and the CUDA kernels (a small
// per-sample hash set), so both backends choose the same active neurons from the same
// tables and random streams.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/hd.h"
#include "common/rng.h"
#include "config/lsh_config.h"

namespace dslide {

/// Moves a uniform random subset of size k of v[0..n) to its front (partial Fisher-Yates).
DSLIDE_HD inline void SampleDown(int32_t* v, int64_t n, int64_t k, Rng* rng) {
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng->Below(n - i));
    const int32_t t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/// Sorts v[0, n) in place by `less` (heap sort: no allocation, on one device thread too;
/// for a strict total order the same result as std::sort).
template <class Less>
DSLIDE_HD void HeapSort(int32_t* v, int64_t n, const Less& less) {
  auto sift = [v, &less](int64_t root, int64_t end) {
    while (2 * root + 1 < end) {
      int64_t c = 2 * root + 1;
      if (c + 1 < end && less(v[c], v[c + 1])) ++c;
      if (!less(v[root], v[c])) return;
      const int32_t t = v[root];
      v[root] = v[c];
      v[c] = t;
      root = c;
    }
  };
  for (int64_t i = n / 2 - 1; i >= 0; --i) sift(i, n);
  for (int64_t end = n - 1; end > 0; --end) {
    const int32_t t = v[0];
    v[0] = v[end];
    v[end] = t;
    sift(0, end);
  }
}
DSLIDE_HD inline void HeapSort(int32_t* v, int64_t n) {
  HeapSort(v, n, [](int32_t a, int32_t b) { return a < b; });
}

/// Sorts ids ascending: std::sort on the host (faster), HeapSort on a device thread; the
/// same result either way.
DSLIDE_HD inline void SortIds(int32_t* v, int64_t n) {
#if defined(__CUDA_ARCH__)
  HeapSort(v, n);
#else
  std::sort(v, v + n);
#endif
}

/// Drops repeats from the sorted v[0, n); returns the new length (std::unique).
DSLIDE_HD inline int64_t Unique(int32_t* v, int64_t n) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (m == 0 || v[m - 1] != v[i]) v[m++] = v[i];
  return m;
}

/// Shuffles v[0, n) (Fisher-Yates from the back).
DSLIDE_HD inline void Shuffle(int32_t* v, int64_t n, Rng* rng) {
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng->Below(i + 1));
    const int32_t t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/// Whether the sorted v[0, n) holds x.
DSLIDE_HD inline bool SortedHas(const int32_t* v, int64_t n, int32_t x) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (v[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && v[lo] == x;
}

/// The room BatchFillInto needs for (n, count).
DSLIDE_HD inline int64_t BatchFillRoom(int64_t n, int64_t count) {
  count = count < n ? count : n;
  return count <= 0 ? 0 : count > n / 2 ? n : count;
}

/// The batch's common fill (BudgetSampler::BatchFill) into out[0, BatchFillRoom(n, count)):
/// min(count, n) distinct ids drawn uniformly from [0, n), in random order. Returns how many.
DSLIDE_HD inline int64_t BatchFillInto(int64_t n, int64_t count, Rng* rng, int32_t* out) {
  count = count < n ? count : n;
  if (count <= 0) return 0;
  if (count > n / 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(i);
    SampleDown(out, n, count, rng);
    return count;
  }
  // Draw, sort, drop repeats, top up; then shuffle away the sorted order.
  int64_t k = 0;
  while (k < count) {
    while (k < count) out[k++] = static_cast<int32_t>(rng->Below(n));
    SortIds(out, k);
    k = Unique(out, k);
  }
  Shuffle(out, count, rng);
  return count;
}

/// The shared list of FillPolicy::kBatch (BudgetSampler::BatchList) for a shard [begin, end):
/// the batch's labels that the shard owns (local ids, in random order; none when `labels`
/// is null), then a BatchFillInto of `count` ids not already listed. `fill` holds
/// BatchFillRoom(end - begin, count) ids, `own` 2 * n_labels, `out` n_labels plus the fill's
/// room. Returns the list's length; the number of labels listed first into *listed (when
/// given). One implementation for the CPU and a device thread.
DSLIDE_HD inline int64_t BatchListInto(int64_t begin, int64_t end, int64_t count,
                                       const int32_t* labels, int64_t n_labels, Rng* rng,
                                       int32_t* fill, int32_t* own, int32_t* out,
                                       int64_t* listed = nullptr) {
  const int64_t k = BatchFillInto(end - begin, count, rng, fill);
  if (listed != nullptr) *listed = 0;
  if (labels == nullptr) {
    for (int64_t i = 0; i < k; ++i) out[i] = fill[i];
    return k;
  }
  // In-batch negatives first: the labels this shard owns in the batch, then the random set.
  int64_t m = 0;
  for (int64_t j = 0; j < n_labels; ++j)
    if (labels[j] >= begin && labels[j] < end) own[m++] = static_cast<int32_t>(labels[j] - begin);
  SortIds(own, m);
  m = Unique(own, m);
  int32_t* sorted = own + m;
  for (int64_t i = 0; i < m; ++i) sorted[i] = own[i];
  Shuffle(own, m, rng);
  int64_t o = 0;
  for (int64_t i = 0; i < m; ++i) out[o++] = own[i];
  for (int64_t i = 0; i < k; ++i)
    if (!SortedHas(sorted, m, fill[i])) out[o++] = fill[i];
  if (listed != nullptr) *listed = m;
  return o;
}

/// The random stream of bucket b of table t in a table build seeded with `seed`.
DSLIDE_HD inline uint64_t BucketSeed(uint64_t seed, int t, uint32_t b) {
  return StreamSeed(seed, 0x7461626c65, static_cast<uint64_t>(t), b);
}

/// Offers items[0..count) (increasing ids) to a bucket of `capacity` slots: a full bucket
/// keeps a uniform sample (reservoir, Vitter's algorithm R: the k-th item replaces a random
/// slot with probability capacity/(k+1)) or the newest items (FIFO). Writes
/// min(count, capacity) slots.
DSLIDE_HD inline void FillBucket(const int32_t* items, int64_t count, int capacity, bool fifo,
                                 uint64_t seed, int32_t* slots) {
  if (count <= capacity || fifo) {
    for (int64_t k = 0; k < count; ++k) slots[k % capacity] = items[k];
    return;
  }
  // Reservoir: an item is read only when it takes a slot (about capacity * ln(count /
  // capacity) times), so the loop carries the random stream alone.
  for (int64_t k = 0; k < capacity; ++k) slots[k] = items[k];
  Rng rng(seed);  // seeded only for buckets that overflow
  for (int64_t k = capacity; k < count; ++k) {
    const uint64_t j = rng.Below(static_cast<uint64_t>(k) + 1);
    if (j < static_cast<uint64_t>(capacity)) slots[j] = items[k];
  }
}

/// Writes the active local ids of one sample to `out` and returns how many: the `forced`
/// ids first (always kept), then candidates from the sample's bucket in each table until
/// `budget` is reached (candidates take at most policy.lsh_share of the slots beyond the
/// forced ids; budget raised to (forced ids) + `min_negatives` where the forced ids would
/// leave fewer negatives; never beyond the shard) (vanilla: tables in random order; top-k: by
/// collision count, the tie at the cut sampled uniformly; threshold: >= threshold collisions,
/// sampled down), then the batch's shared fill `shared` (FillPolicy::kBatch), then uniform random
/// ids unless the fill policy is kStop. No id repeats.
///
/// Tables: num_tables() and Get(t, bucket) -> {ids, size}. Marks, the per-call state over
/// the shard's n = marks.size() ids: BeginCall(), Stamped/Stamp/Unstamp(id),
/// Count/SetCount/AddCount(id), SortByCount(v, n) (count descending, then id ascending),
/// and arrays Cand() (room for every candidate, and for n ids when 2 * budget > n),
/// Order() (num_tables()).

/// How a sample's active set is chosen (docs/user-guide.md, "Sampling and the update"): the query
/// strategy (and its threshold), the fill, and the share of the slots beyond the forced ids that
/// LSH candidates may take (the rest comes from the fill, which keeps uniform negatives in every
/// active set).
struct SelectPolicy {
  QueryStrategy query = QueryStrategy::kVanilla;
  int threshold = 2;
  FillPolicy fill = FillPolicy::kBatch;
  float lsh_share = 1.0f;
};

/// How likely each negative of a sample's active set was to be drawn, from what its selection
/// counted: the log-Q correction of a sampled output layer, under the softmax or one-vs-rest
/// (docs/user-guide.md, "Sampling and the update"). Three sources draw the negatives, each with a
/// known chance per neuron:
/// - the LSH candidates' pool (the neurons met in the sample's buckets), of which the query
///   keeps a share: vanilla and threshold keep `lsh` of the pool's neurons met at least
///   `min_count` times (vanilla: the tables it walked, each neuron counted once); top-k
///   (cut >= 0) keeps every neuron met more than `cut` times and `tie` of those met exactly
///   `cut` times;
/// - the batch's labels (the shared list's first entries), of which the sample took the share
///   `batch` of those still free; a neuron is a batch-mate's label with its own chance
///   (Inclusion::batch_q);
/// - the uniform draws, which reach every free neuron with chance `uniform`.
/// Sources are taken as independent: a neuron's chance is 1 - the product of the misses.
struct InclusionRates {
  float lsh = 0.0f, tie = 0.0f, batch = 0.0f, uniform = 0.0f;
  int min_count = 1, cut = -1;
};

/// A neuron's chance of being among a sample's negatives, in [1e-30, 1]: `count` its
/// collisions in the LSH pool (0: not in it), `batch_q` its chance of being a batch-mate's
/// label. Floored at 1e-30 (a neuron the rates give no chance is never drawn).
DSLIDE_HD inline float InclusionChance(const InclusionRates& r, int count, float batch_q) {
  float pl = 0.0f;
  if (r.cut >= 0)
    pl = count > r.cut ? 1.0f : (count > 0 && count == r.cut ? r.tie : 0.0f);
  else if (count > 0 && count >= r.min_count)
    pl = r.lsh;
  const float pb = batch_q * r.batch, pu = r.uniform;
  // 1 - (1 - pl)(1 - pb)(1 - pu), expanded: no cancellation when every chance is small.
  float pi = pl + pb + pu - pl * pb - pl * pu - pb * pu + pl * pb * pu;
  return pi < 1e-30f ? 1e-30f : (pi > 1.0f ? 1.0f : pi);
}

/// The natural log of a chance p in [1e-30, 1]: within 2.6 ulp of the exact log (libm's
/// logf: 0.8; the two differ on 1.2 % of the floats there), exactly 0 at 1 and negative
/// below it. Branch-free, so that a loop of it vectorises: 0.22 ns a value against logf's
/// 2.1 (a call per value, which was half of a sample's selection under the log-Q
/// correction). p = 2^e m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1) /
/// (m + 1), |s| <= 0.1716, whose odd series to s^9 leaves under 1e-9.
DSLIDE_HD inline float LogOfChance(float p) {
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  // The bits of sqrt(1/2), where the range of m starts.
  constexpr uint32_t kSqrtHalf = 0x3f3504f3u;
  const uint32_t t = bits - kSqrtHalf;
  const float e = static_cast<float>(static_cast<int32_t>(t) >> 23);
  const uint32_t mbits = (t & 0x007fffffu) + kSqrtHalf;
  float m;
  std::memcpy(&m, &mbits, sizeof m);
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  const float series =
      s * (2.0f + s2 * (2.0f / 3 + s2 * (2.0f / 5 + s2 * (2.0f / 7 + s2 * (2.0f / 9)))));
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2's leading bits: e * it is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  return e * kLn2Hi + (series + e * kLn2Lo);
}

/// The log of InclusionChance (at most 0).
DSLIDE_HD inline float LogInclusion(const InclusionRates& r, int count, float batch_q) {
  return LogOfChance(InclusionChance(r, count, batch_q));
}

/// The uniform draws' chance per free neuron: `drawn` of the `free` neurons not yet taken.
DSLIDE_HD inline float UniformRate(int64_t drawn, int64_t free) {
  return free > 0 ? static_cast<float>(drawn) / static_cast<float>(free) : 0.0f;
}

/// A share `num / den` (0 where den is 0).
DSLIDE_HD inline float ShareOf(int64_t num, int64_t den) {
  return den > 0 ? static_cast<float>(num) / static_cast<float>(den) : 0.0f;
}

/// The log-Q correction's inputs and output for SelectIds.
struct Inclusion {
  /// Per neuron of the shard: the chance that one of a sample's batch-mates has it as a
  /// label, 1 - (1 - f)^(B - 1), f the share of training points with that label.
  const float* batch_q = nullptr;
  int64_t batch_labels = 0;  ///< the shared list's first entries that are the batch's labels
  float* log_q = nullptr;    ///< out, per active id: LogInclusion (0 for the forced ids)
};

/// SelectIds' last step: ids beyond the candidates and the batch's fill, up to `budget`,
/// unless the fill policy is kStop: a uniform sample of the unstamped ids where more than
/// half of them are needed (dense fill), else uniform draws. Returns the new count.
template <class Marks>
DSLIDE_HD int64_t SelectFillRest(FillPolicy fill, int64_t budget, int64_t k, Rng* rng, Marks& s,
                                 int32_t* out) {
  const int64_t n = s.size();
  if (k < budget && fill != FillPolicy::kStop) {
    const int64_t free = n - k;
    if (budget - k > free / 2) {
      // Dense fill: scan the remaining ids and sample uniformly among them.
      int32_t* rest = s.Cand();
      int64_t nr = 0;
      for (int32_t i = 0; i < n; ++i)
        if (!s.Stamped(i)) rest[nr++] = i;
      const int64_t need = budget - k;
      SampleDown(rest, nr, need, rng);
      for (int64_t i = 0; i < need; ++i) out[k + i] = rest[i];
      k += need;
    } else {
      while (k < budget) {
        const int32_t id = static_cast<int32_t>(rng->Below(n));
        if (!s.Stamped(id)) {
          s.Stamp(id);
          out[k++] = id;
        }
      }
    }
  }
  return k;
}

/// The start of SelectIds: the forced ids, each stamped and written to out once (their
/// number to *k), the budget (raised to *k + min_negatives, at most the shard; *budget)
/// and the slots LSH candidates may take (*room). Returns whether the set still wants ids
/// beyond these: not when the forced ids fill the budget, nor when the budget is the whole
/// shard (then every unstamped id follows, in order).
template <class Marks>
DSLIDE_HD bool SelectFront(const SelectPolicy& policy, const int32_t* forced, int64_t n_forced,
                           int64_t min_negatives, Marks& s, int32_t* out, int64_t* k,
                           int64_t* budget, int64_t* room) {
  const int64_t n = s.size();
  s.BeginCall();
  int64_t got = 0;
  for (int64_t i = 0; i < n_forced; ++i) {
    if (!s.Stamped(forced[i])) {
      s.Stamp(forced[i]);
      out[got++] = forced[i];
    }
  }
  int64_t b = *budget;
  if (b < got + min_negatives) b = got + min_negatives;
  if (b > n) b = n;
  *k = got;
  *budget = b;
  if (got >= b) return false;
  // Every neuron is wanted: no need to look at tables.
  if (b == n) {
    for (int32_t i = 0; i < n; ++i)
      if (!s.Stamped(i)) out[got++] = i;
    *k = got;
    return false;
  }
  int64_t r = b - got;
  if (policy.lsh_share < 1.0f) {
    const int64_t cap = static_cast<int64_t>(ceilf(policy.lsh_share * static_cast<float>(r)));
    r = cap < 1 ? 1 : cap;
  }
  *room = r;
  return true;
}

/// The tables' random order of a vanilla query: 0..L-1 shuffled.
DSLIDE_HD inline void TableOrder(int32_t* order, int L, Rng* rng) {
  for (int i = 0; i < L; ++i) order[i] = i;
  Shuffle(order, L, rng);
}

template <class Tables, class Marks>
DSLIDE_HD int64_t SelectIds(const SelectPolicy& policy, const Tables* tables,
                            const uint32_t* buckets, const int32_t* forced, int64_t n_forced,
                            int64_t budget, int64_t min_negatives, Rng* rng, Marks& s, int32_t* out,
                            const int32_t* shared, int64_t n_shared,
                            const Inclusion* inc = nullptr) {
  int64_t k = 0, room = 0;
  if (!SelectFront(policy, forced, n_forced, min_negatives, s, out, &k, &budget, &room)) {
    // No negatives, or every neuron of the shard: each drawn for certain.
    if (inc != nullptr)
      for (int64_t i = 0; i < k; ++i) inc->log_q[i] = 0.0f;
    return k;
  }
  const int64_t k_forced = k;
  InclusionRates rates;
  const QueryStrategy query = policy.query;
  const FillPolicy fill = policy.fill;
  const int threshold = policy.threshold;

  int32_t* cand = s.Cand();
  int64_t nc = 0;
  if (tables != nullptr) {
    const int L = tables->num_tables();
    if (query == QueryStrategy::kVanilla) {
      // Tables in random order, whole tables at a time, until the budget is met.
      int32_t* order = s.Order();
      TableOrder(order, L, rng);
      for (int i = 0; i < L && nc < room; ++i) {
        const auto b = tables->Get(order[i], buckets[order[i]]);
        for (int32_t j = 0; j < b.size; ++j) {
          const int32_t id = b.ids[j];
          if (!s.Stamped(id)) {
            s.Stamp(id);
            if (inc != nullptr) s.SetCount(id, 1);  // in the pool the walk met
            cand[nc++] = id;
          }
        }
      }
      rates.lsh = nc > room ? ShareOf(room, nc) : 1.0f;
      if (nc > room) SampleDown(cand, nc, room, rng);
      for (int64_t i = room; i < nc; ++i) s.Unstamp(cand[i]);  // must not block the fill
    } else {
      // Count collisions over all tables (forced ids are stamped already and not counted).
      for (int t = 0; t < L; ++t) {
        const auto b = tables->Get(t, buckets[t]);
        for (int32_t j = 0; j < b.size; ++j) {
          const int32_t id = b.ids[j];
          if (!s.Stamped(id)) {
            s.Stamp(id);
            s.SetCount(id, 1);
            cand[nc++] = id;
          } else if (s.Count(id) > 0) {
            s.AddCount(id);
          }
        }
      }
      for (int64_t i = 0; i < k; ++i) s.SetCount(out[i], 0);
      // Only the chosen candidates are stamped again (below); the others must not block
      // the fill.
      for (int64_t i = 0; i < nc; ++i) s.Unstamp(cand[i]);
      if (query == QueryStrategy::kThreshold) {
        int64_t kept = 0;
        for (int64_t i = 0; i < nc; ++i) {
          if (s.Count(cand[i]) >= threshold)
            cand[kept++] = cand[i];
          else
            s.SetCount(cand[i], 0);  // out of the pool (counts are zero between calls)
        }
        nc = kept;
        rates.min_count = threshold;
        rates.lsh = nc > room ? ShareOf(room, nc) : 1.0f;
        if (nc > room) SampleDown(cand, nc, room, rng);
      } else if (nc <= room) {
        rates.cut = 0;  // top-k keeps every candidate
      } else {
        // Top-k: sort by count; the tied group at the cut is sampled uniformly.
        s.SortByCount(cand, nc);
        const int cut = s.Count(cand[room - 1]);
        int64_t lo = room - 1, hi = room;
        while (lo > 0 && s.Count(cand[lo - 1]) == cut) --lo;
        while (hi < nc && s.Count(cand[hi]) == cut) ++hi;
        rates.cut = cut;
        rates.tie = ShareOf(room - lo, hi - lo);
        SampleDown(cand + lo, hi - lo, room - lo, rng);
      }
    }
    // The chosen candidates are stamped (again, for vanilla) and appended.
    const int64_t take = nc < room ? nc : room;
    for (int64_t i = 0; i < take; ++i) {
      s.Stamp(cand[i]);
      out[k + i] = cand[i];
    }
    k += take;
  }
  const int64_t k_lsh = k;
  // The batch's shared list: its labels first (counted while free, for their share taken),
  // then its uniform set.
  const int64_t n_labels = inc != nullptr ? inc->batch_labels : 0;
  int64_t free_labels = 0, taken_labels = 0;
  if (k < budget && fill == FillPolicy::kBatch) {
    for (int64_t j = 0; j < n_shared && (k < budget || j < n_labels); ++j) {
      const int32_t id = shared[j];
      if (s.Stamped(id)) continue;
      free_labels += j < n_labels ? 1 : 0;
      if (k < budget) {
        s.Stamp(id);
        out[k++] = id;
        taken_labels += j < n_labels ? 1 : 0;
      }
    }
  }
  const int64_t total = SelectFillRest(fill, budget, k, rng, s, out);
  if (inc != nullptr) {
    const int64_t before_uniform = k_lsh + taken_labels;
    rates.batch = ShareOf(taken_labels, free_labels);
    rates.uniform = UniformRate(total - before_uniform, s.size() - before_uniform);
    float* log_q = inc->log_q;
    for (int64_t i = 0; i < k_forced; ++i) log_q[i] = 0.0f;
    for (int64_t i = k_forced; i < total; ++i)
      log_q[i] = InclusionChance(rates, s.Count(out[i]), inc->batch_q[out[i]]);
    // Apart from the gathers above, so that this loop vectorises.
    for (int64_t i = k_forced; i < total; ++i) log_q[i] = LogOfChance(log_q[i]);
  }
  // Counts are zero between calls (the pool's, which InclusionChance read, cleared).
  if (inc != nullptr || (tables != nullptr && query != QueryStrategy::kVanilla))
    for (int64_t i = 0; i < nc; ++i) s.SetCount(cand[i], 0);
  return total;
}

}  // namespace dslide
