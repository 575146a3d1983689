// The Adam row update; vectorises over the row.
#include "model/adam.h"

namespace dslide {

namespace {

/// 1 / bias1 and 1 / bias2 of `s`, kept per thread for the step they were formed for: a
/// step's Adam runs once per touched row, and two pow() calls per row cost about 1 ms per
/// iteration on the Amazon shape. The same values as forming them afresh.
void InverseBias(const AdamStep& s, float* inv_bias1, float* inv_bias2) {
  struct Cache {
    float beta1 = 0.0f, beta2 = 0.0f, inv1 = 0.0f, inv2 = 0.0f;
    int64_t t = -1;
  };
  thread_local Cache c;
  if (c.t != s.t || c.beta1 != s.beta1 || c.beta2 != s.beta2) {
    c.beta1 = s.beta1;
    c.beta2 = s.beta2;
    c.t = s.t;
    c.inv1 = 1.0f / s.bias1();
    c.inv2 = 1.0f / s.bias2();
  }
  *inv_bias1 = c.inv1;
  *inv_bias2 = c.inv2;
}

/// The Adam loop over n parameters; kCatchUp: each first takes the catch-up c.
template <bool kCatchUp>
bool AdamLoop(const AdamStep& s, int64_t n, float* __restrict w, float* __restrict g,
              float* __restrict m, float* __restrict v, const AdamCatchUp& c) {
  const float b1 = s.beta1, b2 = s.beta2, c1 = 1.0f - b1, c2 = 1.0f - b2;
  float inv_bias1, inv_bias2;
  InverseBias(s, &inv_bias1, &inv_bias2);
  const float lr = s.lr, eps = s.eps;
  float check = 0.0f;  // becomes NaN when any new weight is NaN or infinite (inf * 0)
#pragma omp simd reduction(+ : check)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float m0 = m[i], v0 = v[i], w0 = w[i];
    if (kCatchUp) c.Apply(lr, inv_bias1, inv_bias2, eps, &w0, &m0, &v0);
    const float mi = b1 * m0 + c1 * gi;
    const float vi = b2 * v0 + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float wi = w0 - lr * (mi * inv_bias1) / (std::sqrt(vi * inv_bias2) + eps);
    w[i] = wi;
    check += wi * 0.0f;
    g[i] = 0.0f;
  }
  return check == 0.0f;
}

template <bool kCatchUp>
bool AdamLoopBf16(const AdamStep& s, int64_t n, float* __restrict w, float* __restrict g,
                  uint16_t* __restrict m, uint16_t* __restrict v, uint64_t pos, uint32_t stream,
                  const AdamCatchUp& c) {
  const float b1 = s.beta1, b2 = s.beta2, c1 = 1.0f - b1, c2 = 1.0f - b2;
  float inv_bias1, inv_bias2;
  InverseBias(s, &inv_bias1, &inv_bias2);
  const float lr = s.lr, eps = s.eps;
  float check = 0.0f;
#pragma omp simd reduction(+ : check)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float m0 = Bf16ToFloat(m[i]), v0 = Bf16ToFloat(v[i]), w0 = w[i];
    if (kCatchUp) c.Apply(lr, inv_bias1, inv_bias2, eps, &w0, &m0, &v0);
    const float mi = b1 * m0 + c1 * gi;
    const float vi = b2 * v0 + c2 * gi * gi;
    const uint32_t noise = RoundingNoise(pos + static_cast<uint64_t>(i), s.t, stream);
    m[i] = FloatToBf16(mi, noise);
    v[i] = FloatToBf16(vi, noise >> 16);
    const float wi = w0 - lr * (mi * inv_bias1) / (std::sqrt(vi * inv_bias2) + eps);
    w[i] = wi;
    check += wi * 0.0f;
    g[i] = 0.0f;
  }
  return check == 0.0f;
}

}  // namespace

bool AdamUpdate(const AdamStep& s, int64_t n, float* w, float* g, float* m, float* v,
                const AdamCatchUp& c) {
  return c.any ? AdamLoop<true>(s, n, w, g, m, v, c) : AdamLoop<false>(s, n, w, g, m, v, c);
}

bool AdamUpdateBf16(const AdamStep& s, int64_t n, float* w, float* g, uint16_t* m, uint16_t* v,
                    uint64_t pos, uint32_t stream, const AdamCatchUp& c) {
  return c.any ? AdamLoopBf16<true>(s, n, w, g, m, v, pos, stream, c)
               : AdamLoopBf16<false>(s, n, w, g, m, v, pos, stream, c);
}

}  // namespace dslide
