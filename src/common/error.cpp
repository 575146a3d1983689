// Out-of-line failure path of DSLIDE_ASSERT, warnings on standard error, errno reasons.
#include "common/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dslide {

void WarnOnStderr(const std::string& text) {
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

std::string OsReason(int err) {
  return err != 0 ? std::string(" (") + std::strerror(err) + ")" : "";
}

namespace detail {

void AssertFail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "dslide internal error: %s:%d: assertion '%s' failed %s\n", file, line, expr,
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail

}  // namespace dslide
