// A backend against the CPU backend on the same inputs: weights, table contents and active
// sets exactly; activations, input gradients, weight gradients and Adam steps within kTol
// (relative to max(1, |value|)). Any LayerBackend: the including test defines
// BackendUnderTest() and kTol, and names the suite with DSLIDE_EQUIVALENCE_SUITE before the
// include (tests/gpu: the GPU backend on the host executor and on a CUDA device, with
// their own cases in gpu/gpu_equivalence.h; tests/unit/test_cpu_equivalence.cpp: a second
// CPU backend).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "backend/layer_backend.h"
#include "common/memory_limit.h"
#include "common/parallel.h"
#include "common/rng.h"
#include "cpu/cpu_backend.h"
#include "data/synthetic.h"
#include "dist/communicator.h"
#include "model/activation.h"
#include "train/auto_settings.h"
#include "train/ensemble.h"
#include "train/snapshot_exchange.h"
#include "train/trainer.h"

#include "backend_driver.h"
#include "test_presets.h"

namespace dslide::testing {

/// Defined by the including test: a new, uninitialised backend under test, and the tolerance
/// of its values against the CPU backend's.
std::unique_ptr<LayerBackend> BackendUnderTest();
extern const double kTol;

inline double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d = std::max(d, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return d;
}

struct Pair {
  TrainConfig cfg;
  ModelSpec spec;
  std::unique_ptr<LayerBackend> cpu = std::make_unique<cpu::CpuBackend>();
  std::unique_ptr<LayerBackend> dev;
  int64_t input_dim = 60, hidden = 16, out = 400, B = 12;

