// The GPU backend's own cases beside the equivalence suite (common/backend_equivalence.h):
// its device memory check, launch shapes under other GpuTuning, what a step moves between
// host and device, and the data-parallel exchange in device memory. Included after the suite
// by test_gpu_emulated.cpp and test_gpu.cpp, which define GpuBackendUnderTest.
#pragma once

#include "gpu/gpu_tuning.h"

#include "../common/backend_equivalence.h"

namespace dslide::testing {

/// Defined by the including test: a new GPU backend with the given tuning.
std::unique_ptr<LayerBackend> GpuBackendUnderTest(const gpu::GpuTuning& tune);

TEST(GpuEquivalence, InitRefusesAModelTheDeviceCannotHold) {
  // 1,000 x 2,000 first-layer and 2,000 x 10 output weights with fp32 moments, and the first
  // layer's gradient rows: at least 30 MB. A device with 16 MB free refuses them before
  // allocating, naming both sizes; with 64 MB free it takes them.
  const ModelSpec spec = ModelSpec::Make(1000, {2000}, 10, {1.0, 1.0}, 0, 1);
  gpu::GpuTuning tune;
  tune.device_free_bytes = int64_t{16} << 20;
  std::unique_ptr<LayerBackend> dev = GpuBackendUnderTest(tune);
  try {
    InitBackend(*dev, spec, BackendOptions{});
    ADD_FAILURE() << "Init took a model larger than the device's free memory";
  } catch (const OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("need at least 30 MB"), std::string::npos) << what;
    EXPECT_NE(what.find("the GPU has 16 MB free"), std::string::npos) << what;
  }
  tune.device_free_bytes = int64_t{64} << 20;
  dev = GpuBackendUnderTest(tune);
  EXPECT_NO_THROW(InitBackend(*dev, spec, BackendOptions{}));
}

/// Scoring alone (eval, predict) holds the weights without Adam's moments or the first
/// layer's gradient rows: the model that needs 30 MB to train fits in 16 MB, and holds
/// exactly those bytes fewer. Loaded with the CPU backend's tables and weights (changed from
/// their initial draw, so that a load that did nothing would differ), it selects and scores
/// as the CPU backend does.
TEST(GpuEquivalence, ScoringOnlyHoldsTheWeightsAlone) {
  const ModelSpec big = ModelSpec::Make(1000, {2000}, 10, {1.0, 1.0}, 0, 1);
  BackendOptions scoring;
  scoring.scoring_only = true;
  gpu::GpuTuning small;
  small.device_free_bytes = int64_t{16} << 20;
  std::unique_ptr<LayerBackend> fits = GpuBackendUnderTest(small);
  EXPECT_NO_THROW(InitBackend(*fits, big, scoring));
  std::unique_ptr<LayerBackend> trains = GpuBackendUnderTest({});
  InitBackend(*trains, big, BackendOptions{});
  // Both moments of every parameter (4 bytes each), the first layer's gradient (4 bytes a
  // parameter) and its touched flags (a byte a row and a bias).
  const int64_t params = 1000 * 2000 + 2000 + 2000 * 10 + 10, first = 1000 * 2000 + 2000;
  EXPECT_EQ(static_cast<int64_t>(trains->Info().state_bytes - fits->Info().state_bytes),
            params * 8 + first * 4 + 1000 + 2000);

  Pair s(SmallLsh(HashFamily::kSrp, QueryStrategy::kTopK, FillPolicy::kBatch), {0.5, 0.1});
  BackendOptions o = BackendOptionsOf(s.cfg);
  o.scoring_only = true;
  std::unique_ptr<LayerBackend> sc = GpuBackendUnderTest({});
  sc->Init(s.spec, o);
  for (int layer = 0; layer < 2; ++layer) {
    LayerState st;
    s.cpu->SaveLayer(layer, kWeights | kTables, &st);
    for (float& w : st.w) w = -1.25f * w + 0.01f;
    for (float& b : st.b) b += 0.1f;
    s.cpu->LoadLayer(layer, kWeights, st);
    sc->LoadLayer(layer, kWeights | kTables, st);
    ExpectSameLayer(*s.cpu, *sc, layer, 0.0, "loaded");
  }
  const BatchRows x = s.Inputs(81), h = s.Hidden(82);
  const BatchLabels lab = s.Labels(83);
  for (int layer = 0; layer < 2; ++layer) {
    const BatchRows& in = layer == 0 ? x : h;
    BatchRows a, b;
    SelectActive(*s.cpu, layer, in, layer == 1 ? &lab : nullptr, 5, &a);
    SelectActive(*sc, layer, in, layer == 1 ? &lab : nullptr, 5, &b);
    ASSERT_EQ(a.ids, b.ids) << "active sets of layer " << layer;
    Forward(*s.cpu, layer, in, &a);
    Forward(*sc, layer, in, &b);
    EXPECT_LE(MaxRelDiff(b.vals, a.vals), kTol) << "activations of layer " << layer;
  }
}

