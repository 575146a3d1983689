// Inference on a saved model: loading a checkpoint for scoring (`dslide eval`, `dslide
// predict`) and writing top-k predictions for new inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "dist/communicator.h"
#include "io/checkpoint.h"
#include "train/trainer.h"

namespace dslide {

/// Collective: the network of checkpoint `folder` (written by any number of ranks), or of
/// the serving model file `export` wrote, sharded over this job's ranks, with its weights;
/// `meta` receives its metadata.
/// With `scoring_only` (eval, predict) the model cannot train: no Adam moments are read or
/// kept (the CPU backend's memory is the weights'), its weights are not drawn first.
std::unique_ptr<Trainer> LoadModel(const std::string& folder, Communicator* comm,
                                   CheckpointMeta* meta, bool scoring_only = false);

/// Collective: the exact top-k labels of every point of `data` (its labels are ignored) with
/// their softmax probabilities, best first, as `dslide predict` writes them: `ids` and `probs`
/// get data.size() x k entries (id -1 and probability 0 where the model has fewer outputs).
/// `row0` is the index of data's first point in the whole input (a multiple of
/// model.EvalBlock()): points are scored in blocks of EvalBlock() from the input's first.
/// Every rank gets the merged lists.
/// Collective: the approximate top-k (Trainer::Score in `mode`) beside the exact, on the
/// first `max_points` points of `test` (all when <= 0): the exact evaluation (P@k and loss,
/// what Trainer::Evaluate gives, its seconds the exact scoring's), the approximate lists'
/// P@k, their recall of the exact top max(ks) (the share of the exact labels they hold), and
/// the seconds of each scoring.
struct ApproximateEval {
  EvalResult exact, approx;
  int k = 0;
  double recall = 0, approx_seconds = 0, exact_seconds = 0;
};
ApproximateEval EvaluateApproximate(Trainer& model, const Dataset& test, int64_t max_points,
                                    const std::vector<int>& ks, ScoreMode mode);

/// This rank's file of the output index: ann.file, or FILE.rank-R-of-P under P > 1 ranks
/// ("" without a file).
std::string OutputIndexFile(const AnnConfig& ann, const Communicator& comm);

/// Collective: `model.BuildOutputIndex` with `ann`'s settings and this rank's
/// OutputIndexFile. Returns the slowest rank's seconds.
double BuildOutputIndex(Trainer& model, const AnnConfig& ann);

/// `mode`: kExact, or kIndex (after BuildOutputIndex) for the approximate top-k.
void PredictTopK(Trainer& model, const Dataset& data, int64_t row0, int k,
                 std::vector<int32_t>* ids, std::vector<double>* probs,
                 ScoreMode mode = ScoreMode::kExact);

/// Collective: exact top-k labels with their softmax probabilities for every row of
/// `cfg.input` (XC text or binary; labels in it are ignored), streamed a chunk at a time,
/// each rank scoring its own block of outputs and the lists merged as in evaluation. Rank
/// 0 writes cfg.out (via a temporary file renamed at the end): per row
///   tsv:   ROW<TAB>LABEL:SCORE LABEL:SCORE ...     (ROW 0-based, best first)
///   jsonl: {"row":ROW,"labels":[...],"scores":[...]}
/// Returns the number of rows written.
int64_t Predict(const PredictConfig& cfg, Communicator* comm);

}  // namespace dslide
