// gen, train, eval and bench: option parsing, data, and the trainer, for any communicator.
#include "app/commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "app/console_events.h"
#include "app/peers.h"
#include "common/error.h"
#include "common/memory_limit.h"
#include "common/parallel.h"
#include "common/process_clock.h"
#include "common/stop_signal.h"
#include "config/config.h"
#include "data/synthetic.h"
#include "devices/backend_factory.h"
#include "io/checkpoint.h"
#include "io/output_path.h"
#include "train/auto_settings.h"
#include "train/ensemble.h"
#include "train/metrics.h"
#include "train/predict.h"
#include "train/run_events.h"
#include "train/run_training.h"
#include "train/trainer.h"

namespace dslide::app {

namespace {

bool Root(Communicator* comm) { return comm->rank() == 0; }

double Seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::llround(q * static_cast<double>(v.size() - 1)))];
}

}  // namespace

int Gen(int argc, const char* const* argv, Communicator* comm) {
  GenConfig cfg;
  std::string help;
  if (!ParseGen(argc, argv, &cfg, &help)) {
    if (Root(comm)) std::printf("%s", help.c_str());
    return 0;
  }
  if (!Root(comm)) return 0;  // one writer
  const auto t0 = std::chrono::steady_clock::now();
  CheckGeneratedDataFits(cfg, cfg.points, cfg.test_points);
  const Dataset train = GenerateSynthetic(cfg, 0, cfg.points);
  const Dataset test = GenerateSynthetic(cfg, cfg.points, cfg.test_points);
  WriteXc(train, cfg.out + ".train.txt");
  WriteXc(test, cfg.out + ".test.txt");
  std::printf(
      "wrote %s.train.txt (%lld points) and %s.test.txt (%lld points): %lld features, "
      "%lld labels, %.1f non-zeros and %.2f labels per point; most-popular-label P@1 "
      "on test %.4f (%.1fs)\n",
      cfg.out.c_str(), (long long)train.size(), cfg.out.c_str(), (long long)test.size(),
      (long long)cfg.features, (long long)cfg.labels,
      static_cast<double>(train.feat_ids.size()) / train.size(),
      static_cast<double>(train.labels.size()) / train.size(), MostPopularLabelP1(train, test),
      Seconds(t0));
  return 0;
}

int Train(int argc, const char* const* argv, Communicator* comm) {
  TrainConfig cfg;
  std::string help;
  if (!ParseTrain(argc, argv, &cfg, &help)) {
    if (Root(comm)) std::printf("%s", help.c_str());
    return 0;
  }
  CheckOutputPath(
      "--metrics", cfg.metrics_file,
      {{"--train", cfg.train_file}, {"--test", cfg.test_file}, {"--valid", cfg.valid_file}});
  InstallStopHandlers();  // main's, again after MPI's start
  // One rank stops reading its data at a signal; P ranks read on and agree at the first step.
  SetStopDuringLoad(comm->size() == 1);
  // With P ranks a rank's SIGTERM may be the launcher ending a job whose other rank failed:
  // no rank promises anything at the signal; rank 0 says what happens once all agree, and
  // alone says that a second signal ends the job.
  if (comm->size() > 1) {
    SetStopNotice("");
    SetSecondSignalNotice(Root(comm));
  }
  ConsoleEvents console;
  try {
    // --ensemble auto and --rerank auto from the training file's header (its points and
    // labels), read once and only where validation sets the run's length, which both rules
    // ask for; a pipe or FIFO, which one look would consume, trains one model alone.
    int64_t file_points = 0, file_labels = 0;
    std::error_code ec;
    if (cfg.stops_early() && (cfg.ensemble == 0 || cfg.rerank < 0) &&
        std::filesystem::is_regular_file(cfg.train_file, ec)) {
      const DatasetStream header(cfg.train_file);
      file_points = header.num_points();
      file_labels = header.num_labels();
    }
    int members = cfg.ensemble;
    if (members == 0) {
      members = file_points > 0 ? AutoEnsembleOfFile(cfg, file_points) : 1;
      if (members > 1 && Root(comm))
        console.Line(
            Format("ensemble of %d models* (--ensemble auto: early stopping on a "
                   "training set of at most %lld points)\n",
                   members, (long long)kAutoEnsemblePoints));
    }
    DSLIDE_CHECK(cfg.linear != 1 || members > 1,
                 "option --linear true: the linear member joins an ensemble's networks, and "
                 "--ensemble auto chose one model (it trains 3 when validating with --epochs "
                 "auto on at most ",
                 kAutoEnsemblePoints, " training points); give --ensemble 2 or more");
    DSLIDE_CHECK(cfg.rerank != 1 || members == 1,
                 "option --rerank true: the reranker rescores one network's lists, and "
                 "--ensemble auto chose ",
                 members, " models; give --ensemble 1");
    const bool rerank = AutoRerank(cfg, members, file_points, file_labels);
    if (rerank && cfg.rerank < 0 && Root(comm))
      console.Line(
          "reranker* (--rerank auto: early stopping, at least --dense-below labels): the "
          "network's lists rescored by a linear model once it is trained\n");
    if (members > 1 || rerank)
      RunEnsemble(cfg, members, comm, &console);
    else
      RunTraining(cfg, comm, &console);
  } catch (const Stop&) {
    throw;  // a stop (signal, divergence) has written its own record
  } catch (const std::exception& e) {
    // The run's metrics end with why it failed (this rank's error; rank 0 keeps the file).
    if (Root(comm) && !cfg.metrics_file.empty()) {
      try {
        MetricsFile metrics(cfg.metrics_file, &console);
        JsonObject o;
        o.Add("event", "error")
            .Add("rank", comm->rank())
            .Add("message", dynamic_cast<const std::bad_alloc*>(&e) != nullptr
                                ? std::string("out of memory (an allocation failed)")
                                : std::string(e.what()));
        metrics.Write(o);
      } catch (const std::exception&) {
        // The metrics file itself may be what failed; the error is reported either way.
      }
    }
    throw;
  }
  return 0;
}

