#include "fault.h"

#include <csignal>
#include <cstdlib>
#include <new>
#include <unistd.h>
#include <vector>

#include "error.h"

namespace dslide {

FaultPlan FaultPlan::FromEnv() {
  FaultPlan p;
  const char* env = std::getenv("DSLIDE_FAULT");
  if (env == nullptr || *env == '\0') return p;
  const std::string v = env;
  const size_t a = v.find(':'), b = a == std::string::npos ? a : v.find(':', a + 1);
  DSLIDE_CHECK(b != std::string::npos, "DSLIDE_FAULT='", v, "': expected KIND:RANK:ITER");
  const std::string kind = v.substr(0, a);
  if (kind == "throw") p.kind = Kind::kThrow;
  else if (kind == "oom") p.kind = Kind::kOom;
  else if (kind == "kill") p.kind = Kind::kKill;
  else DSLIDE_CHECK(false, "DSLIDE_FAULT='", v, "': KIND must be throw, oom or kill");
  char* end = nullptr;
  p.rank = static_cast<int>(std::strtol(v.c_str() + a + 1, &end, 10));
  DSLIDE_CHECK(end == v.c_str() + b && p.rank >= 0, "DSLIDE_FAULT='", v, "': bad RANK");
  p.iter = std::strtoll(v.c_str() + b + 1, &end, 10);
  DSLIDE_CHECK(*end == '\0' && p.iter >= 1, "DSLIDE_FAULT='", v, "': bad ITER");
  return p;
}

void FaultPlan::MaybeFire(int rank, int64_t iter) const {
  if (kind == Kind::kNone || rank != this->rank || iter != this->iter) return;
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
    case Kind::kNone:
      break;
  }
}

}  // namespace dslide
