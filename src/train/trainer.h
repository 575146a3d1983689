// The trainer loop (docs/architecture.md): layer-synchronous forward and backward
// over a rank's shards, with the per-layer exchanges through the Communicator. The same loop
// runs on 1 rank (LocalCommunicator) and P ranks (MPI), on any LayerBackend. Trainer's
// methods: the step in trainer.cpp, checkpoints in trainer_checkpoint.cpp, scoring and
// evaluation in trainer_scoring.cpp, Run in training_loop.cpp; RunTraining in run_training.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/layer_backend.h"
#include "common/fault.h"
#include "config/config.h"
#include "data/dataset.h"
#include "dist/communicator.h"
#include "io/checkpoint.h"
#include "lsh/rebuild_schedule.h"
#include "model/model.h"
#include "train/evaluator.h"
#include "train/output_index.h"
#include "train/run_events.h"
#include "train/snapshot_exchange.h"
#include "train/step_strategy.h"
#include "train/table_plans.h"

namespace dslide {

/// How Trainer::Score chooses the output neurons it scores.
enum class ScoreMode {
  kExact,  ///< every output neuron
  kLsh,    ///< the output layer's own selection (its LSH candidates filled to the budget)
  kIndex,  ///< the candidates of the output index (BuildOutputIndex): approximate top-k
};

class Trainer {
 public:
  /// `comm` and the datasets must outlive the trainer. Every rank constructs it alike.
  /// From `train`: a new model's output biases (--output-bias prior; a resumed run's come
  /// from its checkpoint) and the first layer's rate (--first-lr-scale auto). None given:
  /// zeros and lr, as for a model a checkpoint will replace or that only scores.
  Trainer(const TrainConfig& cfg, Communicator* comm, std::unique_ptr<LayerBackend> backend,
          int64_t input_dim, int64_t output_dim, const Dataset* train = nullptr);

  /// Collective: one optimiser step on the given training points; returns the batch's mean
  /// loss (over points with labels), identical on every rank. Reads the loss now (with the
  /// steps queued before): QueueStep, then TakeSteps.
  double Step(const Dataset& data, const std::vector<int64_t>& points);
  /// Collective: one optimiser step whose loss and non-finite checks are read later, by
  /// TakeSteps (with one rank they wait in the backend; with P ranks they are known now).
  void QueueStep(const Dataset& data, const std::vector<int64_t>& points);
  /// The steps queued since the last call, oldest first: iteration, mean loss, and the
  /// layers (bit l: layer l) whose update went non-finite. CheckStep each, in order.
  struct StepLoss {
    int64_t iter;
    double loss;
    uint64_t bad_layers;
  };
  std::vector<StepLoss> TakeSteps();
  /// Throws dslide::Error naming the iteration (and the layer) when the step's loss or an
  /// update's weights went NaN or infinite.
  void CheckStep(const StepLoss& s);
  /// Collective: forward and backward without the optimiser step: the gradients wait in
  /// the backend (SaveLayer with kGradient). Returns the mean loss. Active sets depend on the
  /// current iteration only.
  double ForwardBackward(const Dataset& data, const std::vector<int64_t>& points);
  /// Collective: the mean loss of the batch with the active sets and dropout masks
  /// ForwardBackward would use.
  double Loss(const Dataset& data, const std::vector<int64_t>& points);

  /// Collective: P@k on the first `max_points` points of `test` (all when <= 0), exact
  /// (every output neuron scored) or LSH-sampled; exact evaluation also gives the
  /// loss over every output neuron (softmax or one-vs-rest).
  EvalResult Evaluate(const Dataset& test, int64_t max_points, bool sampled,
                      const std::vector<int>& k = {1, 3, 5});

