// The budget sampler returns exactly the budget, keeps forced ids, never repeats an id.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "common/rng.h"
#include "lsh/budget_sampler.h"

namespace dslide {
namespace {

struct Fixture {
  int64_t n = 1000;
  LshTables tables{8, 4, 64, InsertPolicy::kReservoir};
  std::vector<uint32_t> query;
  Fixture() {
    std::vector<uint32_t> b(8 * n);
    Rng rng(4);
    for (auto& v : b) v = static_cast<uint32_t>(rng.Below(16));
    tables.Build(b.data(), n, 9);
    for (int t = 0; t < 8; ++t) query.push_back(static_cast<uint32_t>(rng.Below(16)));
  }
};

void CheckSet(const std::vector<int32_t>& out, int64_t k, int64_t n) {
  std::set<int32_t> s(out.begin(), out.begin() + k);
  EXPECT_EQ(static_cast<int64_t>(s.size()), k) << "duplicates";
  for (int32_t id : s) EXPECT_TRUE(id >= 0 && id < n);
}

TEST(BudgetSampler, ExactBudgetEveryStrategy) {
  Fixture f;
  for (QueryStrategy q :
       {QueryStrategy::kVanilla, QueryStrategy::kTopK, QueryStrategy::kThreshold}) {
    for (int64_t budget : {1, 7, 50, 300, 999, 1000}) {
      BudgetSampler sampler(SelectPolicy{q, 2, FillPolicy::kRandom});
      SamplerScratch scratch(f.n);
      Rng rng(budget);
      const std::vector<int32_t> forced = {5, 17, 999};
      std::vector<int32_t> out(std::max<int64_t>(budget, 3));
      const int64_t k = sampler.Select(&f.tables, f.query.data(), forced.data(), 3, budget, 0, &rng,
                                       &scratch, out.data());
      EXPECT_EQ(k, std::max<int64_t>(budget, 3)) << ToString(q) << " budget " << budget;
      CheckSet(out, k, f.n);
      // Forced ids come first.
      EXPECT_EQ(out[0], 5);
      EXPECT_EQ(out[1], 17);
      EXPECT_EQ(out[2], 999);
    }
  }
}

TEST(BudgetSampler, RepeatedCallsStayCorrect) {
  // Stamps are reused across calls: results must stay duplicate-free and exact.
  Fixture f;
  BudgetSampler sampler(SelectPolicy{QueryStrategy::kTopK, 2, FillPolicy::kRandom});
  SamplerScratch scratch(f.n);
  Rng rng(1);
  std::vector<int32_t> out(120);
  for (int rep = 0; rep < 200; ++rep) {
    const int32_t forced = rep % 1000;
    const int64_t k =
        sampler.Select(&f.tables, f.query.data(), &forced, 1, 120, 0, &rng, &scratch, out.data());
    ASSERT_EQ(k, 120);
    CheckSet(out, k, f.n);
  }
}

TEST(BudgetSampler, StopPolicyReturnsOnlyCandidates) {
  Fixture f;
  BudgetSampler sampler(SelectPolicy{QueryStrategy::kVanilla, 1, FillPolicy::kStop});
  SamplerScratch scratch(f.n);
  Rng rng(2);
  std::vector<int32_t> out(900);
  const int64_t k =
      sampler.Select(&f.tables, f.query.data(), nullptr, 0, 900, 0, &rng, &scratch, out.data());
  std::set<int32_t> cand;
  for (int t = 0; t < 8; ++t) {
    const auto b = f.tables.Get(t, f.query[t]);
    cand.insert(b.ids, b.ids + b.size);
  }
  EXPECT_EQ(k, static_cast<int64_t>(cand.size()));
  for (int64_t i = 0; i < k; ++i) EXPECT_TRUE(cand.count(out[i]));
}

TEST(BudgetSampler, TopKPrefersMoreCollisions) {
  // Item 0 sits in the queried bucket of every table; the others in one table each.
  const int64_t n = 100;
  std::vector<uint32_t> b(4 * n, 1);
  for (int t = 0; t < 4; ++t) {
    b[t * n + 0] = 0;
    for (int i = 1 + t * 5; i < 6 + t * 5; ++i) b[t * n + i] = 0;
  }
  LshTables tables(4, 2, 64, InsertPolicy::kReservoir);
  tables.Build(b.data(), n, 1);
  const std::vector<uint32_t> q = {0, 0, 0, 0};
  BudgetSampler sampler(SelectPolicy{QueryStrategy::kTopK, 1, FillPolicy::kStop});
  SamplerScratch scratch(n);
  for (int rep = 0; rep < 20; ++rep) {
    Rng rng(rep);
    int32_t out[1];
    ASSERT_EQ(sampler.Select(&tables, q.data(), nullptr, 0, 1, 0, &rng, &scratch, out), 1);
    EXPECT_EQ(out[0], 0);
  }
}

/// Chi-square statistic of observed counts against a uniform expectation.
double ChiSquare(const std::vector<int64_t>& counts, double expected) {
  double x2 = 0;
  for (int64_t c : counts) x2 += (c - expected) * (c - expected) / expected;
  return x2;
}

TEST(BudgetSampler, BatchFillIsDistinctAndUniform) {
  // Both code paths (sparse draw for count <= n/2, partial shuffle above). 49 degrees of
  // freedom: the 0.999 quantile of chi-square is 85.4.
  for (int64_t count : {10, 40}) {
    const int64_t n = 50, trials = 20000;
    std::vector<int64_t> member(n, 0), first(n, 0);
    Rng rng(count);
    std::vector<int32_t> fill;
    for (int64_t t = 0; t < trials; ++t) {
      BudgetSampler::BatchFill(n, count, &rng, &fill);
      ASSERT_EQ(static_cast<int64_t>(fill.size()), count);
      CheckSet(fill, count, n);
      for (int32_t id : fill) ++member[id];
      ++first[fill[0]];
    }
    EXPECT_LT(ChiSquare(member, static_cast<double>(trials) * count / n), 85.4)
        << "count " << count;
    EXPECT_LT(ChiSquare(first, static_cast<double>(trials) / n), 85.4) << "count " << count;
  }
}

TEST(BudgetSampler, BatchPolicyTakesTheSharedSetInOrder) {
  BudgetSampler sampler(SelectPolicy{QueryStrategy::kVanilla, 1, FillPolicy::kBatch});
  SamplerScratch scratch(100);
  Rng rng(3);
  const std::vector<int32_t> shared = {3, 7, 9, 11, 2, 40};
  const int32_t forced = 9;
  std::vector<int32_t> out(4);
  ASSERT_EQ(sampler.Select(nullptr, nullptr, &forced, 1, 4, 0, &rng, &scratch, out.data(), &shared),
            4);
  EXPECT_EQ(out, (std::vector<int32_t>{9, 3, 7, 11}));
  // A shared set shorter than the room is topped up with random ids: still the exact budget.
  const std::vector<int32_t> short_set = {1, 2};
  out.resize(30);
  ASSERT_EQ(
      sampler.Select(nullptr, nullptr, nullptr, 0, 30, 0, &rng, &scratch, out.data(), &short_set),
      30);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 2);
  CheckSet(out, 30, 100);
}

TEST(BudgetSampler, LshShareCapsTheCandidatesAndTheFillTakesTheRest) {
  // 8 tables of buckets holding up to 64 of 1000 ids: far more candidates than the room.
  // With a share of 0.5 of 100 slots beyond one forced id, 50 come from the buckets the
  // query falls in, the other 49 from the batch's shared list.
  Fixture f;
  std::set<int32_t> in_buckets;
  for (int t = 0; t < 8; ++t) {
    const auto b = f.tables.Get(t, f.query[t]);
    in_buckets.insert(b.ids, b.ids + b.size);
  }
  std::vector<int32_t> shared;
  for (int32_t id = 0; id < 1000 && shared.size() < 200; ++id)
    if (!in_buckets.count(id)) shared.push_back(id);
  for (float share : {1.0f, 0.5f, 0.1f}) {
    BudgetSampler sampler(SelectPolicy{QueryStrategy::kVanilla, 1, FillPolicy::kBatch, share});
    SamplerScratch scratch(f.n);
    Rng rng(5);
    const int32_t forced = shared.back();
    std::vector<int32_t> out(100);
    ASSERT_EQ(sampler.Select(&f.tables, f.query.data(), &forced, 1, 100, 0, &rng, &scratch,
                             out.data(), &shared),
              100);
    CheckSet(out, 100, f.n);
    int64_t from_buckets = 0;
    for (int32_t id : out) from_buckets += in_buckets.count(id) ? 1 : 0;
    EXPECT_EQ(from_buckets, static_cast<int64_t>(std::ceil(share * 99))) << "share " << share;
  }
}

/// The log-Q correction's chances (Inclusion) are the sampler's own: over many draws, the
/// sum of 1 / chance over a sample's negatives that fall in a set A of neurons estimates the
/// size of A (Horvitz-Thompson), for A the frequent labels (drawn mostly as batch-mates'
/// labels), the neurons of the query's buckets (the LSH pool) and the rest (uniform draws).
/// Each draw has new batch-mates: each of B - 1 points holds label j with chance f_j (labels
/// 0-79; the others none), the rates the sampler is given (1 - (1 - f_j)^(B - 1)). Vanilla's
/// chances are those given the tables' random order (the pool is the tables it walked), which
/// weigh right on average because a neuron the walk passes by keeps its chance through the
/// fill. Every strategy within 3 % (4,000 draws; the sums' standard errors are under 1 %).
TEST(BudgetSampler, InclusionChancesWeighTheNegativesToTheirNumbers) {
  Fixture f;
  const int64_t n = f.n, batch = 32, budget = 120, trials = 4000;
  std::vector<float> share(n), q(n);
  for (int64_t j = 0; j < 80; ++j) share[j] = 0.2f / std::pow(1.0f + j, 0.9f);  // the rest 0
  for (int64_t j = 0; j < n; ++j)
    q[j] = static_cast<float>(1.0 - std::pow(1.0 - share[j], static_cast<double>(batch - 1)));
  const std::vector<int32_t> forced = {5, 17};
  std::vector<char> in_pool(n, 0);
  for (int t = 0; t < 8; ++t) {
    const auto b = f.tables.Get(t, f.query[t]);
    for (int32_t j = 0; j < b.size; ++j) in_pool[b.ids[j]] = 1;
  }
  // The sets: 0 frequent labels (ids below 40, not in the pool), 1 the pool, 2 the rest.
  auto set_of = [&](int32_t j) { return in_pool[j] ? 1 : j < 40 ? 0 : 2; };
  double size[3] = {0, 0, 0};
  for (int32_t j = 0; j < n; ++j)
    if (j != 5 && j != 17) size[set_of(j)] += 1;
  struct Case {
    const char* name;
    QueryStrategy query;
    bool tables;
  };
  for (const Case& c : {Case{"fill alone", QueryStrategy::kVanilla, false},
                        Case{"top-k", QueryStrategy::kTopK, true},
                        Case{"threshold", QueryStrategy::kThreshold, true},
                        Case{"vanilla", QueryStrategy::kVanilla, true}}) {
    SCOPED_TRACE(c.name);
    BudgetSampler sampler(SelectPolicy{c.query, 2, FillPolicy::kBatch, 0.5f});
    SamplerScratch scratch(n);
    Rng rng(17);
    double sum[3] = {0, 0, 0};
    std::vector<int32_t> labels, shared, out(budget);
    std::vector<float> log_q(budget);
    for (int64_t t = 0; t < trials; ++t) {
      labels.assign(forced.begin(), forced.end());  // the sample's own labels are listed too
      for (int64_t m = 1; m < batch; ++m)
        for (int32_t j = 0; j < 80; ++j)
          if (rng.Uniform() < share[j]) labels.push_back(j);
      Inclusion inc;
      inc.batch_q = q.data();
      inc.batch_labels = BudgetSampler::BatchList(0, n, budget, &labels, &rng, &shared);
      inc.log_q = log_q.data();
      const int64_t k =
          sampler.Select(c.tables ? &f.tables : nullptr, f.query.data(), forced.data(), 2, budget,
                         0, &rng, &scratch, out.data(), &shared, &inc);
      ASSERT_EQ(k, budget);
      EXPECT_EQ(log_q[0], 0.0f);
      EXPECT_EQ(log_q[1], 0.0f);
      for (int64_t i = 2; i < k; ++i) {
        ASSERT_LE(log_q[i], 0.0f);
        sum[set_of(out[i])] += std::exp(-static_cast<double>(log_q[i]));
      }
    }
    for (int a = 0; a < 3; ++a)
      EXPECT_NEAR(sum[a] / trials / size[a], 1.0, 0.03)
          << "set " << a << " of " << size[a] << " neurons";
  }
}

TEST(BudgetSampler, LogOfChanceIsTheLogWithin3UlpAndZeroOnlyAtOne) {
  // Every 61st float of [1e-30, 1] (about 14 million), and the range's ends: within 3 units
  // in the last place of the log computed in double; at most 0, and 0 only at 1.
  EXPECT_EQ(LogOfChance(1.0f), 0.0f);
  EXPECT_FLOAT_EQ(LogOfChance(1e-30f), std::log(1e-30f));
  EXPECT_LT(LogOfChance(std::nextafter(1.0f, 0.0f)), 0.0f);
  const float lo = 1e-30f, one = 1.0f;
  uint32_t b0, b1;
  std::memcpy(&b0, &lo, sizeof b0);
  std::memcpy(&b1, &one, sizeof b1);
  double worst = 0;
  float worst_at = 0;
  for (uint32_t b = b0; b < b1; b += 61) {
    float p;
    std::memcpy(&p, &b, sizeof p);
    const float got = LogOfChance(p);
    ASSERT_LT(got, 0.0f) << "p " << p;
    const double exact = std::log(static_cast<double>(p));
    const float rounded = static_cast<float>(exact);
    const double ulp = std::nextafter(std::fabs(rounded), INFINITY) - std::fabs(rounded);
    const double err = std::fabs(got - exact) / ulp;
    if (err > worst) {
      worst = err;
      worst_at = p;
    }
  }
  EXPECT_LE(worst, 3.0) << "at p " << worst_at;
  // The selection writes it: the log of InclusionChance.
  InclusionRates r;
  r.lsh = 0.25f;
  r.batch = 0.5f;
  r.uniform = 0.01f;
  EXPECT_EQ(LogInclusion(r, 1, 0.2f), LogOfChance(InclusionChance(r, 1, 0.2f)));
  EXPECT_NEAR(LogInclusion(r, 1, 0.2f), std::log(1 - 0.75 * 0.9 * 0.99), 1e-6);
  EXPECT_NEAR(LogInclusion(r, 0, 0.0f), std::log(0.01), 1e-6);
}

}  // namespace
}  // namespace dslide
