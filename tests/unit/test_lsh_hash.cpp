// Each hash family's collision rate rises with similarity as theory says.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/rng.h"
#include "lsh/lsh_hash.h"

namespace dslide {
namespace {

constexpr int kDim = 64;
constexpr int kHashes = 2000;  // K=1, L=kHashes: one raw hash per table

/// A pair of dense vectors with cosine similarity `c`.
void Pair(double c, uint64_t seed, std::vector<float>* x, std::vector<float>* y) {
  Rng rng(seed);
  std::vector<double> a(kDim), z(kDim);
  for (auto& v : a) v = rng.Normal();
  for (auto& v : z) v = rng.Normal();
  double aa = 0, az = 0;
  for (int i = 0; i < kDim; ++i) aa += a[i] * a[i], az += a[i] * z[i];
  for (int i = 0; i < kDim; ++i) z[i] -= az / aa * a[i];  // z orthogonal to a
  double na = std::sqrt(aa), nz = 0;
  for (double v : z) nz += v * v;
  nz = std::sqrt(nz);
  x->resize(kDim);
  y->resize(kDim);
  for (int i = 0; i < kDim; ++i) {
    (*x)[i] = static_cast<float>(a[i] / na);
    (*y)[i] = static_cast<float>(c * a[i] / na + std::sqrt(1 - c * c) * z[i] / nz);
  }
}

double CollisionRate(HashFamily f, const std::vector<float>& x, const std::vector<float>& y) {
  LshHash h(f, kDim, 1, kHashes, 8, 7);
  LshHash::Scratch s;
  std::vector<int32_t> hx, hy;
  h.RawDense(x.data(), &hx, &s);
  h.RawDense(y.data(), &hy, &s);
  int same = 0;
  for (int i = 0; i < kHashes; ++i) same += hx[i] == hy[i];
  return static_cast<double>(same) / kHashes;
}

TEST(LshHash, SrpMatchesAngleTheory) {
  for (double c : {0.0, 0.5, 0.8, 0.95}) {
    std::vector<float> x, y;
    Pair(c, 11, &x, &y);
    const double theory = 1.0 - std::acos(c) / M_PI;
    // Sparse +-1 projections approximate Gaussian ones; 2000 hashes give sd ~0.011.
    EXPECT_NEAR(CollisionRate(HashFamily::kSrp, x, y), theory, 0.05) << "cos " << c;
  }
}

class Monotone : public ::testing::TestWithParam<HashFamily> {};

TEST_P(Monotone, CollisionRateRisesWithSimilarity) {
  double prev = -1;
  for (double c : {0.0, 0.5, 0.8, 0.95, 0.995}) {
    std::vector<float> x, y;
    Pair(c, 5, &x, &y);
    const double r = CollisionRate(GetParam(), x, y);
    EXPECT_GT(r, prev + 0.02) << "cos " << c;
    prev = r;
  }
  std::vector<float> x, y;
  Pair(1.0, 5, &x, &y);
  EXPECT_GT(CollisionRate(GetParam(), x, x), 0.999);
}

INSTANTIATE_TEST_SUITE_P(Families, Monotone,
                         ::testing::Values(HashFamily::kSrp, HashFamily::kWta, HashFamily::kDwta),
                         [](const auto& i) { return std::string(ToString(i.param)); });

TEST(LshHash, DwtaSparseRisesWithOverlap) {
  // Sparse vectors over 2000 dims with 40 non-zeros; y shares a fraction of x's support.
  const int dim = 2000, nnz = 40;
  double prev = -1;
  for (int shared : {0, 10, 20, 30, 40}) {
    Rng rng(3);
    std::vector<int32_t> xi, yi;
    std::vector<float> xv, yv;
    for (int i = 0; i < nnz; ++i) xi.push_back(i * 50);
    for (int i = 0; i < nnz; ++i) yi.push_back(i < shared ? i * 50 : i * 50 + 25);
    for (int i = 0; i < nnz; ++i) {
      const float v = static_cast<float>(0.1 + rng.Uniform());
      xv.push_back(v);
      yv.push_back(v);
    }
    LshHash h(HashFamily::kDwta, dim, 1, 3000, 8, 9);
    LshHash::Scratch s;
    int same = 0;
    // Compare the raw per-hash values through one-hash tables (K=1: bucket == raw value).
    std::vector<uint32_t> bx(3000), by(3000);
    h.HashSparse(xi.data(), xv.data(), nnz, bx.data(), &s);
    h.HashSparse(yi.data(), yv.data(), nnz, by.data(), &s);
    for (int t = 0; t < 3000; ++t) same += bx[t] == by[t];
    const double r = same / 3000.0;
    EXPECT_GT(r, prev + 0.02) << "shared " << shared;
    prev = r;
  }
  EXPECT_GT(prev, 0.999);
}

TEST(LshHash, SparseAndDenseAgree) {
  // The same vector hashed through the sparse path and the dense path lands in the same buckets.
  for (HashFamily f : {HashFamily::kSrp, HashFamily::kDwta}) {
    LshHash h(f, 100, 6, 20, 8, 1);
    std::vector<float> dense(100, 0.0f);
    std::vector<int32_t> ids;
    std::vector<float> vals;
    Rng rng(2);
    for (int i = 0; i < 100; i += 3) {
      dense[i] = static_cast<float>(rng.Uniform() + 0.1);
      ids.push_back(i);
      vals.push_back(dense[i]);
    }
    LshHash::Scratch s;
    std::vector<uint32_t> a(20), b(20);
    h.HashDense(dense.data(), a.data(), &s);
    h.HashSparse(ids.data(), vals.data(), static_cast<int64_t>(ids.size()), b.data(), &s);
    EXPECT_EQ(a, b) << ToString(f);
  }
}

TEST(LshHash, BlocksOfRowsEqualRowByRow) {
  // The blocked SimHash of table rebuilds gives every row the buckets HashDense gives it
  // (a row count that is not a multiple of the block, rows with ties at zero).
  for (HashFamily f : {HashFamily::kSrp, HashFamily::kDwta, HashFamily::kWta}) {
    const LshHash h(f, 129, 6, 50, 8, 17);
    Rng rng(3);
    const int64_t rows = 75;
    std::vector<float> x(rows * 129);
    for (auto& v : x) v = rng.Uniform() < 0.3 ? 0.0f : static_cast<float>(rng.Normal());
    std::vector<uint32_t> blocked(rows * 50), one(50);
    LshHash::Scratch s;
    h.HashDenseRows(x.data(), 129, rows, blocked.data(), &s);
    for (int64_t r = 0; r < rows; ++r) {
      h.HashDense(x.data() + r * 129, one.data(), &s);
      for (int t = 0; t < 50; ++t)
        ASSERT_EQ(blocked[r * 50 + t], one[t]) << ToString(f) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace dslide
