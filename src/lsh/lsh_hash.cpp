// Hash families. DWTA follows Chen & Shrivastava (2018): per-bin argmax over the non-zeros
// of a sparse input through an inverse index, then densification of empty bins by probing
// other hashes with a universal hash sequence.
#include "lsh/lsh_hash.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "common/error.h"
#include "common/rng.h"

namespace dslide {

namespace {
/// Eight floats as one value (GCC/Clang vector extension: one AVX register, or two SSE ones
/// where AVX is absent).
typedef float Vec8 __attribute__((vector_size(32)));

int Log2(int v) {
  int b = 0;
  while ((1 << (b + 1)) <= v) ++b;
  return b;
}
}  // namespace

LshHash::LshHash(HashFamily family, int64_t dim, int k, int l, int bin_size, uint64_t seed)
    : family_(family), dim_(dim), k_(k), l_(l), num_hashes_(k * l), seed_(seed) {
  DSLIDE_CHECK(dim >= 2, "LSH needs an input dimension >= 2, got ", dim);
  Rng rng(StreamSeed(seed, 0x6c7368));
  if (family == HashFamily::kSrp) {
    bits_per_hash_ = 1;
    // Sparse projections: each coordinate enters a hash with probability 1/3 (SLIDE's ratio),
    // sign +-1; at least one coordinate per hash.
    proj_off_.assign(1, 0);
    for (int h = 0; h < num_hashes_; ++h) {
      for (int64_t j = 0; j < dim; ++j) {
        if (rng.Below(3) == 0) {
          proj_idx_.push_back(static_cast<int32_t>(j));
          proj_sign_.push_back(rng.Below(2) ? 1 : -1);
        }
      }
      if (static_cast<int64_t>(proj_idx_.size()) == proj_off_.back()) {
        proj_idx_.push_back(static_cast<int32_t>(rng.Below(dim)));
        proj_sign_.push_back(1);
      }
      proj_off_.push_back(static_cast<int64_t>(proj_idx_.size()));
    }
    // Inverse index: for each coordinate, the hashes it enters.
    std::vector<int64_t> cnt(dim + 1, 0);
    for (int32_t j : proj_idx_) ++cnt[j + 1];
    inv_off_.assign(dim + 1, 0);
    std::partial_sum(cnt.begin(), cnt.end(), inv_off_.begin());
    inv_hash_.resize(proj_idx_.size());
    inv_sign_.resize(proj_idx_.size());
    std::vector<int64_t> pos(inv_off_.begin(), inv_off_.end() - 1);
    for (int h = 0; h < num_hashes_; ++h)
      for (int64_t e = proj_off_[h]; e < proj_off_[h + 1]; ++e) {
        const int64_t p = pos[proj_idx_[e]]++;
        inv_hash_[p] = h;
        inv_sign_[p] = proj_sign_[e];
      }
  } else {
    // WTA/DWTA: bins of `bin_size` coordinates cut from random permutations of [0, dim).
    int64_t m = bin_size;
    while (m > dim) m /= 2;
    bin_size_ = static_cast<int>(m);
    bits_per_hash_ = Log2(bin_size_);
    const int64_t bins_per_perm = dim / bin_size_;
    bins_.resize(static_cast<size_t>(num_hashes_) * bin_size_);
    std::vector<int32_t> perm(dim);
    int64_t filled = 0;
    while (filled < num_hashes_) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t i = dim - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
      for (int64_t b = 0; b < bins_per_perm && filled < num_hashes_; ++b, ++filled)
        std::copy(perm.begin() + b * bin_size_, perm.begin() + (b + 1) * bin_size_,
                  bins_.begin() + filled * bin_size_);
    }
    std::vector<int64_t> cnt(dim + 1, 0);
    for (int32_t j : bins_) ++cnt[j + 1];
    inv_off_.assign(dim + 1, 0);
    std::partial_sum(cnt.begin(), cnt.end(), inv_off_.begin());
    inv_hash_.resize(bins_.size());
    std::vector<int64_t> pos(inv_off_.begin(), inv_off_.end() - 1);
    for (size_t e = 0; e < bins_.size(); ++e) inv_hash_[pos[bins_[e]]++] = static_cast<int32_t>(e);
  }
  table_bits_ = std::min(k_ * bits_per_hash_, kMaxTableBits);
}

