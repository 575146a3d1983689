#include "common/fault.h"

#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "common/error.h"

namespace dslide {

FaultPlan FaultPlan::FromEnv() {
  FaultPlan p;
  const char* env = std::getenv("DSLIDE_FAULT");
  if (env == nullptr || *env == '\0') return p;
  const std::string v = env;
  const size_t a = v.find(':'), b = a == std::string::npos ? a : v.find(':', a + 1);
  DSLIDE_CHECK(b != std::string::npos, "DSLIDE_FAULT='", v, "': expected KIND:RANK:ITER");
  const std::string kind = v.substr(0, a);
  if (kind == "throw")
    p.kind = Kind::kThrow;
  else if (kind == "oom")
    p.kind = Kind::kOom;
  else if (kind == "kill")
    p.kind = Kind::kKill;
  else if (kind == "term")
    p.kind = Kind::kTerm;
  else if (kind == "term2")
    p.kind = Kind::kTerm2;
  else if (kind == "hold")
    p.kind = Kind::kHold;
  else if (kind == "enospc")
    p.kind = Kind::kEnospc;
  else
    DSLIDE_CHECK(false, "DSLIDE_FAULT='", v,
                 "': KIND must be throw, oom, kill, term, term2, hold or enospc");
  char* end = nullptr;
  p.rank = static_cast<int>(std::strtol(v.c_str() + a + 1, &end, 10));
  DSLIDE_CHECK(end == v.c_str() + b && p.rank >= 0, "DSLIDE_FAULT='", v, "': bad RANK");
  p.iter = std::strtoll(v.c_str() + b + 1, &end, 10);
  DSLIDE_CHECK(*end == '\0' && p.iter >= 1, "DSLIDE_FAULT='", v, "': bad ITER");
  return p;
}

void FaultPlan::MaybeFailWrite(int rank, int64_t iter, const std::string& file) const {
  if (kind != Kind::kEnospc || rank != this->rank || iter != this->iter) return;
  throw Error(file + ": cannot write dataset 'w' (" + std::strerror(ENOSPC) +
              ", injected by DSLIDE_FAULT)");
}

void FaultPlan::AfterStopSaved(int rank) const {
  if (rank != this->rank) return;
  if (kind == Kind::kTerm2) ::kill(::getpid(), SIGTERM);
  // A second stop signal ends the process from its handler meanwhile.
  if (kind == Kind::kHold) std::this_thread::sleep_for(std::chrono::seconds(10));
}

void FaultPlan::MaybeFire(int rank, int64_t iter) const {
  if (kind == Kind::kNone || kind == Kind::kEnospc || kind == Kind::kHold || rank != this->rank ||
      iter != this->iter)
    return;
  switch (kind) {
    case Kind::kThrow:
      throw Error("injected fault (DSLIDE_FAULT) at iteration " + std::to_string(iter));
    case Kind::kOom: {
      // More than any machine has: the allocator refuses with std::bad_alloc.
      std::vector<char> huge;
      huge.reserve(size_t{1} << 62);
      break;
    }
    case Kind::kKill:
      ::kill(::getpid(), SIGKILL);
      break;
    case Kind::kTerm:
    case Kind::kTerm2:
      ::kill(::getpid(), SIGTERM);
      break;
    case Kind::kNone:
    case Kind::kHold:
    case Kind::kEnospc:
      break;
  }
}

}  // namespace dslide
