// What the kernels of src/gpu/kernels/ share, host-safe: the stream handle of their
// LaunchXxx wrappers, float atomics and checks that compile for both sides, and the frame
// of the kernels that run one thread per index.
//
// Every kernel is a struct of its arguments (raw device pointers and sizes) whose DSLIDE_HD
// members are the per-thread code. Its `__global__` kernel and LaunchXxx(stream, args)
// wrapper live in the matching .cu file, where warps and blocks combine their threads'
// results with shuffles and CUB; RunOnHost(args, salt) runs the same per-thread code on the
// host (HostExec, for the tests), the collectives done in order over shuffled threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.h"
#include "gpu/kernels/host_order.h"

struct CUstream_st;

namespace dslide::gpu {

/// A CUDA stream (cudaStream_t), named without the CUDA headers.
using StreamHandle = CUstream_st*;

DSLIDE_HD inline void AtomicAddF(float* p, float v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;  // the host emulation runs threads one at a time
#endif
}

/// Integer atomics (plain operations on the host, whose emulation runs threads one at a
/// time): compare-and-swap returning the old value, add, min.
DSLIDE_HD inline int32_t AtomicCasI32(int32_t* p, int32_t expected, int32_t desired) {
#if defined(__CUDA_ARCH__)
  return atomicCAS(p, expected, desired);
#else
  const int32_t old = *p;
  if (old == expected) *p = desired;
  return old;
#endif
}
DSLIDE_HD inline void AtomicAddI32(int32_t* p, int32_t v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}
DSLIDE_HD inline void AtomicMinI32(int32_t* p, int32_t v) {
#if defined(__CUDA_ARCH__)
  atomicMin(p, v);
#else
  if (v < *p) *p = v;
#endif
}

DSLIDE_HD inline bool Finite(float v) {
#if defined(__CUDA_ARCH__)
  return isfinite(v);
#else
  return std::isfinite(v);
#endif
}

/// a + x * y with the product rounded before the sum, as the CPU backend computes it (nvcc
/// would fuse the two into one rounding): for values that must agree bit for bit with the
/// CPU's, such as the norms that decide the LSH tables.
DSLIDE_HD inline double AddProductRounded(double a, double x, double y) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, __dmul_rn(x, y));
#else
  return a + x * y;
#endif
}

/// A batch's rows in the device's padded layout: row i's entries at [i * cap, i * cap +
/// n[i]); `dense` rows hold ids 0..n-1 (ids then unused).
struct RowsView {
  int64_t B = 0, cap = 1;
  const int64_t* n = nullptr;
  const int32_t* ids = nullptr;
  const float* vals = nullptr;
  bool dense = false;
};

/// A kernel of one thread per index in [0, K::Size()), each running K::operator()(index):
/// a grid-stride loop on the device, a shuffled loop on the host.
template <class K>
struct PerIndex {
  bool Empty() const { return static_cast<const K*>(this)->Size() <= 0; }
};
template <class K>
void RunPerIndexOnHost(const K& k, HostOrderSalt* salt) {
  HostShuffled(k.Size(), salt, [&](int64_t i) { k(i); });
}

/// The sum that a warp's butterfly of shuffles (__shfl_xor_sync with offsets 16, 8, 4, 2,
/// 1) leaves in every lane, over 32 lane values, for the host emulation: the same additions
/// in the same pairs (the lanes' own sums may still differ on the device, where products
/// and sums fuse).
inline float ButterflySum32(float* v) {
  for (int off = 16; off >= 1; off /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ off];
    for (int l = 0; l < 32; ++l) v[l] = next[l];
  }
  return v[0];
}

}  // namespace dslide::gpu
