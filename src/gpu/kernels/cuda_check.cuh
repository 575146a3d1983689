// The error check of every CUDA runtime call of the GPU backend.
#pragma once

#include <cuda_runtime.h>

#include "common/error.h"

#define DSLIDE_CUDA_CHECK(call)                                                               \
  do {                                                                                        \
    const cudaError_t err_ = (call);                                                          \
    if (err_ != cudaSuccess)                                                                  \
      throw ::dslide::Error(                                                                  \
          ::dslide::detail::Concat("CUDA error in ", #call, ": ", cudaGetErrorString(err_))); \
  } while (0)
