// Exponentially decaying rebuild frequency.
#include "lsh/rebuild_schedule.h"

#include <cmath>

namespace dslide {

bool RebuildSchedule::Due(int64_t iter) {
  if (iter < next_) return false;
  while (next_ <= iter) {
    ++t_;
    exact_next_ += static_cast<double>(n0_) * std::exp(lambda_ * static_cast<double>(t_));
    next_ = static_cast<int64_t>(std::llround(exact_next_));
  }
  return true;
}

}  // namespace dslide
