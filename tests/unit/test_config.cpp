// Options: defaults work, unknown options and bad values are errors naming the option, INI
// files are read and the command line wins over them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "config/config.h"
#include "gpu/device_choice.h"
#include "test_util.h"
#include "train/metrics.h"
#include "train/predict.h"

namespace dslide {
namespace {

std::string TrainError(std::vector<const char*> argv) {
  argv.insert(argv.begin(), "train");
  TrainConfig c;
  std::string help;
  try {
    ParseTrain(static_cast<int>(argv.size()), argv.data(), &c, &help);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// The message of parsing `args` (args[0] the subcommand: train, gen, eval, predict, export,
/// convert, bench); "" when accepted.
std::string ParseError(std::vector<std::string> args) {
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  const int argc = static_cast<int>(argv.size());
  const std::string cmd = args.at(0);
  std::string help;
  try {
    if (cmd == "train") {
      TrainConfig c;
      ParseTrain(argc, argv.data(), &c, &help);
    } else if (cmd == "gen") {
      GenConfig c;
      ParseGen(argc, argv.data(), &c, &help);
    } else if (cmd == "eval") {
      EvalConfig c;
      ParseEval(argc, argv.data(), &c, &help);
    } else if (cmd == "predict") {
      PredictConfig c;
      ParsePredict(argc, argv.data(), &c, &help);
    } else if (cmd == "export") {
      ExportConfig c;
      ParseExport(argc, argv.data(), &c, &help);
    } else if (cmd == "convert") {
      ConvertConfig c;
      ParseConvert(argc, argv.data(), &c, &help);
    } else if (cmd == "bench") {
      BenchConfig c;
      ParseBench(argc, argv.data(), &c, &help);
    } else {
      ADD_FAILURE() << "unknown subcommand " << cmd;
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, BenchDefaultsAreWrittenOnceAndShownInHelp) {
  // bench's own defaults (BenchConfig::Defaults) are what it runs with and what --help shows;
  // given options win.
  BenchConfig c;
  std::string help;
  const char* none[] = {"bench"};
  ASSERT_TRUE(ParseBench(1, none, &c, &help));
  EXPECT_EQ(c.train.iterations, 400);
  EXPECT_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.train.eval_every, 100);
  EXPECT_EQ(c.train.eval_points, 1000);
  EXPECT_EQ(c.train.log_every, 100);
  BenchConfig given;
  const char* argv[] = {"bench", "--iterations", "50", "--lr", "0.01"};
  ASSERT_TRUE(ParseBench(5, argv, &given, &help));
  EXPECT_EQ(given.train.iterations, 50);
  EXPECT_EQ(given.train.lr, 0.01);
  BenchConfig shown;
  const char* ask[] = {"bench", "--help"};
  ASSERT_FALSE(ParseBench(2, ask, &shown, &help));
  EXPECT_NE(help.find("--iterations arg (=400)"), std::string::npos) << help;
  EXPECT_NE(help.find("--lr arg (=0.001)"), std::string::npos) << help;
}

TEST(Config, DefaultsNeedOnlyTrain) {
  const char* argv[] = {"train", "--train", "a.txt", "--test", "b.txt"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(5, argv, &c, &help));
  EXPECT_EQ(c.batch, 256);
  EXPECT_EQ(c.hidden, std::vector<int64_t>{128});
  // Left to auto: resolved from the layers' sizes (test_auto_settings.cpp); the rate 1e-3
  // (2e-3 for a network a reranker follows).
  EXPECT_EQ(c.lr, 0);
  EXPECT_TRUE(c.sparsity_auto());
  EXPECT_EQ(c.lsh.family, HashFamily::kAuto);
  EXPECT_EQ(c.lsh.k, 0);
  EXPECT_EQ(c.lsh.l, 0);
  EXPECT_EQ(c.lsh.query, QueryStrategy::kAuto);
  EXPECT_FALSE(c.validating());
  EXPECT_EQ(c.keep_best, -1);
}

/// A field of `parsed` equals the same field of a default-constructed TrainConfig: the
/// struct's initialisers are the only defaults, the parser adds none of its own.
TEST(Config, ParsedDefaultsAreTheStructsAndHelpShowsThemShort) {
  const char* argv[] = {"train", "--train", "a.txt"};
  TrainConfig parsed;
  std::string help;
  ASSERT_TRUE(ParseTrain(3, argv, &parsed, &help));
  const TrainConfig d;
  EXPECT_EQ(parsed.lsh.rebuild_lambda, d.lsh.rebuild_lambda);
  EXPECT_EQ(parsed.beta1, d.beta1);
  EXPECT_EQ(parsed.divergence_factor, d.divergence_factor);
  EXPECT_EQ(parsed.checkpoint_tables, d.checkpoint_tables);
  EXPECT_EQ(parsed.keep_checkpoints, d.keep_checkpoints);
  EXPECT_EQ(parsed.min_negatives, d.min_negatives);
  EXPECT_EQ(parsed.seed, d.seed);
  EXPECT_EQ(parsed.hidden, d.hidden);
  EXPECT_EQ(parsed.lsh.fill, d.lsh.fill);
  const char* ask[] = {"train", "--help"};
  TrainConfig c;
  ASSERT_FALSE(ParseTrain(2, ask, &c, &help));
  for (const char* shown :
       {"--rebuild-lambda arg (=0.05)", "--beta1 arg (=0.9)", "--eps arg (=1e-08)",
        "--divergence-factor arg (=10)", "--checkpoint-tables arg (=true)",
        "--lsh-mips arg (=false)", "--hidden arg (=128)", "--fill arg (=batch)"})
    EXPECT_NE(help.find(shown), std::string::npos) << shown << "\n" << help;
  EXPECT_EQ(help.find("0000000"), std::string::npos) << help;
}

/// The echo of the run's settings comes from the parser's own table: every option of
/// --help, with the values parsed.
TEST(Config, SettingsEchoHasEveryOptionWithItsValue) {
  const char* argv[] = {"train",    "--train", "a.txt",  "--lr",   "0.002",
                        "--hidden", "64,32",   "--fill", "random", "--checkpoint-tables",
                        "false"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(11, argv, &c, &help));
  const std::string json = SettingsJson(c);
  for (const char* kv : {"\"train\":\"a.txt\"", "\"lr\":\"0.002\"", "\"hidden\":\"64,32\"",
                         "\"fill\":\"random\"", "\"checkpoint-tables\":false",
                         "\"sparsity\":\"auto\"", "\"batch\":256", "\"rebuild-lambda\":0.05",
                         "\"dense-adam\":false", "\"seed\":\"1\""})  // a 64-bit seed as text
    EXPECT_NE(json.find(kv), std::string::npos) << kv << " in " << json;
  const char* ask[] = {"train", "--help"};
  TrainConfig d;
  ASSERT_FALSE(ParseTrain(2, ask, &d, &help));
  int options = 0, keys = 0;
  for (size_t at = help.find("\n  --"); at != std::string::npos; at = help.find("\n  --", at + 1))
    ++options;
  for (size_t at = json.find("\":"); at != std::string::npos; at = json.find("\":", at + 1)) ++keys;
  EXPECT_EQ(keys, options - 1) << json;  // --help lists --config as well
}

TEST(Config, AutoAndExplicitLshSettings) {
  const char* argv[] = {"train", "--train", "a.txt", "--sparsity", "0.1",     "--hash", "srp",
                        "--K",   "9",       "--L",   "auto",       "--query", "topk"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(13, argv, &c, &help));
  EXPECT_EQ(c.LayerSparsity(2), (std::vector<double>{1.0, 0.1}));
  EXPECT_EQ(c.lsh.family, HashFamily::kSrp);
  EXPECT_EQ(c.lsh.k, 9);
  EXPECT_EQ(c.lsh.l, 0);
  EXPECT_EQ(c.lsh.query, QueryStrategy::kTopK);
  EXPECT_NE(TrainError({"--train", "a", "--K", "0"}).find("--K"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--L", "many"}).find("--L"), std::string::npos);
}

TEST(Config, ValidationOptions) {
  EXPECT_NE(TrainError({"--train", "a", "--valid", "v", "--valid-fraction", "0.1"}).find("exclude"),
            std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--valid-fraction", "1"}).find("--valid-fraction"),
            std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--keep-best"}).find("--keep-best"), std::string::npos);
  EXPECT_NE(
      TrainError({"--train", "a", "--valid", "v", "--keep-best", "maybe"}).find("--keep-best"),
      std::string::npos);
  EXPECT_EQ(TrainError({"--train", "a", "--valid-fraction", "0.1", "--keep-best", "false"}), "");
  EXPECT_NE(TrainError({"--train", "a", "--min-negatives", "0"}).find("--min-negatives"),
            std::string::npos);
  EXPECT_NE(
      TrainError({"--train", "a", "--fill", "stop", "--lsh-share", "0.5"}).find("--lsh-share"),
      std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--lsh-share", "1.5"}).find("--lsh-share"),
            std::string::npos);
}

TEST(Config, UnknownOptionIsError) {
  EXPECT_NE(TrainError({"--train", "a", "--bogus", "1"}).find("bogus"), std::string::npos);
}

TEST(Config, BadValuesNameTheOption) {
  EXPECT_NE(TrainError({"--train", "a", "--batch", "x"}).find("batch"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--batch", "0"}).find("--batch"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--hash", "md5"}).find("--hash"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--sparsity", "1.5"}).find("--sparsity"),
            std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--hidden", "12,x"}).find("--hidden"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--bin-size", "6"}).find("--bin-size"), std::string::npos);
  EXPECT_NE(TrainError({"--test", "b"}).find("--train"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--adam-catch-up", "true"}).find("--adam-catch-up"),
            std::string::npos);
  for (const char* v : {"first-layer", "all", "none"})
    EXPECT_EQ(TrainError({"--train", "a", "--adam-catch-up", v}), "") << v;
  for (const char* v : {"0", "-2", "x", "1e4", "2,3"})
    EXPECT_NE(TrainError({"--train", "a", "--first-lr-scale", v}).find("--first-lr-scale"),
              std::string::npos)
        << v;
  for (const char* v : {"auto", "1", "2.5", "0.5"})
    EXPECT_EQ(TrainError({"--train", "a", "--first-lr-scale", v}), "") << v;
  for (const char* v : {"-0.1", "-1", "0.95", "1", "x", "nan"})
    EXPECT_NE(TrainError({"--train", "a", "--dropout", v}).find("--dropout"), std::string::npos)
        << v;
  for (const char* v : {"auto", "0", "0.2", "0.9"})
    EXPECT_EQ(TrainError({"--train", "a", "--dropout", v}), "") << v;
}

TEST(Config, IniFileAndCommandLinePrecedence) {
  const auto ini = testing::WriteFile("cfg.ini", "train = from_ini.txt\nbatch = 64\nK = 4\n");
  const char* argv[] = {"train", "--config", ini.c_str(), "--batch", "32"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(5, argv, &c, &help));
  EXPECT_EQ(c.train_file, "from_ini.txt");
  EXPECT_EQ(c.batch, 32);
  EXPECT_EQ(c.lsh.k, 4);
}

TEST(Config, IniSectionKeyOverridesTheSameKeyBeforeAnySection) {
  // Keys before any section apply to every command; the command's own section wins over
  // them (it is not a second occurrence of the option); another command's is ignored; a key
  // twice in one place is still an error.
  const auto ini = testing::WriteFile(
      "cfg_sections.ini",
      "train = a.txt\nbatch = 64\nK = 4\n[train]\nbatch = 128  # this run's\n[eval]\nbatch = 8\n");
  const char* argv[] = {"train", "--config", ini.c_str()};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(3, argv, &c, &help));
  EXPECT_EQ(c.batch, 128);
  EXPECT_EQ(c.lsh.k, 4);
  EXPECT_EQ(c.train_file, "a.txt");
  const auto twice = testing::WriteFile("cfg_twice.ini", "train = a.txt\n[train]\nK = 4\nK = 5\n");
  const std::string msg = TrainError({"--config", twice.c_str()});
  EXPECT_NE(msg.find("more than once"), std::string::npos) << msg;
}

TEST(Config, IniUnknownKeyIsError) {
  const auto ini = testing::WriteFile("cfg_bad.ini", "train = a\nbatchsize = 64\n");
  const std::string msg = TrainError({"--config", ini.c_str()});
  EXPECT_NE(msg.find("batchsize"), std::string::npos) << msg;
  EXPECT_NE(msg.find(ini), std::string::npos) << msg;
}

TEST(Config, HelpIsReturned) {
  const char* argv[] = {"train", "--help"};
  TrainConfig c;
  std::string help;
  EXPECT_FALSE(ParseTrain(2, argv, &c, &help));
  EXPECT_NE(help.find("--sparsity"), std::string::npos);
}

TEST(Config, GenShapes) {
  const char* argv[] = {"gen", "--shape", "amazon-670k", "--points", "10", "--out", "x"};
  GenConfig g;
  std::string help;
  ASSERT_TRUE(ParseGen(7, argv, &g, &help));
  EXPECT_EQ(g.features, 135909);
  EXPECT_EQ(g.labels, 670091);
  EXPECT_EQ(g.points, 10);
  const char* bad[] = {"gen", "--shape", "imagenet", "--out", "x"};
  EXPECT_THROW(ParseGen(5, bad, &g, &help), Error);
}

// The minimal valid command line of each subcommand.
const std::vector<std::vector<std::string>> kValidCommands = {
    {"train", "--train", "a.txt"},
    {"gen", "--out", "x"},
    {"eval", "--model", "m", "--test", "t.txt"},
    {"predict", "--model", "m", "--input", "i.txt", "--out", "o.tsv"},
    {"export", "--model", "m", "--out", "m.h5"},
    {"convert", "--in", "a.txt", "--out", "a.dsb"},
    {"bench", "--points", "10"},
};

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(Config, EverySubcommandAcceptsItsMinimalCommandLine) {
  for (const auto& args : kValidCommands) EXPECT_EQ(ParseError(args), "") << args[0];
}

TEST(Config, AbbreviatedOptionsAreRejected) {
  // Boost's default style took a unique prefix for the option ("--epoch" ran --epochs).
  std::string msg = ParseError({"train", "--train", "a.txt", "--epoch", "3"});
  EXPECT_NE(msg.find("unrecognised option '--epoch'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean --epochs?"), std::string::npos) << msg;
  msg = ParseError({"train", "--trai", "a.txt"});
  EXPECT_NE(msg.find("unrecognised option '--trai'"), std::string::npos) << msg;
  msg = ParseError({"train", "--train", "a.txt", "--check", "d"});
  EXPECT_NE(msg.find("unrecognised option '--check'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--checkpoint-dir or --checkpoint-every"), std::string::npos) << msg;
  // One abbreviation per subcommand, each a prefix of exactly one of its options.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"gen", "--out", "x", "--poin", "5"}, "--poin"},
      {{"eval", "--model", "m", "--test", "t", "--point", "5"}, "--point"},
      {{"predict", "--model", "m", "--input", "i", "--out", "o", "--top", "3"}, "--top"},
      {{"export", "--mod", "m", "--out", "o"}, "--mod"},
      {{"convert", "--in", "a", "--ou", "b"}, "--ou"},
      {{"bench", "--shap", "amazon-670k"}, "--shap"},
      {{"bench", "--iter", "5"}, "--iter"},
  };
  for (const auto& [args, abbrev] : cases) {
    msg = ParseError(args);
    EXPECT_NE(msg.find("unrecognised option '" + abbrev + "'"), std::string::npos)
        << args[0] << ": " << msg;
  }
}

TEST(Config, IniFileRejectsAbbreviatedKeys) {
  const auto ini = testing::WriteFile("cfg_abbrev.ini", "train = a\nbatc = 64\n");
  const std::string msg = ParseError({"train", "--config", ini});
  EXPECT_NE(msg.find("unrecognised option 'batc'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(ini), std::string::npos) << msg;
}

TEST(Config, StrayPositionalArgumentsAreRejected) {
  // Boost drops arguments no option takes; a second file after --train was silently lost.
  std::string msg = ParseError({"train", "--train", "a.txt", "b.txt"});
  EXPECT_NE(msg.find("unexpected argument 'b.txt'"), std::string::npos) << msg;
  msg = ParseError({"train", "stray", "--train", "a.txt"});
  EXPECT_NE(msg.find("unexpected argument 'stray'"), std::string::npos) << msg;
  // A switch takes no value.
  msg = ParseError({"train", "--train", "a.txt", "--dense-adam", "true"});
  EXPECT_NE(msg.find("unexpected argument 'true'"), std::string::npos) << msg;
  // After "--" everything is positional.
  msg = ParseError({"train", "--train", "a.txt", "--", "--batch"});
  EXPECT_NE(msg.find("unexpected argument '--batch'"), std::string::npos) << msg;
  // Every subcommand.
  for (const auto& args : kValidCommands) {
    msg = ParseError(With(args, {"extra.txt"}));
    EXPECT_NE(msg.find("unexpected argument 'extra.txt'"), std::string::npos)
        << args[0] << ": " << msg;
  }
}

struct ListCase {
  std::vector<std::string> args;
  std::string expect;
};

void PrintTo(const ListCase& c, std::ostream* os) {
  for (const auto& a : c.args) *os << a << " ";
}

class ConfigBadList : public ::testing::TestWithParam<ListCase> {};

TEST_P(ConfigBadList, EmptyItemRejectedNamingOptionAndValue) {
  const std::string msg = ParseError(GetParam().args);
  EXPECT_NE(msg.find(GetParam().expect), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    AllLists, ConfigBadList,
    ::testing::Values(
        // std::getline dropped a trailing empty item: "64," was read as "64".
        ListCase{{"train", "--train", "a", "--hidden", "64,"},
                 "option --hidden: empty item in '64,'"},
        ListCase{{"train", "--train", "a", "--hidden", ",64"},
                 "option --hidden: empty item in ',64'"},
        ListCase{{"train", "--train", "a", "--hidden", "64,,32"},
                 "option --hidden: empty item in '64,,32'"},
        ListCase{{"train", "--train", "a", "--hidden", ","}, "option --hidden: empty item in ','"},
        ListCase{{"train", "--train", "a", "--hidden", ""}, "option --hidden: empty list"},
        ListCase{{"train", "--train", "a", "--sparsity", "0.1,"},
                 "option --sparsity: empty item in '0.1,'"},
        ListCase{{"bench", "--hidden", "32,"}, "option --hidden: empty item in '32,'"},
        ListCase{{"eval", "--model", "m", "--test", "t", "--k", "1,,5"},
                 "option --k: empty item in '1,,5'"},
        ListCase{{"eval", "--model", "m", "--test", "t", "--k", "1,5,"},
                 "option --k: empty item in '1,5,'"}));

TEST(Config, ListsStillParse) {
  const char* argv[] = {"train", "--train", "a", "--hidden", "256,128", "--sparsity", "1,1,0.1"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(7, argv, &c, &help));
  EXPECT_EQ(c.hidden, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(c.sparsity, (std::vector<double>{1, 1, 0.1}));
  const char* eval_argv[] = {"eval", "--model", "m", "--test", "t", "--k", "1,10000"};
  EvalConfig e;
  ASSERT_TRUE(ParseEval(7, eval_argv, &e, &help));
  EXPECT_EQ(e.k, (std::vector<int>{1, 10000}));
}

TEST(Config, EvalCutOffsAreRangeChecked) {
  // --k 0 and --k -1 used to pass here and crash the evaluation.
  for (const char* k : {"0", "-1", "10001", "1,0,5", "3,-2"}) {
    const std::string msg = ParseError({"eval", "--model", "m", "--test", "t", "--k", k});
    EXPECT_NE(msg.find("option --k: each cut-off must be in [1, 10000], got "), std::string::npos)
        << k << ": " << msg;
  }
  EXPECT_NE(ParseError({"eval", "--model", "m", "--test", "t", "--k", "-1"}).find("got -1"),
            std::string::npos);
  EXPECT_NE(ParseError({"eval", "--model", "m", "--test", "t", "--k", "1,x"})
                .find("option --k: invalid list element 'x' in '1,x'"),
            std::string::npos);
}

TEST(Config, NegativeSeedIsRejectedNotWrapped) {
  // Boost's lexical_cast<uint64_t>("-1") is 2^64-1: the run would go on with that seed.
  const std::string expect =
      "option --seed: must be an integer in [0, 18446744073709551615], got '-1'";
  EXPECT_NE(ParseError({"train", "--train", "a", "--seed", "-1"}).find(expect), std::string::npos)
      << ParseError({"train", "--train", "a", "--seed", "-1"});
  EXPECT_NE(ParseError({"train", "--train", "a", "--seed=-1"}).find(expect), std::string::npos);
  EXPECT_NE(ParseError({"gen", "--out", "x", "--seed", "-1"}).find(expect), std::string::npos);
  EXPECT_NE(ParseError({"bench", "--seed", "-1"}).find(expect), std::string::npos);
  const auto ini = testing::WriteFile("cfg_seed.ini", "train = a\nseed = -1\n");
  EXPECT_NE(ParseError({"train", "--config", ini}).find(expect), std::string::npos);
  for (const char* bad : {"+5", "1e3", "18446744073709551616", " 5", "0x10", ""}) {
    const std::string msg = ParseError({"train", "--train", "a", "--seed", bad});
    EXPECT_NE(msg.find("option --seed: must be an integer in [0, 18446744073709551615]"),
              std::string::npos)
        << "'" << bad << "': " << msg;
  }
  // The whole range still parses.
  const char* argv[] = {"train", "--train", "a", "--seed", "18446744073709551615"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(5, argv, &c, &help));
  EXPECT_EQ(c.seed, UINT64_MAX);
  const char* gen_argv[] = {"gen", "--out", "x", "--seed", "0"};
  GenConfig g;
  ASSERT_TRUE(ParseGen(5, gen_argv, &g, &help));
  EXPECT_EQ(g.seed, 0u);
}

struct RangeCase {
  std::vector<std::string> args;
  std::string expect;  ///< substring of the message
};

void PrintTo(const RangeCase& c, std::ostream* os) {
  for (const auto& a : c.args) *os << a << " ";
}

class ConfigOutOfRange : public ::testing::TestWithParam<RangeCase> {};

TEST_P(ConfigOutOfRange, RejectedNamingOptionAndRange) {
  const std::string msg = ParseError(GetParam().args);
  EXPECT_NE(msg.find(GetParam().expect), std::string::npos)
      << (msg.empty() ? std::string("accepted") : msg);
}

std::vector<std::string> Train(std::vector<std::string> more) {
  return With({"train", "--train", "a"}, more);
}

INSTANTIATE_TEST_SUITE_P(
    AllOptions, ConfigOutOfRange,
    ::testing::Values(
        RangeCase{Train({"--hidden", "0"}),
                  "option --hidden: each size must be in [1, 16777215] (below 2^24), got 0"},
        RangeCase{Train({"--hidden", "128,-5"}),
                  "option --hidden: each size must be in [1, 16777215]"},
        RangeCase{Train({"--hidden", "16777216"}), "got 16777216"},
        RangeCase{Train({"--batch", "0"}), "option --batch: must be in [1, 1048576], got 0"},
        RangeCase{Train({"--batch", "1048577"}),
                  "option --batch: must be in [1, 1048576], got 1048577"},
        RangeCase{Train({"--batch", "-3"}), "option --batch: must be in [1, 1048576], got -3"},
        RangeCase{Train({"--iterations", "-1"}),
                  "option --iterations: must be in [0, 1099511627776], got -1"},
        RangeCase{Train({"--iterations", "1099511627777"}), "option --iterations: must be in [0, "},
        RangeCase{Train({"--epochs", "inf"}), "option --epochs: must be in [0, 1000000], got inf"},
        RangeCase{Train({"--epochs", "nan"}), "option --epochs: must be in [0, 1000000], got nan"},
        RangeCase{Train({"--epochs", "-1", "--iterations", "10"}),
                  "option --epochs: must be in [0, 1000000], got -1"},
        RangeCase{Train({"--epochs", "0"}),
                  "option --epochs: must be positive when --iterations is 0"},
        RangeCase{Train({"--lr", "nan"}), "option --lr: must be a finite number > 0, got nan"},
        RangeCase{Train({"--lr", "inf"}), "option --lr: must be a finite number > 0, got inf"},
        RangeCase{Train({"--lr", "0"}), "option --lr: must be a finite number > 0, got 0"},
        RangeCase{Train({"--eps", "inf"}), "option --eps: must be in (0, 1], got inf"},
        RangeCase{Train({"--beta1", "nan"}), "option --beta1: must be in [0, 1), got nan"},
        RangeCase{Train({"--eval-points", "-1"}),
                  "option --eval-points: must be in [0, 1099511627776], got -1"},
        RangeCase{Train({"--eval-every", "-1"}), "option --eval-every: must be in [0, "},
        RangeCase{Train({"--threads", "4097"}), "option --threads: must be in [0, 4096], got 4097"},
        RangeCase{Train({"--threads", "-1"}), "option --threads: must be in [0, 4096], got -1"},
        RangeCase{Train({"--bucket-size", "1048577"}),
                  "option --bucket-size: must be in [1, 1048576], got 1048577"},
        RangeCase{Train({"--bucket-size", "0"}),
                  "option --bucket-size: must be in [1, 1048576], got 0"},
        RangeCase{Train({"--threshold", "0"}), "option --threshold: must be in [1, 1024], got 0"},
        RangeCase{Train({"--keep-checkpoints", "0"}),
                  "option --keep-checkpoints: must be in [1, 1000], got 0"},
        RangeCase{Train({"--keep-checkpoints", "1001"}),
                  "option --keep-checkpoints: must be in [1, 1000], got 1001"},
        RangeCase{Train({"--log-every", "0"}),
                  "option --log-every: must be in [1, 1099511627776], got 0"},
        RangeCase{Train({"--checkpoint-every", "-5"}),
                  "option --checkpoint-every: must be in [0, "},
        RangeCase{Train({"--rebuild-n0", "0"}), "option --rebuild-n0: must be in [1, "},
        RangeCase{Train({"--rehash-every", "-1"}), "option --rehash-every: must be in [0, "},
        RangeCase{Train({"--gpus-per-node", "-1"}),
                  "option --gpus-per-node: must be in [0, 1024], got -1"},
        RangeCase{Train({"--dense-below", "-1"}),
                  "option --dense-below: must be in [0, 2147483647]"},
        RangeCase{Train({"--min-negatives", "0"}),
                  "option --min-negatives: must be in [1, 2147483647]"},
        RangeCase{Train({"--batch", "99999999999"}), "option '--batch' is invalid"},
        RangeCase{{"bench", "--batch", "0"}, "option --batch: must be in [1, 1048576], got 0"},
        RangeCase{{"bench", "--points", "-1"},
                  "option --points: must be in [0, 2147483647], got -1"},
        RangeCase{{"bench", "--features", "1"},
                  "option --features: must be 0 (the shape's) or in [2, 2147483647], got 1"},
        RangeCase{{"bench", "--nnz", "-2"}, "option --nnz: must be in [0, 2147483647], got -2"},
        RangeCase{{"gen", "--out", "x", "--points", "-5"},
                  "option --points: must be in [1, 2147483647], got -5"},
        RangeCase{{"gen", "--out", "x", "--points", "3000000000"},
                  "option --points: must be in [1, 2147483647], got 3000000000"},
        RangeCase{{"gen", "--out", "x", "--test-points", "-1"},
                  "option --test-points: must be in [1, "},
        RangeCase{{"gen", "--out", "x", "--features", "1"},
                  "option --features: must be in [2, 2147483647], got 1"},
        RangeCase{{"gen", "--out", "x", "--labels", "3000000000"},
                  "option --labels: must be in [2, 2147483647], got 3000000000"},
        RangeCase{{"gen", "--out", "x", "--nnz", "-1"}, "option --nnz: must be in [1, features = "},
        RangeCase{{"gen", "--out", "x", "--noise", "nan"},
                  "option --noise: must be in [0, 1), got nan"},
        RangeCase{{"eval", "--model", "m", "--test", "t", "--points", "-1"},
                  "option --points: must be in [0, 1099511627776], got -1"},
        RangeCase{{"eval", "--model", "m", "--test", "t", "--threads", "5000"},
                  "option --threads: must be in [0, 4096], got 5000"},
        RangeCase{{"predict", "--model", "m", "--input", "i", "--out", "o", "--top-k", "0"},
                  "option --top-k: must be in [1, 10000], got 0"},
        RangeCase{{"predict", "--model", "m", "--input", "i", "--out", "o", "--chunk", "0"},
                  "option --chunk: must be in [1, 16777216], got 0"},
        RangeCase{{"predict", "--model", "m", "--input", "i", "--out", "o", "--chunk", "16777217"},
                  "option --chunk: must be in [1, 16777216], got 16777217"},
        RangeCase{{"predict", "--model", "m", "--input", "i", "--out", "o", "--threads", "-1"},
                  "option --threads: must be in [0, 4096], got -1"},
        RangeCase{{"predict", "--model", "m", "--input", "i", "--out", "o", "--approximate", "lsh"},
                  "option --approximate: invalid value 'lsh' (expected off|ann)"},
        RangeCase{{"eval", "--model", "m", "--test", "t", "--approximate", "exact"},
                  "option --approximate: invalid value 'exact' (expected off|ann|lsh)"},
        RangeCase{{"predict", "--model", "m", "--input", "i", "--out", "o", "--ann-m", "1"},
                  "option --ann-m: must be in [2, 100], got 1"},
        RangeCase{{"eval", "--model", "m", "--test", "t", "--ann-ef", "0"},
                  "option --ann-ef: must be in [1, 10000], got 0"},
        RangeCase{{"eval", "--model", "m", "--test", "t", "--ann-build-ef", "10001"},
                  "option --ann-build-ef: must be in [1, 10000], got 10001"},
        RangeCase{{"predict", "--model", "m", "--input", "i", "--out", "o", "--ann-tail", "-1"},
                  "option --ann-tail: must be in [0, 100000], got -1"},
        RangeCase{{"predict", "--model", "m", "--input", "i", "--out", "o", "--approximate",
                   "--top-k", "20", "--ann-ef", "10"},
                  "option --ann-ef: 10 candidates cannot give the top 20"},
        RangeCase{{"export", "--model", "m", "--out", "o.h5", "--dtype", "fp16"},
                  "option --dtype: invalid value 'fp16' (expected fp32|bf16)"},
        RangeCase{{"eval", "--model", "m", "--test", "t", "--approximate", "ann", "--k", "1,80"},
                  "option --ann-ef: 44 candidates cannot give the top 80"}));

TEST(Config, RangeLimitsThemselvesAreAccepted) {
  EXPECT_EQ(ParseError(Train({"--batch", "1048576", "--threads", "4096", "--hidden", "16777215",
                              "--bucket-size", "1048576", "--keep-checkpoints", "1000", "--epochs",
                              "1000000", "--iterations", "0"})),
            "");
  EXPECT_EQ(ParseError(Train({"--epochs", "0", "--iterations", "5"})), "");
  EXPECT_EQ(ParseError({"predict", "--model", "m", "--input", "i", "--out", "o", "--top-k", "10000",
                        "--chunk", "16777216"}),
            "");
  EXPECT_EQ(ParseError({"predict", "--model", "m", "--input", "i", "--out", "o", "--approximate",
                        "--top-k", "10", "--ann-ef", "10", "--ann-m", "100", "--ann-tail", "0"}),
            "");
  // Without --approximate ann, --ann-ef is not held to the cut-offs.
  EXPECT_EQ(ParseError({"eval", "--model", "m", "--test", "t", "--k", "1,80"}), "");
}

TEST(MetricsOption, FileIsAppendedNotTruncated) {
  // A resumed run (or one that fails early) keeps the history of the runs before it.
  const std::string p = testing::TmpPath("metrics_append.jsonl");
  {
    MetricsFile m(p);
    m.Write(JsonObject().Add("run", 1).Add("iter", 10));
  }
  {
    MetricsFile m(p);
    m.Write(JsonObject().Add("run", 2).Add("iter", 20));
  }
  std::ifstream in(p);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "{\"run\":1,\"iter\":10}\n{\"run\":2,\"iter\":20}\n");
  // An empty path writes nothing; an unwritable one is an error naming the option.
  MetricsFile none("");
  none.Write(JsonObject().Add("x", 1));
  try {
    MetricsFile bad("/nonexistent/dir/m.jsonl");
    FAIL() << "unwritable metrics file accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("option --metrics: cannot write '/nonexistent/dir/m.jsonl'"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dslide

namespace dslide {
namespace {

TEST(DeviceChoice, OneRankPerGpuByLocalRank) {
  EXPECT_EQ(gpu::ChooseDevice(0, 4, 0, 4, "ok"), 0);
  EXPECT_EQ(gpu::ChooseDevice(3, 4, 0, 4, "ok"), 3);
  // --gpus-per-node shares on purpose: local rank r -> r % N.
  EXPECT_EQ(gpu::ChooseDevice(3, 4, 2, 4, "ok"), 1);
  EXPECT_EQ(gpu::ChooseDevice(1, 2, 1, 1, "ok"), 0);
}

TEST(DeviceChoice, ClearErrors) {
  try {
    gpu::ChooseDevice(0, 1, 0, 0, "no CUDA-capable device is detected");
    FAIL() << "no device accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA-capable device is detected"), std::string::npos);
  }
  try {
    gpu::ChooseDevice(2, 3, 0, 2, "ok");
    FAIL() << "3 ranks on 2 GPUs accepted without --gpus-per-node";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpus-per-node 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu::ChooseDevice(0, 1, 4, 2, "ok"), Error);
}

TEST(DeviceChoice, LocalRankFromLauncher) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("MPI_LOCALRANKID");
  unsetenv("SLURM_LOCALID");
  EXPECT_EQ(gpu::LocalRankFromEnv(5), 5);
  setenv("SLURM_LOCALID", "2", 1);
  EXPECT_EQ(gpu::LocalRankFromEnv(5), 2);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  EXPECT_EQ(gpu::LocalRankFromEnv(5), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
  EXPECT_EQ(gpu::LocalRankFromEnv(5), 2);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

TEST(DeviceChoice, CudaAwareMpiOverride) {
  // This test binary links no MPI: without the override nothing reports CUDA support.
  unsetenv("DSLIDE_CUDA_AWARE_MPI");
  EXPECT_FALSE(gpu::MpiReadsDeviceMemory());
  setenv("DSLIDE_CUDA_AWARE_MPI", "1", 1);
  EXPECT_TRUE(gpu::MpiReadsDeviceMemory());
  setenv("DSLIDE_CUDA_AWARE_MPI", "0", 1);
  EXPECT_FALSE(gpu::MpiReadsDeviceMemory());
  setenv("DSLIDE_CUDA_AWARE_MPI", "yes", 1);
  try {
    gpu::MpiReadsDeviceMemory();
    FAIL() << "DSLIDE_CUDA_AWARE_MPI=yes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be 0 or 1"), std::string::npos) << e.what();
  }
  unsetenv("DSLIDE_CUDA_AWARE_MPI");
}

TEST(DeviceChoice, GpusPerNodeOption) {
  TrainConfig c;
  std::string help;
  const char* argv[] = {"train", "--train", "x.txt", "--gpus-per-node", "-1"};
  EXPECT_THROW(ParseTrain(5, argv, &c, &help), Error);
}

}  // namespace
}  // namespace dslide
