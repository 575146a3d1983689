// When to rebuild LSH tables (SLIDE section 4.2): first after N0 iterations, then with
// exponentially growing intervals: the t-th rebuild happens at sum_{i<t} N0 * e^(lambda i).
#pragma once

#include <cstdint>

namespace dslide {

class RebuildSchedule {
 public:
  RebuildSchedule(int64_t n0, double lambda) : n0_(n0), lambda_(lambda) { Reset(); }
  /// True when the tables are due after iteration `iter` (1-based count of finished
  /// iterations); advances to the next rebuild. Call with non-decreasing iter.
  bool Due(int64_t iter);
  /// Iteration of the next rebuild.
  int64_t next() const { return next_; }
  /// Restarts the schedule (e.g. when resuming, replay Due() up to the resumed iteration).
  void Reset() {
    t_ = 0;
    exact_next_ = static_cast<double>(n0_);
    next_ = n0_;
  }

 private:
  int64_t n0_;
  double lambda_;
  int64_t t_ = 0;
  double exact_next_ = 0;
  int64_t next_ = 0;
};

}  // namespace dslide
