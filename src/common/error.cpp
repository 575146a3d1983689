// Out-of-line failure path of DSLIDE_ASSERT.
#include "common/error.h"

#include <cstdio>
#include <cstdlib>

namespace dslide::detail {

void AssertFail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "dslide internal error: %s:%d: assertion '%s' failed %s\n", file, line, expr,
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace dslide::detail
