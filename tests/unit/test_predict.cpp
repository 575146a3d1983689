// dslide predict against dslide eval on the same model: the same top-k (so the same P@k),
// probabilities that are the full softmax, the same output whatever the chunk size, and bad
// input rejected naming the file and line. Also: the full-softmax loss of evaluation equals
// the training loss of a dense output layer, and streaming reads equal whole-file reads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "../common/test_presets.h"
#include "common/error.h"
#include "common/parallel.h"
#include "data/synthetic.h"
#include "devices/backend_factory.h"
#include "dist/communicator.h"
#include "io/checkpoint.h"
#include "io/hdf5_file.h"
#include "model/adam.h"
#include "test_util.h"
#include "train/evaluator.h"
#include "train/predict.h"

namespace dslide {
namespace {

struct Model {
  Dataset train, test;
  std::string dir;
  OutputLoss loss = OutputLoss::kAuto;
};

/// A small model trained for a few dozen steps and saved as a checkpoint folder.
const Model& Trained() {
  static Model m = [] {
    SetNumThreads(2);
    Model r;
    const GenConfig g = testing::SyntheticShape(300, 150, 10, 3, 2000);
    r.train = GenerateSynthetic(g, 0, 2000);
    r.test = GenerateSynthetic(g, 2000, 300);
    TrainConfig cfg;
    cfg.hidden = {24};
    cfg.sparsity = {0.3};
    cfg.batch = 64;
    LocalCommunicator comm;
    Trainer tr(cfg, &comm, MakeBackend(Device::kCpu, 0), 300, 150);
    for (int it = 0; it < 60; ++it) tr.Step(r.train, testing::Batch(it, 64, r.train.size()));
    r.loss = tr.Loss();
    r.dir = testing::TmpPath("predict_model");
    tr.WriteCheckpoint(r.dir, 0, 0);
    WriteXc(r.test, testing::TmpPath("predict_input.txt"));
    return r;
  }();
  return m;
}

struct Row {
  std::vector<int32_t> labels;
  std::vector<double> scores;
};

std::vector<Row> ReadTsv(const std::string& path) {
  std::ifstream in(path);
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    EXPECT_NE(tab, std::string::npos) << line;
    EXPECT_EQ(std::stoll(line.substr(0, tab)), static_cast<long long>(rows.size()));
    std::istringstream is(line.substr(tab + 1));
    Row r;
    std::string item;
    while (is >> item) {
      const size_t c = item.find(':');
      r.labels.push_back(std::stoi(item.substr(0, c)));
      r.scores.push_back(std::stod(item.substr(c + 1)));
    }
    rows.push_back(r);
  }
  return rows;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// predict of the trained model on `input` into `out`.
PredictConfig Options(const std::string& input, const std::string& out) {
  PredictConfig pc;
  pc.model_dir = Trained().dir;
  pc.input = input;
  pc.out = testing::TmpPath(out);
  pc.top_k = 5;
  return pc;
}

/// The error predict stops with ("" when it does not).
std::string PredictError(const PredictConfig& pc) {
  LocalCommunicator comm;
  try {
    Predict(pc, &comm);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Predict, SameTopKAsEvalOnTheSameModel) {
  const Model& m = Trained();
  LocalCommunicator comm;
  const PredictConfig pc = Options(testing::TmpPath("predict_input.txt"), "predict.tsv");
  ASSERT_EQ(Predict(pc, &comm), m.test.size());
  const std::vector<Row> rows = ReadTsv(pc.out);
  ASSERT_EQ(static_cast<int64_t>(rows.size()), m.test.size());
  PrecisionCounter counter({1, 3, 5});
  for (int64_t i = 0; i < m.test.size(); ++i) {
    const Row& r = rows[i];
    ASSERT_EQ(r.labels.size(), 5u);
    double sum = 0;
    for (size_t j = 0; j < 5; ++j) {
      EXPECT_GT(r.scores[j], 0.0);
      if (j) EXPECT_GE(r.scores[j - 1], r.scores[j]) << "row " << i;
      sum += r.scores[j];
    }
    if (Trained().loss == OutputLoss::kSoftmax) EXPECT_LE(sum, 1.0 + 1e-5);  // one distribution
    counter.Add(r.labels.data(), 5, m.test.Labels(i), m.test.NumLabels(i));
  }
  CheckpointMeta meta;
  auto model = LoadModel(m.dir, &comm, &meta);
  const Dataset input = ReadXc(pc.input);  // the text round trip of m.test
  const EvalResult e = model->Evaluate(input, 0, false);
  const EvalResult p = counter.Result();
  for (int k : {1, 3, 5}) EXPECT_DOUBLE_EQ(p.At(k), e.At(k)) << "P@" << k;
  EXPECT_GT(e.At(1), 0.0);

  // The probabilities are the model's: under the softmax, exp of the logits normalised over
  // every output (all 150 scored here); under one-vs-rest, each logit's sigmoid.
  Trainer::Scores sc;
  model->Score(input, 0, 4, 150, &sc);
  for (int i = 0; i < 4; ++i) {
    double z = 0;
    for (int j = 0; j < 150; ++j) z += std::exp(static_cast<double>(sc.logits[i * 150 + j]));
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(sc.ids[i * 150 + j], rows[i].labels[j]);
      const double logit = sc.logits[i * 150 + j];
      const double want = model->Loss() == OutputLoss::kOneVsRest ? 1.0 / (1.0 + std::exp(-logit))
                                                                  : std::exp(logit) / z;
      EXPECT_NEAR(want, rows[i].scores[j], 1e-5 * rows[i].scores[j] + 1e-9);
    }
  }

  // Streaming: tiny chunks give the same file; jsonl carries the same lists.
  PredictConfig small = pc;
  small.chunk = 7;
  small.out = testing::TmpPath("predict_small.tsv");
  Predict(small, &comm);
  EXPECT_EQ(Slurp(small.out), Slurp(pc.out));
  PredictConfig js = pc;
  js.format = "jsonl";
  js.out = testing::TmpPath("predict.jsonl");
  Predict(js, &comm);
  std::ifstream in(js.out);
  std::string first;
  std::getline(in, first);
  std::string want = "{\"row\":0,\"labels\":[";
  for (size_t j = 0; j < 5; ++j) want += (j ? "," : "") + std::to_string(rows[0].labels[j]);
  EXPECT_EQ(first.rfind(want, 0), 0u) << first;
}

// The file `export` writes is a serving model: predict, eval and LoadModel read it as they
// read the checkpoint, and it gives the same top-k labels and logits, bit for bit, at under
// a third of the checkpoint's size (weights without Adam's moments or the tables).
TEST(Predict, TheExportedModelPredictsTheCheckpointsBits) {
  const Model& m = Trained();
  LocalCommunicator comm;
  const std::string folder = ResolveCheckpoint(m.dir, "--model");
  const std::string file = testing::TmpPath("serving.h5");
  ExportModel(folder, file);
  ASSERT_TRUE(IsServingModel(file));
  EXPECT_FALSE(IsServingModel(folder));
  EXPECT_FALSE(IsServingModel(testing::TmpPath("predict_input.txt")));
  int64_t ckpt_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(folder))
    ckpt_bytes += static_cast<int64_t>(e.file_size());
  const int64_t served_bytes = static_cast<int64_t>(std::filesystem::file_size(file));
  std::printf("checkpoint %lld bytes, serving model %lld\n", (long long)ckpt_bytes,
              (long long)served_bytes);
  EXPECT_LE(3 * served_bytes, ckpt_bytes);
  PredictConfig from_ckpt = Options(testing::TmpPath("predict_input.txt"), "from_ckpt.tsv");
  PredictConfig from_file = Options(testing::TmpPath("predict_input.txt"), "from_file.tsv");
  from_file.model_dir = file;
  ASSERT_EQ(Predict(from_ckpt, &comm), m.test.size());
  ASSERT_EQ(Predict(from_file, &comm), m.test.size());
  // The same labels in the same order; the probabilities to float rounding (the checkpoint
  // holds the rows in its --label-order, the file in label order: the normaliser's sum
  // runs in another order).
  const std::vector<Row> ra = ReadTsv(from_ckpt.out), rb = ReadTsv(from_file.out);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(rb[i].labels, ra[i].labels) << "row " << i;
    for (size_t j = 0; j < ra[i].scores.size(); ++j)
      EXPECT_NEAR(rb[i].scores[j], ra[i].scores[j], 1e-5 * ra[i].scores[j]) << "row " << i;
  }
  CheckpointMeta ma, mb;
  auto a = LoadModel(folder, &comm, &ma);
  auto b = LoadModel(file, &comm, &mb);
  EXPECT_EQ(mb.iter, ma.iter);
  EXPECT_EQ(b->Loss(), a->Loss());
  // The top-k logits bit for bit.
  Trainer::Scores sa, sb;
  a->Score(m.test, 0, 64, 5, &sa);
  b->Score(m.test, 0, 64, 5, &sb);
  EXPECT_EQ(sb.ids, sa.ids);
  EXPECT_EQ(sb.logits, sa.logits);
  const EvalResult ea = a->Evaluate(m.test, 0, false), eb = b->Evaluate(m.test, 0, false);
  for (int k : {1, 3, 5}) EXPECT_EQ(eb.At(k), ea.At(k)) << "P@" << k;
  EXPECT_NEAR(eb.loss, ea.loss, 1e-9 * ea.loss);
}

