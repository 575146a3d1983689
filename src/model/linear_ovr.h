// A one-vs-rest linear model solved to its regularised optimum: per label, the L2-regularised
// squared-hinge (L2-loss) support vector machine on L2-normalised input rows with a bias
// feature of 1, solved in the dual by coordinate descent with shrinking (Hsieh, Chang, Lin,
// Keerthi and Sundararajan, ICML 2008) to a projected-gradient gap below `eps`. This is what
// the extreme-classification libraries train at each node of their label trees (PECOS
// XR-Linear, omikuji, napkinXC, with C 1 and eps 0.1 by default); an ensemble may average it
// with its networks (train/ensemble.h).
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace dslide {

struct LinearOvrOptions {
  double c = 1.0;             ///< the loss's weight against the regulariser ||w||^2 / 2, > 0
  double eps = 0.1;           ///< stop when the projected gradient's spread is at most this
  int64_t max_epochs = 1000;  ///< passes over the points per label, at most
  uint64_t seed = 1;          ///< each label's visiting order (its own stream: thread-count free)
};

/// The weights of every label and the probability rule of prediction. Dense: `features + 1`
/// rows (the last: the bias) of `labels` columns, every label solved on every point (Train).
/// Shortlist: each label solved on its own points and the points a network ranks it among
/// their best (TrainShortlist), its weights sparse; it scores the labels of a network's lists
/// (Rescore) and no others.
class LinearOvr {
 public:
  LinearOvr() = default;
  LinearOvr(int64_t features, int64_t labels, std::vector<float> w);
  /// A shortlist model solved on lists of `list` labels: label l's weights are
  /// values[offsets[l] .. offsets[l + 1]) on features feature_ids[...] (ascending), its bias
  /// biases[l].
  LinearOvr(int64_t features, int64_t labels, int list, std::vector<int64_t> offsets,
            std::vector<int32_t> feature_ids, std::vector<float> values, std::vector<float> biases);

  /// Solves every label of `train` (points with and without it), labels in parallel
  /// (ParallelFor); the result does not depend on the threads.
  static LinearOvr Train(const Dataset& train, const LinearOvrOptions& options);

  /// Solves each label l of `train` on the points that have it (+1) and the points whose list
  /// holds it without having it (-1): `lists` holds each point's `len` labels (a network's
  /// top-len, -1 past its end). A label of no such point gets bias -1 (the margin of a label
  /// every point lacks). Weights of magnitude at most `prune` are dropped (the bias is kept).
  /// Labels in parallel; the result does not depend on the threads.
  static LinearOvr TrainShortlist(const Dataset& train, const std::vector<int32_t>& lists, int len,
                                  double prune, const LinearOvrOptions& options);

  int64_t features() const { return features_; }
  int64_t labels() const { return labels_; }
  bool shortlist() const { return shortlist_; }
  /// Shortlist: the length of the lists it was solved on, and rescores.
  int list() const { return list_; }
  /// Dense: row-major, (features + 1) x labels.
  const std::vector<float>& weights() const { return w_; }
  /// Shortlist: the sparse weights, by label, and the biases.
  const std::vector<int64_t>& offsets() const { return off_; }
  const std::vector<int32_t>& feature_ids() const { return feat_; }
  const std::vector<float>& values() const { return w_; }
  const std::vector<float>& biases() const { return bias_; }

  /// Shortlist: Probability of the margin of each of the first list() labels of each point's
  /// list (`ids`, `len` a point, -1 past the end) plus kMarginOrder (so above 0), and 0 for
  /// the others (past list(), labels it never learnt against): probs gets data.size() x len
  /// entries.
  void Rescore(const Dataset& data, int len, const std::vector<int32_t>& ids,
               std::vector<double>* probs) const;

  /// Dense: margin s of every label for point `x` (features beyond the model's ignored),
  /// written to scores[0..labels): s = w . x / ||x|| + b.
  void Margins(const SparseView& x, float* scores) const;
  /// The squared hinge's probability of a margin: the minimiser of the expected loss is
  /// s = 2p - 1 where |s| <= 1, so p = (1 + s) / 2, clipped to [0, 1], plus
  /// kMarginOrder * s / (1 + |s|): strictly increasing, so that margins the clip would tie
  /// (beyond +-1) keep their order when lists are merged by probability.
  static double Probability(float margin);
  static constexpr double kMarginOrder = 1e-7;

  /// Dense: the `len` labels of largest margin of each of `n` points of `data` from row0, best
  /// first (ties to the smaller id), with Probability of each: ids and probs get n x len entries
  /// (len <= labels).
  void TopK(const Dataset& data, int64_t row0, int64_t n, int len, std::vector<int32_t>* ids,
            std::vector<double>* probs) const;

 private:
  int64_t features_ = 0;
  int64_t labels_ = 0;
  bool shortlist_ = false;
  int list_ = 0;
  std::vector<float> w_;  ///< dense: every weight; shortlist: the kept weights' values
  std::vector<int64_t> off_;
  std::vector<int32_t> feat_;
  std::vector<float> bias_;
  /// Shortlist: the labels of more than features / kDenseRowShare weights also as dense rows
  /// (dense_row_[l]: the row, -1 for the others), for Rescore to look a point's features up
  /// at once (a frequent label's weights span most features).
  static constexpr int64_t kDenseRowShare = 8;
  std::vector<int64_t> dense_row_;
  std::vector<float> dense_;
};

}  // namespace dslide
