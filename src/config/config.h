// The single source of dslide's options: names, defaults, help text and cross-option rules.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/ann_defaults.h"
#include "config/lsh_config.h"
#include "config/output_loss.h"

namespace dslide {

enum class Strategy { kSparse, kDenseModelParallel, kDataParallel };
enum class Device { kCpu, kGpu };
/// How output neurons are numbered from label ids (model/label_map.h); kAuto: kSpread for a
/// new model, a checkpoint's own order when resuming or scoring one.
enum class LabelOrder { kSpread, kIdentity, kAuto };
/// A new model's output biases: zeros, or from the label prior (LabelPriorBiases); kAuto:
/// the prior under the one-vs-rest loss, zeros under the softmax.
enum class OutputBias { kZero, kPrior, kAuto };
/// Which layers' lazy rows catch up the Adam steps they missed (--adam-catch-up, AdamCatchUp):
/// none, the first layer's (a row per input feature), or every layer's.
enum class CatchUpScope { kNone, kFirstLayer, kAll };
/// How the optimiser state is held: fp32 moments, or bfloat16 moments (--state).
enum class StateType { kFp32, kBf16 };

const char* ToString(HashFamily v);
/// "dwta" | "srp" | "wta" (| "auto" when allow_auto); throws dslide::Error naming option
/// --hash otherwise.
HashFamily ParseHashFamily(const std::string& name, bool allow_auto = false);
/// "vanilla" | "topk" | "threshold"; throws dslide::Error naming option --query otherwise.
QueryStrategy ParseQueryStrategy(const std::string& name);
const char* ToString(InsertPolicy v);
const char* ToString(QueryStrategy v);
const char* ToString(FillPolicy v);
const char* ToString(Strategy v);
const char* ToString(Device v);
const char* ToString(LabelOrder v);
const char* ToString(OutputBias v);
const char* ToString(CatchUpScope v);
const char* ToString(OutputLoss v);
/// "auto" | "softmax" | "one-vs-rest"; throws dslide::Error naming option --loss otherwise.
OutputLoss ParseOutputLoss(const std::string& name);
/// "auto" | "spread" | "identity"; throws dslide::Error naming option --label-order otherwise.
LabelOrder ParseLabelOrder(const std::string& name);

/// --sparsity auto: layers narrower than this are computed densely. Measured on 2 cores
/// with hidden width 128 (docs/user-guide.md, "Defaults and how they were chosen"): the sampled
/// step costs as much as the dense one at about 1,000 outputs and is 1.2-1.5x faster at 1,024,
/// 1.8-2.5x at 2,048, 2.6-2.8x at 4,096.
constexpr int64_t kAutoDenseBelow = 1024;
/// The floor of negatives: every sample's active set holds at least this many output
/// neurons beyond its own labels (split over ranks), whatever the budget. With an explicit
/// budget of 1-5 neurons, floors of 1 / 16 / 64 / 256 gave delicious P@1 0.13 / 0.49 /
/// 0.60 / 0.64 (dense 0.65) and bibtex 0.47 / 0.59 / 0.60 / 0.61.
constexpr int64_t kMinNegatives = 256;

/// A step's loss above this many times its running level (an exponential average, and at
/// least the loss of the first step) is taken as divergence.
constexpr double kDivergenceFactor = 10;

/// Early stopping when validating (docs/user-guide.md, "Early stopping"): the evaluations in a
/// row without a better validation P@1 after which training stops (--patience auto), the
/// length of a run left to --epochs auto (at most this many epochs, and at least this many
/// iterations), and the iterations between its evaluations (an epoch, within these bounds).
constexpr int64_t kAutoPatience = 5;
/// --keep-best with --checkpoint-dir: CHECKPOINT_DIR/best is written at most this many
/// seconds of training after a better model (Trainer::WriteBest), and always at the end of
/// the run, at a stop and before each checkpoint.
constexpr double kBestWriteSeconds = 30;
/// --lr auto: Adam's learning rate (kRerankLr for the network a reranker follows).
constexpr double kAutoLr = 1e-3;
/// --dropout: the largest rate accepted; auto's rate, when validating with --epochs auto on a
/// training set whose epoch is at most this many iterations (AutoDropout).
constexpr double kMaxDropout = 0.9;
constexpr double kAutoDropout = 0.2;
constexpr int64_t kAutoDropoutEpochIterations = 300;
/// --loss auto for a new model: one-vs-rest where the training points that have labels hold
/// at least this many on average (multi-label data, where each label is a yes/no question,
/// as the extreme-classification libraries train it) and the output layer is dense or
/// sampled with the log-Q correction (--log-q, which weighs each drawn negative by its
/// chance of being drawn); the softmax elsewhere: on single-label data, and on a sampled
/// layer without the correction (AutoLoss; docs/user-guide.md, "Output loss").
constexpr double kAutoOneVsRestLabels = 1.5;
/// --lr-decay: auto's factor, where the output layer is sampled, validation data is given
/// and an epoch is at most kAutoLrDecayEpochIterations iterations (early stopping then runs
/// through many epochs, over which the sampled layer's validation P@1 drifts from its best),
/// and --lr-decay-margin's default: the learning rate is multiplied by the factor at each
/// evaluation whose validation P@1 is more than the margin below the best so far
/// (docs/user-guide.md, "Learning-rate decay").
constexpr double kAutoLrDecay = 0.5;
constexpr int64_t kAutoLrDecayEpochIterations = 300;
constexpr double kLrDecayMargin = 0.005;
/// --lr-decay-patience's default: the evaluations in a row without a better validation P@1
/// before the rate may decay (a dip on the way up, one evaluation below the best, is not the
/// drift past the best).
constexpr int64_t kLrDecayPatience = 2;
/// --ensemble: the most members; auto's members, when validating with --epochs auto on at
/// most this many training points (AutoEnsemble).
constexpr int kMaxEnsemble = 64;
constexpr int kAutoEnsemble = 3;
constexpr int64_t kAutoEnsemblePoints = 25600;
/// --linear auto: the most weights ((features + 1) x labels, 256 MB of floats) of the linear
/// member it adds; --linear true: the most it accepts (8 GB).
constexpr int64_t kAutoLinearWeights = int64_t{1} << 26;
constexpr int64_t kMaxLinearWeights = int64_t{1} << 31;
/// --linear auto: the most labels x training nonzeros (one pass of the solver over every
/// label's problem; delicious 2.4e8 and debian-tags 6.5e8, solved in 3 and 9 s on 2
/// threads).
constexpr int64_t kAutoLinearWork = int64_t{1} << 31;
/// The linear member's share of an ensemble's mean probability, the networks' mean taking
/// the rest: chosen from kLinearShares on validation data, else kLinearShare (as much as the
/// networks together).
constexpr double kLinearShare = 0.5;
constexpr double kLinearShares[] = {0.0, 0.25, 0.5, 0.75, 1.0};
/// --rerank auto: the most training points x labels, the scores of the pass that lists each
/// training point's best labels (debian-deps 1.4e9 and wordnet-hypernyms 1.0e9, listed in
/// 2.5 and 2.3 s on 2 threads at 128 hidden neurons).
constexpr int64_t kAutoRerankScores = int64_t{1} << 32;
/// --lr auto and --patience auto of the network a reranker follows (docs/user-guide.md, "The
/// reranker"): it lists the candidates the reranker rescores, and a faster rate and a
/// shorter patience reach the mix's P@1 in about half the time.
constexpr double kRerankLr = 2e-3;
constexpr int64_t kRerankPatience = 3;
/// The reranker's lists (model/linear_ovr.h, TrainShortlist): each training point's this many
/// best labels by the network are its negatives' candidates; weights of magnitude at most
/// kRerankPrune are dropped.
constexpr int kRerankList = 30;
constexpr double kRerankPrune = 0.1;
/// The linear member's solver (model/linear_ovr.h): the libraries' defaults.
constexpr double kLinearC = 1.0;
constexpr double kLinearEps = 0.1;
constexpr int64_t kLinearMaxEpochs = 1000;
constexpr int64_t kAutoMaxEpochs = 100;
constexpr int64_t kAutoMinIterations = 5000;
constexpr int64_t kAutoEvalIterations = 100;
constexpr int64_t kAutoEvalIterationsMost = 500;

/// Options of `dslide train` (and the training part of `dslide bench`).
struct TrainConfig {
  std::string train_file;
  std::string test_file;
  std::string valid_file;     ///< validation data (evaluations during training, --keep-best)
  double valid_fraction = 0;  ///< or: this share of the training file, held back by --seed
  int keep_best = -1;         ///< restore the best validated model at the end (-1: when validating)
  std::vector<int64_t> hidden{128};  ///< hidden layer sizes
  /// Per layer, or one value for the output layer with dense hidden layers; empty: auto
  /// (ResolveAuto: dense below dense_below neurons, else a budget from the layer's size).
  std::vector<double> sparsity;
  int64_t dense_below = kAutoDenseBelow;       ///< auto: layers narrower than this are dense
  int64_t min_negatives = kMinNegatives;       ///< per sample, beyond its labels (all ranks)
  LabelOrder label_order = LabelOrder::kAuto;  ///< output neurons by label id
  OutputBias output_bias = OutputBias::kAuto;  ///< a new model's output biases
  /// The output layer's loss; kAuto: the softmax for a new model, a checkpoint's own loss
  /// when resuming or scoring one.
  OutputLoss loss = OutputLoss::kAuto;
  StateType state = StateType::kFp32;  ///< Adam's weight moments: fp32 or bf16
  LshConfig lsh;
  int batch = 256;
  double lr = 0;  ///< 0: auto (kAutoLr; kRerankLr where `reranked`)
  /// The first layer's rate as a multiple of lr (0: auto, FirstLayerLrScale of the training
  /// inputs).
  double first_lr_scale = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  /// When validating: the factor, in (0, 1], the learning rate (both layers' rates) is
  /// multiplied by at each evaluation whose validation P@1 is more than lr_decay_margin below
  /// the best so far, lr_decay_patience or more evaluations after it; 1: never. 0: auto
  /// (kAutoLrDecay where the output layer is sampled and an epoch is at most
  /// kAutoLrDecayEpochIterations iterations, else 1; the trainer resolves it, and to 1
  /// without validation data).
  double lr_decay = 0;
  double lr_decay_margin = kLrDecayMargin;
  int64_t lr_decay_patience = kLrDecayPatience;
  /// The chance that training drops a hidden activation (model/dropout.h); -1: auto
  /// (AutoDropout of the training set, which the trainer applies).
  double dropout = -1;
  /// Models trained one after another (seeds seed, seed + 1, ...) whose probabilities
  /// `predict` and `eval` average (train/ensemble.h); 0: auto (AutoEnsemble of the training
  /// set).
  int ensemble = 0;
  /// A linear one-vs-rest member beside an ensemble's networks (model/linear_ovr.h):
  /// 1 true, 0 false, -1 auto (AutoLinear).
  int linear = -1;
  /// A linear reranker of one network's lists (model/linear_ovr.h, TrainShortlist): 1 true,
  /// 0 false, -1 auto (AutoRerank).
  int rerank = -1;
  bool dense_adam = false;
  /// Not an option: set where a model is loaded for scoring alone (BackendOptions).
  bool scoring_only = false;
  CatchUpScope adam_catch_up = CatchUpScope::kFirstLayer;  // the lazy rows that catch up
  int64_t iterations = 0;                                  ///< 0: use epochs
  double epochs = 1.0;
  /// --epochs auto (the default): 1 epoch; when validating, until early stopping ends the run
  /// (at most kAutoMaxEpochs epochs or kAutoMinIterations iterations, the more).
  bool epochs_auto = true;
  /// Evaluations in a row without a better validation P@1 after which training stops (early
  /// stopping); 0: never; -1: auto (kAutoPatience when validating; kRerankPatience where
  /// `reranked`).
  int64_t patience = -1;
  /// Not an option: the network of `dslide train --rerank`, which its reranker follows
  /// (TrainEnsemble sets it); --lr auto and --patience auto take the reranker's values.
  bool reranked = false;
  int64_t eval_every = 0;   ///< 0: only at the end
  int64_t eval_points = 0;  ///< 0: the whole test file
  bool eval_sampled = false;
  int64_t log_every = 50;
  int threads = 0;  ///< 0: OpenMP default
  uint64_t seed = 1;
  Device device = Device::kCpu;
  int gpus_per_node = 0;  ///< --device gpu: GPUs shared by a node's ranks (0: one rank per GPU)
  Strategy strategy = Strategy::kSparse;
  std::string metrics_file;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  std::string resume_dir;
  int keep_checkpoints = 3;
  /// Also write the model when training ends (a checkpoint folder, for eval/predict/export).
  std::string save_dir;
  /// Write the LSH tables into checkpoints (exact resume); without them a resume rebuilds
  /// them from the weights.
  bool checkpoint_tables = true;
  /// Stop when a step's training loss exceeds this factor times its running level (0: off).
  double divergence_factor = kDivergenceFactor;
  /// Set by a resume: settings left to auto were taken from the checkpoint.
  bool settings_from_checkpoint = false;

