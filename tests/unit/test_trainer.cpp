// The trainer learns generated data well above the most-popular-label baseline, and one
// thread with a fixed seed is deterministic.
#include <gtest/gtest.h>

#include <numeric>

#include "communicator.h"
#include "parallel.h"
#include "synthetic.h"
#include "trainer.h"

namespace dslide {
namespace {

GenConfig SmallShape() {
  GenConfig g;
  g.features = 2000;
  g.labels = 500;
  g.nnz = 20;
  g.labels_per_point = 2;
  g.points = 6000;
  g.ResolveShape();
  return g;
}

TEST(Trainer, GeneratedDataIsLearnable) {
  SetNumThreads(2);
  const GenConfig g = SmallShape();
  const Dataset train = GenerateSynthetic(g, 0, g.points);
  const Dataset test = GenerateSynthetic(g, g.points, 1000);
  const double baseline = MostPopularLabelP1(train, test);
  TrainConfig cfg;
  cfg.hidden = {64};
  cfg.sparsity = {0.05};
  cfg.lr = 1e-3;
  cfg.batch = 128;
  cfg.lsh.family = HashFamily::kSrp;
  cfg.lsh.k = 6;
  cfg.lsh.l = 100;
  cfg.lsh.query = QueryStrategy::kTopK;
  LocalCommunicator comm;
  Trainer tr(cfg, &comm, MakeBackend(Device::kCpu, 0), train.num_features, train.num_labels);
  std::vector<int64_t> pts(cfg.batch);
  for (int it = 0; it < 300; ++it) {
    for (int i = 0; i < cfg.batch; ++i) pts[i] = (it * cfg.batch + i) % train.size();
    tr.Step(train, pts);
  }
  const EvalResult exact = tr.Evaluate(test, 0, false);
  const EvalResult sampled = tr.Evaluate(test, 0, true);
  std::printf("generated data: P@1 exact %.4f, LSH-sampled %.4f, most-popular baseline %.4f\n",
              exact.At(1), sampled.At(1), baseline);
  EXPECT_GT(exact.At(1), baseline + 0.3);
  EXPECT_GT(sampled.At(1), baseline + 0.2);
  EXPECT_GE(exact.At(1), exact.At(3) - 1e-9);  // precision falls with k on 1-2 label points
}

std::vector<double> Losses(int iters) {
  SetNumThreads(1);
  const GenConfig g = SmallShape();
  const Dataset train = GenerateSynthetic(g, 0, 2000);
  TrainConfig cfg;
  cfg.hidden = {32};
  cfg.sparsity = {0.1};
  cfg.batch = 64;
  cfg.lr = 1e-3;
  cfg.lsh.rebuild_n0 = 5;
  LocalCommunicator comm;
  Trainer tr(cfg, &comm, MakeBackend(Device::kCpu, 0), train.num_features, train.num_labels);
  std::vector<double> out;
  std::vector<int64_t> pts(64);
  for (int it = 0; it < iters; ++it) {
    std::iota(pts.begin(), pts.end(), it * 64);
    out.push_back(tr.Step(train, pts));
  }
  return out;
}

TEST(Trainer, OneThreadIsDeterministic) {
  const auto a = Losses(15), b = Losses(15);
  EXPECT_EQ(a, b);
  EXPECT_LT(a.back(), a.front());
}

}  // namespace
}  // namespace dslide
