// --sparsity auto and the other "auto" settings: which layers are computed densely, the
// budget of the others and their LSH settings, all chosen from the layers' sizes
// (docs/user-guide.md, "Defaults and how they were chosen"), and the per-layer summary a run
// prints at its start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/layer_backend.h"
#include "config/config.h"
#include "data/dataset.h"
#include "model/model.h"

namespace dslide {

/// The backend options of a run's (resolved) settings: its LSH settings, seed and optimiser
/// state (the output biases are the Trainer's: LabelPriorBiases).
inline BackendOptions BackendOptionsOf(const TrainConfig& cfg) {
  BackendOptions o;
  o.lsh = cfg.lsh;
  o.seed = cfg.seed;
  o.bf16_moments = cfg.state == StateType::kBf16;
  o.dense_adam = cfg.dense_adam;
  o.scoring_only = cfg.scoring_only;
  o.batch = cfg.batch;
  o.loss = cfg.loss == OutputLoss::kOneVsRest ? OutputLoss::kOneVsRest : OutputLoss::kSoftmax;
  return o;
}

/// The inputs' mean L1 norm below which --first-lr-scale auto raises the first layer's rate.
constexpr double kFirstLayerL1 = 6.0;

/// --first-lr-scale auto: max(1, kFirstLayerL1 / m), m the mean L1 norm of the inputs of
/// `data`'s points that have any (1 without such points). Adam moves every weight a batch
/// touches by about the rate, so a step moves a hidden unit's input by about the rate times
/// the input's L1 norm: at 1 (one-hot word or item ids) a first layer moves 7 to 70 times
/// less per step than on the bag-of-words sets where the rate was chosen (mean L1 norms of
/// 6.9 to 68). Inputs of mean L1 norm 6 or more keep the rate (docs/user-guide.md, "Learning
/// rate", has the measurements).
double FirstLayerLrScale(const Dataset& data);

/// A new model's output biases for this rank's neurons of `out` (--output-bias prior): the
/// log of each label's share of the training labels of `data` (a point's labels share its
/// weight equally, as in the loss; add-one smoothed) against the uniform share 1 / labels,
/// where that is below 0; 0 for the labels above the uniform share. A label of a sampled
/// layer is active, and its bias moves (by Adam steps of about the learning rate), only at
/// the few steps it is a label or a candidate: the rare labels' biases start where the
/// label frequencies put them instead of level with the frequent labels'. The frequent
/// labels start at 0, not above: a large positive bias points a row along the queries' bias
/// coordinate, and its LSH codes then collide with every query (docs/user-guide.md,
/// "Output biases", has the measurements, and why zeros stay the default).
/// Under the one-vs-rest loss, the log-odds of the share of `data`'s points that have each
/// label (add-one smoothed): the biases of a model that knows nothing but the label
/// frequencies. From zeros every sigmoid starts at 1/2, and Adam moves a bias by about the
/// learning rate a step: thousands of steps before a rare label's reaches its log-odds (-4
/// to -13), and a sampled layer's rows that are seldom active stay above the trained ones.
std::vector<float> LabelPriorBiases(const LayerSpec& out, const LabelMap& labels,
                                    const Dataset& data, OutputLoss loss = OutputLoss::kSoftmax);

/// Per neuron of this rank's shard of `out`: the share of the points of `data` that have its
/// label (BackendOptions::label_share, for the log-Q correction's batch source).
std::vector<float> LabelShares(const LayerSpec& out, const LabelMap& labels, const Dataset& data);

/// The active neurons per sample (all ranks) that --sparsity auto gives a layer of
/// `neurons` neurons that is not dense, with or without the log-Q correction (--log-q).
int64_t AutoBudget(int64_t neurons, bool log_q = true);

/// The sparsity whose budget ceil(s * neurons) is exactly `budget`.
double SparsityForBudget(int64_t budget, int64_t neurons);

/// Fills the LSH settings left to auto (family, K, L, query) for a sparse layer of
/// `neurons` neurons whose input is sparse (the data) or dense (a hidden layer).
void AutoLsh(int64_t neurons, bool sparse_input, LshConfig* lsh);

/// Resolves every setting of cfg left to auto for the network input_dim -> cfg->hidden ->
/// output_dim: the sparsity (hidden layers dense; the output layer dense when narrower
/// than cfg->dense_below, else AutoBudget) and the LSH settings (AutoLsh of the widest
/// sparse layer; one set serves every sparse layer). Explicit settings are kept.
/// Idempotent.
void ResolveAuto(TrainConfig* cfg, int64_t input_dim, int64_t output_dim);

/// --dropout auto for a training set of `train_points`: kAutoDropout when validating with
/// --epochs auto (early stopping ends the run) and an epoch takes at most
/// kAutoDropoutEpochIterations iterations, else 0.
double AutoDropout(const TrainConfig& cfg, int64_t train_points);

/// The mean number of labels of `data`'s points that have any (0 without such points).
double MeanLabelsPerPoint(const Dataset& data);

/// --loss auto for a new model: one-vs-rest where the training points hold at least
/// kAutoOneVsRestLabels labels on average (`mean_labels`, MeanLabelsPerPoint) and every
/// negative counts as a dense layer's would (`weighed_negatives`: the output layer is dense,
/// or sampled with the log-Q correction, CorrectsLogQ), else the softmax.
OutputLoss AutoLoss(bool weighed_negatives, double mean_labels);

/// --ensemble for a training set of `train_points`: cfg.ensemble where set, else
/// kAutoEnsemble when validating with --epochs auto on at most kAutoEnsemblePoints
/// training points, else 1.
int AutoEnsemble(const TrainConfig& cfg, int64_t train_points);
/// AutoEnsemble for a training file of `file_points` points, as `dslide train` and the
/// Python Classifier resolve it: the points --valid-fraction's holdout leaves (all of them
/// with --valid FILE).
int AutoEnsembleOfFile(const TrainConfig& cfg, int64_t file_points);

/// --linear for an ensemble of `members` networks on `features` inputs and `labels`
/// outputs, trained on points of `nonzeros` feature values in all: false for one model; true
/// where asked (refusing more than kMaxLinearWeights weights, with a dslide::Error); auto:
/// true where the output layer has fewer than cfg.dense_below labels (dense under
/// --sparsity auto), the weights number at most kAutoLinearWeights and labels x nonzeros (a
/// pass of the solver over every label) at most kAutoLinearWork: the sets it solves in
/// seconds.
bool AutoLinear(const TrainConfig& cfg, int members, int64_t features, int64_t labels,
                int64_t nonzeros);

/// --rerank for `members` networks trained on a file of `train_points` points (the held-back
/// ones among them) and `labels` labels: false for an ensemble or a resumed run; true where
/// asked; auto: true where validation sets the run's length (cfg.stops_early(); the
/// reranker's share is chosen on validation), on a file of some points, where the output
/// layer has at least cfg.dense_below labels (sampled under --sparsity auto; fewer, an
/// ensemble's --linear solves every label on every point) and train_points x labels (the
/// pass that lists each training point's best labels) is at most kAutoRerankScores.
bool AutoRerank(const TrainConfig& cfg, int members, int64_t train_points, int64_t labels);

/// What a layer's active set holds over the points of a dataset, all ranks together.
struct LayerSlots {
  int64_t budget = 0;              ///< beta: active neurons per sample by the sparsity
  int64_t min_negatives = 0;       ///< the floor of negatives beyond a sample's labels
  double mean_active = 0;          ///< mean active neurons per sample (budget, or raised)
  double mean_negatives = 0;       ///< mean active neurons that are not the sample's labels
  int64_t min_negatives_seen = 0;  ///< fewest negatives of any sample
  int64_t raised = 0;              ///< samples whose labels raised their active set
};

/// The slots of the output layer of `spec` (one rank's view; every rank's blocks are
/// derived from it) over the labels of `data`, as the selection fills them when the
/// tables supply enough candidates.
LayerSlots OutputSlots(const ModelSpec& spec, int64_t min_negatives, const Dataset& data);

/// One line per layer: neurons, dense or budget per sample (and per rank), negatives, the
/// LSH settings, and whether auto chose them.
std::string DescribeLayers(const ModelSpec& spec, const TrainConfig& resolved,
                           const TrainConfig& asked, const LayerSlots& out_slots);

}  // namespace dslide
