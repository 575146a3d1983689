// SIMD primitives of the CPU kernels: dot products (one, or 16 lane sums at once in the
// build's registers), transposes, lane-order sums, prefetches and axpy. Results do not depend
// on the vector width: AVX-512 and AVX2 builds compute the same bits.
#pragma once

#include <cstdint>
#include <cstring>

namespace dslide::cpu {

inline float Dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t j = 0; j < n; ++j) acc += a[j] * b[j];
  return acc;
}

typedef float Vec16 __attribute__((vector_size(64)));

// The widest vector the build's instructions hold in one register: 16 floats with AVX-512,
// else 8 (AVX2). Element-wise kernels (RowsBlock, LaneDots) work in it; a wider generic vector than
// the hardware's is split by the compiler, which kept such values on the stack (an AVX2 build's
// backward pass ran several times slower). Element-wise results do not depend on the width.
#ifdef __AVX512F__
typedef Vec16 VecN;
#else
typedef float VecN __attribute__((vector_size(32)));
#endif
constexpr int kLanesN = sizeof(VecN) / sizeof(float);

// The 16 lane sums of a dot product (DotBlock) and their sums in lane order (LaneSums16),
// in the build's registers: one 16-float vector with AVX-512; with AVX2 two 8-float halves
// (lanes 0-7 and 8-15), formed and added per lane exactly as the 16-float vector, so that
// a 64-byte generic vector, which an AVX2 build keeps on the stack, is never used there.
#ifdef __AVX512F__
/// The 16 lane sums of Dot(w, x[d], n) for kN inputs x[d] at once (kN <= 16, n a multiple of
/// 16), into acc[d]: each load of the row serves kN sums, and the sums are independent
/// chains. Lane l sums j = l mod 16 in order, as Dot's vectorised loop does; LaneSums adds
/// the lanes.
template <int kN>
inline void DotBlock(const float* w, const float* const* x, int64_t n, Vec16* acc) {
  Vec16 a[kN] = {};
  for (int64_t j = 0; j < n; j += 16) {
    Vec16 wv;
    std::memcpy(&wv, w + j, sizeof wv);
    for (int d = 0; d < kN; ++d) {
      Vec16 xv;
      std::memcpy(&xv, x[d] + j, sizeof xv);
      a[d] += wv * xv;
    }
  }
  for (int d = 0; d < kN; ++d) acc[d] = a[d];
}

