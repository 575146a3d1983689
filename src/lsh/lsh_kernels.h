// The hash computations of LshHash over plain arrays, shared by the CPU backend (through
// LshHash) and the CUDA kernels, so both backends put every vector in the same buckets.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.h"
#include "common/rng.h"

namespace dslide {

/// LshHash's functions as raw pointers (host or device memory) plus their sizes.
struct HashView {
  enum Family : int { kSrp = 0, kWta = 1, kDwta = 2 };
  int family = kSrp;
  int64_t dim = 0;
  int k = 0, l = 0, bin_size = 2, bits_per_hash = 1, table_bits = 1, num_hashes = 0;
  int max_table_bits = 20;
  uint64_t seed = 0;
  const int64_t* proj_off = nullptr;  // SRP: per hash, its (index, sign) entries
  const int32_t* proj_idx = nullptr;
  const int8_t* proj_sign = nullptr;
  const int64_t* inv_off = nullptr;   // per input coordinate, the hashes it enters
  const int32_t* inv_hash = nullptr;  // SRP: hash id; WTA/DWTA: hash id * bin_size + position
  const int8_t* inv_sign = nullptr;
  const int32_t* bins = nullptr;  // WTA/DWTA: per hash, bin_size coordinates
};

/// The bucket id (table_bits bits) of table t from its K raw hash values.
DSLIDE_HD inline uint32_t HashCombineOne(const HashView& h, const int32_t* raw, int t) {
  const bool fold = h.k * h.bits_per_hash > h.max_table_bits;
  uint64_t code = 0;
  for (int j = 0; j < h.k; ++j)
    code = fold ? Mix64(code ^ static_cast<uint64_t>(raw[t * h.k + j]) ^ (uint64_t(j) << 40))
                : (code << h.bits_per_hash) | static_cast<uint64_t>(raw[t * h.k + j]);
  return static_cast<uint32_t>(code & ((uint64_t{1} << h.table_bits) - 1));
}

/// K raw hash values per table -> L bucket ids of table_bits bits.
DSLIDE_HD inline void HashCombine(const HashView& h, const int32_t* raw, uint32_t* buckets) {
  for (int t = 0; t < h.l; ++t) buckets[t] = HashCombineOne(h, raw, t);
}

/// Empty bins (arg < 0) borrow the value of another hash chosen by a universal hash of
/// (hash id, attempt): the densification of Chen & Shrivastava, "Densified WTA".
DSLIDE_HD inline void HashDensify(const HashView& h, int32_t* arg) {
  for (int i = 0; i < h.num_hashes; ++i) {
    if (arg[i] >= 0) continue;
    int32_t v = 0;
    for (uint64_t attempt = 1; attempt <= 100; ++attempt) {
      const int i2 = static_cast<int>(Mix64(h.seed ^ (uint64_t(i) << 20) ^ attempt) % h.num_hashes);
      if (arg[i2] >= 0 && (arg[i2] & (1 << 30)) == 0) {
        v = arg[i2];
        break;
      }
    }
    arg[i] = v | (1 << 30);  // mark as borrowed so chains never borrow a borrowed value
  }
  for (int i = 0; i < h.num_hashes; ++i) arg[i] &= ~(1 << 30);
}

/// Raw hash value i of a dense vector given by x(j), j < dim (before DWTA's densification:
/// an empty DWTA bin gives -1).
template <class Get>
DSLIDE_HD int32_t HashOneDense(const HashView& h, const Get& x, int i) {
  if (h.family == HashView::kSrp) {
    float acc = 0;
    for (int64_t e = h.proj_off[i]; e < h.proj_off[i + 1]; ++e)
      acc += static_cast<float>(h.proj_sign[e]) * x(h.proj_idx[e]);
    return acc >= 0 ? 1 : 0;
  }
  const int32_t* bin = h.bins + static_cast<int64_t>(i) * h.bin_size;
  float best = -HUGE_VALF;
  int arg = -1;
  for (int p = 0; p < h.bin_size; ++p) {
    const float v = x(bin[p]);
    if (h.family == HashView::kDwta && v == 0.0f) continue;
    if (v > best) {
      best = v;
      arg = p;
    }
  }
  return arg;
}

/// Raw hash values (num_hashes of them) of a dense vector given by x(j), j < dim.
template <class Get>
DSLIDE_HD void HashRawDense(const HashView& h, const Get& x, int32_t* out) {
  for (int i = 0; i < h.num_hashes; ++i) out[i] = HashOneDense(h, x, i);
  if (h.family == HashView::kDwta) HashDensify(h, out);
}

/// Raw hash values of a sparse vector (ids ascending in [0, dim)); acc holds num_hashes
/// floats of scratch.
DSLIDE_HD inline void HashRawSparse(const HashView& h, const int32_t* ids, const float* vals,
                                    int64_t n, float* acc, int32_t* arg) {
  for (int i = 0; i < h.num_hashes; ++i) arg[i] = -1;
  if (h.family == HashView::kSrp) {
    for (int i = 0; i < h.num_hashes; ++i) acc[i] = 0.0f;
    for (int64_t e = 0; e < n; ++e) {
      const float v = vals[e];
      for (int64_t p = h.inv_off[ids[e]]; p < h.inv_off[ids[e] + 1]; ++p)
        acc[h.inv_hash[p]] += static_cast<float>(h.inv_sign[p]) * v;
    }
    for (int i = 0; i < h.num_hashes; ++i) arg[i] = acc[i] >= 0 ? 1 : 0;
    return;
  }
  // Only non-zeros take part; WTA on a sparse input treats the missing coordinates as zeros,
  // DWTA as absent (then densifies).
  for (int i = 0; i < h.num_hashes; ++i) acc[i] = -HUGE_VALF;
  for (int64_t e = 0; e < n; ++e) {
    const float v = vals[e];
    if (v == 0.0f) continue;
    for (int64_t p = h.inv_off[ids[e]]; p < h.inv_off[ids[e] + 1]; ++p) {
      const int i = h.inv_hash[p] / h.bin_size;
      if (v > acc[i]) {
        acc[i] = v;
        arg[i] = h.inv_hash[p] % h.bin_size;
      }
    }
  }
  if (h.family == HashView::kDwta) {
    HashDensify(h, arg);
    return;
  }
  // WTA: a bin whose non-zeros are all negative (or absent) has its max at a zero coordinate.
  for (int i = 0; i < h.num_hashes; ++i) {
    if (acc[i] > 0) continue;
    const int32_t* bin = h.bins + static_cast<int64_t>(i) * h.bin_size;
    int zero_pos = -1;
    for (int p = 0; p < h.bin_size && zero_pos < 0; ++p) {
      int64_t lo = 0, hi = n;  // first id >= bin[p]
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (ids[mid] < bin[p])
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == n || ids[lo] != bin[p] || vals[lo] == 0.0f) zero_pos = p;
    }
    if (zero_pos >= 0) arg[i] = zero_pos;
    if (arg[i] < 0) arg[i] = 0;
  }
}

}  // namespace dslide
