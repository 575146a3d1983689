// The equivalence suite (common/backend_equivalence.h) with a second CPU backend as the backend
// under test: two instances in one process, on one thread, agree bit for bit (weights,
// tables, active sets, activations, gradients, Adam steps, checkpoints, the trainer's
// losses), so no state is shared between backends and no step depends on more than its
// inputs. A new backend joins the suite the same way: BackendUnderTest and its tolerance.
#include "cpu/cpu_backend.h"

#define DSLIDE_EQUIVALENCE_SUITE CpuEquivalence
#include "../common/backend_equivalence.h"

namespace dslide::testing {

std::unique_ptr<LayerBackend> BackendUnderTest() { return std::make_unique<cpu::CpuBackend>(); }
const double kTol = 0.0;

}  // namespace dslide::testing
