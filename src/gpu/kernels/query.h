// Query kernels: a sample's LSH buckets (QueryHash), its active set from them (Select), and
// the batch's shared fill (BatchFill), on the CPU's own code (lsh_kernels.h, SelectIds,
// BatchListInto), so both backends choose the same neurons.
#pragma once

#include <cstdint>
#include <vector>

#include "backend_streams.h"
#include "common.h"
#include "lsh_kernels.h"
#include "rng.h"
#include "select_kernel.h"

namespace dslide::gpu {

/// The LSH tables of a shard on the device: per table 2^bits + 1 offsets (relative to the
/// table's first id, the layout of LshTables::Export) and the ids of all tables.
struct TablesView {
  const uint32_t* off = nullptr;
  const int64_t* base = nullptr;  // L + 1
  const int32_t* ids = nullptr;
  int L = 0;
  int64_t nb = 0;
  struct Bucket {
    const int32_t* ids;
    int32_t size;
  };
  DSLIDE_HD int num_tables() const { return L; }
  DSLIDE_HD Bucket Get(int t, uint32_t b) const {
    const uint32_t* o = off + t * (nb + 1);
    return {ids + base[t] + o[b], static_cast<int32_t>(o[b + 1] - o[b])};
  }
};

/// SelectIds' marks for one sample: an open-addressing hash set of the ids seen in a call
/// (load at most 1/2), cleared before the call.
struct DeviceMarks {
  int64_t n = 0;
  int32_t* keys = nullptr;  // -1: empty
  int32_t* counts = nullptr;
  uint8_t* stamps = nullptr;
  uint32_t mask = 0;
  int32_t* cand = nullptr;
  int32_t* order = nullptr;

  DSLIDE_HD int64_t size() const { return n; }
  DSLIDE_HD void BeginCall() {}
  DSLIDE_HD int64_t Find(int32_t id) const {
    uint32_t h = (static_cast<uint32_t>(id) * 2654435761u) & mask;
    while (keys[h] != -1) {
      if (keys[h] == id) return h;
      h = (h + 1) & mask;
    }
    return -1;
  }
  DSLIDE_HD int64_t Insert(int32_t id) {
    uint32_t h = (static_cast<uint32_t>(id) * 2654435761u) & mask;
    while (keys[h] != -1) {
      if (keys[h] == id) return h;
      h = (h + 1) & mask;
    }
    keys[h] = id;
    counts[h] = 0;
    stamps[h] = 0;
    return h;
  }
  DSLIDE_HD bool Stamped(int32_t id) const {
    const int64_t f = Find(id);
    return f >= 0 && stamps[f] != 0;
  }
  DSLIDE_HD void Stamp(int32_t id) { stamps[Insert(id)] = 1; }
  DSLIDE_HD void Unstamp(int32_t id) {
    const int64_t f = Find(id);
    if (f >= 0) stamps[f] = 0;
  }
  DSLIDE_HD int Count(int32_t id) const {
    const int64_t f = Find(id);
    return f >= 0 ? counts[f] : 0;
  }
  DSLIDE_HD void SetCount(int32_t id, int c) { counts[Insert(id)] = c; }
  DSLIDE_HD void AddCount(int32_t id) { ++counts[Insert(id)]; }
  DSLIDE_HD bool Before(int32_t a, int32_t b) const {
    const int ca = Count(a), cb = Count(b);
    return ca != cb ? ca > cb : a < b;
  }
  /// Heap sort (in place, no allocation) by count descending, then id ascending.
  DSLIDE_HD void SortByCount(int32_t* v, int64_t n_) const {
    HeapSort(v, n_, [this](int32_t a, int32_t b) { return Before(a, b); });
  }
  DSLIDE_HD int32_t* Cand() { return cand; }
  DSLIDE_HD int32_t* Order() { return order; }
};

/// A block per sample hashes its query row [x, 1] into the bucket of every table: threads
/// take the hash functions of a dense row in turn (each reads the few coordinates its
/// function samples), DWTA's densification follows on one thread, then threads take the
/// tables in turn to combine K values into a bucket id. A sparse row's hashes are formed
/// from its non-zeros on one thread (HashRawSparse, the CPU's order of additions).
struct QueryHash {
  static constexpr int kThreads = 128;
  HashView h;
  RowsView q;  // the query rows: dense rows x (the kernel adds the 1), or sparse [x, 1]
  int64_t in_dim = 0;
  float* acc = nullptr;     // B x num_hashes, scratch of a sparse row
  int32_t* arg = nullptr;   // B x num_hashes raw values
  uint32_t* bkt = nullptr;  // B x L bucket ids

