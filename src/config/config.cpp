// Option parsing (Boost.Program_options) and validation for every subcommand.
#include "config.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <sstream>

#include "error.h"

namespace po = boost::program_options;

namespace dslide {

const char* ToString(HashFamily v) {
  switch (v) {
    case HashFamily::kSrp:
      return "srp";
    case HashFamily::kWta:
      return "wta";
    case HashFamily::kDwta:
      return "dwta";
    case HashFamily::kAuto:
      return "auto";
  }
  return "?";
}
const char* ToString(InsertPolicy v) { return v == InsertPolicy::kFifo ? "fifo" : "reservoir"; }
const char* ToString(QueryStrategy v) {
  switch (v) {
    case QueryStrategy::kVanilla:
      return "vanilla";
    case QueryStrategy::kTopK:
      return "topk";
    case QueryStrategy::kThreshold:
      return "threshold";
    case QueryStrategy::kAuto:
      return "auto";
  }
  return "?";
}
const char* ToString(FillPolicy v) {
  return v == FillPolicy::kStop ? "stop" : v == FillPolicy::kBatch ? "batch" : "random";
}
const char* ToString(Strategy v) {
  switch (v) {
    case Strategy::kSparse:
      return "sparse";
    case Strategy::kDenseModelParallel:
      return "dense-model-parallel";
    case Strategy::kDataParallel:
      return "data-parallel";
  }
  return "?";
}
const char* ToString(Device v) { return v == Device::kGpu ? "gpu" : "cpu"; }
const char* ToString(LabelOrder v) {
  return v == LabelOrder::kSpread ? "spread" : v == LabelOrder::kIdentity ? "identity" : "auto";
}

namespace {

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
uint64_t ParseUnsigned(const std::string& option, const std::string& value) {
  uint64_t v = 0;
  bool ok = !value.empty();
  for (char ch : value) {
    const unsigned d = static_cast<unsigned>(ch - '0');
    if (d > 9 || v > (UINT64_MAX - d) / 10) {
      ok = false;
      break;
    }
    v = v * 10 + d;
  }
  DSLIDE_CHECK(ok, "option --", option, ": must be an integer in [0, ", UINT64_MAX, "], got '",
               value, "'");
  return v;
}

/// Boost's "unrecognised option '--epoch'", with the options it abbreviates (abbreviations
/// are not accepted: a later option sharing the prefix would change their meaning).
std::string UnknownOptionMessage(const po::unknown_option& e, const po::options_description& all) {
  std::string msg = e.what();
  std::string name = e.get_option_name();
  while (!name.empty() && name[0] == '-') name.erase(0, 1);
  if (name.empty()) return msg;
  std::string matches;
  for (const auto& opt : all.options()) {
    const std::string& full = opt->long_name();
    if (full.size() > name.size() && full.compare(0, name.size(), name) == 0)
      matches += (matches.empty() ? "--" : " or --") + full;
  }
  if (!matches.empty())
    msg += " (options must be spelled out in full: did you mean " + matches + "?)";
  return msg;
}

/// The shortest text that reads back as v (0.05, not 0.050000000000000003).
std::string Text(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {  // 10, not 1e+01
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}
std::string Text(bool v) { return v ? "true" : "false"; }
std::string Text(const std::string& v) { return v; }
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
std::string AutoOr(int v) { return v == 0 ? "auto" : std::to_string(v); }

/// The lines of an INI file that apply to `command`: those before any [section] header and
/// those under [command]; lines under another command's header are left out (one file can
/// hold the settings of train, eval and predict). A header that names no command is an
/// error naming the file and line.
std::string IniForCommand(std::istream& in, const std::string& path, const std::string& command) {
  static const char* const kCommands[] = {"gen",   "train",  "eval",   "predict",
                                          "bench", "export", "convert"};
  std::string out, line;
  bool keep = true;
  for (int64_t ln = 1; std::getline(in, line); ++ln) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a != std::string::npos && line[a] == '[') {
      const size_t b = line.find(']', a);
      const size_t rest = b == std::string::npos ? b : line.find_first_not_of(" \t\r", b + 1);
      const std::string name = b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
      const bool known = std::any_of(std::begin(kCommands), std::end(kCommands),
                                     [&](const char* c) { return name == c; });
      DSLIDE_CHECK(known && (rest == std::string::npos || line[rest] == '#' || line[rest] == ';'),
                   "config file '", path, "' line ", ln, ": section '", line.substr(a),
                   "' is not one of [gen], [train], [eval], [predict], [bench], [export], "
                   "[convert] (keys before any section apply to every command)");
      keep = name == command;
      out += '\n';  // line numbers stay those of the file
      continue;
    }
    out += keep ? line + '\n' : std::string("\n");
  }
  return out;
}

/// Parses the command line, then the INI file named by --config (the command line wins).
/// Returns false when --help was asked for.
bool Parse(int argc, const char* const* argv, const po::options_description& desc,
           const std::string& usage, po::variables_map* vm, std::string* help) {
  po::options_description all(usage);
  all.add_options()("help,h", "show this help")("config", po::value<std::string>(),
                                                "read options from an INI file (key = value)");
  all.add(desc);
  try {
    // No abbreviations ("--epoch" is not "--epochs"), and every token an option or its value.
    const po::parsed_options parsed =
        po::command_line_parser(argc, argv)
            .options(all)
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .run();
    for (const po::option& o : parsed.options) {
      if (o.position_key < 0 && !o.string_key.empty()) continue;
      const std::string arg = !o.original_tokens.empty() ? o.original_tokens.front()
                              : !o.value.empty()         ? o.value.front()
                                                         : std::string();
      throw Error(Concat("unexpected argument '", arg,
                         "' (neither an option nor an option's value; options take at most one "
                         "value, lists are comma separated)"));
    }
    po::store(parsed, *vm);
    if (vm->count("help")) {
      std::ostringstream os;
      os << all;
      *help = os.str();
      return false;
    }
    if (vm->count("config")) {
      const std::string path = (*vm)["config"].as<std::string>();
      std::error_code ec;
      DSLIDE_CHECK(!std::filesystem::is_directory(path, ec), "option --config: '", path,
                   "' is a folder; give an INI file (key = value lines)");
      std::ifstream in(path);
      DSLIDE_CHECK(in.good(), "option --config: cannot open '", path, "'");
      std::istringstream body(IniForCommand(in, path, argc > 0 ? argv[0] : ""));
      try {
        po::store(po::parse_config_file(body, desc, /*allow_unregistered=*/false), *vm);
      } catch (const po::error& e) {
        throw Error(Concat("config file '", path, "': ", e.what()));
      }
    }
    po::notify(*vm);
  } catch (const po::unknown_option& e) {
    throw Error(UnknownOptionMessage(e, all));
  } catch (const po::error& e) {
    throw Error(e.what());
  }
  return true;
}

/// A string as a JSON string literal.
std::string JsonString(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}
[[maybe_unused]] std::string Json(const std::string& v) { return JsonString(v); }
std::string Json(bool v) { return v ? "true" : "false"; }
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
    d_->add_options()(name, po::value(field), help);
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

/// The options of `dslide train`, one row each: the parser, the INI reader and --help take
/// them from here, and so does SettingsJson (the run's settings in the metrics' start
/// event). A default is the bound field's initialiser (config.h); options given as text
/// (lists, enums, auto) are parsed by FinishTrain and shown from the fields they fill.
void AddTrainOptions(OptionTable& t, TrainConfig* c) {
  t.Path("train", &c->train_file, "training file (XC format, plain or gzip, or .dsb)");
  t.Path("test", &c->test_file,
         "test file, scored once at the end (on the --keep-best model when validating)");
  t.Path("valid", &c->valid_file,
         "validation file: evaluations during training score it and --keep-best selects on it");
  t.Field("valid-fraction", &c->valid_fraction,
          "or hold back this share of the training file for validation (points chosen by --seed)");
  t.Text(
      "keep-best", [c] { return c->keep_best < 0 ? "auto" : Text(c->keep_best == 1); },
      "true|false: end with the model of the best validation P@1 (saved as "
      "CHECKPOINT_DIR/best); auto: true when validating",
      "true");
  t.Text(
      "hidden", [c] { return Join(c->hidden); },
      "hidden layer sizes, comma separated (e.g. 128 or 256,128), each in [1, 2^24)");
  t.Text(
      "sparsity", [c] { return c->sparsity.empty() ? "auto" : Join(c->sparsity); },
      "auto: layers narrower than --dense-below are dense, wider ones get a budget and LSH "
      "settings from their size (printed at the start); or the share of a layer's neurons "
      "active per sample in (0,1]: one value per layer (hidden..., output), or one value for "
      "the output layer with dense hidden layers");
  t.Field("dense-below", &c->dense_below,
          "--sparsity auto: layers with fewer neurons are computed densely");
  t.Field("min-negatives", &c->min_negatives,
          "every sample's active set keeps at least this many neurons beyond its own labels "
          "(over all ranks), raising the budget where its labels would crowd them out");
  t.Text(
      "label-order", [c] { return ToString(c->label_order); },
      "auto|spread|identity: how the output neurons, which ranks own in contiguous blocks, are "
      "numbered from label ids. spread: a fixed permutation (label l -> l*a mod n, a golden-ratio "
      "stride) deals consecutive labels, often sorted by frequency or topic, evenly to the ranks, "
      "so P ranks sample like one; identity: neuron = label. auto: spread for a new model, a "
      "checkpoint's own order when resuming (identity for checkpoints that recorded none)");
  t.Text(
      "hash", [c] { return ToString(c->lsh.family); },
      "LSH family: auto|dwta|srp|wta (auto: from the layer's size)");
  t.Text(
      "K", [c] { return AutoOr(c->lsh.k); }, "hash functions per table (auto or a number)");
  t.Text(
      "L", [c] { return AutoOr(c->lsh.l); }, "hash tables (auto or a number)");
  t.Field("bucket-size", &c->lsh.bucket_capacity, "bucket capacity, in [1, 2^20]");
  t.Field("bin-size", &c->lsh.bin_size, "WTA/DWTA bin size");
  t.Text(
      "insert", [c] { return ToString(c->lsh.insert); }, "full-bucket insertion: reservoir|fifo");
  t.Text(
      "query", [c] { return ToString(c->lsh.query); },
      "query strategy: auto|vanilla|topk|threshold");
  t.Text(
      "lsh-share", [c] { return c->lsh.lsh_share == 0 ? "auto" : Text(c->lsh.lsh_share); },
      "share in (0,1] of a sample's slots beyond its labels that LSH candidates may take; "
      "the fill supplies the rest (auto: from the layer's size)");
  t.Field("threshold", &c->lsh.threshold, "minimum collisions for --query threshold, in [1, 1024]");
  t.Text(
      "fill", [c] { return ToString(c->lsh.fill); },
      "when candidates are fewer than the budget: batch (the batch's labels on this rank, "
      "then one uniform random set per batch and rank, shared by its samples)|random "
      "(uniform random neurons per sample)|stop");
  t.Field("rebuild-n0", &c->lsh.rebuild_n0, "first table rebuild after this many iterations");
  t.Field("rebuild-lambda", &c->lsh.rebuild_lambda,
          "rebuild interval growth: the t-th interval is n0*exp(lambda*t)");
  t.Field("rehash-every", &c->lsh.rehash_every,
          "draw new hash functions every N iterations (0: never)");
  t.Field("lsh-mips", &c->lsh.mips,
          "index neurons by inner product (MIPS transform) rather than by angle");
  t.Field("batch", &c->batch, "batch size, in [1, 2^20]");
  t.Field("lr", &c->lr, "Adam learning rate");
  t.Field("beta1", &c->beta1, "Adam beta1");
  t.Field("beta2", &c->beta2, "Adam beta2");
  t.Field("eps", &c->eps, "Adam epsilon");
  t.Switch("dense-adam", &c->dense_adam,
           "update every row each step (default: only the rows the batch touched)");
  t.Field("iterations", &c->iterations, "iterations to train, at most 2^40 (0: use --epochs)");
  t.Field("epochs", &c->epochs, "epochs to train when --iterations is 0, at most 10^6");
  t.Field(
      "eval-every", &c->eval_every,
      "evaluate every N iterations (0: when validating, about 10 times per run and at most once "
      "per epoch; else only at the end)");
  t.Field("eval-points", &c->eval_points,
          "evaluate on the first N points of the evaluation set (0: all)");
  t.Switch("eval-sampled", &c->eval_sampled,
           "LSH-sampled inference instead of exact scoring of every output neuron");
  t.Field("log-every", &c->log_every, "progress line every N iterations");
  t.Field("threads", &c->threads, "OpenMP threads per rank, at most 4096 (0: default)");
  t.Text(
      "seed", [c] { return Text(c->seed); }, "random seed, in [0, 2^64)");
  t.Text(
      "device", [c] { return ToString(c->device); }, "cpu|gpu");
  t.Field("gpus-per-node", &c->gpus_per_node,
          "--device gpu: local rank r uses GPU r % N of the visible ones (0: one rank per GPU)");
  t.Text(
      "strategy", [c] { return ToString(c->strategy); },
      "sparse|dense-model-parallel|data-parallel");
  t.Path("metrics", &c->metrics_file,
         "append JSON lines metrics to this file (an existing file is kept: a resumed run adds to "
         "it)");
  t.Path("checkpoint-dir", &c->checkpoint_dir, "checkpoint directory");
  t.Field("checkpoint-every", &c->checkpoint_every,
          "checkpoint every N iterations (0: only at the end of training and on a stop signal)");
  t.Field("keep-checkpoints", &c->keep_checkpoints,
          "checkpoints kept in --checkpoint-dir (the newest), in [1, 1000]");
  t.Path("resume", &c->resume_dir,
         "resume from the newest intact checkpoint in this directory (any number of ranks)");
  t.Path("save", &c->save_dir,
         "write the final model (the --keep-best one when validating) as a checkpoint folder here");
  t.Field("checkpoint-tables", &c->checkpoint_tables,
          "write the LSH tables into checkpoints (exact resume; false: rebuilt from the weights)");
  t.Field("divergence-factor", &c->divergence_factor,
          "stop when a step's loss exceeds this factor times its running level (0: never)");
}

/// "auto" -> 0, else a positive integer.
int ParseAutoInt(const std::string& option, const std::string& value) {
  if (value == "auto") return 0;
  std::istringstream is(value);
  int v = 0;
  is >> v;
  DSLIDE_CHECK(!is.fail() && is.eof() && v >= 1, "option --", option, ": invalid value '", value,
               "' (expected auto or a positive integer)");
  return v;
}

bool ParseBool(const std::string& option, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes" || value == "on") return true;
  if (value == "false" || value == "0" || value == "no" || value == "off") return false;
  throw Error(
      Concat("option --", option, ": invalid value '", value, "' (expected true or false)"));
}

}  // namespace