// eval and predict load a model for scoring alone: no Adam moments read or kept, the
// weights not drawn before they are loaded, the sampled layers' tables imported or built
// from the loaded weights as before. From the checkpoint and from the serving model it
// scores what a model loaded for training scores, bit for bit: exactly, and by the output
// layer's own LSH candidates (its tables).
TEST(Predict, ScoringAloneScoresWhatTheFullModelScores) {
  const Model& m = Trained();
  LocalCommunicator comm;
  // An output layer whose selection is a real sample (a fifth of the outputs, few fillers).
  TrainConfig cfg;
  cfg.hidden = {24};
  cfg.sparsity = {1.0, 0.2};
  cfg.min_negatives = 8;
  cfg.batch = 64;
  Trainer tr(cfg, &comm, MakeBackend(Device::kCpu, 0), 300, 150);
  for (int it = 0; it < 60; ++it) tr.Step(m.train, testing::Batch(it, 64, m.train.size()));
  const std::string dir = testing::TmpPath("scoring_model");
  tr.WriteCheckpoint(dir, 0, 0);
  const std::string folder = ResolveCheckpoint(dir, "--model");
  const std::string file = testing::TmpPath("serving_scoring.h5");
  ExportModel(folder, file);
  for (const std::string& model : {folder, file}) {
    CheckpointMeta ma, mb;
    auto full = LoadModel(model, &comm, &ma);
    auto scoring = LoadModel(model, &comm, &mb, /*scoring_only=*/true);
    EXPECT_EQ(mb.iter, ma.iter) << model;
    for (ScoreMode mode : {ScoreMode::kExact, ScoreMode::kLsh}) {
      Trainer::Scores sa, sb;
      full->Score(m.test, 0, 64, 5, &sa, 0, mode);
      scoring->Score(m.test, 0, 64, 5, &sb, 0, mode);
      EXPECT_EQ(sb.ids, sa.ids) << model << " mode " << static_cast<int>(mode);
      EXPECT_EQ(sb.logits, sa.logits) << model << " mode " << static_cast<int>(mode);
    }
    // The output layer's tables: the same build, the same buckets.
    LayerState ta, tb;
    full->backend().SaveLayer(1, kTables, &ta);
    scoring->backend().SaveLayer(1, kTables, &tb);
    EXPECT_EQ(tb.tables_plan.hash_seed, ta.tables_plan.hash_seed) << model;
    EXPECT_EQ(tb.tables_plan.table_seed, ta.tables_plan.table_seed) << model;
    EXPECT_EQ(tb.table_ids, ta.table_ids) << model;
    EXPECT_FALSE(ta.table_ids.empty()) << model;
    const EvalResult ea = full->Evaluate(m.test, 0, false);
    const EvalResult eb = scoring->Evaluate(m.test, 0, false);
    for (int k : {1, 3, 5}) EXPECT_EQ(eb.At(k), ea.At(k)) << model << " P@" << k;
    EXPECT_EQ(eb.loss, ea.loss) << model;
  }
  // The memory check counts no moments for scoring: two floats a parameter fewer.
  const ModelSpec spec = ModelSpec::Make(300, {24}, 150, {1.0, 1.0}, 0, 1, 8);
  BackendOptions train_opt, score_opt;
  score_opt.scoring_only = true;
  const int64_t params = 24 * 301 + 150 * 25;
  EXPECT_EQ(
      ShardStateNeed(spec, train_opt, false).bytes - ShardStateNeed(spec, score_opt, false).bytes,
      params * 8);
}

