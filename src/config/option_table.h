// The option table behind every command's options (config.cpp: train; command_options.cpp:
// the other commands): each row adds its option to the parser, the INI reader and --help,
// and keeps how to echo the option's value as JSON; the limits of numeric options; the
// parsing helpers. Internal to src/config.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "config/config.h"

namespace dslide::options {

namespace po = boost::program_options;

using detail::Concat;

// Upper limits of numeric options: far above any real run, low enough that a typo (an extra
// digit or three) is an error at the start rather than an allocation failure or a run that
// never ends. The help text and the messages state them.
constexpr int64_t kMaxLayerSize = (int64_t{1} << 24) - 1;  ///< --hidden sizes
constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;        ///< features, labels (int32 ids)
constexpr int64_t kMaxIterations = int64_t{1} << 40;       ///< any count of iterations
constexpr int64_t kMaxPoints = int64_t{1} << 40;           ///< --eval-points, eval --points
constexpr int64_t kMaxGenPoints = (int64_t{1} << 31) - 1;  ///< gen/bench --points
constexpr int64_t kMaxChunk = int64_t{1} << 24;            ///< predict --chunk
constexpr int kMaxBatch = 1 << 20;
constexpr int kMaxBucketSize = 1 << 20;
constexpr int kMaxThreads = 4096;
constexpr int kMaxGpusPerNode = 1024;
constexpr int kMaxTopK = 10000;  ///< eval --k, predict --top-k
constexpr int kMaxKeepCheckpoints = 1000;
constexpr double kMaxEpochs = 1e6;

template <class E, size_t N>
E ParseEnum(const std::string& option, const std::string& value,
            const std::pair<const char*, E> (&table)[N]) {
  std::string names;
  for (const auto& [name, e] : table) {
    if (value == name) return e;
    names += names.empty() ? name : std::string("|") + name;
  }
  throw Error(Concat("option --", option, ": invalid value '", value, "' (expected ", names, ")"));
}

/// A comma-separated list: every item a value of type T, none of them empty ("64,",
/// ",64" and "64,,32" are errors naming the option and the value).
template <class T>
std::vector<T> ParseList(const std::string& option, const std::string& value) {
  DSLIDE_CHECK(!value.empty(), "option --", option, ": empty list");
  std::vector<T> out;
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    const std::string item =
        value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    DSLIDE_CHECK(!item.empty(), "option --", option, ": empty item in '", value,
                 "' (expected values separated by single commas)");
    std::istringstream is(item);
    T v;
    is >> v;
    DSLIDE_CHECK(!is.fail() && is.eof(), "option --", option, ": invalid list element '", item,
                 "' in '", value, "'");
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

/// Integer options: v in [lo, hi], else an error naming the option and the range.
template <class T>
void CheckRange(const char* option, T v, T lo, T hi) {
  DSLIDE_CHECK(v >= lo && v <= hi, "option --", option, ": must be in [", lo, ", ", hi, "], got ",
               v);
}

/// A strict unsigned 64-bit integer: digits only, so that "-1" is an error rather than
/// 2^64-1 (what Boost's lexical_cast and istream make of it).
uint64_t ParseUnsigned(const std::string& option, const std::string& value);
/// A number as strtod reads it (inf and nan too, for the range checks to name), the whole
/// value; otherwise an error naming --option.
double ParseNumber(const std::string& option, const std::string& value);
/// "auto" -> 0, else a positive integer.
int ParseAutoInt(const std::string& option, const std::string& value);
/// "auto" -> 0, else a number that `in_range` accepts; otherwise an error naming --option and
/// what it expects ("auto or " + expected).
double ParseAutoNumber(const std::string& option, const std::string& value,
                       bool (*in_range)(double), const char* expected);
bool ParseBool(const std::string& option, const std::string& value);

/// The shortest text that reads back as v (0.05, not 0.050000000000000003).
std::string Text(double v);
std::string Text(bool v);
std::string Text(const std::string& v);
template <class T>
std::string Text(T v) {
  return std::to_string(v);
}

/// An option bound to a field whose initialiser is its default: the one place a default is
/// written. --help shows it as Text gives it.
template <class T>
po::typed_value<T>* Value(T* field) {
  return po::value(field)->default_value(*field, Text(*field));
}

/// "a,b,c" of a list default.
template <class T>
std::string Join(const std::vector<T>& v) {
  std::string out;
  for (const T& x : v) out += (out.empty() ? "" : ",") + Text(x);
  return out;
}
/// "auto" for 0, else the number.
/// "auto" for 0, else the number.
std::string AutoOr(int v);

/// A string as a JSON string literal.
std::string JsonString(const std::string& v);
std::string Json(const std::string& v);
std::string Json(bool v);
template <class T>
std::string Json(T v) {
  return Text(v);
}

/// The options of a command as a table: each row adds its option to the parser (default
/// and help) and keeps how to echo the option's value as JSON.
class OptionTable {
 public:
  explicit OptionTable(po::options_description* d) : d_(d) {}

  /// An option bound to a field; the field's initialiser is its default.
  template <class T>
  void Field(const char* name, T* field, const char* help) {
    d_->add_options()(name, Value(field), help);
    echo_.emplace_back(name, [field] { return Json(*field); });
  }
  /// A file or folder name, or a string without default.
  void Path(const char* name, std::string* field, const char* help) {
    // Given, a path must name something: `--checkpoint-dir ""` (an unset variable in a job
    // script, say) is refused rather than read as "no checkpoints".
    const std::string option = name;
    d_->add_options()(name, po::value(field)->notifier([option](const std::string& v) {
      DSLIDE_CHECK(!v.empty(), "option --", option,
                   ": an empty value (leave the option out to go without it)");
    }),
                      help);
    echo_.emplace_back(name, [field] { return JsonString(*field); });
  }
  /// A switch (absent: false).
  void Switch(const char* name, bool* field, const char* help) {
    d_->add_options()(name, po::bool_switch(field), help);
    echo_.emplace_back(name, [field] { return Json(*field); });
  }
  /// An option given as text (a list, an enum, auto or a number) that the command parses
  /// into fields; `shown` gives the text of the fields' value (before parsing: the default).
  /// With `implicit`, the value taken when the option is given without one.
  void Text(const char* name, const std::function<std::string()>& shown, const char* help,
            const char* implicit = nullptr) {
    auto* v = po::value<std::string>()->default_value(shown());
    if (implicit != nullptr) v->implicit_value(implicit);
    d_->add_options()(name, v, help);
    echo_.emplace_back(name, [shown] { return JsonString(shown()); });
  }
  /// {"name":value,...} of every row, as the bound fields hold them now.
  std::string Echo() const {
    std::string out = "{";
    for (const auto& [name, value] : echo_)
      out += (out.size() > 1 ? "," : "") + JsonString(name) + ":" + value();
    return out + "}";
  }

 private:
  po::options_description* d_;
  std::vector<std::pair<std::string, std::function<std::string()>>> echo_;
};

/// Parses the command line, then the INI file named by --config (the command line wins; of
/// the file, the lines before any [section] and those under [COMMAND], COMMAND = argv[0]).
/// Returns false when --help was asked for.
bool Parse(int argc, const char* const* argv, const po::options_description& desc,
           const std::string& usage, po::variables_map* vm, std::string* help);

/// The options of `dslide train` (also bench's), and what FinishTrain parses of them.
void AddTrainOptions(OptionTable& t, TrainConfig* c);
void FinishTrain(const po::variables_map& vm, TrainConfig* c);

}  // namespace dslide::options
