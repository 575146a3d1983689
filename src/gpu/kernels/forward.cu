// The forward kernels (forward.h) on the device.
#include "gpu/kernels/forward.h"
#include "gpu/kernels/grid.cuh"

namespace dslide::gpu {

__global__ void ForwardRowsKernel(const ForwardRows k) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid % 32, warp = tid / 32, warps = nt / 32;
  for (int64_t i = blockIdx.x; i < k.in.B; i += gridDim.x) {
    float* x = k.Input(i, smem);
    k.Clear(i, tid, nt, x);
    __syncthreads();
    k.Scatter(i, tid, nt, x);
    __syncthreads();
    for (int64_t a = warp; a < k.act.n[i]; a += warps) {
      const float dot = WarpSum(k.Partial(i, a, lane, x));
      if (lane == 0) k.Store(i, a, dot);
    }
    __syncthreads();  // the next sample's input reuses x
  }
}

void LaunchForwardRows(StreamHandle s, const ForwardRows& k) {
  ForwardRowsKernel<<<GridFor(k.in.B, 1), ForwardRows::kThreads, k.SharedBytes(), s>>>(k);
}

__global__ void ForwardInputMajorKernel(const ForwardInputMajor k) {
  extern __shared__ __align__(16) unsigned char smem[];
  for (int64_t i = blockIdx.x; i < k.in.B; i += gridDim.x) {
    k.Load(i, threadIdx.x, blockDim.x, smem);
    __syncthreads();
    k.Neurons(i, threadIdx.x, blockDim.x, smem);
    __syncthreads();
  }
}

void LaunchForwardInputMajor(StreamHandle s, const ForwardInputMajor& k) {
  ForwardInputMajorKernel<<<GridFor(k.in.B, 1), ForwardInputMajor::kThreads, k.SharedBytes(), s>>>(
      k);
}

}  // namespace dslide::gpu