// The rounding export --dtype bf16 stores (FloatToBf16Nearest): to the nearest, ties to the
// even neighbour; infinities and NaN kept.
TEST(Export, Bf16RoundsToTheNearestTiesToEven) {
  const auto bits = [](float x) { return FloatToBf16Nearest(x); };
  EXPECT_EQ(bits(1.0f), 0x3f80);
  EXPECT_EQ(bits(-2.0f), 0xc000);
  EXPECT_EQ(bits(-0.0f), 0x8000);
  EXPECT_EQ(bits(1.0f + 1.0f / 256), 0x3f80);  // halfway, to the even 0x3f80
  EXPECT_EQ(bits(1.0f + 3.0f / 256), 0x3f82);  // halfway, to the even 0x3f82
  EXPECT_EQ(bits(1.0f + 1.5f / 256), 0x3f81);  // above halfway
  EXPECT_EQ(bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(bits(std::numeric_limits<float>::quiet_NaN()))));
  // NaNs whose payload sits in the low half (rounding alone would make them inf or carry
  // into the sign).
  for (uint32_t u : {0x7f800001u, 0x7fffffffu, 0xff800001u}) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    EXPECT_TRUE(std::isnan(Bf16ToFloat(bits(x)))) << std::hex << u;
  }
  EXPECT_EQ(bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  for (float x : {0.1f, -3.7e-5f, 12345.678f, 1e8f})
    EXPECT_LE(std::abs(Bf16ToFloat(bits(x)) - x), std::abs(x) / 256) << x;
}

