#include "common/process_clock.h"

#include <time.h>

#include <chrono>

namespace dslide {

namespace {
const std::chrono::steady_clock::time_point kProcessStart = std::chrono::steady_clock::now();
}  // namespace

double ProcessWallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - kProcessStart).count();
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace dslide
