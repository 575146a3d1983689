#include "common/memory_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace dslide {

namespace {

/// A "Key:   123 kB" line's value in bytes from a /proc file (-1: absent).
int64_t ProcKb(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) != 0 || line.size() <= n || line[n] != ':') continue;
    long long kb = -1;
    if (std::sscanf(line.c_str() + n + 1, "%lld", &kb) == 1 && kb >= 0) return kb * 1024;
  }
  return -1;
}

/// The first number in a file (-1: none, or "max").
int64_t FileNumber(const std::string& file) {
  std::ifstream in(file);
  long long v = -1;
  if (!(in >> v) || v < 0) return -1;
  return v;
}

/// The memory limit of this process's cgroup (v2 memory.max, v1 memory.limit_in_bytes);
/// -1 where there is none (v1 writes "no limit" as a number near 2^63).
int64_t CgroupLimit() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v2, v1;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) v2 = path;
    std::stringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "memory") v1 = path;
  }
  // The group's own file, else the mount's top (a container's namespace shows its group
  // there).
  const std::pair<std::string, std::string> places[] = {
      {"/sys/fs/cgroup" + v2, "/memory.max"},
      {"/sys/fs/cgroup", "/memory.max"},
      {"/sys/fs/cgroup/memory" + v1, "/memory.limit_in_bytes"},
      {"/sys/fs/cgroup/memory", "/memory.limit_in_bytes"},
  };
  int64_t limit = -1;
  for (const auto& [dir, file] : places) {
    const int64_t v = FileNumber(dir + file);
    if (v >= 0 && v < (int64_t{1} << 60) && (limit < 0 || v < limit)) limit = v;
  }
  return limit;
}

}  // namespace

MemoryRoom AvailableMemory() {
  MemoryRoom room;
  auto take = [&](int64_t bytes, const std::string& source) {
    if (bytes >= 0 && (room.bytes < 0 || bytes < room.bytes)) room = {bytes, source};
  };
  const int64_t avail = ProcKb("/proc/meminfo", "MemAvailable");
  const int64_t swap = ProcKb("/proc/meminfo", "SwapFree");
  if (avail >= 0)
    take(avail + std::max<int64_t>(swap, 0),
         swap > 0 ? "the machine's available memory, MemAvailable " + BytesText(avail) +
                        " and free swap " + BytesText(swap)
                  : "the machine's available memory (MemAvailable)");
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const int64_t limit = static_cast<int64_t>(rl.rlim_cur);
    const int64_t mapped = std::max<int64_t>(ProcKb("/proc/self/status", "VmSize"), 0);
    take(std::max<int64_t>(limit - mapped, 0), "the address-space limit RLIMIT_AS (ulimit -v) of " +
                                                   BytesText(limit) + ", " + BytesText(mapped) +
                                                   " of it mapped already");
  }
  const int64_t cgroup = CgroupLimit();
  if (cgroup >= 0) take(cgroup, "the memory limit of the process's cgroup");
  return room;
}

std::string BytesText(int64_t bytes) {
  char text[32];
  if (bytes >= (int64_t{10} << 30))
    std::snprintf(text, sizeof text, "%.0f GB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (int64_t{1} << 30))
    std::snprintf(text, sizeof text, "%.1f GB", static_cast<double>(bytes) / (1 << 30));
  else
    std::snprintf(text, sizeof text, "%lld MB", static_cast<long long>(bytes >> 20));
  return text;
}

void CheckMemoryFits(int64_t bytes, const std::string& what, const char* verb) {
  const MemoryRoom room = AvailableMemory();
  if (room.bytes < 0 || bytes <= room.bytes) return;
  throw OutOfMemory(detail::Concat(what, " ", verb, " ", BytesText(bytes),
                                   "; this process can have ", BytesText(room.bytes), " (",
                                   room.source, ")"));
}

void CheckDeviceMemoryFits(int64_t bytes, int64_t free_bytes, int64_t total_bytes,
                           const std::string& what, const std::string& device) {
  if (free_bytes < 0 || bytes <= free_bytes) return;
  throw OutOfMemory(detail::Concat(what, " need at least ", BytesText(bytes), "; ", device, " has ",
                                   BytesText(free_bytes), " free of ", BytesText(total_bytes)));
}

}  // namespace dslide
