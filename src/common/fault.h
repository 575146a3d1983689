// Fault injection for the failure tests: DSLIDE_FAULT=KIND:RANK:ITER makes rank RANK fail
// at the start of training iteration ITER (1-based). KIND is
//   throw  an exception (as a bad record or a failed check would),
//   oom    an allocation that cannot be satisfied (std::bad_alloc),
//   kill   SIGKILL to itself (a crashed or OOM-killed node),
//   term   SIGTERM to itself (preemption: the stop handler, when installed, takes it),
//   term2  term, and a second SIGTERM once the stop's checkpoint is written (AfterStopSaved),
//   hold   once the stop's checkpoint is written (AfterStopSaved), 10 s before the rank goes
//          on to exit: a window for a second signal from outside (ITER is not used),
//   enospc its checkpoint shard of iteration ITER fails part-way as on a full disk.
// Unset, it costs one comparison per iteration.
#pragma once

#include <cstdint>
#include <string>

namespace dslide {

struct FaultPlan {
  enum class Kind { kNone, kThrow, kOom, kKill, kTerm, kTerm2, kHold, kEnospc };
  Kind kind = Kind::kNone;
  int rank = -1;
  int64_t iter = -1;

  /// Parses DSLIDE_FAULT from the environment; a malformed value is an error naming it.
  static FaultPlan FromEnv();
  /// Fires the fault when (rank, iter) match.
  void MaybeFire(int rank, int64_t iter) const;
  /// kTerm2: the second SIGTERM, once the stop's checkpoint of `rank` is written; kHold: a
  /// wait of 10 s there.
  void AfterStopSaved(int rank) const;
  /// kEnospc: throws, as a write to a full disk would, when (rank, iter) match; `file`
  /// names what was being written.
  void MaybeFailWrite(int rank, int64_t iter, const std::string& file) const;
};

}  // namespace dslide
