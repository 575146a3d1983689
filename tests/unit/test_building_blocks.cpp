// Small parts the trainer is built from: the parallel-for, the huge-page arrays, the rebuild
// schedule, the top-k rule and its merge, the precision counter.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/peers.h"
#include "common/error.h"
#include "common/huge_pages.h"
#include "common/parallel.h"
#include "lsh/rebuild_schedule.h"
#include "model/label_map.h"
#include "model/layer_layout.h"
#include "model/model.h"
#include "model/topk.h"
#include "train/evaluator.h"

namespace dslide {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------
// BigVector

/// The VmFlags line of the mapping of /proc/self/smaps that holds p ("" where unreadable).
std::string VmFlagsAt(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

// Arrays from 2 MiB up start on a huge-page boundary, are advised for huge pages (where the
// kernel takes the advice), and behave as vectors: values kept through growth and copies;
// smaller ones come from the heap.
TEST(BigVector, LargeArraysSitOnAlignedHugePageAdvisedMappings) {
  const size_t n = 3 * kHugePageBytes / sizeof(float) + 5;
  BigVector<float> big(n, 1.5f);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePageBytes, 0u);
  for (size_t i = 0; i < n; ++i) big[i] = static_cast<float>(i);
  big.resize(2 * n, -1.0f);  // reallocates: the first n values move along
  ASSERT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePageBytes, 0u);
  bool kept = true;
  for (size_t i = 0; i < n; ++i) kept = kept && big[i] == static_cast<float>(i);
  EXPECT_TRUE(kept);
  EXPECT_EQ(big[2 * n - 1], -1.0f);
  const BigVector<float> copy = big;
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), big.begin()));

  // The advice is visible in the mapping's flags ("hg") where the kernel accepts it.
  void* probe =
      mmap(nullptr, kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool advisable = madvise(probe, kHugePageBytes, MADV_HUGEPAGE) == 0;
  munmap(probe, kHugePageBytes);
  const std::string flags = VmFlagsAt(big.data());
  if (advisable && !flags.empty()) EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;

  BigVector<int32_t> small(100, 7);
  EXPECT_EQ(std::count(small.begin(), small.end(), 7), 100);
  EXPECT_EQ(VmFlagsAt(small.data()).find(" hg"), std::string::npos);
}

// ---------------------------------------------------------------------------------------
// ParallelFor

// The spread order is a bijection on [0, n) with its inverse, for any n.
TEST(LabelMap, SpreadIsAPermutationWithItsInverse) {
  for (int64_t n : {1, 2, 3, 4, 10, 64, 983, 1024, 20000, 206983}) {
    const LabelMap map(/*spread=*/true, n);
    EXPECT_EQ(map.identity(), n < 3) << n;
    std::vector<char> seen(n, 0);
    for (int64_t l = 0; l < n; ++l) {
      const int32_t x = map.Neuron(static_cast<int32_t>(l));
      ASSERT_TRUE(x >= 0 && x < n) << n;
      ASSERT_FALSE(seen[x]) << "neuron " << x << " twice, n " << n;
      seen[x] = 1;
      ASSERT_EQ(map.Label(x), l) << n;
    }
  }
  std::vector<int32_t> ids = {5, -1, 7};
  const LabelMap map(true, 10);
  map.ToNeurons(ids.data(), 3);
  EXPECT_EQ(ids[1], -1) << "'none' stays";
  map.ToLabels(ids.data(), 3);
  EXPECT_EQ(ids, (std::vector<int32_t>{5, -1, 7}));
  const LabelMap identity(false, 10);
  EXPECT_TRUE(identity.identity());
  EXPECT_EQ(identity.Neuron(7), 7);
}

// What the order is for: labels numbered by frequency (the first ones the most frequent)
// land evenly in the ranks' contiguous blocks, for any number of ranks. Every prefix of the
// label ids is dealt to P blocks within 12 labels of m / P each (the worst seen: 10, for
// n = 44,575 on 4 ranks); with neuron = label the first block would hold all of them.
TEST(LabelMap, ConsecutiveLabelsAreDealtEvenlyToTheRanksBlocks) {
  for (int64_t n : {20000, 44575, 206983}) {
    const LabelMap map(true, n);
    for (int P : {2, 3, 4, 8, 16}) {
      std::vector<int64_t> begin(P + 1);
      for (int r = 0; r <= P; ++r) begin[r] = ModelSpec::BlockBegin(n, r, P);
      std::vector<int64_t> count(P, 0);
      for (int64_t m = 1; m <= 5000; ++m) {
        const int32_t x = map.Neuron(static_cast<int32_t>(m - 1));
        ++count[std::upper_bound(begin.begin(), begin.end(), x) - begin.begin() - 1];
        if (m % 50 != 0) continue;
        for (int r = 0; r < P; ++r)
          ASSERT_NEAR(static_cast<double>(count[r]), static_cast<double>(m) / P, 12.0)
              << "n " << n << ", " << P << " ranks, the first " << m << " labels, rank " << r;
      }
    }
  }
}

