// An approximate-nearest-neighbour index of an output layer's shard for approximate top-k:
// the rows' logits b_j + w_j . h are the inner products of [w_j, b_j] with [h, 1], and an
// HNSW graph (hnswlib; Malkov & Yashunin 2018) searched by inner product itself (ip-NSW,
// Morozov & Babenko 2018) finds the largest. The reduction of inner product to Euclidean
// distance (Bachrach et al. 2014) was measured and left: its recall@5 at 64 candidates fell
// to 0.10 on the Amazon-670K shape, whose rows' norms differ (ip-NSW: 0.9995). The
// candidates it returns are scored again exactly; only which rows are scored is approximate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/ann_defaults.h"

namespace dslide {

/// The graph's settings (hnswlib's names): links per node `m`, the build's candidate list
/// `ef_construction`, and the query's candidate list `ef` (the rows scored per query).
struct OutputIndexOptions {
  int m = kAnnM;
  int ef_construction = kAnnBuildEf;
  int ef = kAnnEf;
  /// Uniform draws of rows per query for the softmax normaliser's part outside the
  /// candidates (TailSum).
  int tail = kAnnTail;
  /// A one-vs-rest layer's rows, whose biases start at the labels' log-odds: the indexed
  /// vectors carry the biases divided by a power of two (bias_scale_) and every search also
  /// scores the rows of the largest biases (boosted_). Off (the softmax's rows): the rows as
  /// they are.
  bool one_vs_rest = false;
};

class OutputIndex {
 public:
  /// Indexes `rows` rows of `dim` weights (w, a row per neuron) with their biases b, on the
  /// OpenMP threads. Throws dslide::Error where rows or dim is 0.
  OutputIndex(const float* w, const float* b, int64_t rows, int64_t dim,
              const OutputIndexOptions& options);
  /// The index `Save` wrote to `path`, checked against the rows it must index (the same
  /// count, width and values, bit for bit) and the settings (m, ef_construction). Null, with
  /// the reason in `stale`, where it is an index of other rows (other weights, another shard)
  /// or settings; throws dslide::Error, naming the file, where it is no index at all.
  static std::unique_ptr<OutputIndex> Load(const std::string& path, const float* w, const float* b,
                                           int64_t rows, int64_t dim,
                                           const OutputIndexOptions& options, std::string* stale);
  ~OutputIndex();
  OutputIndex(const OutputIndex&) = delete;
  OutputIndex& operator=(const OutputIndex&) = delete;

  /// Writes the graph to `path` (through a temporary file renamed into place); throws
  /// dslide::Error where the file did not get every byte.
  void Save(const std::string& path) const;

  /// The rows the graph finds nearest to the query h (dim floats; at most options.ef, fewer
  /// where the shard has fewer rows), then the rows of the largest biases the walk did not
  /// find (one-vs-rest rows: boosted_), into rows[0..n) (n at most
  /// candidates()) with their exact logits b_j + w_j . h (summed in index order, in double);
  /// returns n. Thread-safe.
  int64_t Search(const float* h, int32_t* rows, float* logits) const;

  /// The rows a block of queries estimates the softmax normaliser from (TailSum):
  /// options.tail rows drawn uniformly, with replacement, from `seed`, their weights copied
  /// together.
  struct Tail {
    std::vector<int32_t> rows;
    std::vector<float> w, b;
  };
  Tail DrawTail(uint64_t seed) const;
  /// An unbiased estimate of sum_j exp(z_j - mx) over the rows j not among the n candidates
  /// `cand` (Search's), z_j = b_j + w_j . h: each of the tail's rows outside the candidates
  /// counts rows / tail times.
  double TailSum(const float* h, float mx, const int32_t* cand, int64_t n, const Tail& t) const;

  int64_t rows() const { return rows_; }
  int64_t dim() const { return dim_; }
  /// The most candidates Search returns: options.ef plus the boosted rows, or every row of
  /// a smaller shard.
  int64_t candidates() const;
  /// The settings it was built (or read) with.
  const OutputIndexOptions& options() const { return options_; }
  /// Seconds the build (or load and check) took.
  double seconds() const { return seconds_; }
  /// Whether it was read from a file (Load) rather than built.
  bool loaded() const { return loaded_; }

 private:
  struct Graph;
  OutputIndex(int64_t rows, int64_t dim, const OutputIndexOptions& options);
  int64_t rows_ = 0, dim_ = 0, width_ = 0;  ///< width_: the indexed vectors' floats
  /// The power of two the indexed vectors divide the biases by (BiasScale under
  /// options.one_vs_rest, else 1); the queries carry it in the bias's place.
  float bias_scale_ = 1.0f;
  /// Under options.one_vs_rest, where the biases reach beyond [-1, 1]: the kBoostedRows rows
  /// of the largest biases, which every Search scores beside the walk's
  /// rows. Their biases put them on top of most points' scores, and a walk over a graph that
  /// links rows by their weights finds them poorly (gcide8-skipgram's one-vs-rest model:
  /// recall@5 0.24 at ef 44, 0.49 at ef 400, without them).
  std::vector<int32_t> boosted_;
  static constexpr int64_t kBoostedRows = 256;
  /// bias_scale_ and boosted_ from the rows' biases b and options_.one_vs_rest: what a built
  /// graph and one read back (Load) must both hold.
  void FitBiases(const float* b);
  OutputIndexOptions options_;
  std::unique_ptr<Graph> graph_;
  std::vector<uint32_t> internal_;  ///< the graph's own number of each row
  /// Row i's exact logit b_i + w_i . h (in double, index order), from the graph's copy.
  double Logit(int32_t row, const float* h) const;
  void NumberRows();
  double seconds_ = 0;
  bool loaded_ = false;
};

}  // namespace dslide
