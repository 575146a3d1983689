#include "common/stop_signal.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

namespace dslide {

namespace {

// The first signal received (0: none): set once, by a compare-and-swap, so that two signals
// handled at once on two threads cannot both take themselves for the first.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free int");
volatile std::sig_atomic_t g_second_notice = 1;
std::atomic<bool> g_stop_during_load{false};
// The second signal's line once the stop's checkpoint is written ("" before).
char g_saved_notice[512] = "";
std::atomic<bool> g_stop_saved{false};
// What the handler prints on the first signal ("" prints nothing); set before training.
char g_notice[512] =
    "dslide: stop requested: the run stops after its current step, or before its first (a "
    "second signal exits at once)\n";

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGHUP, SIGPIPE};

// DSLIDE_STOP_NOTE (set by launch/run/mpirun.sh): a file to which a rank that exits on a
// second stop signal appends its exit code, one line; "" for none. Read before training.
char g_exit_note[512] = "";

void Write(const char* s) {
  const ssize_t n = write(STDERR_FILENO, s, std::strlen(s));
  (void)n;
}

// _exit(code), the code first appended to the exit note (open, write and close are
// async-signal-safe). mpirun may crash in its own finalisation once ranks end this way,
// and lose their codes; the launcher reads them here.
[[noreturn]] void ExitNoted(int code) {
  if (g_exit_note[0] != '\0') {
    const int fd = open(g_exit_note, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      char line[8] = {static_cast<char>('0' + code / 100 % 10),
                      static_cast<char>('0' + code / 10 % 10), static_cast<char>('0' + code % 10),
                      '\n'};
      const ssize_t n = write(fd, line, 4);
      (void)n;
      close(fd);
    }
  }
  _exit(code);
}

extern "C" void OnStopSignal(int sig) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    Write(g_notice);
    return;
  }
  // A closed output raises SIGPIPE at every later write: the stop it asked for is under way.
  if (sig == SIGPIPE) return;
  if (g_stop_saved) {  // the stop's checkpoint landed: what a requeue needs is there
    if (g_second_notice) Write(g_saved_notice);
    ExitNoted(kExitStopped);
  }
  if (g_second_notice) Write("dslide: second stop signal: exiting now, without a checkpoint\n");
  ExitNoted(128 + sig);
}

// kNow: a line naming the signal, then the signal's default action (the handler is reset on
// entry, SA_RESETHAND, and the signal not blocked in it, SA_NODEFER).
extern "C" void OnSignalNow(int sig) {
  Write("dslide: stopped by ");
  Write(SignalName(sig));
  Write("\n");
  raise(sig);
}

sigset_t StopSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals) sigaddset(&set, sig);
  return set;
}

}  // namespace

void MarkStopSaved(const std::string& where) {
  const std::string text =
      "dslide: second stop signal: exiting now; the stop's checkpoint is written (" +
      where.substr(0, 400) + ")\n";
  std::snprintf(g_saved_notice, sizeof g_saved_notice, "%s", text.c_str());
  g_stop_saved = true;
}

void SetStopDuringLoad(bool on) { g_stop_during_load = on; }
bool StopDuringLoad() { return g_stop_during_load; }

void HoldStopSignals() {
  const sigset_t set = StopSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void InstallStopHandlers(StopMode mode) {
  if (const char* note = std::getenv("DSLIDE_STOP_NOTE"))
    std::snprintf(g_exit_note, sizeof g_exit_note, "%s", note);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  if (mode == StopMode::kAfterStep) {
    sa.sa_handler = OnStopSignal;
    sa.sa_flags = SA_RESTART;  // blocking reads and MPI progress continue after the handler
  } else {
    sa.sa_handler = OnSignalNow;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  }
  for (int sig : kStopSignals)
    if (mode == StopMode::kAfterStep || sig != SIGPIPE) sigaction(sig, &sa, nullptr);
  const sigset_t set = StopSet();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

void SetStopNotice(const std::string& text) {
  const size_t n = std::min(text.size(), sizeof g_notice - 1);
  g_notice[0] = '\0';  // never a half-written line, should a signal come now
  std::memcpy(g_notice + 1, text.data() + 1, n > 0 ? n - 1 : 0);
  g_notice[n] = '\0';
  if (n > 0) g_notice[0] = text[0];
}

void SetSecondSignalNotice(bool on) { g_second_notice = on ? 1 : 0; }

int StopSignal() { return g_signal.load(); }

void ClearStopSignal() {
  g_stop_saved = false;  // a new run's stop has written nothing yet
  g_signal.store(0);
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGHUP:
      return "SIGHUP";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return "a signal";
  }
}

}  // namespace dslide