LabelOrder ParseLabelOrder(const std::string& name) {
  return ParseEnum<LabelOrder>("label-order", name,
                               {{"auto", LabelOrder::kAuto},
                                {"spread", LabelOrder::kSpread},
                                {"identity", LabelOrder::kIdentity}});
}

QueryStrategy ParseQueryStrategy(const std::string& name) {
  return ParseEnum<QueryStrategy>("query", name,
                                  {{"vanilla", QueryStrategy::kVanilla},
                                   {"topk", QueryStrategy::kTopK},
                                   {"threshold", QueryStrategy::kThreshold}});
}

HashFamily ParseHashFamily(const std::string& name, bool allow_auto) {
  if (allow_auto)
    return ParseEnum<HashFamily>("hash", name,
                                 {{"auto", HashFamily::kAuto},
                                  {"dwta", HashFamily::kDwta},
                                  {"srp", HashFamily::kSrp},
                                  {"wta", HashFamily::kWta}});
  return ParseEnum<HashFamily>(
      "hash", name,
      {{"dwta", HashFamily::kDwta}, {"srp", HashFamily::kSrp}, {"wta", HashFamily::kWta}});
}

namespace {

void FinishTrain(const po::variables_map& vm, TrainConfig* c) {
  c->seed = ParseUnsigned("seed", vm["seed"].as<std::string>());
  c->hidden = ParseList<int64_t>("hidden", vm["hidden"].as<std::string>());
  const std::string sparsity = vm["sparsity"].as<std::string>();
  if (sparsity == "auto")
    c->sparsity.clear();
  else
    c->sparsity = ParseList<double>("sparsity", sparsity);
  c->lsh.family = ParseHashFamily(vm["hash"].as<std::string>(), /*allow_auto=*/true);
  c->lsh.k = ParseAutoInt("K", vm["K"].as<std::string>());
  c->lsh.l = ParseAutoInt("L", vm["L"].as<std::string>());
  const std::string share = vm["lsh-share"].as<std::string>();
  if (share == "auto") {
    c->lsh.lsh_share = 0;
  } else {
    std::istringstream is(share);
    is >> c->lsh.lsh_share;
    DSLIDE_CHECK(!is.fail() && is.eof() && c->lsh.lsh_share > 0 && c->lsh.lsh_share <= 1,
                 "option --lsh-share: invalid value '", share,
                 "' (expected auto or a share in (0, 1])");
  }
  const std::string keep = vm["keep-best"].as<std::string>();
  c->keep_best = keep == "auto" ? -1 : ParseBool("keep-best", keep) ? 1 : 0;
  c->lsh.insert = ParseEnum<InsertPolicy>(
      "insert", vm["insert"].as<std::string>(),
      {{"reservoir", InsertPolicy::kReservoir}, {"fifo", InsertPolicy::kFifo}});
  c->lsh.query = ParseEnum<QueryStrategy>("query", vm["query"].as<std::string>(),
                                          {{"auto", QueryStrategy::kAuto},
                                           {"vanilla", QueryStrategy::kVanilla},
                                           {"topk", QueryStrategy::kTopK},
                                           {"threshold", QueryStrategy::kThreshold}});
  c->lsh.fill = ParseEnum<FillPolicy>("fill", vm["fill"].as<std::string>(),
                                      {{"random", FillPolicy::kRandom},
                                       {"batch", FillPolicy::kBatch},
                                       {"stop", FillPolicy::kStop}});
  c->label_order = ParseLabelOrder(vm["label-order"].as<std::string>());
  c->device = ParseEnum<Device>("device", vm["device"].as<std::string>(),
                                {{"cpu", Device::kCpu}, {"gpu", Device::kGpu}});
  c->strategy = ParseEnum<Strategy>("strategy", vm["strategy"].as<std::string>(),
                                    {{"sparse", Strategy::kSparse},
                                     {"dense-model-parallel", Strategy::kDenseModelParallel},
                                     {"data-parallel", Strategy::kDataParallel}});
}

}  // namespace

