// The output index of approximate top-k (train/output_index.h): its candidates hold the
// exact top rows by logit (maximum inner product, bias included), their logits are exact,
// a saved index reads back to the same answers and one of other weights is refused naming
// the file, the normaliser's tail estimate is unbiased; and through the trainer, eval's and
// predict's approximate top-k recall the exact one
// (on P ranks: test_mpi).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "../common/test_presets.h"
#include "common/error.h"
#include "common/parallel.h"
#include "data/synthetic.h"
#include "devices/backend_factory.h"
#include "dist/communicator.h"
#include "test_util.h"
#include "train/output_index.h"
#include "train/predict.h"

namespace dslide {
namespace {

/// Rows of varied norms (the bias and the norm both matter to an inner product), and
/// queries like a ReLU layer's (non-negative).
struct Rows {
  int64_t n, dim;
  std::vector<float> w, b;
  Rows(int64_t n_, int64_t dim_, uint32_t seed) : n(n_), dim(dim_), w(n_ * dim_), b(n_) {
    std::mt19937 g(seed);
    std::normal_distribution<float> z(0.0f, 1.0f);
    std::uniform_real_distribution<float> scale(0.2f, 2.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float s = scale(g);
      for (int64_t j = 0; j < dim; ++j) w[i * dim + j] = s * z(g);
      b[i] = z(g);
    }
  }
  double Logit(int64_t i, const float* h) const {
    double z = b[i];
    for (int64_t j = 0; j < dim; ++j) z += static_cast<double>(w[i * dim + j]) * h[j];
    return z;
  }
  /// The k best rows by exact logit.
  std::vector<int32_t> TopK(const float* h, int k) const {
    std::vector<int32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t c) { return Logit(a, h) > Logit(c, h); });
    ids.resize(k);
    return ids;
  }
};

std::vector<float> Queries(int64_t count, int64_t dim, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> z(0.0f, 1.0f);
  std::vector<float> q(count * dim);
  for (float& v : q) v = std::max(0.0f, z(g));
  return q;
}

/// `index`'s recall of the exact top 5 over the queries q (nq of r.dim floats), each search
/// checked: at most index.candidates() rows (exactly `n` where given), each a row of r with
/// its exact logit.
double RecallAt5(const OutputIndex& index, const Rows& r, const std::vector<float>& q, int64_t nq,
                 int64_t n_expected = -1) {
  std::vector<int32_t> rows(index.candidates());
  std::vector<float> logits(index.candidates());
  int64_t found = 0;
  for (int64_t i = 0; i < nq; ++i) {
    const float* h = q.data() + i * r.dim;
    const int64_t n = index.Search(h, rows.data(), logits.data());
    EXPECT_LE(n, index.candidates());
    if (n_expected >= 0) EXPECT_EQ(n, n_expected);
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_GE(rows[j], 0);
      EXPECT_LT(rows[j], r.n);
      if (rows[j] < 0 || rows[j] >= r.n) return 0.0;
      EXPECT_EQ(logits[j], static_cast<float>(r.Logit(rows[j], h))) << "query " << i;
    }
    for (int32_t t : r.TopK(h, 5))
      found += std::find(rows.begin(), rows.begin() + n, t) != rows.begin() + n;
  }
  return static_cast<double>(found) / (5.0 * static_cast<double>(nq));
}

TEST(OutputIndex, CandidatesHoldTheExactTopRowsWithExactLogits) {
  SetNumThreads(2);
  const Rows r(6000, 40, 1);
  // Random rows in 40 dimensions are a harder search than a trained layer's (whose defaults,
  // m 12 and ef 44, recall below 0.99 of them): a denser graph, more candidates.
  OutputIndexOptions o;
  o.m = 16;
  o.ef = 64;
  const OutputIndex index(r.w.data(), r.b.data(), r.n, r.dim, o);
  EXPECT_EQ(index.candidates(), o.ef);
  const int64_t nq = 300;
  const double recall = RecallAt5(index, r, Queries(nq, r.dim, 2), nq, o.ef);
  std::printf("recall@5 of the exact top 5 among %d candidates: %.4f\n", o.ef, recall);
  EXPECT_GE(recall, 0.99);
}

