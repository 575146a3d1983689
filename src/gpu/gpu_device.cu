// CUDA device discovery.
#include <cuda_runtime.h>

#include "gpu/gpu_device.h"

namespace dslide::gpu {

namespace {
cudaError_t g_last = cudaSuccess;
}

int DeviceCount() {
  int n = 0;
  g_last = cudaGetDeviceCount(&n);
  if (g_last != cudaSuccess) return 0;
  return n;
}

std::string DeviceError() {
  return g_last == cudaSuccess ? std::string("ok") : std::string(cudaGetErrorString(g_last));
}

}  // namespace dslide::gpu
