// The selection kernel: a sample's active set from its buckets (Select), on the CPU's own
// code (SelectIds), so both backends choose the same neurons.
#pragma once

#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "gpu/kernels/query.h"

namespace dslide::gpu {

/// A block per sample: SelectIds' result (the CPU's code), with the sample's hash set
/// (DeviceMarks) in place of the CPU's stamp arrays. Thread 0 lists the sample's labels on
/// this shard as its forced ids. Vanilla: the threads gather every bucket entry in the
/// tables' random order (PlanVanilla ... CountVanilla). Top-k and threshold: the threads
/// count every bucket entry's collisions into the set and gather the candidates in the
/// order the tables list them (a block scan over bucket positions), then sort (top-k) or
/// filter (threshold) them. Both end alike (TakeChosen, the shared fill's walk,
/// SelectFillRest, Finish): the active ids (global) in out, their number in out_n. Thread 0
/// keeps the sample's random stream and draws in SelectIds' order. Without tables thread 0
/// runs SelectIds itself (Run).
struct Select {
  static constexpr int kThreads = 128;
  SelectPolicy policy;
  TablesView tables;
  ShardDraw draw;
  int64_t B = 0, n = 0, budget = 0, min_neg = 0, set = 0, cand_cap = 0;
  int L = 0;
  const uint32_t* bkt = nullptr;
  const int64_t* lo = nullptr;  // the labels (null: none)
  const int32_t* li = nullptr;
  int32_t* forced_ids = nullptr;
  int64_t* n_forced = nullptr;  // B
  int32_t* boff = nullptr;      // B x (L + 1): where each table's bucket starts
  int32_t *keys = nullptr, *counts = nullptr, *first = nullptr, *cand = nullptr, *order = nullptr;
  uint8_t* stamps = nullptr;
  const int32_t* shared = nullptr;    // the batch's fill
  const int64_t* shared_n = nullptr;  // its length, then how many of the batch's labels lead it
  // The log-Q correction (null: none): per neuron the chance of being a batch-mate's label;
  // out, per slot (B x draw.cap), the log of the active id's chance of being drawn.
  const float* batch_q = nullptr;
  float* log_q = nullptr;
  int32_t* out = nullptr;
  int64_t* out_n = nullptr;
  uint64_t* sort_keys = nullptr;  // B x sort_cap: the top-k sort, the threshold's compaction
  int64_t sort_cap = 1;           // a power of two >= cand_cap

