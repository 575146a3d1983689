// The GPU backend on a CUDA device against the CPU backend. Exits with 77 (reported as
// skipped by ctest) where no device is visible.
#include <cstdio>

#include "devices/backend_factory.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_device.h"

#define DSLIDE_EQUIVALENCE_SUITE GpuEquivalence
#include "gpu_equivalence.h"

namespace dslide::testing {

std::unique_ptr<LayerBackend> GpuBackendUnderTest(const gpu::GpuTuning& tune) {
  return gpu::MakeGpuBackend(0, tune);  // device 0 of the visible ones, as MakeBackend on rank 0
}
std::unique_ptr<LayerBackend> BackendUnderTest() { return GpuBackendUnderTest({}); }
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
