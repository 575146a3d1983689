// The CUDA layer backend (host-safe header: no CUDA types).
#pragma once

#include <memory>

#include "backend/layer_backend.h"
#include "gpu/gpu_tuning.h"

namespace dslide::gpu {

/// The GPU backend on CUDA device `device` (made current for the calling thread).
std::unique_ptr<LayerBackend> MakeGpuBackend(int device, const GpuTuning& tune = {});

}  // namespace dslide::gpu
