// The GPU backend's kernels, layouts and bookkeeping on the host executor, against the CPU
// backend: runs everywhere, so the GPU code's logic is tested on machines without a GPU.
#include "gpu/gpu_backend_impl.h"
#include "gpu/host_exec.h"

#define DSLIDE_EQUIVALENCE_SUITE GpuEquivalence
#include "gpu_equivalence.h"

namespace dslide::testing {

std::unique_ptr<LayerBackend> GpuBackendUnderTest(const gpu::GpuTuning& tune) {
  return std::make_unique<gpu::GpuBackendT<gpu::HostExec>>(tune);
}
std::unique_ptr<LayerBackend> BackendUnderTest() { return GpuBackendUnderTest({}); }
// Same float operations as the CPU backend up to summation order (SIMD reductions there).
const double kTol = 2e-6;

}  // namespace dslide::testing
