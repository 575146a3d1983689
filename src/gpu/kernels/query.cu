// The query kernels (query.h) on the device.
#include "grid.cuh"
#include "query.h"

namespace dslide::gpu {

__global__ void QueryHashKernel(const QueryHash k) {
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int64_t i = blockIdx.x; i < k.q.B; i += gridDim.x) {
    k.Raw(i, tid, nt);
    __syncthreads();
    k.Densify(i, tid);
    __syncthreads();
    k.Combine(i, tid, nt);
  }
}

void LaunchQueryHash(StreamHandle s, const QueryHash& k) {
  QueryHashKernel<<<GridFor(k.q.B, 1), QueryHash::kThreads, 0, s>>>(k);
}

__global__ void SelectKernel(const Select k) { GridStride(k); }

void LaunchSelect(StreamHandle s, const Select& k) {
  // Few threads a block: a thread's selection is long and its scratch private.
  SelectKernel<<<GridFor(k.B, 32), 32, 0, s>>>(k);
}

__global__ void BatchFillKernel(const BatchFill k) { k.Run(); }

void LaunchBatchFill(StreamHandle s, const BatchFill& k) { BatchFillKernel<<<1, 1, 0, s>>>(k); }

}  // namespace dslide::gpu
