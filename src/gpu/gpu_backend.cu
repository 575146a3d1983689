// The GPU backend instantiated on the CUDA executor.
#include "gpu/cuda_exec.cuh"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_backend_impl.h"

namespace dslide::gpu {

std::unique_ptr<LayerBackend> MakeGpuBackend(int device, const GpuTuning& tune) {
  DSLIDE_CUDA_CHECK(cudaSetDevice(device));
  return std::make_unique<GpuBackendT<CudaExec>>(tune);  // its streams on `device`
}

}  // namespace dslide::gpu
