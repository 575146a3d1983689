// An Adam step matches values computed by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "common/rng.h"
#include "model/adam.h"

namespace dslide {
namespace {

TEST(Adam, TwoStepsMatchHandComputation) {
  AdamStep s;
  s.lr = 0.1f;
  s.beta1 = 0.9f;
  s.beta2 = 0.999f;
  s.eps = 1e-8f;
  float w = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  s.t = 1;
  EXPECT_TRUE(AdamUpdate(s, 1, &w, &g, &m, &v));
  // t=1: m = 0.05, v = 0.00025; mhat = 0.5, vhat = 0.25; w = 1 - 0.1 * 0.5 / 0.5 = 0.9.
  EXPECT_NEAR(m, 0.05f, 1e-7);
  // 0.999f is 0.99900001287..., so 1 - beta2 is 1.2871e-5 relatively below 0.001.
  EXPECT_NEAR(v, (1.0 - double(0.999f)) * 0.25, 1e-10);
  EXPECT_NEAR(w, 0.9f, 1e-6);
  EXPECT_EQ(g, 0.0f);  // gradient consumed
  g = -1.0f;
  s.t = 2;
  AdamUpdate(s, 1, &w, &g, &m, &v);
  // t=2: m = 0.045 - 0.1 = -0.055; v = 0.00024975 + 0.001 = 0.00124975;
  // mhat = -0.055/0.19 = -0.289474; vhat = 0.00124975/0.001999 = 0.625188; sqrt = 0.790688;
  // w = 0.9 + 0.1 * 0.289474 / 0.790688 = 0.936610.
  EXPECT_NEAR(m, -0.055f, 1e-6);
  EXPECT_NEAR(v, double(0.999f) * (1.0 - double(0.999f)) * 0.25 + (1.0 - double(0.999f)), 1e-9);
  EXPECT_NEAR(w, 0.936610f, 2e-6);
}

TEST(Adam, ReportsNonFiniteResults) {
  AdamStep s;
  std::vector<float> w(40, 1.0f), g(40, 0.1f), m(40, 0.0f), v(40, 0.0f);
  EXPECT_TRUE(AdamUpdate(s, 40, w.data(), g.data(), m.data(), v.data()));
  g[17] = std::numeric_limits<float>::infinity();  // m, v infinite: the step is inf/inf
  EXPECT_FALSE(AdamUpdate(s, 40, w.data(), g.data(), m.data(), v.data()));
  EXPECT_TRUE(std::isnan(w[17]));
  std::fill(w.begin(), w.end(), 1.0f);
  std::fill(m.begin(), m.end(), 0.0f);
  std::fill(v.begin(), v.end(), 0.0f);
  w[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(AdamUpdate(s, 40, w.data(), g.data(), m.data(), v.data()));
}

TEST(Adam, Bf16RoundingIsExactOrUnbiased) {
  // Values with 8 mantissa bits are kept exactly, whatever the noise.
  for (float f : {0.0f, 1.0f, -2.5f, 0x1p-60f, 0.15625f})
    for (uint32_t noise : {0u, 0x7fffu, 0xffffu}) EXPECT_EQ(Bf16ToFloat(FloatToBf16(f, noise)), f);
  // Round to nearest even, and NaN kept.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16Nearest(1.0f + 1.0f / 256)), 1.0f);              // tie: even
  EXPECT_EQ(Bf16ToFloat(FloatToBf16Nearest(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);  // tie: even
  EXPECT_EQ(Bf16ToFloat(FloatToBf16Nearest(1.0f + 1.0f / 200)), 1.0f + 1.0f / 128);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN(), 0))));
  // Stochastic rounding: the mean of many roundings is the value (a bfloat16 unit at 1 is
  // 2^-7; round to nearest would give 1 every time, an error of 0.3 units).
  const float x = 1.0f + 0.3f / 128;
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) sum += Bf16ToFloat(FloatToBf16(x, RoundingNoise(i, 1, 0)));
  EXPECT_NEAR(sum / n, x, 0.01 / 128);
}

