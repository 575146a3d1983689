// The CPU backend's sampled output layer: the forward pass neuron by neuron (each active row
// read once for the samples that hold it), and the backward pass from the forward pass's
// index of the batch's entries, against a backward pass that sorts the deltas itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "common/parallel.h"
#include "common/rng.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_tuning.h"
#include "cpu/kernels/simd.h"
#include "train/auto_settings.h"

#include "../common/backend_driver.h"

namespace dslide {
namespace {

using testing::Backward;
using testing::Forward;
using testing::GetLayer;
using testing::SelectActive;

constexpr int64_t kIn = 50, kOut = 500, kB = 24;

struct Net {
  ModelSpec spec;
  BackendOptions opt;
  explicit Net(int64_t hidden) {
    TrainConfig c;
    c.hidden = {hidden};
    c.sparsity = {1.0, 0.1};
    c.min_negatives = 8;
    c.lsh.family = HashFamily::kSrp;
    c.lsh.k = 3;
    c.lsh.l = 8;
    c.seed = 9;
    ResolveAuto(&c, kIn, kOut);
    spec = ModelSpec::Make(kIn, {hidden}, kOut, c.sparsity, 0, 1, c.min_negatives);
    opt = BackendOptionsOf(c);
  }
  std::unique_ptr<cpu::CpuBackend> Make() const {
    auto b = std::make_unique<cpu::CpuBackend>();
    testing::InitBackend(*b, spec, opt);
    return b;
  }
};

BatchRows Hidden(int64_t width, uint64_t seed, int64_t samples = kB) {
  Rng rng(seed);
  BatchRows r;
  r.Strided(samples, width);
  for (int64_t i = 0; i < samples; ++i) {
    for (int64_t j = 0; j < width; ++j) {
      r.Ids(i)[j] = static_cast<int32_t>(j);
      r.Vals(i)[j] = rng.Below(3) == 0 ? 0.0f : static_cast<float>(rng.Uniform());
    }
    r.n[i] = width;
  }
  r.dense = true;
  r.width = width;
  return r;
}

BatchLabels Labels(uint64_t seed) {
  Rng rng(seed);
  BatchLabels l;
  for (int64_t i = 0; i < kB; ++i) {
    l.ids.push_back(static_cast<int32_t>(rng.Below(kOut / 2)));
    l.ids.push_back(static_cast<int32_t>(kOut / 2 + rng.Below(kOut / 2)));
    l.off.push_back(static_cast<int64_t>(l.ids.size()));
  }
  return l;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Layer 1 of a and b after their steps: weights, biases and Adam's moments equal bit for bit.
// a's weights and moments go to *wa and *ma.
void ExpectSameLayer(const LayerBackend& a, const LayerBackend& b, std::vector<float>* wa,
                     LayerState* ma) {
  std::vector<float> ba, wb, bb;
  GetLayer(a, 1, wa, &ba);
  GetLayer(b, 1, &wb, &bb);
  EXPECT_TRUE(BitEqual(*wa, wb)) << "weights after Adam";
  EXPECT_TRUE(BitEqual(ba, bb)) << "biases after Adam";
  LayerState mb;
  a.SaveLayer(1, kMoments, ma);
  b.SaveLayer(1, kMoments, &mb);
  EXPECT_TRUE(BitEqual(ma->m, mb.m) && BitEqual(ma->v, mb.v)) << "moments";
}

// Widths that are a multiple of 16 (four dot products at a time) and one that is not.
class SampledOutput : public ::testing::TestWithParam<int64_t> {};

TEST_P(SampledOutput, ForwardEqualsEachDotProductForAnyThreadCount) {
  const int64_t width = GetParam();
  const Net net(width);
  const BatchRows h = Hidden(width, 1);
  const BatchLabels lab = Labels(2);
  std::vector<float> w, b;
  BatchRows first;
  for (int threads : {1, 3}) {
    SetNumThreads(threads);
    auto be = net.Make();
    BatchRows act;
    SelectActive(*be, 1, h, &lab, 4, &act);
    Forward(*be, 1, h, &act);
    if (threads == 1) {
      first = act;
      GetLayer(*be, 1, &w, &b);
      int64_t checked = 0;
      for (int64_t i = 0; i < kB; ++i)
        for (int64_t k = 0; k < act.n[i]; ++k) {
          const int64_t r = act.Ids(i)[k];
          double z = b[r];
          for (int64_t j = 0; j < width; ++j) z += double(w[r * width + j]) * h.vals[h.off[i] + j];
          ASSERT_NEAR(act.Vals(i)[k], z, 1e-5 * std::max(1.0, std::abs(z)))
              << "sample " << i << " slot " << k << " neuron " << r;
          ++checked;
        }
      EXPECT_GT(checked, kB * 8);
    } else {
      ASSERT_EQ(act.n, first.n);
      for (int64_t i = 0; i < kB; ++i)
        for (int64_t k = 0; k < act.n[i]; ++k) {
          float x = act.Vals(i)[k], y = first.Vals(i)[k];
          ASSERT_EQ(0, std::memcmp(&x, &y, sizeof x)) << "3 threads, sample " << i;
        }
    }
  }
  SetNumThreads(1);
}

TEST_P(SampledOutput, BackwardFromTheForwardIndexEqualsBackwardFromTheDeltas) {
  // A: Select, Forward (which indexes the batch's entries by neuron), Backward with Adam.
  // B: Select and Backward alone, so it sorts the deltas itself. One thread: the input
  // gradient's per-thread partials then add in one order. Two steps; in the second, zero
  // deltas (a quarter, and every delta of one neuron) must be skipped alike: a row without
  // gradient takes no Adam step (with the first step's moments, a step would move it).
  const int64_t width = GetParam();
  SetNumThreads(1);
  const Net net(width);
  auto a = net.Make(), b = net.Make();
  std::vector<float> before;  // the silent neuron's row before the second step
  int32_t silent = -1;
  for (int it = 0; it < 2; ++it) {
    SCOPED_TRACE("step " + std::to_string(it + 1));
    const BatchRows h = Hidden(width, 5 + it);
    const BatchLabels lab = Labels(6);  // the same labels: the neurons recur
    BatchRows act, act_b;
    SelectActive(*a, 1, h, &lab, 8 + it, &act);
    SelectActive(*b, 1, h, &lab, 8 + it, &act_b);
    ASSERT_EQ(act.ids, act_b.ids);
    Forward(*a, 1, h, &act);
    if (it == 1) {
      silent = lab.ids[0];  // a label of sample 0: active in step 1 too
      std::vector<float> w, bias;
      GetLayer(*a, 1, &w, &bias);
      before.assign(w.begin() + silent * width, w.begin() + (silent + 1) * width);
    }
    BatchRows delta;
    delta.LikeZero(act);
    delta.ids = act.ids;
    Rng rng(7 + it);
    int64_t zeros = 0;
    for (int64_t i = 0; i < kB; ++i)
      for (int64_t k = 0; k < act.n[i]; ++k) {
        const bool zero = it == 1 && (act.Ids(i)[k] == silent || rng.Below(4) == 0);
        delta.Vals(i)[k] = zero ? 0.0f : static_cast<float>(rng.Uniform() - 0.5);
        zeros += zero;
      }
    ASSERT_EQ(zeros > 0, it == 1);
    AdamStep step;
    step.lr = 1e-2f;
    step.t = it + 1;
    std::vector<float> w0, b0;  // the weights the input gradient is taken from
    GetLayer(*a, 1, &w0, &b0);
    BatchRows ga, gb;
    ga.LikeZero(h);
    gb.LikeZero(h);
    Backward(*a, 1, h, delta, &ga, &step);
    Backward(*b, 1, h, delta, &gb, &step);
    EXPECT_TRUE(BitEqual(ga.vals, gb.vals)) << "input gradients";
    // Both against the sum itself: sample i's input gradient is sum_k delta_ik w_(id_ik).
    for (int64_t i = 0; i < kB; ++i)
      for (int64_t j = 0; j < width; ++j) {
        double want = 0.0;
        for (int64_t k = 0; k < act.n[i]; ++k)
          want += double(delta.Vals(i)[k]) * w0[act.Ids(i)[k] * width + j];
        ASSERT_NEAR(ga.vals[ga.off[i] + j], want, 1e-5 * std::max(1.0, std::abs(want)))
            << "input gradient of sample " << i << ", input " << j;
      }
    std::vector<float> wa;
    LayerState ma;
    ExpectSameLayer(*a, *b, &wa, &ma);
    if (it == 0) {
      // C: the gradient left pending (GradientRow, not the fused row walk), checked against
      // the sum itself, then applied by dense Adam: from zero moments a row without
      // gradient stays put, so C's weights must equal the fused pass's bit for bit.
      auto c = net.Make();
      BatchRows act_c, gc;
      SelectActive(*c, 1, h, &lab, 8 + it, &act_c);
      ASSERT_EQ(act.ids, act_c.ids);
      gc.LikeZero(h);
      Backward(*c, 1, h, delta, &gc, nullptr);
      std::vector<float> grad(testing::GradientSize(*c, 1));
      c->ExportGradient(1, grad.data(), 1.0f);
      std::vector<double> want(kOut * width, 0.0);
      for (int64_t i = 0; i < kB; ++i)
        for (int64_t k = 0; k < act.n[i]; ++k)
          for (int64_t j = 0; j < width; ++j)
            want[act.Ids(i)[k] * width + j] += double(delta.Vals(i)[k]) * h.vals[h.off[i] + j];
      for (int64_t r = 0; r < kOut * width; ++r)
        ASSERT_NEAR(grad[r], want[r], 1e-5 * std::max(1.0, std::abs(want[r])))
            << "weight gradient of neuron " << r / width << ", input " << r % width;
      c->ApplyGradient(1, grad.data(), step);
      std::vector<float> wc, bc;
      GetLayer(*c, 1, &wc, &bc);
      EXPECT_TRUE(BitEqual(wa, wc)) << "weights after the fused step and after the unfused one";
    }
    if (it == 1) {
      for (int64_t j = 0; j < width; ++j)
        EXPECT_EQ(wa[silent * width + j], before[j]) << "the silent neuron moved, input " << j;
      EXPECT_NE(ma.m[silent * width], 0.0f) << "the silent neuron had no first step";
    }
  }
}

// Active sets where the neurons `shared` are held by each of the first kB samples (at
// shuffled slots), each sample's other `own` neurons drawn at random; with `extra`, one more
// sample that holds none of the shared ones.
BatchRows SharedActive(const std::vector<int32_t>& shared, int64_t own, bool extra, uint64_t seed) {
  Rng rng(seed);
  const int64_t samples = kB + (extra ? 1 : 0), cap = static_cast<int64_t>(shared.size()) + own;
  BatchRows r;
  r.Strided(samples, cap);
  for (int64_t i = 0; i < samples; ++i) {
    std::vector<int32_t> ids = i < kB ? shared : std::vector<int32_t>{};
    const size_t want = ids.size() + static_cast<size_t>(own);
    while (ids.size() < want) {
      const int32_t id = static_cast<int32_t>(rng.Below(kOut));
      if (std::find(ids.begin(), ids.end(), id) == ids.end() &&
          std::find(shared.begin(), shared.end(), id) == shared.end())
        ids.push_back(id);
    }
    for (size_t k = ids.size(); k > 1; --k) std::swap(ids[k - 1], ids[rng.Below(k)]);
    std::copy(ids.begin(), ids.end(), r.Ids(i));
    r.n[i] = static_cast<int64_t>(ids.size());
  }
  return r;
}

TEST_P(SampledOutput, RowsEverySampleHoldsGoInBlocksWithTheSameResults) {
  // Neurons held by every sample of a batch take blocked passes (forward: eight rows at a
  // time against 16 samples in vector lanes; backward: four rows at a time). The same kB
  // samples with one more that holds none of them (and, backward, has zero deltas, so that
  // its entries drop out) make no row full: the walk row by row. Outputs, weight steps and moments
  // must be equal bit for bit; the input gradient adds the rows in another order, so it is compared
  // within rounding, and against the sum itself.
  const int64_t width = GetParam();
  SetNumThreads(1);
  const Net net(width);
  // Eleven shared neurons: forward a block of eight and one of three (kB = 24 samples: a full
  // block of lanes, then one of eight); backward two blocks of four, three left over.
  const std::vector<int32_t> shared = {3, 17, 40, 41, 42, 99, 150, 151, 300, 420, 499};
  const BatchRows h1 = Hidden(width, 11, kB + 1);
  BatchRows h = h1;
  h.off.resize(kB);
  h.n.resize(kB);
  const BatchRows act1 = SharedActive(shared, 7, true, 12);
  BatchRows act = act1;
  act.off.resize(kB);
  act.n.resize(kB);
  auto a = net.Make(), b = net.Make();
  BatchRows za = act, zb = act1;
  Forward(*a, 1, h, &za);
  Forward(*b, 1, h1, &zb);
  for (int64_t i = 0; i < kB; ++i)
    for (int64_t k = 0; k < act.n[i]; ++k) {
      const float x = za.Vals(i)[k], y = zb.Vals(i)[k];
      ASSERT_EQ(0, std::memcmp(&x, &y, sizeof x))
          << "sample " << i << " neuron " << act.Ids(i)[k] << ": " << x << " vs " << y;
    }
  std::vector<float> w0, b0;
  GetLayer(*a, 1, &w0, &b0);
  BatchRows delta1;
  delta1.LikeZero(act1);
  delta1.ids = act1.ids;
  Rng rng(13);
  for (int64_t i = 0; i < kB; ++i)
    for (int64_t k = 0; k < act1.n[i]; ++k)
      delta1.Vals(i)[k] = static_cast<float>(rng.Uniform() - 0.5);
  BatchRows delta = delta1;
  delta.off.resize(kB);
  delta.n.resize(kB);
  AdamStep step;
  step.lr = 1e-2f;
  step.t = 1;
  BatchRows ga, gb;
  ga.LikeZero(h);
  gb.LikeZero(h1);
  Backward(*a, 1, h, delta, &ga, &step);
  Backward(*b, 1, h1, delta1, &gb, &step);
  std::vector<float> wa;
  LayerState ma;
  ExpectSameLayer(*a, *b, &wa, &ma);
  for (const int32_t r : shared) EXPECT_NE(wa[r * width], w0[r * width]) << "neuron " << r;
  for (int64_t i = 0; i < kB; ++i)
    for (int64_t j = 0; j < width; ++j) {
      double want = 0.0;
      for (int64_t k = 0; k < act.n[i]; ++k)
        want += double(delta.Vals(i)[k]) * w0[act.Ids(i)[k] * width + j];
      const float x = ga.vals[ga.off[i] + j], y = gb.vals[gb.off[i] + j];
      ASSERT_NEAR(x, want, 1e-5 * std::max(1.0, std::abs(want))) << "sample " << i << ", " << j;
      ASSERT_NEAR(x, y, 1e-6 * std::max(1.0f, std::abs(y))) << "sample " << i << ", " << j;
    }
}

// 32 and 128: the forward walk with the row in registers (with AVX-512); 144: the walk's
// four entries at a time, and a 128-column block of the backward row walk, then 16-column
// ones; 20: no vector blocks.
TEST_P(SampledOutput, ExactTopKIsTheBestLogitsTheSameForAnyThreadCount) {
  // The exact top-k (evaluation, predict) scores every neuron: with widths a multiple of 16
  // kR rows against the samples in vector lanes, else one dot product at a time. Its k
  // best are those of the logits w.x + b (computed here in double), in order, and the same
  // bits on 1 and 3 threads; 37 samples fill neither a block of samples nor its last
  // vector of lanes.
  const int64_t width = GetParam();
  constexpr int64_t kSamples = 37;
  constexpr int kK = 5;
  const Net net(width);
  const BatchRows h = Hidden(width, 3, kSamples);
  std::vector<int32_t> first_ids;
  std::vector<float> first_scores;
  for (int threads : {1, 3}) {
    SetNumThreads(threads);
    auto be = net.Make();
    std::vector<float> w, b;
    GetLayer(*be, 1, &w, &b);
    std::vector<int32_t> ids;
    std::vector<float> scores;
    testing::TopK(*be, 1, h, kK, &ids, &scores);
    ASSERT_EQ(ids.size(), static_cast<size_t>(kSamples * kK));
    if (threads != 1) {
      EXPECT_EQ(ids, first_ids) << threads << " threads";
      EXPECT_TRUE(BitEqual(scores, first_scores)) << threads << " threads";
      continue;
    }
    first_ids = ids;
    first_scores = scores;
    for (int64_t i = 0; i < kSamples; ++i) {
      std::vector<std::pair<double, int32_t>> z(kOut);
      for (int64_t r = 0; r < kOut; ++r) {
        double d = b[r];
        for (int64_t j = 0; j < width; ++j) d += double(w[r * width + j]) * h.vals[h.off[i] + j];
        z[r] = {-d, static_cast<int32_t>(r)};
      }
      std::partial_sort(z.begin(), z.begin() + kK + 1, z.end());
      for (int j = 0; j < kK; ++j) {
        const double want = -z[j].first;
        EXPECT_NEAR(scores[i * kK + j], want, 1e-5 * std::max(1.0, std::abs(want)))
            << "sample " << i << " rank " << j;
        // The neuron too, where the next logit is not within rounding of this one.
        if (z[j + 1].first - z[j].first > 1e-4 && (j == 0 || z[j].first - z[j - 1].first > 1e-4))
          EXPECT_EQ(ids[i * kK + j], z[j].second) << "sample " << i << " rank " << j;
      }
    }
  }
  SetNumThreads(1);
}

// The exact top-k takes each group of rows against the blocks of a super-block of samples
// (CpuTuning::kTopKSuperBytes of inputs) in turn. Two whole super-blocks and a third with a
// short last block: each sample's lists and normaliser must be the bits it gets in a batch
// of 37 (less than one block), on 2 threads.
TEST(CpuKernels, ExactTopKOverSuperBlocksIsEachSliceAlone) {
  constexpr int64_t kWidth = 128, kSlice = 37;
  constexpr int64_t kSuper = cpu::CpuTuning::kTopKSuperBytes / (kWidth * sizeof(float));
  constexpr int64_t kSamples = 2 * kSuper + 76;
  constexpr int kK = 5;
  SetNumThreads(2);
  const Net net(kWidth);
  auto be = net.Make();
  const BatchRows h = Hidden(kWidth, 11, kSamples);
  std::vector<int32_t> ids;
  std::vector<float> scores;
  SoftmaxStats st;
  testing::TopK(*be, 1, h, kK, &ids, &scores, nullptr, &st);
  ASSERT_EQ(ids.size(), static_cast<size_t>(kSamples * kK));
  for (int64_t i0 = 0; i0 < kSamples; i0 += kSlice) {
    const int64_t n = std::min(kSlice, kSamples - i0);
    BatchRows part;
    part.Strided(n, kWidth);
    for (int64_t i = 0; i < n; ++i) {
      std::copy(h.ids.begin() + h.off[i0 + i], h.ids.begin() + h.off[i0 + i] + kWidth, part.Ids(i));
      std::copy(h.vals.begin() + h.off[i0 + i], h.vals.begin() + h.off[i0 + i] + kWidth,
                part.Vals(i));
      part.n[i] = kWidth;
    }
    part.dense = true;
    part.width = kWidth;
    std::vector<int32_t> pids;
    std::vector<float> pscores;
    SoftmaxStats pst;
    testing::TopK(*be, 1, part, kK, &pids, &pscores, nullptr, &pst);
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < kK; ++j) {
        ASSERT_EQ(ids[(i0 + i) * kK + j], pids[i * kK + j]) << "sample " << i0 + i;
        ASSERT_EQ(std::memcmp(&scores[(i0 + i) * kK + j], &pscores[i * kK + j], sizeof(float)), 0)
            << "sample " << i0 + i;
      }
      ASSERT_EQ(std::memcmp(&st.mx[i0 + i], &pst.mx[i], sizeof(float)), 0) << "sample " << i0 + i;
      ASSERT_EQ(std::memcmp(&st.red[i0 + i], &pst.red[i], sizeof(float)), 0) << "sample " << i0 + i;
    }
  }
  SetNumThreads(1);
}

// Lists longer than CpuTuning::kTopKShortList are buffered and cut back by selection, the
// shorter ones kept sorted as rows come: both must be the first entries of one order (score
// descending, a tie to the smaller id). Rows copied from others make exact ties; 40 samples
// (a whole block and a short one) on 2 threads, k from the short path to every neuron.
TEST(CpuKernels, LongAndShortExactListsAreOneOrderWithTiesToTheSmallerId) {
  constexpr int64_t kWidth = 32, kSamples = 40;
  SetNumThreads(2);
  const Net net(kWidth);
  auto be = net.Make();
  std::vector<float> w, b;
  GetLayer(*be, 1, &w, &b);
  for (int64_t r = 1; r < kOut; r += 3) {  // every third row a copy of the one before it
    std::copy_n(w.begin() + (r - 1) * kWidth, kWidth, w.begin() + r * kWidth);
    b[r] = b[r - 1];
  }
  testing::SetLayer(*be, 1, w, b);
  const BatchRows h = Hidden(kWidth, 5, kSamples);
  std::vector<int32_t> all_ids;
  std::vector<float> all_scores;
  testing::TopK(*be, 1, h, static_cast<int>(kOut), &all_ids, &all_scores);
  for (int64_t i = 0; i < kSamples; ++i) {
    const int32_t* id = all_ids.data() + i * kOut;
    const float* sc = all_scores.data() + i * kOut;
    std::vector<int32_t> sorted(id, id + kOut);
    std::sort(sorted.begin(), sorted.end());
    for (int64_t r = 0; r < kOut; ++r) ASSERT_EQ(sorted[r], r) << "sample " << i;
    int64_t ties = 0;
    for (int64_t j = 1; j < kOut; ++j) {
      ASSERT_TRUE(sc[j - 1] > sc[j] || (sc[j - 1] == sc[j] && id[j - 1] < id[j]))
          << "sample " << i << " rank " << j;
      ties += sc[j - 1] == sc[j];
    }
    ASSERT_GT(ties, 100) << "sample " << i;  // the copies tie
  }
  for (int k : {cpu::CpuTuning::kTopKShortList, cpu::CpuTuning::kTopKShortList + 1, 100}) {
    std::vector<int32_t> ids;
    std::vector<float> scores;
    testing::TopK(*be, 1, h, k, &ids, &scores);
    for (int64_t i = 0; i < kSamples; ++i)
      for (int j = 0; j < k; ++j) {
        ASSERT_EQ(ids[i * k + j], all_ids[i * kOut + j]) << "k " << k << " sample " << i;
        ASSERT_EQ(scores[i * k + j], all_scores[i * kOut + j]) << "k " << k << " sample " << i;
      }
  }
  SetNumThreads(1);
}

INSTANTIATE_TEST_SUITE_P(Widths, SampledOutput,
                         ::testing::Values(int64_t{32}, int64_t{128}, int64_t{20}, int64_t{144}));

TEST(CpuInputMajor, FusedStepOnTwoThreadsEqualsTheUnfusedStepOnOne) {
  // The first (input-major) layer's step with Adam walks the batch's features, forming
  // each row's gradient in sample order: on two threads it must equal, bit for bit, the
  // HOGWILD gradient of one thread (the same order) applied by dense Adam afterwards (from
  // zero moments a row without gradient stays put). Features recur across samples.
  const int64_t width = 32;
  const Net net(width);
  BatchRows x = testing::SparseInputs(kB, 8, 8, kIn / 2, kIn, 11);  // half the features
  BatchRows delta = Hidden(width, 12);  // every neuron, ids 0..width-1, some zero
  AdamStep step;
  step.lr = 1e-2f;
  step.t = 1;
  SetNumThreads(2);
  auto a = net.Make();
  std::vector<float> w0, b0;
  GetLayer(*a, 0, &w0, &b0);
  Backward(*a, 0, x, delta, nullptr, &step);
  SetNumThreads(1);
  auto c = net.Make();
  Backward(*c, 0, x, delta, nullptr, nullptr);
  std::vector<float> grad(testing::GradientSize(*c, 0));
  c->ExportGradient(0, grad.data(), 1.0f);
  c->ApplyGradient(0, grad.data(), step);
  LayerState sa, sc;
  a->SaveLayer(0, kWeights | kMoments, &sa);
  c->SaveLayer(0, kWeights | kMoments, &sc);
  EXPECT_TRUE(BitEqual(sa.w, sc.w)) << "weights";
  EXPECT_TRUE(BitEqual(sa.b, sc.b)) << "biases";
  EXPECT_TRUE(BitEqual(sa.m, sc.m) && BitEqual(sa.v, sc.v)) << "moments";
  // The first moment is (1 - beta1) times the gradient sum_i x_if delta_ij (rows by neuron).
  int64_t moved = 0;
  for (int64_t j = 0; j < width; ++j)
    for (int64_t f = 0; f < kIn; ++f) {
      double want = 0.0;
      for (int64_t i = 0; i < kB; ++i)
        for (int64_t e = 0; e < x.n[i]; ++e)
          if (x.Ids(i)[e] == f) want += double(x.Vals(i)[e]) * delta.Vals(i)[j];
      const float m = sa.m[j * kIn + f];
      ASSERT_NEAR(m, (1.0 - step.beta1) * want, 1e-5 * std::max(1.0, std::abs(want)))
          << "neuron " << j << ", feature " << f;
      if (f >= kIn / 2) EXPECT_EQ(sa.w[j * kIn + f], w0[j * kIn + f]) << "an absent feature";
      moved += sa.w[j * kIn + f] != w0[j * kIn + f];
    }
  EXPECT_GT(moved, 0);
}

TEST(CpuRebuild, RehashingOnlyTheMovedNeuronsBuildsTheTablesOfAFullRehash) {
  // A takes three sampled Adam steps (on two threads), then rebuilds its tables, hashing
  // only the neurons the steps moved. B loads A's weights (without tables) and rebuilds
  // from every neuron with the same hash functions and rebuild count: the same tables. C
  // does so from the initial weights: different tables, so stale buckets would be seen.
  SetNumThreads(2);
  const int64_t width = 32;
  const Net net(width);
  auto a = net.Make();
  LayerState init;
  a->SaveLayer(1, kWeights, &init);
  for (int it = 0; it < 3; ++it) {
    const BatchRows h = Hidden(width, 20 + it);
    const BatchLabels lab = Labels(30 + it);
    BatchRows act;
    SelectActive(*a, 1, h, &lab, it, &act);
    Forward(*a, 1, h, &act);
    BatchRows delta;
    delta.LikeZero(act);
    delta.ids = act.ids;
    Rng rng(40 + it);
    for (int64_t i = 0; i < kB; ++i)
      for (int64_t k = 0; k < act.n[i]; ++k)
        delta.Vals(i)[k] = static_cast<float>(rng.Uniform() - 0.5);
    AdamStep step;
    step.lr = 0.05f;
    step.t = it + 1;
    Backward(*a, 1, h, delta, nullptr, &step);
  }
  TablePlans plans(net.spec, net.opt.seed);
  plans.Restore(1, 1, 1);  // Make built the first tables
  plans.RebuildLayer(a.get(), 1);
  const unsigned all = kWeights | kMoments | kTables;
  LayerState sa;
  a->SaveLayer(1, all, &sa);
  ASSERT_FALSE(sa.table_ids.empty());
  auto rebuilt_from = [&](const std::vector<float>& w, const std::vector<float>& b) {
    LayerState st = sa;
    st.w = w;
    st.b = b;
    st.table_offsets.clear();
    st.table_ids.clear();
    st.table_sizes.clear();
    auto x = net.Make();
    x->LoadLayer(1, all, st);
    x->RebuildTables(1, sa.tables_plan);
    LayerState out;
    x->SaveLayer(1, kTables, &out);
    EXPECT_EQ(out.tables_plan.rebuild, sa.tables_plan.rebuild);
    return out;
  };
  const LayerState sb = rebuilt_from(sa.w, sa.b);
  EXPECT_EQ(sa.table_sizes, sb.table_sizes);
  EXPECT_EQ(sa.table_offsets, sb.table_offsets);
  EXPECT_EQ(sa.table_ids, sb.table_ids);
  const LayerState sc = rebuilt_from(init.w, init.b);
  EXPECT_NE(sa.table_ids, sc.table_ids) << "the steps moved no neuron to another bucket";
}

// LaneDots2 (two vectors of samples per call, the AVX2 build's exact top-k) forms every
// sample's logits with the same bits as LaneDots, which forms them as the rows' dot products
// in lane order; both against Dot to float rounding.
TEST(CpuKernels, LaneDots2HasLaneDotsBits) {
  using cpu::kLanesN;
  using cpu::VecN;
  constexpr int kR = 4;
  const int64_t n = 128, samples = 2 * kLanesN, stride = 3 * kLanesN;  // a padded block
  Rng rng(7);
  std::vector<float> w(kR * n), xt(n * stride), x(samples * n);
  for (float& v : w) v = static_cast<float>(rng.Uniform()) - 0.5f;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < samples; ++i) {
      xt[j * stride + i] = static_cast<float>(rng.Uniform()) - 0.5f;
      x[i * n + j] = xt[j * stride + i];
    }
  const float* rows[kR];
  for (int k = 0; k < kR; ++k) rows[k] = w.data() + k * n;
  VecN one[2][kR], two[2 * kR];
  cpu::LaneDots<kR>(rows, xt.data(), stride, n, one[0]);
  cpu::LaneDots<kR>(rows, xt.data() + kLanesN, stride, n, one[1]);
  cpu::LaneDots2<kR>(rows, xt.data(), stride, n, two);
  for (int k = 0; k < kR; ++k)
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < kLanesN; ++l) {
        const float a = one[h][k][l], b = two[2 * k + h][l];
        EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "row " << k << " sample " << h * kLanesN + l;
        EXPECT_NEAR(a, cpu::Dot(rows[k], x.data() + (h * kLanesN + l) * n, n), 1e-4);
      }
}

}  // namespace
}  // namespace dslide
