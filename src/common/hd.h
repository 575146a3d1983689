// DSLIDE_HD marks functions that the CPU backend and the CUDA kernels share: compiled for
// both host and device by nvcc, plain inline functions for the host compiler.
#pragma once

#if defined(__CUDACC__)
#define DSLIDE_HD __host__ __device__
#else
#define DSLIDE_HD
#endif