  /// Collective: exact scores of the points [b0, b0 + count) of `data`: the k best outputs
  /// of each point over all ranks (ids and logits, best first, ties to the smaller id; -1
  /// where there are fewer), their probabilities (softmax: exp(z - log sum_j exp(z_j)) over
  /// every output neuron; one-vs-rest: sigmoid(z)), and each point's loss over every output
  /// neuron (0 for a point without labels).
  struct Scores {
    std::vector<int32_t> ids;   ///< count x k label ids (not neurons), best first
    std::vector<float> logits;  ///< count x k
    std::vector<double> probs;  ///< count x k
    std::vector<double> loss;   ///< count
  };
  /// `row0` is the index of data's first point in the whole input: scoring a point depends
  /// only on its index and the block it is scored in (blocks of EvalBlock() points from 0,
  /// as Evaluate scores them), also where hidden layers are sampled.
  /// With a mode other than kExact, only some output neurons are scored (exactly): kLsh the
  /// output layer's own selection (its LSH candidates filled to the budget, as training
  /// selects), kIndex the output index's candidates (BuildOutputIndex first); the k best
  /// among them, the probabilities normalised over them alone (a softmax model's are then
  /// above the exact ones), no loss (NaN). Without `probabilities` (a caller that reads the
  /// ids alone), an approximate mode gathers no normaliser (kIndex does not estimate its
  /// part beyond the candidates), and probs is left empty; the ids and logits are the same.
  /// Without `loss` (a caller that reads the lists alone) the exact mode leaves the loss NaN
  /// and sums a normaliser only where a softmax model's probabilities need it.
  void Score(const Dataset& data, int64_t b0, int64_t count, int k, Scores* out, int64_t row0 = 0,
             ScoreMode mode = ScoreMode::kExact, bool probabilities = true, bool loss = true);
  /// Collective: indexes this rank's shard of the output layer for ScoreMode::kIndex
  /// (output_index.h), from the weights it holds now (an index of earlier weights is
  /// dropped). With a `cache` path (this rank's file when there are several; the
  /// caller names them apart), the index written there is read when it indexes these
  /// weights, else built and written there (a warning on stderr says why, where the file
  /// indexed other weights; a file that is no index is an error, not replaced). Returns the
  /// seconds the slowest rank took.
  double BuildOutputIndex(const OutputIndexOptions& options, const std::string& cache = "");
  /// The output index (null before BuildOutputIndex).
  const OutputIndex* output_index() const { return index_.get(); }
  /// The output layer's loss (resolved).
  OutputLoss Loss() const { return cfg_.loss; }
  /// Points per block of Evaluate.
  int64_t EvalBlock() const { return std::max<int64_t>(cfg_.batch, 64); }

  /// Collective: the whole run of `dslide train`: iterations or epochs, progress on rank 0,
  /// metrics lines, evaluations during training on `valid` (or, without validation data,
  /// on `test`), the best validated model restored at the end (--keep-best), then one
  /// score of `test`. Returns the final evaluation (of test when given). Its lines, records
  /// and warnings go to `events` (null: none; --metrics is written either way).
  EvalResult Run(const Dataset& train, const Dataset* valid, const Dataset* test,
                 RunEvents* events = nullptr);

  /// Whether Run has passed its checks (the --resume checkpoint fits, the --metrics file and
  /// the folders of checkpoints and --save are usable) and begun to train: an error thrown
  /// before is about the run's inputs, after it a failure of training.
  bool training() const { return training_; }

  /// The configuration with every "auto" resolved (ResolveAuto).
  const TrainConfig& config() const { return cfg_; }

  const ModelSpec& spec() const { return spec_; }
  LayerBackend& backend() { return *backend_; }
  Communicator& comm() { return *comm_; }
  int64_t iteration() const { return iter_; }
  const PhaseTimes& phases() const { return phases_; }
  /// Collective: writes a checkpoint of the current state to
  /// CheckpointFolder(dir, iter) (via a .tmp folder), recording the data position
  /// (epoch, pos), and prunes dir to the newest `keep`.
  void SaveCheckpoint(const std::string& dir, int64_t epoch, int64_t pos, int keep);
  /// A model of an earlier iteration, checkpointed beside the moments of now: the layers'
  /// weights (--save's kept model) or the --keep-best snapshot's (a best model written after
  /// its iteration; its tables then rebuilt on loading), with the rate multiplier of its
  /// iteration. Adam's steps past it are written as it.
  struct Earlier {
    int64_t iter;
    double lr_scale;
    bool snapshot;
  };
  /// Collective: the same checkpoint into `folder` itself (replaced atomically); with
  /// `earlier`, of that model.
  void WriteCheckpoint(const std::string& folder, int64_t epoch, int64_t pos,
                       const Earlier* earlier = nullptr);
  /// Collective: restores a checkpoint folder written by any number of ranks; returns its
  /// metadata (iteration, data position). Throws when it does not fit this configuration.
  CheckpointMeta LoadCheckpoint(const std::string& folder);
  /// Collective: the weights of a serving model (ExportModel's file), this rank's rows of
  /// every layer; a sampled layer's tables built from them. Returns its metadata.
  CheckpointMeta LoadServingModel(const std::string& path);

