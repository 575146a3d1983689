// The batch's shared fill (BatchFill), on the CPU's own code (BatchListInto), so both
// backends fill alike.
#pragma once

#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "gpu/kernels/query.h"

namespace dslide::gpu {

/// The batch's shared fill (FillPolicy::kBatch): BatchListInto, the CPU's code, in one block
/// of threads with the same result. Thread 0 draws from the random stream in the CPU's
/// order (the uniform ids, the two shuffles, SampleDown where more than half the shard is
/// drawn); the block sorts (a bitonic sort over a power-of-two scratch), drops repeats and
/// filters by flags and a block scan (stable compaction), which the CPU does with a heap
/// sort and serial loops. The phases below are the kernel's, between block barriers.
struct BatchFill {
  static constexpr int kThreads = 1024;
  bool on = false;
  ShardDraw draw;
  int64_t n_lab = 0;
  const int32_t* li = nullptr;
  int32_t *fill = nullptr, *own = nullptr, *shared = nullptr;
  int32_t* scratch = nullptr;  // pow2 entries, pow2 >= the fill's count and n_lab
  int64_t pow2 = 1;
  int64_t* shared_n = nullptr;  // 2: the list's length, then how many labels lead it

  bool Empty() const { return false; }
  DSLIDE_HD int64_t N() const { return draw.end - draw.begin; }
  DSLIDE_HD int64_t Count() const { return draw.cap < N() ? draw.cap : N(); }
  DSLIDE_HD bool DenseDraw() const { return Count() > N() / 2; }
  DSLIDE_HD Rng MakeRng() const {
    return Rng(StreamSeed(draw.seed, streams::kBatchFill, draw.iter, draw.lane));
  }
  // ---- per-thread phases (tid of nt threads) ----
  /// fill = 0..n-1 (the dense draw).
  DSLIDE_HD void Iota(int tid, int nt) const {
    for (int64_t i = tid; i < N(); i += nt) fill[i] = static_cast<int32_t>(i);
  }
  /// scratch = src[0, n), padded to pow2 with the largest int.
  DSLIDE_HD void ToScratch(const int32_t* src, int64_t n, int tid, int nt) const {
    for (int64_t i = tid; i < pow2; i += nt) scratch[i] = i < n ? src[i] : 0x7fffffff;
  }
  /// One compare-exchange pass (size, stride) of the bitonic sort of scratch.
  DSLIDE_HD void BitonicPass(int64_t size, int64_t stride, int tid, int nt) const {
    BitonicPassOn(scratch, pow2, size, stride, tid, nt);
  }
  /// Whether scratch[i] is the first of its run (the sorted values' std::unique).
  DSLIDE_HD bool FirstOfRun(int64_t i) const { return i == 0 || scratch[i] != scratch[i - 1]; }
  /// Whether label j lies on the shard.
  DSLIDE_HD bool OnShard(int64_t j) const { return li[j] >= draw.begin && li[j] < draw.end; }
  DSLIDE_HD int32_t Local(int64_t j) const { return static_cast<int32_t>(li[j] - draw.begin); }
  /// Whether fill[i] is not among the m sorted labels at own + m.
  DSLIDE_HD bool NotALabel(int64_t i, int64_t m) const { return !SortedHas(own + m, m, fill[i]); }
};
void LaunchBatchFill(StreamHandle s, const BatchFill& k);
inline void LaunchKernel(StreamHandle s, const BatchFill& k) { LaunchBatchFill(s, k); }

/// src[0, n) sorted, without repeats, into dst (BlockSortUnique's phases: the block's
/// bitonic sort of k.scratch, each pass over shuffled threads); returns how many.
inline int64_t HostSortUnique(const BatchFill& k, const int32_t* src, int64_t n, int32_t* dst,
                              HostOrderSalt* salt) {
  constexpr int nt = BatchFill::kThreads;
  HostShuffled(nt, salt, [&](int64_t t) { k.ToScratch(src, n, static_cast<int>(t), nt); });
  for (int64_t size = 2; size <= k.pow2; size *= 2)
    for (int64_t stride = size / 2; stride > 0; stride /= 2)
      HostShuffled(nt, salt,
                   [&](int64_t t) { k.BitonicPass(size, stride, static_cast<int>(t), nt); });
  return HostCompact(
      n, [&](int64_t i) { return k.FirstOfRun(i); },
      [&](int64_t i, int64_t r) { dst[r] = k.scratch[i]; });
}

inline void RunOnHost(const BatchFill& k, HostOrderSalt* salt) {
  constexpr int nt = BatchFill::kThreads;
  if (!k.on) {
    k.shared_n[0] = k.shared_n[1] = 0;
    return;
  }
  const auto all = [&](auto f) {
    HostShuffled(nt, salt, [&](int64_t t) { f(static_cast<int>(t)); });
  };
  Rng rng = k.MakeRng();
  const int64_t n = k.N(), count = k.Count();
  int64_t got = 0;
  if (count > 0 && k.DenseDraw()) {
    all([&](int t) { k.Iota(t, nt); });
    SampleDown(k.fill, n, count, &rng);
    got = count;
  } else if (count > 0) {
    while (got < count) {
      while (got < count) k.fill[got++] = static_cast<int32_t>(rng.Below(n));
      got = HostSortUnique(k, k.fill, got, k.fill, salt);
    }
    Shuffle(k.fill, count, &rng);
  }
  if (k.li == nullptr) {
    all([&](int t) {
      for (int64_t i = t; i < got; i += nt) k.shared[i] = k.fill[i];
    });
    k.shared_n[0] = got;
    k.shared_n[1] = 0;
    return;
  }
  int64_t m = HostCompact(
      k.n_lab, [&](int64_t j) { return k.OnShard(j); },
      [&](int64_t j, int64_t r) { k.own[r] = k.Local(j); });
  m = HostSortUnique(k, k.own, m, k.own, salt);
  all([&](int t) {
    for (int64_t i = t; i < m; i += nt) k.own[m + i] = k.own[i];
  });
  Shuffle(k.own, m, &rng);
  all([&](int t) {
    for (int64_t i = t; i < m; i += nt) k.shared[i] = k.own[i];
  });
  const int64_t o = HostCompact(
      got, [&](int64_t i) { return k.NotALabel(i, m); },
      [&](int64_t i, int64_t r) { k.shared[m + r] = k.fill[i]; });
  k.shared_n[0] = m + o;
  k.shared_n[1] = m;
}
}  // namespace dslide::gpu