  explicit Pair(const TrainConfig& c, std::vector<double> sparsity = {1.0, 0.1},
                std::unique_ptr<LayerBackend> under_test = nullptr, int64_t hidden_units = 16)
      : cfg(c), dev(under_test ? std::move(under_test) : BackendUnderTest()) {
    SetNumThreads(1);
    hidden = hidden_units;
    cfg.hidden = {hidden};
    cfg.sparsity = sparsity;
    // A floor of negatives that binds for samples with many labels (the default, 256,
    // would make these 400-neuron layers all active).
    cfg.min_negatives = 8;
    ResolveAuto(&cfg, input_dim, out);  // the settings a test leaves to auto
    spec = ModelSpec::Make(input_dim, {hidden}, out, sparsity, 0, 1, cfg.min_negatives);
    InitBackend(*cpu, spec, BackendOptionsOf(cfg));
    InitBackend(*dev, spec, BackendOptionsOf(cfg));
  }
  /// A batch of sparse inputs (sorted ids) for the first layer.
  BatchRows Inputs(uint64_t seed) const {
    return testing::SparseInputs(B, 5, 8, input_dim, input_dim, seed);
  }
  /// A dense hidden activation (the output layer's input).
  BatchRows Hidden(uint64_t seed) const {
    Rng rng(seed);
    BatchRows r;
    r.Strided(B, hidden);
    for (int64_t i = 0; i < B; ++i) {
      for (int64_t j = 0; j < hidden; ++j) {
        r.Ids(i)[j] = static_cast<int32_t>(j);
        r.Vals(i)[j] = rng.Below(3) == 0 ? 0.0f : static_cast<float>(rng.Uniform());
      }
      r.n[i] = hidden;
    }
    r.dense = true;
    r.width = hidden;
    return r;
  }
  /// The active sets of both backends for the same input, labels and iteration.
  void SelectBoth(int layer, const BatchRows& in, const BatchLabels* lab, int64_t iter,
                  BatchRows* a, BatchRows* b) {
    SelectActive(*cpu, layer, in, lab, iter, a);
    SelectActive(*dev, layer, in, lab, iter, b);
  }
  BatchLabels Labels(uint64_t seed) const {
    Rng rng(seed);
    BatchLabels l;
    for (int64_t i = 0; i < B; ++i) {
      for (int j = 0; j < 2; ++j) l.ids.push_back(static_cast<int32_t>(rng.Below(out)));
      std::sort(l.ids.end() - 2, l.ids.end());
      l.off.push_back(static_cast<int64_t>(l.ids.size()));
    }
    return l;
  }
};

inline void ExpectSameLayer(LayerBackend& a, LayerBackend& b, int layer, double tol,
                            const char* what) {
  std::vector<float> wa, ba, wb, bb;
  GetLayer(a, layer, &wa, &ba);
  GetLayer(b, layer, &wb, &bb);
  EXPECT_LE(MaxRelDiff(wb, wa), tol) << what << ": weights of layer " << layer;
  EXPECT_LE(MaxRelDiff(bb, ba), tol) << what << ": biases of layer " << layer;
}

inline void ExpectSameTables(LayerBackend& a, LayerBackend& b, int layer) {
  LayerState sa, sb;
  a.SaveLayer(layer, kCheckpoint, &sa);
  b.SaveLayer(layer, kCheckpoint, &sb);
  EXPECT_EQ(sa.table_sizes, sb.table_sizes) << "layer " << layer;
  EXPECT_EQ(sa.table_offsets, sb.table_offsets) << "layer " << layer;
  EXPECT_EQ(sa.table_ids, sb.table_ids) << "layer " << layer;
  EXPECT_EQ(sa.tables_plan.hash_version, sb.tables_plan.hash_version);
  EXPECT_EQ(sa.tables_plan.rebuild, sb.tables_plan.rebuild);
}

inline TrainConfig SmallLsh(HashFamily f, QueryStrategy q, FillPolicy fill) {
  TrainConfig c;
  c.lsh.family = f;
  c.lsh.k = 3;
  c.lsh.l = 8;
  c.lsh.bucket_capacity = 6;  // small: buckets overflow, so reservoir/FIFO decide
  c.lsh.bin_size = 4;
  c.lsh.query = q;
  c.lsh.fill = fill;
  c.seed = 5;
  return c;
}

TEST(DSLIDE_EQUIVALENCE_SUITE, InitialWeightsAndTables) {
  // Hidden width 16: the rebuild stages the output layer's rows in shared memory; 200: rows
  // wider than a block stages (64 rows of 48 KiB), read from device memory.
  for (int64_t hidden : {16, 200})
    for (HashFamily f : {HashFamily::kSrp, HashFamily::kWta, HashFamily::kDwta})
      for (InsertPolicy ins : {InsertPolicy::kReservoir, InsertPolicy::kFifo})
        for (bool mips : {false, true}) {
          TrainConfig c = SmallLsh(f, QueryStrategy::kTopK, FillPolicy::kRandom);
          c.lsh.insert = ins;
          c.lsh.mips = mips;
          Pair s(c, {0.5, 0.1}, nullptr, hidden);
          SCOPED_TRACE(std::string(ToString(f)) + " " + ToString(ins) + (mips ? " mips" : "") +
                       " hidden " + std::to_string(hidden));
          for (int l = 0; l < 2; ++l) {
            ExpectSameLayer(*s.cpu, *s.dev, l, 0.0, "init");
            ExpectSameTables(*s.cpu, *s.dev, l);
          }
          // A rebuild after the weights moved, with new hash functions.
          std::vector<float> w, b;
          GetLayer(*s.cpu, 1, &w, &b);
          for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * static_cast<float>(i % 7);
          SetLayer(*s.cpu, 1, w, b);
          SetLayer(*s.dev, 1, w, b);
          TablePlans plans(s.spec, s.cfg.seed);
          plans.Restore(1, 1, 1);
          TablePlans same = plans;
          plans.Redraw(s.cpu.get());
          same.Redraw(s.dev.get());
          ExpectSameTables(*s.cpu, *s.dev, 1);
        }
}

TEST(DSLIDE_EQUIVALENCE_SUITE, InitialOutputBiasesAsGiven) {
  // The output layer starts from the given biases on both backends, with the same tables
  // (they hash the biases too); the hidden layer keeps zeros; a count that is not the
  // shard's is refused.
  Pair s(SmallLsh(HashFamily::kSrp, QueryStrategy::kVanilla, FillPolicy::kBatch));
  BackendOptions options = BackendOptionsOf(s.cfg);
  for (int64_t i = 0; i < s.out; ++i)
    options.output_bias.push_back(-0.001f * static_cast<float>(i % 97));
  InitBackend(*s.cpu, s.spec, options);
  InitBackend(*s.dev, s.spec, options);
  std::vector<float> w, b;
  GetLayer(*s.dev, 1, &w, &b);
  EXPECT_EQ(b, options.output_bias);
  GetLayer(*s.dev, 0, &w, &b);
  EXPECT_EQ(b, std::vector<float>(b.size(), 0.0f));
  for (int l = 0; l < 2; ++l) ExpectSameLayer(*s.cpu, *s.dev, l, 0.0, "init with biases");
  ExpectSameTables(*s.cpu, *s.dev, 1);
  options.output_bias.pop_back();
  EXPECT_THROW(InitBackend(*s.dev, s.spec, options), Error);
  EXPECT_THROW(InitBackend(*s.cpu, s.spec, options), Error);
}

TEST(DSLIDE_EQUIVALENCE_SUITE, ActiveSetsAndForward) {
  for (QueryStrategy q : {QueryStrategy::kVanilla, QueryStrategy::kTopK, QueryStrategy::kThreshold})
    for (FillPolicy fill : {FillPolicy::kRandom, FillPolicy::kBatch, FillPolicy::kStop})
      for (HashFamily f : {HashFamily::kSrp, HashFamily::kDwta}) {
        SCOPED_TRACE(std::string(ToString(q)) + " " + ToString(fill) + " " + ToString(f));
        Pair s(SmallLsh(f, q, fill), {0.5, 0.1});
        const BatchRows x = s.Inputs(11), h = s.Hidden(12);
        const BatchLabels lab = s.Labels(13);
        for (int layer = 0; layer < 2; ++layer) {
          const BatchRows& in = layer == 0 ? x : h;
          const BatchLabels* l = layer == 1 ? &lab : nullptr;
          BatchRows a, b;
          s.SelectBoth(layer, in, l, 7, &a, &b);
          ASSERT_EQ(a.n, b.n) << "layer " << layer;
          for (int64_t i = 0; i < s.B; ++i)
            for (int64_t k = 0; k < a.n[i]; ++k)
              ASSERT_EQ(a.Ids(i)[k], b.Ids(i)[k])
                  << "layer " << layer << " sample " << i << " slot " << k;
          Forward(*s.cpu, layer, in, &a);
          Forward(*s.dev, layer, in, &b);
          double d = 0;
          for (int64_t i = 0; i < s.B; ++i)
            for (int64_t k = 0; k < a.n[i]; ++k)
              d = std::max(d, std::abs(double(a.Vals(i)[k]) - b.Vals(i)[k]) /
                                  std::max(1.0, std::abs(double(a.Vals(i)[k]))));
          EXPECT_LE(d, kTol) << "activations of layer " << layer;
        }
      }
}

TEST(DSLIDE_EQUIVALENCE_SUITE, FloorOfNegativesAndLshShare) {
  // A budget of 4 of 400 with 2 labels per sample: the floor (8) raises every active set to
  // 10; LSH candidates take a quarter of the slots beyond the labels (auto with the log-Q
  // correction; or all, with --fill stop).
  for (FillPolicy fill : {FillPolicy::kRandom, FillPolicy::kBatch, FillPolicy::kStop})
    for (QueryStrategy q : {QueryStrategy::kVanilla, QueryStrategy::kTopK}) {
      SCOPED_TRACE(std::string(ToString(q)) + " " + ToString(fill));
      Pair s(SmallLsh(HashFamily::kSrp, q, fill), {1.0, 0.01});
      EXPECT_EQ(s.cfg.lsh.lsh_share, fill == FillPolicy::kStop ? 1.0 : 0.25);
      const BatchRows h = s.Hidden(14);
      const BatchLabels lab = s.Labels(15);
      BatchRows a, b;
      s.SelectBoth(1, h, &lab, 7, &a, &b);
      ASSERT_EQ(a.n, b.n);
      for (int64_t i = 0; i < s.B; ++i) {
        const std::set<int32_t> own(lab.Of(i), lab.Of(i) + lab.Count(i));
        if (fill != FillPolicy::kStop)
          EXPECT_EQ(a.n[i], static_cast<int64_t>(own.size()) + 8) << "sample " << i;
        for (int64_t k = 0; k < a.n[i]; ++k) ASSERT_EQ(a.Ids(i)[k], b.Ids(i)[k]) << "sample " << i;
      }
    }
}

/// Dropout (model/dropout.h) on a hidden layer, dense and sampled: both backends drop the
/// same entries as the shared rule says and scale the rest by 1 / (1 - rate), forward and
/// backward; about `rate` of the entries drop.
TEST(DSLIDE_EQUIVALENCE_SUITE, DropoutMasksAlike) {
  for (double sparsity : {1.0, 0.5}) {
    SCOPED_TRACE("hidden sparsity " + std::to_string(sparsity));
    Pair s(SmallLsh(HashFamily::kSrp, QueryStrategy::kVanilla, FillPolicy::kRandom),
           {sparsity, 0.1}, nullptr, /*hidden_units=*/64);
    const BatchRows x = s.Inputs(81);
    BatchRows a, b;
    s.SelectBoth(0, x, nullptr, 7, &a, &b);
    ASSERT_EQ(a.n, b.n);
    Forward(*s.cpu, 0, x, &a);
    Forward(*s.dev, 0, x, &b);
    BatchRows before = a;
    DropoutStep d;
    d.rate = 0.3f;
    d.key = DropoutKey(5, 9, 123);
    s.cpu->Dropout(0, d, /*backward=*/false);
    s.dev->Dropout(0, d, /*backward=*/false);
    CopyValues(*s.cpu->HostRows(0, Rows::kOutput, Access::kRead), &a);
    CopyValues(*s.dev->HostRows(0, Rows::kOutput, Access::kRead), &b);
    int64_t dropped = 0, entries = 0;
    for (int64_t i = 0; i < s.B; ++i)
      for (int64_t k = 0; k < a.n[i]; ++k) {
        const bool keeps = d.Keeps(i, a.Ids(i)[k]);
        const float want = keeps ? before.Vals(i)[k] * d.Scale() : 0.0f;
        ASSERT_NEAR(a.Vals(i)[k], want, 1e-6 * std::max(1.0f, std::abs(want)))
            << "sample " << i << " slot " << k;
        ASSERT_NEAR(b.Vals(i)[k], want, kTol * std::max(1.0f, std::abs(want)))
            << "sample " << i << " slot " << k;
        dropped += !keeps;
        ++entries;
      }
    EXPECT_NEAR(static_cast<double>(dropped) / entries, d.rate, 0.06) << "of " << entries;
    // Backward: a delta laid out like the output, every kept entry's gradient scaled.
    BatchRows delta = a;
    for (int64_t i = 0; i < s.B; ++i)
      for (int64_t k = 0; k < a.n[i]; ++k) delta.Vals(i)[k] = 0.25f + 0.01f * static_cast<float>(k);
    BatchRows da = delta, db = delta;
    for (auto [backend, out] : {std::pair{s.cpu.get(), &da}, std::pair{s.dev.get(), &db}}) {
      Stage(*backend, 0, Rows::kOutput, a);
      Stage(*backend, 0, Rows::kDelta, delta);
      backend->Dropout(0, d, /*backward=*/true);
      CopyValues(*backend->HostRows(0, Rows::kDelta, Access::kRead), out);
    }
    for (int64_t i = 0; i < s.B; ++i)
      for (int64_t k = 0; k < a.n[i]; ++k) {
        const float want = delta.Vals(i)[k] * d.Scale();
        ASSERT_NEAR(da.Vals(i)[k], want, 1e-6f) << "sample " << i << " slot " << k;
        ASSERT_NEAR(db.Vals(i)[k], want, kTol) << "sample " << i << " slot " << k;
      }
  }
}

/// The log-Q correction (BackendOptions::label_share given): both backends select the same
/// ids as without it and write the same corrected logits (within kTol); against a backend
/// without label shares, a sample's labels keep their logits and every negative's is raised
/// by -log of its chance (never lowered; raised for most where a fill draws: without one,
/// the candidates may all be kept for certain). Under either loss: one-vs-rest's
/// sigmoid(z - log q) weighs a drawn negative's push by about 1 / q.
TEST(DSLIDE_EQUIVALENCE_SUITE, LogQCorrectedLogits) {
  for (OutputLoss loss : {OutputLoss::kSoftmax, OutputLoss::kOneVsRest})
    for (QueryStrategy q :
         {QueryStrategy::kVanilla, QueryStrategy::kTopK, QueryStrategy::kThreshold})
      for (FillPolicy fill : {FillPolicy::kRandom, FillPolicy::kBatch, FillPolicy::kStop}) {
        SCOPED_TRACE(std::string(ToString(loss)) + " " + ToString(q) + " " + ToString(fill));
        Pair s(SmallLsh(HashFamily::kSrp, q, fill), {1.0, 0.1});
        s.cfg.loss = loss;
        BackendOptions options = BackendOptionsOf(s.cfg);
        ASSERT_TRUE(options.lsh.log_q) << "on by default";
        ASSERT_EQ(options.loss, loss);
        for (int64_t j = 0; j < s.out; ++j)
          options.label_share.push_back(j % 5 == 4 ? 0.0f : 0.3f / static_cast<float>(1 + j % 50));
        InitBackend(*s.cpu, s.spec, options);
        InitBackend(*s.dev, s.spec, options);
        cpu::CpuBackend plain;
        InitBackend(plain, s.spec, BackendOptionsOf(s.cfg));
        const BatchRows h = s.Hidden(71);
        const BatchLabels lab = s.Labels(72);
        BatchRows a, b, p;
        s.SelectBoth(1, h, &lab, 7, &a, &b);
        SelectActive(plain, 1, h, &lab, 7, &p);
        ASSERT_EQ(a.n, b.n);
        ASSERT_EQ(a.n, p.n);
        for (int64_t i = 0; i < s.B; ++i)
          for (int64_t k = 0; k < a.n[i]; ++k) {
            ASSERT_EQ(a.Ids(i)[k], b.Ids(i)[k]) << "sample " << i << " slot " << k;
            ASSERT_EQ(a.Ids(i)[k], p.Ids(i)[k]) << "sample " << i << " slot " << k;
          }
        Forward(*s.cpu, 1, h, &a);
        Forward(*s.dev, 1, h, &b);
        Forward(plain, 1, h, &p);
        int64_t raised = 0, negatives = 0;
        double d = 0;
        for (int64_t i = 0; i < s.B; ++i) {
          const std::set<int32_t> own(lab.Of(i), lab.Of(i) + lab.Count(i));
          for (int64_t k = 0; k < a.n[i]; ++k) {
            const float za = a.Vals(i)[k], zp = p.Vals(i)[k];
            d = std::max(d,
                         std::abs(double(za) - b.Vals(i)[k]) / std::max(1.0, std::abs(double(za))));
            if (own.count(a.Ids(i)[k])) {
              EXPECT_EQ(za, zp) << "a label's logit, sample " << i;
              continue;
            }
            ++negatives;
            EXPECT_GE(za, zp) << "sample " << i << " slot " << k;
            raised += za > zp;
          }
        }
        EXPECT_LE(d, kTol) << "corrected logits";
        if (fill != FillPolicy::kStop)
          EXPECT_GT(raised, negatives / 2) << "of " << negatives << " negatives";
      }
}

/// A step's batch for `layer`: its input (Inputs(seed) or Hidden(seed + 1)), the CPU's
/// active set (the output layer's with Labels(seed + 2)) and uniform deltas in [-0.5, 0.5)
/// on it from Rng(seed + 3), one in `zero_one_in` of them 0 (0: none).
struct StepBatch {
  BatchRows in, act, delta;
};
inline StepBatch RandomStepBatch(Pair& s, int layer, uint64_t seed, int zero_one_in) {
  StepBatch b;
  b.in = layer == 0 ? s.Inputs(seed) : s.Hidden(seed + 1);
  const BatchLabels lab = s.Labels(seed + 2);
  SelectActive(*s.cpu, layer, b.in, layer == 1 ? &lab : nullptr, 3, &b.act);
  b.delta.LikeZero(b.act);
  b.delta.ids = b.act.ids;
  Rng rng(seed + 3);
  for (int64_t i = 0; i < b.act.samples(); ++i)
    for (int64_t k = 0; k < b.act.n[i]; ++k)
      b.delta.Vals(i)[k] = zero_one_in > 0 && rng.Below(zero_one_in) == 0
                               ? 0.0f
                               : static_cast<float>(rng.Uniform() - 0.5);
  return b;
}

/// One backward step of `layer` with random deltas on both backends. Fused: Backward with
/// Adam, then the input gradients, weights and moments compared. Else Backward alone: the
/// input gradients and pending gradients compared, then both take the same dense Adam step
/// from the CPU's gradient (ApplyGradient).
/// One backward step with Adam on both backends from the same random deltas (a quarter of
/// them zero); with untouched_every > 0 the neurons whose id it divides get no non-zero
/// delta in the batch: under lazy Adam those rows keep their weights and moments.
inline void CompareStep(Pair& s, int layer, bool fused, const char* what, int untouched_every = 0) {
  const bool dense_adam = s.cfg.dense_adam;
  SCOPED_TRACE(what);
  StepBatch batch = RandomStepBatch(s, layer, 21, 4);
  const BatchRows& in = batch.in;
  BatchRows& act = batch.act;
  BatchRows& delta = batch.delta;
  int64_t untouched = 0;
  if (untouched_every > 0)
    for (int64_t i = 0; i < act.samples(); ++i)
      for (int64_t k = 0; k < act.n[i]; ++k)
        if (act.Ids(i)[k] % untouched_every == 0) {
          delta.Vals(i)[k] = 0.0f;
          ++untouched;
        }
  std::vector<float> w0, b0;
  GetLayer(*s.cpu, layer, &w0, &b0);
  AdamStep step;
  step.lr = 1e-2f;
  step.t = 3;
  BatchRows ga, gb;
  ga.LikeZero(in);
  gb.LikeZero(in);
  const bool want_grad = layer > 0;
  if (fused) {
    Backward(*s.cpu, layer, in, delta, want_grad ? &ga : nullptr, &step);
    Backward(*s.dev, layer, in, delta, want_grad ? &gb : nullptr, &step);
  } else {
    Backward(*s.cpu, layer, in, delta, want_grad ? &ga : nullptr);
    Backward(*s.dev, layer, in, delta, want_grad ? &gb : nullptr);
    std::vector<float> gwa, gba, gwb, gbb;
    GetGradient(*s.cpu, layer, &gwa, &gba);
    GetGradient(*s.dev, layer, &gwb, &gbb);
    EXPECT_LE(MaxRelDiff(gwb, gwa), kTol) << "weight gradients";
    EXPECT_LE(MaxRelDiff(gbb, gba), kTol) << "bias gradients";
    double norm = 0;
    for (float g : gwa) norm += std::abs(g);
    EXPECT_GT(norm, 0.0) << "the step has a gradient";
    std::vector<float> flat(GradientSize(*s.cpu, layer));
    s.cpu->ExportGradient(layer, flat.data(), 1.0f);
    s.cpu->ApplyGradient(layer, flat.data(), step);
    s.dev->ApplyGradient(layer, flat.data(), step);
  }
  if (want_grad) EXPECT_LE(MaxRelDiff(gb.vals, ga.vals), kTol) << "input gradients";
  ExpectSameLayer(*s.cpu, *s.dev, layer, kTol, "after Adam");
  if (untouched_every > 0 && fused && !dense_adam) {
    ASSERT_GT(untouched, 0) << "the batch holds untouched neurons";
    std::vector<float> w1, b1;
    GetLayer(*s.cpu, layer, &w1, &b1);
    const int64_t cols = static_cast<int64_t>(w0.size() / b0.size());
    int64_t kept = 0, moved = 0;
    for (int64_t r = 0; r < static_cast<int64_t>(b0.size()); ++r) {
      const bool same =
          std::equal(w0.begin() + r * cols, w0.begin() + (r + 1) * cols, w1.begin() + r * cols) &&
          b0[r] == b1[r];
      if (r % untouched_every == 0) {
        EXPECT_TRUE(same) << "row " << r << " had no delta but stepped";
        kept += same;
      } else {
        moved += !same;
      }
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(moved, 0) << "the touched rows step";
  }
  LayerState sa, sb;
  s.cpu->SaveLayer(layer, kMoments, &sa);
  s.dev->SaveLayer(layer, kMoments, &sb);
  EXPECT_LE(MaxRelDiff(sb.m, sa.m), kTol) << "first moments";
  EXPECT_LE(MaxRelDiff(sb.v, sa.v), kTol) << "second moments";
  EXPECT_EQ(TakeNonFinite(*s.cpu, layer), TakeNonFinite(*s.dev, layer));
}

TEST(DSLIDE_EQUIVALENCE_SUITE, BackwardAndAdam) {
  for (bool fused : {false, true})
    for (bool dense_adam : {false, true}) {
      TrainConfig c = SmallLsh(HashFamily::kDwta, QueryStrategy::kTopK, FillPolicy::kBatch);
      c.dense_adam = dense_adam;
      Pair s(c, {0.5, 0.1});
      const std::string tag = std::string(fused ? "fused" : "gradient only") +
                              (dense_adam ? " dense Adam" : " lazy Adam");
      CompareStep(s, 1, fused, ("output layer, " + tag).c_str());
      CompareStep(s, 0, fused, ("first layer, " + tag).c_str());
      // Twice, so a second step meets the moments of the first.
      CompareStep(s, 1, fused, ("output layer again, " + tag).c_str());
    }
  Pair dense(TrainConfig{}, {1.0, 1.0});
  CompareStep(dense, 1, true, "dense output layer");
  // A second step, with moments to carry: rows without a delta do not step (lazy Adam),
  // on the dense layer's own path too.
  CompareStep(dense, 1, true, "dense output layer, untouched rows", 3);
  CompareStep(dense, 0, false, "dense first layer");
}

/// --first-lr-scale: the first layer's weights step at lr x scale, its bias and the layers
/// above at lr. The backend under test steps with the scale (lr 2^-7, scale 4); the CPU
/// without it, at 2^-7, and a second CPU backend at 2^-5 (powers of two: the products are
/// exact). The first layer's weights are the second CPU's and its bias the first's; the
/// output layer is the first CPU's: neither ignoring the scale nor applying it to a bias or
/// another layer gives that.
TEST(DSLIDE_EQUIVALENCE_SUITE, FirstLayerRateScale) {
  Pair s(SmallLsh(HashFamily::kDwta, QueryStrategy::kTopK, FillPolicy::kBatch), {0.5, 0.1});
  cpu::CpuBackend fast;
  InitBackend(fast, s.spec, BackendOptionsOf(s.cfg));
  for (int layer : {1, 0}) {
    SCOPED_TRACE(layer == 0 ? "first layer" : "output layer");
    StepBatch batch = RandomStepBatch(s, layer, 31, 0);
    const BatchRows& in = batch.in;
    const BatchRows& delta = batch.delta;
    AdamStep plain;
    plain.lr = 0x1p-7f;
    plain.t = 2;
    AdamStep scaled = plain, quick = plain;
    scaled.first_lr_scale = 4.0f;
    quick.lr = 0x1p-5f;
    BatchRows ga, gb;
    ga.LikeZero(in);
    gb.LikeZero(in);
    Backward(*s.cpu, layer, in, delta, layer > 0 ? &ga : nullptr, &plain);
    Backward(*s.dev, layer, in, delta, layer > 0 ? &gb : nullptr, &scaled);
    if (layer == 1) {
      ExpectSameLayer(*s.cpu, *s.dev, layer, kTol, "after Adam");
      continue;
    }
    SelectActive(fast, layer, in, nullptr, 3, &batch.act);
    Backward(fast, layer, in, delta, nullptr, &quick);
    std::vector<float> w_slow, b_slow, w_fast, b_fast, w, b;
    GetLayer(*s.cpu, 0, &w_slow, &b_slow);
    GetLayer(fast, 0, &w_fast, &b_fast);
    GetLayer(*s.dev, 0, &w, &b);
    EXPECT_GT(MaxRelDiff(w_fast, w_slow), 0.0) << "the rates move the weights apart";
    EXPECT_LE(MaxRelDiff(w, w_fast), kTol) << "weights: lr x scale";
    EXPECT_LE(MaxRelDiff(b, b_slow), kTol) << "bias: lr";
  }
}

/// --state bf16: the moments in bfloat16 on both backends, stochastically rounded from the
/// same noise (position, step, layer). The weights take the step from the unrounded
/// moments, so they agree within kTol; the stored moments within one bfloat16 unit (a
/// rounding may fall the other way where the float moments differ in their last bit).
TEST(DSLIDE_EQUIVALENCE_SUITE, Bf16MomentsBackwardAndAdam) {
  for (bool fused : {true, false})
    for (bool dense_adam : {false, true}) {
      SCOPED_TRACE(std::string(fused ? "fused" : "gradient only") +
                   (dense_adam ? ", dense Adam" : ", lazy Adam"));
      TrainConfig c = SmallLsh(HashFamily::kDwta, QueryStrategy::kTopK, FillPolicy::kBatch);
      c.state = StateType::kBf16;
      c.dense_adam = dense_adam;
      Pair s(c, {0.5, 0.1});
      for (int layer : {1, 0}) {
        const BatchRows in = layer == 0 ? s.Inputs(21) : s.Hidden(22);
        const BatchLabels lab = s.Labels(23);
        BatchRows act;
        SelectActive(*s.cpu, layer, in, layer == 1 ? &lab : nullptr, 3, &act);
        BatchRows delta = act;
        Rng rng(24);
        for (float& v : delta.vals) v = static_cast<float>(rng.Uniform() - 0.5);
        AdamStep step;
        step.lr = 1e-2f;
        step.t = 2;
        if (fused) {
          Backward(*s.cpu, layer, in, delta, nullptr, &step);
          Backward(*s.dev, layer, in, delta, nullptr, &step);
        } else {
          Backward(*s.cpu, layer, in, delta, nullptr);
          Backward(*s.dev, layer, in, delta, nullptr);
          std::vector<float> flat(GradientSize(*s.cpu, layer));
          s.cpu->ExportGradient(layer, flat.data(), 1.0f);
          s.cpu->ApplyGradient(layer, flat.data(), step);
          s.dev->ApplyGradient(layer, flat.data(), step);
        }
        ExpectSameLayer(*s.cpu, *s.dev, layer, kTol, "after Adam");
        LayerState sa, sb;
        s.cpu->SaveLayer(layer, kMoments, &sa);
        s.dev->SaveLayer(layer, kMoments, &sb);
        ASSERT_EQ(sa.m.size(), sb.m.size());
        double nonzero = 0;
        for (size_t i = 0; i < sa.m.size(); ++i) {
          ASSERT_LE(std::abs(sa.m[i] - sb.m[i]), std::abs(sa.m[i]) / 128) << "m " << i;
          ASSERT_LE(std::abs(sa.v[i] - sb.v[i]), std::abs(sa.v[i]) / 128) << "v " << i;
          ASSERT_EQ(Bf16ToFloat(FloatToBf16Nearest(sa.m[i])), sa.m[i]) << "a bfloat16 value";
          nonzero += sa.v[i] != 0.0f;
        }
        EXPECT_GT(nonzero, 0) << "layer " << layer;
      }
    }
}

/// Softmax of the output layer after Forward on both backends: fused (Softmax) and in the
/// two calls around the ranks' reduction (SoftmaxPartials, then SoftmaxDelta over a stand-in
/// for another rank's sums); then a Backward with the delta the softmax wrote, and one with
/// a different delta.
TEST(DSLIDE_EQUIVALENCE_SUITE, SoftmaxLossAndDelta) {
  Pair s(SmallLsh(HashFamily::kDwta, QueryStrategy::kTopK, FillPolicy::kBatch), {1.0, 0.1});
  const BatchRows h = s.Hidden(61);
  BatchLabels lab = s.Labels(62);
  // A sample without labels has no loss and a zero delta.
  lab.ids.erase(lab.ids.begin() + lab.off[3], lab.ids.begin() + lab.off[4]);
  for (size_t i = 4; i < lab.off.size(); ++i) lab.off[i] -= 2;
  BatchRows za, zb;
  s.SelectBoth(1, h, &lab, 5, &za, &zb);
  ASSERT_EQ(za.ids, zb.ids);
  Forward(*s.cpu, 1, h, &za);
  Forward(*s.dev, 1, h, &zb);
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "two calls");
    BatchRows da, db;
    if (fused) {
      const double la = Softmax(*s.cpu, 1, za, lab, &da);
      const double lb = Softmax(*s.dev, 1, zb, lab, &db);
      EXPECT_GT(la, 0.0);
      EXPECT_NEAR(lb, la, kTol * la) << "loss";
    } else {
      SoftmaxStats sa, sb;
      SoftmaxPartials(*s.cpu, 1, za, lab, &sa);
      SoftmaxPartials(*s.dev, 1, zb, lab, &sb);
      EXPECT_LE(MaxRelDiff(sb.mx, sa.mx), kTol) << "row maxima";
      EXPECT_LE(MaxRelDiff(sb.red, sa.red), kTol) << "sums and label terms";
      EXPECT_NEAR(SoftmaxMeanLoss(sb, lab), SoftmaxMeanLoss(sa, lab), kTol);
      for (int64_t i = 0; i < s.B; ++i) sa.red[i] = sb.red[i] = sa.red[i] * 1.75f;
      SoftmaxDelta(*s.cpu, 1, za, sa, &da);
      SoftmaxDelta(*s.dev, 1, zb, sb, &db);
    }
    ASSERT_EQ(db.ids, da.ids);
    ASSERT_EQ(db.n, da.n);
    EXPECT_LE(MaxRelDiff(db.vals, da.vals), kTol) << "deltas";
    double norm = 0;
    for (int64_t k = 0; k < da.n[3]; ++k) EXPECT_EQ(db.Vals(3)[k], 0.0f) << "unlabelled sample";
    for (float v : da.vals) norm += std::abs(v);
    EXPECT_GT(norm, 0.0);
    // The delta Softmax wrote feeds Backward (the GPU backend uses its device copy).
    BatchRows ga, gb;
    ga.LikeZero(h);
    gb.LikeZero(h);
    Backward(*s.cpu, 1, h, da, &ga);
    Backward(*s.dev, 1, h, db, &gb);
    EXPECT_LE(MaxRelDiff(gb.vals, ga.vals), kTol) << "input gradients from the softmax delta";
    std::vector<float> gwa, gba, gwb, gbb;
    GetGradient(*s.cpu, 1, &gwa, &gba);
    GetGradient(*s.dev, 1, &gwb, &gbb);
    EXPECT_LE(MaxRelDiff(gwb, gwa), kTol) << "weight gradients from the softmax delta";
    AdamStep step;
    step.lr = 1e-3f;
    std::vector<float> flat(GradientSize(*s.cpu, 1));
    s.cpu->ExportGradient(1, flat.data(), 1.0f);
    s.cpu->ApplyGradient(1, flat.data(), step);
    s.dev->ApplyGradient(1, flat.data(), step);
  }
  // A batch without any labels: no loss, zero deltas.
  {
    BatchLabels none;
    none.off.assign(s.B + 1, 0);
    BatchRows da, db;
    Forward(*s.cpu, 1, h, &za);
    Forward(*s.dev, 1, h, &zb);
    EXPECT_EQ(Softmax(*s.cpu, 1, za, none, &da), 0.0);
    EXPECT_EQ(Softmax(*s.dev, 1, zb, none, &db), 0.0);
    for (float v : da.vals) ASSERT_EQ(v, 0.0f);
    for (float v : db.vals) ASSERT_EQ(v, 0.0f);
  }
  // After a Softmax, a Backward given other rows than the ones it wrote uses those rows.
  BatchRows da, db;
  Forward(*s.cpu, 1, h, &za);
  Forward(*s.dev, 1, h, &zb);
  Softmax(*s.cpu, 1, za, lab, &da);
  Softmax(*s.dev, 1, zb, lab, &db);
  BatchRows other = da;
  for (float& v : other.vals) v = -2.0f * v + 0.01f;
  BatchRows ga, gb;
  ga.LikeZero(h);
  gb.LikeZero(h);
  AdamStep step;
  Backward(*s.cpu, 1, h, other, &ga, &step);
  Backward(*s.dev, 1, h, other, &gb, &step);
  EXPECT_LE(MaxRelDiff(gb.vals, ga.vals), kTol) << "input gradients from a given delta";
  ExpectSameLayer(*s.cpu, *s.dev, 1, kTol, "after the updates");
}