  bool Empty() const { return B <= 0; }
  DSLIDE_HD bool Counting() const {
    return policy.query != QueryStrategy::kVanilla && tables.L > 0;
  }
  DSLIDE_HD DeviceMarks Marks(int64_t i) const {
    DeviceMarks mk;
    mk.n = n;
    mk.keys = keys + i * set;
    mk.counts = counts + i * set;
    mk.stamps = stamps + i * set;
    mk.first = first + i * set;
    mk.mask = static_cast<uint32_t>(set - 1);
    mk.cand = cand + i * cand_cap;
    mk.order = order + i * L;
    return mk;
  }
  DSLIDE_HD int32_t* Forced(int64_t i) const {
    return lo != nullptr ? forced_ids + lo[i] : forced_ids;
  }
  /// All threads: the sample's hash set emptied (a serial insert sets a new slot's count
  /// and stamp; the block's concurrent inserts need them set beforehand).
  DSLIDE_HD void Clear(int64_t i, int tid, int nt) const {
    const bool parallel = Parallel();
    for (int64_t j = tid; j < set; j += nt) {
      keys[i * set + j] = -1;
      if (!parallel) continue;
      counts[i * set + j] = 0;
      stamps[i * set + j] = 0;
      first[i * set + j] = 0x7fffffff;
    }
  }
  /// Thread 0: the sample's labels on this shard listed as its forced ids (local ids, into
  /// Forced(i); their number into n_forced[i], returned).
  DSLIDE_HD int64_t ListForced(int64_t i) const {
    int32_t* forced = Forced(i);
    int64_t nf = 0;
    if (lo != nullptr)
      for (int64_t j = lo[i]; j < lo[i + 1]; ++j)
        if (li[j] >= draw.begin && li[j] < draw.end)
          forced[nf++] = static_cast<int32_t>(li[j] - draw.begin);
    n_forced[i] = nf;
    return nf;
  }
  /// Thread 0: the forced ids listed (and, for the counting strategies, entered in the set
  /// as such) and where each table's bucket starts among the positions the counting threads
  /// share.
  DSLIDE_HD void Prepare(int64_t i) const {
    const int64_t nf = ListForced(i);
    if (!Counting()) return;
    const int32_t* forced = Forced(i);
    DeviceMarks mk = Marks(i);
    for (int64_t j = 0; j < nf; ++j) mk.first[mk.InsertConcurrent(forced[j])] = -1;
    int32_t* bo = boff + i * (L + 1);
    bo[0] = 0;
    for (int t = 0; t < L; ++t) bo[t + 1] = bo[t] + tables.Get(t, bkt[i * L + t]).size;
  }
  DSLIDE_HD int32_t Total(int64_t i) const { return boff[i * (L + 1) + L]; }
  /// The id at position p of the sample's buckets (tables in order).
  DSLIDE_HD int32_t IdAt(int64_t i, int32_t p) const {
    const int t = TableAt(i, p);
    return tables.Get(t, bkt[i * L + t]).ids[p - boff[i * (L + 1) + t]];
  }
  /// All threads: the collisions of the positions tid, tid + nt, ...
  DSLIDE_HD void Count(int64_t i, int tid, int nt) const {
    DeviceMarks mk = Marks(i);
    const int32_t total = Total(i);
    for (int32_t p = tid; p < total; p += nt) mk.Collide(IdAt(i, p), p);
  }
  DSLIDE_HD bool FirstAt(int64_t i, int32_t p) const { return Marks(i).FirstAt(IdAt(i, p), p); }
  DSLIDE_HD void Emit(int64_t i, int64_t rank, int32_t p) const {
    cand[i * cand_cap + rank] = IdAt(i, p);
  }
  // ---- The parallel selection: SelectIds' result, its loops over candidates and the
  // shared fill done by the block (phases between block barriers); thread 0 keeps the
  // random stream and draws in SelectIds' order (the tables' order, the sample down to the
  // LSH share or top-k's tie at the cut, the rest of the fill). ----

