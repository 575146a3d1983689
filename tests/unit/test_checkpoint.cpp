// Checkpoints: every stored field survives a round trip, a resumed run's losses equal the
// uninterrupted run's (one thread, fixed seed), damaged files are rejected with a message.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "../common/test_presets.h"
#include "common/error.h"
#include "common/parallel.h"
#include "data/synthetic.h"
#include "devices/backend_factory.h"
#include "dist/communicator.h"
#include "io/checkpoint.h"
#include "io/hdf5_file.h"
#include "test_util.h"
#include "train/auto_settings.h"
#include "train/predict.h"
#include "train/trainer.h"

namespace dslide {
namespace {

struct Fixture {
  Dataset data;
  TrainConfig cfg;
  Fixture() {
    data = GenerateSynthetic(testing::SyntheticShape(400, 300, 12, 3, 1500), 0, 1500);
    cfg.hidden = {24};
    cfg.sparsity = {0.1};
    cfg.batch = 32;
    cfg.lr = 1e-3;
    // Coarse SimHash tables with top-k queries: the candidates (not the random fill) decide
    // the active sets, so restored tables matter to the resumed losses.
    cfg.lsh.family = HashFamily::kSrp;
    cfg.lsh.k = 3;
    cfg.lsh.l = 8;
    cfg.lsh.query = QueryStrategy::kTopK;
    cfg.lsh.rebuild_n0 = 4;    // tables rebuilt before and after the checkpoint
    cfg.lsh.rehash_every = 4;  // and new hash functions
  }
  std::vector<int64_t> Batch(int64_t it) const {
    return testing::Batch(it, cfg.batch, data.size());
  }
  std::unique_ptr<Trainer> Make(Communicator* comm) const {
    return std::make_unique<Trainer>(cfg, comm, MakeBackend(Device::kCpu, 0), data.num_features,
                                     data.num_labels);
  }
  /// Trains a new model `steps` steps and writes its checkpoint into `dir` (keeping `keep`);
  /// returns the checkpoint's folder.
  std::string CheckpointAfter(Communicator* comm, const std::string& dir, int64_t steps,
                              int keep) const {
    auto a = Make(comm);
    for (int64_t it = 0; it < steps; ++it) a->Step(data, Batch(it));
    a->SaveCheckpoint(dir, 0, 0, keep);
    return LatestCheckpoint(dir);
  }
  /// A trainer after two steps, with a checkpoint of each in `dir` (iterations 1 and 2).
  std::unique_ptr<Trainer> TwoCheckpoints(Communicator* comm, const std::string& dir) const {
    auto a = Make(comm);
    a->Step(data, Batch(0));
    a->SaveCheckpoint(dir, 0, 32, 5);
    a->Step(data, Batch(1));
    a->SaveCheckpoint(dir, 0, 64, 5);
    return a;
  }
};

/// Every layer's state, as a checkpoint holds it.
std::vector<LayerState> AllLayers(Trainer& t) {
  std::vector<LayerState> layers(t.spec().layers.size());
  for (size_t l = 0; l < layers.size(); ++l)
    t.backend().SaveLayer(static_cast<int>(l), kCheckpoint, &layers[l]);
  return layers;
}

std::string Dir(const std::string& name) {
  const std::string d = testing::TmpPath(name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

TEST(Checkpoint, EveryFieldRoundTrips) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  for (int64_t it = 0; it < 13; ++it) a->Step(s.data, s.Batch(it));
  const std::string dir = Dir("ckpt_roundtrip");
  a->SaveCheckpoint(dir, 2, 77, 3);
  const std::string folder = LatestCheckpoint(dir);
  ASSERT_EQ(folder, CheckpointFolder(dir, 13));
  auto b = s.Make(&comm);
  const CheckpointMeta m = b->LoadCheckpoint(folder);
  EXPECT_EQ(m.iter, 13);
  EXPECT_EQ(m.epoch, 2);
  EXPECT_EQ(m.pos, 77);
  EXPECT_EQ(m.ranks, 1);
  EXPECT_EQ(b->iteration(), 13);
  // Every option as given, from the option table (the metrics' start event's "settings").
  EXPECT_EQ(m.settings, SettingsJson(s.cfg));
  EXPECT_NE(m.settings.find("\"lr\":"), std::string::npos) << m.settings;
  EXPECT_NE(m.settings.find("\"checkpoint-tables\":"), std::string::npos) << m.settings;
  for (int l = 0; l < 2; ++l) {
    LayerState x, y;
    a->backend().SaveLayer(l, kCheckpoint, &x);
    b->backend().SaveLayer(l, kCheckpoint, &y);
    EXPECT_EQ(x.w, y.w) << "layer " << l;
    EXPECT_EQ(x.b, y.b);
    EXPECT_EQ(x.m, y.m);
    EXPECT_EQ(x.v, y.v);
    EXPECT_EQ(x.mb, y.mb);
    EXPECT_EQ(x.vb, y.vb);
    EXPECT_EQ(x.row_step, y.row_step);
    EXPECT_EQ(x.bias_step, y.bias_step);
    EXPECT_EQ(x.tables_plan.hash_version, y.tables_plan.hash_version);
    EXPECT_EQ(x.tables_plan.rebuild, y.tables_plan.rebuild);
    EXPECT_EQ(x.tables_plan.hash_seed, y.tables_plan.hash_seed);
    EXPECT_EQ(x.tables_plan.table_seed, y.tables_plan.table_seed);
    EXPECT_EQ(x.table_offsets, y.table_offsets);
    EXPECT_EQ(x.table_ids, y.table_ids);
    EXPECT_EQ(x.table_sizes, y.table_sizes);
  }
  LayerState out;
  a->backend().SaveLayer(0, kCheckpoint, &out);  // a row per input feature
  EXPECT_LT(*std::min_element(out.row_step.begin(), out.row_step.end()), 12)
      << "the test should cover rows that owe steps";
  a->backend().SaveLayer(1, kCheckpoint, &out);
  EXPECT_GT(out.tables_plan.hash_version, 1) << "the test should cover a rehash";
  EXPECT_GT(out.tables_plan.rebuild, 1) << "the test should cover a rebuild";
}

// --state bf16 holds the moments in bfloat16; checkpoints store them as floats, so a run
// resumes across the setting: fp32 -> bf16 keeps the weights exactly and the moments to a
// bfloat16 rounding; bf16 -> fp32 keeps both exactly; and training goes on from either.
TEST(Checkpoint, ResumesAcrossTheStateSetting) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  for (const StateType from : {StateType::kFp32, StateType::kBf16}) {
    const StateType to = from == StateType::kFp32 ? StateType::kBf16 : StateType::kFp32;
    SCOPED_TRACE(from == StateType::kFp32 ? "fp32 -> bf16" : "bf16 -> fp32");
    Fixture a_fix, b_fix;
    a_fix.cfg.state = from;
    b_fix.cfg.state = to;
    auto a = a_fix.Make(&comm);
    for (int64_t it = 0; it < 9; ++it) a->Step(s.data, s.Batch(it));
    const std::string dir = Dir("ckpt_state");
    a->SaveCheckpoint(dir, 0, 0, 1);
    auto b = b_fix.Make(&comm);
    b->LoadCheckpoint(LatestCheckpoint(dir));
    for (int l = 0; l < 2; ++l) {
      LayerState x, y;
      a->backend().SaveLayer(l, kCheckpoint, &x);
      b->backend().SaveLayer(l, kCheckpoint, &y);
      EXPECT_EQ(x.w, y.w) << "layer " << l;
      EXPECT_EQ(x.b, y.b) << "layer " << l;
      ASSERT_EQ(x.v.size(), y.v.size());
      double dm = 0, dv = 0, nonzero = 0;
      for (size_t i = 0; i < x.m.size(); ++i) {
        dm = std::max(
            dm, std::abs(double(x.m[i]) - y.m[i]) / std::max(1e-30, std::abs(double(x.m[i]))));
        dv = std::max(
            dv, std::abs(double(x.v[i]) - y.v[i]) / std::max(1e-30, std::abs(double(x.v[i]))));
        nonzero += x.v[i] != 0.0f;
      }
      EXPECT_GT(nonzero, 0) << "layer " << l << ": no moments compared";
      const double tol = from == StateType::kFp32 ? 1.0 / 256 : 0.0;  // half a bf16 unit
      EXPECT_LE(dm, tol) << "layer " << l;
      EXPECT_LE(dv, tol) << "layer " << l;
    }
    for (int64_t it = 9; it < 12; ++it) {
      const double la = a->Step(s.data, s.Batch(it)), lb = b->Step(s.data, s.Batch(it));
      EXPECT_TRUE(std::isfinite(lb));
      EXPECT_NEAR(lb, la, 1e-2 * std::max(1.0, la)) << "iteration " << it + 1;
    }
  }
}

// The output neurons' order (--label-order) is part of the model: recorded, adopted by auto,
// refused when asked otherwise; a checkpoint of an earlier version, which records none,
// numbered its neurons by label (identity).
TEST(Checkpoint, LabelOrderIsPartOfTheModel) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  EXPECT_FALSE(a->spec().labels.identity()) << "a new model spreads its labels";
  for (int64_t it = 0; it < 3; ++it) a->Step(s.data, s.Batch(it));
  const std::string dir = Dir("ckpt_label_order");
  a->SaveCheckpoint(dir, 0, 0, 1);
  const std::string folder = LatestCheckpoint(dir);
  CheckpointMeta m = ReadMeta(folder);
  EXPECT_EQ(m.label_order, "spread");
  TrainConfig cfg = s.cfg;
  EXPECT_EQ(cfg.label_order, LabelOrder::kAuto);
  AdoptCheckpointSettings(m, &cfg);
  EXPECT_EQ(cfg.label_order, LabelOrder::kSpread);
  // Scoring it gives the same top labels as the trainer that wrote it.
  auto b = s.Make(&comm);
  b->LoadCheckpoint(folder);
  Trainer::Scores sa, sb;
  a->Score(s.data, 0, 40, 3, &sa);
  b->Score(s.data, 0, 40, 3, &sb);
  EXPECT_EQ(sa.ids, sb.ids);
  // Asked for another order: refused, naming the option.
  TrainConfig other = s.cfg;
  other.label_order = LabelOrder::kIdentity;
  Trainer c(other, &comm, MakeBackend(Device::kCpu, 0), s.data.num_features, s.data.num_labels);
  try {
    c.LoadCheckpoint(folder);
    ADD_FAILURE() << "a checkpoint of another label order was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--label-order identity differs from the checkpoint's "
                                         "spread"),
              std::string::npos)
        << e.what();
  }
  // An earlier version's checkpoint (no label order recorded) is read as identity.
  m.label_order.clear();
  WriteMeta(folder, m);
  const CheckpointMeta old = ReadMeta(folder);
  EXPECT_EQ(old.label_order, "");
  EXPECT_EQ(old.Order(), LabelOrder::kIdentity);
  TrainConfig auto_cfg = s.cfg;
  AdoptCheckpointSettings(old, &auto_cfg);
  EXPECT_EQ(auto_cfg.label_order, LabelOrder::kIdentity);
}

