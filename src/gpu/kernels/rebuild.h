// Rebuild kernels: a shard's LSH tables from its weights (LshTables::Build's layout and
// FillBucket, the CPU's code, so both backends build the same tables).
#pragma once

#include <cmath>
#include <cstdint>

#include "gpu/kernels/common.h"
#include "lsh/lsh_kernels.h"
#include "lsh/select_kernel.h"

namespace dslide::gpu {

/// A thread per neuron of [c0, c0 + count): hashes the neuron's row [w, b] (scaled by
/// inv_m, with MIPS's extra coordinate) into every table, and writes one sort key per
/// table: (table, bucket) in the high 32 bits, the neuron in the low.
struct HashRows : PerIndex<HashRows> {
  HashView h;
  int64_t c0 = 0, count = 0, n = 0, in_dim = 0;
  bool input_major = false, mips = false;
  double inv_m = 1.0;
  const float *w = nullptr, *b = nullptr;
  const double* norm2 = nullptr;
  int32_t* arg = nullptr;    // count x num_hashes
  uint64_t* keys = nullptr;  // L x n

  DSLIDE_HD int64_t Size() const { return count; }
  DSLIDE_HD void operator()(int64_t u) const {
    const int64_t i = c0 + u;
    int32_t* a = arg + u * h.num_hashes;
    const float* w_ = w;
    const float* b_ = b;
    const int64_t n_ = n, dim = in_dim;
    const bool im = input_major, mp = mips;
    // 1 - norm2 * inv_m^2 rounded step by step as on the CPU: for the largest row it is
    // about 0, where a fused product would leave a residue that DWTA reads as non-zero.
    const double s = inv_m, rest = mips ? AddProductRounded(1.0, -norm2[i] * inv_m, inv_m) : 0.0;
    HashRawDense(
        h,
        [=](int64_t j) -> float {
          if (j < dim) return static_cast<float>(w_[im ? j * n_ + i : i * dim + j] * s);
          if (j == dim) return static_cast<float>(b_[i] * s);
          return mp ? static_cast<float>(sqrt(rest > 0.0 ? rest : 0.0)) : 0.0f;
        },
        a);
    const int bits = h.table_bits;
    for (int t = 0; t < h.l; ++t)
      keys[static_cast<int64_t>(t) * n + i] =
          ((static_cast<uint64_t>(t) << bits | HashCombineOne(h, a, t)) << 32) |
          static_cast<uint64_t>(i);
  }
};
void LaunchHashRows(StreamHandle s, const HashRows& k);
inline void LaunchKernel(StreamHandle s, const HashRows& k) { LaunchHashRows(s, k); }
inline void RunOnHost(const HashRows& k, HostOrderSalt* salt) { RunPerIndexOnHost(k, salt); }

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
