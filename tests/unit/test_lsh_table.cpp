// Bucket insertion: the reservoir keeps a uniform sample (chi-square), FIFO the newest items.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "lsh_table.h"

namespace dslide {
namespace {

TEST(LshTables, ReservoirIsUniform) {
  const int n = 40, cap = 8, reps = 4000;
  std::vector<uint32_t> buckets(n, 3);  // everything into bucket 3 of one table
  std::vector<double> kept(n, 0);
  for (int r = 0; r < reps; ++r) {
    LshTables t(1, 4, cap, InsertPolicy::kReservoir);
    t.Build(buckets.data(), n, 1000 + r);
    const auto b = t.Get(0, 3);
    ASSERT_EQ(b.size, cap);
    for (int j = 0; j < b.size; ++j) kept[b.ids[j]] += 1;
  }
  const double expect = static_cast<double>(reps) * cap / n;
  double chi2 = 0;
  for (double k : kept) chi2 += (k - expect) * (k - expect) / expect;
  // 39 degrees of freedom: P(chi2 > 72.05) = 0.001 for a uniform sample. The original SLIDE
  // rule (replace with probability 1/n) keeps early items far too often and fails this.
  EXPECT_LT(chi2, 72.05);
}

TEST(LshTables, FifoKeepsNewest) {
  const int n = 20, cap = 5;
  std::vector<uint32_t> buckets(n, 0);
  LshTables t(1, 2, cap, InsertPolicy::kFifo);
  t.Build(buckets.data(), n, 1);
  const auto b = t.Get(0, 0);
  std::vector<int32_t> ids(b.ids, b.ids + b.size);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int32_t>{15, 16, 17, 18, 19}));
}

TEST(LshTables, SmallBucketsKeepEverything) {
  // Table-major layout: item i of table t at buckets[t * n + i].
  const int n = 6;
  std::vector<uint32_t> buckets = {0, 1, 0, 2, 1, 0, /* table 1 */ 3, 3, 3, 3, 3, 3};
  LshTables t(2, 2, 4, InsertPolicy::kReservoir);
  t.Build(buckets.data(), n, 1);
  EXPECT_EQ(t.Get(0, 0).size, 3);
  EXPECT_EQ(t.Get(0, 1).size, 2);
  EXPECT_EQ(t.Get(0, 3).size, 0);
  EXPECT_EQ(t.Get(1, 3).size, 4);  // capped
}

}  // namespace
}  // namespace dslide