  /// Per-layer sparsity for `num_layers` layers (hidden..., output), expanded from `sparsity`.
  /// Requires resolved settings (ResolveAuto).
  std::vector<double> LayerSparsity(size_t num_layers) const;
  bool sparsity_auto() const { return sparsity.empty(); }
  bool validating() const { return !valid_file.empty() || valid_fraction > 0; }
  /// Validation sets the run's length (--epochs auto, no --iterations): early stopping ends
  /// it, the run the auto rules of dropout, ensembles and the reranker look for.
  bool stops_early() const { return validating() && epochs_auto && iterations == 0; }
  /// Cross-option rules; throws dslide::Error naming the option.
  void Validate() const;
};

/// Options of `dslide gen`.
struct GenConfig {
  std::string shape;  ///< "" or a named paper shape
  int64_t points = 0, test_points = 0, features = 0, labels = 0;
  int nnz = 0, labels_per_point = 0;
  double noise = 0.2;
  double zipf = 1.0;
  /// Number labels by descending popularity (label 0 the most frequent), as word tasks number
  /// words; otherwise a seeded affine map spreads the popular labels over the id range.
  bool popular_first = false;
  uint64_t seed = 1;
  std::string out;
  /// Applies the named shape's sizes to the fields still 0, then the generic defaults.
  void ResolveShape();
  void Validate() const;
};

/// Approximate top-k for `dslide eval` and `dslide predict`: which candidates are scored
/// (off: every output; ann: an HNSW graph of the output rows, train/output_index.h; lsh, eval
/// only: the output layer's own LSH selection, a measurement) and the graph's settings.
struct AnnConfig {
  std::string approximate = "off";
  int m = kAnnM;               ///< links per row of the graph
  int build_ef = kAnnBuildEf;  ///< candidate list while building
  int ef = kAnnEf;             ///< candidate list per query: the rows scored per point
  int tail = kAnnTail;         ///< rows drawn per block for the softmax normaliser beyond them
  std::string file;            ///< the index read from here when it fits the model, else written
};

/// Options of `dslide eval`.
struct EvalConfig {
  std::string model_dir, test_file;
  std::vector<int> k{1, 3, 5};
  int64_t points = 0;  ///< 0: every test point
  int threads = 0;
  /// Also score approximately (ann or lsh): the P@k, the recall of the exact top-k, the
  /// seconds of each.
  AnnConfig ann;
};

/// Options of `dslide export` and `dslide convert`.
struct ExportConfig {
  std::string model_dir, out;
  std::string dtype = "fp32";  ///< fp32 | bf16: how the weights are stored
};
struct ConvertConfig {
  std::string in, out;
};

/// Options of `dslide predict`.
struct PredictConfig {
  std::string model_dir, input, out;
  int top_k = 5;
  std::string format = "tsv";  ///< tsv | jsonl
  int threads = 0;
  int64_t chunk = 4096;  ///< input points read and scored at a time
  AnnConfig ann;         ///< approximate top-k (off or ann)
};

/// Options of `dslide bench`: train's, with bench's own defaults where they differ.
struct BenchConfig {
  std::string shape = "amazon-670k";
  int64_t points = 0;
  TrainConfig train = Defaults();
  int64_t features = 0;  ///< 0: the shape's
  int64_t labels = 0;    ///< 0: the shape's
  int nnz = 0;           ///< 0: the shape's

