// Real XC data (../shared/data) through the command-line path, as a new user runs it: only
// the data files, an epoch count and --valid-fraction (the model is selected on points held
// back from the training file; the test set is scored once, at the end). Default options
// must beat the most-popular-label baseline by a stated margin and come within a stated
// distance of the dense control (--sparsity 1); the LSH settings auto chooses, forced onto
// the output layer (--dense-below 0; auto computes these label spaces densely), must come
// within a stated distance of the dense layer too (both one-vs-rest, --loss auto's choice for
// these multi-label points, the sampled one log-Q corrected); the reranker (--rerank) must
// lift a sampled network's P@1 and P@5. Skips when the data folder is absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/synthetic.h"
#include "dist/communicator.h"
#include "test_util.h"
#include "train/ensemble.h"
#include "train/run_events.h"
#include "train/trainer.h"

namespace dslide {
namespace {

/// The options of `dslide train --train DIR/train.txt --test DIR/test.txt --threads 2 ARGS...`.
TrainConfig CliConfig(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"train",  "--train",         dir + "/train.txt",
                                   "--test", dir + "/test.txt", "--threads",
                                   "2",      "--log-every",     "1000"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<const char*> ptrs;
  for (const auto& a : argv) ptrs.push_back(a.c_str());
  TrainConfig cfg;
  std::string help;
  EXPECT_TRUE(ParseTrain(static_cast<int>(ptrs.size()), ptrs.data(), &cfg, &help)) << help;
  return cfg;
}

/// That run of one model: the final test score.
EvalResult TrainCli(const std::string& dir, const std::vector<std::string>& args) {
  const TrainConfig cfg = CliConfig(dir, args);
  LocalCommunicator comm;
  return RunTraining(cfg, &comm, nullptr);
}

/// TrainCli with 10 % of the training points held back for validation.
EvalResult Train(const std::string& dir, std::vector<std::string> args) {
  args.insert(args.begin(), {"--valid-fraction", "0.1"});
  return TrainCli(dir, args);
}

void Check(const std::string& name, const std::string& epochs, double margin, double to_dense) {
  const std::string dir = testing::DataDir(name);
  if (dir.empty()) GTEST_SKIP() << "dataset '" << name << "' not found (set DSLIDE_DATA_DIR)";
  const double baseline = MostPopularLabelP1(ReadXc(dir + "/train.txt"), ReadXc(dir + "/test.txt"));
  const EvalResult defaults = Train(dir, {"--epochs", epochs});
  const EvalResult lsh = Train(dir, {"--epochs", epochs, "--dense-below", "0"});
  const EvalResult dense = Train(dir, {"--epochs", epochs, "--sparsity", "1"});
  std::printf(
      "%s, %s epochs: test P@1 defaults %.4f | auto LSH forced %.4f | dense control %.4f | "
      "most-popular-label %.4f\n",
      name.c_str(), epochs.c_str(), defaults.At(1), lsh.At(1), dense.At(1), baseline);
  EXPECT_GE(defaults.At(1), baseline + margin);
  EXPECT_NEAR(defaults.At(1), dense.At(1), 0.02);
  EXPECT_GE(lsh.At(1), dense.At(1) - to_dense);
  EXPECT_GE(lsh.At(1), baseline + margin);
}

TEST(RealData, DeliciousDefaultsLearn) { Check("delicious", "10", 0.20, 0.03); }
TEST(RealData, BibtexDefaultsLearn) { Check("bibtex", "20", 0.35, 0.03); }

/// Collects a run's lines.
class Lines : public RunEvents {
 public:
  void Line(const std::string& text) override { text_ += text; }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// The reranker (--rerank) lifts a sampled network: delicious (983 labels) with the output
// layer sampled (--dense-below 0), 10 epochs with validation, one network followed by its
// reranker, against that network's own test line in the same run. Measured with seeds 1 / 2
// / 3: the network 0.6505 / 0.6380 / 0.6339, reranked 0.6625 / 0.6672 / 0.6578 (P@5 +0.022 /
// +0.036 / +0.020), at --lr 0.001: the rate the thresholds were measured at. (--lr auto's
// 2e-3 for a reranked network, chosen on the early-stopped runs of the long-tailed sets,
// trains this fixed 10 epochs to a network whose P@5 the reranker lifted by +0.007 to
// +0.024 in three runs.)
TEST(RealData, RerankerLiftsASampledNetwork) {
  const std::string dir = testing::DataDir("delicious");
  if (dir.empty()) GTEST_SKIP() << "dataset 'delicious' not found (set DSLIDE_DATA_DIR)";
  const TrainConfig cfg =
      CliConfig(dir, {"--valid-fraction", "0.1", "--epochs", "10", "--dense-below", "0",
                      "--ensemble", "1", "--rerank", "true", "--lr", "0.001"});
  LocalCommunicator comm;
  Lines lines;
  const EvalResult mix = RunEnsemble(cfg, 1, &comm, &lines);
  double net1 = -1, net5 = -1;
  const size_t at = lines.text().find("test  iter ");
  ASSERT_NE(at, std::string::npos) << lines.text();
  ASSERT_EQ(std::sscanf(lines.text().c_str() + lines.text().find("P@1 ", at), "P@1 %lf", &net1), 1);
  ASSERT_EQ(std::sscanf(lines.text().c_str() + lines.text().find("P@5 ", at), "P@5 %lf", &net5), 1);
  std::printf("delicious, sampled, 10 epochs: the network P@1 %.4f P@5 %.4f, reranked %.4f %.4f\n",
              net1, net5, mix.At(1), mix.At(5));
  EXPECT_NE(lines.text().find("test  network and reranker | P@1"), std::string::npos);
  EXPECT_GE(mix.At(1), net1 + 0.005);
  EXPECT_GE(mix.At(5), net5 + 0.01);
}

// A wide sampled output layer learns input-dependent predictions from the start: gcide8-
// skipgram (207K outputs, one-hot input), defaults, 250 iterations, must beat the
// most-popular-label baseline at once (with Glorot's width-scaled initial weights it sat at
// the baseline, 0.208, after 250 iterations and below it, 0.176, after 500; with He's it
// scores about 0.25).
TEST(RealData, Gcide8DefaultsBeatTheBaselineAtOnce) {
  const std::string dir = testing::DataDir("gcide8-skipgram");
  if (dir.empty()) GTEST_SKIP() << "dataset 'gcide8-skipgram' not found (set DSLIDE_DATA_DIR)";
  const EvalResult r = TrainCli(dir, {"--iterations", "250", "--eval-points", "5000"});
  const double baseline =
      MostPopularLabelP1(ReadXc(dir + "/train.txt"), ReadXc(dir + "/test.txt"), 5000);
  std::printf("gcide8-skipgram, 250 iterations: test P@1 %.4f, most-popular-label %.4f\n", r.At(1),
              baseline);
  EXPECT_GE(r.At(1), baseline + 0.025);
}

}  // namespace
}  // namespace dslide
