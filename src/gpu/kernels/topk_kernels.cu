// The top-k kernels (topk.h) on the device.
#include "gpu/kernels/grid.cuh"
#include "gpu/kernels/topk_kernels.h"

namespace dslide::gpu {

__global__ void TopKSegmentsKernel(const TopKSegments k) { GridStride(k); }
void LaunchTopKSegments(StreamHandle s, const TopKSegments& k) {
  TopKSegmentsKernel<<<GridFor(k.Size(), 128), 128, 0, s>>>(k);
}

__global__ void LabelLogitsKernel(const LabelLogits k) { GridStride(k); }
void LaunchLabelLogits(StreamHandle s, const LabelLogits& k) {
  LabelLogitsKernel<<<GridFor(k.Size(), 128), 128, 0, s>>>(k);
}

}  // namespace dslide::gpu