/// The one-vs-rest loss on both backends, fused and in two calls: each active neuron's
/// delta is (sigmoid(z) - [labelled]) / B, the sums are softplus(z) and the labels' z (max
/// 0), against the formula on the logits; and the exact top-k's statistics over every
/// neuron (the evaluation's loss, predict's probabilities).
TEST(DSLIDE_EQUIVALENCE_SUITE, OneVsRestLossAndDelta) {
  TrainConfig cfg = SmallLsh(HashFamily::kDwta, QueryStrategy::kTopK, FillPolicy::kBatch);
  cfg.loss = OutputLoss::kOneVsRest;
  Pair s(cfg, {1.0, 0.1});
  const BatchRows h = s.Hidden(71);
  BatchLabels lab = s.Labels(72);
  BatchRows za, zb;
  s.SelectBoth(1, h, &lab, 5, &za, &zb);
  ASSERT_EQ(za.ids, zb.ids);
  Forward(*s.cpu, 1, h, &za);
  Forward(*s.dev, 1, h, &zb);
  double want_loss = 0;
  for (int64_t i = 0; i < s.B; ++i)
    for (int64_t j = 0; j < za.n[i]; ++j) {
      const double z = za.Vals(i)[j];
      const bool y = std::binary_search(lab.ids.begin() + lab.off[i],
                                        lab.ids.begin() + lab.off[i + 1], za.Ids(i)[j]);
      want_loss += (Softplus(z) - (y ? z : 0.0)) / static_cast<double>(s.B);
    }
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "two calls");
    BatchRows da, db;
    if (fused) {
      const double la = Softmax(*s.cpu, 1, za, lab, &da);
      const double lb = Softmax(*s.dev, 1, zb, lab, &db);
      EXPECT_NEAR(la, want_loss, 1e-5 * want_loss) << "loss against the formula";
      EXPECT_NEAR(lb, la, kTol * la) << "loss";
    } else {
      SoftmaxStats sa, sb;
      SoftmaxPartials(*s.cpu, 1, za, lab, &sa);
      SoftmaxPartials(*s.dev, 1, zb, lab, &sb);
      for (int64_t i = 0; i < s.B; ++i) EXPECT_EQ(sa.mx[i], 0.0f) << "one-vs-rest: max 0";
      EXPECT_EQ(sb.mx, sa.mx);
      EXPECT_LE(MaxRelDiff(sb.red, sa.red), kTol) << "softplus sums and label terms";
      EXPECT_NEAR(SoftmaxMeanLoss(sa, lab, OutputLoss::kOneVsRest), want_loss, 1e-5 * want_loss);
      // The delta needs no other rank's sums: a stand-in changes nothing.
      for (int64_t i = 0; i < s.B; ++i) sa.red[i] = sb.red[i] = sa.red[i] * 1.75f;
      SoftmaxDelta(*s.cpu, 1, za, sa, &da);
      SoftmaxDelta(*s.dev, 1, zb, sb, &db);
    }
    ASSERT_EQ(db.ids, da.ids);
    EXPECT_LE(MaxRelDiff(db.vals, da.vals), kTol) << "deltas";
    for (int64_t i = 0; i < s.B; ++i)
      for (int64_t j = 0; j < za.n[i]; ++j) {
        const double z = za.Vals(i)[j];
        const bool y = std::binary_search(lab.ids.begin() + lab.off[i],
                                          lab.ids.begin() + lab.off[i + 1], za.Ids(i)[j]);
        EXPECT_NEAR(da.Vals(i)[j], (Sigmoid(z) - (y ? 1.0 : 0.0)) / static_cast<double>(s.B), 1e-6)
            << "sample " << i << " slot " << j;
      }
  }
  std::vector<float> w, b;
  GetLayer(*s.cpu, 1, &w, &b);
  std::vector<int32_t> ia, ib;
  std::vector<float> sa, sb;
  SoftmaxStats ca, cb;
  TopK(*s.cpu, 1, h, 5, &ia, &sa, &lab, &ca);
  TopK(*s.dev, 1, h, 5, &ib, &sb, &lab, &cb);
  EXPECT_EQ(ia, ib);
  for (int64_t i = 0; i < s.B; ++i) {
    double sum = 0;
    for (int64_t r = 0; r < s.out; ++r) {
      double d = b[r];
      for (int64_t j = 0; j < s.hidden; ++j) d += double(w[r * s.hidden + j]) * h.Row(i).vals[j];
      sum += Softplus(d);
    }
    EXPECT_EQ(ca.mx[i], 0.0f) << "sample " << i;
    EXPECT_EQ(cb.mx[i], 0.0f) << "sample " << i;
    EXPECT_NEAR(ca.red[i], sum, 2e-5 * sum) << "sample " << i;
    EXPECT_NEAR(cb.red[i], sum, 2e-5 * sum) << "sample " << i;
  }
}

