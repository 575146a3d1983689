// The one place that knows which backends were built (CUDA or not): the backend of a device.
// Above the seam (src/backend) and the backends (src/cpu, src/gpu), which know nothing of it.
#pragma once

#include <memory>

#include "backend/layer_backend.h"
#include "config/config.h"

namespace dslide {

/// The backend for cfg.device: "cpu", or "gpu" where built with CUDA and a device exists,
/// on the GPU of this rank's local rank (gpu::ChooseDevice; `rank` when the launcher does
/// not say). Throws dslide::Error with the reason otherwise. The only place that branches
/// on CUDA.
std::unique_ptr<LayerBackend> MakeBackend(Device device, int rank, int gpus_per_node = 0);
/// The backends this build has: "cpu" or "cpu gpu" (`dslide --version`).
const char* BuiltBackends();

}  // namespace dslide