std::vector<double> TrainConfig::LayerSparsity(size_t num_layers) const {
  DSLIDE_ASSERT(!sparsity.empty(), "--sparsity auto must be resolved first (ResolveAuto)");
  std::vector<double> s(num_layers, 1.0);
  if (sparsity.size() == 1) {
    s.back() = sparsity[0];
  } else {
    DSLIDE_CHECK(sparsity.size() == num_layers, "option --sparsity: ", sparsity.size(),
                 " values given for ", num_layers,
                 " layers (give one per layer, or one for "
                 "the output layer)");
    s = sparsity;
  }
  if (strategy != Strategy::kSparse) std::fill(s.begin(), s.end(), 1.0);
  return s;
}

void TrainConfig::Validate() const {
  DSLIDE_CHECK(!train_file.empty(), "option --train is required");
  for (auto h : hidden)
    DSLIDE_CHECK(h >= 1 && h <= kMaxLayerSize, "option --hidden: each size must be in [1, ",
                 kMaxLayerSize, "] (below 2^24), got ", h);
  for (auto s : sparsity)
    DSLIDE_CHECK(s > 0.0 && s <= 1.0, "option --sparsity: values must be in (0, 1], got ", s);
  DSLIDE_CHECK(sparsity.size() <= 1 || sparsity.size() == hidden.size() + 1,
               "option --sparsity: give 1 or ", hidden.size() + 1, " values, got ",
               sparsity.size());
  DSLIDE_CHECK(lsh.k >= 0 && lsh.k <= 32, "option --K: must be in [1, 32], got ", lsh.k);
  DSLIDE_CHECK(lsh.l >= 0 && lsh.l <= 1024, "option --L: must be in [1, 1024], got ", lsh.l);
  DSLIDE_CHECK(lsh.lsh_share == 0 || lsh.lsh_share >= 1 || lsh.fill != FillPolicy::kStop,
               "option --lsh-share ", lsh.lsh_share,
               " leaves slots to the fill, which --fill stop "
               "turns off: give --lsh-share 1 or another --fill");
  CheckRange<int64_t>("dense-below", dense_below, 0, kMaxDim);
  CheckRange<int64_t>("min-negatives", min_negatives, 1, kMaxDim);
  DSLIDE_CHECK(valid_fraction >= 0 && valid_fraction < 1,
               "option --valid-fraction: must be in [0, 1), got ", valid_fraction);
  DSLIDE_CHECK(valid_file.empty() || valid_fraction == 0,
               "options --valid and --valid-fraction exclude each other");
  DSLIDE_CHECK(keep_best != 1 || validating(),
               "option --keep-best selects on validation data: give --valid FILE or "
               "--valid-fraction F");
  CheckRange("bucket-size", lsh.bucket_capacity, 1, kMaxBucketSize);
  DSLIDE_CHECK(lsh.bin_size >= 2 && lsh.bin_size <= 256 && (lsh.bin_size & (lsh.bin_size - 1)) == 0,
               "option --bin-size: must be a power of two in [2, 256], got ", lsh.bin_size);
  CheckRange("threshold", lsh.threshold, 1, 1024);
  CheckRange("gpus-per-node", gpus_per_node, 0, kMaxGpusPerNode);
  CheckRange<int64_t>("rebuild-n0", lsh.rebuild_n0, 1, kMaxIterations);
  DSLIDE_CHECK(lsh.rebuild_lambda >= 0 && lsh.rebuild_lambda < 10,
               "option --rebuild-lambda: must be in [0, 10), got ", lsh.rebuild_lambda);
  CheckRange<int64_t>("rehash-every", lsh.rehash_every, 0, kMaxIterations);
  CheckRange("batch", batch, 1, kMaxBatch);
  DSLIDE_CHECK(lr > 0 && std::isfinite(lr), "option --lr: must be a finite number > 0, got ", lr);
  // The step runs in float: a rate float cannot hold would be 0 or infinite there.
  DSLIDE_CHECK(lr >= std::numeric_limits<float>::min() && lr <= std::numeric_limits<float>::max(),
               "option --lr: must be a number > 0 that a float holds (",
               std::numeric_limits<float>::min(), " to ", std::numeric_limits<float>::max(),
               "), got ", lr);
  DSLIDE_CHECK(beta1 >= 0 && beta1 < 1, "option --beta1: must be in [0, 1), got ", beta1);
  DSLIDE_CHECK(beta2 >= 0 && beta2 < 1, "option --beta2: must be in [0, 1), got ", beta2);
  DSLIDE_CHECK(eps > 0 && eps <= 1, "option --eps: must be in (0, 1], got ", eps);
  CheckRange<int64_t>("iterations", iterations, 0, kMaxIterations);
  DSLIDE_CHECK(epochs >= 0 && epochs <= kMaxEpochs, "option --epochs: must be in [0, ",
               static_cast<int64_t>(kMaxEpochs), "], got ", epochs);
  DSLIDE_CHECK(iterations > 0 || epochs > 0,
               "option --epochs: must be positive when --iterations is 0, got ", epochs);
  CheckRange<int64_t>("eval-every", eval_every, 0, kMaxIterations);
  CheckRange<int64_t>("eval-points", eval_points, 0, kMaxPoints);
  CheckRange<int64_t>("log-every", log_every, 1, kMaxIterations);
  CheckRange("threads", threads, 0, kMaxThreads);
  CheckRange<int64_t>("checkpoint-every", checkpoint_every, 0, kMaxIterations);
  DSLIDE_CHECK(checkpoint_every == 0 || !checkpoint_dir.empty(),
               "option --checkpoint-every needs --checkpoint-dir");
  CheckRange("keep-checkpoints", keep_checkpoints, 1, kMaxKeepCheckpoints);
  DSLIDE_CHECK(
      divergence_factor == 0 || (divergence_factor > 1 && std::isfinite(divergence_factor)),
      "option --divergence-factor: must be 0 (off) or above 1, got ", divergence_factor);
}

