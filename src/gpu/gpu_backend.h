// The CUDA layer backend (host-safe header: no CUDA types).
#pragma once

#include <memory>

#include "gpu_tuning.h"
#include "layer_backend.h"

namespace dslide::gpu {

/// The GPU backend on CUDA device `device` (made current for the calling thread).
std::unique_ptr<LayerBackend> MakeGpuBackend(int device, const GpuTuning& tune = {});

}  // namespace dslide::gpu
