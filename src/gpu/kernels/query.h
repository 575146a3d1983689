// Query kernels: a sample's LSH buckets (QueryHash) on the CPU's own code (lsh_kernels.h),
// and what the selection kernels (selection.h, batch_fill.h) share: the tables and a sample's
// marks in device memory, a block's compaction and bitonic sort pass, a step's draws.
#pragma once

#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "gpu/kernels/common.h"
#include "lsh/lsh_kernels.h"
#include "lsh/select_kernel.h"
#include "model/backend_streams.h"

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
/// (load at most 1/2), cleared before the call. For the counting strategies a block fills
/// it first (Collide, concurrently) with every candidate's collision count and the first
/// position where it appears in the tables' buckets (-1 marks a forced id), and gathers the
/// candidates in first-seen order into cand.
struct DeviceMarks {
  int64_t n = 0;
  int32_t* keys = nullptr;  // -1: empty
  int32_t* counts = nullptr;
  uint8_t* stamps = nullptr;
  int32_t* first = nullptr;
  uint32_t mask = 0;
  int32_t* cand = nullptr;
  int32_t* order = nullptr;

  /// The slot of id, inserted if absent, by one of many threads at once.
  DSLIDE_HD int64_t InsertConcurrent(int32_t id) {
    uint32_t h = (static_cast<uint32_t>(id) * 2654435761u) & mask;
    for (;;) {
      int32_t k = keys[h];
      if (k == -1) {
        k = AtomicCasI32(keys + h, -1, id);
        if (k == -1) return h;
      }
      if (k == id) return h;
      h = (h + 1) & mask;
    }
  }
  /// id met at position p of the buckets: counted unless forced.
  DSLIDE_HD void Collide(int32_t id, int32_t p) {
    const int64_t h = InsertConcurrent(id);
    if (first[h] == -1) return;
    AtomicAddI32(counts + h, 1);
    AtomicMinI32(first + h, p);
  }
  /// Whether p is the first position of the (not forced) id met there.
  DSLIDE_HD bool FirstAt(int32_t id, int32_t p) const {
    const int64_t h = Find(id);
    return h >= 0 && first[h] == p;
  }

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

/// The stable compaction of a block: emit(i, rank) for the i in [0, n) with flag(i), rank
/// its place among them; returns their number (the device runs it with a block scan).
template <class Flag, class Emit>
int64_t HostCompact(int64_t n, const Flag& flag, const Emit& emit) {
  int64_t r = 0;
  for (int64_t i = 0; i < n; ++i)
    if (flag(i)) emit(i, r++);
  return r;
}

/// One compare-exchange pass (size, stride) of a block's ascending bitonic sort of v[0, pow2).
template <class T>
DSLIDE_HD void BitonicPassOn(T* v, int64_t pow2, int64_t size, int64_t stride, int tid, int nt) {
  for (int64_t i = tid; i < pow2; i += nt) {
    const int64_t l = i ^ stride;
    if (l <= i) continue;
    const T a = v[i], b = v[l];
    if (((i & size) == 0) == (a > b)) {
      v[i] = b;
      v[l] = a;
    }
  }
}

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

/// What a layer's draws in one step share: the shard [begin, end), the most active ids a
/// sample may get (cap), and the random streams' seed, lane (layer and rank) and iteration.
struct ShardDraw {
  int64_t begin = 0, end = 0, cap = 0, iter = 0;
  uint64_t seed = 0, lane = 0;
};

}  // namespace dslide::gpu