  /// (iteration, result) of every evaluation Run made, in order.
  const std::vector<std::pair<int64_t, EvalResult>>& evals() const { return evals_; }
  /// Layer l's local output (active ids, activations) of the last forward pass (a host
  /// view of the backend's buffer).
  const BatchRows& output(int l) { return *backend_->HostRows(l, Rows::kOutput, Access::kRead); }
  /// Per-iteration wall times (ms) of every step run so far (on an asynchronous backend,
  /// each step of a window between reads gets the window's mean).
  const std::vector<double>& step_ms() const { return step_ms_; }
  /// Wall and CPU seconds (all threads) of the evaluations of the last Run.
  double eval_wall_seconds() const { return eval_wall_s_; }
  double eval_cpu_seconds() const { return eval_cpu_s_; }
  /// What the steps so far moved between the backend's device and the host (table rebuilds
  /// included, evaluations not).
  const DeviceTraffic& step_traffic() const { return step_traffic_; }

 private:
  /// Score's kIndex candidates: per point of the output layer's input rows, the index's
  /// candidates scored, their k best (global neuron ids) and this shard's softmax
  /// statistics: over them, and under the softmax the rest of the normaliser estimated
  /// (OutputIndex::TailSum, from `stream` and the point) where `tail_sum`.
  void ScoreIndexCandidates(int64_t count, int k, int64_t stream, bool tail_sum,
                            std::vector<int32_t>* ids, std::vector<float>* sc, SoftmaxStats* st);
  /// What the step strategy may use of this trainer (StepContext).
  StepContext StepContextOf();
  /// The batch through the layers (through the output layer too with `through_output`);
  /// with `dropout` (training), each hidden layer's output dropped out before it moves on.
  void ForwardHidden(const Dataset& data, const std::vector<int64_t>& points,
                     const BatchLabels* labels, int64_t stream, bool through_output,
                     const DropoutStep* dropout = nullptr);
  /// The softmax phases on the output layer: with one rank the whole normaliser is local
  /// and the statistics stay in the backend; with P, one all-reduce of each rank's max and
  /// sums (CombineSoftmax) between the phases.
  void Softmax(const BatchLabels& labels);
  /// The batch's mean loss from the last Softmax (with one rank, the backend's one read-back
  /// of the step).
  double MeanLoss(const BatchLabels& labels);
  /// The dropout of the training step on `points` at this iteration (rate 0: none).
  DropoutStep DropoutOf(const std::vector<int64_t>& points) const;
  /// Forward, loss and backward; with `step`, each layer is updated inside its backward.
  /// With `queue` and one rank, the loss is queued in the backend (read by TakeSteps) and
  /// none is returned.
  std::optional<double> Backpropagate(const Dataset& data, const std::vector<int64_t>& points,
                                      const AdamStep* step, bool queue = false);
  /// The layers' backward from the output layer's delta down (and with `step` their
  /// updates), the input gradients chained or reduce-scattered between them.
  void BackwardPass(const AdamStep* step, const DropoutStep* dropout);