#if defined(__GNUC__) && !defined(__clang__)
/// One stage of a 16 x 16 transpose: rows i and i + kB (i without bit kB) swap their
/// off-diagonal kB-wide blocks.
template <int kB>
inline void TransposeStage(Vec16* m) {
  typedef int32_t Vec16i __attribute__((vector_size(64)));
  constexpr Vec16i lo = kB == 8   ? Vec16i{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}
                        : kB == 4 ? Vec16i{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}
                        : kB == 2
                            ? Vec16i{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}
                            : Vec16i{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
  constexpr Vec16i hi = lo + kB;
  for (int i = 0; i < 16; ++i) {
    if (i & kB) continue;
    const Vec16 a = m[i], b = m[i + kB];
    m[i] = __builtin_shuffle(a, b, lo);
    m[i + kB] = __builtin_shuffle(a, b, hi);
  }
}
inline void Transpose16(Vec16* m) {
  TransposeStage<8>(m);
  TransposeStage<4>(m);
  TransposeStage<2>(m);
  TransposeStage<1>(m);
}
#else
inline void Transpose16(Vec16* m) {
  float t[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) t[j][i] = m[i][j];
  for (int i = 0; i < 16; ++i) std::memcpy(&m[i], t[i], sizeof(Vec16));
}
#endif

/// Lane l of the result: the sum of m[l]'s lanes in lane order from 0.0f, as Dot's
/// vectorised loop adds its lanes (the same bits), for 16 sums at once: a transpose, then
/// 16 vector adds in lane order. m is overwritten.
inline Vec16 LaneSums(Vec16* m) {
  Transpose16(m);
  Vec16 s = {};
  for (int l = 0; l < 16; ++l) s += m[l];
  return s;
}

typedef Vec16 Acc16;
inline float LaneOf(const Acc16& z, int d) { return z[d]; }
/// The 16 entries' sums of m (each m[d]'s lanes in lane order from 0.0f); m is overwritten.
inline Acc16 LaneSums16(Acc16* m) { return LaneSums(m); }
template <int kN>
inline void DotBlock16(const float* w, const float* const* x, int64_t n, Acc16* acc) {
  DotBlock<kN>(w, x, n, acc);
}
#else
typedef VecN Vec8;
struct Acc16 {
  Vec8 lo, hi;
};
inline float LaneOf(const Acc16& z, int d) { return d < 8 ? z.lo[d] : z.hi[d - 8]; }
/// DotBlock's 16 lane sums for kN inputs, in two 8-float halves.
template <int kN>
inline void DotBlock16(const float* w, const float* const* x, int64_t n, Acc16* acc) {
  Vec8 lo[kN] = {}, hi[kN] = {};
  for (int64_t j = 0; j < n; j += 16) {
    Vec8 wl, wh;
    std::memcpy(&wl, w + j, sizeof wl);
    std::memcpy(&wh, w + j + 8, sizeof wh);
    for (int d = 0; d < kN; ++d) {
      Vec8 xl, xh;
      std::memcpy(&xl, x[d] + j, sizeof xl);
      std::memcpy(&xh, x[d] + j + 8, sizeof xh);
      lo[d] += wl * xl;
      hi[d] += wh * xh;
    }
  }
  for (int d = 0; d < kN; ++d) acc[d] = {lo[d], hi[d]};
}
/// Transposes the 8 x 8 floats of r[0..8) in place (row i becomes column i): pairs of rows
/// interleaved, then pairs of pairs, then the 128-bit halves swapped.
inline void Transpose8(Vec8* r) {
  // __builtin_shufflevector (GCC 12 and clang): lane k of the result is lane idx_k of the
  // two operands side by side.
  Vec8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int b = 0; b < 8; b += 4) {  // u[b + c]: columns c and c + 4 of rows b..b+3
    u[b] = __builtin_shufflevector(t[b], t[b + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[b + 1] = __builtin_shufflevector(t[b], t[b + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[b + 2] = __builtin_shufflevector(t[b + 1], t[b + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[b + 3] = __builtin_shufflevector(t[b + 1], t[b + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = __builtin_shufflevector(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[c + 4] = __builtin_shufflevector(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}
/// LaneSums for 16 entries in halves: entry d's sum of its 16 lanes in lane order from 0.0f,
/// in lane d of the result. m is overwritten.
inline Acc16 LaneSums16(Acc16* m) {
  Acc16 out;
  for (int half = 0; half < 2; ++half) {
    Vec8 lo[8], hi[8];
    for (int d = 0; d < 8; ++d) {
      lo[d] = m[8 * half + d].lo;
      hi[d] = m[8 * half + d].hi;
    }
    Transpose8(lo);
    Transpose8(hi);
    Vec8 sum = {};
    for (int l = 0; l < 8; ++l) sum += lo[l];
    for (int l = 0; l < 8; ++l) sum += hi[l];
    (half == 0 ? out.lo : out.hi) = sum;
  }
  return out;
}
#endif

/// Dot(w[k], x_i, n) for kR rows w[k] and the kLanesN samples i whose inputs are the lanes
/// of xt (coordinate-major: coordinate j's values at xt + j * stride; n a multiple of 16),
/// into s[k]: lane l of DotBlock's sums (j = l mod 16, in order) is formed in its own
/// register across the samples, then added to s[k] in lane order from 0.0f, as LaneSums
/// adds them: the same bits without a transpose, and each input load serves kR rows. Not
/// inlined: inside the caller's loop the compiler kept some of the sums on the stack.
template <int kR>
__attribute__((noinline)) void LaneDots(const float* const* w, const float* xt, int64_t stride,
                                        int64_t n, VecN* s) {
  const float* wk[kR];
  for (int k = 0; k < kR; ++k) wk[k] = w[k];
  VecN sum[kR] = {};
  for (int64_t l = 0; l < 16; ++l) {
    VecN acc[kR] = {};
    const float* x = xt + l * stride;
    for (int64_t j = l; j < n; j += 16, x += 16 * stride) {
      VecN xv;
      std::memcpy(&xv, x, sizeof xv);
      for (int k = 0; k < kR; ++k) acc[k] += wk[k][j] * xv;
    }
    for (int k = 0; k < kR; ++k) sum[k] += acc[k];
  }
  for (int k = 0; k < kR; ++k) s[k] = sum[k];
}

/// LaneDots for the 2 kLanesN samples of two vectors side by side (xt and xt + kLanesN):
/// s[2k] and s[2k + 1] for row k, each sample's sums formed in the same order as LaneDots
/// forms them (the same bits), each broadcast weight serving both vectors: half the loads
/// per multiply-add, what 8-lane (AVX2) registers need to keep the multipliers busy.
template <int kR>
__attribute__((noinline)) void LaneDots2(const float* const* w, const float* xt, int64_t stride,
                                         int64_t n, VecN* s) {
  const float* wk[kR];
  for (int k = 0; k < kR; ++k) wk[k] = w[k];
  VecN sum[2 * kR] = {};
  for (int64_t l = 0; l < 16; ++l) {
    VecN acc[2 * kR] = {};
    const float* x = xt + l * stride;
    for (int64_t j = l; j < n; j += 16, x += 16 * stride) {
      VecN xa, xb;
      std::memcpy(&xa, x, sizeof xa);
      std::memcpy(&xb, x + kLanesN, sizeof xb);
      for (int k = 0; k < kR; ++k) {
        const float wj = wk[k][j];
        acc[2 * k] += wj * xa;
        acc[2 * k + 1] += wj * xb;
      }
    }
    for (int k = 0; k < 2 * kR; ++k) sum[k] += acc[k];
  }
  for (int k = 0; k < 2 * kR; ++k) s[k] = sum[k];
}

/// Prefetches the cache lines of `bytes` from p with __builtin_prefetch's temporal locality
/// kLocality (3: into the first-level cache; 2: the second-level one). Weight rows are
/// visited in data-dependent order, which the hardware prefetcher cannot guess.
template <int kLocality>
inline void PrefetchLines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, kLocality);
}
/// Prefetches `floats` floats from p into the first-level cache.
inline void PrefetchRow(const float* p, int64_t floats) {
  PrefetchLines<3>(p, floats * static_cast<int64_t>(sizeof(float)));
}
/// Brings `bytes` from p into the second-level cache (the walks' far prefetch).
inline void PrefetchToL2(const void* p, int64_t bytes) { PrefetchLines<2>(p, bytes); }

inline void Axpy(float alpha, const float* __restrict x, float* __restrict y, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] += alpha * x[j];
}

}  // namespace dslide::cpu
