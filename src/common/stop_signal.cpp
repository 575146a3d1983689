#include "common/stop_signal.h"

#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <cstring>
#include <initializer_list>

namespace dslide {

namespace {

volatile std::sig_atomic_t g_signal = 0;
// What the handler prints on the first signal ("" prints nothing); set before training.
char g_notice[512] =
    "dslide: stop requested: the run stops after its current step (a second signal exits at "
    "once)\n";

void Write(const char* s) {
  const ssize_t n = write(STDERR_FILENO, s, std::strlen(s));
  (void)n;
}

extern "C" void OnStopSignal(int sig) {
  // A closed output raises SIGPIPE at every later write: the stop it asked for is under way.
  if (sig == SIGPIPE && g_signal != 0) return;
  if (g_signal != 0) {
    Write("dslide: second stop signal: exiting now, without a checkpoint\n");
    _exit(128 + sig);
  }
  g_signal = sig;
  Write(g_notice);
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and MPI progress continue after the handler
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP, SIGPIPE}) sigaction(sig, &sa, nullptr);
}

void SetStopNotice(const std::string& text) {
  const size_t n = std::min(text.size(), sizeof g_notice - 1);
  g_notice[0] = '\0';  // never a half-written line, should a signal come now
  std::memcpy(g_notice + 1, text.data() + 1, n > 0 ? n - 1 : 0);
  g_notice[n] = '\0';
  if (n > 0) g_notice[0] = text[0];
}

int StopSignal() { return g_signal; }

void ClearStopSignal() { g_signal = 0; }

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
