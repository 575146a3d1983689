// Bucket insertion: the reservoir keeps a uniform sample (chi-square), FIFO the newest items.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/rng.h"
#include "lsh/lsh_table.h"
#include "lsh/select_kernel.h"

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

TEST(LshTables, EveryBucketHoldsWhatFillBucketKeepsOfItsItemsInIncreasingId) {
  // The definition, bucket by bucket: a bucket's items in increasing id offered to
  // FillBucket with the bucket's stream. Where AVX-512 is there, Build runs the reservoirs
  // of overflowing buckets eight side by side; the tables must hold the same ids in the same
  // slots. A few buckets far beyond the capacity, the others near it (lanes of unequal
  // lengths), some empty; 64 buckets (groups of eight) and 8,192 (a last partial group).
  const int64_t n = 60000;
  const int L = 3, cap = 8;
  const uint64_t seed = 77;
  for (const int bits : {6, 13}) {
    const uint32_t nb = uint32_t{1} << bits;
    std::vector<uint32_t> buckets(static_cast<size_t>(L) * n);
    Rng rng(bits);
    for (auto& b : buckets) b = static_cast<uint32_t>(rng.Below(nb / 2) * rng.Below(3));
    for (const InsertPolicy policy : {InsertPolicy::kReservoir, InsertPolicy::kFifo}) {
      LshTables t(L, bits, cap, policy);
      t.Build(buckets.data(), n, seed);
      int64_t overflowing = 0;
      for (int tab = 0; tab < L; ++tab) {
        std::vector<std::vector<int32_t>> items(nb);
        for (int64_t i = 0; i < n; ++i)
          items[buckets[tab * n + i]].push_back(static_cast<int32_t>(i));
        for (uint32_t b = 0; b < nb; ++b) {
          const int64_t c = static_cast<int64_t>(items[b].size());
          std::vector<int32_t> want(std::min<int64_t>(c, cap), -1);
          if (c > 0)
            FillBucket(items[b].data(), c, cap, policy == InsertPolicy::kFifo,
                       BucketSeed(seed, tab, b), want.data());
          overflowing += c > cap;
          const auto got = t.Get(tab, b);
          ASSERT_EQ(std::vector<int32_t>(got.ids, got.ids + got.size), want)
              << "table " << tab << " bucket " << b << " of 2^" << bits;
        }
      }
      EXPECT_GT(overflowing, 20);  // the draws were exercised
    }
  }
}

}  // namespace
}  // namespace dslide