// The rate a run stepped at is recorded: a resumed run left to --lr auto continues at it (a
// network a reranker followed trained at 2e-3, and resumed alone it keeps it), a rate given
// is kept, and a checkpoint of an earlier version (none recorded) leaves auto's.
TEST(Checkpoint, AResumedRunLeftToAutoContinuesAtTheRecordedRate) {
  SetNumThreads(1);
  Fixture s;
  s.cfg.lr = 0;
  s.cfg.reranked = true;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  EXPECT_EQ(a->config().lr, 2e-3);
  for (int64_t it = 0; it < 3; ++it) a->Step(s.data, s.Batch(it));
  const std::string dir = Dir("ckpt_lr");
  a->SaveCheckpoint(dir, 0, 0, 1);
  const std::string folder = LatestCheckpoint(dir);
  CheckpointMeta m = ReadMeta(folder);
  EXPECT_EQ(m.lr, 2e-3);
  TrainConfig resumed;  // --lr auto, nothing following the network
  AdoptCheckpointSettings(m, &resumed);
  EXPECT_EQ(resumed.lr, 2e-3);
  TrainConfig given;
  given.lr = 5e-4;
  AdoptCheckpointSettings(m, &given);
  EXPECT_EQ(given.lr, 5e-4);
  m.lr = 0;  // an earlier version's
  WriteMeta(folder, m);
  TrainConfig old;
  AdoptCheckpointSettings(ReadMeta(folder), &old);
  EXPECT_EQ(old.lr, 0) << "left to auto";
  ResolveAuto(&old, s.data.num_features, s.data.num_labels);
  EXPECT_EQ(old.lr, 1e-3);
}

