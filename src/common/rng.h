// Small, fast, seedable random numbers; streams derived from (seed, purpose, indices) so
// results do not depend on the number of threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.h"

namespace dslide {

/// SplitMix64 finaliser: a good 64-bit mix, used to derive independent stream seeds.
DSLIDE_HD inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Derives a seed from a base seed and up to four indices.
DSLIDE_HD inline uint64_t StreamSeed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0,
                                     uint64_t d = 0) {
  return Mix64(Mix64(Mix64(Mix64(seed ^ Mix64(a)) ^ b) ^ Mix64(c)) ^ d);
}

/// xoshiro256** generator. Not thread safe; one per thread or per stream.
class Rng {
 public:
  DSLIDE_HD explicit Rng(uint64_t seed = 1) { Seed(seed); }
  DSLIDE_HD void Seed(uint64_t seed) {
    for (auto& s : s_) {
      seed = Mix64(seed);
      s = seed;
    }
  }
  DSLIDE_HD uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  /// Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias below 2^-32 for n < 2^32).
  DSLIDE_HD uint64_t Below(uint64_t n) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(Next(), n);
#else
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
#endif
  }
  /// State word i (of 4), for generators that run several streams side by side.
  DSLIDE_HD uint64_t State(int i) const { return s_[i]; }
  /// Uniform float in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  /// Standard normal (Box-Muller, one value per call).
  double Normal() {
    double u1 = Uniform();
    const double u2 = Uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  /// Two independent values uniform on [-1, 1) from one draw, 24 bits each (exact in
  /// double arithmetic, so every compiler and launch/peers/torch_peer.py get the same values).
  void SymmetricPair(double* a, double* b) {
    const uint64_t r = Next();
    *a = static_cast<double>(r >> 40) * 0x1.0p-23 - 1.0;
    *b = static_cast<double>((r >> 16) & 0xFFFFFF) * 0x1.0p-23 - 1.0;
  }

 private:
  DSLIDE_HD static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace dslide