// The initial weights' scale: Glorot's for dense layers, narrow sampled ones and the first
// layer; He's for a sampled layer over a hidden layer more than kWideLayer times wider than
// it. The drawn weights have that standard deviation.
TEST(InitialWeights, WideSampledLayersStartFromHeOthersFromGlorot) {
  const ModelSpec wide = ModelSpec::Make(5000, {128}, 206983, {1.0, 0.0088}, 0, 1);
  EXPECT_DOUBLE_EQ(InitialStddev(wide.layers[1], 1), std::sqrt(2.0 / 128));
  EXPECT_DOUBLE_EQ(InitialStddev(wide.layers[0], 0), std::sqrt(2.0 / (5000 + 128)));
  const ModelSpec dense = ModelSpec::Make(5000, {128}, 206983, {1.0, 1.0}, 0, 1);
  EXPECT_DOUBLE_EQ(InitialStddev(dense.layers[1], 1), std::sqrt(2.0 / (128 + 206983)));
  // At and below kWideLayer times the input width: Glorot's, also when sampled.
  const ModelSpec narrow = ModelSpec::Make(5000, {128}, 1024, {1.0, 0.25}, 0, 1);
  EXPECT_DOUBLE_EQ(InitialStddev(narrow.layers[1], 1), std::sqrt(2.0 / (128 + 1024)));
  const ModelSpec just = ModelSpec::Make(5000, {128}, 1025, {1.0, 0.25}, 0, 1);
  EXPECT_DOUBLE_EQ(InitialStddev(just.layers[1], 1), std::sqrt(2.0 / 128));
  // A sampled first layer reads the data, not a ReLU output: Glorot's.
  const ModelSpec first = ModelSpec::Make(5000, {2048}, 100, {0.1, 1.0}, 0, 1);
  EXPECT_DOUBLE_EQ(InitialStddev(first.layers[0], 0), std::sqrt(2.0 / (5000 + 2048)));
  // The weights drawn: their standard deviation within 1 % of the stated one, uniform on
  // [-h, h), h = sqrt(3) x it (the extremes reached, none beyond).
  const LayerSpec& s = wide.layers[1];
  std::vector<float> w(static_cast<size_t>(s.local()) * s.in_dim);
  InitialWeights(s, 1, 7, w.data());
  double sq = 0, lo = 0, hi = 0;
  for (float v : w) {
    sq += static_cast<double>(v) * v;
    lo = std::min(lo, static_cast<double>(v));
    hi = std::max(hi, static_cast<double>(v));
  }
  const double sd = std::sqrt(2.0 / 128), h = std::sqrt(3.0) * sd;
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size())), sd, 0.01 * sd);
  EXPECT_GE(lo, -h * (1 + 1e-6));
  EXPECT_LT(hi, h);
  EXPECT_LT(lo, -0.999 * h);
  EXPECT_GT(hi, 0.999 * h);
}

// A layer's storage to a row per neuron and back (checkpoints, the kept model's snapshot):
// each weight where WeightAt puts it, in either layout, at sizes that are not multiples of
// the transpose's tiles, and the round trip the same array.
TEST(LayerLayout, StorageToRowsPutsEachWeightWhereWeightAtReadsIt) {
  for (const bool input_major : {true, false})
    for (const auto& [n, d] : {std::pair<int64_t, int64_t>{1, 1}, {33, 70}, {128, 95}, {5, 1}}) {
      LayerSpec s;
      s.in_dim = d;
      s.begin = 10;
      s.end = 10 + n;
      s.input_major = input_major;
      std::vector<float> storage(static_cast<size_t>(n * d));
      for (size_t k = 0; k < storage.size(); ++k) storage[k] = static_cast<float>(k);
      std::vector<float> rows;
      StorageToRows(s, storage, &rows);
      ASSERT_EQ(rows.size(), storage.size());
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j)
          ASSERT_EQ(rows[i * d + j], storage[WeightAt(s, i, j)])
              << "input_major " << input_major << ", neuron " << i << ", input " << j;
      std::vector<float> back;
      RowsToStorage(s, rows, &back);
      EXPECT_EQ(back, storage) << "input_major " << input_major << ", " << n << " x " << d;
    }
}