  bool Empty() const { return q.B <= 0; }
  /// Thread tid's hash functions of sample i (dense rows), or all of them on thread 0
  /// (sparse rows).
  DSLIDE_HD void Raw(int64_t i, int tid, int nt) const {
    int32_t* a = arg + i * h.num_hashes;
    if (!q.dense) {
      if (tid == 0)
        HashRawSparse(h, q.ids + i * q.cap, q.vals + i * q.cap, q.n[i], acc + i * h.num_hashes, a);
      return;
    }
    const float* xv = q.vals + i * q.cap;
    const int64_t xn = q.n[i], dim = in_dim;
    // [x, 1, 0]: the 1 meets the bias coordinate, so collisions follow w.x + b.
    const auto x = [=](int64_t j) { return j < xn ? xv[j] : (j == dim ? 1.0f : 0.0f); };
    for (int f = tid; f < h.num_hashes; f += nt) a[f] = HashOneDense(h, x, f);
  }
  DSLIDE_HD void Densify(int64_t i, int tid) const {
    if (q.dense && tid == 0 && h.family == HashView::kDwta) HashDensify(h, arg + i * h.num_hashes);
  }
  DSLIDE_HD void Combine(int64_t i, int tid, int nt) const {
    for (int t = tid; t < h.l; t += nt)
      bkt[i * h.l + t] = HashCombineOne(h, arg + i * h.num_hashes, t);
  }
};
void LaunchQueryHash(StreamHandle s, const QueryHash& k);
inline void LaunchKernel(StreamHandle s, const QueryHash& k) { LaunchQueryHash(s, k); }

inline void RunOnHost(const QueryHash& k, HostOrderSalt* salt) {
  constexpr int nt = QueryHash::kThreads;
  HostShuffled(k.q.B, salt, [&](int64_t i) {
    HostShuffled(nt, salt, [&](int64_t t) { k.Raw(i, static_cast<int>(t), nt); });
    HostShuffled(nt, salt, [&](int64_t t) { k.Densify(i, static_cast<int>(t)); });
    HostShuffled(nt, salt, [&](int64_t t) { k.Combine(i, static_cast<int>(t), nt); });
  });
}

/// A thread per sample: the sample's labels on this shard as its forced ids, then SelectIds
/// over the tables with a per-sample hash set (DeviceMarks) in place of the CPU's stamp
/// arrays; the active ids (global) into out, their number into out_n.
struct Select : PerIndex<Select> {
  SelectPolicy policy;
  TablesView tables;
  int64_t B = 0, n = 0, cap = 0, begin = 0, end = 0, budget = 0, min_neg = 0, set = 0, cand_cap = 0;
  int L = 0;
  uint64_t seed = 0, lane = 0;
  int64_t iter = 0;
  const uint32_t* bkt = nullptr;
  const int64_t* lo = nullptr;  // the labels (null: none)
  const int32_t* li = nullptr;
  int32_t* forced_ids = nullptr;
  int32_t *keys = nullptr, *counts = nullptr, *cand = nullptr, *order = nullptr;
  uint8_t* stamps = nullptr;
  const int32_t* shared = nullptr;  // the batch's fill
  const int64_t* shared_n = nullptr;
  int32_t* out = nullptr;
  int64_t* out_n = nullptr;

  DSLIDE_HD int64_t Size() const { return B; }
  DSLIDE_HD void operator()(int64_t i) const {
    int32_t* forced = lo != nullptr ? forced_ids + lo[i] : forced_ids;
    int64_t nf = 0;
    if (lo != nullptr)
      for (int64_t j = lo[i]; j < lo[i + 1]; ++j)
        if (li[j] >= begin && li[j] < end) forced[nf++] = static_cast<int32_t>(li[j] - begin);
    DeviceMarks mk;
    mk.n = n;
    mk.keys = keys + i * set;
    mk.counts = counts + i * set;
    mk.stamps = stamps + i * set;
    mk.mask = static_cast<uint32_t>(set - 1);
    mk.cand = cand + i * cand_cap;
    mk.order = order + i * L;
    for (int64_t j = 0; j < set; ++j) mk.keys[j] = -1;
    Rng rng(StreamSeed(seed, streams::kSample, iter, i, lane));
    int32_t* o = out + i * cap;
    const int64_t k = SelectIds(policy, &tables, bkt + i * L, forced, nf, budget, min_neg, &rng, mk,
                                o, shared, *shared_n);
    for (int64_t j = 0; j < k; ++j) o[j] += static_cast<int32_t>(begin);
    out_n[i] = k;
  }
};
void LaunchSelect(StreamHandle s, const Select& k);
inline void LaunchKernel(StreamHandle s, const Select& k) { LaunchSelect(s, k); }
inline void RunOnHost(const Select& k, HostOrderSalt* salt) { RunPerIndexOnHost(k, salt); }

/// The batch's shared fill (FillPolicy::kBatch; BatchListInto, the CPU's code) on one
/// thread: the labels of the batch on this shard, then uniform ids, into shared.
struct BatchFill {
  bool on = false;
  int64_t begin = 0, end = 0, cap = 0, n_lab = 0;
  uint64_t seed = 0, lane = 0;
  int64_t iter = 0;
  const int32_t* li = nullptr;
  int32_t *fill = nullptr, *own = nullptr, *shared = nullptr;
  int64_t* shared_n = nullptr;

  bool Empty() const { return false; }
  DSLIDE_HD void Run() const {
    if (!on) {
      *shared_n = 0;
      return;
    }
    Rng rng(StreamSeed(seed, streams::kBatchFill, iter, lane));
    *shared_n = BatchListInto(begin, end, cap, li, n_lab, &rng, fill, own, shared);
  }
};
void LaunchBatchFill(StreamHandle s, const BatchFill& k);
inline void LaunchKernel(StreamHandle s, const BatchFill& k) { LaunchBatchFill(s, k); }
inline void RunOnHost(const BatchFill& k, HostOrderSalt*) { k.Run(); }

}  // namespace dslide::gpu
