// Launch shapes of the GPU backend's kernels (host-safe header). The defaults suit an
// A100/H100; the tests shrink them to reach every path (inputs that do not fit shared
// memory) on small batches.
#pragma once

#include <cstdint>

namespace dslide::gpu {

struct GpuTuning {
  int64_t shared_floats = 12 * 1024;  ///< a dense input row up to this many floats sits in
                                      ///< shared memory (48 KiB); larger rows are read from
                                      ///< global memory
  int64_t shared_entries = 4 * 1024;  ///< this many of a sparse input's entries sit in
                                      ///< shared memory (32 KiB); the rest are read from
                                      ///< global memory
  int device_exchange = -1;           ///< collectives on device memory (the fused gradient of
                                      ///< data parallelism, the snapshot exchange: 1), on host
                                      ///< memory (0), or on device memory when MPI is
                                      ///< CUDA-aware (-1, MpiReadsDeviceMemory)
  int64_t device_free_bytes = -1;     ///< the device memory Init counts as free (-1: what
                                      ///< the device reports); the tests set it to reach the
                                      ///< refusal of a model that does not fit
};

}  // namespace dslide::gpu
