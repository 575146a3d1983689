// Output paths that would destroy an input: a command refuses, before it reads or writes
// anything, an output that is one of its input files (by any spelling or link), a file of a
// checkpoint (a folder holding meta.h5) or one in a run's checkpoint folder (a folder holding
// .dslide-lock, the run's hold on it).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dslide {

/// Throws Error, naming `option`, where `out` is the same file as one of `inputs` ((option,
/// path) pairs; empty paths skipped) or lies in a checkpoint or in a run's checkpoint folder.
/// An empty `out` passes.
void CheckOutputPath(const std::string& option, const std::string& out,
                     const std::vector<std::pair<std::string, std::string>>& inputs);
/// Throws Error, naming `option`, where `out` is a run's lock file or lies beside it, in the
/// run's checkpoint folder (what is written there is taken for, or pruned as, one of that
/// run's checkpoints). CheckOutputPath checks this too; --save, which may replace a
/// checkpoint folder of its own, checks this alone.
void CheckOutsideRunFolder(const std::string& option, const std::string& out);

}  // namespace dslide