void GenConfig::ResolveShape() {
  struct Shape {
    const char* name;
    int64_t features, labels, points;
    int nnz, lpp;
  };
  static const Shape kShapes[] = {
      {"amazon-670k", 135909, 670091, 100000, 75, 5},
      {"delicious-200k", 782585, 205443, 50000, 300, 75},
      {"wikilshtc-325k", 1617899, 325056, 50000, 42, 3},
  };
  if (!shape.empty()) {
    const Shape* found = nullptr;
    for (const auto& s : kShapes)
      if (shape == s.name) found = &s;
    DSLIDE_CHECK(found, "option --shape: unknown shape '", shape,
                 "' (expected amazon-670k|delicious-200k|wikilshtc-325k)");
    if (features == 0) features = found->features;
    if (labels == 0) labels = found->labels;
    if (points == 0) points = found->points;
    if (nnz == 0) nnz = found->nnz;
    if (labels_per_point == 0) labels_per_point = found->lpp;
  }
  if (features == 0) features = 5000;
  if (labels == 0) labels = 1000;
  if (points == 0) points = 20000;
  if (nnz == 0) nnz = 30;
  if (labels_per_point == 0) labels_per_point = 3;
  if (test_points == 0) test_points = std::max<int64_t>(1, points / 5);
}

