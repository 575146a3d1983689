// Preemption: SIGTERM (what Slurm sends at preemption and at the time limit), SIGINT,
// SIGUSR1 (Slurm's --signal, and what mpirun forwards to every rank at once), SIGHUP (a
// closed terminal) and SIGPIPE (a closed output, such as `dslide train | head`) ask a
// training run to stop. The handler only records the signal; the training loop finishes
// the current step, agrees with every rank that a stop was asked (one rank's signal stops
// them all), writes a checkpoint when a checkpoint directory is set and exits with
// kExitStopped. A second signal ends the process at once (exit 128 + signal); a second
// SIGPIPE, which a closed output raises at every write, does not.
//
// main installs the handlers first thing, so that a signal at any time from the start is
// answered: the stop signals are held (blocked) through the process's restart
// (PreferSleepingIdleThreads) and delivered once the handlers are in place. Commands that
// do not train end at once on a signal, with a line naming it.
#pragma once

#include <string>

namespace dslide {

/// The exit code of a run stopped by a signal, after its checkpoint (EX_TEMPFAIL: the job
/// may be requeued and resumed).
constexpr int kExitStopped = 75;
/// The exit code of a run stopped because its loss diverged.
constexpr int kExitDiverged = 3;

/// What a stop signal does: kAfterStep records it for the training loop (train, bench);
/// kNow ends the process at once with a line naming it, by the signal's own default action
/// (exit 128 + signal; commands with no step to finish).
enum class StopMode { kAfterStep, kNow };

/// Blocks the stop signals (SIGTERM, SIGINT, SIGUSR1, SIGHUP, SIGPIPE): one that comes now
/// waits, also across an exec, for InstallStopHandlers.
void HoldStopSignals();
/// Installs the handlers for SIGTERM, SIGINT, SIGUSR1, SIGHUP and SIGPIPE (kNow: not
/// SIGPIPE, which keeps its default action) and unblocks them, so that a signal held since
/// the start (HoldStopSignals, or blocked by the parent process) arrives now (idempotent).
void InstallStopHandlers(StopMode mode = StopMode::kAfterStep);
/// What the handler writes to stderr on the first signal: a line saying what the run will
/// do ("" writes nothing: a rank of a multi-rank job, whose rank 0 says it once the ranks
/// agree, and which may be a rank that the launcher is ending because another one failed).
void SetStopNotice(const std::string& text);
/// Whether a second signal says so before it ends the process (the default); with P ranks
/// only rank 0 does, so that a second signal forwarded to every rank prints one line.
void SetSecondSignalNotice(bool on);
/// The first stop signal received since the handlers were installed (0: none).
int StopSignal();
/// Says that the stop's checkpoint (or saved model) is written: a second signal after it
/// ends the process with kExitStopped and a line that says so, not as a run without one
/// (exit 128 + signal). `where` (at most 400 characters kept) names it.
void MarkStopSaved(const std::string& where);
/// Whether reading a data file ends at a stop signal (a Stop, exit kExitStopped) instead of
/// reading on to the end: on for a training run of one rank, which has nothing to agree on
/// with others (P ranks read on and agree at the first step).
void SetStopDuringLoad(bool on);
bool StopDuringLoad();
/// Forgets a received signal, and a stop's written checkpoint (MarkStopSaved): the Python
/// package's runs, one after another in a process, and tests.
void ClearStopSignal();
/// "SIGTERM", "SIGINT", "SIGUSR1", "SIGHUP", "SIGPIPE" or "a signal".
const char* SignalName(int sig);

}  // namespace dslide