// A one-vs-rest layer's rows: biases at the labels' log-odds, from about -2 (frequent) to
// -13 (one point in 480,000), which put the frequent labels on top of most queries. Searched
// as the softmax's rows are, the graph (linked by the rows' inner products, in which the
// biases' products dominate) misses most of the top 5; with options.one_vs_rest (the biases
// scaled down in the graph, the rows of the largest biases scored at every search) it finds
// them, with the same exact logits.
TEST(OutputIndex, OneVsRestRowsKeepTheirTopRows) {
  SetNumThreads(2);
  Rows r(6000, 40, 5);
  std::mt19937 g(6);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t i = 0; i < r.n; ++i) {
    for (int64_t j = 0; j < r.dim; ++j) r.w[i * r.dim + j] *= 0.1f;
    const float share = std::pow(u(g), 6.0f) * 0.1f + 2e-6f;  // long-tailed label shares
    r.b[i] = std::log(share / (1.0f - share));
  }
  const int64_t nq = 300;
  const std::vector<float> q = Queries(nq, r.dim, 7);
  double recall[2] = {};
  for (bool ovr : {false, true}) {
    OutputIndexOptions o;
    o.m = 16;
    o.ef = 64;
    o.one_vs_rest = ovr;
    const OutputIndex index(r.w.data(), r.b.data(), r.n, r.dim, o);
    recall[ovr] = RecallAt5(index, r, q, nq);
  }
  std::printf("recall@5, one-vs-rest rows: searched as the softmax's %.4f, as one-vs-rest %.4f\n",
              recall[0], recall[1]);
  // Random rows are a harder search than a trained layer's (the test above); gcide8-skipgram's
  // one-vs-rest model recalls 0.9977 at the defaults (docs/user-guide.md, "Approximate
  // prediction").
  EXPECT_GE(recall[1], 0.9);
  EXPECT_LT(recall[0], 0.5);  // the case the option is for
}

// A shard with fewer rows than candidates: every row comes back.
TEST(OutputIndex, ASmallShardReturnsEveryRow) {
  const Rows r(20, 8, 3);
  const OutputIndex index(r.w.data(), r.b.data(), r.n, r.dim, OutputIndexOptions{});
  EXPECT_EQ(index.candidates(), 20);
  const std::vector<float> q = Queries(1, r.dim, 4);
  std::vector<int32_t> rows(20);
  std::vector<float> logits(20);
  ASSERT_EQ(index.Search(q.data(), rows.data(), logits.data()), 20);
  std::sort(rows.begin(), rows.end());
  for (int32_t i = 0; i < 20; ++i) EXPECT_EQ(rows[i], i);
}

TEST(OutputIndex, SavedIndexReadsBackAndOneOfOtherWeightsIsNot) {
  SetNumThreads(2);
  const Rows r(3000, 24, 5);
  OutputIndexOptions o;
  const OutputIndex built(r.w.data(), r.b.data(), r.n, r.dim, o);
  const std::string path = testing::TmpPath("output_index.hnsw");
  built.Save(path);
  std::string stale;
  const auto read = OutputIndex::Load(path, r.w.data(), r.b.data(), r.n, r.dim, o, &stale);
  ASSERT_NE(read, nullptr) << stale;
  EXPECT_TRUE(read->loaded());
  EXPECT_FALSE(built.loaded());
  const std::vector<float> q = Queries(50, r.dim, 6);
  std::vector<int32_t> ra(o.ef), rb(o.ef);
  std::vector<float> la(o.ef), lb(o.ef);
  for (int i = 0; i < 50; ++i) {
    const int64_t na = built.Search(q.data() + i * r.dim, ra.data(), la.data());
    const int64_t nb = read->Search(q.data() + i * r.dim, rb.data(), lb.data());
    ASSERT_EQ(na, nb);
    EXPECT_EQ(ra, rb) << "query " << i;
    EXPECT_EQ(la, lb) << "query " << i;
  }
  // One weight changed: the index is of other weights (stale, not read).
  std::vector<float> w2 = r.w;
  w2[1234] += 0.5f;
  EXPECT_EQ(OutputIndex::Load(path, w2.data(), r.b.data(), r.n, r.dim, o, &stale), nullptr);
  EXPECT_NE(stale.find("row " + std::to_string(1234 / r.dim)), std::string::npos) << stale;
  // Fewer rows than the file holds (another shard).
  EXPECT_EQ(OutputIndex::Load(path, r.w.data(), r.b.data(), r.n - 1, r.dim, o, &stale), nullptr);
  EXPECT_NE(stale.find("3000 rows"), std::string::npos) << stale;
  // Rows of another width (the same labels after a wider hidden layer) and a graph of other
  // settings: stale too, read without overrunning the file's rows.
  const Rows wide(3000, 40, 5);
  EXPECT_EQ(OutputIndex::Load(path, wide.w.data(), wide.b.data(), wide.n, wide.dim, o, &stale),
            nullptr);
  EXPECT_NE(stale.find("rows of 32 floats"), std::string::npos) << stale;
  OutputIndexOptions denser = o;
  denser.m = o.m + 4;
  EXPECT_EQ(OutputIndex::Load(path, r.w.data(), r.b.data(), r.n, r.dim, denser, &stale), nullptr);
  EXPECT_NE(stale.find("a graph of m " + std::to_string(o.m)), std::string::npos) << stale;
  // Not an index at all.
  const std::string junk = testing::WriteFile("output_index_junk.hnsw", "not an index\n");
  try {
    OutputIndex::Load(junk, r.w.data(), r.b.data(), r.n, r.dim, o, &stale);
    FAIL() << "a text file was read as an index";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(junk), std::string::npos) << e.what();
  }
}