  /// Whether this launch takes the parallel path (every strategy where the layer has
  /// tables; without tables thread 0 runs SelectIds).
  DSLIDE_HD bool Parallel() const { return tables.L > 0; }
  /// What thread 0 decides and the block reads, per sample.
  struct Plan {
    int64_t k = 0, budget = 0, room = 0, nc = 0, take = 0, lo = 0, hi = 0;
    int32_t total = 0, p_room = -1;
    int done = 0;  // 1: the active set is complete at k
    // The log-Q correction: the forced ids' number, the end of the vanilla walk's positions,
    // the batch's listed labels free when the fill met them, and the rates.
    int64_t k_forced = 0, free_labels = 0;
    int32_t walk_end = 0;
    InclusionRates rates;
  };
  DSLIDE_HD Rng SampleRng(int64_t i) const {
    return Rng(StreamSeed(draw.seed, streams::kSample, draw.iter, i, draw.lane));
  }
  DSLIDE_HD int32_t* Out(int64_t i) const { return out + i * draw.cap; }
  /// Thread 0: SelectIds' front over the forced ids listed in Forced(i): each appended and
  /// stamped once, the budget and the LSH room; pl->done where the active set is complete.
  DSLIDE_HD void PlanFront(int64_t i, Plan* pl) const {
    DeviceMarks mk = Marks(i);
    pl->budget = budget;
    pl->done = SelectFront(policy, Forced(i), n_forced[i], min_neg, mk, Out(i), &pl->k, &pl->budget,
                           &pl->room)
                   ? 0
                   : 1;
    pl->k_forced = pl->k;
    pl->free_labels = 0;
    pl->rates = InclusionRates();
  }
  /// Thread 0, vanilla: the forced ids listed, the front, the tables' random order and where
  /// each table's bucket starts in that order.
  DSLIDE_HD void PlanVanilla(int64_t i, Rng* rng, Plan* pl) const {
    ListForced(i);
    PlanFront(i, pl);
    if (pl->done) return;
    int32_t* ord = order + i * L;
    TableOrder(ord, L, rng);
    int32_t* bo = boff + i * (L + 1);
    bo[0] = 0;
    for (int t = 0; t < L; ++t) bo[t + 1] = bo[t] + tables.Get(ord[t], bkt[i * L + ord[t]]).size;
    pl->total = bo[L];
    pl->p_room = -1;
  }
  /// Thread 0, counting strategies (after Prepare, Count and the gather): the front, and
  /// the gathered candidates' number.
  DSLIDE_HD void PlanCounting(int64_t i, int64_t gathered, Plan* pl) const {
    PlanFront(i, pl);
    pl->nc = gathered;
    if (policy.query == QueryStrategy::kThreshold) pl->rates.min_count = policy.threshold;
  }
  /// Thread 0, counting strategies once the candidates are final: the LSH rate of the kept
  /// (threshold: the pool over the threshold; top-k: every candidate where all fit).
  DSLIDE_HD void RateCounting(Plan* pl) const {
    if (policy.query == QueryStrategy::kThreshold)
      pl->rates.lsh = pl->nc > pl->room ? ShareOf(pl->room, pl->nc) : 1.0f;
    else if (pl->nc <= pl->room)
      pl->rates.cut = 0;
  }
  /// Threshold: whether gathered candidate j has at least the threshold's collisions.
  DSLIDE_HD bool OverThreshold(int64_t i, int64_t j) const {
    return Marks(i).Count(cand[i * cand_cap + j]) >= policy.threshold;
  }
  /// A sample's spare row of sort_cap 64-bit (or 2 sort_cap 32-bit) entries.
  DSLIDE_HD uint64_t* Keys(int64_t i) const { return sort_keys + i * sort_cap; }
  DSLIDE_HD int32_t* Spare(int64_t i) const { return reinterpret_cast<int32_t*>(Keys(i)); }
  /// Top-k, all threads: the sort keys of the nc candidates, count descending then id
  /// ascending (SortByCount's order), padded to sort_cap with the largest key.
  DSLIDE_HD void TopKKeys(int64_t i, int64_t nc, int tid, int nt) const {
    DeviceMarks mk = Marks(i);
    uint64_t* key = Keys(i);
    for (int64_t j = tid; j < sort_cap; j += nt) {
      if (j >= nc) {
        key[j] = ~uint64_t{0};
        continue;
      }
      const int32_t id = cand[i * cand_cap + j];
      key[j] = (uint64_t(0x7fffffffu - static_cast<uint32_t>(mk.Count(id))) << 32) |
               static_cast<uint32_t>(id);
    }
  }
  DSLIDE_HD void TopKIds(int64_t i, int64_t nc, int tid, int nt) const {
    const uint64_t* key = Keys(i);
    for (int64_t j = tid; j < nc; j += nt)
      cand[i * cand_cap + j] = static_cast<int32_t>(key[j] & 0xffffffffu);
  }
  /// Thread 0, top-k after the sort: the group tied at the cut, [pl->lo, pl->hi), of which
  /// room - lo are sampled (SelectIds' tie rule).
  DSLIDE_HD void TopKCut(int64_t i, Plan* pl) const {
    DeviceMarks mk = Marks(i);
    const int32_t* c = Cands(i);
    const int cut = mk.Count(c[pl->room - 1]);
    int64_t l = pl->room - 1, h = pl->room;
    while (l > 0 && mk.Count(c[l - 1]) == cut) --l;
    while (h < pl->nc && mk.Count(c[h]) == cut) ++h;
    pl->lo = l;
    pl->hi = h;
    pl->rates.cut = cut;
    pl->rates.tie = ShareOf(pl->room - l, h - l);
  }
  /// The table (in the random order) whose bucket holds position p.
  DSLIDE_HD int TableAt(int64_t i, int32_t p) const {
    const int32_t* bo = boff + i * (L + 1);
    int lo_t = 0, hi_t = L;
    while (hi_t - lo_t > 1) {
      const int mid = (lo_t + hi_t) / 2;
      if (bo[mid] <= p)
        lo_t = mid;
      else
        hi_t = mid;
    }
    return lo_t;
  }
  /// The id at position p of the buckets in the tables' random order.
  DSLIDE_HD int32_t IdAtOrdered(int64_t i, int32_t p) const {
    const int t = TableAt(i, p);
    const int32_t tab = order[i * L + t];
    return tables.Get(tab, bkt[i * L + tab]).ids[p - boff[i * (L + 1) + t]];
  }
  /// All threads: every position's id entered in the set with the first position it is met
  /// at (forced ids, stamped, are not candidates).
  DSLIDE_HD void GatherVanilla(int64_t i, const Plan& pl, int tid, int nt) const {
    DeviceMarks mk = Marks(i);
    for (int32_t p = tid; p < pl.total; p += nt) {
      const int64_t h = mk.InsertConcurrent(IdAtOrdered(i, p));
      if (mk.stamps[h] == 0) AtomicMinI32(mk.first + h, p);
    }
  }
  /// Whether position p holds a candidate met there first: the walk over the tables in
  /// their order gathers it at p.
  DSLIDE_HD bool FirstMet(int64_t i, int32_t p) const {
    DeviceMarks mk = Marks(i);
    const int64_t h = mk.Find(IdAtOrdered(i, p));
    return mk.stamps[h] == 0 && mk.first[h] == p;
  }
  /// The candidate of rank r, met first at p (the scan's emit); the room-th's position is
  /// where the walk's last table lies.
  DSLIDE_HD void EmitVanilla(int64_t i, Plan* pl, int64_t r, int32_t p) const {
    cand[i * cand_cap + r] = IdAtOrdered(i, p);
    if (r == pl->room - 1) pl->p_room = p;
  }
  /// Thread 0: how many candidates the walk gathers (whole tables until the room is
  /// reached), and how many of them it keeps; above the room they are sampled down to it
  /// (SampleDown with the sample's stream, as SelectIds does) before TakeChosen.
  DSLIDE_HD void CountVanilla(int64_t i, int64_t gathered, Plan* pl) const {
    int64_t nc = gathered;
    pl->walk_end = pl->total;
    if (pl->p_room >= 0) {
      const int t = TableAt(i, pl->p_room);
      const int32_t end = boff[i * (L + 1) + t + 1];
      nc = pl->room;
      for (int32_t p = pl->p_room + 1; p < end; ++p) nc += FirstMet(i, p) ? 1 : 0;
      pl->walk_end = end;
    }
    pl->nc = nc;
    pl->take = nc < pl->room ? nc : pl->room;
    pl->rates.lsh = nc > pl->room ? ShareOf(pl->room, nc) : 1.0f;
  }
  DSLIDE_HD int32_t* Cands(int64_t i) const { return cand + i * cand_cap; }
  /// All threads: the chosen candidates (the first pl.take of Cands(i)) appended and
  /// stamped.
  DSLIDE_HD void TakeChosen(int64_t i, const Plan& pl, int tid, int nt) const {
    DeviceMarks mk = Marks(i);
    int32_t* o = Out(i);
    for (int64_t j = tid; j < pl.take; j += nt) {
      const int32_t id = cand[i * cand_cap + j];
      o[pl.k + j] = id;
      mk.stamps[mk.InsertConcurrent(id)] = 1;
    }
  }
  /// Whether the batch's fill goes on after the candidates, over shared.
  DSLIDE_HD bool SharedFill(const Plan& pl) const {
    return pl.k < pl.budget && policy.fill == FillPolicy::kBatch;
  }
  DSLIDE_HD bool SharedFree(int64_t i, int64_t j) const { return !Marks(i).Stamped(shared[j]); }
  /// All threads: the shared ids taken (out[k, k + taken)) stamped.
  DSLIDE_HD void StampTaken(int64_t i, int64_t from, int64_t taken, int tid, int nt) const {
    DeviceMarks mk = Marks(i);
    const int32_t* o = Out(i);
    for (int64_t j = tid; j < taken; j += nt) mk.stamps[mk.InsertConcurrent(o[from + j])] = 1;
  }
  /// The collisions of local id `id` in the sample's LSH pool (LogInclusion's count): vanilla,
  /// 1 where the walk met it (its first position before the walk's end; forced ids never
  /// have one); the counting strategies, its collisions (forced ids are not counted).
  DSLIDE_HD int PoolCount(int64_t i, const Plan& pl, int32_t id) const {
    DeviceMarks mk = Marks(i);
    const int64_t h = mk.Find(id);
    if (h < 0) return 0;
    if (Counting()) return mk.counts[h];
    return mk.first[h] < pl.walk_end ? 1 : 0;
  }
  /// Thread 0, after the fill: the batch's and the uniform draws' rates, from `taken` of the
  /// batch's labels taken and the ids before them (k_lsh: the forced ids and candidates).
  DSLIDE_HD void RateFill(Plan* pl, int64_t k_lsh, int64_t taken) const {
    const int64_t before_uniform = k_lsh + taken;
    pl->rates.batch = ShareOf(taken, pl->free_labels);
    pl->rates.uniform = UniformRate(pl->k - before_uniform, n - before_uniform);
  }
  /// All threads, before Finish: each active id's log-Q (0 for the forced ids).
  DSLIDE_HD void LogQ(int64_t i, const Plan& pl, int tid, int nt) const {
    const int32_t* o = Out(i);
    float* lq = log_q + i * draw.cap;
    for (int64_t j = tid; j < pl.k; j += nt)
      lq[j] = j < pl.k_forced || pl.done
                  ? 0.0f
                  : LogInclusion(pl.rates, PoolCount(i, pl, o[j]), batch_q[o[j]]);
  }
  /// All threads: global ids, the padding zeroed (as the CPU backend leaves it), the count.
  DSLIDE_HD void Finish(int64_t i, int64_t k, int tid, int nt) const {
    int32_t* o = Out(i);
    for (int64_t j = tid; j < draw.cap; j += nt)
      o[j] = j < k ? o[j] + static_cast<int32_t>(draw.begin) : 0;
    if (tid == 0) out_n[i] = k;
  }