  /// The checkpoint metadata of the current state, or of the model of iteration `iter` at
  /// rate multiplier `lr_scale`, at data position (epoch, pos).
  CheckpointMeta MetaAt(int64_t iter, int64_t epoch, int64_t pos, double lr_scale) const;
  /// Restores the newest intact checkpoint of --resume (skipping damaged ones with a
  /// warning, agreed by every rank); returns its metadata, and its folder in `folder`.
  CheckpointMeta ResumeNewestIntact(std::string* folder);
  /// About how many bytes one checkpoint of this rank's shard takes.
  int64_t CheckpointBytes() const;
  /// Collective: the start of a resumed run on `points` training points: restores the newest
  /// intact checkpoint of --resume (its folder in `from`), says so on rank 0, and with
  /// `keep_best` lets the best model before the interruption compete on when
  /// CHECKPOINT_DIR/best holds it on every rank (else selection starts afresh). Returns the
  /// checkpoint's metadata.
  CheckpointMeta ResumeRun(int64_t points, bool keep_best, std::string* from);
  /// Collective: storage problems show before training, not at the first checkpoint: the
  /// folders of --checkpoint-dir and --save must take a checkpoint of every shard, and --save
  /// (its trailing slashes dropped) must replace no folder but a checkpoint. `total`: the
  /// iterations of the run. Rank 0 claims --checkpoint-dir (CheckpointDirLock: no run at the
  /// same time, no other run's checkpoints unless `resumed_from`, the checkpoint loaded, is
  /// one of them).
  void CheckStorage(int64_t total, const std::string& resumed_from);
  /// Collective, with P > 1 ranks: throws unless every rank sees rank 0's files in `dir`.
  void CheckSharedDir(const std::string& dir, const char* option);

  // Run's pieces (training_loop.cpp), over the state of the run in progress (RunState).
  struct RunState;
  struct StepLossCheck;
  /// The settings of a run on `train`: sizes, the iterations, what is evaluated and how
  /// often, the most-popular-label baselines.
  void PlanRun(RunState& r);
  /// The order of epoch `e`'s points (a seeded shuffle).
  void Shuffle(RunState& r, int64_t e);
  /// The state of a run resumed from --resume, or nothing for a fresh run.
  void Resume(RunState& r);
  /// An evaluation during training (of the validation data, else the test data): its line
  /// and record, and the best model so far kept with --keep-best.
  void EvaluateDuringRun(RunState& r);
  /// After an evaluation that found no better model: --lr-decay's step, where the validation
  /// P@1 `p1` is more than the margin below the best and the best is --lr-decay-patience
  /// evaluations old (rank 0's word, said and recorded).
  void DecayLearningRate(RunState& r, double p1);
  /// After an evaluation: whether early stopping ends the run here (--patience), said and
  /// recorded; the run's length is cut to this iteration.
  bool StopEarly(RunState& r);
  /// The steps' losses, read at the logging cadence and before anything is written or
  /// evaluated (with P ranks, every step): their running mean for the progress line, and the
  /// divergence check, step by step in order. Returns whether a step diverged; *step holds
  /// that step's (or else the last step's) iteration, loss and reference level.
  bool ReadSteps(RunState& r, StepLossCheck* step);
  /// A divergence ends the run: its message names the last good checkpoint.
  [[noreturn]] void StopDiverged(RunState& r, const StepLossCheck& d);
  /// A checkpoint of this iteration (remembered in saved_iter), its size and time on the
  /// progress output and in --metrics.
  void SaveDuringRun(RunState& r);
  /// --keep-best: the best validated weights replace the last ones (once the last state is
  /// checkpointed); returns the iteration of the weights held.
  int64_t KeepSelected(RunState& r);
  /// --save: the model of iteration model_iter (the weights held now) to its folder.
  void SaveModel(RunState& r, int64_t model_iter);
  /// Collective: the best model not yet in CHECKPOINT_DIR/best written there (from its
  /// snapshot where steps followed it); nothing when it is there or there is no folder.
  void WriteBest();
  /// A stop signal that came before the first step ends the run, writing nothing.
  void StopBeforeFirstStep(RunState& r);
  /// A stop signal `sig` after a step ends the run with its checkpoint and model.
  [[noreturn]] void StopAfterStep(RunState& r, int64_t sig);
  /// One iteration: the step queued, then what falls on it (progress, evaluation,
  /// checkpoint, a stop).
  void Iterate(RunState& r);
  /// The run's end: the last evaluation and checkpoint, the selected model kept and saved,
  /// the one score of the test data. Returns the final evaluation.
  EvalResult FinishRun(RunState& r);

  /// Keeps (in host memory) the weights and biases of the model, or puts them back.
  void SnapshotWeights();
  void RestoreWeights();

