#include "io/output_path.h"

#include <filesystem>
#include <system_error>

#include "common/error.h"

namespace dslide {

namespace fs = std::filesystem;

namespace {

/// The path with links, "." and ".." resolved as far as it exists.
fs::path Resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::path(p).lexically_normal() : r;
}

}  // namespace

void CheckOutputPath(const std::string& option, const std::string& out,
                     const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (out.empty()) return;
  const fs::path o = Resolved(out);
  for (const auto& [in_option, in] : inputs) {
    if (in.empty()) continue;
    std::error_code ec;
    const bool same = fs::exists(o, ec) && fs::exists(in, ec) ? fs::equivalent(o, in, ec) && !ec
                                                              : o == Resolved(in);
    DSLIDE_CHECK(!same, "option ", option, ": ", out, " is ", in_option, "'s file (", in,
                 "); writing it would destroy that input: choose another path");
  }
  std::error_code ec;
  const fs::path parent = o.parent_path();
  DSLIDE_CHECK(!fs::exists(parent / "meta.h5", ec), "option ", option, ": ", out,
               " lies in the checkpoint folder ", parent.string(),
               "; writing there would damage that checkpoint: choose a path outside it");
  DSLIDE_CHECK(!fs::exists(o / "meta.h5", ec), "option ", option, ": ", out,
               " is a checkpoint folder; writing there would destroy that checkpoint: choose "
               "another path");
  CheckOutsideRunFolder(option, out);
}

void CheckOutsideRunFolder(const std::string& option, const std::string& out) {
  // A run's --checkpoint-dir holds its lock file, kept after the run: the run's hold on it.
  const fs::path o = Resolved(out);
  std::error_code ec;
  const fs::path given = fs::path(out).parent_path();
  DSLIDE_CHECK(o.filename() != ".dslide-lock" && !fs::exists(o.parent_path() / ".dslide-lock", ec),
               "option ", option, ": ", out, " lies in the checkpoint folder ",
               given.empty() ? std::string(".") : given.string(),
               " of a run (it holds .dslide-lock); writing there would damage that run's "
               "checkpoints: choose a path outside it");
}

}  // namespace dslide