void GenConfig::Validate() const {
  DSLIDE_CHECK(!out.empty(), "option --out is required");
  CheckRange<int64_t>("points", points, 1, kMaxGenPoints);
  CheckRange<int64_t>("test-points", test_points, 1, kMaxGenPoints);
  CheckRange<int64_t>("features", features, 2, kMaxDim);
  CheckRange<int64_t>("labels", labels, 2, kMaxDim);
  DSLIDE_CHECK(nnz >= 1 && nnz <= features, "option --nnz: must be in [1, features = ", features,
               "], got ", nnz);
  DSLIDE_CHECK(labels_per_point >= 1 && labels_per_point <= labels,
               "option --labels-per-point: must be in [1, labels = ", labels, "], got ",
               labels_per_point);
  DSLIDE_CHECK(noise >= 0 && noise < 1, "option --noise: must be in [0, 1), got ", noise);
  DSLIDE_CHECK(zipf >= 0 && zipf <= 3, "option --zipf: must be in [0, 3], got ", zipf);
}

std::string SettingsJson(const TrainConfig& cfg) {
  TrainConfig shown = cfg;
  po::options_description d;
  OptionTable table(&d);
  AddTrainOptions(table, &shown);
  return table.Echo();
}

bool ParseTrain(int argc, const char* const* argv, TrainConfig* cfg, std::string* help) {
  po::options_description d("train options");
  OptionTable table(&d);
  AddTrainOptions(table, cfg);
  po::variables_map vm;
  if (!Parse(argc, argv, d, "Usage: dslide train --train FILE --test FILE [options]", &vm, help))
    return false;
  FinishTrain(vm, cfg);
  cfg->Validate();
  return true;
}

