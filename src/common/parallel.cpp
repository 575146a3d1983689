// OpenMP-backed ParallelFor with exception forwarding.
#include "parallel.h"

#include <omp.h>

#include <mutex>

namespace dslide {

void SetNumThreads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}
int NumThreads() { return omp_get_max_threads(); }
int ThreadId() { return omp_get_thread_num(); }

void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn, int64_t chunk) {
  std::exception_ptr error;
  std::mutex mu;
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t i = 0; i < n; ++i) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dslide
