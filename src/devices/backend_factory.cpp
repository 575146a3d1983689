// The backend of a device (backend_factory.h).
#include "devices/backend_factory.h"

#include "backend/layer_backend.h"
#include "common/error.h"
#include "cpu/cpu_backend.h"
#include "gpu/device_choice.h"
#ifdef DSLIDE_WITH_CUDA
#include "gpu/gpu_backend.h"
#include "gpu/gpu_device.h"
#endif

namespace dslide {

std::unique_ptr<LayerBackend> MakeBackend(Device device, int rank, int gpus_per_node) {
  if (device == Device::kCpu) return std::make_unique<cpu::CpuBackend>();
#ifdef DSLIDE_WITH_CUDA
  const int local = gpu::LocalRankFromEnv(rank);
  const int local_size = std::max(gpu::LocalSizeFromEnv(), 1);
  const int visible = gpu::DeviceCount();
  return gpu::MakeGpuBackend(
      gpu::ChooseDevice(local, local_size, gpus_per_node, visible, gpu::DeviceError()));
#else
  (void)rank;
  (void)gpus_per_node;
  throw Error("--device gpu: this dslide was built without CUDA (configure with -DDSLIDE_CUDA=ON)");
#endif
}

const char* BuiltBackends() {
#ifdef DSLIDE_WITH_CUDA
  return "cpu gpu";
#else
  return "cpu";
#endif
}

}  // namespace dslide
