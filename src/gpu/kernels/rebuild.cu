// The rebuild kernels (rebuild.h) on the device.
#include "gpu/kernels/grid.cuh"
#include "gpu/kernels/rebuild.h"

namespace dslide::gpu {

__global__ void HashRowsKernel(const HashRows k) { GridStride(k); }
void LaunchHashRows(StreamHandle s, const HashRows& k) {
  HashRowsKernel<<<GridFor(k.Size(), 128), 128, 0, s>>>(k);
}

__global__ void FillBucketsKernel(const FillBuckets k) { GridStride(k); }
void LaunchFillBuckets(StreamHandle s, const FillBuckets& k) {
  FillBucketsKernel<<<GridFor(k.Size(), 256), 256, 0, s>>>(k);
}

}  // namespace dslide::gpu
