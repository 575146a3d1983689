// Hash families. DWTA follows Chen & Shrivastava (2018): per-bin argmax over the non-zeros
// of a sparse input through an inverse index, then densification of empty bins by probing
// other hashes with a universal hash sequence.
#include "lsh_hash.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "error.h"
#include "rng.h"

namespace dslide {

namespace {
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

void LshHash::Combine(const int32_t* raw, uint32_t* buckets) const {
  const bool fold = k_ * bits_per_hash_ > kMaxTableBits;
  for (int t = 0; t < l_; ++t) {
    uint64_t code = 0;
    for (int j = 0; j < k_; ++j)
      code = fold ? Mix64(code ^ static_cast<uint64_t>(raw[t * k_ + j]) ^ (uint64_t(j) << 40))
                  : (code << bits_per_hash_) | static_cast<uint64_t>(raw[t * k_ + j]);
    buckets[t] = static_cast<uint32_t>(code & ((uint64_t{1} << table_bits_) - 1));
  }
}

void LshHash::Densify(int32_t* arg) const {
  // Empty bins (arg < 0) borrow the value of another hash chosen by a universal hash of
  // (hash id, attempt): the densification of Chen & Shrivastava, "Densified WTA".
  for (int h = 0; h < num_hashes_; ++h) {
    if (arg[h] >= 0) continue;
    int32_t v = 0;
    for (uint64_t attempt = 1; attempt <= 100; ++attempt) {
      const int h2 = static_cast<int>(Mix64(seed_ ^ (uint64_t(h) << 20) ^ attempt) % num_hashes_);
      if (arg[h2] >= 0 && (arg[h2] & (1 << 30)) == 0) {
        v = arg[h2];
        break;
      }
    }
    arg[h] = v | (1 << 30);  // mark as borrowed so chains never borrow a borrowed value
  }
  for (int h = 0; h < num_hashes_; ++h) arg[h] &= ~(1 << 30);
}

void LshHash::HashSparse(const int32_t* ids, const float* vals, int64_t n, uint32_t* buckets,
                         Scratch* s) const {
  s->arg.assign(num_hashes_, -1);
  if (family_ == HashFamily::kSrp) {
    s->acc.assign(num_hashes_, 0.0f);
    for (int64_t e = 0; e < n; ++e) {
      const float v = vals[e];
      for (int64_t p = inv_off_[ids[e]]; p < inv_off_[ids[e] + 1]; ++p)
        s->acc[inv_hash_[p]] += inv_sign_[p] * v;
    }
    for (int h = 0; h < num_hashes_; ++h) s->arg[h] = s->acc[h] >= 0 ? 1 : 0;
  } else {
    // Only non-zeros take part; WTA on a sparse input treats the missing coordinates as
    // zeros, DWTA as absent (then densifies).
    s->acc.assign(num_hashes_, -std::numeric_limits<float>::infinity());
    for (int64_t e = 0; e < n; ++e) {
      const float v = vals[e];
      if (v == 0.0f) continue;
      for (int64_t p = inv_off_[ids[e]]; p < inv_off_[ids[e] + 1]; ++p) {
        const int h = inv_hash_[p] / bin_size_;
        if (v > s->acc[h]) {
          s->acc[h] = v;
          s->arg[h] = inv_hash_[p] % bin_size_;
        }
      }
    }
    if (family_ == HashFamily::kWta) {
      // A bin whose non-zeros are all negative (or absent) has its max at a zero coordinate.
      for (int h = 0; h < num_hashes_; ++h) {
        if (s->acc[h] > 0) continue;
        const int32_t* bin = &bins_[static_cast<size_t>(h) * bin_size_];
        int zero_pos = -1;
        for (int p = 0; p < bin_size_ && zero_pos < 0; ++p) {
          const int32_t* it = std::lower_bound(ids, ids + n, bin[p]);
          if (it == ids + n || *it != bin[p] || vals[it - ids] == 0.0f) zero_pos = p;
        }
        if (zero_pos >= 0) s->arg[h] = zero_pos;
        if (s->arg[h] < 0) s->arg[h] = 0;
      }
    } else {
      Densify(s->arg.data());
    }
  }
  Combine(s->arg.data(), buckets);
}

void LshHash::RawDense(const float* x, std::vector<int32_t>* out, Scratch* s) const {
  out->assign(num_hashes_, -1);
  if (family_ == HashFamily::kSrp) {
    for (int h = 0; h < num_hashes_; ++h) {
      float acc = 0;
      for (int64_t e = proj_off_[h]; e < proj_off_[h + 1]; ++e) acc += proj_sign_[e] * x[proj_idx_[e]];
      (*out)[h] = acc >= 0 ? 1 : 0;
    }
    return;
  }
  for (int h = 0; h < num_hashes_; ++h) {
    const int32_t* bin = &bins_[static_cast<size_t>(h) * bin_size_];
    float best = -std::numeric_limits<float>::infinity();
    int arg = -1;
    for (int p = 0; p < bin_size_; ++p) {
      const float v = x[bin[p]];
      if (family_ == HashFamily::kDwta && v == 0.0f) continue;
      if (v > best) {
        best = v;
        arg = p;
      }
    }
    (*out)[h] = arg;
  }
  if (family_ == HashFamily::kDwta) Densify(out->data());
}

void LshHash::HashDense(const float* x, uint32_t* buckets, Scratch* s) const {
  RawDense(x, &s->arg, s);
  Combine(s->arg.data(), buckets);
}

}  // namespace dslide
