// Options: defaults work, unknown options and bad values are errors naming the option, INI
// files are read and the command line wins over them.
#include <gtest/gtest.h>

#include <vector>

#include "config.h"
#include "error.h"
#include "test_util.h"

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

TEST(Config, DefaultsNeedOnlyTrain) {
  const char* argv[] = {"train", "--train", "a.txt", "--test", "b.txt"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(5, argv, &c, &help));
  EXPECT_EQ(c.batch, 256);
  EXPECT_EQ(c.hidden, std::vector<int64_t>{128});
  EXPECT_EQ(c.lsh.family, HashFamily::kDwta);
  EXPECT_EQ(c.LayerSparsity(2), (std::vector<double>{1.0, 0.005}));
}

TEST(Config, UnknownOptionIsError) {
  EXPECT_NE(TrainError({"--train", "a", "--bogus", "1"}).find("bogus"), std::string::npos);
}

TEST(Config, BadValuesNameTheOption) {
  EXPECT_NE(TrainError({"--train", "a", "--batch", "x"}).find("batch"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--batch", "0"}).find("--batch"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--hash", "md5"}).find("--hash"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--sparsity", "1.5"}).find("--sparsity"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--hidden", "12,x"}).find("--hidden"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--bin-size", "6"}).find("--bin-size"), std::string::npos);
  EXPECT_NE(TrainError({"--test", "b"}).find("--train"), std::string::npos);
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

}  // namespace
}  // namespace dslide