TEST(ParallelFor, VisitsEveryIndexOnceForAnyChunk) {
  for (int threads : {1, 4}) {
    SetNumThreads(threads);
    for (int64_t n : {0, 1, 7, 1000, 4099}) {
      for (int64_t chunk : {-3, 0, 1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        ParallelFor(n, chunk, [&](int64_t i) { seen[i].fetch_add(1); });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(seen[i].load(), 1)
              << "n " << n << " chunk " << chunk << " threads " << threads << " index " << i;
      }
    }
  }
  SetNumThreads(1);
}

TEST(ParallelFor, OneThreadRunsInOrder) {
  SetNumThreads(1);
  std::vector<int64_t> order;
  ParallelFor(100, 7, [&](int64_t i) { order.push_back(i); });
  std::vector<int64_t> want(100);
  for (int64_t i = 0; i < 100; ++i) want[i] = i;
  EXPECT_EQ(order, want);
}

TEST(ParallelFor, TakesAnyCallable) {
  SetNumThreads(2);
  std::atomic<int64_t> sum{0};
  const auto add = [&sum](int64_t i) { sum += i; };
  ParallelFor(10, add);  // an lvalue const lambda
  std::function<void(int64_t)> f = [&sum](int64_t i) { sum += 10 * i; };
  ParallelFor(10, 4, f);  // a std::function
  struct Functor {
    std::atomic<int64_t>* s;
    void operator()(int64_t i) { *s += 100 * i; }  // not const
  } functor{&sum};
  ParallelFor(10, 2, functor);
  EXPECT_EQ(sum.load(), 45 + 450 + 4500);
  SetNumThreads(1);
}

TEST(ParallelFor, RethrowsTheFirstExceptionAfterTheRegion) {
  for (int threads : {1, 3}) {
    SetNumThreads(threads);
    std::atomic<int> ran{0};
    const int64_t n = 1000, chunk = 10;
    try {
      ParallelFor(n, chunk, [&](int64_t i) {
        if (i == 503) throw std::runtime_error("at 503");
        ++ran;
      });
      FAIL() << "no exception with " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "at 503");
    }
    // Only the rest of the throwing chunk (504..509) is skipped.
    EXPECT_EQ(ran.load(), n - 7) << threads << " threads";
  }
  SetNumThreads(1);
}

// ---------------------------------------------------------------------------------------
// RebuildSchedule: the t-th rebuild after iteration round(sum_{i<t} n0 e^(lambda i)).

std::vector<int64_t> ScheduleByFormula(int64_t n0, double lambda, int64_t until) {
  std::vector<int64_t> at;
  double exact = 0;
  for (int t = 0;; ++t) {
    exact += static_cast<double>(n0) * std::exp(lambda * t);
    const int64_t it = std::llround(exact);
    if (it > until) break;
    if (at.empty() || it > at.back()) at.push_back(it);
  }
  return at;
}

TEST(RebuildSchedule, RebuildsAtTheExponentiallyGrowingIterations) {
  for (auto [n0, lambda] : {std::pair<int64_t, double>{50, 0.05}, {10, 0.2}, {1, 0.0}, {7, 0.0}}) {
    RebuildSchedule s(n0, lambda);
    std::vector<int64_t> due;
    for (int64_t it = 1; it <= 5000; ++it)
      if (s.Due(it)) due.push_back(it);
    EXPECT_EQ(due, ScheduleByFormula(n0, lambda, 5000)) << "n0 " << n0 << " lambda " << lambda;
  }
  RebuildSchedule s(50, 0.05);
  EXPECT_EQ(s.next(), 50);
  EXPECT_FALSE(s.Due(49));
  EXPECT_TRUE(s.Due(50));
  EXPECT_EQ(s.next(), std::llround(50 + 50 * std::exp(0.05)));  // 103
}

TEST(RebuildSchedule, AJumpCountsOnceAndResetStartsOver) {
  RebuildSchedule s(10, 0.5);
  // Iterations 10, 26 (10 + 16.5), 53 are due; a jump straight to 60 is one rebuild.
  EXPECT_TRUE(s.Due(60));
  EXPECT_GT(s.next(), 60);
  EXPECT_FALSE(s.Due(60));
  s.Reset();
  EXPECT_EQ(s.next(), 10);
  EXPECT_TRUE(s.Due(10));
}

// ---------------------------------------------------------------------------------------
// The top-k rule: higher score first, ties to the smaller id, -1 / -inf padding.

TEST(TopK, OrdersByScoreThenIdAndPads) {
  TopKSelector sel;
  const std::vector<float> sc = {0.5f, 2.0f, 0.5f, 2.0f, -1.0f};
  const std::vector<int32_t> id = {9, 4, 3, 8, -1};  // -1: padding, ignored
  sel.PushAll(sc.data(), id.data(), 5);
  std::vector<int32_t> ids(6, 77);
  std::vector<float> s(6, 77.0f);
  sel.Take(6, ids.data(), s.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 8, 3, 9, -1, -1}));
  EXPECT_EQ(s, (std::vector<float>{2.0f, 2.0f, 0.5f, 0.5f, -kInf, -kInf}));
  sel.Take(2, ids.data(), nullptr);  // scores optional
  EXPECT_EQ(ids[0], 4);
  EXPECT_EQ(ids[1], 8);
}

