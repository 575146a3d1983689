// Thread-level parallelism for the core without exposing OpenMP in headers.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>

namespace dslide {

/// Sets the number of threads used by ParallelFor and OpenMP regions (0: leave default).
void SetNumThreads(int threads);
/// Threads a parallel region will use.
int NumThreads();
/// Index of the calling thread inside a parallel region (0 outside).
int ThreadId();

/// Runs fn(i) for i in [0, n) on the OpenMP threads (dynamic schedule, chunks of `chunk`).
/// An exception thrown by fn stops nothing in flight but is rethrown (the first one) after
/// the region: no exception leaves an OpenMP region.
void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn, int64_t chunk = 1);

}  // namespace dslide
