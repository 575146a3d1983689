// Rebuild kernels: a shard's LSH tables from its weights (LshTables::Build's layout and
// FillBucket, the CPU's code, so both backends build the same tables).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/kernels/common.h"
#include "lsh/lsh_kernels.h"
#include "lsh/select_kernel.h"

namespace dslide::gpu {

/// A thread per neuron of [c0, c0 + count): hashes the neuron's row [w, b] (scaled by
/// inv_m, with MIPS's extra coordinate) into every table, and writes one sort key per
/// table: (table, bucket) in the high 32 bits, the neuron in the low. On the device a
/// block first stages its kThreads rows in shared memory, read once and coalesced (a
/// thread's hash functions read each coordinate of its row several times, at random), each
/// row kStride() floats apart (odd, so the threads of a warp read distinct banks); rows
/// wider than the shared memory read device memory directly (Staged() false).
struct HashRows : PerIndex<HashRows> {
  static constexpr int kThreads = 64;
  static constexpr size_t kMostShared = 48 * 1024;
  HashView h;
  int64_t c0 = 0, count = 0, n = 0, in_dim = 0;
  bool input_major = false, mips = false;
  double inv_m = 1.0;
  const float *w = nullptr, *b = nullptr;
  const double* norm2 = nullptr;
  int32_t* arg = nullptr;    // count x num_hashes
  uint64_t* keys = nullptr;  // L x n

  DSLIDE_HD int64_t Size() const { return count; }
  DSLIDE_HD int64_t Stride() const { return h.dim | 1; }
  size_t SharedBytes() const { return kThreads * static_cast<size_t>(Stride()) * sizeof(float); }
  bool Staged() const { return SharedBytes() <= kMostShared; }

  /// The coordinate of neuron i's hashed row beyond its bias: MIPS's completion, sqrt(1 -
  /// norm2 * inv_m^2) rounded step by step as on the CPU (for the largest row it is about
  /// 0, where a fused product would leave a residue that DWTA reads as non-zero); 0 without
  /// MIPS.
  DSLIDE_HD float Last(int64_t i) const {
    if (!mips) return 0.0f;
    const double rest = AddProductRounded(1.0, -norm2[i] * inv_m, inv_m);
    return static_cast<float>(sqrt(rest > 0.0 ? rest : 0.0));
  }
  /// Coordinate j (< h.dim) of neuron i's hashed row.
  DSLIDE_HD float Coord(int64_t i, int64_t j) const {
    if (j < in_dim) return static_cast<float>(w[input_major ? j * n + i : i * in_dim + j] * inv_m);
    if (j == in_dim) return static_cast<float>(b[i] * inv_m);
    return Last(i);
  }
  /// Neuron c0 + u's raw hashes and sort keys, its coordinates given by x(j).
  template <class Get>
  DSLIDE_HD void Hash(int64_t u, const Get& x) const {
    const int64_t i = c0 + u;
    int32_t* a = arg + u * h.num_hashes;
    HashRawDense(h, x, a);
    const int bits = h.table_bits;
    for (int t = 0; t < h.l; ++t)
      keys[static_cast<int64_t>(t) * n + i] =
          ((static_cast<uint64_t>(t) << bits | HashCombineOne(h, a, t)) << 32) |
          static_cast<uint64_t>(i);
  }
  /// Neuron c0 + u from device memory (rows too wide to stage): MIPS's coordinate once.
  DSLIDE_HD void operator()(int64_t u) const {
    const int64_t i = c0 + u;
    const float last = Last(i);
    Hash(u, [this, i, last](int64_t j) { return j <= in_dim ? Coord(i, j) : last; });
  }
  /// Thread tid of nt's share of staging the rows [u0, u0 + kThreads) of the chunk into
  /// x: consecutive threads on consecutive weights of the layout.
  DSLIDE_HD void Stage(int64_t u0, int tid, int nt, float* x) const {
    const int64_t rows = count - u0 < kThreads ? count - u0 : kThreads, dim = h.dim;
    const int64_t stride = Stride();
    for (int64_t e = tid; e < rows * dim; e += nt) {
      const int64_t r = input_major ? e % rows : e / dim, j = input_major ? e / rows : e % dim;
      x[r * stride + j] = Coord(c0 + u0 + r, j);
    }
  }
  /// Thread tid's neuron u0 + tid from the staged rows.
  DSLIDE_HD void HashStaged(int64_t u0, int tid, const float* x) const {
    if (u0 + tid >= count) return;
    const float* row = x + tid * Stride();
    Hash(u0 + tid, [row](int64_t j) { return row[j]; });
  }
};
void LaunchHashRows(StreamHandle s, const HashRows& k);
inline void LaunchKernel(StreamHandle s, const HashRows& k) { LaunchHashRows(s, k); }
inline void RunOnHost(const HashRows& k, HostOrderSalt* salt) {
  if (!k.Staged()) return RunPerIndexOnHost(k, salt);
  constexpr int nt = HashRows::kThreads;
  std::vector<float> x(k.SharedBytes() / sizeof(float));
  HostShuffled((k.count + nt - 1) / nt, salt, [&](int64_t blk) {
    std::fill(x.begin(), x.end(), std::nanf(""));  // a coordinate no thread staged is NaN
    HostShuffled(nt, salt,
                 [&](int64_t t) { k.Stage(blk * nt, static_cast<int>(t), nt, x.data()); });
    HostShuffled(nt, salt,
                 [&](int64_t t) { k.HashStaged(blk * nt, static_cast<int>(t), x.data()); });
  });
}

/// A thread per (table, bucket or end): the table's offsets (relative to its first id) and
/// first-id base, and the bucket's ids from its run of the sorted keys (FillBucket: capped,
/// FIFO or reservoir).
struct FillBuckets : PerIndex<FillBuckets> {
  int nt = 0, cap = 0;
  int64_t nb = 0;
  bool fifo = false;
  uint64_t seed = 0;
  const uint32_t *gp = nullptr, *rs = nullptr, *re = nullptr;
  const int32_t* items = nullptr;
  int32_t* tids = nullptr;
  uint32_t* toff = nullptr;
  int64_t* tbase = nullptr;

  DSLIDE_HD int64_t Size() const { return nt * (nb + 1); }
  DSLIDE_HD void operator()(int64_t u) const {
    const int64_t t = u / (nb + 1), bb = u % (nb + 1);
    toff[u] = gp[t * nb + bb] - gp[t * nb];
    if (bb == 0) tbase[t] = gp[t * nb];
    if (t == nt - 1 && bb == nb) tbase[nt] = gp[nt * nb];
    if (bb == nb) return;
    const int64_t tb = t * nb + bb;
    const int64_t count = static_cast<int64_t>(re[tb]) - rs[tb];
    if (count > 0)
      FillBucket(items + rs[tb], count, cap, fifo,
                 BucketSeed(seed, static_cast<int>(t), static_cast<uint32_t>(bb)), tids + gp[tb]);
  }
};
void LaunchFillBuckets(StreamHandle s, const FillBuckets& k);
inline void LaunchKernel(StreamHandle s, const FillBuckets& k) { LaunchFillBuckets(s, k); }
inline void RunOnHost(const FillBuckets& k, HostOrderSalt* salt) { RunPerIndexOnHost(k, salt); }

}  // namespace dslide::gpu
