// The network's shape and its sharding over ranks (docs/architecture.md, "The protocol").
#pragma once

#include <cstdint>
#include <vector>

#include "model/label_map.h"

namespace dslide {

/// One fully-connected layer as seen by one rank.
struct LayerSpec {
  int64_t in_dim = 0;      ///< N_{l-1} (input features for the first layer)
  int64_t out_dim = 0;     ///< N_l, all ranks together
  double sparsity = 1.0;   ///< s_l; 1 means dense (every neuron active, no LSH tables)
  bool is_output = false;  ///< softmax output layer (else ReLU hidden)
  /// Weights stored a row per input feature (in_dim x local) instead of a row per neuron
  /// (local x in_dim). Used for the first layer, whose input is the sparse data: a sample
  /// then reads ~nnz contiguous rows instead of gathering nnz scattered values per neuron.
  bool input_major = false;
  int64_t begin = 0, end = 0;  ///< this rank's block of neurons [begin, end)
  int64_t budget = 0;          ///< active neurons per sample on this rank (beta_l / P)
  /// Output layer: negatives per sample on this rank beyond its labels there (ceil of the
  /// run's floor / P): the budget is raised for a sample whose labels would leave fewer.
  int64_t min_negatives = 0;

  int64_t local() const { return end - begin; }
  bool dense() const { return sparsity >= 1.0; }
};

/// The layers of the network for one rank of `ranks`.
struct ModelSpec {
  std::vector<LayerSpec> layers;
  int rank = 0, ranks = 1;
  /// The output layer's neuron of each label id (label_map.h); identity unless set.
  LabelMap labels;

  /// input_dim -> hidden... -> output_dim; `sparsity` has one value per layer;
  /// `min_negatives` is the floor of negatives per sample over all ranks.
  static ModelSpec Make(int64_t input_dim, const std::vector<int64_t>& hidden, int64_t output_dim,
                        const std::vector<double>& sparsity, int rank, int ranks,
                        int64_t min_negatives = 0);
  /// beta = ceil(s * n), the active neurons per sample over all ranks (n when dense).
  static int64_t Budget(double sparsity, int64_t n);
  /// Start of rank r's block of n neurons (balanced contiguous blocks).
  static int64_t BlockBegin(int64_t n, int r, int ranks) { return n * r / ranks; }
  int64_t NumParameters() const;  ///< all ranks together
};

}  // namespace dslide
