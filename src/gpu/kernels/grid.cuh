// Launch shapes and loops that the kernels' .cu files share (CUDA only).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "gpu/kernels/cuda_check.cuh"

namespace dslide::gpu {

/// Blocks for a grid-stride loop over n items of `threads` threads each (at most `most`).
inline unsigned GridFor(int64_t n, int threads, int64_t most = int64_t{1} << 20) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, most)));
}

/// k(i) for the indices [0, k.Size()) of a one-thread-per-index kernel.
template <class K>
__device__ void GridStride(const K& k) {
  const int64_t n = k.Size();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    k(i);
}

/// The sum over a warp's 32 lanes in every lane (the butterfly that ButterflySum32 emulates).
__device__ inline float WarpSum(float v) {
  for (int off = 16; off >= 1; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

}  // namespace dslide::gpu
