// The output layer's loss (--loss): a softmax over the labels, or one-vs-rest (a logistic
// loss per output neuron), and how a logit becomes a probability under each.
#pragma once

#include <cmath>

namespace dslide {

/// kSoftmax: the softmax cross-entropy, the target spread over a point's labels (a
/// distribution over labels). kOneVsRest: per output neuron the binary cross-entropy of
/// sigmoid(z) against whether the point has that label (each label a yes/no question, as
/// the one-vs-rest classifiers of extreme classification train them). kAuto: the softmax for
/// a new model, a checkpoint's own loss when resuming or scoring one.
enum class OutputLoss { kSoftmax, kOneVsRest, kAuto };

/// log(1 + exp(z)) without overflow.
inline double Softplus(double z) { return (z > 0 ? z : 0.0) + std::log1p(std::exp(-std::fabs(z))); }

/// 1 / (1 + exp(-z)) without overflow.
inline double Sigmoid(double z) {
  const double e = std::exp(-std::fabs(z));
  return z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

}  // namespace dslide