// The output loss (--loss) is part of the model: recorded, adopted by auto and by a loaded
// model (its probabilities the sigmoid of its logits), refused when asked otherwise; a
// checkpoint of an earlier version, which records none, trained the softmax.
TEST(Checkpoint, OutputLossIsPartOfTheModel) {
  SetNumThreads(1);
  Fixture s;
  s.cfg.loss = OutputLoss::kOneVsRest;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  for (int64_t it = 0; it < 3; ++it) a->Step(s.data, s.Batch(it));
  const std::string dir = Dir("ckpt_loss");
  a->SaveCheckpoint(dir, 0, 0, 1);
  const std::string folder = LatestCheckpoint(dir);
  CheckpointMeta m = ReadMeta(folder);
  EXPECT_EQ(m.loss, "one-vs-rest");
  TrainConfig cfg = s.cfg;
  cfg.loss = OutputLoss::kAuto;
  AdoptCheckpointSettings(m, &cfg);
  EXPECT_EQ(cfg.loss, OutputLoss::kOneVsRest);
  CheckpointMeta loaded_meta;
  auto b = LoadModel(folder, &comm, &loaded_meta);
  EXPECT_EQ(b->Loss(), OutputLoss::kOneVsRest);
  Trainer::Scores sa, sb;
  a->Score(s.data, 0, 40, 3, &sa);
  b->Score(s.data, 0, 40, 3, &sb);
  EXPECT_EQ(sa.ids, sb.ids);
  for (size_t j = 0; j < sb.probs.size(); ++j)
    EXPECT_NEAR(sb.probs[j], 1.0 / (1.0 + std::exp(-double{sb.logits[j]})), 1e-6) << j;
  // Asked for the softmax: refused, naming the option.
  TrainConfig other = s.cfg;
  other.loss = OutputLoss::kSoftmax;
  Trainer c(other, &comm, MakeBackend(Device::kCpu, 0), s.data.num_features, s.data.num_labels);
  try {
    c.LoadCheckpoint(folder);
    ADD_FAILURE() << "a one-vs-rest checkpoint was loaded as a softmax model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--loss softmax differs from the checkpoint's "
                                         "one-vs-rest"),
              std::string::npos)
        << e.what();
  }
  // An earlier version's checkpoint (no loss recorded) is read as the softmax.
  m.loss.clear();
  WriteMeta(folder, m);
  const CheckpointMeta old = ReadMeta(folder);
  EXPECT_EQ(old.loss, "");
  EXPECT_EQ(old.Loss(), OutputLoss::kSoftmax);
  auto d = LoadModel(folder, &comm, &loaded_meta);
  EXPECT_EQ(d->Loss(), OutputLoss::kSoftmax);
}

