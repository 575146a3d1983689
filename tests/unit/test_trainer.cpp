// The trainer learns generated data well above the most-popular-label baseline, and one
// thread with a fixed seed is deterministic.
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <limits>

#include "../test_presets.h"
#include "auto_settings.h"
#include "communicator.h"
#include "error.h"
#include "layer_backend.h"
#include "rng.h"
#include "parallel.h"
#include "synthetic.h"
#include "trainer.h"

namespace dslide {
namespace {

GenConfig SmallShape() { return testing::SyntheticShape(2000, 500, 20, 2, 6000); }

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
  testing::UseSimHashTopK(&cfg.lsh);
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

/// A dense batch of B rows of width w with values from `rng`.
BatchRows DenseRows(int64_t B, int64_t w, Rng* rng) {
  BatchRows r;
  for (int64_t i = 0; i < B; ++i) {
    r.off.push_back(i * w);
    r.n.push_back(w);
    for (int64_t j = 0; j < w; ++j) {
      r.ids.push_back(static_cast<int32_t>(j));
      r.vals.push_back(static_cast<float>(rng->Uniform()));
    }
  }
  r.dense = true;
  r.width = w;
  return r;
}

class FusedUpdate : public ::testing::TestWithParam<double> {};

TEST_P(FusedUpdate, EqualsBackwardThenUpdate) {
  // Sparse output (the per-neuron index) and dense output (the row-block path) alike.
  SetNumThreads(2);
  TrainConfig cfg;
  cfg.hidden = {16};
  cfg.sparsity = {1.0, GetParam()};
  ResolveAuto(&cfg, 30, 200);
  const ModelSpec spec = ModelSpec::Make(30, cfg.hidden, 200, cfg.sparsity, 0, 1);
  auto a = MakeBackend(Device::kCpu, 0), b = MakeBackend(Device::kCpu, 0);
  a->Init(spec, BackendOptions::Of(cfg));
  b->Init(spec, BackendOptions::Of(cfg));
  Rng rng(11);
  const BatchRows in = DenseRows(24, 16, &rng);
  BatchLabels labels;
  for (int64_t i = 0; i < 24; ++i) {
    labels.ids.push_back(static_cast<int32_t>(rng.Below(200)));
    labels.off.push_back(static_cast<int64_t>(labels.ids.size()));
  }
  BatchRows out_a, out_b;
  a->SelectActive(1, in, &labels, 5, &out_a);
  b->SelectActive(1, in, &labels, 5, &out_b);
  ASSERT_EQ(out_a.ids, out_b.ids);
  BatchRows delta = out_a;
  for (auto& v : delta.vals) v = rng.Uniform() < 0.2 ? 0.0f : static_cast<float>(rng.Uniform() - 0.5);
  AdamStep step;
  step.lr = 0.01f;
  for (int rep = 0; rep < 3; ++rep) {
    step.t = rep + 1;
    BatchRows ga, gb;
    ga.LikeZero(in);
    gb.LikeZero(in);
    a->Backward(1, in, delta, &ga);
    a->Update(1, step, false);
    b->BackwardUpdate(1, in, delta, &gb, step, false);
    for (size_t j = 0; j < ga.vals.size(); ++j) EXPECT_NEAR(ga.vals[j], gb.vals[j], 1e-6) << j;
  }
  std::vector<float> wa, ba, wb, bb;
  a->GetLayer(1, &wa, &ba);
  b->GetLayer(1, &wb, &bb);
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t j = 0; j < wa.size(); ++j) EXPECT_NEAR(wa[j], wb[j], 1e-6) << j;
  for (size_t j = 0; j < ba.size(); ++j) EXPECT_NEAR(ba[j], bb[j], 1e-6) << j;
}

INSTANTIATE_TEST_SUITE_P(CpuBackend, FusedUpdate, ::testing::Values(0.2, 1.0));

TEST(Trainer, NonFiniteWeightsStopTrainingNamingLayerAndIteration) {
  SetNumThreads(1);
  const GenConfig g = SmallShape();
  const Dataset train = GenerateSynthetic(g, 0, 500);
  TrainConfig cfg;
  cfg.hidden = {16};
  cfg.sparsity = {0.2};
  cfg.lr = 1e-3;
  LocalCommunicator comm;
  Trainer tr(cfg, &comm, MakeBackend(Device::kCpu, 0), train.num_features, train.num_labels);
  std::vector<int64_t> pts(64);
  std::iota(pts.begin(), pts.end(), 0);
  tr.Step(train, pts);
  // A NaN written into the output layer's weights poisons its next update.
  std::vector<float> w, b;
  tr.backend().GetLayer(1, &w, &b);
  std::fill(w.begin(), w.end(), std::numeric_limits<float>::quiet_NaN());
  tr.backend().SetLayer(1, w, b);
  try {
    tr.Step(train, pts);
    ADD_FAILURE() << "training went on with NaN weights";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("iteration 2"), std::string::npos) << msg;
  }
}

TEST(CpuBackend, BatchFillMakesTheBatchLabelsNegativesOfEverySample) {
  SetNumThreads(2);
  TrainConfig cfg;
  cfg.hidden = {16};
  cfg.sparsity = {1.0, 0.1};  // budget 100 of 1000
  cfg.lsh.fill = FillPolicy::kBatch;
  // DWTA on a dense input leaves most of the budget to the fill, which is what is tested.
  cfg.lsh.family = HashFamily::kDwta;
  cfg.lsh.k = 6;
  cfg.lsh.l = 50;
  cfg.lsh.query = QueryStrategy::kVanilla;
  cfg.lsh.lsh_share = 1.0;
  const ModelSpec spec = ModelSpec::Make(30, cfg.hidden, 1000, cfg.sparsity, 0, 1);
  auto be = MakeBackend(Device::kCpu, 0);
  be->Init(spec, BackendOptions::Of(cfg));
  Rng rng(5);
  const BatchRows in = DenseRows(32, 16, &rng);
  BatchLabels labels;
  std::set<int32_t> all;
  for (int64_t i = 0; i < 32; ++i) {
    const int32_t l = static_cast<int32_t>(rng.Below(1000));
    labels.ids.push_back(l);
    labels.off.push_back(static_cast<int64_t>(labels.ids.size()));
    all.insert(l);
  }
  BatchRows out;
  be->SelectActive(1, in, &labels, 0, &out);
  std::set<int32_t> union_ids;
  for (int64_t i = 0; i < 32; ++i) {
    ASSERT_EQ(out.n[i], 100);
    const std::set<int32_t> act(out.Ids(i), out.Ids(i) + out.n[i]);
    ASSERT_EQ(act.size(), 100u);
    EXPECT_TRUE(act.count(*labels.Of(i)));
    for (int32_t l : all) EXPECT_TRUE(act.count(l)) << "sample " << i << " lacks batch label " << l;
    union_ids.insert(act.begin(), act.end());
  }
  // Shared fill: the whole batch touches about one budget of neurons, not 32 budgets.
  EXPECT_LT(union_ids.size(), 200u);
}

}  // namespace
}  // namespace dslide