TEST(DSLIDE_EQUIVALENCE_SUITE, ExactTopK) {
  Pair s(TrainConfig{}, {1.0, 0.1});
  std::vector<float> w, b;
  GetLayer(*s.cpu, 1, &w, &b);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.05f * static_cast<float>(i % 11);
  SetLayer(*s.cpu, 1, w, b);
  SetLayer(*s.dev, 1, w, b);
  const BatchRows h = s.Hidden(31);
  std::vector<int32_t> ia, ib;
  std::vector<float> sa, sb;
  TopK(*s.cpu, 1, h, 5, &ia, &sa);
  TopK(*s.dev, 1, h, 5, &ib, &sb);
  EXPECT_EQ(ia, ib);
  EXPECT_LE(MaxRelDiff(sb, sa), kTol);
  // The lists an ensemble's members are merged from (kEnsembleListLength) and predict's longer
  // --top-k: every backend takes them.
  TopK(*s.cpu, 1, h, kEnsembleListLength, &ia, &sa);
  TopK(*s.dev, 1, h, kEnsembleListLength, &ib, &sb);
  ASSERT_EQ(ia.size(), static_cast<size_t>(s.B * kEnsembleListLength));
  EXPECT_EQ(ia, ib);
  EXPECT_LE(MaxRelDiff(sb, sa), kTol);
  // The full-softmax statistics (evaluation loss, predict's probabilities): the largest
  // logit, the sum of exp(z - max) and the label logits over the shard, against the
  // logits computed one by one on the CPU.
  BatchLabels labels;
  for (int64_t i = 0; i < s.B; ++i) {
    for (int32_t l = static_cast<int32_t>(i % 3); l < s.out; l += 97) labels.ids.push_back(l);
    labels.off.push_back(static_cast<int64_t>(labels.ids.size()));
  }
  SoftmaxStats ca, cb;
  TopK(*s.cpu, 1, h, 5, &ia, &sa, &labels, &ca);
  TopK(*s.dev, 1, h, 5, &ib, &sb, &labels, &cb);
  EXPECT_EQ(ia, ib);
  for (int64_t i = 0; i < s.B; ++i) {
    std::vector<float> z(s.out);
    float mx = -HUGE_VALF;
    for (int64_t r = 0; r < s.out; ++r) {
      double d = b[r];
      for (int64_t j = 0; j < s.hidden; ++j) d += double(w[r * s.hidden + j]) * h.Row(i).vals[j];
      z[r] = static_cast<float>(d);
      mx = std::max(mx, z[r]);
    }
    double sum = 0, lab = 0;
    for (int64_t r = 0; r < s.out; ++r) sum += std::exp(double(z[r]) - mx);
    for (int64_t j = labels.off[i]; j < labels.off[i + 1]; ++j) lab += z[labels.ids[j]];
    EXPECT_NEAR(ca.mx[i], mx, 1e-5) << "sample " << i;
    EXPECT_NEAR(cb.mx[i], mx, 1e-5) << "sample " << i;
    EXPECT_NEAR(ca.red[i], sum, 2e-5 * sum) << "sample " << i;
    EXPECT_NEAR(cb.red[i], sum, 2e-5 * sum) << "sample " << i;
    EXPECT_NEAR(ca.red[s.B + i], lab, 1e-4 * std::max(1.0, std::abs(lab))) << "sample " << i;
    EXPECT_NEAR(cb.red[s.B + i], lab, 1e-4 * std::max(1.0, std::abs(lab))) << "sample " << i;
  }
}

