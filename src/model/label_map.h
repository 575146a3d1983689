// The numbering of the output layer's neurons by label id. Ranks own contiguous blocks of
// neurons (model.h). Label ids are seldom in random order: word tasks number words by
// descending frequency, and extreme-classification sets group labels by topic or source. With
// neuron = label, the first of P ranks then owns nearly every frequent label (on
// gcide8-skipgram rank 0 of 2 holds 98 % of the label occurrences), so its fixed share of the
// budget (beta / P) must hold the batch's labels and the hard negatives that one rank would have
// spread over the whole budget, while the other ranks spend theirs on labels that never occur:
// the sampled step on P ranks is then a different, weaker estimator than on one rank.
//
// The spread order numbers label l as neuron (l * a) mod n with a the integer nearest
// n (sqrt(5) - 1) / 2 that is coprime to n: consecutive labels land a golden-ratio stride
// apart (a Weyl sequence), so any run of consecutive label ids is split almost evenly over the
// blocks of any number of ranks. The order depends on n alone, not on the number of ranks or
// the data: a checkpoint reshards across rank counts as before.
#pragma once

#include <cstdint>

namespace dslide {

class LabelMap {
 public:
  LabelMap() = default;  ///< identity
  /// The spread order over n labels when `spread` (identity for n < 3), else identity.
  LabelMap(bool spread, int64_t n);

  int32_t Neuron(int32_t label) const {
    return mul_ == 1 ? label : static_cast<int32_t>(static_cast<uint64_t>(label) * mul_ % n_);
  }
  int32_t Label(int32_t neuron) const {
    return mul_ == 1 ? neuron : static_cast<int32_t>(static_cast<uint64_t>(neuron) * inv_ % n_);
  }
  /// Label ids to neurons (negative ids, "none", stay).
  void ToNeurons(int32_t* ids, int64_t count) const;
  /// Neurons to label ids (negative ids, "none", stay).
  void ToLabels(int32_t* ids, int64_t count) const;
  bool identity() const { return mul_ == 1; }

 private:
  uint64_t n_ = 1, mul_ = 1, inv_ = 1;
};

}  // namespace dslide
