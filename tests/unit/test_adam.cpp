// An Adam step matches values computed by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "adam.h"

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

}  // namespace
}  // namespace dslide