TEST(DSLIDE_EQUIVALENCE_SUITE, DataParallelGradientExchange) {
  Pair s(TrainConfig{}, {1.0, 1.0});
  for (int layer = 1; layer >= 0; --layer) {
    const BatchRows in = layer == 0 ? s.Inputs(41) : s.Hidden(42);
    BatchRows act;
    SelectActive(*s.cpu, layer, in, nullptr, 1, &act);
    BatchRows delta;
    delta.LikeZero(act);
    delta.ids = act.ids;
    Rng rng(43);
    for (float& v : delta.vals) v = static_cast<float>(rng.Uniform() - 0.5);
    Backward(*s.cpu, layer, in, delta, nullptr);
    Backward(*s.dev, layer, in, delta, nullptr);
    std::vector<float> ga(GradientSize(*s.cpu, layer)), gb(GradientSize(*s.dev, layer));
    s.cpu->ExportGradient(layer, ga.data(), 1.0f);
    s.dev->ExportGradient(layer, gb.data(), 1.0f);
    EXPECT_LE(MaxRelDiff(gb, ga), kTol) << "exported gradient of layer " << layer;
    // Scaled on export (a replica's share of the batch).
    std::vector<float> half(gb.size());
    s.dev->ExportGradient(layer, half.data(), 0.5f);
    for (size_t j = 0; j < gb.size(); ++j) ASSERT_EQ(half[j], 0.5f * gb[j]) << j;
    AdamStep step;
    step.lr = 1e-2f;
    s.cpu->ApplyGradient(layer, ga.data(), step);
    s.dev->ApplyGradient(layer, ga.data(), step);
    ExpectSameLayer(*s.cpu, *s.dev, layer, kTol, "after ApplyGradient");
  }
}