// export --dtype bf16: half the bytes of the fp32 file (a sixth of the checkpoint's), read
// back (predict, eval, LoadModel) as the weights rounded to bfloat16, bit for bit; the top
// label of nearly every point is the fp32 model's.
TEST(Predict, ABf16ServingModelHoldsTheWeightsRoundedToBf16) {
  const Model& m = Trained();
  LocalCommunicator comm;
  const std::string folder = ResolveCheckpoint(m.dir, "--model");
  const std::string f32 = testing::TmpPath("serving32.h5"), f16 = testing::TmpPath("serving16.h5");
  ExportModel(folder, f32);
  ExportModel(folder, f16, /*bf16=*/true);
  ASSERT_TRUE(IsServingModel(f16));
  const auto bytes = [](const std::string& f) {
    return static_cast<double>(std::filesystem::file_size(f));
  };
  CheckpointMeta ma, mb;
  auto a = LoadModel(f32, &comm, &ma);
  // Two bytes saved a parameter (this small model's file is mostly its metadata; gcide8's:
  // 108.8 MB against 217.5).
  const double params = static_cast<double>(a->spec().NumParameters());
  std::printf("fp32 %.0f bytes, bf16 %.0f, %.0f parameters\n", bytes(f32), bytes(f16), params);
  EXPECT_GE(bytes(f32) - bytes(f16), 0.95 * 2 * params);
  auto b = LoadModel(f16, &comm, &mb);
  for (int l = 0; l < static_cast<int>(a->spec().layers.size()); ++l) {
    LayerState sa, sb;
    a->backend().SaveLayer(l, kWeights, &sa);
    b->backend().SaveLayer(l, kWeights, &sb);
    ASSERT_EQ(sa.w.size(), sb.w.size());
    int64_t wrong = 0;
    for (size_t i = 0; i < sa.w.size(); ++i)
      wrong += sb.w[i] != Bf16ToFloat(FloatToBf16Nearest(sa.w[i]));
    for (size_t i = 0; i < sa.b.size(); ++i)
      wrong += sb.b[i] != Bf16ToFloat(FloatToBf16Nearest(sa.b[i]));
    EXPECT_EQ(wrong, 0) << "layer " << l;
    int64_t rounded = 0;
    for (size_t i = 0; i < sa.w.size(); ++i) rounded += sb.w[i] != sa.w[i];
    EXPECT_GT(rounded, static_cast<int64_t>(sa.w.size() / 2)) << "the weights were not rounded";
  }
  // What other readers get (h5py, h5dump): HDF5's own conversion of the stored type to
  // floats gives the same values as dslide's widening.
  {
    h5::Handle f(H5Fopen(f16.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    h5::Handle g(H5Gopen2(f.get(), "layer2", H5P_DEFAULT), H5Gclose);
    ASSERT_TRUE(h5::HoldsBf16(g.get(), "weights"));
    std::vector<float> converted;
    std::vector<uint16_t> stored;
    h5::ReadRows(g.get(), f16, "weights", 0, -1, &converted);
    const h5::Handle t = h5::Bf16Type();
    h5::ReadRows(g.get(), f16, "weights", 0, -1, &stored, nullptr, t.get());
    ASSERT_EQ(converted.size(), stored.size());
    int64_t differ = 0;
    for (size_t i = 0; i < stored.size(); ++i) differ += converted[i] != Bf16ToFloat(stored[i]);
    EXPECT_EQ(differ, 0);
  }
  Trainer::Scores sa, sb;
  a->Score(m.test, 0, 256, 1, &sa);
  b->Score(m.test, 0, 256, 1, &sb);
  int agree = 0;
  for (int i = 0; i < 256; ++i) agree += sa.ids[i] == sb.ids[i];
  EXPECT_GE(agree, 250);
}

// eval --approximate: the top-k among the output layer's own selection is what the
// LSH-sampled evaluation scores (the same P@k), and a dense output layer's selection is every
// output (the exact lists: recall 1).
TEST(Evaluate, ApproximateTopKIsTheSampledEvaluationsAndItsRecallIsMeasured) {
  SetNumThreads(2);
  LocalCommunicator comm;
  const GenConfig g = testing::SyntheticShape(300, 1000, 10, 2, 2400);
  const Dataset train = GenerateSynthetic(g, 0, 2000), test = GenerateSynthetic(g, 2000, 400);
  for (double sparsity : {0.05, 1.0}) {
    SCOPED_TRACE(sparsity);
    TrainConfig cfg;
    cfg.hidden = {24};
    cfg.sparsity = {sparsity};
    cfg.min_negatives = 8;  // a budget of 50 of the 1,000 outputs, not the default floor's 256
    cfg.batch = 64;
    Trainer tr(cfg, &comm, MakeBackend(Device::kCpu, 0), 300, 1000);
    for (int it = 0; it < 60; ++it) tr.Step(train, testing::Batch(it, 64, train.size()));
    const ApproximateEval a = EvaluateApproximate(tr, test, 0, {1, 3, 5}, ScoreMode::kLsh);
    const EvalResult exact = tr.Evaluate(test, 0, false);
    const EvalResult sampled = tr.Evaluate(test, 0, /*sampled=*/true);
    std::printf("sparsity %g: recall@5 %.4f, approximate P@1 %.4f, exact %.4f\n", sparsity,
                a.recall, a.approx.At(1), exact.At(1));
    EXPECT_EQ(a.k, 5);
    for (int k : {1, 3, 5}) EXPECT_EQ(a.approx.At(k), sampled.At(k)) << "P@" << k;
    // Its exact part is Evaluate's (eval --approximate prints it in place of Evaluate's).
    for (int k : {1, 3, 5}) EXPECT_EQ(a.exact.At(k), exact.At(k)) << "P@" << k;
    EXPECT_DOUBLE_EQ(a.exact.loss, exact.loss);
    EXPECT_EQ(a.exact.points, exact.points);
    if (sparsity < 1) {
      EXPECT_GT(a.recall, 0.0);
      EXPECT_LT(a.recall, 1.0) << "50 candidates of 1,000 held every exact top-5 label";
    } else {
      EXPECT_EQ(a.recall, 1.0);
      for (int k : {1, 3, 5}) EXPECT_EQ(a.approx.At(k), exact.At(k)) << "P@" << k;
    }
  }
}

TEST(Predict, BadInputNamesFileAndLine) {
  const PredictConfig bad_value = Options(
      testing::WriteFile("predict_bad1.txt", "2 300 150\n 1:0.5\n 7:x\n"), "predict_bad.tsv");
  std::string msg = PredictError(bad_value);
  EXPECT_NE(msg.find("predict_bad1.txt:3: bad value"), std::string::npos) << msg;
  const PredictConfig other_features =
      Options(testing::WriteFile("predict_bad2.txt", "1 999 150\n 1:0.5\n"), "predict_bad.tsv");
  msg = PredictError(other_features);
  EXPECT_NE(msg.find("predict_bad2.txt:1: 999 features"), std::string::npos) << msg;
  // No partial output is left behind a failure (the bad value is on the second row, after
  // the temporary file was opened).
  EXPECT_FALSE(std::ifstream(bad_value.out).good());
  EXPECT_FALSE(std::ifstream(bad_value.out + ".tmp").good());
}

TEST(Evaluate, FullSoftmaxLossEqualsTheDenseTrainingLoss) {
  SetNumThreads(2);
  const GenConfig g = testing::SyntheticShape(200, 90, 8, 4, 300);
  const Dataset d = GenerateSynthetic(g, 0, 300);
  TrainConfig cfg;
  cfg.hidden = {16};
  cfg.sparsity = {1.0};
  LocalCommunicator comm;
  Trainer tr(cfg, &comm, MakeBackend(Device::kCpu, 0), 200, 90);
  for (int it = 0; it < 20; ++it) tr.Step(d, testing::Batch(it, 50, d.size()));
  std::vector<int64_t> all(d.size());
  for (int64_t i = 0; i < d.size(); ++i) all[i] = i;
  const double train_loss = tr.Loss(d, all);
  const EvalResult e = tr.Evaluate(d, 0, false);
  EXPECT_NEAR(e.loss, train_loss, 1e-4 * train_loss);
  EXPECT_TRUE(std::isnan(tr.Evaluate(d, 0, true).loss));  // LSH-sampled: no full normaliser
}

TEST(DatasetStream, ChunksEqualTheWholeFile) {
  const Model& m = Trained();
  const std::string text = testing::TmpPath("predict_input.txt");
  const std::string bin = testing::TmpPath("predict_input.dsb");
  WriteBinary(ReadXc(text), bin);
  for (const std::string& path : {text, bin}) {
    const Dataset whole = ReadXc(path);
    DatasetStream in(path);
    EXPECT_EQ(in.num_points(), m.test.size());
    Dataset chunk;
    std::vector<int64_t> idx;
    int64_t at = 0;
    while (in.Next(13, &chunk)) {
      idx.resize(chunk.size());
      for (int64_t i = 0; i < chunk.size(); ++i) idx[i] = at + i;
      EXPECT_TRUE(chunk == whole.Subset(idx)) << path << " at " << at;
      at += chunk.size();
    }
    EXPECT_EQ(at, m.test.size());
  }
}

}  // namespace
}  // namespace dslide