TEST(TopK, MergeOfListsEqualsOneSortOfEveryCandidate) {
  std::mt19937 rng(5);
  const int lists = 3, k = 4;
  const int64_t B = 50;
  std::vector<int32_t> ids(static_cast<size_t>(lists) * B * k);
  std::vector<float> sc(ids.size());
  for (size_t o = 0; o < ids.size(); ++o) {
    ids[o] = rng() % 5 == 0 ? -1 : static_cast<int32_t>(o);  // distinct ids, some padding
    sc[o] = static_cast<float>(rng() % 6);                   // many ties
  }
  std::vector<int32_t> got(B * k);
  std::vector<float> got_sc(B * k);
  MergeTopKLists(ids.data(), sc.data(), lists, B, k, got.data(), got_sc.data());
  for (int64_t i = 0; i < B; ++i) {
    std::vector<std::pair<float, int32_t>> all;
    for (int r = 0; r < lists; ++r)
      for (int j = 0; j < k; ++j) {
        const size_t o = (static_cast<size_t>(r) * B + i) * k + j;
        if (ids[o] >= 0) all.push_back({-sc[o], ids[o]});  // ascending (-score, id)
      }
    std::sort(all.begin(), all.end());
    for (int j = 0; j < k; ++j) {
      if (j < static_cast<int>(all.size())) {
        EXPECT_EQ(got[i * k + j], all[j].second) << "sample " << i << " rank " << j;
        EXPECT_EQ(got_sc[i * k + j], -all[j].first);
      } else {
        EXPECT_EQ(got[i * k + j], -1);
        EXPECT_EQ(got_sc[i * k + j], -kInf);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// PrecisionCounter: P@k = hits in the top k / k, averaged over every point.

TEST(PrecisionCounter, CountsHitsOverKAndAveragesOverPoints) {
  PrecisionCounter c({1, 3, 5});
  EXPECT_EQ(c.max_k(), 5);
  const int32_t r1[5] = {3, 1, 2, -1, 7};
  const int32_t l1[2] = {1, 2};  // sorted
  c.Add(r1, 5, l1, 2);           // P@1 0, P@3 2/3, P@5 2/5
  const int32_t r2[5] = {4, 0, 9, 8, 6};
  const int32_t l2[1] = {4};
  c.Add(r2, 5, l2, 1);  // P@1 1, P@3 1/3, P@5 1/5
  const int32_t r3[5] = {1, 2, 3, 4, 5};
  c.Add(r3, 5, nullptr, 0);  // no labels: counted, no hits
  const EvalResult r = c.Result();
  EXPECT_EQ(r.points, 3);
  EXPECT_DOUBLE_EQ(r.At(1), (0.0 + 1.0 + 0.0) / 3);
  EXPECT_DOUBLE_EQ(r.At(3), (2.0 / 3 + 1.0 / 3 + 0.0) / 3);
  EXPECT_DOUBLE_EQ(r.At(5), (2.0 / 5 + 1.0 / 5 + 0.0) / 3);
  EXPECT_TRUE(std::isnan(r.At(2)));                      // not asked for
  EXPECT_EQ(PrecisionCounter({1}).Result().At(1), 0.0);  // no points
}

// ---------------------------------------------------------------------------------------
// The peers' figures bench prints (bench/peers.tsv, compiled in).

TEST(PeerFigures, TheCompiledTableParsesAndHoldsTheAmazonPeers) {
  const std::vector<PeerFigure> amazon = PeerFiguresOf("amazon-670k");
  auto value = [&](const std::string& key) {
    for (const PeerFigure& p : amazon)
      if (p.key == key) return p.value;
    return -1.0;
  };
  EXPECT_EQ(value("slide_ref_ms_per_iter"), 2020);
  EXPECT_EQ(value("pytorch_dense_ms_per_iter"), 1540);
  EXPECT_GT(value("slide_ref_peak_rss_mb"), 0);
  EXPECT_TRUE(PeerFiguresOf("no-such-shape").empty());
}

TEST(PeerFigures, AMalformedLineIsNamed) {
  const auto parsed = ParsePeerFigures("# comment\n\nshape\tk\t1.5\tsource\n", "t.tsv");
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0].value, 1.5);
  try {
    ParsePeerFigures("# c\nshape\tk\t1.5x\tsource\n", "t.tsv");
    FAIL() << "accepted 1.5x";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.tsv:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ParsePeerFigures("shape\tk\t1\n", "t.tsv"), Error);  // three fields
}

}  // namespace
}  // namespace dslide
