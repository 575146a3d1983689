// Thread-level parallelism for the core without exposing OpenMP in headers.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace dslide {

/// The environment variable that makes OpenMP's idle threads sleep instead of spinning, and
/// its value: on a machine shared with other work a spinning thread takes the CPU that its
/// siblings need to reach the next barrier (2 threads beside 4 busy processes on 2 cores:
/// 319 ms per Amazon-shape step spinning, 84-92 sleeping; the same when alone).
constexpr const char* kWaitPolicyVar = "OMP_WAIT_POLICY";
constexpr const char* kWaitPolicy = "PASSIVE";
/// libgomp's spin count before an idle thread sleeps (it overrides the wait policy there;
/// other runtimes ignore it and sleep at once), and its value: a short spin, so that a
/// step's many parallel regions do not each put the threads to sleep and wake them, while a
/// thread on a busy machine gives its core back within microseconds (wordnet-hypernyms,
/// 1,155 iterations on 2 threads: 5.7 s sleeping at once, 4.3-4.8 s with this spin; beside 2
/// and 4 busy processes as fast as sleeping at once, docs/benchmarks.md "A step on a busy
/// machine").
constexpr const char* kSpinCountVar = "GOMP_SPINCOUNT";
constexpr const char* kSpinCount = "10000";
/// Where neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, sets OMP_WAIT_POLICY=PASSIVE and
/// GOMP_SPINCOUNT=10000 and starts the program again (the same process, argv unchanged): the
/// OpenMP runtime reads them only when it loads. Returns (without restarting) where either
/// is set or the restart fails. Call first in main, before any thread or MPI exists.
void PreferSleepingIdleThreads(char** argv);
/// Sets the number of threads used by ParallelFor and OpenMP regions (0: leave default).
void SetNumThreads(int threads);
/// Threads a parallel region will use.
int NumThreads();
/// Index of the calling thread inside a parallel region (0 outside).
int ThreadId();

namespace detail {
/// Runs body(ctx, begin, end) over the blocks [b * chunk, min(n, (b + 1) * chunk)) on the
/// OpenMP threads (dynamic schedule, a block at a time), forwarding the first exception.
void ParallelBlocks(int64_t n, int64_t chunk, void* ctx, void (*body)(void*, int64_t, int64_t));
}  // namespace detail

/// Runs fn(i) for i in [0, n) on the OpenMP threads (dynamic schedule, chunks of `chunk`
/// indices). fn is called directly inside each chunk's loop (no std::function, no
/// allocation): one indirect call per chunk. An exception thrown by fn skips the rest of its
/// chunk, stops nothing else in flight, and is rethrown (the first one) after the region: no
/// exception leaves an OpenMP region.
template <class Fn>
void ParallelFor(int64_t n, int64_t chunk, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  detail::ParallelBlocks(n, chunk, const_cast<void*>(static_cast<const void*>(std::addressof(fn))),
                         [](void* ctx, int64_t begin, int64_t end) {
                           F& f = *static_cast<F*>(ctx);
                           for (int64_t i = begin; i < end; ++i) f(i);
                         });
}

/// ParallelFor with chunks of one index.
template <class Fn>
void ParallelFor(int64_t n, Fn&& fn) {
  ParallelFor(n, 1, std::forward<Fn>(fn));
}

}  // namespace dslide