TEST(Checkpoint, ResumedLossesEqualUninterrupted) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  auto full = s.Make(&comm);
  std::vector<double> expect;
  for (int64_t it = 0; it < 24; ++it) expect.push_back(full->Step(s.data, s.Batch(it)));
  const std::string folder = s.CheckpointAfter(&comm, Dir("ckpt_resume"), 11, 3);
  auto resumed = s.Make(&comm);
  resumed->LoadCheckpoint(folder);
  for (int64_t it = 11; it < 24; ++it)
    EXPECT_EQ(resumed->Step(s.data, s.Batch(it)), expect[it]) << "iteration " << it + 1;
}

// --lr-decay's multiplier is part of the run's state: a checkpoint keeps it (lr_scale in
// meta.h5) and the resumed run steps at --lr times it, bit for bit the steps of a run resumed
// at that rate, and not those of the full rate.
TEST(Checkpoint, ResumedRunStepsAtTheKeptLearningRate) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  const std::string folder = s.CheckpointAfter(&comm, Dir("ckpt_lr_scale"), 11, 3);
  CheckpointMeta m = ReadMeta(folder);
  EXPECT_EQ(m.lr_scale, 1.0) << "a run without decays";
  auto steps = [&](const Fixture& f) {
    auto t = f.Make(&comm);
    const CheckpointMeta loaded = t->LoadCheckpoint(folder);
    std::vector<double> losses;
    for (int64_t it = 11; it < 24; ++it) losses.push_back(t->Step(f.data, f.Batch(it)));
    return std::make_pair(loaded.lr_scale, losses);
  };
  const auto full = steps(s);
  m.lr_scale = 0.25;
  WriteMeta(folder, m);  // with a matching checksum
  const auto kept = steps(s);
  EXPECT_EQ(kept.first, 0.25);
  Fixture quarter;
  quarter.cfg.lr = s.cfg.lr * 0.25;
  m.lr_scale = 1;
  WriteMeta(folder, m);
  const auto at_quarter = steps(quarter);
  EXPECT_EQ(kept.second, at_quarter.second);
  EXPECT_NE(kept.second, full.second);
}

// A checkpoint of an earlier version holds no last steps (row_step, bias_step): it loads, its
// rows owe no steps (-1) until a batch touches them, and training goes on.
TEST(Checkpoint, WithoutLastStepsRowsOweNone) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  const std::string folder = s.CheckpointAfter(&comm, Dir("ckpt_no_steps"), 6, 1);
  const std::string shard = folder + "/rank-00000.h5";
  {
    const hid_t f = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    for (const char* ds :
         {"layer0/row_step", "layer0/bias_step", "layer1/row_step", "layer1/bias_step"})
      ASSERT_GE(H5Ldelete(f, ds, H5P_DEFAULT), 0) << ds;
    H5Fclose(f);
  }
  h5::WriteSidecar(shard);
  auto b = s.Make(&comm);
  b->LoadCheckpoint(folder);
  for (int l = 0; l < 2; ++l) {
    LayerState st;
    b->backend().SaveLayer(l, kCheckpoint, &st);
    EXPECT_EQ(std::count(st.row_step.begin(), st.row_step.end(), -1),
              static_cast<int64_t>(st.row_step.size()))
        << "layer " << l;
    EXPECT_EQ(std::count(st.bias_step.begin(), st.bias_step.end(), -1),
              static_cast<int64_t>(st.bias_step.size()));
  }
  EXPECT_TRUE(std::isfinite(b->Step(s.data, s.Batch(6))));
  LayerState st;
  b->backend().SaveLayer(0, kCheckpoint, &st);  // a row per input feature
  EXPECT_GT(std::count(st.row_step.begin(), st.row_step.end(), 7), 0) << "rows the batch touched";
  EXPECT_GT(std::count(st.row_step.begin(), st.row_step.end(), -1), 0) << "rows it did not";
}

TEST(Checkpoint, KeepsTheNewestAndIgnoresUnfinished) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  const std::string dir = Dir("ckpt_keep");
  for (int64_t it = 0; it < 5; ++it) {
    a->Step(s.data, s.Batch(it));
    a->SaveCheckpoint(dir, 0, 0, 2);
  }
  std::filesystem::create_directories(CheckpointFolder(dir, 99) + ".tmp");  // a crash mid-write
  int complete = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    complete += e.path().string().find(".tmp") == std::string::npos;
  EXPECT_EQ(complete, 2);
  EXPECT_EQ(LatestCheckpoint(dir), CheckpointFolder(dir, 5));
}