  static TrainConfig Defaults() {
    TrainConfig t;
    t.iterations = 400;
    t.lr = 1e-3;
    t.eval_every = 100;
    t.eval_points = 1000;
    t.log_every = 100;
    return t;
  }
};

/// Every `dslide train` option with its value in `cfg` as one JSON object
/// ({"train":"a.txt","lr":0.001,"hidden":"128","sparsity":"auto",...}), from the same table
/// as the parser and --help.
std::string SettingsJson(const TrainConfig& cfg);

/// Parses argv of one subcommand (argv[0] is the subcommand name). Returns false and fills
/// `help` when --help was given. Throws dslide::Error on unknown options and bad values.
bool ParseTrain(int argc, const char* const* argv, TrainConfig* cfg, std::string* help);
/// `dslide train`'s options from (name, value) pairs, each read as `--name=value` on the
/// command line (a switch, such as dense-adam, takes true or false): the same table, parser,
/// rules and messages as ParseTrain, for callers that hold options as keywords (the Python
/// package). Throws dslide::Error naming the option.
void ParseTrainOptions(const std::vector<std::pair<std::string, std::string>>& options,
                       TrainConfig* cfg);
/// The --help text of `dslide train`.
std::string TrainHelp();
bool ParseGen(int argc, const char* const* argv, GenConfig* cfg, std::string* help);
bool ParseEval(int argc, const char* const* argv, EvalConfig* cfg, std::string* help);
bool ParseExport(int argc, const char* const* argv, ExportConfig* cfg, std::string* help);
bool ParseConvert(int argc, const char* const* argv, ConvertConfig* cfg, std::string* help);
bool ParseBench(int argc, const char* const* argv, BenchConfig* cfg, std::string* help);
bool ParsePredict(int argc, const char* const* argv, PredictConfig* cfg, std::string* help);

}  // namespace dslide