// TailSum estimates sum_j exp(z_j - mx) over the rows outside the candidates without bias:
// its mean over many draws is the exact sum.
TEST(OutputIndex, TheNormalisersTailEstimateIsUnbiased) {
  const Rows r(2000, 16, 7);
  OutputIndexOptions o;
  o.tail = 64;
  const OutputIndex index(r.w.data(), r.b.data(), r.n, r.dim, o);
  const std::vector<float> q = Queries(1, r.dim, 8);
  std::vector<int32_t> rows(o.ef);
  std::vector<float> logits(o.ef);
  const int64_t n = index.Search(q.data(), rows.data(), logits.data());
  const float mx = *std::max_element(logits.begin(), logits.begin() + n);
  double exact = 0;
  for (int64_t i = 0; i < r.n; ++i)
    if (std::find(rows.begin(), rows.begin() + n, static_cast<int32_t>(i)) == rows.begin() + n)
      exact += std::exp(r.Logit(i, q.data()) - mx);
  const int draws = 4000;
  double mean = 0, sq = 0;
  for (int s = 0; s < draws; ++s) {
    const double t = index.TailSum(q.data(), mx, rows.data(), n, index.DrawTail(1000 + s));
    mean += t / draws;
    sq += t * t / draws;
  }
  const double se = std::sqrt(std::max(sq - mean * mean, 0.0) / draws);
  std::printf("tail sum %.5g, estimate %.5g (standard error %.2g)\n", exact, mean, se);
  EXPECT_GT(se, 0.0);
  EXPECT_NEAR(mean, exact, 4 * se);
  // No draws: nothing estimated.
  OutputIndexOptions none = o;
  none.tail = 0;
  const OutputIndex bare(r.w.data(), r.b.data(), r.n, r.dim, none);
  EXPECT_EQ(bare.TailSum(q.data(), mx, rows.data(), n, bare.DrawTail(1)), 0.0);
}

/// A trained model with 1,500 outputs.
struct Trained {
  Dataset train, test;
  TrainConfig cfg;
};
const Trained& Model() {
  static Trained m = [] {
    Trained t;
    GenConfig g = testing::SyntheticShape(400, 1500, 10, 2, 8000);
    g.noise = 0.05;
    t.train = GenerateSynthetic(g, 0, 7600);
    t.test = GenerateSynthetic(g, 7600, 400);
    t.cfg.hidden = {32};
    t.cfg.sparsity = {1.0};
    t.cfg.batch = 64;
    t.cfg.lr = 3e-3;
    return t;
  }();
  return m;
}

void TrainSteps(Trainer& tr, const Dataset& train) {
  for (int it = 0; it < 400; ++it) tr.Step(train, testing::Batch(it, 64, train.size()));
}