  /// Thread 0: the selection.
  DSLIDE_HD void Run(int64_t i) const {
    DeviceMarks mk = Marks(i);
    Rng rng(StreamSeed(draw.seed, streams::kSample, draw.iter, i, draw.lane));
    const int64_t cap = draw.cap;
    int32_t* o = out + i * cap;
    Inclusion inc;
    inc.batch_q = batch_q;
    inc.batch_labels = shared_n[1];
    inc.log_q = log_q != nullptr ? log_q + i * cap : nullptr;
    const int64_t k =
        SelectIds(policy, &tables, bkt + i * L, Forced(i), n_forced[i], budget, min_neg, &rng, mk,
                  o, shared, *shared_n, log_q != nullptr ? &inc : nullptr);
    for (int64_t j = 0; j < k; ++j) o[j] += static_cast<int32_t>(draw.begin);
    for (int64_t j = k; j < cap; ++j) o[j] = 0;  // the padding, as the CPU backend leaves it
    out_n[i] = k;
  }
};
void LaunchSelect(StreamHandle s, const Select& k);
inline void LaunchKernel(StreamHandle s, const Select& k) { LaunchSelect(s, k); }

/// The parallel selection's last phases on the host: the chosen candidates appended, the
/// batch's shared fill, the rest of the fill, the row finished.
inline void RunTailOnHost(const Select& k, int64_t i, Select::Plan& pl, Rng& rng,
                          HostOrderSalt* salt) {
  constexpr int nt = Select::kThreads;
  const auto all = [&](auto f) {
    HostShuffled(nt, salt, [&](int64_t t) { f(static_cast<int>(t)); });
  };
  if (!pl.done) {
    all([&](int t) { k.TakeChosen(i, pl, t, nt); });
    pl.k += pl.take;
    const int64_t k_lsh = pl.k, n_labels = k.shared_n[1];
    int64_t taken_labels = 0;
    if (k.SharedFill(pl)) {
      const int64_t need = pl.budget - pl.k;
      int32_t* o = k.Out(i);
      const int64_t free = HostCompact(
          *k.shared_n, [&](int64_t j) { return k.SharedFree(i, j); },
          [&](int64_t j, int64_t r) {
            if (r < need) o[pl.k + r] = k.shared[j];
            if (j < n_labels) ++pl.free_labels;
          });
      const int64_t taken = free < need ? free : need;
      taken_labels = pl.free_labels < taken ? pl.free_labels : taken;
      all([&](int t) { k.StampTaken(i, pl.k, taken, t, nt); });
      pl.k += taken;
    }
    DeviceMarks mk = k.Marks(i);
    pl.k = SelectFillRest(k.policy.fill, pl.budget, pl.k, &rng, mk, k.Out(i));
    k.RateFill(&pl, k_lsh, taken_labels);
  }
  if (k.log_q != nullptr) all([&](int t) { k.LogQ(i, pl, t, nt); });
  all([&](int t) { k.Finish(i, pl.k, t, nt); });
}

/// The parallel vanilla selection of sample i on the host (the kernel's phases in order).
inline void RunVanillaOnHost(const Select& k, int64_t i, HostOrderSalt* salt) {
  constexpr int nt = Select::kThreads;
  const auto all = [&](auto f) {
    HostShuffled(nt, salt, [&](int64_t t) { f(static_cast<int>(t)); });
  };
  Rng rng = k.SampleRng(i);
  Select::Plan pl;
  k.PlanVanilla(i, &rng, &pl);
  if (!pl.done) {
    all([&](int t) { k.GatherVanilla(i, pl, t, nt); });
    const int64_t gathered = HostCompact(
        pl.total, [&](int64_t p) { return k.FirstMet(i, p); },
        [&](int64_t p, int64_t r) { k.EmitVanilla(i, &pl, r, p); });
    k.CountVanilla(i, gathered, &pl);
    if (pl.nc > pl.room) SampleDown(k.Cands(i), pl.nc, pl.room, &rng);
  }
  RunTailOnHost(k, i, pl, rng, salt);
}

/// The counting strategies' selection of sample i on the host, after the gather: top-k
/// sorts by count (a bitonic sort) and samples the group tied at the cut; threshold keeps
/// the candidates at or over it (a compaction) and samples them down to the room.
inline void RunCountingOnHost(const Select& k, int64_t i, int64_t gathered, HostOrderSalt* salt) {
  constexpr int nt = Select::kThreads;
  const auto all = [&](auto f) {
    HostShuffled(nt, salt, [&](int64_t t) { f(static_cast<int>(t)); });
  };
  Rng rng = k.SampleRng(i);
  Select::Plan pl;
  k.PlanCounting(i, gathered, &pl);
  if (!pl.done) {
    if (k.policy.query == QueryStrategy::kThreshold) {
      int32_t* spare = k.Spare(i);
      const int64_t kept = HostCompact(
          pl.nc, [&](int64_t j) { return k.OverThreshold(i, j); },
          [&](int64_t j, int64_t r) { spare[r] = k.Cands(i)[j]; });
      all([&](int t) {
        for (int64_t j = t; j < kept; j += nt) k.Cands(i)[j] = spare[j];
      });
      pl.nc = kept;
      if (pl.nc > pl.room) SampleDown(k.Cands(i), pl.nc, pl.room, &rng);
    } else if (pl.nc > pl.room) {
      all([&](int t) { k.TopKKeys(i, pl.nc, t, nt); });
      for (int64_t size = 2; size <= k.sort_cap; size *= 2)
        for (int64_t stride = size / 2; stride > 0; stride /= 2)
          all([&](int t) { BitonicPassOn(k.Keys(i), k.sort_cap, size, stride, t, nt); });
      all([&](int t) { k.TopKIds(i, pl.nc, t, nt); });
      k.TopKCut(i, &pl);
      SampleDown(k.Cands(i) + pl.lo, pl.hi - pl.lo, pl.room - pl.lo, &rng);
    }
    k.RateCounting(&pl);
    pl.take = pl.nc < pl.room ? pl.nc : pl.room;
  }
  RunTailOnHost(k, i, pl, rng, salt);
}

inline void RunOnHost(const Select& k, HostOrderSalt* salt) {
  constexpr int nt = Select::kThreads;
  HostShuffled(k.B, salt, [&](int64_t i) {
    HostShuffled(nt, salt, [&](int64_t t) { k.Clear(i, static_cast<int>(t), nt); });
    if (k.Parallel() && !k.Counting()) {
      RunVanillaOnHost(k, i, salt);
      return;
    }
    k.Prepare(i);
    if (k.Counting()) {
      HostShuffled(nt, salt, [&](int64_t t) { k.Count(i, static_cast<int>(t), nt); });
      // The candidates in the order the tables list them (the block scan).
      const int64_t gathered = HostCompact(
          k.Total(i), [&](int64_t p) { return k.FirstAt(i, static_cast<int32_t>(p)); },
          [&](int64_t p, int64_t r) { k.Emit(i, r, static_cast<int32_t>(p)); });
      RunCountingOnHost(k, i, gathered, salt);
      return;
    }
    k.Run(i);
  });
}

}  // namespace dslide::gpu
