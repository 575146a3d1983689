// The options of `dslide train` (and of bench, which trains): the table, what is parsed
// from text, the rules they must meet, and the settings echo; the enums' names.
#include "config/config.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>

#include "common/error.h"
#include "config/option_table.h"

namespace po = boost::program_options;

namespace dslide {

const char* ToString(HashFamily v) {
  switch (v) {
    case HashFamily::kSrp:
      return "srp";
    case HashFamily::kWta:
      return "wta";
    case HashFamily::kDwta:
      return "dwta";
    case HashFamily::kAuto:
      return "auto";
  }
  return "?";
}
const char* ToString(InsertPolicy v) { return v == InsertPolicy::kFifo ? "fifo" : "reservoir"; }
const char* ToString(QueryStrategy v) {
  switch (v) {
    case QueryStrategy::kVanilla:
      return "vanilla";
    case QueryStrategy::kTopK:
      return "topk";
    case QueryStrategy::kThreshold:
      return "threshold";
    case QueryStrategy::kAuto:
      return "auto";
  }
  return "?";
}
const char* ToString(FillPolicy v) {
  return v == FillPolicy::kStop ? "stop" : v == FillPolicy::kBatch ? "batch" : "random";
}
const char* ToString(Strategy v) {
  switch (v) {
    case Strategy::kSparse:
      return "sparse";
    case Strategy::kDenseModelParallel:
      return "dense-model-parallel";
    case Strategy::kDataParallel:
      return "data-parallel";
  }
  return "?";
}
const char* ToString(Device v) { return v == Device::kGpu ? "gpu" : "cpu"; }
const char* ToString(OutputBias v) {
  return v == OutputBias::kPrior ? "prior" : v == OutputBias::kZero ? "zero" : "auto";
}
const char* ToString(OutputLoss v) {
  return v == OutputLoss::kSoftmax     ? "softmax"
         : v == OutputLoss::kOneVsRest ? "one-vs-rest"
                                       : "auto";
}
const char* ToString(CatchUpScope v) {
  return v == CatchUpScope::kNone ? "none" : v == CatchUpScope::kAll ? "all" : "first-layer";
}

const char* ToString(LabelOrder v) {
  return v == LabelOrder::kSpread ? "spread" : v == LabelOrder::kIdentity ? "identity" : "auto";
}

using namespace options;  // NOLINT: this file is the option table's

/// The options of `dslide train`, one row each: the parser, the INI reader and --help take
/// them from here, and so does SettingsJson (the run's settings in the metrics' start
/// event). A default is the bound field's initialiser (config.h); options given as text
/// (lists, enums, auto) are parsed by FinishTrain and shown from the fields they fill.
void options::AddTrainOptions(OptionTable& t, TrainConfig* c) {
  t.Path("train", &c->train_file, "training file (XC format, plain or gzip, or .dsb)");
  t.Path("test", &c->test_file,
         "test file, scored once at the end (on the --keep-best model when validating)");
  t.Path("valid", &c->valid_file,
         "validation file: evaluations during training score it and --keep-best selects on it");
  t.Field("valid-fraction", &c->valid_fraction,
          "or hold back this share of the training file for validation (points chosen by --seed)");
  t.Text(
      "keep-best", [c] { return c->keep_best < 0 ? "auto" : Text(c->keep_best == 1); },
      "true|false: end with the model of the best validation P@1 (saved as "
      "CHECKPOINT_DIR/best); auto: true when validating",
      "true");
  t.Text(
      "hidden", [c] { return Join(c->hidden); },
      "hidden layer sizes, comma separated (e.g. 128 or 256,128), each in [1, 2^24)");
  t.Text(
      "sparsity", [c] { return c->sparsity.empty() ? "auto" : Join(c->sparsity); },
      "auto: layers narrower than --dense-below are dense, wider ones get a budget and LSH "
      "settings from their size (printed at the start); or the share of a layer's neurons "
      "active per sample in (0,1]: one value per layer (hidden..., output), or one value for "
      "the output layer with dense hidden layers");
  t.Field("dense-below", &c->dense_below,
          "--sparsity auto: layers with fewer neurons are computed densely");
  t.Field("min-negatives", &c->min_negatives,
          "every sample's active set keeps at least this many neurons beyond its own labels "
          "(over all ranks), raising the budget where its labels would crowd them out");
  t.Text(
      "label-order", [c] { return ToString(c->label_order); },
      "auto|spread|identity: how the output neurons, which ranks own in contiguous blocks, are "
      "numbered from label ids. spread: a fixed permutation (label l -> l*a mod n, a golden-ratio "
      "stride) deals consecutive labels, often sorted by frequency or topic, evenly to the ranks, "
      "so P ranks sample like one; identity: neuron = label. auto: spread for a new model, a "
      "checkpoint's own order when resuming (identity for checkpoints that recorded none)");
  t.Text(
      "output-bias", [c] { return ToString(c->output_bias); },
      "auto|zero|prior: a new model's output biases. zero: all 0; prior: under the softmax, "
      "the log of each label's share of the training labels against the uniform share (a "
      "point's labels sharing it equally, add-one smoothed) where that is below 0, else 0, so "
      "that the labels rarer than uniform start below the others; under one-vs-rest, the "
      "log-odds of the share of training points with the label (add-one smoothed), the bias "
      "of a model that knows nothing else. auto: prior under one-vs-rest, zero under the "
      "softmax (docs/user-guide.md, \"Output biases\", measures them). A resumed run keeps its "
      "checkpoint's");
  t.Text(
      "loss", [c] { return ToString(c->loss); },
      "auto|softmax|one-vs-rest: the output layer's loss. softmax: one distribution over the "
      "labels, the target spread over a point's labels; one-vs-rest: a logistic loss per "
      "output neuron (does the point have this label?), as extreme-classification libraries "
      "train; predictions' scores are then each label's own probability (docs/user-guide.md, "
      "\"Output loss\", measures both). auto: for a new model, one-vs-rest where the training "
      "points hold at least 1.5 labels on average (multi-label data) and the output layer is "
      "dense or log-Q corrected (--log-q), else softmax; a resumed or loaded model keeps its "
      "checkpoint's");
  t.Text(
      "state", [c] { return c->state == StateType::kBf16 ? "bf16" : "fp32"; },
      "fp32|bf16: how Adam's moments of the weights are held. bf16: in bfloat16 with "
      "stochastic rounding, 8 bytes per weight with its fp32 value in place of 12 (biases keep "
      "fp32 moments); checkpoints store the moments as floats, so a run resumes under either");
  t.Text(
      "hash", [c] { return ToString(c->lsh.family); },
      "LSH family: auto|dwta|srp|wta (auto: from the layer's size)");
  t.Text(
      "K", [c] { return AutoOr(c->lsh.k); }, "hash functions per table (auto or a number)");
  t.Text(
      "L", [c] { return AutoOr(c->lsh.l); }, "hash tables (auto or a number)");
  t.Field("bucket-size", &c->lsh.bucket_capacity, "bucket capacity, in [1, 2^20]");
  t.Field("bin-size", &c->lsh.bin_size, "WTA/DWTA bin size");
  t.Text(
      "insert", [c] { return ToString(c->lsh.insert); }, "full-bucket insertion: reservoir|fifo");
  t.Text(
      "query", [c] { return ToString(c->lsh.query); },
      "query strategy: auto|vanilla|topk|threshold");
  t.Text(
      "lsh-share", [c] { return c->lsh.lsh_share == 0 ? "auto" : Text(c->lsh.lsh_share); },
      "share in (0,1] of a sample's slots beyond its labels that LSH candidates may take; "
      "the fill supplies the rest (auto: from the layer's size)");
  t.Field("threshold", &c->lsh.threshold, "minimum collisions for --query threshold, in [1, 1024]");
  t.Text(
      "fill", [c] { return ToString(c->lsh.fill); },
      "when candidates are fewer than the budget: batch (the batch's labels on this rank, "
      "then one uniform random set per batch and rank, shared by its samples)|random "
      "(uniform random neurons per sample)|stop");
  t.Field("rebuild-n0", &c->lsh.rebuild_n0, "first table rebuild after this many iterations");
  t.Field("rebuild-lambda", &c->lsh.rebuild_lambda,
          "rebuild interval growth: the t-th interval is n0*exp(lambda*t)");
  t.Field("rehash-every", &c->lsh.rehash_every,
          "draw new hash functions every N iterations (0: never)");
  t.Field("lsh-mips", &c->lsh.mips,
          "index neurons by inner product (MIPS transform) rather than by angle");
  t.Field("log-q", &c->lsh.log_q,
          "true|false: in training, subtract from each negative logit of a sampled output layer "
          "the log of its chance of being drawn (the LSH pool's share kept, a batch-mate's label "
          "by its frequency, the uniform draws), so that the sampled softmax estimates the full "
          "one, and under one-vs-rest each drawn negative's push is weighed by the inverse of "
          "its chance: labels seldom drawn are pushed down about as much as a dense layer "
          "pushes them (docs/user-guide.md, \"Sampling and the update\"); false: the "
          "uncorrected sampled loss (and --loss auto keeps a sampled layer on the softmax)");
  t.Field("batch", &c->batch, "batch size, in [1, 2^20]");
  t.Text(
      "lr", [c] { return c->lr == 0 ? "auto" : Text(c->lr); },
      "Adam learning rate (auto: 1e-3; 2e-3 for the network a reranker follows, --rerank)");
  t.Text(
      "first-lr-scale", [c] { return c->first_lr_scale == 0 ? "auto" : Text(c->first_lr_scale); },
      "the first layer's learning rate as a multiple of --lr, in [1e-3, 1e3] (auto: max(1, 6 / "
      "the training inputs' mean L1 norm): Adam moves each weight a batch touches by about the "
      "rate, and a hidden unit's input by about the rate times the input's L1 norm, so inputs of "
      "one or a few features (word ids, item ids) get a first layer that moves per step as a "
      "bag of words' does; inputs with a mean L1 norm of 6 or more keep --lr");
  t.Text(
      "lr-decay", [c] { return c->lr_decay == 0 ? "auto" : Text(c->lr_decay); },
      "when validating: the factor, in (0, 1], the learning rate is multiplied by at each "
      "evaluation whose validation P@1 is more than --lr-decay-margin below the best so far, "
      "--lr-decay-patience or more evaluations after it (1: never). auto: 0.5 where the output "
      "layer is sampled and an epoch is at most 300 batches, else 1: over the many epochs "
      "early stopping then runs, a sampled output layer's validation P@1 drifts down from its "
      "best while its loss still falls, and the smaller steps hold it (docs/user-guide.md, "
      "\"Learning-rate decay\")");
  t.Field("lr-decay-margin", &c->lr_decay_margin,
          "how far, in [0, 1], the validation P@1 must be below the best for --lr-decay to "
          "act");
  t.Field("lr-decay-patience", &c->lr_decay_patience,
          "evaluations in a row, in [1, 2^40], without a better validation P@1 before "
          "--lr-decay may act (1: at the first)");
  t.Text(
      "dropout", [c] { return c->dropout < 0 ? "auto" : Text(c->dropout); },
      "the chance, in [0, 0.9], that training drops a hidden layer's activation (the kept "
      "ones scaled by 1 / (1 - it); evaluation and prediction drop none). auto: 0.2 when "
      "validating with --epochs auto on a training set of at most 300 batches (early "
      "stopping then runs through many epochs, which overfit without it), else 0 "
      "(docs/user-guide.md, \"Dropout\")");
  t.Text(
      "ensemble", [c] { return c->ensemble == 0 ? "auto" : Text(c->ensemble); },
      "models to train, in [1, 64], one after another with seeds --seed, --seed + 1, ... "
      "(each its own --valid-fraction split) into --checkpoint-dir/member-1, member-2, ...; "
      "eval and predict given that folder average their probabilities. auto: 3 when "
      "validating with --epochs auto on at most 25,600 training points (after the held-back "
      "ones: a run of seconds, whose test P@1 moves most from seed to seed), else 1 "
      "(docs/user-guide.md, \"Ensembles\")");
  t.Text(
      "linear", [c] { return c->linear < 0 ? "auto" : Text(c->linear == 1); },
      "auto|true|false: an ensemble (--ensemble 2 or more) also solves a linear one-vs-rest "
      "model, as extreme-classification libraries train (per label the L2-regularised "
      "squared hinge, C 1, on the L2-normalised training rows, solved by dual coordinate "
      "descent to a gap of 0.1), saved in --checkpoint-dir/linear; eval and predict mix its "
      "probabilities with the networks' mean by a share chosen on validation (0, 0.25, 0.5, "
      "0.75 or 1: the first member's P@1 of the mix; 0.5 without validation; at 1 the "
      "members after the first, left no weight, are not trained). auto: true for "
      "an ensemble whose output layer has fewer than --dense-below labels, whose linear "
      "weights ((features + 1) x labels) number at most 2^26 and whose labels x training "
      "nonzeros are at most 2^31 (docs/user-guide.md, \"The linear member\")");
  t.Text(
      "rerank", [c] { return c->rerank < 0 ? "auto" : Text(c->rerank == 1); },
      "auto|true|false: one model (--ensemble 1) is followed by a linear reranker of its "
      "lists: the network lists each training point's 30 best labels, and per label a "
      "linear one-vs-rest model (as --linear, on the L2-normalised rows) is solved on the "
      "points that have it and the points whose list holds it. The network goes into "
      "--checkpoint-dir/member-1, the reranker into --checkpoint-dir/linear; eval and predict "
      "rescore the network's 30 best labels of a point, its probabilities mixed with the "
      "network's by a share chosen on validation as --linear's. auto: true when validating "
      "with --epochs auto "
      "where the output layer has at least --dense-below labels and the training points x "
      "labels are at most 2^32 (docs/user-guide.md, \"The reranker\")");
  t.Field("beta1", &c->beta1, "Adam beta1");
  t.Field("beta2", &c->beta2, "Adam beta2");
  t.Field("eps", &c->eps, "Adam epsilon");
  t.Switch("dense-adam", &c->dense_adam,
           "update every row each step (default: only the rows the batch touched)");
  t.Text(
      "adam-catch-up", [c] { return ToString(c->adam_catch_up); },
      "first-layer|all|none: the layers whose rows, at an update, first apply in closed form "
      "the steps they missed since a batch last touched them, as dense Adam would have with "
      "zero gradients (first-layer: the rows of the input features; none: a row takes only the "
      "steps of the batches that touch it)");
  t.Field("iterations", &c->iterations, "iterations to train, at most 2^40 (0: use --epochs)");
  t.Text(
      "epochs", [c] { return c->epochs_auto ? "auto" : Text(c->epochs); },
      "epochs to train when --iterations is 0, at most 10^6 (auto: 1; when validating, until "
      "early stopping ends the run (--patience), at most 100 epochs or 5,000 iterations, the "
      "more, evaluating every epoch but at least every 500 and at most every 100 iterations)");
  t.Text(
      "patience", [c] { return c->patience < 0 ? "auto" : Text(c->patience); },
      "when validating: stop training after this many evaluations in a row without a better "
      "validation P@1, keeping the best model (early stopping); 0: never (auto: 5; 3 for the "
      "network a reranker follows, --rerank)");
  t.Field(
      "eval-every", &c->eval_every,
      "evaluate every N iterations (0: when validating, about 10 times per run and at most once "
      "per epoch; else only at the end)");
  t.Field("eval-points", &c->eval_points,
          "evaluate on the first N points of the evaluation set (0: all)");
  t.Switch("eval-sampled", &c->eval_sampled,
           "LSH-sampled inference instead of exact scoring of every output neuron");
  t.Field("log-every", &c->log_every, "progress line every N iterations");
  t.Field("threads", &c->threads, "OpenMP threads per rank, at most 4096 (0: default)");
  t.Text(
      "seed", [c] { return Text(c->seed); }, "random seed, in [0, 2^64)");
  t.Text(
      "device", [c] { return ToString(c->device); }, "cpu|gpu");
  t.Field("gpus-per-node", &c->gpus_per_node,
          "--device gpu: local rank r uses GPU r % N of the visible ones (0: one rank per GPU)");
  t.Text(
      "strategy", [c] { return ToString(c->strategy); },
      "sparse|dense-model-parallel|data-parallel");
  t.Path("metrics", &c->metrics_file,
         "append JSON lines metrics to this file (an existing file is kept: a resumed run adds to "
         "it)");
  t.Path("checkpoint-dir", &c->checkpoint_dir, "checkpoint directory");
  t.Field("checkpoint-every", &c->checkpoint_every,
          "checkpoint every N iterations (0: only at the end of training and on a stop signal)");
  t.Field("keep-checkpoints", &c->keep_checkpoints,
          "checkpoints kept in --checkpoint-dir (the newest), in [1, 1000]");
  t.Path("resume", &c->resume_dir,
         "resume from the newest intact checkpoint in this directory (any number of ranks)");
  t.Path("save", &c->save_dir,
         "write the final model (the --keep-best one when validating) as a checkpoint folder here");
  t.Field("checkpoint-tables", &c->checkpoint_tables,
          "write the LSH tables into checkpoints (exact resume; false: rebuilt from the weights)");
  t.Field("divergence-factor", &c->divergence_factor,
          "stop when a step's loss exceeds this factor times its running level (0: never)");
}

OutputLoss ParseOutputLoss(const std::string& name) {
  return ParseEnum<OutputLoss>("loss", name,
                               {{"auto", OutputLoss::kAuto},
                                {"softmax", OutputLoss::kSoftmax},
                                {"one-vs-rest", OutputLoss::kOneVsRest}});
}

LabelOrder ParseLabelOrder(const std::string& name) {
  return ParseEnum<LabelOrder>("label-order", name,
                               {{"auto", LabelOrder::kAuto},
                                {"spread", LabelOrder::kSpread},
                                {"identity", LabelOrder::kIdentity}});
}

QueryStrategy ParseQueryStrategy(const std::string& name) {
  return ParseEnum<QueryStrategy>("query", name,
                                  {{"vanilla", QueryStrategy::kVanilla},
                                   {"topk", QueryStrategy::kTopK},
                                   {"threshold", QueryStrategy::kThreshold}});
}

HashFamily ParseHashFamily(const std::string& name, bool allow_auto) {
  if (allow_auto)
    return ParseEnum<HashFamily>("hash", name,
                                 {{"auto", HashFamily::kAuto},
                                  {"dwta", HashFamily::kDwta},
                                  {"srp", HashFamily::kSrp},
                                  {"wta", HashFamily::kWta}});
  return ParseEnum<HashFamily>(
      "hash", name,
      {{"dwta", HashFamily::kDwta}, {"srp", HashFamily::kSrp}, {"wta", HashFamily::kWta}});
}

void options::FinishTrain(const po::variables_map& vm, TrainConfig* c) {
  c->seed = ParseUnsigned("seed", vm["seed"].as<std::string>());
  c->hidden = ParseList<int64_t>("hidden", vm["hidden"].as<std::string>());
  const std::string sparsity = vm["sparsity"].as<std::string>();
  if (sparsity == "auto")
    c->sparsity.clear();
  else
    c->sparsity = ParseList<double>("sparsity", sparsity);
  c->lsh.family = ParseHashFamily(vm["hash"].as<std::string>(), /*allow_auto=*/true);
  c->lsh.k = ParseAutoInt("K", vm["K"].as<std::string>());
  c->lsh.l = ParseAutoInt("L", vm["L"].as<std::string>());
  c->lsh.lsh_share = ParseAutoNumber(
      "lsh-share", vm["lsh-share"].as<std::string>(), [](double v) { return v > 0 && v <= 1; },
      "a share in (0, 1]");
  const std::string lr = vm["lr"].as<std::string>();
  c->lr = lr == "auto" ? 0 : ParseNumber("lr", lr);
  DSLIDE_CHECK(lr == "auto" || (c->lr > 0 && std::isfinite(c->lr)),
               "option --lr: must be a finite number > 0, got ", lr);
  c->first_lr_scale = ParseAutoNumber(
      "first-lr-scale", vm["first-lr-scale"].as<std::string>(),
      [](double v) { return v >= 1e-3 && v <= 1e3; }, "a multiple of --lr in [1e-3, 1e3]");
  c->lr_decay = ParseAutoNumber(
      "lr-decay", vm["lr-decay"].as<std::string>(), [](double v) { return v > 0 && v <= 1; },
      "a factor in (0, 1]");
  const std::string dropout = vm["dropout"].as<std::string>();
  c->dropout = dropout == "auto" ? -1 : ParseNumber("dropout", dropout);
  DSLIDE_CHECK(dropout == "auto" || (c->dropout >= 0 && c->dropout <= kMaxDropout),
               "option --dropout: must be auto or in [0, ", kMaxDropout, "], got ", dropout);
  const std::string ensemble = vm["ensemble"].as<std::string>();
  const bool count = !ensemble.empty() && ensemble.size() <= 2 &&
                     ensemble.find_first_not_of("0123456789") == std::string::npos;
  c->ensemble = count ? std::stoi(ensemble) : 0;
  DSLIDE_CHECK(ensemble == "auto" || (count && c->ensemble >= 1 && c->ensemble <= kMaxEnsemble),
               "option --ensemble: must be auto or a number of models in [1, ", kMaxEnsemble,
               "], got ", ensemble);
  const std::string epochs = vm["epochs"].as<std::string>();
  c->epochs_auto = epochs == "auto";
  if (!c->epochs_auto) c->epochs = ParseNumber("epochs", epochs);
  const std::string patience = vm["patience"].as<std::string>();
  c->patience = patience == "auto" ? -1 : static_cast<int64_t>(ParseUnsigned("patience", patience));
  const std::string linear = vm["linear"].as<std::string>();
  c->linear = linear == "auto" ? -1 : ParseBool("linear", linear) ? 1 : 0;
  const std::string rerank = vm["rerank"].as<std::string>();
  c->rerank = rerank == "auto" ? -1 : ParseBool("rerank", rerank) ? 1 : 0;
  const std::string keep = vm["keep-best"].as<std::string>();
  c->keep_best = keep == "auto" ? -1 : ParseBool("keep-best", keep) ? 1 : 0;
  c->lsh.insert = ParseEnum<InsertPolicy>(
      "insert", vm["insert"].as<std::string>(),
      {{"reservoir", InsertPolicy::kReservoir}, {"fifo", InsertPolicy::kFifo}});
  c->lsh.query = ParseEnum<QueryStrategy>("query", vm["query"].as<std::string>(),
                                          {{"auto", QueryStrategy::kAuto},
                                           {"vanilla", QueryStrategy::kVanilla},
                                           {"topk", QueryStrategy::kTopK},
                                           {"threshold", QueryStrategy::kThreshold}});
  c->lsh.fill = ParseEnum<FillPolicy>("fill", vm["fill"].as<std::string>(),
                                      {{"random", FillPolicy::kRandom},
                                       {"batch", FillPolicy::kBatch},
                                       {"stop", FillPolicy::kStop}});
  c->label_order = ParseLabelOrder(vm["label-order"].as<std::string>());
  c->loss = ParseOutputLoss(vm["loss"].as<std::string>());
  c->output_bias = ParseEnum<OutputBias>(
      "output-bias", vm["output-bias"].as<std::string>(),
      {{"auto", OutputBias::kAuto}, {"prior", OutputBias::kPrior}, {"zero", OutputBias::kZero}});
  c->adam_catch_up = ParseEnum<CatchUpScope>("adam-catch-up", vm["adam-catch-up"].as<std::string>(),
                                             {{"first-layer", CatchUpScope::kFirstLayer},
                                              {"all", CatchUpScope::kAll},
                                              {"none", CatchUpScope::kNone}});
  c->state = ParseEnum<StateType>("state", vm["state"].as<std::string>(),
                                  {{"fp32", StateType::kFp32}, {"bf16", StateType::kBf16}});
  c->device = ParseEnum<Device>("device", vm["device"].as<std::string>(),
                                {{"cpu", Device::kCpu}, {"gpu", Device::kGpu}});
  c->strategy = ParseEnum<Strategy>("strategy", vm["strategy"].as<std::string>(),
                                    {{"sparse", Strategy::kSparse},
                                     {"dense-model-parallel", Strategy::kDenseModelParallel},
                                     {"data-parallel", Strategy::kDataParallel}});
}

std::vector<double> TrainConfig::LayerSparsity(size_t num_layers) const {
  DSLIDE_ASSERT(!sparsity.empty(), "--sparsity auto must be resolved first (ResolveAuto)");
  std::vector<double> s(num_layers, 1.0);
  if (sparsity.size() == 1) {
    s.back() = sparsity[0];
  } else {
    DSLIDE_CHECK(sparsity.size() == num_layers, "option --sparsity: ", sparsity.size(),
                 " values given for ", num_layers,
                 " layers (give one per layer, or one for "
                 "the output layer)");
    s = sparsity;
  }
  if (strategy != Strategy::kSparse) std::fill(s.begin(), s.end(), 1.0);
  return s;
}

void TrainConfig::Validate() const {
  DSLIDE_CHECK(!train_file.empty(), "option --train is required");
  for (auto h : hidden)
    DSLIDE_CHECK(h >= 1 && h <= kMaxLayerSize, "option --hidden: each size must be in [1, ",
                 kMaxLayerSize, "] (below 2^24), got ", h);
  for (auto s : sparsity)
    DSLIDE_CHECK(s > 0.0 && s <= 1.0, "option --sparsity: values must be in (0, 1], got ", s);
  DSLIDE_CHECK(sparsity.size() <= 1 || sparsity.size() == hidden.size() + 1,
               "option --sparsity: give 1 or ", hidden.size() + 1, " values, got ",
               sparsity.size());
  DSLIDE_CHECK(lsh.k >= 0 && lsh.k <= 32, "option --K: must be in [1, 32], got ", lsh.k);
  DSLIDE_CHECK(lsh.l >= 0 && lsh.l <= 1024, "option --L: must be in [1, 1024], got ", lsh.l);
  DSLIDE_CHECK(lsh.lsh_share == 0 || lsh.lsh_share >= 1 || lsh.fill != FillPolicy::kStop,
               "option --lsh-share ", lsh.lsh_share,
               " leaves slots to the fill, which --fill stop "
               "turns off: give --lsh-share 1 or another --fill");
  CheckRange<int64_t>("dense-below", dense_below, 0, kMaxDim);
  CheckRange<int64_t>("min-negatives", min_negatives, 1, kMaxDim);
  DSLIDE_CHECK(valid_fraction >= 0 && valid_fraction < 1,
               "option --valid-fraction: must be in [0, 1), got ", valid_fraction);
  DSLIDE_CHECK(valid_file.empty() || valid_fraction == 0,
               "options --valid and --valid-fraction exclude each other");
  DSLIDE_CHECK(keep_best != 1 || validating(),
               "option --keep-best selects on validation data: give --valid FILE or "
               "--valid-fraction F");
  CheckRange("bucket-size", lsh.bucket_capacity, 1, kMaxBucketSize);
  DSLIDE_CHECK(lsh.bin_size >= 2 && lsh.bin_size <= 256 && (lsh.bin_size & (lsh.bin_size - 1)) == 0,
               "option --bin-size: must be a power of two in [2, 256], got ", lsh.bin_size);
  CheckRange("threshold", lsh.threshold, 1, 1024);
  CheckRange("gpus-per-node", gpus_per_node, 0, kMaxGpusPerNode);
  CheckRange<int64_t>("rebuild-n0", lsh.rebuild_n0, 1, kMaxIterations);
  DSLIDE_CHECK(lsh.rebuild_lambda >= 0 && lsh.rebuild_lambda < 10,
               "option --rebuild-lambda: must be in [0, 10), got ", lsh.rebuild_lambda);
  CheckRange<int64_t>("rehash-every", lsh.rehash_every, 0, kMaxIterations);
  CheckRange("batch", batch, 1, kMaxBatch);
  DSLIDE_CHECK(lr >= 0 && std::isfinite(lr), "option --lr: must be a finite number > 0, got ", lr);
  // The step runs in float: a rate float cannot hold would be 0 or infinite there.
  DSLIDE_CHECK(
      lr == 0 ||
          (lr >= std::numeric_limits<float>::min() && lr <= std::numeric_limits<float>::max()),
      "option --lr: must be a number > 0 that a float holds (", std::numeric_limits<float>::min(),
      " to ", std::numeric_limits<float>::max(), "), got ", lr);
  DSLIDE_CHECK(dropout == -1 || (dropout >= 0 && dropout <= kMaxDropout),
               "option --dropout: must be auto or in [0, ", kMaxDropout, "], got ", dropout);
  CheckRange("ensemble", ensemble, 0, kMaxEnsemble);
  DSLIDE_CHECK(ensemble <= 1 || resume_dir.empty(), "option --ensemble ", ensemble,
               ": --resume continues one model; resume a member "
               "alone (--ensemble 1 --resume DIR/member-K --seed of that member)");
  DSLIDE_CHECK(rerank != 1 || ensemble <= 1,
               "option --rerank true: the reranker rescores one network's lists; give "
               "--ensemble 1 (or auto)");
  DSLIDE_CHECK(rerank != 1 || resume_dir.empty(),
               "option --rerank true: --resume continues one model's checkpoints, and a "
               "reranked run keeps its network in --checkpoint-dir/member-1; train anew, or "
               "resume without --rerank");
  DSLIDE_CHECK(linear != 1 || ensemble != 1,
               "option --linear true: the linear member joins "
               "an ensemble's networks; give --ensemble 2 or more (or auto)");
  DSLIDE_CHECK(beta1 >= 0 && beta1 < 1, "option --beta1: must be in [0, 1), got ", beta1);
  DSLIDE_CHECK(beta2 >= 0 && beta2 < 1, "option --beta2: must be in [0, 1), got ", beta2);
  DSLIDE_CHECK(eps > 0 && eps <= 1, "option --eps: must be in (0, 1], got ", eps);
  CheckRange<int64_t>("iterations", iterations, 0, kMaxIterations);
  DSLIDE_CHECK(epochs >= 0 && epochs <= kMaxEpochs, "option --epochs: must be in [0, ",
               static_cast<int64_t>(kMaxEpochs), "], got ", epochs);
  DSLIDE_CHECK(iterations > 0 || epochs > 0,
               "option --epochs: must be positive when --iterations is 0, got ", epochs);
  CheckRange<int64_t>("patience", patience, -1, kMaxIterations);
  DSLIDE_CHECK(lr_decay >= 0 && lr_decay <= 1,
               "option --lr-decay: must be auto or a factor in (0, 1], got ", lr_decay);
  DSLIDE_CHECK(lr_decay == 0 || lr_decay == 1 || validating(),
               "option --lr-decay acts on the validation P@1: give --valid FILE or "
               "--valid-fraction F (the test file is never used to choose the model)");
  DSLIDE_CHECK(lr_decay_margin >= 0 && lr_decay_margin <= 1,
               "option --lr-decay-margin: must be in [0, 1], got ", lr_decay_margin);
  CheckRange<int64_t>("lr-decay-patience", lr_decay_patience, 1, kMaxIterations);
  DSLIDE_CHECK(patience <= 0 || validating(),
               "option --patience stops on the validation P@1: give --valid FILE or "
               "--valid-fraction F (the test file is never used to choose the model)");
  CheckRange<int64_t>("eval-every", eval_every, 0, kMaxIterations);
  CheckRange<int64_t>("eval-points", eval_points, 0, kMaxPoints);
  CheckRange<int64_t>("log-every", log_every, 1, kMaxIterations);
  CheckRange("threads", threads, 0, kMaxThreads);
  CheckRange<int64_t>("checkpoint-every", checkpoint_every, 0, kMaxIterations);
  DSLIDE_CHECK(checkpoint_every == 0 || !checkpoint_dir.empty(),
               "option --checkpoint-every needs --checkpoint-dir");
  CheckRange("keep-checkpoints", keep_checkpoints, 1, kMaxKeepCheckpoints);
  DSLIDE_CHECK(
      divergence_factor == 0 || (divergence_factor > 1 && std::isfinite(divergence_factor)),
      "option --divergence-factor: must be 0 (off) or above 1, got ", divergence_factor);
}

std::string SettingsJson(const TrainConfig& cfg) {
  TrainConfig shown = cfg;
  po::options_description d;
  OptionTable table(&d);
  AddTrainOptions(table, &shown);
  return table.Echo();
}

bool ParseTrain(int argc, const char* const* argv, TrainConfig* cfg, std::string* help) {
  po::options_description d("train options");
  OptionTable table(&d);
  AddTrainOptions(table, cfg);
  po::variables_map vm;
  if (!Parse(argc, argv, d, "Usage: dslide train --train FILE --test FILE [options]", &vm, help))
    return false;
  FinishTrain(vm, cfg);
  cfg->Validate();
  return true;
}

void ParseTrainOptions(const std::vector<std::pair<std::string, std::string>>& options,
                       TrainConfig* cfg) {
  // The table, to tell switches from options with a value.
  TrainConfig probe;
  po::options_description d("train options");
  OptionTable table(&d);
  AddTrainOptions(table, &probe);
  std::vector<std::string> args{"train"};
  for (const auto& [name, value] : options) {
    const po::option_description* o = d.find_nothrow(name, /*approx=*/false);
    if (o != nullptr && o->semantic()->max_tokens() == 0) {  // a switch: given or not
      if (ParseBool(name, value)) args.push_back("--" + name);
      continue;
    }
    // An unknown name alone, for the parser's message (which suggests the option meant).
    std::string arg = "--" + name;
    if (o != nullptr || name == "config") arg.append("=").append(value);
    args.push_back(std::move(arg));
  }
  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::string help;
  DSLIDE_CHECK(ParseTrain(static_cast<int>(argv.size()), argv.data(), cfg, &help),
               "option --help: not an option here");
}

std::string TrainHelp() {
  TrainConfig cfg;
  const char* argv[] = {"train", "--help"};
  std::string help;
  ParseTrain(2, argv, &cfg, &help);
  return help;
}

}  // namespace dslide
