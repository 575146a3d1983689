// Error reporting: user/config/data errors throw dslide::Error, broken invariants abort.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dslide {

/// Thrown for errors a user can fix: bad options, bad files, bad data.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// Ends a run early on purpose and on every rank at once (a stop signal, divergence): the
/// message is printed once and the process exits with `code` after a clean shutdown,
/// without aborting the other ranks.
class Stop : public std::runtime_error {
 public:
  Stop(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

/// The stop of every rank when a checkpoint could not be written (exit code 1); `newest`
/// names the newest checkpoint kept (empty: none).
class CheckpointNotWritten : public Stop {
 public:
  CheckpointNotWritten(const std::string& what, std::string newest)
      : Stop(1, what), newest_(std::move(newest)) {}
  const std::string& newest() const { return newest_; }

 private:
  std::string newest_;
};

/// Writes `text` (whole lines) to standard error and flushes it: the warnings of a library
/// call whose caller takes none (RunEvents).
void WarnOnStderr(const std::string& text);

/// " (REASON)" for the errno an I/O call left behind, "" when it left none.
std::string OsReason(int err);

namespace detail {
inline void Append(std::ostringstream&) {}
template <class T, class... Rest>
void Append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  Append(os, rest...);
}
template <class... Args>
std::string Concat(const Args&... args) {
  std::ostringstream os;
  Append(os, args...);
  return os.str();
}
[[noreturn]] void AssertFail(const char* expr, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace dslide

/// Throws dslide::Error with the concatenated message when cond is false.
#define DSLIDE_CHECK(cond, ...)                                                \
  do {                                                                         \
    if (!(cond)) throw ::dslide::Error(::dslide::detail::Concat(__VA_ARGS__)); \
  } while (0)

/// Internal invariant: prints and aborts when cond is false (a bug, not a user error).
#define DSLIDE_ASSERT(cond, ...)                                                             \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::dslide::detail::AssertFail(#cond, __FILE__, __LINE__,                                \
                                   ::dslide::detail::Concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