TEST(Adam, Bf16MomentsFollowFp32Moments) {
  // Many steps on a row with gradients that vary: the bfloat16 run keeps its weights and
  // moments close to the fp32 run's. Its second moment moves by 0.1% of itself per step,
  // less than a bfloat16 unit: with round to nearest it would stay where it started.
  AdamStep s;
  s.lr = 1e-3f;
  const int64_t n = 64;
  std::vector<float> w(n, 0.5f), w16(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n);
  std::vector<uint16_t> m16(n, 0), v16(n, 0);
  Rng rng(3);
  for (int64_t t = 1; t <= 3000; ++t) {
    s.t = t;
    // Gradients whose scale grows 4x over the run: v must follow.
    const float scale = 0.1f * (1.0f + 3.0f * static_cast<float>(t) / 3000.0f);
    std::vector<float> gs(n);
    for (auto& x : gs) x = scale * static_cast<float>(rng.Uniform() - 0.3);
    g = gs;
    ASSERT_TRUE(AdamUpdate(s, n, w.data(), g.data(), m.data(), v.data()));
    g = gs;
    ASSERT_TRUE(AdamUpdateBf16(s, n, w16.data(), g.data(), m16.data(), v16.data(), 0, 0));
  }
  double dw = 0, dv = 0, dm = 0, mscale = 0;
  for (int64_t i = 0; i < n; ++i) {
    dw = std::max(dw, std::abs(double(w16[i]) - w[i]));
    dv = std::max(dv, std::abs(double(Bf16ToFloat(v16[i])) - v[i]) / v[i]);
    dm = std::max(dm, std::abs(double(Bf16ToFloat(m16[i])) - m[i]));
    mscale = std::max(mscale, std::abs(double(m[i])));
  }
  double moved = 0;
  for (int64_t i = 0; i < n; ++i) moved = std::max(moved, std::abs(double(w[i]) - 0.5));
  // Each step's rounding errs by up to a bfloat16 unit (2^-8 relative); v keeps 0.999 of
  // it, so its error is a walk of about 2^-9 / sqrt(1 - 0.999^2), 4%, per entry.
  EXPECT_LT(dv, 0.15) << "second moments apart (relative)";
  EXPECT_LT(dm, 0.05 * mscale) << "first moments apart";
  EXPECT_GT(moved, 0.5);
  EXPECT_LT(dw, 0.05 * moved) << "weights apart (they moved by " << moved << ")";
  std::printf("max |w16 - w| %.4f of a move of %.3f; v %.3f, m %.3f relative\n", dw, moved, dv,
              dm / mscale);
}

// A lazy row's catch-up (AdamCatchUp) equals the steps dense Adam gives it while its gradient
// is zero. Late in a run (bias corrections within 1e-12 of 1) with sqrt(v) far above eps,
// the two differ only by rounding: checked for gaps of 1 to 400 steps, then the step of a
// touching batch on top.
TEST(Adam, CatchUpEqualsDenseStepsWithZeroGradients) {
  Rng rng(7);
  const int64_t n = 64, t0 = 30000;
  std::vector<float> w0(n), m0(n), v0(n), g1(n);
  for (int64_t i = 0; i < n; ++i) {
    w0[i] = static_cast<float>(rng.Uniform() - 0.5);
    m0[i] = 0.01f * static_cast<float>(rng.Uniform() - 0.5);
    v0[i] = 1e-4f * static_cast<float>(0.5 + rng.Uniform());
    g1[i] = 0.02f * static_cast<float>(rng.Uniform() - 0.5);
  }
  AdamStep s;
  s.lr = 1e-3f;
  for (int64_t gap : {1, 2, 7, 50, 400}) {
    SCOPED_TRACE(gap);
    std::vector<float> w = w0, m = m0, v = v0, g(n, 0.0f);
    for (int64_t k = 1; k <= gap; ++k) {  // dense: zero gradients
      s.t = t0 + k;
      ASSERT_TRUE(AdamUpdate(s, n, w.data(), g.data(), m.data(), v.data()));
    }
    s.t = t0 + gap + 1;
    g = g1;
    ASSERT_TRUE(AdamUpdate(s, n, w.data(), g.data(), m.data(), v.data()));
    std::vector<float> lw = w0, lm = m0, lv = v0, lg = g1;  // lazy: last step t0
    const AdamCatchUp c = AdamCatchUp::Since(s, t0, /*first_layer=*/true);
    ASSERT_TRUE(c.any);
    ASSERT_TRUE(AdamUpdate(s, n, lw.data(), lg.data(), lm.data(), lv.data(), c));
    double moved = 0;
    for (int64_t i = 0; i < n; ++i) {
      moved = std::max(moved, std::abs(double(w[i]) - w0[i]));
      EXPECT_NEAR(lm[i], m[i], 1e-5 * std::abs(m[i]) + 1e-12) << i;
      EXPECT_NEAR(lv[i], v[i], 1e-5 * v[i]) << i;
      EXPECT_NEAR(lw[i], w[i], 1e-4 * std::abs(w[i] - w0[i]) + 1e-7) << i;
    }
    EXPECT_GT(moved, 1e-4) << "the zero-gradient steps should move the weights";
  }
}

