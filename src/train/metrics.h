// Run metrics: JSON lines for plots and experiments, resident-memory readings, medians.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "train/run_events.h"

namespace dslide {

/// Peak resident set size of this process in MiB.
double PeakRssMb();

/// Median of v (0 for an empty vector); v is reordered.
double Median(std::vector<double> v);

/// One JSON object built field by field, in insertion order.
class JsonObject {
 public:
  JsonObject& Add(const std::string& key, double v);
  JsonObject& Add(const std::string& key, int64_t v);
  JsonObject& Add(const std::string& key, int v) { return Add(key, static_cast<int64_t>(v)); }
  JsonObject& Add(const std::string& key, const std::string& v);
  JsonObject& Add(const std::string& key, const char* v) { return Add(key, std::string(v)); }
  /// Adds a nested object already rendered as JSON.
  JsonObject& AddRaw(const std::string& key, const std::string& json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(const std::string& key);
  std::string body_;
};

/// Appends JSON lines to a file, one object per line (the records of a run: RunEvents); a
/// no-op when constructed with an empty path. An existing file is kept and appended to
/// (opened with "a", never truncated): a resumed run, or a second run given the same
/// --metrics, adds its lines after the earlier ones, and a run that fails early leaves the
/// earlier history intact. Remove the file first to start a fresh one.
class MetricsFile final : public RunEvents {
 public:
  /// Throws Error naming --metrics where the file cannot be opened for appending.
  /// `warnings` (may be null: none said) receives the warning of a failed write.
  explicit MetricsFile(const std::string& path, RunEvents* warnings = nullptr);
  ~MetricsFile() override;
  /// Appends obj as one line. A write that fails (a full disk) does not end the run whose
  /// record it is: the file is closed, one warning names it and the reason, and later
  /// records are dropped.
  void Write(const JsonObject& obj) { Record(obj.str()); }
  void Record(const std::string& json) override;

  /// How long a record waits for a pipe's reader to make room before the metrics give up.
  static constexpr double kPipeWaitSeconds = 10.0;

 private:
  /// A pipe, FIFO, terminal or socket (anything but a regular file): the whole line through
  /// the non-blocking descriptor, waiting at most kPipeWaitSeconds (and never past a stop
  /// signal) for room; a reader gone (EPIPE) is a failed write, not a stop of the run.
  /// Returns "" or why it failed.
  std::string WriteToStream(const std::string& line);
  /// The warning and the end of the metrics after a failed write.
  void Fail(const std::string& why);

  FILE* f_ = nullptr;  // a regular file
  int fd_ = -1;        // or a stream
  std::string path_;
  RunEvents* warnings_;
};

/// "1h02m", "3m05s", "12s".
std::string FormatDuration(double seconds);

}  // namespace dslide
