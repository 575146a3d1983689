// The one place that knows which backends were built (CUDA or not).
#include "cpu/cpu_backend.h"
#include "error.h"
#include "layer_backend.h"
#ifdef DSLIDE_WITH_CUDA
#include "gpu/gpu_device.h"
#endif

namespace dslide {

std::unique_ptr<LayerBackend> MakeBackend(Device device, int local_rank) {
  if (device == Device::kCpu) return std::make_unique<cpu::CpuBackend>();
#ifdef DSLIDE_WITH_CUDA
  const int devices = gpu::DeviceCount();
  DSLIDE_CHECK(devices > 0, "--device gpu: no CUDA device is visible (",
               gpu::DeviceError(), ")");
  throw Error(detail::Concat("--device gpu: ", devices,
                             " CUDA device(s) found, but the GPU layer backend is not "
                             "implemented in this version; use --device cpu"));
#else
  (void)local_rank;
  throw Error("--device gpu: this dslide was built without CUDA (configure with -DDSLIDE_CUDA=ON)");
#endif
}

}  // namespace dslide
