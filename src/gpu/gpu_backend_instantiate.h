// Included by the GPU backend's phase files (src/gpu/backend_*.cu), which define members of
// GpuBackendT and instantiate them for one executor: CudaExec where nvcc compiles them (the
// dslide_gpu library), HostExec where the host compiler does (the tests' emulation, built
// from the same files). DSLIDE_GPU_INSTANTIATE(M) expands M(executor).
#pragma once

#include "gpu/gpu_backend_impl.h"

#if defined(__CUDACC__)
#include "gpu/cuda_exec.cuh"
#define DSLIDE_GPU_INSTANTIATE(MEMBERS) MEMBERS(CudaExec)
#else
#include "gpu/host_exec.h"
#define DSLIDE_GPU_INSTANTIATE(MEMBERS) MEMBERS(HostExec)
#endif
