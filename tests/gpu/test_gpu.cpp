// The GPU backend on a CUDA device against the CPU backend. Exits with 77 (reported as
// skipped by ctest) where no device is visible.
#include <cstdio>

#include "gpu/gpu_backend.h"
#include "gpu/gpu_device.h"

#include "backend_equivalence.h"

namespace dslide::testing {

std::unique_ptr<LayerBackend> BackendUnderTest(const gpu::GpuTuning& tune) {
  // The factory's device choice; launch shapes other than the defaults need the tuned maker.
  const gpu::GpuTuning defaults;
  if (tune.forward_chunks == defaults.forward_chunks && tune.forward_chunk_min == defaults.forward_chunk_min &&
      tune.shared_floats == defaults.shared_floats && tune.shared_entries == defaults.shared_entries)
    return MakeBackend(Device::kGpu, 0);
  return gpu::MakeGpuBackend(0, tune);
}
// Fused multiply-adds and a different summation order on the device.
const double kTol = 2e-5;

}  // namespace dslide::testing

int main(int argc, char** argv) {
  if (dslide::gpu::DeviceCount() == 0) {
    std::printf("no CUDA device (%s): GPU tests skipped\n", dslide::gpu::DeviceError().c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