bool ParseGen(int argc, const char* const* argv, GenConfig* c, std::string* help) {
  po::options_description d("gen options");
  OptionTable t(&d);
  t.Path("shape", &c->shape, "amazon-670k|delicious-200k|wikilshtc-325k (sets sizes)");
  t.Field("points", &c->points, "training points (0: shape default)");
  t.Field("test-points", &c->test_points, "test points (0: points/5)");
  t.Field("features", &c->features, "input dimension");
  t.Field("labels", &c->labels, "number of labels");
  t.Field("nnz", &c->nnz, "average non-zero features per point");
  t.Field("labels-per-point", &c->labels_per_point,
          "maximum labels per point (each point has 1..M)");
  t.Field("noise", &c->noise, "fraction of random noise features");
  t.Field("zipf", &c->zipf, "Zipf exponent of label popularity");
  t.Switch("popular-first", &c->popular_first,
           "number labels by descending popularity (label 0 the most frequent), as word tasks "
           "number words (default: popular labels spread over the id range)");
  t.Text(
      "seed", [c] { return Text(c->seed); }, "random seed, in [0, 2^64)");
  t.Path("out", &c->out, "output prefix: writes PREFIX.train.txt and PREFIX.test.txt");
  po::variables_map vm;
  if (!Parse(argc, argv, d, "Usage: dslide gen [--shape NAME] [options] --out PREFIX", &vm, help))
    return false;
  c->seed = ParseUnsigned("seed", vm["seed"].as<std::string>());
  c->ResolveShape();
  c->Validate();
  return true;
}