TEST(DSLIDE_EQUIVALENCE_SUITE, CheckpointsCrossBackends) {
  // A CPU shard loaded into the GPU backend selects and computes as the CPU does.
  Pair s(SmallLsh(HashFamily::kDwta, QueryStrategy::kVanilla, FillPolicy::kBatch), {1.0, 0.1});
  CompareStep(s, 1, true, "a step before saving");
  for (int l = 0; l < 2; ++l) {
    LayerState st;
    s.cpu->SaveLayer(l, kCheckpoint, &st);
    s.dev->LoadLayer(l, kCheckpoint, st);
    ExpectSameTables(*s.cpu, *s.dev, l);
  }
  ExpectSameLayer(*s.cpu, *s.dev, 1, 0.0, "loaded");
  const BatchRows h = s.Hidden(51);
  const BatchLabels lab = s.Labels(52);
  BatchRows a, b;
  s.SelectBoth(1, h, &lab, 9, &a, &b);
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.ids, b.ids);
}

TEST(DSLIDE_EQUIVALENCE_SUITE, TrainerLossesMatch) {
  // Whole steps through the trainer: sparse output layer, batch fill, lazy Adam; under
  // either loss.
  for (OutputLoss loss : {OutputLoss::kSoftmax, OutputLoss::kOneVsRest}) {
    SCOPED_TRACE(ToString(loss));
    SetNumThreads(1);
    const Dataset data = GenerateSynthetic(SyntheticShape(200, 300, 10, 2, 600), 0, 600);
    TrainConfig cfg = SmallLsh(HashFamily::kDwta, QueryStrategy::kVanilla, FillPolicy::kBatch);
    cfg.hidden = {32};
    cfg.sparsity = {0.2};
    cfg.batch = 32;
    cfg.lr = 1e-3;
    cfg.lsh.rebuild_n0 = 10;
    cfg.loss = loss;
    LocalCommunicator c1, c2;
    Trainer a(cfg, &c1, std::make_unique<cpu::CpuBackend>(), data.num_features, data.num_labels);
    Trainer b(cfg, &c2, BackendUnderTest(), data.num_features, data.num_labels);
    ASSERT_NO_FATAL_FAILURE(StepInLockstep(b, a, data, 25, cfg.batch, 1e-4));
    ExpectSameLayer(a.backend(), b.backend(), 1, 1e-4, "after 25 steps");
  }
}