  TrainConfig asked_;               // as given: "auto" where the user left a setting to it
  TrainConfig cfg_;                 // resolved
  Communicator* comm_;              // every rank: progress, metrics, data-parallel all-reduce
  LocalCommunicator replica_comm_;  // data-parallel: each rank holds the whole model
  std::unique_ptr<StepStrategy> strategy_;  // --strategy: how a step computes its update
  Communicator* model_comm_;   // the ranks that share one model (comm_ or replica_comm_)
  SnapshotExchange exchange_;  // hidden layers' activations and input gradients over model_comm_
  std::unique_ptr<LayerBackend> backend_;
  std::unique_ptr<OutputIndex> index_;  ///< the output layer's shard indexed (ScoreMode::kIndex)
  ModelSpec spec_;
  RebuildSchedule schedule_;
  TablePlans tables_;   // the sparse layers' table builds (seeds, counts)
  LayerState staging_;  // a checkpoint's copy of one layer, set aside by CheckStorage
  int64_t iter_ = 0;
  bool training_ = false;  // Run has passed its checks (training())
  PhaseTimes phases_;
  std::vector<double> step_ms_;
  DeviceTraffic step_traffic_;
  std::vector<std::pair<int64_t, EvalResult>> evals_;
  double eval_wall_s_ = 0, eval_cpu_s_ = 0;  // Run's evaluations
  // Per layer: how many entries each (rank, sample) segment of its gathered input holds (the
  // batch itself lives in the backend's buffers).
  std::vector<std::vector<int64_t>> segs_;
  SoftmaxStats stats_;              // the softmax statistics all-reduced over P ranks
  std::vector<SoftmaxPart> parts_;  // their per-sample partials on the wire
  // Steps not yet read by TakeSteps: iteration, and the loss and non-finite layers when known
  // at once (else queued in the backend).
  struct Pending {
    StepLoss step;
    bool queued;
  };
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point window_start_;  // the first unread step's start
  // --keep-best: the best validated model so far (its weights and biases, on this rank's
  // shard), its iteration and validation P@1 (-1: none).
  std::vector<std::vector<float>> best_w_, best_b_;
  // CHECKPOINT_DIR/best lags the snapshot by at most kBestWriteSeconds of training: a better
  // model is written at once where the last write of one (or the run's start) is that long
  // ago, else with the next checkpoint, at the end of the run or at its stop (WriteBest),
  // with the data position and rate of its iteration.
  bool best_unwritten_ = false;
  int64_t best_epoch_ = 0, best_pos_ = 0;
  double best_lr_scale_ = 1.0;
  std::chrono::steady_clock::time_point best_written_at_;  // rank 0's clock
  int64_t best_iter_ = -1;
  double best_p1_ = -1;
  double best_loss_ = std::numeric_limits<double>::quiet_NaN();  // its validation loss
  // The learning rate's multiplier so far (--lr-decay; kept in checkpoints as lr_scale).
  double lr_scale_ = 1.0;
  // The advice a divergence message ends with (DivergenceHint of the training data).
  std::string divergence_hint_ = "Try a smaller --lr";
  // This run's identity in its checkpoints (drawn by rank 0 at construction, the same on
  // every rank).
  uint64_t run_id_ = 0;
  uint64_t data_digest_ = 0;  ///< the training data of Run (Dataset::Digest; 0: none yet)
  int64_t data_points_ = 0;
  CheckpointDirLock checkpoint_lock_;  ///< rank 0's hold on --checkpoint-dir during Run
  // Where Run's lines, records and warnings go (its caller's; outside Run, NoEvents).
  RunEvents* events_ = NoEvents();
  FaultPlan fault_ = FaultPlan::FromEnv();  // DSLIDE_FAULT (failure tests)
};

/// Feature values above this magnitude are far outside what float arithmetic in a network
/// tolerates: a divergence on such data is blamed on the data, and loading warns.
constexpr float kLargeFeatureValue = 1e6f;
/// Learning rates above this (ten times the default) can diverge on any data.
constexpr double kLargeLearningRate = 1e-2;
/// The advice after a divergence: the file and line of the largest feature value when it is
/// above kLargeFeatureValue (and a smaller learning rate too when `lr` is above
/// kLargeLearningRate), else a smaller learning rate than `lr`.
std::string DivergenceHint(const Dataset& train, double lr);

/// Reads the training/test files, trains as configured, returns the final evaluation.
/// The entry point of `dslide train` for any communicator; the run's lines, records and
/// warnings go to `events` (null: none).
EvalResult RunTraining(const TrainConfig& cfg, Communicator* comm, RunEvents* events);

}  // namespace dslide