HashView LshHash::View() const {
  HashView h;
  h.family = family_ == HashFamily::kSrp   ? HashView::kSrp
             : family_ == HashFamily::kWta ? HashView::kWta
                                           : HashView::kDwta;
  h.dim = dim_;
  h.k = k_;
  h.l = l_;
  h.bin_size = bin_size_;
  h.bits_per_hash = bits_per_hash_;
  h.table_bits = table_bits_;
  h.num_hashes = num_hashes_;
  h.max_table_bits = kMaxTableBits;
  h.seed = seed_;
  h.proj_off = proj_off_.data();
  h.proj_idx = proj_idx_.data();
  h.proj_sign = proj_sign_.data();
  h.inv_off = inv_off_.data();
  h.inv_hash = inv_hash_.data();
  h.inv_sign = inv_sign_.data();
  h.bins = bins_.data();
  return h;
}

void LshHash::HashSparse(const int32_t* ids, const float* vals, int64_t n, uint32_t* buckets,
                         Scratch* s) const {
  s->arg.resize(num_hashes_);
  s->acc.resize(num_hashes_);
  const HashView h = View();
  HashRawSparse(h, ids, vals, n, s->acc.data(), s->arg.data());
  HashCombine(h, s->arg.data(), buckets);
}

void LshHash::RawDense(const float* x, std::vector<int32_t>* out, Scratch*) const {
  out->resize(num_hashes_);
  HashRawDense(
      View(), [x](int64_t j) { return x[j]; }, out->data());
}

void LshHash::HashDense(const float* x, uint32_t* buckets, Scratch* s) const {
  RawDense(x, &s->arg, s);
  HashCombine(View(), s->arg.data(), buckets);
}

void LshHash::HashDenseRows(const float* x, int64_t stride, int64_t rows, uint32_t* buckets,
                            Scratch* s) const {
  if (family_ != HashFamily::kSrp) {
    for (int64_t r = 0; r < rows; ++r) HashDense(x + r * stride, buckets + r * l_, s);
    return;
  }
  // Blocks of kBlock rows, transposed (coordinate-major) so that each projection entry
  // updates the whole block with contiguous loads. Per row the sums run over the entries in
  // the same order as HashRawDense (and multiplying by +-1 is exact): the same bits.
  constexpr int64_t kBlock = 32;
  const HashView h = View();
  s->block.resize(static_cast<size_t>(dim_) * kBlock);
  s->arg.resize(static_cast<size_t>(num_hashes_) * kBlock);
  float* xt = s->block.data();
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t nb = std::min(kBlock, rows - r0);
    for (int64_t r = 0; r < nb; ++r)
      for (int64_t j = 0; j < dim_; ++j) xt[j * kBlock + r] = x[(r0 + r) * stride + j];
    for (int i = 0; i < num_hashes_; ++i) {
      // The block's sums in registers (a float array here became gathers and spills).
      Vec8 acc[kBlock / 8] = {};
      for (int64_t e = proj_off_[i]; e < proj_off_[i + 1]; ++e) {
        const float sign = static_cast<float>(proj_sign_[e]);
        const float* col = xt + static_cast<int64_t>(proj_idx_[e]) * kBlock;
        for (int64_t v = 0; v < kBlock / 8; ++v) {
          Vec8 c;
          std::memcpy(&c, col + 8 * v, sizeof c);
          acc[v] += sign * c;
        }
      }
      for (int64_t r = 0; r < nb; ++r) s->arg[r * num_hashes_ + i] = acc[r / 8][r % 8] >= 0 ? 1 : 0;
    }
    for (int64_t r = 0; r < nb; ++r)
      HashCombine(h, s->arg.data() + r * num_hashes_, buckets + (r0 + r) * l_);
  }
}

}  // namespace dslide
