// The CUDA layer backend (host-safe header: no CUDA types).
#pragma once

#include <memory>

#include "layer_backend.h"

namespace dslide::gpu {

/// The GPU backend on CUDA device `device` (made current for the calling thread).
std::unique_ptr<LayerBackend> MakeGpuBackend(int device);

}  // namespace dslide::gpu