// eval --approximate ann: the index's top-k recalls the exact top-k, P@1 is the exact one's
// to within a point or two, and the probabilities' normaliser is estimated (not the
// candidates' alone, which would put them above the exact ones by far).
TEST(Evaluate, TheOutputIndexRecallsTheExactTopK) {
  SetNumThreads(2);
  const Trained& m = Model();
  LocalCommunicator comm;
  Trainer tr(m.cfg, &comm, MakeBackend(Device::kCpu, 0), 400, 1500);
  TrainSteps(tr, m.train);
  AnnConfig ann;
  ann.approximate = "ann";
  EXPECT_THROW(tr.Score(m.test, 0, 8, 5, nullptr, 0, ScoreMode::kIndex), Error)
      << "scored by an index not built";
  BuildOutputIndex(tr, ann);
  ASSERT_NE(tr.output_index(), nullptr);
  EXPECT_EQ(tr.output_index()->rows(), 1500);
  const ApproximateEval a = EvaluateApproximate(tr, m.test, 0, {1, 3, 5}, ScoreMode::kIndex);
  std::printf("recall@5 %.4f, approximate P@1 %.4f, exact %.4f\n", a.recall, a.approx.At(1),
              a.exact.At(1));
  EXPECT_GE(a.recall, 0.99);
  EXPECT_NEAR(a.approx.At(1), a.exact.At(1), 2.5 / 400);
  EXPECT_GT(a.exact.At(1), 0.2) << "the model learnt nothing: the recall says little";
  // Probabilities: per point where both agree on the best label, the approximate one within
  // a factor of 2 of the exact (the normaliser over 44 candidates alone is far above it).
  Trainer::Scores exact, approx;
  tr.Score(m.test, 0, 64, 5, &exact);
  tr.Score(m.test, 0, 64, 5, &approx, 0, ScoreMode::kIndex);
  int agree = 0;
  double log_ratio = 0;
  for (int64_t i = 0; i < 64; ++i) {
    if (exact.ids[i * 5] != approx.ids[i * 5]) continue;
    ++agree;
    // The same logit to float rounding (the index sums in double, exact scoring in float
    // lanes).
    EXPECT_NEAR(approx.logits[i * 5], exact.logits[i * 5], 1e-5 * std::abs(exact.logits[i * 5]))
        << "point " << i;
    log_ratio += std::log(approx.probs[i * 5] / exact.probs[i * 5]);
  }
  ASSERT_GT(agree, 60);
  log_ratio /= agree;
  std::printf("mean log(approximate / exact) of the top-1 probability: %.4f\n", log_ratio);
  EXPECT_LT(std::abs(log_ratio), std::log(2.0));
  // Without probabilities (eval's approximate pass reads the ids alone): the same ids and
  // logits, the normaliser beyond the candidates not estimated, no probabilities.
  Trainer::Scores ids_only;
  tr.Score(m.test, 0, 64, 5, &ids_only, 0, ScoreMode::kIndex, /*probabilities=*/false);
  EXPECT_EQ(ids_only.ids, approx.ids);
  EXPECT_EQ(ids_only.logits, approx.logits);
  EXPECT_TRUE(ids_only.probs.empty());
  // Training changes the weights: the index is dropped, not used stale.
  TrainSteps(tr, m.train);
  EXPECT_EQ(tr.output_index(), nullptr);
  // A file of the index: written, read back, built again (and replaced) once the weights
  // changed; a file that is no index is not replaced.
  ann.file = testing::TmpPath("trainer_index.hnsw");
  std::remove(ann.file.c_str());
  BuildOutputIndex(tr, ann);
  EXPECT_FALSE(tr.output_index()->loaded());
  BuildOutputIndex(tr, ann);
  EXPECT_TRUE(tr.output_index()->loaded());
  TrainSteps(tr, m.train);
  BuildOutputIndex(tr, ann);
  EXPECT_FALSE(tr.output_index()->loaded()) << "an index of the earlier weights was read";
  BuildOutputIndex(tr, ann);
  EXPECT_TRUE(tr.output_index()->loaded());
  ann.file = testing::WriteFile("trainer_index_junk.txt", "some file of the user's\n");
  EXPECT_THROW(BuildOutputIndex(tr, ann), Error);
  std::ifstream junk(ann.file);
  std::string line;
  EXPECT_TRUE(std::getline(junk, line) && line == "some file of the user's");
}

}  // namespace
}  // namespace dslide