TEST(Checkpoint, DamagedFilesAreRejected) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  a->Step(s.data, s.Batch(0));
  const std::string dir = Dir("ckpt_damage");
  a->SaveCheckpoint(dir, 0, 0, 1);
  const std::string folder = LatestCheckpoint(dir), shard = folder + "/rank-00000.h5";
  const auto size = std::filesystem::file_size(shard);
  auto expect_error = [&](const std::string& what, const std::string& needle) {
    auto b = s.Make(&comm);
    try {
      b->LoadCheckpoint(folder);
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    }
  };
  // A flipped byte in the weights: the dataset checksum fails.
  {
    std::vector<char> bytes(size);
    std::ifstream(shard, std::ios::binary).read(bytes.data(), size);
    const std::vector<char> saved = bytes;
    LayerState st;
    a->backend().SaveLayer(1, kCheckpoint, &st);
    const float probe = st.w[st.w.size() / 2];
    const char* p = reinterpret_cast<const char*>(&probe);
    auto it = std::search(bytes.begin(), bytes.end(), p, p + 4);
    ASSERT_NE(it, bytes.end());
    *it ^= 0x5a;
    std::ofstream(shard, std::ios::binary | std::ios::trunc).write(bytes.data(), size);
    expect_error("corrupted", "rank-00000.h5");
    std::ofstream(shard, std::ios::binary | std::ios::trunc).write(saved.data(), size);
  }
  // Truncated to half.
  std::filesystem::resize_file(shard, size / 2);
  expect_error("truncated", "rank-00000.h5");
  // Missing.
  std::filesystem::remove(shard);
  expect_error("missing", "missing");
  // A different network.
  a->Step(s.data, s.Batch(1));
  a->SaveCheckpoint(dir, 0, 0, 1);
  Fixture other;
  other.cfg.hidden = {16};
  auto c = other.Make(&comm);
  try {
    c->LoadCheckpoint(LatestCheckpoint(dir));
    ADD_FAILURE() << "a checkpoint of another network was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--hidden"), std::string::npos) << e.what();
  }
}

// Values no training writes, in a checkpoint written so (its checksums match, as when a
// file was damaged before it was summed): a NaN weight, an infinite bias, a negative second
// moment, magnitudes no run reaches (a flipped exponent bit) are refused as damage naming the
// dataset, the layer as training counts it and the row, which --resume skips.
TEST(Checkpoint, ValuesNoTrainingWritesAreDamage) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  const std::string dir = Dir("ckpt_values");
  struct Case {
    const char* what;
    const char* needle;
    std::function<void(LayerState*)> spoil;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"a NaN weight", "layer1/w (layer 2) holds nan at row 2",
       [&](LayerState* st) { st->w[2 * 24 + 3] = nan; }},
      {"an infinite bias", "layer1/b (layer 2) holds inf at row 7",
       [&](LayerState* st) { st->b[7] = inf; }},
      {"a negative second moment", "layer0/v (layer 1) holds -1 at row",
       [&](LayerState* st) { st->v[5] = -1.0f; }},
      // A flipped exponent bit: finite, but beyond what any run writes.
      {"a weight of 1e37", "layer1/w (layer 2) holds 1e+37 at row 4",
       [&](LayerState* st) { st->w[4 * 24] = 1e37f; }},
      // Weights no run reaches before its loss diverges (a resume would blame the rate).
      {"a weight of 1e12", "layer1/w (layer 2) holds 1e+12 at row 5",
       [&](LayerState* st) { st->w[5 * 24 + 1] = 1e12f; }},
      {"a bias of -1e10", "layer0/b (layer 1) holds -1e+10 at row 3",
       [&](LayerState* st) { st->b[3] = -1e10f; }},
      // A layer read as zeros (a damaged layout message behind a matching checksum).
      {"a layer of zeros", "layer0/w (layer 1) holds only zeros in rows 0 to",
       [&](LayerState* st) { std::fill(st->w.begin(), st->w.end(), 0.0f); }},
      {"a first moment of -1e20", "layer0/m (layer 1) holds -1e+20 at row",
       [&](LayerState* st) { st->m[9] = -1e20f; }},
      {"a second moment of 1e33", "layer1/vb (layer 2) holds 1e+33 at row 3",
       [&](LayerState* st) { st->vb[3] = 1e33f; }},
      {"a row's last step after the checkpoint's",
       "layer1/row_step (layer 2) holds step 9 at row 2, outside [-1, 1]",
       [&](LayerState* st) { st->row_step[2] = 9; }},
      {"a bias's last step below -1",
       "layer0/bias_step (layer 1) holds step -5 at row 4, outside [-1, 1]",
       [&](LayerState* st) { st->bias_step[4] = -5; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto a = s.Make(&comm);
    a->Step(s.data, s.Batch(0));
    const int layer = std::string(c.needle).find("layer0") == 0 ? 0 : 1;
    LayerState st;
    a->backend().SaveLayer(layer, kCheckpoint, &st);
    c.spoil(&st);
    a->backend().LoadLayer(layer, kWeights | kMoments, st);
    std::filesystem::remove_all(dir);
    a->SaveCheckpoint(dir, 0, 0, 1);
    auto b = s.Make(&comm);
    try {
      b->LoadCheckpoint(LatestCheckpoint(dir));
      ADD_FAILURE() << "accepted";
    } catch (const DamagedCheckpoint& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank-00000.h5"), std::string::npos) << e.what();
    }
  }
}

