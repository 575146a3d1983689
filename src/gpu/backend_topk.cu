// The GPU backend's exact top-k and full-softmax statistics of the output layer (evaluation
// and predict).
#include <algorithm>

#include "common/parallel.h"
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

namespace {
/// Samples per block of the host merge of the segments' lists.
constexpr int64_t kMergeBlock = 16;
}  // namespace

template <class X>
void GpuBackendT<X>::TopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
                          const BatchLabels* labels, SoftmaxStats* st) {
  DeviceTopK(layer, k, ids, scores, labels, st);
}

template <class X>
void GpuBackendT<X>::DeviceTopK(int layer, int k, std::vector<int32_t>* ids,
                                std::vector<float>* scores, const BatchLabels* labels,
                                SoftmaxStats* st) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  DSLIDE_ASSERT(!s.input_major, "exact top-k needs a row-per-neuron output layer");
  DSLIDE_CHECK(k >= 1 && k <= TopKSegments::kMaxK,
               "top-k on the GPU supports k <= ", TopKSegments::kMaxK, ", got ", k,
               ": score on the CPU (--device cpu)");
  const DevRows& in = InRows(layer);
  // The inputs a column per sample: the consecutive threads of a segment (consecutive
  // samples) read consecutive addresses at each input coordinate.
  Densify(in, s.in_dim, &xd_, /*by_column=*/true);
  const int64_t B = in.B, n = s.local(), cols = L.cols, begin = s.begin;
  // Longer lists take longer segments, so that the lists downloaded and merged stay about
  // n / 8 entries per sample (k <= 32: kTopKSegment).
  const int64_t segment = kTopKSegment * ((k + 31) / 32);
  const int64_t nseg = (n + segment - 1) / segment;
  topk_ids_.Resize(B * nseg * k);
  topk_sc_.Resize(B * nseg * k);
  // Per (sample, segment): the largest logit and the sum of exp(z - max) over the segment.
  topk_mx_.Resize(B * nseg);
  topk_sum_.Resize(B * nseg);
  {
    TopKSegments t;
    t.k = k;
    t.ovr = opt_.loss == OutputLoss::kOneVsRest;
    t.B = B;
    t.n = n;
    t.nseg = nseg;
    t.segment = segment;
    t.cols = cols;
    t.begin = begin;
    t.x = xd_.data();
    t.w = L.w.data();
    t.bias = L.b.data();
    t.oid = topk_ids_.data();
    t.osc = topk_sc_.data();
    t.omx = topk_mx_.data();
    t.osum = topk_sum_.data();
    x_.Launch(t);
  }
  std::vector<int32_t> hid(B * nseg * k);
  std::vector<float> hsc(B * nseg * k);
  x_.Download(topk_ids_, hid.data(), hid.size());
  x_.Download(topk_sc_, hsc.data(), hsc.size());
  ids->resize(B * k);
  scores->resize(B * k);
  // Each sample's nseg segment lists, one after another: one list of nseg * k, merged on
  // the host threads (a sample at a time; a selector per block of samples).
  ParallelFor((B + kMergeBlock - 1) / kMergeBlock, [&](int64_t blk) {
    TopKSelector top;
    const int64_t i1 = std::min(B, (blk + 1) * kMergeBlock);
    for (int64_t i = blk * kMergeBlock; i < i1; ++i) {
      top.Clear();
      top.PushAll(hsc.data() + i * nseg * k, hid.data() + i * nseg * k, nseg * k);
      top.Take(k, ids->data() + i * k, scores->data() + i * k);
    }
  });
  if (st == nullptr) return;
  st->Resize(B);
  std::vector<float> hmx(B * nseg), hsum(B * nseg);
  x_.Download(topk_mx_, hmx.data(), hmx.size());
  x_.Download(topk_sum_, hsum.data(), hsum.size());
  for (int64_t i = 0; i < B; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t g = 0; g < nseg; ++g) m = std::max(m, hmx[i * nseg + g]);
    double sum = 0;
    for (int64_t g = 0; g < nseg; ++g)
      if (hsum[i * nseg + g] > 0)
        sum += hsum[i * nseg + g] * std::exp(static_cast<double>(hmx[i * nseg + g]) - m);
    st->mx[i] = m;
    st->red[i] = static_cast<float>(sum);
    st->red[B + i] = 0.0f;
  }
  if (labels == nullptr) return;
  // The logits of the labels this shard owns: a thread per (sample, label).
  std::vector<int64_t> lsample;
  std::vector<int32_t> lrow;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < labels->Count(i); ++j) {
      const int32_t id = labels->Of(i)[j];
      if (id >= s.begin && id < s.end) {
        lsample.push_back(i);
        lrow.push_back(static_cast<int32_t>(id - s.begin));
      }
    }
  const int64_t nl = static_cast<int64_t>(lrow.size());
  if (nl == 0) return;
  x_.Upload(&topk_lsample_, lsample.data(), nl);
  x_.Upload(&topk_lrow_, lrow.data(), nl);
  topk_mx_.Resize(nl);
  LabelLogits lk;
  lk.nl = nl;
  lk.cols = cols;
  lk.B = B;
  lk.ls = topk_lsample_.data();
  lk.lr = topk_lrow_.data();
  lk.x = xd_.data();
  lk.w = L.w.data();
  lk.bias = L.b.data();
  lk.lz = topk_mx_.data();
  x_.Launch(lk);
  std::vector<float> hz(nl);
  x_.Download(topk_mx_, hz.data(), hz.size());
  for (int64_t e = 0; e < nl; ++e) st->red[B + lsample[e]] += hz[e];
}

#define DSLIDE_GPU_MEMBERS(X)                                                                     \
  template void GpuBackendT<X>::TopK(int layer, int k, std::vector<int32_t>* ids,                 \
                                     std::vector<float>* scores, const BatchLabels* labels,       \
                                     SoftmaxStats* st);                                           \
  template void GpuBackendT<X>::DeviceTopK(int layer, int k, std::vector<int32_t>* ids,           \
                                           std::vector<float>* scores, const BatchLabels* labels, \
                                           SoftmaxStats* st);
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
