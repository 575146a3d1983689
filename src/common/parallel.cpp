// OpenMP-backed ParallelFor with exception forwarding.
#include "common/parallel.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>

namespace dslide {

void PreferSleepingIdleThreads(char** argv) {
  if (std::getenv(kWaitPolicyVar) != nullptr || std::getenv(kSpinCountVar) != nullptr) return;
  if (setenv(kWaitPolicyVar, kWaitPolicy, 1) != 0 || setenv(kSpinCountVar, kSpinCount, 1) != 0) {
    unsetenv(kWaitPolicyVar);
    unsetenv(kSpinCountVar);
    return;
  }
  execv("/proc/self/exe", argv);
  unsetenv(kWaitPolicyVar);  // not restarted: leave the environment as it was
  unsetenv(kSpinCountVar);
}

void SetNumThreads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}
int NumThreads() { return omp_get_max_threads(); }
int ThreadId() { return omp_get_thread_num(); }

namespace detail {

void ParallelBlocks(int64_t n, int64_t chunk, void* ctx, void (*body)(void*, int64_t, int64_t)) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t blocks = (n + chunk - 1) / chunk;
  std::exception_ptr error;
  std::mutex mu;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks; ++b) {
    try {
      body(ctx, b * chunk, std::min(n, (b + 1) * chunk));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

}  // namespace dslide