// A checkpoint is one unit: a shard (with its checksum file) copied in from another
// checkpoint, of the same run or of another, is refused naming both checkpoints.
TEST(Checkpoint, ShardsOfAnotherCheckpointAreRefused) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  const std::string dir = Dir("ckpt_mixed");
  a->Step(s.data, s.Batch(0));
  a->SaveCheckpoint(dir, 0, 0, 5);
  a->Step(s.data, s.Batch(1));
  a->SaveCheckpoint(dir, 0, 0, 5);
  const std::string one = CheckpointFolder(dir, 1), two = CheckpointFolder(dir, 2);
  const CheckpointMeta m1 = ReadMeta(one), m2 = ReadMeta(two);
  EXPECT_NE(m2.run_id, 0u);
  EXPECT_EQ(m1.run_id, m2.run_id) << "one run";
  auto expect_refused = [&](const std::string& needle) {
    auto c = s.Make(&comm);
    try {
      c->LoadCheckpoint(two);
      ADD_FAILURE() << "a mixed checkpoint was loaded";
    } catch (const DamagedCheckpoint& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // A shard and its checksum file, as a user copying files would move them.
  auto copy_shard = [](const std::string& from, const std::string& to) {
    namespace fs = std::filesystem;
    for (const char* ext : {"", ".sum"})
      fs::copy_file(from + ext, to + ext, fs::copy_options::overwrite_existing);
  };
  const std::string shard = two + "/rank-00000.h5";
  // The same run's iteration 1 in the folder of iteration 2.
  copy_shard(shard, dir + "/keep.h5");
  copy_shard(one + "/rank-00000.h5", shard);
  expect_refused("rank-00000.h5 is a shard of the checkpoint of " +
                 CheckpointIdentity(m1.run_id, 1) + ", not of this folder's checkpoint (" +
                 CheckpointIdentity(m2.run_id, 2));
  // Another run's shard of the same iteration.
  copy_shard(dir + "/keep.h5", shard);
  auto b = s.Make(&comm);
  b->LoadCheckpoint(two);  // intact again
  auto other = s.Make(&comm);
  other->Step(s.data, s.Batch(0));
  other->Step(s.data, s.Batch(1));
  const std::string dir2 = Dir("ckpt_mixed_other");
  other->SaveCheckpoint(dir2, 0, 0, 1);
  const CheckpointMeta mo = ReadMeta(CheckpointFolder(dir2, 2));
  ASSERT_NE(mo.run_id, m2.run_id) << "each run draws its own id";
  copy_shard(CheckpointFolder(dir2, 2) + "/rank-00000.h5", shard);
  expect_refused("is a shard of the checkpoint of " + CheckpointIdentity(mo.run_id, 2));
  // A meta.h5 that names no run beside shards that do: damaged (a flipped bit, say).
  copy_shard(dir + "/keep.h5", shard);
  CheckpointMeta legacy = ReadMeta(two);
  legacy.run_id = 0;
  WriteMeta(two, legacy);
  expect_refused("rank-00000.h5 is a shard of the checkpoint of " +
                 CheckpointIdentity(m2.run_id, 2) + ", but its folder's meta.h5 names no run");
  // A checkpoint of an earlier version (no identity in meta.h5 or the shard) is read as
  // before.
  WriteShard(two, 0, b->spec(), AllLayers(*b), /*run_id=*/0, 2);
  b->LoadCheckpoint(two);
}

// LSH tables written damaged (checksums matching): an id beyond the shard, bucket sizes that
// do not add up. Their checks (LshTables::Import) refuse them as damage, which --resume skips
// for the next older checkpoint (they ended the resume with an error instead).
TEST(Checkpoint, TablesThatFailTheirChecksAreDamage) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  const std::string dir = Dir("ckpt_tables");
  auto a = s.TwoCheckpoints(&comm, dir);
  const std::string two = CheckpointFolder(dir, 2);
  const CheckpointMeta m = ReadMeta(two);
  const std::vector<LayerState> intact = AllLayers(*a);
  ASSERT_FALSE(intact[1].table_ids.empty()) << "the output layer has tables";
  const std::vector<std::function<void(LayerState*)>> spoils = {
      [](LayerState* st) { st->table_ids[3] = 1 << 30; },
      [](LayerState* st) { st->table_sizes[0] += 5; },
  };
  for (size_t k = 0; k < spoils.size(); ++k) {
    SCOPED_TRACE("spoil " + std::to_string(k));
    std::vector<LayerState> layers = intact;
    spoils[k](&layers[1]);
    WriteShard(two, 0, a->spec(), layers, m.run_id, m.iter);
    auto b = s.Make(&comm);
    try {
      b->LoadCheckpoint(two);
      ADD_FAILURE() << "accepted";
    } catch (const DamagedCheckpoint& e) {
      EXPECT_NE(std::string(e.what()).find("layer 2"), std::string::npos) << e.what();
    }
    TrainConfig cfg = s.cfg;
    cfg.resume_dir = dir;
    cfg.iterations = 3;
    auto c = std::make_unique<Trainer>(cfg, &comm, MakeBackend(Device::kCpu, 0),
                                       s.data.num_features, s.data.num_labels);
    ::testing::internal::CaptureStderr();
    c->Run(s.data, nullptr, nullptr);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("skipping the damaged checkpoint " + two), std::string::npos) << err;
    EXPECT_EQ(c->iteration(), 3);
  }
}

