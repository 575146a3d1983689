// Memory a process can still have, so that sizes that cannot fit are refused before anything
// is allocated (instead of after a minute of filling arrays, or by the kernel's OOM killer).
// Only the clear cases: a need above the tightest of the address-space limit (RLIMIT_AS,
// `ulimit -v`) less what the process maps already, the cgroup's memory limit, and the
// memory the machine has available now (MemAvailable, plus free swap).
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace dslide {

/// A size that cannot fit in the memory this process may have (CheckMemoryFits).
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& what) : Error(what) {}
};

/// The tightest bound on the memory this process can still allocate, and what sets it
/// ("MemAvailable + free swap", "RLIMIT_AS (ulimit -v) ...", "the cgroup's memory limit");
/// bytes < 0 where none is known.
struct MemoryRoom {
  int64_t bytes = -1;
  std::string source;
};
MemoryRoom AvailableMemory();

/// "57.2 GB", "812 MB": a size for messages (units of 2^20 and 2^30 bytes).
std::string BytesText(int64_t bytes);

/// Throws OutOfMemory when `bytes` exceed AvailableMemory(): "WHAT need 57 GB; this
/// process can have 7.6 GB (SOURCE)" (`what` a plural: "the weights and Adam moments";
/// `verb` "need at least" for a lower bound).
void CheckMemoryFits(int64_t bytes, const std::string& what, const char* verb = "need");

/// Throws OutOfMemory when `bytes` exceed a device's `free_bytes` (free_bytes < 0: not known,
/// no check): "WHAT need at least 57 GB; DEVICE has 7.6 GB free of 80 GB".
void CheckDeviceMemoryFits(int64_t bytes, int64_t free_bytes, int64_t total_bytes,
                           const std::string& what, const std::string& device);

}  // namespace dslide
