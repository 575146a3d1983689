// The process's own clocks, for time-to-accuracy figures as a user feels them: wall seconds
// since the process started (loading, initialisation and table builds included) and the
// CPU seconds of all its threads.
#pragma once

namespace dslide {

/// Wall-clock seconds since the process started (its static initialisation).
double ProcessWallSeconds();
/// CPU seconds (user and system) of every thread of the process so far.
double ProcessCpuSeconds();

}  // namespace dslide