TEST(Checkpoint, AnAttributeOfTheMetadataLostIsDamageNotAnEarlierVersion) {
  // An attribute that earlier versions did not write (the label order, the run's identity,
  // ...) made unreadable behind a matching checksum (renamed here) read as a checkpoint of
  // an earlier version: with the label order lost, eval scored P@1 0.038 for a model of
  // 0.629 and exited 0. The file names what it wrote; each one missing is damage, named.
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  const std::string dir = Dir("ckpt_meta_attrs");
  s.TwoCheckpoints(&comm, dir);
  const std::string two = CheckpointFolder(dir, 2), file = two + "/meta.h5";
  EXPECT_EQ(ReadMeta(two).label_order, "spread");
  for (const char* name : {"label_order", "run_id", "settings", "lsh_share", "best_iter"}) {
    SCOPED_TRACE(name);
    const std::string hidden = std::string(name) + "_";
    auto rename = [&](const char* from, const char* to) {
      const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      ASSERT_GE(f, 0);
      ASSERT_GE(H5Arename(f, from, to), 0);
      H5Fclose(f);
      h5::WriteSidecar(file);  // the checksum matches the damaged file
    };
    rename(name, hidden.c_str());
    try {
      ReadMeta(two);
      ADD_FAILURE() << "read as an earlier version's checkpoint";
    } catch (const DamagedCheckpoint& e) {
      EXPECT_NE(
          std::string(e.what()).find(file + ": attribute '" + name + "' is missing or unreadable"),
          std::string::npos)
          << e.what();
    }
    rename(hidden.c_str(), name);
    EXPECT_NO_THROW(ReadMeta(two));
  }
}

// A meta.h5 written damaged (its checksum matching, as when it was damaged before it was
// summed): values no run writes are refused as damage naming the file and the attribute,
// before anything is built from them (they were accepted: a layer of 0 neurons or K = 1000
// reached the model that eval builds from the metadata), and --resume skips such a
// checkpoint for the next older one.
TEST(Checkpoint, MetadataNoRunWritesIsDamage) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  const std::string dir = Dir("ckpt_meta_values");
  s.TwoCheckpoints(&comm, dir);
  const std::string two = CheckpointFolder(dir, 2);
  const CheckpointMeta good = ReadMeta(two);
  ASSERT_EQ(good.out_dims.size(), 2u);
  struct Case {
    const char* what;
    std::function<void(CheckpointMeta*)> spoil;
    const char* needle;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Case> cases = {
      {"a hidden layer of 0 neurons", [](CheckpointMeta* m) { m->out_dims[0] = 0; },
       "layer 1 has 0 neurons (out_dims; not in [1, 2^24 - 1])"},
      {"an output layer beyond int32 ids",
       [](CheckpointMeta* m) { m->out_dims[1] = int64_t{1} << 33; },
       "layer 2 has 8589934592 neurons (out_dims; not in [1, 2^31 - 1])"},
      {"a sparsity of 1.5", [](CheckpointMeta* m) { m->sparsity[1] = 1.5; },
       "layer 2's sparsity is 1.5 (not in (0, 1])"},
      {"a NaN sparsity", [&](CheckpointMeta* m) { m->sparsity[0] = nan; },
       "layer 1's sparsity is nan"},
      {"an epoch below -1", [](CheckpointMeta* m) { m->epoch = -5; }, "epoch is -5"},
      {"a data position beyond the data",
       [](CheckpointMeta* m) {
         m->data_digest = 7;
         m->data_points = 40;
         m->pos = 41;
       },
       "pos is 41, beyond data_points 40"},
      {"a best iteration after the checkpoint's", [](CheckpointMeta* m) { m->best_iter = 5; },
       "best_iter is 5 (not in [-1, iter 2])"},
      {"a P@1 of 3", [](CheckpointMeta* m) { m->best_p_at_1 = 3; }, "best_p_at_1 is 3"},
      {"a negative validation loss", [](CheckpointMeta* m) { m->best_loss = -1; },
       "best_loss is -1 (negative)"},
      {"a learning-rate multiplier of 0", [](CheckpointMeta* m) { m->lr_scale = 0; },
       "lr_scale is 0 (not in (0, 1])"},
      {"a learning-rate multiplier above 1", [](CheckpointMeta* m) { m->lr_scale = 2; },
       "lr_scale is 2 (not in (0, 1])"},
      {"a batch of 0", [](CheckpointMeta* m) { m->batch = 0; }, "batch is 0 (not in [1, 2^20])"},
      {"an unknown LSH family", [](CheckpointMeta* m) { m->hash_family = "srq"; },
       "hash_family is 'srq'"},
      {"K = 1000", [](CheckpointMeta* m) { m->hash_k = 1000; }, "hash_k is 1000 (not in [0, 32])"},
      {"a bucket size of 0", [](CheckpointMeta* m) { m->hash_bucket = 0; }, "hash_bucket is 0"},
      {"an unknown strategy", [](CheckpointMeta* m) { m->strategy = "sparsely"; },
       "strategy is 'sparsely'"},
      {"an unknown query", [](CheckpointMeta* m) { m->query = "top"; }, "query is 'top'"},
      {"an LSH share of 2", [](CheckpointMeta* m) { m->lsh_share = 2; }, "lsh_share is 2"},
      {"a negative floor of negatives", [](CheckpointMeta* m) { m->min_negatives = -3; },
       "min_negatives is -3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    CheckpointMeta m = good;
    c.spoil(&m);
    WriteMeta(two, m);  // with a matching checksum
    try {
      ReadMeta(two);
      ADD_FAILURE() << "accepted";
    } catch (const DamagedCheckpoint& e) {
      EXPECT_NE(std::string(e.what()).find(two + "/meta.h5: " + c.needle), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("the checkpoint is damaged"), std::string::npos)
          << e.what();
    }
    // --resume skips it: the newest intact metadata is checkpoint 1's.
    EXPECT_EQ(ReadResumeMeta(dir).iter, 1);
  }
  WriteMeta(two, good);
  auto b = s.Make(&comm);
  EXPECT_EQ(b->LoadCheckpoint(two).iter, 2) << "intact again";
}

/// A float dataset of an exported file, read with the plain HDF5 API as other tools would.
std::vector<float> ReadPlain(const std::string& file, const std::string& name, hsize_t* rows,
                             hsize_t* cols) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  const hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(ds, 0) << name;
  const hid_t sp = H5Dget_space(ds);
  hsize_t dims[2] = {0, 1};
  const int nd = H5Sget_simple_extent_dims(sp, dims, nullptr);
  *rows = dims[0];
  *cols = nd == 2 ? dims[1] : 1;
  std::vector<float> v(*rows * *cols);
  EXPECT_GE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Sclose(sp);
  H5Dclose(ds);
  H5Fclose(f);
  return v;
}

