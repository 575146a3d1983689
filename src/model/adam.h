// Adam (Kingma & Ba) on rows of a parameter matrix, with bias correction.
#pragma once

#include <cmath>
#include <cstdint>

namespace dslide {

/// One optimiser step's constants (step t is 1-based).
struct AdamStep {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  int64_t t = 1;
  float bias1() const { return 1.0f - static_cast<float>(std::pow(beta1, t)); }
  float bias2() const { return 1.0f - static_cast<float>(std::pow(beta2, t)); }
};

/// Updates n parameters w with gradients g (then zeroes g) and moments m, v:
/// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  w -= lr * (m/bias1) / (sqrt(v/bias2) + eps).
/// Returns false when an updated parameter is NaN or infinite.
bool AdamUpdate(const AdamStep& s, int64_t n, float* w, float* g, float* m, float* v);

}  // namespace dslide
