// JSON rendering and process statistics.
#include "train/metrics.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>

#include "common/error.h"
#include "common/stop_signal.h"

namespace dslide {

double PeakRssMb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

void JsonObject::Key(const std::string& key) {
  if (!body_.empty()) body_ += ",";
  body_ += "\"" + key + "\":";
}

JsonObject& JsonObject::Add(const std::string& key, double v) {
  Key(key);
  if (!std::isfinite(v)) {
    body_ += "null";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    body_ += buf;
  }
  return *this;
}

JsonObject& JsonObject::Add(const std::string& key, int64_t v) {
  Key(key);
  body_ += std::to_string(v);
  return *this;
}

JsonObject& JsonObject::Add(const std::string& key, const std::string& v) {
  Key(key);
  body_ += "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') body_ += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      body_ += buf;
      continue;
    }
    body_ += c;
  }
  body_ += "\"";
  return *this;
}

JsonObject& JsonObject::AddRaw(const std::string& key, const std::string& json) {
  Key(key);
  body_ += json;
  return *this;
}

MetricsFile::MetricsFile(const std::string& path, RunEvents* warnings)
    : path_(path), warnings_(warnings) {
  if (path.empty()) return;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    // A pipe, FIFO, terminal or socket: written, never read. Opened read-write the run would
    // be a reader of its own FIFO, so a pipe whose reader went away would fill and block
    // the run for good; non-blocking, a reader that stops reading cannot hold it either.
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    DSLIDE_CHECK(fd_ >= 0 || errno != ENXIO, "option --metrics: no process reads the FIFO '", path,
                 "': start its reader first, or give a regular file");
    DSLIDE_CHECK(fd_ >= 0, "option --metrics: cannot write '", path, "': ", std::strerror(errno));
    return;
  }
  // Append: a resumed run, or one that failed early, keeps the history written before.
  f_ = std::fopen(path.c_str(), "a+");
  if (f_ == nullptr) f_ = std::fopen(path.c_str(), "a");  // write-only: appended unread
  DSLIDE_CHECK(f_ != nullptr, "option --metrics: cannot write '", path,
               "': ", std::strerror(errno));
  // A record cut short (a full disk, a killed run) is ended, so that the next record starts
  // a line of its own.
  if (std::fseek(f_, -1, SEEK_END) == 0 && std::fgetc(f_) != '\n') std::fputc('\n', f_);
}

MetricsFile::~MetricsFile() {
  if (f_) std::fclose(f_);
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::Record(const std::string& json) {
  const std::string line = json + "\n";
  if (fd_ >= 0) {
    const std::string why = WriteToStream(line);
    if (!why.empty()) Fail(why);
    return;
  }
  if (!f_) return;
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0) return;
  Fail(errno != 0 ? std::strerror(errno) : "an unknown error");
}

std::string MetricsFile::WriteToStream(const std::string& line) {
  // SIGPIPE, which a write to a pipe without a reader raises, asks a run to stop (a closed
  // output); from this descriptor it is a failed write of the metrics alone: held in this
  // thread while writing, and the one the write raised taken back.
  sigset_t pipe_only, before;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &before);
  std::string why;
  double waited = 0;
  for (size_t done = 0; done < line.size() && why.empty();) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (StopSignal() != 0) {
        why = "its reader had not read for a while when the run was asked to stop";
      } else if (waited >= kPipeWaitSeconds) {
        why = Format("its reader has not read for %.0f s", kPipeWaitSeconds);
      } else {
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, 100);
        waited += 0.1;
      }
      continue;
    }
    why = n < 0 && errno == EPIPE ? "its reader has gone" : n < 0 ? std::strerror(errno) : "";
    if (why.empty()) why = "nothing written";
    if (n < 0 && errno == EPIPE) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_only, nullptr, &now);
    }
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return why;
}

void MetricsFile::Fail(const std::string& why) {
  if (warnings_ != nullptr)
    warnings_->Warning(Format(
        "dslide: warning: --metrics %s: write failed (%s): no more metrics are recorded there; "
        "training goes on (its checkpoints and model are written as asked)\n",
        path_.c_str(), why.c_str()));
  if (f_) std::fclose(f_);
  if (fd_ >= 0) ::close(fd_);
  f_ = nullptr;
  fd_ = -1;
}

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", (long long)(t / 3600),
                  (long long)(t % 3600 / 60));
  else if (t >= 60)
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  else
    std::snprintf(buf, sizeof(buf), "%llds", (long long)t);
  return buf;
}

}  // namespace dslide
