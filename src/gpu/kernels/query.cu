// The query kernels (query.h) on the device.
#include <cub/block/block_scan.cuh>

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

__global__ void SelectKernel(const Select k) {
  using Scan = cub::BlockScan<int, Select::kThreads>;
  __shared__ typename Scan::TempStorage ts;
  __shared__ int carry;  // candidates gathered by the tiles before
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int64_t i = blockIdx.x; i < k.B; i += gridDim.x) {
    k.Clear(i, tid, nt);
    __syncthreads();
    if (tid == 0) k.Prepare(i);
    __syncthreads();
    if (k.Counting()) {
      k.Count(i, tid, nt);
      if (tid == 0) carry = 0;
      __syncthreads();
      const int32_t total = k.Total(i);
      for (int32_t base = 0; base < total; base += nt) {
        const int32_t p = base + tid;
        const int flag = p < total && k.FirstAt(i, p) ? 1 : 0;
        int rank, tile;
        Scan(ts).ExclusiveSum(flag, rank, tile);
        if (flag) k.Emit(i, carry + rank, p);
        __syncthreads();  // carry read, ts free again
        if (tid == 0) carry += tile;
        __syncthreads();
      }
      if (tid == 0) k.SetGathered(i, carry);
      __syncthreads();
    }
    if (tid == 0) k.Run(i);
    __syncthreads();  // the next sample's set reuses nothing, but its Clear follows Run
  }
}

void LaunchSelect(StreamHandle s, const Select& k) {
  SelectKernel<<<GridFor(k.B, 1), Select::kThreads, 0, s>>>(k);
}

__global__ void BatchFillKernel(const BatchFill k) { k.Run(); }

void LaunchBatchFill(StreamHandle s, const BatchFill& k) { BatchFillKernel<<<1, 1, 0, s>>>(k); }

}  // namespace dslide::gpu
