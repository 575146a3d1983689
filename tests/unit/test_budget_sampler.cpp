// The budget sampler returns exactly the budget, keeps forced ids, never repeats an id.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "budget_sampler.h"
#include "rng.h"

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
  for (QueryStrategy q : {QueryStrategy::kVanilla, QueryStrategy::kTopK, QueryStrategy::kThreshold}) {
    for (int64_t budget : {1, 7, 50, 300, 999, 1000}) {
      BudgetSampler sampler(q, 2, FillPolicy::kRandom);
      SamplerScratch scratch(f.n);
      Rng rng(budget);
      const std::vector<int32_t> forced = {5, 17, 999};
      std::vector<int32_t> out(std::max<int64_t>(budget, 3));
      const int64_t k = sampler.Select(&f.tables, f.query.data(), forced.data(), 3, budget, &rng,
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
  BudgetSampler sampler(QueryStrategy::kTopK, 2, FillPolicy::kRandom);
  SamplerScratch scratch(f.n);
  Rng rng(1);
  std::vector<int32_t> out(120);
  for (int rep = 0; rep < 200; ++rep) {
    const int32_t forced = rep % 1000;
    const int64_t k = sampler.Select(&f.tables, f.query.data(), &forced, 1, 120, &rng, &scratch, out.data());
    ASSERT_EQ(k, 120);
    CheckSet(out, k, f.n);
  }
}

TEST(BudgetSampler, StopPolicyReturnsOnlyCandidates) {
  Fixture f;
  BudgetSampler sampler(QueryStrategy::kVanilla, 1, FillPolicy::kStop);
  SamplerScratch scratch(f.n);
  Rng rng(2);
  std::vector<int32_t> out(900);
  const int64_t k = sampler.Select(&f.tables, f.query.data(), nullptr, 0, 900, &rng, &scratch, out.data());
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
  BudgetSampler sampler(QueryStrategy::kTopK, 1, FillPolicy::kStop);
  SamplerScratch scratch(n);
  for (int rep = 0; rep < 20; ++rep) {
    Rng rng(rep);
    int32_t out[1];
    ASSERT_EQ(sampler.Select(&tables, q.data(), nullptr, 0, 1, &rng, &scratch, out), 1);
    EXPECT_EQ(out[0], 0);
  }
}

}  // namespace
}  // namespace dslide
