// The one place that knows which backends were built (CUDA or not).
#include "cpu_backend.h"
#include "device_choice.h"
#include "error.h"
#include "layer_backend.h"
#ifdef DSLIDE_WITH_CUDA
#include "gpu_backend.h"
#include "gpu_device.h"
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
