// The CPU backend's exact top-k: every neuron of the output layer scored for a batch, with
// the softmax normaliser when asked.
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/parallel.h"
#include "cpu/cpu_layer.h"
#include "cpu/cpu_tuning.h"
#include "cpu/kernels/simd.h"
#include "model/softmax.h"
#include "model/topk.h"

namespace dslide::cpu {

void CpuBackend::TopKRows(int layer, const BatchRows& in, int k, std::vector<int32_t>* ids,
                          std::vector<float>* scores, const BatchLabels* labels, SoftmaxStats* st) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  DSLIDE_ASSERT(!s.input_major, "exact top-k needs a row-per-neuron output layer");
  const int64_t B = in.samples();
  ids->assign(B * k, -1);
  scores->assign(B * k, -std::numeric_limits<float>::infinity());
  // Dense copies of the inputs so a block of samples stays in cache while rows stream by.
  constexpr int64_t kBlock = CpuTuning::kTopKBlock;
  const int threads = NumThreads();
  std::vector<float> xs(B * s.in_dim, 0.0f);
  for (int64_t i = 0; i < B; ++i) {
    const SparseView x = in.Row(i);
    for (int64_t e = 0; e < x.n; ++e) xs[i * s.in_dim + x.ids[e]] = x.vals[e];
  }
  // With a width LaneDots takes, the inputs transposed as well (coordinate j's values of
  // the samples side by side): kR rows' logits for kLanesN samples at a time, the same dot
  // products as Dot's, each load of an input serving kR rows. Transposed a block of kBlock
  // samples at a time ([block][coordinate][sample of the block]): a block's inputs are one
  // contiguous run of in_dim x kBlock floats, where a whole-batch transpose put its
  // coordinates a batch apart (a page each, more than the TLB holds).
  const bool lanes = s.in_dim % 16 == 0;
  const int64_t blocks = (B + kBlock - 1) / kBlock, stride = kBlock;
  std::vector<float> xt(lanes ? static_cast<size_t>(blocks * s.in_dim * kBlock) : 0, 0.0f);
  if (lanes)
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < s.in_dim; ++j)
        xt[(i / kBlock * s.in_dim + j) * kBlock + i % kBlock] = xs[i * s.in_dim + j];
  std::vector<int32_t> tids(static_cast<size_t>(threads) * B * k, -1);
  std::vector<float> tsc(static_cast<size_t>(threads) * B * k,
                         -std::numeric_limits<float>::infinity());
  // Per thread and sample, the running max of the logits and the sum of exp(z - max).
  const bool norm = st != nullptr;
  const bool ovr = opt_.loss == OutputLoss::kOneVsRest;
  std::vector<float> tmx(norm ? static_cast<size_t>(threads) * B : 0,
                         -std::numeric_limits<float>::infinity());
  std::vector<double> tsum(norm ? static_cast<size_t>(threads) * B : 0, 0.0);
  const int64_t n = s.local();
  const int64_t super =
      std::max<int64_t>(1, CpuTuning::kTopKSuperBytes /
                               (kBlock * s.in_dim * static_cast<int64_t>(sizeof(float)))) *
      kBlock;
  ParallelFor(threads, [&](int64_t t) {
    const int64_t r0 = n * t / threads, r1 = n * (t + 1) / threads;
    int32_t* my_ids = tids.data() + t * B * k;
    float* my_sc = tsc.data() + t * B * k;
    float* my_mx = norm ? tmx.data() + t * B : nullptr;
    double* my_sum = norm ? tsum.data() + t * B : nullptr;
    // Lists longer than kTopKShortList: each sample's candidates above its k-th best in an
    // unsorted buffer of 2k, cut back to its best k (a selection, by score and then id, the
    // order the rows arrive in) when full and at the end. The same lists InsertTopK's
    // sorted insertion keeps, for a selection's cost where each insertion shifted ~k/2.
    // Until the end the list's last score holds the k-th best of the last cut (-inf before
    // the first), the threshold either way.
    const bool buffered = k > CpuTuning::kTopKShortList;
    const int64_t cap = buffered ? 2 * k : 0;
    std::vector<std::pair<float, int32_t>> buf(B * cap);
    std::vector<int64_t> fill(buffered ? B : 0, 0);
    const auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    // Groups of rows against blocks of samples: the group's logits for the block in a tile,
    // then per sample one rescale of the normaliser per group and vectorised exps.
    constexpr int64_t kGroup = CpuTuning::kTopKGroup;
    constexpr int kR = kLanesN == 16 ? 8 : 4;
    static_assert(kGroup % kR == 0 && kBlock % (2 * kLanesN) == 0, "whole tiles of rows and lanes");
    std::vector<float> tile(kGroup * kBlock);  // the group's logits: [row of the group][sample]
    // Super-blocks of samples whose inputs stay in the second-level cache, each group of
    // rows taken against all their blocks in turn: the rows stream from memory once per
    // super-block, not once per block. Every sample still meets the groups in row order
    // (the same normaliser and lists, bit for bit).
    for (int64_t s0 = 0; s0 < B; s0 += super) {
      const int64_t s1 = std::min(B, s0 + super);
      for (int64_t g0 = r0; g0 < r1; g0 += kGroup) {
        const int64_t g1 = std::min(r1, g0 + kGroup), ng = g1 - g0;
        for (int64_t b0 = s0; b0 < s1; b0 += kBlock) {
          const int64_t b1 = std::min(B, b0 + kBlock);
          if (!lanes) {  // a width LaneDots does not take: one dot product per (row, sample)
            for (int64_t r = 0; r < ng; ++r)
              for (int64_t i = b0; i < b1; ++i)
                tile[r * kBlock + (i - b0)] =
                    Dot(L.Row(g0 + r), xs.data() + i * s.in_dim, s.in_dim);
          } else {
            for (int64_t q = 0; q < ng; q += kR) {
              const float* ws[kR];
              for (int k = 0; k < kR; ++k) ws[k] = L.Row(g0 + std::min<int64_t>(q + k, ng - 1));
              const float* xb = xt.data() + b0 / kBlock * s.in_dim * kBlock - b0;  // + i0
              if (kLanesN == 8) {  // AVX2: two vectors of samples per call (LaneDots2)
                for (int64_t i0 = b0; i0 < b1; i0 += 2 * kLanesN) {
                  VecN zk[2 * kR];
                  LaneDots2<kR>(ws, xb + i0, stride, s.in_dim, zk);
                  for (int k = 0; k < kR; ++k)
                    std::memcpy(tile.data() + (q + k) * kBlock + (i0 - b0), &zk[2 * k],
                                2 * sizeof zk[0]);
                }
              } else {
                for (int64_t i0 = b0; i0 < b1; i0 += kLanesN) {
                  VecN zk[kR];
                  LaneDots<kR>(ws, xb + i0, stride, s.in_dim, zk);
                  for (int k = 0; k < kR; ++k)
                    std::memcpy(tile.data() + (q + k) * kBlock + (i0 - b0), &zk[k], sizeof zk[k]);
                }
              }
            }
          }
          // The tile's samples side by side ([row][sample]): the group's max, the normaliser
          // and the top-k test of every sample of the block at once, vectorised over the
          // samples; a sample's rows are scanned only where its group max beats its k-th best.
          const int64_t nb = b1 - b0;
          float gm[kBlock], acc[kBlock];
          for (int64_t j = 0; j < kBlock; ++j) {
            gm[j] = -std::numeric_limits<float>::infinity();
            acc[j] = 0.0f;
          }
          for (int64_t r = 0; r < ng; ++r) {
            const float* zr = tile.data() + r * kBlock;
            const float br = L.b[g0 + r];
#pragma omp simd
            for (int64_t j = 0; j < kBlock; ++j) gm[j] = std::max(gm[j], zr[j] + br);
          }
          if (norm && ng > 0) {
            float m[kBlock];
            for (int64_t j = 0; j < nb; ++j) {
              const int64_t i = b0 + j;
              if (ovr) {
                my_mx[i] = 0.0f;
              } else if (gm[j] > my_mx[i]) {
                my_sum[i] *= static_cast<double>(ExpNonPositive(my_mx[i] - gm[j]));
                my_mx[i] = gm[j];
              }
              m[j] = my_mx[i];
            }
            // Lanes past the block (a short last one) hold stale values: their own max keeps
            // the exps' arguments at or below 0; their sums are not used.
            for (int64_t j = nb; j < kBlock; ++j) m[j] = gm[j];
            for (int64_t r = 0; r < ng; ++r) {
              const float* zr = tile.data() + r * kBlock;
              const float br = L.b[g0 + r];
              if (ovr) {
#pragma omp simd
                for (int64_t j = 0; j < kBlock; ++j) acc[j] += SoftplusFast(zr[j] + br);
              } else {
#pragma omp simd
                for (int64_t j = 0; j < kBlock; ++j) acc[j] += ExpNonPositive(zr[j] + br - m[j]);
              }
            }
            for (int64_t j = 0; j < nb; ++j) my_sum[b0 + j] += acc[j];
          }
          // The rows' logits against each sample's k-th best, 32 samples a compare: only
          // the (row, sample) pairs above it are inserted, a sample's rows in row order.
          static_assert(kBlock <= 32, "a sample a bit of the mask");
          float kth[kBlock];
          bool any = false;
          for (int64_t j = 0; j < kBlock; ++j) {
            kth[j] = j < nb ? my_sc[(b0 + j) * k + k - 1] : std::numeric_limits<float>::infinity();
            any |= gm[j] > kth[j];
          }
          if (!any) continue;
          for (int64_t r = 0; r < ng; ++r) {
            const float* zr = tile.data() + r * kBlock;
            const float br = L.b[g0 + r];
            uint32_t mask = 0;
            for (int64_t j = 0; j < kBlock; ++j)
              mask |= static_cast<uint32_t>(zr[j] + br > kth[j]) << j;
            const auto id = static_cast<int32_t>(s.begin + g0 + r);
            for (; mask != 0; mask &= mask - 1) {
              const int j = __builtin_ctz(mask);
              const int64_t i = b0 + j;
              if (!buffered) {
                float* sc = my_sc + i * k;
                InsertTopK(zr[j] + br, id, k, sc, my_ids + i * k);
                kth[j] = sc[k - 1];
                continue;
              }
              std::pair<float, int32_t>* bb = buf.data() + i * cap;
              bb[fill[i]] = {zr[j] + br, id};
              if (++fill[i] == cap) {
                std::nth_element(bb, bb + k - 1, bb + cap, better);
                fill[i] = k;
                kth[j] = my_sc[i * k + k - 1] = bb[k - 1].first;
              }
            }
          }
        }
      }
    }
    if (buffered)
      for (int64_t i = 0; i < B; ++i) {
        std::pair<float, int32_t>* bb = buf.data() + i * cap;
        const int64_t m = std::min<int64_t>(fill[i], k);
        if (fill[i] > k) std::nth_element(bb, bb + k - 1, bb + fill[i], better);
        std::sort(bb, bb + m, better);
        for (int64_t j = 0; j < m; ++j) {
          my_sc[i * k + j] = bb[j].first;
          my_ids[i * k + j] = bb[j].second;
        }
      }
  });
  if (norm) {
    st->Resize(B);
    ParallelFor(B, 8, [&](int64_t i) {
      float m = -std::numeric_limits<float>::infinity();
      for (int t = 0; t < threads; ++t) m = std::max(m, tmx[t * B + i]);
      double sum = 0;
      for (int t = 0; t < threads; ++t)
        if (tsum[t * B + i] > 0)
          sum += tsum[t * B + i] * std::exp(static_cast<double>(tmx[t * B + i]) - m);
      double lab = 0;
      if (labels != nullptr) {
        const int32_t* lb = labels->Of(i);
        for (int64_t j = 0; j < labels->Count(i); ++j)
          if (lb[j] >= s.begin && lb[j] < s.end)
            lab += Dot(L.Row(lb[j] - s.begin), xs.data() + i * s.in_dim, s.in_dim) +
                   L.b[lb[j] - s.begin];
      }
      st->mx[i] = m;
      st->red[i] = static_cast<float>(sum);
      st->red[B + i] = static_cast<float>(lab);
    });
  }
  // Merge the threads' lists.
  MergeTopKLists(tids.data(), tsc.data(), threads, B, k, ids->data(), scores->data());
}

}  // namespace dslide::cpu
