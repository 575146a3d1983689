// The budget rule: every sample keeps negatives beyond its labels whatever the label count,
// the labels per sample and the ranks; auto picks dense below --dense-below and concrete
// LSH settings above; explicit settings are kept; the printed slot counts match what the
// selection really does.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "../common/backend_driver.h"
#include "backend/layer_backend.h"
#include "common/parallel.h"
#include "common/rng.h"
#include "devices/backend_factory.h"
#include "lsh/budget_sampler.h"
#include "model/label_map.h"
#include "train/auto_settings.h"
#include "train/ensemble.h"

namespace dslide {
namespace {

TEST(AutoSettings, EverySampleKeepsNegativesAtAnyLabelCount) {
  // From 10 to 10^7 outputs, 1 to 8 ranks, samples with up to 500 labels, explicit budgets
  // as small as one neuron as well as auto.
  for (int64_t n : {10, 22, 100, 983, 4095, 4096, 10000, 206983, 670091, 10000000}) {
    for (int ranks : {1, 2, 3, 8}) {
      if (n < ranks) continue;
      for (double s : {0.0 /* auto */, 1e-7, 0.005, 0.1}) {
        TrainConfig cfg;
        cfg.hidden = {128};
        if (s > 0) cfg.sparsity = {s};
        cfg.dense_below = 0;  // auto budgets at every size, not only above the crossover
        ResolveAuto(&cfg, 1000, n);
        ASSERT_TRUE(cfg.lsh.resolved());
        for (int r = 0; r < ranks; ++r) {
          const ModelSpec spec = ModelSpec::Make(1000, cfg.hidden, n, cfg.LayerSparsity(2), r,
                                                 ranks, cfg.min_negatives);
          const LayerSpec& out = spec.layers.back();
          for (int64_t labels : {0, 1, 5, 20, 100, 500}) {
            const int64_t mine = std::min(labels, out.local());  // worst case: all on this rank
            const int64_t active =
                BudgetSampler::ActiveCap(out.budget, mine, out.min_negatives, out.local());
            // Either the whole shard is active, or at least the rank's share of the floor of
            // negatives is, beyond the labels.
            EXPECT_TRUE(active == out.local() || active - mine >= out.min_negatives)
                << "n " << n << " ranks " << ranks << " s " << s << " labels " << labels;
            if (!out.dense()) EXPECT_GE(out.min_negatives * ranks, cfg.min_negatives);
          }
        }
      }
    }
  }
}

TEST(AutoSettings, SelectionRaisesTheBudgetForTheFloor) {
  // Budget 4 on a shard of 1000 with 10 labels: labels + 64 negatives, none repeated.
  std::vector<int32_t> forced;
  for (int32_t i = 0; i < 10; ++i) forced.push_back(i * 7);
  BudgetSampler sampler(SelectPolicy{QueryStrategy::kVanilla, 1, FillPolicy::kRandom});
  SamplerScratch scratch(1000);
  Rng rng(3);
  std::vector<int32_t> out(BudgetSampler::ActiveCap(4, 10, 64, 1000));
  ASSERT_EQ(out.size(), 74u);
  const int64_t k =
      sampler.Select(nullptr, nullptr, forced.data(), 10, 4, 64, &rng, &scratch, out.data());
  ASSERT_EQ(k, 74);
  const std::set<int32_t> ids(out.begin(), out.begin() + k);
  EXPECT_EQ(ids.size(), 74u);
  for (int32_t f : forced) EXPECT_TRUE(ids.count(f));
  // A shard too small for the floor: everything, once.
  SamplerScratch small(30);
  std::vector<int32_t> all(BudgetSampler::ActiveCap(4, 10, 64, 30));
  ASSERT_EQ(all.size(), 30u);
  EXPECT_EQ(sampler.Select(nullptr, nullptr, forced.data(), 3, 4, 64, &rng, &small, all.data()),
            30);
}

TEST(AutoSettings, DenseBelowTheCrossoverAndConcreteAbove) {
  TrainConfig small;
  ResolveAuto(&small, 500, kAutoDenseBelow - 1);
  EXPECT_EQ(small.LayerSparsity(2), (std::vector<double>{1.0, 1.0}));
  TrainConfig wide;
  ResolveAuto(&wide, 500, 670091);
  const double s = wide.LayerSparsity(2)[1];
  EXPECT_LT(s, 1.0);
  EXPECT_EQ(ModelSpec::Budget(s, 670091), AutoBudget(670091));
  EXPECT_EQ(AutoBudget(670091), 3275);  // 4 sqrt(n) with the log-Q correction (the default)
  EXPECT_EQ(wide.lsh.lsh_share, 0.25);
  EXPECT_TRUE(wide.lsh.resolved());
  // Without it (--log-q false), the earlier rule: 2 sqrt(n), half the slots to LSH.
  TrainConfig plain;
  plain.lsh.log_q = false;
  ResolveAuto(&plain, 500, 670091);
  EXPECT_EQ(ModelSpec::Budget(plain.LayerSparsity(2)[1], 670091), 1638);
  EXPECT_EQ(plain.lsh.lsh_share, 0.5);
  // The output layer's input is the dense hidden activation: SimHash.
  EXPECT_EQ(wide.lsh.family, HashFamily::kSrp);
  // Hidden layers stay dense under auto, however wide.
  TrainConfig deep;
  deep.hidden = {4096, 2048};
  ResolveAuto(&deep, 500, 670091);
  const std::vector<double> ds = deep.LayerSparsity(3);
  EXPECT_EQ(ds[0], 1.0);
  EXPECT_EQ(ds[1], 1.0);
  EXPECT_LT(ds[2], 1.0);
  // Budgets grow with the layer and never exceed it.
  int64_t last = 0;
  for (int64_t n :
       {kAutoDenseBelow, int64_t{20000}, int64_t{200000}, int64_t{2000000}, int64_t{20000000}}) {
    const int64_t b = AutoBudget(n);
    EXPECT_GE(b, last);
    EXPECT_LE(b, n);
    EXPECT_GE(b, kMinNegatives);
    last = b;
  }
  // Exact budgets from the sparsity: ceil(s * n) gives the budget back.
  for (int64_t n : {4097, 206983, 670091, 9999991})
    for (int64_t b : {int64_t{1}, int64_t{1000}, n - 1})
      EXPECT_EQ(ModelSpec::Budget(SparsityForBudget(b, n), n), b);
}

// --lr auto: 1e-3, and 2e-3 for the network a reranker follows (TrainEnsemble marks it);
// a rate given is kept either way.
TEST(AutoSettings, TheRateOfANetworkARerankerFollows) {
  for (const bool reranked : {false, true})
    for (const double given : {0.0, 5e-4}) {
      TrainConfig c;
      c.reranked = reranked;
      c.lr = given;
      ResolveAuto(&c, 100, 5000);
      EXPECT_EQ(c.lr, given > 0 ? given : reranked ? 2e-3 : 1e-3) << reranked << " " << given;
    }
}

TEST(AutoSettings, ExplicitSettingsAreKept) {
  TrainConfig cfg;
  cfg.sparsity = {0.02};
  cfg.lsh.family = HashFamily::kDwta;
  cfg.lsh.l = 7;
  cfg.lsh.lsh_share = 0.75;
  ResolveAuto(&cfg, 500, 100000);
  EXPECT_EQ(cfg.LayerSparsity(2), (std::vector<double>{1.0, 0.02}));
  EXPECT_EQ(cfg.lsh.family, HashFamily::kDwta);
  EXPECT_EQ(cfg.lsh.l, 7);
  EXPECT_EQ(cfg.lsh.lsh_share, 0.75);
  EXPECT_GT(cfg.lsh.k, 0);
  EXPECT_NE(cfg.lsh.query, QueryStrategy::kAuto);
  // Idempotent.
  const TrainConfig again = [&] {
    TrainConfig c = cfg;
    ResolveAuto(&c, 500, 100000);
    return c;
  }();
  EXPECT_EQ(again.lsh.k, cfg.lsh.k);
  EXPECT_EQ(again.sparsity, cfg.sparsity);
}

TEST(AutoSettings, PrintedSlotsMatchTheSelection) {
  // A dataset whose samples carry 1..40 labels, a budget of 30 out of 2000 on 2 ranks:
  // OutputSlots must predict the mean active set the CPU backend selects.
  SetNumThreads(1);
  Rng rng(9);
  Dataset d;
  d.num_features = 20;
  d.num_labels = 2000;
  for (int i = 0; i < 64; ++i) {
    std::set<int32_t> lab;
    const int m = 1 + static_cast<int>(rng.Below(40));
    while (static_cast<int>(lab.size()) < m) lab.insert(static_cast<int32_t>(rng.Below(2000)));
    d.Add({static_cast<int32_t>(i % 20)}, {1.0f}, std::vector<int32_t>(lab.begin(), lab.end()));
  }
  TrainConfig cfg;
  cfg.hidden = {8};
  cfg.sparsity = {30.0 / 2000};
  cfg.min_negatives = 10;
  cfg.lsh.fill = FillPolicy::kRandom;
  ResolveAuto(&cfg, 20, 2000);
  double selected = 0;
  int64_t fewest = 1 << 30;
  std::vector<int64_t> per_sample(d.size(), 0);
  for (int r = 0; r < 2; ++r) {
    const ModelSpec spec =
        ModelSpec::Make(20, cfg.hidden, 2000, cfg.LayerSparsity(2), r, 2, cfg.min_negatives);
    auto be = MakeBackend(Device::kCpu, r);
    testing::InitBackend(*be, spec, BackendOptionsOf(cfg));
    BatchRows in;
    in.Strided(d.size(), 8);
    for (int64_t i = 0; i < d.size(); ++i) {
      for (int j = 0; j < 8; ++j) in.Vals(i)[j] = 0.1f * static_cast<float>((i + j) % 5);
      in.n[i] = 8;
    }
    in.dense = true;
    in.width = 8;
    BatchLabels labels;
    for (int64_t i = 0; i < d.size(); ++i) {
      labels.ids.insert(labels.ids.end(), d.Labels(i), d.Labels(i) + d.NumLabels(i));
      labels.off.push_back(static_cast<int64_t>(labels.ids.size()));
    }
    BatchRows out;
    testing::SelectActive(*be, 1, in, &labels, 0, &out);
    for (int64_t i = 0; i < d.size(); ++i) {
      selected += static_cast<double>(out.n[i]);
      per_sample[i] += out.n[i];
    }
    if (r == 1) {
      const LayerSlots slots = OutputSlots(spec, cfg.min_negatives, d);
      for (int64_t i = 0; i < d.size(); ++i)
        fewest = std::min(fewest, per_sample[i] - d.NumLabels(i));
      EXPECT_DOUBLE_EQ(slots.mean_active, selected / static_cast<double>(d.size()));
      EXPECT_EQ(slots.min_negatives_seen, fewest);
      EXPECT_GE(slots.min_negatives_seen, cfg.min_negatives);
      EXPECT_GT(slots.raised, 0);
    }
  }
}

TEST(AutoSettings, LabelPriorBiasesAreLogSharesBelowTheUniformShare) {
  // Six points over four labels: a point's labels share its weight, one point has none.
  Dataset d;
  d.num_features = 3;
  d.num_labels = 4;
  d.Add({0}, {1.0f}, {0});
  d.Add({1}, {1.0f}, {0});
  d.Add({2}, {1.0f}, {0, 1});
  d.Add({0}, {1.0f}, {});
  d.Add({1}, {1.0f}, {2});
  d.Add({2}, {1.0f}, {0});
  // Shares 3.5, 0.5, 1, 0; log((share + 1) / (6 + 4) x 4), and 0 where that is above 0.
  const float expected[4] = {0.0f, static_cast<float>(std::log(0.6)),
                             static_cast<float>(std::log(0.8)), static_cast<float>(std::log(0.4))};
  // One rank, labels as neurons; then two ranks with the spread order: each rank's shard
  // holds its neurons' values, whichever labels they are.
  for (int ranks : {1, 2}) {
    const LabelMap map(ranks > 1, 4);
    std::vector<float> by_neuron;
    for (int r = 0; r < ranks; ++r) {
      const ModelSpec spec = ModelSpec::Make(3, {8}, 4, {1.0, 1.0}, r, ranks, 0);
      const std::vector<float> b = LabelPriorBiases(spec.layers.back(), map, d);
      ASSERT_EQ(static_cast<int64_t>(b.size()), spec.layers.back().local());
      by_neuron.insert(by_neuron.end(), b.begin(), b.end());
    }
    ASSERT_EQ(by_neuron.size(), 4u);
    for (int label = 0; label < 4; ++label)
      EXPECT_FLOAT_EQ(by_neuron[map.Neuron(label)], expected[label]) << "label " << label;
  }
}

TEST(AutoSettings, FirstLayerRateFollowsTheInputsL1Norm) {
  // max(1, 6 / the mean L1 norm of the points with features): one-hot ids 6 (values 0.5:
  // 12), a bag of words of norm 6 or more keeps the rate; points without features and
  // negative values' signs do not count; no features at all keep it too.
  Dataset one_hot, halves, bag, mixed, none;
  for (Dataset* d : {&one_hot, &halves, &bag, &mixed, &none}) {
    d->num_features = 40;
    d->num_labels = 2;
  }
  for (int32_t i = 0; i < 30; ++i) {
    one_hot.Add({i}, {1.0f}, {0});
    halves.Add({i}, {0.5f}, {1});
    bag.Add({i, i + 1, i + 2, i + 3, i + 4, i + 5}, {1, 1, 1, 1, 1, 1}, {0});
    none.Add({}, {}, {0});
  }
  mixed.Add({1, 2}, {-1.5f, 0.5f}, {0});  // L1 norm 2
  mixed.Add({}, {}, {1});
  mixed.Add({3}, {2.0f}, {0});  // 2
  EXPECT_DOUBLE_EQ(FirstLayerLrScale(one_hot), 6.0);
  EXPECT_DOUBLE_EQ(FirstLayerLrScale(halves), 12.0);
  EXPECT_DOUBLE_EQ(FirstLayerLrScale(bag), 1.0);
  EXPECT_DOUBLE_EQ(FirstLayerLrScale(mixed), 3.0);
  EXPECT_DOUBLE_EQ(FirstLayerLrScale(none), 1.0);
}

TEST(AutoSettings, OutputBiasesAreZerosUnlessThePriorIsAsked) {
  // Sampled or dense, the default is auto (the trainer's: the prior under one-vs-rest,
  // zeros under the softmax); the auto settings keep any choice.
  for (int64_t labels : {983, 206983}) {
    for (OutputBias asked : {OutputBias::kZero, OutputBias::kPrior, OutputBias::kAuto}) {
      TrainConfig cfg;
      EXPECT_EQ(cfg.output_bias, OutputBias::kAuto);
      cfg.output_bias = asked;
      ResolveAuto(&cfg, 1000, labels);
      EXPECT_EQ(cfg.output_bias, asked) << labels;
    }
  }
}

TEST(AutoSettings, OneVsRestPriorBiasesAreTheLabelsLogOdds) {
  // Label 0 on 3 of 4 points, label 1 on 1, label 2 on none: log((c + 1) / (N - c + 1)).
  Dataset d;
  d.num_features = 2;
  d.num_labels = 3;
  d.Add({0}, {1.0f}, {0});
  d.Add({0}, {1.0f}, {0, 1});
  d.Add({1}, {1.0f}, {0});
  d.Add({1}, {1.0f}, {});
  const ModelSpec spec = ModelSpec::Make(2, {4}, 3, {1.0, 1.0}, 0, 1);
  const std::vector<float> b =
      LabelPriorBiases(spec.layers.back(), spec.labels, d, OutputLoss::kOneVsRest);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_NEAR(b[0], std::log(4.0 / 2.0), 1e-6);
  EXPECT_NEAR(b[1], std::log(2.0 / 4.0), 1e-6);
  EXPECT_NEAR(b[2], std::log(1.0 / 5.0), 1e-6);
}

TEST(AutoSettings, DropoutWhereValidationRunsManyShortEpochs) {
  // auto: kAutoDropout when validating with --epochs auto (early stopping ends the run) and
  // an epoch is at most kAutoDropoutEpochIterations batches, else none.
  const int64_t most = kAutoDropoutEpochIterations * 256;
  struct Case {
    double valid_fraction;
    bool epochs_auto;
    int64_t iterations, points;
    double want;
  };
  for (const Case& c : {Case{0.1, true, 0, 4000, kAutoDropout},
                        Case{0.1, true, 0, most, kAutoDropout}, Case{0.1, true, 0, most + 1, 0.0},
                        Case{0, true, 0, 4000, 0.0}, Case{0.1, false, 0, 4000, 0.0},
                        Case{0.1, true, 500, 4000, 0.0}, Case{0.1, true, 0, 0, 0.0}}) {
    TrainConfig cfg;
    EXPECT_EQ(cfg.dropout, -1) << "auto by default";
    EXPECT_EQ(cfg.batch, 256);
    cfg.valid_fraction = c.valid_fraction;
    cfg.epochs_auto = c.epochs_auto;
    cfg.iterations = c.iterations;
    EXPECT_EQ(AutoDropout(cfg, c.points), c.want)
        << c.valid_fraction << " " << c.epochs_auto << " " << c.iterations << " " << c.points;
  }
}

TEST(AutoSettings, EnsembleWhereValidationRunsFewShortEpochs) {
  // auto: kAutoEnsemble members when validating with --epochs auto on at most
  // kAutoEnsemblePoints training points (whatever the batch), else one; a number is kept.
  const int64_t most = kAutoEnsemblePoints;
  struct Case {
    double valid_fraction;
    bool epochs_auto;
    int64_t iterations, points;
    int ensemble, want;
  };
  for (const Case& c :
       {Case{0.1, true, 0, 4000, 0, kAutoEnsemble}, Case{0.1, true, 0, most, 0, kAutoEnsemble},
        Case{0.1, true, 0, most + 1, 0, 1}, Case{0, true, 0, 4000, 0, 1},
        Case{0.1, false, 0, 4000, 0, 1}, Case{0.1, true, 500, 4000, 0, 1},
        Case{0.1, true, 0, 0, 0, 1}, Case{0.1, true, 0, 4000, 1, 1}, Case{0, false, 0, 4000, 5, 5},
        Case{0.1, true, 0, most + 1, 2, 2}}) {
    TrainConfig cfg;
    EXPECT_EQ(cfg.ensemble, 0) << "auto by default";
    cfg.valid_fraction = c.valid_fraction;
    cfg.epochs_auto = c.epochs_auto;
    cfg.iterations = c.iterations;
    cfg.ensemble = c.ensemble;
    EXPECT_EQ(AutoEnsemble(cfg, c.points), c.want)
        << c.valid_fraction << " " << c.epochs_auto << " " << c.iterations << " " << c.points << " "
        << c.ensemble;
  }
  // debian-tags' 21,839 training points (after the tenth held back) train three; debian-deps'
  // 40,124 one.
  TrainConfig mid;
  mid.valid_fraction = 0.1;
  EXPECT_EQ(AutoEnsemble(mid, 21839), kAutoEnsemble);
  EXPECT_EQ(AutoEnsemble(mid, 40124), 1);
  // Points, whatever the batch: 40,124 points are 40 batches of 1,024 and still one model.
  TrainConfig big;
  big.valid_fraction = 0.1;
  big.batch = 1024;
  EXPECT_EQ(AutoEnsemble(big, 40124), 1);
  EXPECT_EQ(AutoEnsemble(big, most), kAutoEnsemble);
  big.batch = 16;
  EXPECT_EQ(AutoEnsemble(big, most), kAutoEnsemble);
  // The holdout `dslide train` subtracts before the rule: SplitHoldout's count.
  EXPECT_EQ(HoldoutPoints(1000, 0.1), 100);
  EXPECT_EQ(HoldoutPoints(3, 0.01), 1) << "at least one point where any is asked for";
  EXPECT_EQ(HoldoutPoints(1, 0.5), 1);
  EXPECT_EQ(HoldoutPoints(1000, 0), 0);
  Dataset all;
  all.num_features = 1;
  all.num_labels = 1;
  for (int i = 0; i < 37; ++i) all.Add({0}, {1.0f}, {0});
  Dataset kept, held;
  SplitHoldout(all, 0.1, 7, &kept, &held);
  EXPECT_EQ(held.size(), HoldoutPoints(37, 0.1));
}

TEST(Ensemble, MergeAveragesTheMembersListsAndBreaksTiesBySmallerId) {
  // Two members' top-3 lists of two points; a label missing from a member's list counts 0.
  const std::vector<std::vector<int32_t>> ids{{4, 1, 2, 7, 8, -1}, {1, 4, 3, 8, 9, 7}};
  const std::vector<std::vector<double>> probs{{0.5, 0.3, 0.1, 0.6, 0.2, 0.0},
                                               {0.6, 0.2, 0.1, 0.5, 0.3, 0.1}};
  std::vector<int32_t> top;
  std::vector<double> p;
  MergeMemberLists(ids, probs, 2, 3, 4, &top, &p);
  // Point 0: 1 -> 0.45, 4 -> 0.35, 2 and 3 -> 0.05 each (the tie to the smaller id).
  EXPECT_EQ(top, (std::vector<int32_t>{1, 4, 2, 3, 7, 8, 9, -1}));
  const std::vector<double> want{0.45, 0.35, 0.05, 0.05, 0.35, 0.35, 0.15, 0.0};
  ASSERT_EQ(p.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(p[j], want[j], 1e-12) << j;
  // Point 1: 7 -> (0.6 + 0.1) / 2 and 8 -> (0.2 + 0.5) / 2 tie at 0.35: 7 first; 9 -> 0.15.
  EXPECT_EQ(EnsembleListLength(5, 159), kEnsembleListLength);
  EXPECT_EQ(EnsembleListLength(5, 40), 40) << "every label of a model with fewer";
  EXPECT_EQ(EnsembleListLength(500, 31133), 500) << "at least k";
}

}  // namespace
}  // namespace dslide
