// The orders in which the host executor runs a kernel's indices, blocks and block threads: a
// fixed permutation per launch, never index order. Device threads and blocks run in no set
// order, so a kernel that assumes one fails its tests on the host too.
#pragma once

#include <cstdint>
#include <numeric>

namespace dslide::gpu {

/// The k-th index of a fixed permutation of [0, n) (k * stride + offset mod n, the stride
/// coprime to n).
class HostOrder {
 public:
  HostOrder(int64_t n, uint64_t salt) : n_(n) {
    if (n_ <= 1) return;
    const uint64_t un = static_cast<uint64_t>(n_);
    stride_ = (0x9E3779B97F4A7C15ull ^ salt) % un;
    if (stride_ == 0) stride_ = 1;
    while (std::gcd(stride_, un) != 1) stride_ = stride_ + 1 == un ? 1 : stride_ + 1;
    offset_ = (salt * 0xBF58476D1CE4E5B9ull) % un;
  }
  int64_t operator[](int64_t k) const {
    if (n_ <= 1) return k;
    const unsigned __int128 v =
        static_cast<unsigned __int128>(k) * stride_ + static_cast<unsigned __int128>(offset_);
    return static_cast<int64_t>(v % static_cast<uint64_t>(n_));
  }

 private:
  int64_t n_;
  uint64_t stride_ = 1, offset_ = 0;
};

/// A new salt for each permutation an executor draws.
class HostOrderSalt {
 public:
  uint64_t Next() { return ++salt_; }

 private:
  uint64_t salt_ = 0;
};

/// Runs f(i) for i in [0, n) in a shuffled order.
template <class F>
void HostShuffled(int64_t n, HostOrderSalt* salt, const F& f) {
  const HostOrder order(n, salt->Next());
  for (int64_t k = 0; k < n; ++k) f(order[k]);
}

}  // namespace dslide::gpu
