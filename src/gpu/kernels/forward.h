// Forward kernels: the activations of a batch's active neurons (LayerBackend::Forward).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu/kernels/common.h"

namespace dslide::gpu {

/// Row-per-neuron layer (weights row r = neuron r's `cols` inputs): a block per sample
/// densifies the sample's input (in shared memory when `shared`, else in its row of `xg`),
/// then a warp per active neuron reads the neuron's weight row with consecutive lanes on
/// consecutive floats (coalesced) and sums the lanes' partial dot products with shuffles.
struct ForwardRows {
  static constexpr int kThreads = 128;  // 4 warps a block
  RowsView in, act;                     // the input rows; the active neurons (their ids)
  int64_t cols = 0, begin = 0;
  bool relu = false, shared = false;
  const float *w = nullptr, *bias = nullptr;
  float* xg = nullptr;  // B x cols, when !shared
  float* z = nullptr;   // the activations, laid out as act

  bool Empty() const { return in.B <= 0; }
  size_t SharedBytes() const { return shared ? cols * sizeof(float) : 0; }
  DSLIDE_HD float* Input(int64_t i, void* smem) const {
    return shared ? static_cast<float*>(smem) : xg + i * cols;
  }
  /// Thread `tid` of `nt` clears and then fills its share of sample i's dense input (two
  /// phases, a barrier between).
  DSLIDE_HD void Clear(int64_t i, int tid, int nt, float* x) const {
    for (int64_t j = tid; j < cols; j += nt) x[j] = 0.0f;
  }
  DSLIDE_HD void Scatter(int64_t i, int tid, int nt, float* x) const {
    for (int64_t e = tid; e < in.n[i]; e += nt)
      x[in.dense ? e : in.ids[i * in.cap + e]] = in.vals[i * in.cap + e];
  }
  /// Lane `lane`'s part of active neuron k's dot product: inputs lane, lane + 32, ...
  DSLIDE_HD float Partial(int64_t i, int64_t k, int lane, const float* x) const {
    const float* wr = w + (act.ids[i * act.cap + k] - begin) * cols;
    float sum = 0.0f;
    for (int64_t j = lane; j < cols; j += 32) sum += wr[j] * x[j];
    return sum;
  }
  DSLIDE_HD void Store(int64_t i, int64_t k, float dot) const {
    const float sum = dot + bias[act.ids[i * act.cap + k] - begin];
    z[i * act.cap + k] = relu && sum < 0.0f ? 0.0f : sum;
  }
};
void LaunchForwardRows(StreamHandle s, const ForwardRows& k);
inline void LaunchKernel(StreamHandle s, const ForwardRows& k) { LaunchForwardRows(s, k); }

inline void RunOnHost(const ForwardRows& k, HostOrderSalt* salt) {
  std::vector<float> smem(k.shared ? k.cols : 0);
  HostShuffled(k.in.B, salt, [&](int64_t i) {
    float* x = k.Input(i, smem.data());
    HostShuffled(ForwardRows::kThreads, salt,
                 [&](int64_t t) { k.Clear(i, static_cast<int>(t), ForwardRows::kThreads, x); });
    HostShuffled(ForwardRows::kThreads, salt,
                 [&](int64_t t) { k.Scatter(i, static_cast<int>(t), ForwardRows::kThreads, x); });
    HostShuffled(k.act.n[i], salt, [&](int64_t a) {
      float lanes[32];
      for (int l = 0; l < 32; ++l) lanes[l] = k.Partial(i, a, l, x);
      k.Store(i, a, ButterflySum32(lanes));
    });
  });
}

/// Input-major first layer (weights row f = input feature f's weights to the `cols`
/// neurons): a block per sample keeps the first `kept` of its (feature, value) entries in
/// shared memory; a thread per active neuron sums over them. Consecutive threads read
/// consecutive neurons of a feature's row: coalesced where the active neurons are (a dense
/// hidden layer's are all of them).
struct ForwardInputMajor {
  static constexpr int kThreads = 128;
  RowsView in, act;  // the input rows (feature lists); the active neurons
  int64_t cols = 0, begin = 0, kept = 0;
  bool relu = false;
  const float *w = nullptr, *bias = nullptr;
  float* z = nullptr;  // the activations, laid out as act

  bool Empty() const { return in.B <= 0; }
  size_t SharedBytes() const { return kept * (sizeof(int32_t) + sizeof(float)); }
  DSLIDE_HD void Load(int64_t i, int tid, int nt, void* smem) const {
    float* sv = static_cast<float*>(smem);
    int32_t* sid = reinterpret_cast<int32_t*>(sv + kept);
    const int64_t n = in.n[i] < kept ? in.n[i] : kept;
    for (int64_t e = tid; e < n; e += nt) {
      sv[e] = in.vals[i * in.cap + e];
      sid[e] = in.ids[i * in.cap + e];
    }
  }
  DSLIDE_HD void Neurons(int64_t i, int tid, int nt, const void* smem) const {
    const float* sv = static_cast<const float*>(smem);
    const int32_t* sid = reinterpret_cast<const int32_t*>(sv + kept);
    const float* xv = in.vals + i * in.cap;
    const int32_t* xid = in.ids + i * in.cap;
    for (int64_t k = tid; k < act.n[i]; k += nt) {
      const int64_t c = act.ids[i * act.cap + k] - begin;
      float sum = bias[c];
      for (int64_t e = 0; e < in.n[i]; ++e) {
        const bool sh = e < kept;
        sum += (sh ? sv[e] : xv[e]) * w[(sh ? sid[e] : xid[e]) * cols + c];
      }
      z[i * act.cap + k] = relu && sum < 0.0f ? 0.0f : sum;
    }
  }
};
void LaunchForwardInputMajor(StreamHandle s, const ForwardInputMajor& k);
inline void LaunchKernel(StreamHandle s, const ForwardInputMajor& k) {
  LaunchForwardInputMajor(s, k);
}

inline void RunOnHost(const ForwardInputMajor& k, HostOrderSalt* salt) {
  std::vector<uint64_t> smem((k.SharedBytes() + 7) / 8 + 1);
  constexpr int nt = ForwardInputMajor::kThreads;
  HostShuffled(k.in.B, salt, [&](int64_t i) {
    HostShuffled(nt, salt, [&](int64_t t) { k.Load(i, static_cast<int>(t), nt, smem.data()); });
    HostShuffled(nt, salt, [&](int64_t t) { k.Neurons(i, static_cast<int>(t), nt, smem.data()); });
  });
}

}  // namespace dslide::gpu
