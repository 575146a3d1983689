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

/// The weights of every label, `features + 1` rows (the last: the bias) of `labels` columns,
/// and the probability rule of prediction.
class LinearOvr {
 public:
  LinearOvr() = default;
  LinearOvr(int64_t features, int64_t labels, std::vector<float> w);

  /// Solves every label of `train` (points with and without it), labels in parallel
  /// (ParallelFor); the result does not depend on the threads.
  static LinearOvr Train(const Dataset& train, const LinearOvrOptions& options);

  int64_t features() const { return features_; }
  int64_t labels() const { return labels_; }
  /// Row-major, (features + 1) x labels.
  const std::vector<float>& weights() const { return w_; }

  /// Margin s of every label for point `x` (features beyond the model's ignored), written to
  /// scores[0..labels): s = w . x / ||x|| + b.
  void Margins(const SparseView& x, float* scores) const;
  /// The squared hinge's probability of a margin: the minimiser of the expected loss is
  /// s = 2p - 1 where |s| <= 1, so p = (1 + s) / 2, clipped to [0, 1], plus
  /// kMarginOrder * s / (1 + |s|): strictly increasing, so that margins the clip would tie
  /// (beyond +-1) keep their order when lists are merged by probability.
  static double Probability(float margin);
  static constexpr double kMarginOrder = 1e-7;

  /// The `len` labels of largest margin of each of `n` points of `data` from row0, best first
  /// (ties to the smaller id), with Probability of each: ids and probs get n x len entries
  /// (len <= labels).
  void TopK(const Dataset& data, int64_t row0, int64_t n, int len, std::vector<int32_t>* ids,
            std::vector<double>* probs) const;

 private:
  int64_t features_ = 0;
  int64_t labels_ = 0;
  std::vector<float> w_;
};

}  // namespace dslide
