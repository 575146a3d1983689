// The rebuild kernels (rebuild.h) on the device.
#include "gpu/kernels/grid.cuh"
#include "gpu/kernels/rebuild.h"

namespace dslide::gpu {

__global__ void HashRowsKernel(const HashRows k) { GridStride(k); }
__global__ void HashRowsStagedKernel(const HashRows k) {
  extern __shared__ float x[];
  constexpr int nt = HashRows::kThreads;
  for (int64_t u0 = blockIdx.x * int64_t{nt}; u0 < k.count; u0 += int64_t{gridDim.x} * nt) {
    k.Stage(u0, threadIdx.x, nt, x);
    __syncthreads();
    k.HashStaged(u0, threadIdx.x, x);
    __syncthreads();  // the next rows reuse x
  }
}
void LaunchHashRows(StreamHandle s, const HashRows& k) {
  if (k.Staged())
    HashRowsStagedKernel<<<GridFor(k.Size(), HashRows::kThreads), HashRows::kThreads,
                           k.SharedBytes(), s>>>(k);
  else
    HashRowsKernel<<<GridFor(k.Size(), 128), 128, 0, s>>>(k);
}

__global__ void FillBucketsKernel(const FillBuckets k) { GridStride(k); }
void LaunchFillBuckets(StreamHandle s, const FillBuckets& k) {
  // A warp a block: a table of few buckets has few threads, each a long serial reservoir
  // loop, so they go to as many multiprocessors as there are warps.
  FillBucketsKernel<<<GridFor(k.Size(), 32), 32, 0, s>>>(k);
}

}  // namespace dslide::gpu
