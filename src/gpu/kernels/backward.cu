// The backward and update kernels (backward.h) on the device.
#include "gpu/kernels/backward.h"
#include "gpu/kernels/grid.cuh"

namespace dslide::gpu {

__global__ void InputGradientKernel(const InputGradient k) { GridStride(k); }
void LaunchInputGradient(StreamHandle s, const InputGradient& k) {
  InputGradientKernel<<<GridFor(k.Size(), 256), 256, 0, s>>>(k);
}

__global__ void FirstLayerGradientKernel(const FirstLayerGradient k) { GridStride(k); }
void LaunchFirstLayerGradient(StreamHandle s, const FirstLayerGradient& k) {
  FirstLayerGradientKernel<<<GridFor(k.Size(), 256), 256, 0, s>>>(k);
}

/// k(t) over the weights of the rows counted on the device (k.Rows() of them).
template <class K>
__device__ void OverCountedRows(const K& k) {
  const int64_t n = k.Rows() * k.cols;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x)
    k(t);
}

// Sized for every row that may be touched; the threads beyond the count exit at once.
__global__ void FirstLayerUpdateKernel(const FirstLayerUpdate k) { OverCountedRows(k); }
void LaunchFirstLayerUpdate(StreamHandle s, const FirstLayerUpdate& k) {
  FirstLayerUpdateKernel<<<GridFor(k.max_rows * k.cols, 256, 8192), 256, 0, s>>>(k);
}

__global__ void RowUpdateKernel(const RowUpdate k) { OverCountedRows(k); }
void LaunchRowUpdate(StreamHandle s, const RowUpdate& k) {
  RowUpdateKernel<<<GridFor(k.max_rows * k.cols, 256, 8192), 256, 0, s>>>(k);
}

}  // namespace dslide::gpu