/// Output rows wider than a warp and not a multiple of its 32 lanes (the forward pass takes
/// a warp per active neuron, each lane every 32nd input): 70 hidden units, each row read in
/// three lane strides, the last one partial; in shared and in global memory.
TEST(GpuEquivalence, ForwardRowsWiderThanAWarp) {
  for (int64_t shared : {int64_t{12 * 1024}, int64_t{8}}) {
    SCOPED_TRACE("shared floats " + std::to_string(shared));
    gpu::GpuTuning tune;
    tune.shared_floats = shared;
    Pair s(SmallLsh(HashFamily::kSrp, QueryStrategy::kTopK, FillPolicy::kBatch), {1.0, 0.1},
           GpuBackendUnderTest(tune), 70);
    const BatchRows h = s.Hidden(31);
    const BatchLabels lab = s.Labels(32);
    BatchRows a, b;
    s.SelectBoth(1, h, &lab, 3, &a, &b);
    ASSERT_EQ(a.n, b.n);
    ASSERT_EQ(a.ids, b.ids);
    Forward(*s.cpu, 1, h, &a);
    Forward(*s.dev, 1, h, &b);
    EXPECT_LE(MaxRelDiff(b.vals, a.vals), kTol) << "activations";
    double norm = 0;
    for (float v : a.vals) norm += std::abs(v);
    EXPECT_GT(norm, 0.0) << "activations all zero: nothing compared";
  }
}

/// Forward on a batch of 100 under launch shapes that reach every path: dense rows that do
/// not fit (or just fit) shared memory, sparse inputs partly in shared memory; then softmax
/// and backward.
TEST(GpuEquivalence, ForwardSharedMemoryLimits) {
  std::vector<gpu::GpuTuning> tunings(4);
  tunings[1].shared_floats = 8;   // the hidden row (16) goes to global memory
  tunings[1].shared_entries = 3;  // 3 of 5 input entries in shared memory
  tunings[2].shared_floats = 16;  // just fits
  tunings[2].shared_entries = 5;
  tunings[3].shared_entries = 0;  // all from global memory
  // Beyond the 48 KiB of shared memory a block gets: refused when the backend is made.
  gpu::GpuTuning too_wide, too_many;
  too_wide.shared_floats = 12 * 1024 + 1;
  too_many.shared_entries = 6 * 1024 + 1;
  EXPECT_THROW(GpuBackendUnderTest(too_wide), Error);
  EXPECT_THROW(GpuBackendUnderTest(too_many), Error);
  for (size_t t = 0; t < tunings.size(); ++t) {
    SCOPED_TRACE("tuning " + std::to_string(t));
    Pair s(SmallLsh(HashFamily::kDwta, QueryStrategy::kTopK, FillPolicy::kBatch), {0.5, 0.1},
           GpuBackendUnderTest(tunings[t]));
    s.B = 100;
    const BatchRows x = s.Inputs(71), h = s.Hidden(72);
    const BatchLabels lab = s.Labels(73);
    for (int layer = 0; layer < 2; ++layer) {
      const BatchRows& in = layer == 0 ? x : h;
      BatchRows a, b;
      s.SelectBoth(layer, in, layer == 1 ? &lab : nullptr, 2, &a, &b);
      ASSERT_EQ(a.ids, b.ids);
      Forward(*s.cpu, layer, in, &a);
      Forward(*s.dev, layer, in, &b);
      ASSERT_EQ(a.vals.size(), b.vals.size());
      EXPECT_LE(MaxRelDiff(b.vals, a.vals), kTol) << "activations of layer " << layer;
      if (layer == 0) continue;
      BatchRows da, db, ga, gb;
      Softmax(*s.cpu, 1, a, lab, &da);
      Softmax(*s.dev, 1, b, lab, &db);
      EXPECT_LE(MaxRelDiff(db.vals, da.vals), kTol) << "deltas";
      ga.LikeZero(h);
      gb.LikeZero(h);
      AdamStep step;
      Backward(*s.cpu, 1, h, da, &ga, &step);
      Backward(*s.dev, 1, h, db, &gb, &step);
      EXPECT_LE(MaxRelDiff(gb.vals, ga.vals), kTol) << "input gradients";
      ExpectSameLayer(*s.cpu, *s.dev, 1, kTol, "after the step");
    }
  }
}