namespace {

/// The metadata of the model in `folder` (named `model` in messages), checked against the
/// test set of `dslide eval`: its inputs and outputs, and labels enough for every --k.
CheckpointMeta EvalModelMeta(const EvalConfig& cfg, const Dataset& test, const std::string& folder,
                             const std::string& model) {
  CheckpointMeta meta = ReadModelMeta(folder);
  DSLIDE_CHECK(test.num_features == meta.input_dim && test.num_labels == meta.out_dims.back(),
               cfg.test_file, ": ", test.num_features, " features and ", test.num_labels,
               " labels, ", model, " has ", meta.input_dim, " inputs and ", meta.out_dims.back(),
               " outputs");
  for (int k : cfg.k)
    DSLIDE_CHECK(k <= meta.out_dims.back(), "option --k: P@", k, " needs at least ", k,
                 " labels, the model (", folder, ") has ", meta.out_dims.back());
  return meta;
}

/// `dslide eval` of an ensemble's folder: the P@k of the members' mean probabilities.
int EvalEnsemble(const EvalConfig& cfg, const std::vector<std::string>& members, Dataset test,
                 Communicator* comm) {
  if (cfg.points > 0 && cfg.points < test.size()) test = test.Head(cfg.points);
  std::vector<std::unique_ptr<Trainer>> models;
  for (const std::string& folder : members) {
    CheckpointMeta meta = EvalModelMeta(cfg, test, folder, "the model (" + folder + ")");
    models.push_back(LoadModel(folder, comm, &meta, /*scoring_only=*/true));
  }
  double share = 0;
  const std::unique_ptr<LinearOvr> linear =
      ReadEnsembleLinear(cfg.model_dir, test.num_features, test.num_labels, &share);
  const auto t0 = std::chrono::steady_clock::now();
  PrecisionCounter counter(cfg.k);
  const int k = counter.max_k();
  std::vector<int32_t> ids;
  std::vector<double> probs;
  EnsembleTopK(models, linear.get(), share, test, 0, k, &ids, &probs);
  for (int64_t i = 0; i < test.size(); ++i)
    counter.Add(ids.data() + i * k, k, test.Labels(i), test.NumLabels(i));
  const EvalResult r = counter.Result();
  if (Root(comm)) {
    if (linear && linear->shortlist())
      std::printf(
          "eval network and reranker (%s/member-1, %s/linear; the reranker's share %g%s) "
          "on %d rank(s):",
          cfg.model_dir.c_str(), cfg.model_dir.c_str(), share, share > 0 ? "" : ": left out",
          comm->size());
    else
      std::printf(
          "eval ensemble of %zu%s (%s/member-1 ...; the mean of their probabilities%s) on %d "
          "rank(s):",
          models.size(), linear ? " and the linear member" : "", cfg.model_dir.c_str(),
          linear ? Format(", the linear member's share %g%s", share, share > 0 ? "" : ": left out")
                       .c_str()
                 : "",
          comm->size());
    for (int kk : cfg.k) std::printf(" P@%d %.4f", kk, r.At(kk));
    std::printf(" | %lld points in %.1fs\n", (long long)r.points, Seconds(t0));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int Eval(int argc, const char* const* argv, Communicator* comm) {
  EvalConfig cfg;
  std::string help;
  if (!ParseEval(argc, argv, &cfg, &help)) {
    if (Root(comm)) std::printf("%s", help.c_str());
    return 0;
  }
  SetNumThreads(cfg.threads);
  const std::vector<std::string> members = EnsembleMembers(cfg.model_dir);
  CheckEnsembleScoredExactly(cfg.model_dir, members.size(), cfg.ann.approximate);
  const std::string folder = members.empty() ? ResolveModel(cfg.model_dir, "--model") : "";
  Dataset test = ReadXc(cfg.test_file);
  DSLIDE_CHECK(test.size() > 0, cfg.test_file, ": no points to score (the header says 0)");
  if (!members.empty()) return EvalEnsemble(cfg, members, std::move(test), comm);
  CheckpointMeta meta = EvalModelMeta(cfg, test, folder, "the model");
  std::unique_ptr<Trainer> model = LoadModel(folder, comm, &meta, /*scoring_only=*/true);
  Trainer& trainer = *model;
  // With --approximate the exact scores come with the approximate ones (scored once).
  const bool approximate = cfg.ann.approximate != "off";
  const ScoreMode mode = cfg.ann.approximate == "lsh" ? ScoreMode::kLsh : ScoreMode::kIndex;
  double index_seconds = 0;
  if (approximate && mode == ScoreMode::kIndex) index_seconds = BuildOutputIndex(trainer, cfg.ann);
  const ApproximateEval a =
      approximate ? EvaluateApproximate(trainer, test, cfg.points, cfg.k, mode) : ApproximateEval{};
  const EvalResult r =
      approximate ? a.exact : trainer.Evaluate(test, cfg.points, /*sampled=*/false, cfg.k);
  if (Root(comm)) {
    std::printf("eval %s (iteration %lld, written by %d rank(s)) on %d rank(s):", folder.c_str(),
                (long long)meta.iter, meta.ranks, comm->size());
    for (int k : cfg.k) std::printf(" P@%d %.4f", k, r.At(k));
    std::printf(" | loss %.4f | %lld points in %.1fs\n", r.loss, (long long)r.points, r.seconds);
    std::fflush(stdout);
  }
  if (approximate && Root(comm)) {
    if (mode == ScoreMode::kIndex)
      std::printf("approximate (HNSW output index, m %d, ef %d, %s in %.1fs):", cfg.ann.m,
                  cfg.ann.ef, trainer.output_index()->loaded() ? "read" : "built", index_seconds);
    else
      std::printf("approximate (the output layer's LSH candidates):");
    for (int k : cfg.k) std::printf(" P@%d %.4f", k, a.approx.At(k));
    std::printf(" | recall@%d of the exact top %d %.4f | %.2fs against exact %.2fs (%.1fx)\n", a.k,
                a.k, a.recall, a.approx_seconds, a.exact_seconds,
                a.approx_seconds > 0 ? a.exact_seconds / a.approx_seconds : 0.0);
    std::fflush(stdout);
  }
  return 0;
}

int Predict(int argc, const char* const* argv, Communicator* comm) {
  PredictConfig cfg;
  std::string help;
  if (!ParsePredict(argc, argv, &cfg, &help)) {
    if (Root(comm)) std::printf("%s", help.c_str());
    return 0;
  }
  CheckOutputPath("--out", cfg.out, {{"--input", cfg.input}});
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t rows = dslide::Predict(cfg, comm);
  if (Root(comm)) {
    std::printf("predict: %lld rows of %s -> %s (top %d, %s) in %.1fs\n", (long long)rows,
                cfg.input.c_str(), cfg.out.c_str(), cfg.top_k, cfg.format.c_str(), Seconds(t0));
    std::fflush(stdout);
  }
  return 0;
}

int Export(int argc, const char* const* argv, Communicator* comm) {
  ExportConfig cfg;
  std::string help;
  if (!ParseExport(argc, argv, &cfg, &help)) {
    if (Root(comm)) std::printf("%s", help.c_str());
    return 0;
  }
  if (!Root(comm)) return 0;
  const size_t members = EnsembleMembers(cfg.model_dir).size();
  DSLIDE_CHECK(members == 0, "option --model: ", cfg.model_dir, " holds ",
               EnsembleFolderWhat(cfg.model_dir, members), "; export writes one network (--model ",
               cfg.model_dir, "/member-K, to --out OUT/member-K: predict and eval average the ",
               "members of a folder of them)");
  const std::string folder = ResolveCheckpoint(cfg.model_dir, "--model");
  CheckOutputPath("--out", cfg.out, {});
  const int64_t params = ExportModel(folder, cfg.out, cfg.dtype == "bf16");
  std::printf("export: %s -> %s (%lld parameters, %s)\n", folder.c_str(), cfg.out.c_str(),
              (long long)params, cfg.dtype == "bf16" ? "bfloat16" : "float32");
  return 0;
}

int Convert(int argc, const char* const* argv, Communicator* comm) {
  ConvertConfig cfg;
  std::string help;
  if (!ParseConvert(argc, argv, &cfg, &help)) {
    if (Root(comm)) std::printf("%s", help.c_str());
    return 0;
  }
  if (!Root(comm)) return 0;
  CheckOutputPath("--out", cfg.out, {{"--in", cfg.in}});
  // Best of three loads each, so that both sides are measured with a warm page cache.
  Dataset text, bin;
  double text_s = 1e30, bin_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    text = ReadXc(cfg.in);
    text_s = std::min(text_s, Seconds(t0));
  }
  WriteBinary(text, cfg.out);
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    bin = ReadXc(cfg.out);
    bin_s = std::min(bin_s, Seconds(t0));
  }
  DSLIDE_CHECK(bin == text, cfg.out, ": read back differs from ", cfg.in);
  std::printf(
      "convert: %s -> %s | %lld points | text read %.3f s, binary load %.3f s (best of 3): "
      "%.1fx faster\n",
      cfg.in.c_str(), cfg.out.c_str(), (long long)text.size(), text_s, bin_s,
      text_s / std::max(bin_s, 1e-9));
  return 0;
}

namespace {

/// bench's data: the files read, or the shape generated in memory.
struct BenchData {
  bool files = false;
  std::string name;  // the training file, or the shape
  Dataset train, test;
  double load_s = 0, baseline = 0;
};

BenchData LoadBenchData(const BenchConfig& cfg, int ranks) {
  BenchData d;
  d.files = cfg.train.train_file != "(generated)";
  Dataset& train = d.train;
  Dataset& test = d.test;
  auto t0 = std::chrono::steady_clock::now();
  if (d.files) {
    train = ReadXc(cfg.train.train_file);
    test = ReadXc(cfg.train.test_file);
    DSLIDE_CHECK(test.num_features == train.num_features && test.num_labels == train.num_labels,
                 "the test file's header (", test.num_features, " features, ", test.num_labels,
                 " labels) does not match the training file's (", train.num_features, ", ",
                 train.num_labels, ")");
  } else {
    GenConfig gen;
    gen.shape = cfg.shape;
    gen.points = cfg.points;
    gen.features = cfg.features;
    gen.labels = cfg.labels;
    gen.nnz = cfg.nnz;
    gen.seed = cfg.train.seed;
    gen.ResolveShape();
    gen.test_points =
        std::min<int64_t>(gen.test_points, std::max<int64_t>(cfg.train.eval_points, 1));
    gen.out = "(memory)";
    gen.Validate();
    // The model first: data generated for a model that cannot be held is time lost (a
    // minute and more for 10^9 labels). Weights and both Adam moments, a rank's share;
    // BuildTrainer checks the exact figure.
    std::string hidden;
    const int64_t params = NetworkParameters(cfg.train.hidden, gen.features, gen.labels, &hidden);
    const int64_t per_param = cfg.train.state == StateType::kBf16 ? 8 : 12;
    try {
      CheckMemoryFits(params / std::max(1, ranks) * per_param,
                      detail::Concat("the model of --hidden ", hidden, ", ", gen.features,
                                     " features (--features) and ", gen.labels,
                                     " labels (--labels), a rank's share of its ", params,
                                     " parameters with their Adam moments,"),
                      "needs at least");
    } catch (const OutOfMemory& e) {
      throw Error(e.what());
    }
    CheckGeneratedDataFits(gen, gen.points, gen.test_points);
    train = GenerateSynthetic(gen, 0, gen.points);
    test = GenerateSynthetic(gen, gen.points, gen.test_points);
  }
  d.load_s = Seconds(t0);
  d.baseline = MostPopularLabelP1(train, test, cfg.train.eval_points);
  d.name = d.files ? cfg.train.train_file : cfg.shape;
  return d;
}

/// [iteration, P@1, training seconds so far (the steps' own times, evaluations excluded)]
/// of each evaluation. The evaluations come in iteration order: one running sum of the step
/// times.
std::string BenchCurve(const Trainer& trainer) {
  const auto& ms = trainer.step_ms();
  std::string curve = "[";
  double train_s = 0;
  size_t summed = 0;
  for (const auto& e : trainer.evals()) {
    const size_t n = std::min(ms.size(), static_cast<size_t>(std::max<int64_t>(e.first, 0)));
    for (; summed < n; ++summed) train_s += ms[summed] / 1e3;
    curve += (curve.size() > 1 ? ",[" : "[") + std::to_string(e.first) + "," +
             std::to_string(e.second.At(1)) + "," + std::to_string(train_s) + "]";
  }
  return curve + "]";
}

/// Per phase of the step, ms per iteration.
JsonObject BenchPhases(const PhaseTimes& ph, double iters) {
  JsonObject phase;
  phase.Add("query", ph.query * 1e3 / iters)
      .Add("forward", ph.forward * 1e3 / iters)
      .Add("backward", ph.backward * 1e3 / iters)
      .Add("update", ph.update * 1e3 / iters)
      .Add("backward_update", ph.backward_update * 1e3 / iters)
      .Add("rebuild", ph.rebuild * 1e3 / iters)
      .Add("comm", ph.comm * 1e3 / iters);
  return phase;
}

/// Per kind of exchange: ms per iteration in it, and the network's part (after SettleCalls).
JsonObject BenchCommByKind(Communicator* comm, double iters) {
  JsonObject by_kind;
  for (Traffic t : {Traffic::kActivations, Traffic::kInputGrads, Traffic::kSoftmax,
                    Traffic::kGradients, Traffic::kControl}) {
    const CommSplit& k = comm->Settled(t);
    if (k.calls == 0) continue;
    JsonObject e;
    e.Add("ms", k.seconds * 1e3 / iters).Add("network_ms", k.network * 1e3 / iters);
    by_kind.AddRaw(ToString(t), e.str());
  }
  return by_kind;
}

/// What bench measured around the run, for its JSON line.
struct BenchFigures {
  double iters = 0, mean = 0, wall = 0, train_cpu = 0, rss = 0, init_rss = 0;
  double comm_ms = 0, net_ms = 0, wall_ms = 0;
  int64_t sent_bytes = 0;
  EvalResult before, after;
};

/// The peers' figures for a generated shape (bench/peers.tsv) and the ratios to them, where
/// --features and --labels left the shape's sizes as they are.
void AddPeers(const BenchConfig& cfg, const BenchFigures& f, JsonObject* o) {
  if (cfg.train.train_file != "(generated)" || cfg.features != 0 || cfg.labels != 0) return;
  for (const PeerFigure& p : PeerFiguresOf(cfg.shape)) {
    o->Add(p.key, p.value);
    if (p.key == "slide_ref_ms_per_iter") o->Add("speedup_vs_slide_ref", p.value / f.mean);
    if (p.key == "pytorch_dense_ms_per_iter") o->Add("speedup_vs_pytorch_dense", p.value / f.mean);
    if (p.key == "slide_ref_peak_rss_mb") o->Add("memory_vs_slide_ref", p.value / f.rss);
  }
}

/// bench's JSON line: the settings, step times, phases, traffic, memory and P@1, and the
/// peers' figures for a generated shape.
std::string BenchJson(const BenchConfig& cfg, const BenchData& d, Trainer& trainer,
                      Communicator* comm, const BenchFigures& f) {
  const TrainConfig& tc = cfg.train;
  const auto& ms = trainer.step_ms();
  const TrainConfig& rc = trainer.config();  // "auto" resolved
  const LayerSpec& out_layer = trainer.spec().layers.back();
  const LayerSlots slots = OutputSlots(trainer.spec(), rc.min_negatives, d.train);
  double local_weights = 0, local_biases = 0;
  for (const LayerSpec& l : trainer.spec().layers) {
    local_weights += static_cast<double>(l.local()) * static_cast<double>(l.in_dim);
    local_biases += static_cast<double>(l.local());
  }
  const double local_params = local_weights + local_biases;
  const double model_bytes = local_params * (tc.state == StateType::kBf16 ? 8.0 : 12.0);
  const JsonObject phase = BenchPhases(trainer.phases(), f.iters);
  const JsonObject by_kind = BenchCommByKind(comm, f.iters);
  JsonObject o;
  o.Add("shape", d.files ? std::string("(file)") : cfg.shape)
      .Add("data", d.name)
      .Add("iterations", static_cast<int64_t>(f.iters))
      .Add("batch", tc.batch)
      .Add("hidden", tc.hidden[0])
      .Add("sparsity", out_layer.sparsity)
      .Add("budget", ModelSpec::Budget(out_layer.sparsity, out_layer.out_dim))
      .Add("min_negatives", out_layer.dense() ? int64_t{0} : rc.min_negatives)
      .Add("mean_negatives", slots.mean_negatives)
      .Add("hash", ToString(rc.lsh.family))
      .Add("K", rc.lsh.k)
      .Add("L", rc.lsh.l)
      .Add("query", ToString(rc.lsh.query))
      .Add("lsh_share", rc.lsh.lsh_share)
      .Add("lr", rc.lr)
      .Add("ms_per_iter", Median(ms))
      .Add("ms_per_iter_p10", Percentile(ms, 0.1))
      .Add("ms_per_iter_p90", Percentile(ms, 0.9))
      .Add("ms_per_iter_max", Percentile(ms, 1.0))
      .Add("ms_per_iter_mean", f.mean)
      .Add("samples_per_s", f.iters * tc.batch / f.wall)
      .AddRaw("phase_ms", phase.str())
      .Add("parameters", trainer.spec().NumParameters())
      .Add("bytes_sent_per_iter", static_cast<double>(f.sent_bytes) / f.iters)
      // A Horovod-style step all-reduces one fp32 gradient per parameter.
      .Add("dense_allreduce_bytes", 4.0 * static_cast<double>(trainer.spec().NumParameters()))
      .Add("wall_ms_per_iter", f.wall_ms)
      // This process's CPU time (all threads) per iteration, and per wall second: the cores
      // it used (evaluations left out).
      .Add("cpu_ms_per_iter", f.train_cpu * 1e3 / f.iters)
      .Add("cores_used", f.train_cpu / f.wall)
      .Add("comm_ms_per_iter", f.comm_ms)
      .Add("comm_network_ms_per_iter", f.net_ms)
      .Add("comm_wait_ms_per_iter", std::max(0.0, f.comm_ms - f.net_ms))  // rounding: never < 0
      .Add("comm_share", f.comm_ms / f.wall_ms)
      .Add("network_share", f.net_ms / f.wall_ms)
      .AddRaw("comm_by_kind", by_kind.str())
      .Add("peak_rss_mb", f.rss)
      .Add("rss_after_init_mb", f.init_rss)
      .Add("state_mb", static_cast<double>(trainer.backend().Info().state_bytes) / (1 << 20))
      .Add("state", tc.state == StateType::kBf16 ? "bf16" : "fp32")
      // The GPU backend's device memory (zeros on the CPU backend): what this process's
      // buffers held at the peak, and the device's memory in use at the end of the run.
      .Add("device_peak_mb",
           static_cast<double>(trainer.backend().Info().device_peak_bytes) / (1 << 20))
      .Add("device_used_mb",
           static_cast<double>(trainer.backend().Info().device_used_bytes) / (1 << 20))
      // Per parameter of this rank's shard: the model (weights with their moments, biases
      // with theirs), and everything the backend holds (also gradient buffers and tables).
      .Add("model_bytes_per_param", model_bytes / local_params)
      .Add("state_bytes_per_param",
           static_cast<double>(trainer.backend().Info().state_bytes) / local_params)
      // Between the backend's device and the host, per step (zeros on the CPU backend).
      .Add("h2d_bytes_per_iter", static_cast<double>(trainer.step_traffic().h2d_bytes) / f.iters)
      .Add("d2h_bytes_per_iter", static_cast<double>(trainer.step_traffic().d2h_bytes) / f.iters)
      .Add("syncs_per_iter", static_cast<double>(trainer.step_traffic().syncs) / f.iters)
      .Add("launches_per_iter", static_cast<double>(trainer.step_traffic().launches) / f.iters)
      .Add("p_at_1_start", f.before.At(1))
      .Add("p_at_1", f.after.At(1))
      .Add("p_at_3", f.after.At(3))
      .Add("p_at_5", f.after.At(5))
      .AddRaw("p_at_1_by_iter", BenchCurve(trainer))
      .Add("eval_points", f.after.points)
      .Add("most_popular_label_p_at_1", d.baseline)
      .Add("p_at_1_over_baseline", d.baseline > 0 ? f.after.At(1) / d.baseline : 0.0)
      .Add("ranks", comm->size())
      .Add("threads", NumThreads())
      .Add("device", ToString(tc.device))
      .Add("strategy", ToString(tc.strategy));
  AddPeers(cfg, f, &o);
  return o.str();
}

}  // namespace

int Bench(int argc, const char* const* argv, Communicator* comm) {
  BenchConfig cfg;
  std::string help;
  if (!ParseBench(argc, argv, &cfg, &help)) {
    if (Root(comm)) std::printf("%s", help.c_str());
    return 0;
  }
  SetNumThreads(cfg.train.threads);
  DSLIDE_CHECK(cfg.train.ensemble <= 1, "option --ensemble ", cfg.train.ensemble,
               ": bench measures one model's training (dslide train --ensemble N trains N)");
  CheckOutputPath("--metrics", cfg.train.metrics_file,
                  {{"--train", cfg.train.train_file}, {"--test", cfg.train.test_file}});
  // bench trains as train does (checkpoints too, with --checkpoint-dir): a stop signal ends it
  // after its step, with its checkpoint, as it ends a training run.
  InstallStopHandlers();
  if (comm->size() > 1) {
    SetStopNotice("");
    SetSecondSignalNotice(Root(comm));
  }
  const BenchData d = LoadBenchData(cfg, comm->size());
  if (Root(comm)) {
    std::printf(
        "bench: %s %s: %lld train / %lld test points in %.1fs; "
        "most-popular-label P@1 %.4f\n",
        d.files ? "read" : "generated shape", d.name.c_str(), (long long)d.train.size(),
        (long long)d.test.size(), d.load_s, d.baseline);
    std::fflush(stdout);
  }
  TrainConfig tc = cfg.train;
  const std::unique_ptr<Trainer> model =
      BuildTrainer(tc, comm, d.train.num_features, d.train.num_labels, d.name, &d.train);
  Trainer& trainer = *model;
  BenchFigures f;
  f.init_rss = PeakRssMb();
  f.before = trainer.Evaluate(d.test, tc.eval_points, tc.eval_sampled);
  comm->ResetStats();
  const auto t_train = std::chrono::steady_clock::now();
  const double cpu0 = ProcessCpuSeconds();
  ConsoleEvents console;
  f.after = trainer.Run(d.train, nullptr, &d.test, &console);
  f.train_cpu = ProcessCpuSeconds() - cpu0 - trainer.eval_cpu_seconds();
  double eval_s = 0;
  for (const auto& e : trainer.evals()) eval_s += e.second.seconds;
  f.wall = Seconds(t_train) - eval_s;
  const auto& ms = trainer.step_ms();
  f.iters = static_cast<double>(ms.size());
  for (double m : ms) f.mean += m;
  f.mean /= f.iters;
  f.rss = PeakRssMb();
  comm->Allreduce(&f.rss, 1, ReduceOp::kMax, Traffic::kControl);
  const TrafficStats tot = comm->Total();
  f.sent_bytes = tot.bytes - comm->Stats(Traffic::kEval).bytes;
  // The exchanges' time per iteration, and the network's part of it (SettleCalls: per call,
  // the least time over the ranks); the rest waited for the slowest rank. Shares are of the
  // wall time per iteration (table rebuilds included, evaluations not).
  comm->SettleCalls();
  f.comm_ms = (tot.seconds - comm->Stats(Traffic::kEval).seconds) * 1e3 / f.iters;
  f.net_ms = comm->Settled().network * 1e3 / f.iters;
  f.wall_ms = f.wall * 1e3 / f.iters;
  if (Root(comm)) {
    std::printf("%s\n", BenchJson(cfg, d, trainer, comm, f).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace dslide::app