// A row that owes no steps takes the plain step, bit for bit: touched at the step before
// (a gap of 0), loaded without its last step (-1), or in a layer whose rows do not catch up
// (by default those above the first).
TEST(Adam, NoCatchUpWhenNoStepIsOwed) {
  AdamStep s;
  s.t = 12;
  EXPECT_FALSE(AdamCatchUp::Since(s, 11, true).any);
  EXPECT_FALSE(AdamCatchUp::Since(s, -1, true).any);
  EXPECT_TRUE(AdamCatchUp::Since(s, 0, true).any);
  EXPECT_FALSE(AdamCatchUp::Since(s, 0, /*first_layer=*/false).any);
  s.catch_up_rest = true;
  EXPECT_TRUE(AdamCatchUp::Since(s, 0, false).any);
  s.catch_up_first = false;
  EXPECT_FALSE(AdamCatchUp::Since(s, 0, true).any);
  s.catch_up_first = true;
  // Its factors: the gap's sum of (b1 / sqrt(b2))^k and the moments' decay.
  const AdamCatchUp c = AdamCatchUp::Since(s, 8, true);  // steps 9, 10, 11 missed
  const double r = double(s.beta1) / std::sqrt(double(s.beta2));
  EXPECT_NEAR(c.s, r + r * r + r * r * r, 1e-6);
  EXPECT_NEAR(c.d1, std::pow(double(s.beta1), 3), 1e-7);
  EXPECT_NEAR(c.d2, std::pow(double(s.beta2), 3), 1e-7);
  std::vector<float> w(8, 0.25f), g(8, 0.1f), m(8, 0.01f), v(8, 1e-3f);
  std::vector<float> w2 = w, g2 = g, m2 = m, v2 = v;
  ASSERT_TRUE(AdamUpdate(s, 8, w.data(), g.data(), m.data(), v.data()));
  ASSERT_TRUE(AdamUpdate(s, 8, w2.data(), g2.data(), m2.data(), v2.data(),
                         AdamCatchUp::Since(s, 11, true)));
  EXPECT_EQ(w, w2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
}

// With bfloat16 moments the catch-up is the fp32 one to a bfloat16 rounding.
TEST(Adam, Bf16CatchUpFollowsFp32) {
  AdamStep s;
  s.lr = 1e-3f;
  s.t = 5000;
  const int64_t n = 32;
  std::vector<float> w(n, 0.5f), g(n, 0.0f), m(n), v(n);
  std::vector<uint16_t> m16(n), v16(n);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = Bf16ToFloat(FloatToBf16Nearest(0.001f * static_cast<float>(i - 16)));
    v[i] = Bf16ToFloat(FloatToBf16Nearest(1e-5f * static_cast<float>(i + 1)));
    m16[i] = FloatToBf16Nearest(m[i]);
    v16[i] = FloatToBf16Nearest(v[i]);
  }
  std::vector<float> w16 = w, g16 = g;
  const AdamCatchUp c = AdamCatchUp::Since(s, 4980, true);
  ASSERT_TRUE(AdamUpdate(s, n, w.data(), g.data(), m.data(), v.data(), c));
  ASSERT_TRUE(AdamUpdateBf16(s, n, w16.data(), g16.data(), m16.data(), v16.data(), 0, 0, c));
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(w16[i], w[i]) << i;  // the weight's step reads the moments before rounding
    EXPECT_NEAR(Bf16ToFloat(m16[i]), m[i], std::abs(m[i]) / 128) << i;
    EXPECT_NEAR(Bf16ToFloat(v16[i]), v[i], v[i] / 128) << i;
  }
}

}  // namespace
}  // namespace dslide