bool ParseEval(int argc, const char* const* argv, EvalConfig* c, std::string* help) {
  po::options_description d("eval options");
  OptionTable t(&d);
  t.Path("model", &c->model_dir, "model (checkpoint) directory");
  t.Path("test", &c->test_file, "test file");
  t.Text(
      "k", [c] { return Join(c->k); }, "precision cut-offs, comma separated, each in [1, 10000]");
  t.Field("points", &c->points, "evaluate the first N test points (0: all)");
  t.Field("threads", &c->threads, "OpenMP threads per rank (0: default)");
  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide eval --model DIR --test FILE [options]\n"
             "Exact P@k of the newest checkpoint in DIR (written by any number of ranks) on FILE.",
             &vm, help))
    return false;
  c->k = ParseList<int>("k", vm["k"].as<std::string>());
  for (int k : c->k)
    DSLIDE_CHECK(k >= 1 && k <= kMaxTopK, "option --k: each cut-off must be in [1, ", kMaxTopK,
                 "], got ", k);
  DSLIDE_CHECK(!c->model_dir.empty(), "option --model is required");
  DSLIDE_CHECK(!c->test_file.empty(), "option --test is required");
  CheckRange<int64_t>("points", c->points, 0, kMaxPoints);
  CheckRange("threads", c->threads, 0, kMaxThreads);
  return true;
}

bool ParseExport(int argc, const char* const* argv, ExportConfig* c, std::string* help) {
  po::options_description d("export options");
  OptionTable t(&d);
  t.Path("model", &c->model_dir, "checkpoint directory (its newest checkpoint)");
  t.Path("out", &c->out, "HDF5 file to write");
  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide export --model DIR --out FILE.h5\n"
             "Writes the newest checkpoint's model as plain HDF5 (see docs/user-guide.md: Export).",
             &vm, help))
    return false;
  DSLIDE_CHECK(!c->model_dir.empty(), "option --model is required");
  DSLIDE_CHECK(!c->out.empty(), "option --out is required");
  return true;
}