/// Rows compared sample by sample (the backends may lay a batch out differently): the same
/// counts and ids (where both carry ids: a gradient may not), values within tol.
inline void ExpectSameRows(const BatchRows& a, const BatchRows& b, double tol, const char* what) {
  ASSERT_EQ(a.samples(), b.samples()) << what;
  const bool ids = !a.ids.empty() && !b.ids.empty();
  std::vector<float> va, vb;
  for (int64_t i = 0; i < a.samples(); ++i) {
    ASSERT_EQ(a.n[i], b.n[i]) << what << ": sample " << i;
    const SparseView ra = a.Row(i), rb = b.Row(i);
    if (ids)
      EXPECT_TRUE(std::equal(ra.ids, ra.ids + ra.n, rb.ids)) << what << ": ids of sample " << i;
    va.insert(va.end(), ra.vals, ra.vals + ra.n);
    vb.insert(vb.end(), rb.vals, rb.vals + rb.n);
  }
  EXPECT_LE(MaxRelDiff(vb, va), tol) << what;
}

/// The batch buffers (BatchOps) of both backends along a step's two paths: the one-rank
/// chain inside the backend, and the host views and staged rows that the snapshot exchange
/// moves with P ranks (here over one rank, where both paths must give the same rows).
TEST(DSLIDE_EQUIVALENCE_SUITE, BatchBuffersChainedAndExchanged) {
  Pair s(SmallLsh(HashFamily::kDwta, QueryStrategy::kTopK, FillPolicy::kBatch), {0.5, 0.1});
  const BatchRows x = s.Inputs(81);
  const BatchLabels lab = s.Labels(82);
  LocalCommunicator comm;
  SnapshotExchange exchange(&comm);
  AdamStep step;
  step.lr = 1e-2f;
  const char* names[4] = {"layer 0 output", "layer 1 input", "layer 1 input gradient",
                          "layer 0 delta"};
  BatchRows first[4];  // the CPU's rows of the chained pass
  for (const bool chained : {true, false}) {
    SCOPED_TRACE(chained ? "chained" : "exchanged");
    BatchRows got[2][4];
    double loss[2] = {0, 0};
    LayerBackend* backends[2] = {s.cpu.get(), s.dev.get()};
    for (int k = 0; k < 2; ++k) {
      LayerBackend& b = *backends[k];
      *b.HostRows(0, Rows::kInput, Access::kWrite) = x;
      b.CommitRows(0, Rows::kInput);
      b.SetLabels(&lab);
      b.Select(0, false, 4);
      b.Forward(0);
      got[k][0] = *b.HostRows(0, Rows::kOutput, Access::kRead);
      std::vector<int64_t> seg;
      if (chained) {
        b.Chain(0, 0 + 1);
      } else {
        exchange.Gather(s.spec.layers[0], *b.HostRows(0, Rows::kOutput, Access::kRead),
                        b.HostRows(1, Rows::kInput, Access::kWrite), &seg);
        b.CommitRows(1, Rows::kInput);
      }
      got[k][1] = *b.HostRows(1, Rows::kInput, Access::kRead);
      b.Select(1, true, 4);
      b.Forward(1);
      if (chained) {
        b.Softmax(1);
      } else {
        SoftmaxStats st;  // the trainer's calls with P ranks (one rank: nothing to rescale)
        b.SoftmaxPartials(1, &st);
        b.SoftmaxDelta(1, st);
      }
      b.BackwardStep(1, step);
      got[k][2] = *b.HostRows(1, Rows::kInputGrad, Access::kRead);
      if (chained) {
        b.Chain(1, 1 - 1);
        b.QueueStatus(1);
        const std::vector<StepStatus> q = b.TakeQueued();
        ASSERT_EQ(q.size(), 1u);
        EXPECT_EQ(q[0].bad_layers, 0u);
        loss[k] = q[0].loss;
      } else {
        const BatchRows& act = *b.HostRows(0, Rows::kOutput, Access::kRead);
        BatchRows* delta = b.HostRows(0, Rows::kDelta, Access::kWrite);
        exchange.ScatterGrad(*b.HostRows(1, Rows::kInputGrad, Access::kRead), seg, act, delta);
        ReluBackward(act, delta);
        b.CommitRows(0, Rows::kDelta);
      }
      got[k][3] = *b.HostRows(0, Rows::kDelta, Access::kRead);
      b.BackwardStep(0, step);
    }
    for (int r = 0; r < 4; ++r) ExpectSameRows(got[0][r], got[1][r], kTol, names[r]);
    if (chained) {
      EXPECT_GT(loss[0], 0.0);
      EXPECT_NEAR(loss[1], loss[0], kTol * std::max(1.0, loss[0])) << "loss";
      for (int r = 0; r < 4; ++r) first[r] = got[0][r];
    } else {
      // The same batch again on the model after one update: the active sets are drawn
      // alike, and the chain and the exchange lay out the same rows.
      for (int r = 0; r < 2; ++r)
        for (int64_t i = 0; i < first[r].samples(); ++i)
          EXPECT_EQ(first[r].n[i], got[0][r].n[i]) << names[r] << ", sample " << i;
    }
    ExpectSameLayer(*s.cpu, *s.dev, 0, kTol, "after the step");
    ExpectSameLayer(*s.cpu, *s.dev, 1, kTol, "after the step");
  }
}

}  // namespace dslide::testing