/// What one-rank training steps move between host and device, as the GPU backend counts it
/// (DeviceTraffic): per step, up, the data rows and the labels, and nothing down; the queued
/// losses and non-finite flags come down when read (TakeSteps), in one host wait. With
/// either fill (the batch fill is drawn on the device). The first pass over the batches
/// grows the step's buffers (each growth waits for the device, as cudaFree does); the
/// second, over the same batches, must not wait at all.
TEST(GpuEquivalence, OneRankStepMovesOnlyInputLabelsAndLoss) {
  SetNumThreads(1);
  const Dataset data = GenerateSynthetic(SyntheticShape(200, 300, 10, 2, 600), 0, 600);
  for (FillPolicy fill : {FillPolicy::kRandom, FillPolicy::kBatch}) {
    SCOPED_TRACE(ToString(fill));
    TrainConfig cfg = SmallLsh(HashFamily::kDwta, QueryStrategy::kVanilla, fill);
    cfg.hidden = {32, 24};
    cfg.sparsity = {1.0, 0.5, 0.2};  // a sampled hidden layer and a sampled output layer
    cfg.batch = 32;
    cfg.lsh.rebuild_n0 = 1000;  // no table rebuild in these steps
    LocalCommunicator c1, c2;
    Trainer t(cfg, &c1, BackendUnderTest(), data.num_features, data.num_labels);
    Trainer read_each(cfg, &c2, BackendUnderTest(), data.num_features, data.num_labels);
    std::vector<int64_t> points(cfg.batch);
    constexpr int kSteps = 4;
    for (int pass = 0; pass < 2; ++pass) {
      SCOPED_TRACE(pass == 0 ? "first pass (buffers grow)" : "second pass");
      std::vector<double> want;  // the same steps' losses, each read at once
      for (int step = 0; step < kSteps; ++step) {
        std::iota(points.begin(), points.end(), step * cfg.batch);
        const int64_t B = cfg.batch;
        // The data rows as the trainer stages them (offsets, counts, ids, values), the
        // labels (offsets, ids).
        int64_t input = 2 * B * int64_t{sizeof(int64_t)},
                labels = (B + 1) * int64_t{sizeof(int64_t)};
        for (int64_t p : points) {
          input += data.Features(p).n * int64_t{sizeof(int32_t) + sizeof(float)};
          labels += data.NumLabels(p) * int64_t{sizeof(int32_t)};
        }
        const DeviceTraffic before = t.backend().Info().traffic;
        t.QueueStep(data, points);
        const DeviceTraffic d = t.backend().Info().traffic - before;
        SCOPED_TRACE("step " + std::to_string(step + 1));
        EXPECT_EQ(d.h2d_bytes, input + labels);
        EXPECT_EQ(d.d2h_bytes, 0);
        if (pass == 1) EXPECT_EQ(d.syncs, 0);
        EXPECT_GT(d.launches, 9);
        // The same step read at once (Step): the loss and the flags come down, one wait.
        const DeviceTraffic b2 = read_each.backend().Info().traffic;
        want.push_back(read_each.Step(data, points));
        const DeviceTraffic d2 = read_each.backend().Info().traffic - b2;
        EXPECT_EQ(d2.h2d_bytes, input + labels);
        EXPECT_EQ(d2.d2h_bytes, int64_t{sizeof(double) + sizeof(uint64_t)});
        if (pass == 1) EXPECT_EQ(d2.syncs, 1);
      }
      const DeviceTraffic before = t.backend().Info().traffic;
      const std::vector<Trainer::StepLoss> got = t.TakeSteps();
      const DeviceTraffic d = t.backend().Info().traffic - before;
      EXPECT_EQ(d.h2d_bytes, 0);
      EXPECT_EQ(d.d2h_bytes, kSteps * int64_t{sizeof(double) + sizeof(uint64_t)});
      EXPECT_EQ(d.syncs, 1);
      ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
      for (int step = 0; step < kSteps; ++step) {
        EXPECT_EQ(got[step].iter, pass * kSteps + step + 1);
        // Within the tolerance of runs whose float atomics add in another order.
        EXPECT_NEAR(got[step].loss, want[step], 1e-4 * std::max(1.0, std::abs(want[step])))
            << "step " << step + 1;
      }
      EXPECT_TRUE(t.TakeSteps().empty());
    }
  }
}

TEST(GpuEquivalence, DataParallelExchangeInDeviceMemory) {
  // The fused gradient assembled, scaled and applied in the backend's memory (the buffer
  // CUDA-aware MPI reduces) against the CPU backend's host buffer.
  SetNumThreads(1);
  const Dataset data = GenerateSynthetic(SyntheticShape(200, 120, 10, 2, 400), 0, 400);
  TrainConfig cfg;
  cfg.hidden = {32};
  cfg.sparsity = {1.0, 1.0};
  cfg.strategy = Strategy::kDataParallel;
  cfg.batch = 32;
  cfg.lr = 1e-3;
  gpu::GpuTuning tune;
  tune.device_exchange = 1;
  LocalCommunicator c1, c2;
  Trainer a(cfg, &c1, std::make_unique<cpu::CpuBackend>(), data.num_features, data.num_labels);
  Trainer b(cfg, &c2, GpuBackendUnderTest(tune), data.num_features, data.num_labels);
  ASSERT_NO_FATAL_FAILURE(StepInLockstep(b, a, data, 10, cfg.batch, 1e-4));
  ExpectSameLayer(a.backend(), b.backend(), 0, 1e-4, "after 10 steps");
  ExpectSameLayer(a.backend(), b.backend(), 1, 1e-4, "after 10 steps");
}

}  // namespace dslide::testing