TEST(Checkpoint, ExportIsPlainHdf5WithEveryLayer) {
  SetNumThreads(1);
  Fixture s;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  for (int64_t it = 0; it < 3; ++it) a->Step(s.data, s.Batch(it));
  const std::string dir = Dir("ckpt_export");
  a->SaveCheckpoint(dir, 0, 0, 1);
  const std::string out = testing::TmpPath("exported.h5");
  const int64_t params = ExportModel(LatestCheckpoint(dir), out);
  EXPECT_EQ(params, a->spec().NumParameters());
  // The groups are numbered from 1, as training prints the layers: layer1 (hidden), layer2
  // (output).
  {
    const hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0) << out;
    EXPECT_EQ(H5Lexists(f, "layer0", H5P_DEFAULT), 0) << "no layer0";
    EXPECT_GT(H5Lexists(f, "layer1", H5P_DEFAULT), 0);
    EXPECT_GT(H5Lexists(f, "layer2", H5P_DEFAULT), 0);
    EXPECT_EQ(H5Lexists(f, "layer3", H5P_DEFAULT), 0) << "no layer3";
    H5Fclose(f);
  }
  for (int l = 0; l < 2; ++l) {
    std::vector<float> w, b;
    testing::GetLayer(a->backend(), l, &w, &b);
    hsize_t rows = 0, cols = 0;
    const std::string group = "layer" + std::to_string(l + 1);
    const auto ew = ReadPlain(out, group + "/weights", &rows, &cols);
    EXPECT_EQ(rows, static_cast<hsize_t>(a->spec().layers[l].out_dim));
    EXPECT_EQ(cols, static_cast<hsize_t>(a->spec().layers[l].in_dim));
    const auto eb = ReadPlain(out, group + "/biases", &rows, &cols);
    // The output layer's rows in label order, whatever order its neurons were trained in.
    const LayerSpec& s = a->spec().layers[l];
    const LabelMap& map = s.is_output ? a->spec().labels : LabelMap();
    if (s.is_output) EXPECT_FALSE(map.identity()) << "the default order spreads the labels";
    ASSERT_EQ(ew.size(), w.size());
    ASSERT_EQ(eb.size(), b.size());
    for (int64_t r = 0; r < s.out_dim; ++r) {
      const int64_t n = map.Neuron(static_cast<int32_t>(r));
      for (int64_t j = 0; j < s.in_dim; ++j)
        ASSERT_EQ(ew[r * s.in_dim + j], w[n * s.in_dim + j]) << group << " row " << r;
      ASSERT_EQ(eb[r], b[n]) << group << " row " << r;
    }
  }
}

}  // namespace
}  // namespace dslide