bool ParseConvert(int argc, const char* const* argv, ConvertConfig* c, std::string* help) {
  po::options_description d("convert options");
  OptionTable t(&d);
  t.Path("in", &c->in, "XC text file (plain or gzip)");
  t.Path("out", &c->out, "binary dataset to write (train/eval read it like text)");
  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide convert --in FILE.txt --out FILE.dsb\n"
             "Converts XC text to dslide's binary dataset and prints both load times.",
             &vm, help))
    return false;
  DSLIDE_CHECK(!c->in.empty(), "option --in is required");
  DSLIDE_CHECK(!c->out.empty(), "option --out is required");
  return true;
}

bool ParsePredict(int argc, const char* const* argv, PredictConfig* c, std::string* help) {
  po::options_description d("predict options");
  OptionTable t(&d);
  t.Path("model", &c->model_dir, "checkpoint directory (its newest checkpoint) or folder");
  t.Path("input", &c->input,
         "points to score (XC text, plain or gzip, or .dsb; labels are ignored)");
  t.Field("top-k", &c->top_k, "labels per row, best first, in [1, 10000]");
  t.Path("out", &c->out, "file to write");
  t.Field("format", &c->format,
          "tsv: ROW<TAB>LABEL:SCORE ... | jsonl: {\"row\":..,\"labels\":[..],\"scores\":[..]}");
  t.Field("chunk", &c->chunk, "input points read and scored at a time, in [1, 2^24]");
  t.Field("threads", &c->threads, "OpenMP threads per rank (0: default)");
  po::variables_map vm;
  if (!Parse(
          argc, argv, d,
          "Usage: dslide predict --model DIR --input FILE --top-k K --out FILE [--format "
          "tsv|jsonl]\n"
          "Writes the K most probable labels (softmax probabilities, exact over every output) of\n"
          "each input row; under mpirun every rank scores its block of the outputs.",
          &vm, help))
    return false;
  DSLIDE_CHECK(!c->model_dir.empty(), "option --model is required");
  DSLIDE_CHECK(!c->input.empty(), "option --input is required");
  DSLIDE_CHECK(!c->out.empty(), "option --out is required");
  CheckRange("top-k", c->top_k, 1, kMaxTopK);
  DSLIDE_CHECK(c->format == "tsv" || c->format == "jsonl", "option --format: invalid value '",
               c->format, "' (expected tsv|jsonl)");
  CheckRange<int64_t>("chunk", c->chunk, 1, kMaxChunk);
  CheckRange("threads", c->threads, 0, kMaxThreads);
  return true;
}

bool ParseBench(int argc, const char* const* argv, BenchConfig* c, std::string* help) {
  po::options_description d("bench options");
  OptionTable t(&d);
  t.Field("shape", &c->shape, "data shape to generate");
  t.Field("points", &c->points, "training points to generate (0: shape default)");
  t.Field("features", &c->features, "input dimension (0: the shape's)");
  t.Field("labels", &c->labels, "output labels (0: the shape's)");
  t.Field("nnz", &c->nnz, "non-zero features per point (0: the shape's)");
  AddTrainOptions(t, &c->train);  // with bench's own defaults (BenchConfig)
  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide bench --shape NAME [options]\n"
             "Trains on generated data of that shape (or on --train/--test files) and prints "
             "one JSON object.",
             &vm, help))
    return false;
  FinishTrain(vm, &c->train);
  CheckRange<int64_t>("points", c->points, 0, kMaxGenPoints);
  DSLIDE_CHECK(c->features == 0 || (c->features >= 2 && c->features <= kMaxDim),
               "option --features: must be 0 (the shape's) or in [2, ", kMaxDim, "], got ",
               c->features);
  DSLIDE_CHECK(c->labels == 0 || (c->labels >= 2 && c->labels <= kMaxDim),
               "option --labels: must be 0 (the shape's) or in [2, ", kMaxDim, "], got ",
               c->labels);
  CheckRange("nnz", c->nnz, 0, static_cast<int>(kMaxDim));
  if (c->train.train_file.empty()) {
    c->train.train_file = "(generated)";
  } else {
    DSLIDE_CHECK(!c->train.test_file.empty(), "option --test is required with --train");
  }
  c->train.Validate();
  return true;
}

}  // namespace dslide
