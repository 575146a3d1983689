// What a training run tells its caller: the lines a person reads and the records of the run,
// handed to a RunEvents that the caller implements. The library writes to no terminal itself:
// `dslide train` prints the lines (src/app/console_events.h), --metrics appends the records
// to its file (MetricsFile), and the Python package passes them to its verbose stream and its
// callback.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace dslide {

/// The receiver of a run's events. Lines and records come from rank 0 alone, on the thread
/// that runs the training loop, between steps; warnings from any rank.
class RunEvents {
 public:
  virtual ~RunEvents() = default;
  /// Text for a person: one or more whole lines, each ending in '\n', a block to show at
  /// once (the start, progress, evaluations, checkpoints, notes).
  virtual void Line(const std::string& text) { (void)text; }
  /// One record of the run: a JSON object on one line, without the newline (the objects of
  /// --metrics: "start", progress, evaluations, checkpoints, stops).
  virtual void Record(const std::string& json) { (void)json; }
  /// A warning of this rank's (a damaged checkpoint skipped, a --metrics write that failed),
  /// one or more whole lines.
  virtual void Warning(const std::string& text) { (void)text; }
};

/// The events of a run whose caller takes none: lines and records dropped, warnings on
/// standard error.
RunEvents* NoEvents();

/// printf's formatting into a string.
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline std::string
Format(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, again);
  va_end(again);
  return s;
}

}  // namespace dslide
