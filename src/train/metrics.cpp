// JSON rendering and process statistics.
#include "train/metrics.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/error.h"

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
}

void MetricsFile::Record(const std::string& json) {
  if (!f_) return;
  const std::string line = json + "\n";
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0) return;
  const char* why = errno != 0 ? std::strerror(errno) : "an unknown error";
  if (warnings_ != nullptr)
    warnings_->Warning(Format(
        "dslide: warning: --metrics %s: write failed (%s): no more metrics are recorded there; "
        "training goes on (its checkpoints and model are written as asked)\n",
        path_.c_str(), why));
  std::fclose(f_);
  f_ = nullptr;
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
