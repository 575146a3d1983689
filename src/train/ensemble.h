// Ensembles (--ensemble N): N models trained one after another with seeds seed, seed + 1,
// ... (each with its own --valid-fraction split), kept in FOLDER/member-1 ... member-N, and
// scored together by averaging their softmax (or one-vs-rest) probabilities. With --linear,
// a linear one-vs-rest model (model/linear_ovr.h) solved on all the training points joins
// them in FOLDER/linear: its probabilities weigh a share of the mean chosen on validation
// (ChooseLinearShare), the networks' mean the rest.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "dist/communicator.h"
#include "model/linear_ovr.h"
#include "train/evaluator.h"
#include "train/run_events.h"
#include "train/trainer.h"

namespace dslide {

/// The folder of member m (1-based) of an ensemble kept in `folder`.
std::string EnsembleMemberDir(const std::string& folder, int m);

/// The models of the ensemble kept in `folder`: each member-m folder (m = 1, 2, ... while
/// one exists), as `predict` and `eval` read it: its `best` model where it holds one (the
/// model early stopping kept), else its newest checkpoint (or the folder itself, when it is
/// one). Empty when `folder` holds no member-1.
std::vector<std::string> EnsembleMembers(const std::string& folder);

/// The linear member of the ensemble in `folder` and its share of the mean probability;
/// null (and share 0) where the folder holds none (no `linear` folder). Checks that it
/// scores `features` inputs into `labels` outputs as the networks do (dslide::Error naming
/// its file if not).
std::unique_ptr<LinearOvr> ReadEnsembleLinear(const std::string& folder, int64_t features,
                                              int64_t labels, double* share);

/// Throws dslide::Error naming `option` where folder `dir` ("" : none) cannot take an
/// ensemble of `members` in member folders (`members` 1 without `member_folders`: one model in
/// the folder itself) without mixing with another run's models that eval and predict of it
/// would read: one model's checkpoints or best model in it, an ensemble member's (member-K,
/// K <= members) there, a member beyond this run's, or a linear member. A single model
/// refuses a folder that holds member-1.
void CheckEnsembleFolder(const std::string& dir, int members, const char* option,
                         bool member_folders = false);

/// What `folder`, holding `members` member folders, is, for messages: "an ensemble of N
/// models", or "a network and its reranker (FOLDER/member-1, FOLDER/linear)".
std::string EnsembleFolderWhat(const std::string& folder, size_t members);

/// Throws dslide::Error naming --approximate where `folder` holds an ensemble of `members`
/// models (members > 0) and `approximate` is not "off": approximate scoring reads one model.
void CheckEnsembleScoredExactly(const std::string& folder, size_t members,
                                const std::string& approximate);

/// Each member's list for a point holds its this many most probable labels (all of them
/// where the model has fewer); a label outside a member's list counts with probability 0
/// for that member in the average.
constexpr int kEnsembleListLength = 100;
int EnsembleListLength(int k, int64_t outputs);

/// Members' top-`len` lists of `n` points (ids, -1 past the end, and probabilities, as
/// PredictTopK gives them), merged into the top `k` of the mean probability: ids and probs
/// get n x k entries, best first (ties to the smaller id; -1 and 0 past the labels found).
void MergeMemberLists(const std::vector<std::vector<int32_t>>& ids,
                      const std::vector<std::vector<double>>& probs, int64_t n, int len, int k,
                      std::vector<int32_t>* out_ids, std::vector<double>* out_probs);
/// The same with list m's probabilities weighed by weights[m] (the weights summing to 1).
void MergeMemberLists(const std::vector<std::vector<int32_t>>& ids,
                      const std::vector<std::vector<double>>& probs,
                      const std::vector<double>& weights, int64_t n, int len, int k,
                      std::vector<int32_t>* out_ids, std::vector<double>* out_probs);
/// Each list's weight for `networks` networks' lists, then the linear member's where
/// `linear_share` > 0: that share for it, the rest shared equally by the networks.
std::vector<double> MemberWeights(int networks, double linear_share);

/// The linear member's share (of kLinearShares) whose mix with a network scores the best P@1
/// on `points`: ids/probs hold the network's top-`len` lists of the points, then the linear
/// member's. Ties go to the share nearest kLinearShare, then the smaller. `why` (if not null)
/// gets each share's P@1, for the log.
double ChooseLinearShare(const std::vector<std::vector<int32_t>>& ids,
                         const std::vector<std::vector<double>>& probs, const Dataset& points,
                         int len, std::string* why, const char* whose = "the first member's");

/// Collective: the whole of `dslide train --ensemble N` with N = `members` >= 2, or of one
/// network followed by its reranker (members 1, AutoRerank; FOLDER/member-1 and
/// FOLDER/linear, as an ensemble's): each
/// member's run as RunTraining makes it (its lines and records among them), then, with a
/// test file, the ensemble's P@k on it (the first --eval-points points) said in one line
/// and one record ({"set":"test","ensemble":N,...}, with the members' training seconds
/// together). Returns the ensemble's evaluation (without a test file, the last member's).
EvalResult RunEnsemble(const TrainConfig& cfg, int members, Communicator* comm, RunEvents* events);

/// Collective: the mean-probability top `k` of every point of `data` over `models` (and the
/// linear member, where not null, with its `share`: MemberWeights), as PredictTopK gives one
/// model's (row0 as there).
void EnsembleTopK(const std::vector<std::unique_ptr<Trainer>>& models, const LinearOvr* linear,
                  double share, const Dataset& data, int64_t row0, int k, std::vector<int32_t>* ids,
                  std::vector<double>* probs);

}  // namespace dslide
