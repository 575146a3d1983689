// LSH hash families (SLIDE section 4.1; docs/user-guide.md, "Sampling and the update"): signed
// random projections (SimHash with sparse +-1 projections), WTA and densified WTA. K hashes make
// one bucket id.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "lsh/lsh_kernels.h"

namespace dslide {

/// K*L hash functions over vectors of dimension `dim`, combined into L bucket ids of
/// `table_bits()` bits. Immutable after construction, so safe to share between threads.
class LshHash {
 public:
  /// Buckets wider than this are folded by a mixing hash (keeps tables' offsets small).
  static constexpr int kMaxTableBits = 20;

  LshHash(HashFamily family, int64_t dim, int k, int l, int bin_size, uint64_t seed);

  int num_tables() const { return l_; }
  int table_bits() const { return table_bits_; }
  int64_t dim() const { return dim_; }
  HashFamily family() const { return family_; }

  /// Per-thread scratch for Hash*(); reuse across calls to avoid allocation.
  struct Scratch {
    std::vector<float> acc;
    std::vector<int32_t> arg;
    std::vector<float> block;  // HashDenseRows: a block of rows, transposed
  };

  /// Hashes a sparse vector (ids in [0, dim)); writes L bucket ids to `buckets`.
  void HashSparse(const int32_t* ids, const float* vals, int64_t n, uint32_t* buckets,
                  Scratch* scratch) const;
  /// Hashes a dense vector of length dim(); writes L bucket ids.
  void HashDense(const float* x, uint32_t* buckets, Scratch* scratch) const;
  /// Hashes `rows` dense vectors (row r at x + r * stride, dim() values each); writes L
  /// bucket ids per row to buckets + r * num_tables(). The same ids as HashDense row by row;
  /// SimHash runs a block of rows at a time, each projection entry over the whole block.
  void HashDenseRows(const float* x, int64_t stride, int64_t rows, uint32_t* buckets,
                     Scratch* scratch) const;
  /// Raw per-function hash values (K*L of them), for tests of collision probability.
  void RawDense(const float* x, std::vector<int32_t>* out, Scratch* scratch) const;

  /// The functions as plain arrays (for the shared kernels of lsh_kernels.h).
  HashView View() const;
  /// Sizes of the arrays behind View() (for copying them to a device).
  size_t proj_size() const { return proj_idx_.size(); }
  size_t inv_size() const { return inv_hash_.size(); }
  size_t bins_size() const { return bins_.size(); }

 private:
  HashFamily family_;
  int64_t dim_;
  int k_, l_, bin_size_ = 2, bits_per_hash_ = 1, table_bits_ = 1;
  int num_hashes_;
  uint64_t seed_;
  // SRP: for each hash, projection entries (index, sign) over ~dim/3 coordinates (CSR), and the
  // inverse map for sparse inputs: for each input index, the (hash, sign) pairs.
  std::vector<int64_t> proj_off_;
  std::vector<int32_t> proj_idx_;
  std::vector<int8_t> proj_sign_;
  std::vector<int64_t> inv_off_;
  std::vector<int32_t> inv_hash_;  // SRP: hash id; WTA/DWTA: hash id * bin_size + position
  std::vector<int8_t> inv_sign_;
  // WTA/DWTA: for each hash, its bin_size input indices (from random permutations of dim).
  std::vector<int32_t> bins_;
};

}  // namespace dslide
