// Adam (Kingma & Ba) on rows of a parameter matrix, with bias correction.
#pragma once

#include <math.h>
#include <string.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/hd.h"

namespace dslide {

/// One optimiser step's constants (step t is 1-based).
struct AdamStep {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  int64_t t = 1;
  /// Lazy steps (a row steps only when a batch touches it) first take, in closed form, the
  /// steps the row missed since its last one (AdamCatchUp): in the first layer (a row per
  /// input feature), in the layers above it.
  bool catch_up_first = true, catch_up_rest = false;
  /// The first layer's weights step at lr x first_lr_scale (--first-lr-scale,
  /// FirstLayerLrScale); its bias and the other layers at lr.
  float first_lr_scale = 1.0f;
  bool CatchesUp(bool first_layer) const { return first_layer ? catch_up_first : catch_up_rest; }
  /// The rate of a layer's weights.
  float WeightLr(bool first_layer) const { return first_layer ? lr * first_lr_scale : lr; }
  float bias1() const { return 1.0f - static_cast<float>(std::pow(beta1, t)); }
  float bias2() const { return 1.0f - static_cast<float>(std::pow(beta2, t)); }
};

/// The steps dense Adam would have given a parameter in the `missed` steps before this one,
/// when its gradient there was zero (a lazy row no batch touched): its moments decay,
/// m_k = b1^k m, v_k = b2^k v, and each step moves it by lr * m_k / sqrt(v_k), so together
///   w -= lr * s * (m/bias1) / (sqrt(v/bias2) + eps),  s = sum_{k=1..missed} (b1/sqrt(b2))^k,
///   m *= b1^missed;  v *= b2^missed,
/// with the bias corrections and eps of the step that applies it.
/// Without it a lazy row takes only the steps of the batches that touch it, about a tenth
/// of the movement per gradient that dense Adam's momentum gives (1 / (1 - b1) steps).
/// missed <= 0, or the catch-up off for the layer: nothing (s = 0, d1 = d2 = 1).
struct AdamCatchUp {
  float s = 0.0f, d1 = 1.0f, d2 = 1.0f;
  bool any = false;
  DSLIDE_HD static AdamCatchUp Of(float beta1, float beta2, int64_t missed) {
    AdamCatchUp c;
    if (missed <= 0) return c;
    const double b1 = beta1, b2 = beta2, k = static_cast<double>(missed);
    const double r = b2 > 0.0 ? b1 / sqrt(b2) : 0.0;
    c.s = static_cast<float>(r == 1.0 ? k : r * (1.0 - pow(r, k)) / (1.0 - r));
    c.d1 = static_cast<float>(pow(b1, k));
    c.d2 = static_cast<float>(pow(b2, k));
    c.any = true;
    return c;
  }
  /// Applies it to one parameter w with moments m and v, given the step's lr, 1 / bias1,
  /// 1 / bias2 and eps.
  DSLIDE_HD void Apply(float lr, float inv_bias1, float inv_bias2, float eps, float* w, float* m,
                       float* v) const {
    *w -= (lr * s) * (*m * inv_bias1) / (sqrtf(*v * inv_bias2) + eps);
    *m *= d1;
    *v *= d2;
  }
  /// The catch-up at step t of a parameter whose last step was `last` (0: none yet; -1: it
  /// owes none), where its layer catches up (`on`).
  DSLIDE_HD static AdamCatchUp Since(bool on, float beta1, float beta2, int64_t t, int64_t last) {
    return on && last >= 0 ? Of(beta1, beta2, t - 1 - last) : AdamCatchUp{};
  }
  /// Since, at step s for a parameter of the first layer or another (AdamStep::CatchesUp).
  static AdamCatchUp Since(const AdamStep& s, int64_t last, bool first_layer);
};

inline AdamCatchUp AdamCatchUp::Since(const AdamStep& s, int64_t last, bool first_layer) {
  return Since(s.CatchesUp(first_layer), s.beta1, s.beta2, s.t, last);
}

/// Updates n parameters w with gradients g (then zeroes g) and moments m, v:
/// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  w -= lr * (m/bias1) / (sqrt(v/bias2) + eps),
/// after the catch-up `c` (AdamCatchUp) where it has any.
/// Returns false when an updated parameter is NaN or infinite.
bool AdamUpdate(const AdamStep& s, int64_t n, float* w, float* g, float* m, float* v,
                const AdamCatchUp& c = {});

/// Adam's moments in bfloat16 (the top 16 bits of a float: its exponent range, 8 bits of
/// mantissa), for `--state bf16`: 8 bytes per weight in place of 12.
DSLIDE_HD inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}
/// f rounded to bfloat16 stochastically: up (away from zero) with probability equal to the
/// dropped fraction, given 16 uniform random bits `noise`, so that the rounding is unbiased.
/// Round to nearest would freeze the second moment: its step (1 - beta2)(g^2 - v), a
/// thousandth of v, is below half a bfloat16 unit (2^-9 of v). NaN stays NaN.
DSLIDE_HD inline uint16_t FloatToBf16(float f, uint32_t noise) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | ((bits & 0xffffu) ? 0x40u : 0u));
  return static_cast<uint16_t>((bits + (noise & 0xffffu)) >> 16);
}
/// Round to nearest even (checkpoints loaded into a bfloat16 run).
DSLIDE_HD inline uint16_t FloatToBf16Nearest(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return FloatToBf16(f, 0x7fffu + ((bits >> 16) & 1u));
}
/// 32 random bits of (position, step, stream): a stateless hash, so that updates are
/// reproducible whatever the thread order.
DSLIDE_HD inline uint32_t RoundingNoise(uint64_t pos, int64_t t, uint32_t stream) {
  uint64_t x = pos * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(t) << 32 | stream);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x >> 32);
}

/// AdamUpdate with bfloat16 moments, stochastically rounded with noise drawn from (pos + i,
/// s.t, stream): pos is the row's offset in its layer, stream tells layers apart.
bool AdamUpdateBf16(const AdamStep& s, int64_t n, float* w, float* g, uint16_t* m, uint16_t* v,
                    uint64_t pos, uint32_t stream, const AdamCatchUp& c = {});

/// Whole arrays (vectors of any allocator) between float and bfloat16 (round to nearest even).
template <class Floats, class Halves>
void ToBf16(const Floats& from, Halves* to) {
  to->resize(from.size());
  for (size_t i = 0; i < from.size(); ++i) (*to)[i] = FloatToBf16Nearest(from[i]);
}
template <class Halves, class Floats>
void FromBf16(const Halves& from, Floats* to) {
  to->resize(from.size());
  for (size_t i = 0; i < from.size(); ++i) (*to)[i] = Bf16ToFloat(from[i]);
}

}  // namespace dslide
