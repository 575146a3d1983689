// Backward and update kernels: input gradients, weight gradients and Adam on the touched
// rows (LayerBackend::Backward, with and without the Adam step).
#pragma once

#include <cmath>
#include <cstdint>

#include "gpu/kernels/common.h"
#include "model/adam.h"

namespace dslide::gpu {

/// Adam's constants of one step (AdamStep with the bias corrections folded in); lr is the
/// biases' rate, lr_weights the weights' (AdamStep::WeightLr).
struct AdamConsts {
  float lr, b1, b2, c1, c2, inv_bias1, inv_bias2, eps;
  int64_t t;  // the step (bfloat16 moments: it seeds the rounding noise)
  bool catch_up;
  float lr_weights;
  /// The constants of step s for a layer, the first or another (AdamStep::CatchesUp).
  static AdamConsts Of(const AdamStep& s, bool first_layer) {
    return {s.lr,
            s.beta1,
            s.beta2,
            1.0f - s.beta1,
            1.0f - s.beta2,
            1.0f / s.bias1(),
            1.0f / s.bias2(),
            s.eps,
            s.t,
            s.CatchesUp(first_layer),
            s.WeightLr(first_layer)};
  }
  /// The constants as the layer's weights take them.
  DSLIDE_HD AdamConsts ForWeights() const {
    AdamConsts w = *this;
    w.lr = lr_weights;
    return w;
  }
  /// The catch-up of a parameter whose last step was `last` (AdamCatchUp::Since).
  DSLIDE_HD AdamCatchUp CatchUp(int64_t last) const {
    return AdamCatchUp::Since(catch_up, b1, b2, t, last);
  }
};

/// One parameter's Adam step after its catch-up c (the formula of AdamUpdate); raises *bad
/// on a non-finite result.
DSLIDE_HD inline void AdamOne(const AdamConsts& a, const AdamCatchUp& c, float g, float* w,
                              float* m, float* v, uint32_t* bad) {
  float m0 = *m, v0 = *v, w0 = *w;
  if (c.any) c.Apply(a.lr, a.inv_bias1, a.inv_bias2, a.eps, &w0, &m0, &v0);
  const float mi = a.b1 * m0 + a.c1 * g;
  const float vi = a.b2 * v0 + a.c2 * g * g;
  *m = mi;
  *v = vi;
  const float wi = w0 - a.lr * (mi * a.inv_bias1) / (sqrtf(vi * a.inv_bias2) + a.eps);
  *w = wi;
  if (!Finite(wi)) *bad = 1;
}

/// AdamOne with bfloat16 moments (AdamUpdateBf16's formula and rounding noise, from the
/// parameter's position `pos` in its layer and the layer's `stream`).
DSLIDE_HD inline void AdamOneBf16(const AdamConsts& a, const AdamCatchUp& c, float g, float* w,
                                  uint16_t* m, uint16_t* v, uint64_t pos, uint32_t stream,
                                  uint32_t* bad) {
  float m0 = Bf16ToFloat(*m), v0 = Bf16ToFloat(*v), w0 = *w;
  if (c.any) c.Apply(a.lr, a.inv_bias1, a.inv_bias2, a.eps, &w0, &m0, &v0);
  const float mi = a.b1 * m0 + a.c1 * g;
  const float vi = a.b2 * v0 + a.c2 * g * g;
  const uint32_t noise = RoundingNoise(pos, a.t, stream);
  *m = FloatToBf16(mi, noise);
  *v = FloatToBf16(vi, noise >> 16);
  const float wi = w0 - a.lr * (mi * a.inv_bias1) / (sqrtf(vi * a.inv_bias2) + a.eps);
  *w = wi;
  if (!Finite(wi)) *bad = 1;
}

/// Where a layer's Adam step writes: weights and moments (storage order), biases and their
/// moments, the steps of each storage row's and bias's last update, and the non-finite flag.
struct AdamTargets {
  float *w, *m, *v, *b, *mb, *vb;
  uint32_t* bad;
  // The step of each storage row's (cols weights) and bias's last update (AdamCatchUp).
  // Weight reads its row's, which the caller then sets (GpuBackendT::StampRows: the row's
  // other weights read it too); Bias sets its own.
  int64_t *row_step = nullptr, *bias_step = nullptr;
  int64_t cols = 1;
  // --state bf16: the moments in bfloat16 (m, v, mb, vb unused); the biases' positions
  // follow the weights' (bias_pos = rows x cols), the layer is the noise stream.
  uint16_t *m16 = nullptr, *v16 = nullptr, *mb16 = nullptr, *vb16 = nullptr;
  int64_t bias_pos = 0;
  uint32_t stream = 0;
  /// Adam on weight t (gradient g), and on bias c (gradient gb).
  DSLIDE_HD void Weight(const AdamConsts& layer, int64_t t, float g) const {
    const AdamConsts a = layer.ForWeights();
    const AdamCatchUp c = a.CatchUp(row_step[t / cols]);
    if (m16 != nullptr)
      AdamOneBf16(a, c, g, w + t, m16 + t, v16 + t, static_cast<uint64_t>(t), stream, bad);
    else
      AdamOne(a, c, g, w + t, m + t, v + t, bad);
  }
  DSLIDE_HD void Bias(const AdamConsts& a, int64_t c, float gb) const {
    const AdamCatchUp up = a.CatchUp(bias_step[c]);
    bias_step[c] = a.t;
    if (mb16 != nullptr)
      AdamOneBf16(a, up, gb, b + c, mb16 + c, vb16 + c, static_cast<uint64_t>(bias_pos + c), stream,
                  bad);
    else
      AdamOne(a, up, gb, b + c, mb + c, vb + c, bad);
  }
};

/// The pending gradient of touched row q at input coordinate j (*gw) and of its bias (*gb):
/// the row's (sample, delta) entries [qoff[q], qoff[q+1]) against the saved dense input x.
DSLIDE_HD inline void RowGradient(const int64_t* qoff, const int32_t* es, const float* ed,
                                  const float* x, int64_t cols, int64_t q, int64_t j, float* gw,
                                  float* gb) {
  float sw = 0.0f, sb = 0.0f;
  for (int64_t e = qoff[q]; e < qoff[q + 1]; ++e) {
    sw += ed[e] * x[static_cast<int64_t>(es[e]) * cols + j];
    sb += ed[e];
  }
  *gw = sw;
  *gb = sb;
}

/// Row-per-neuron layer, a thread per (sample, input entry): this shard's input gradient,
/// the entry's column of the weights against the sample's non-zero deltas (the old
/// weights: it runs before the update). Consecutive threads read consecutive columns of a
/// weight row.
struct InputGradient : PerIndex<InputGradient> {
  RowsView in, delta;  // the input rows; the delta (active ids and values)
  int64_t cols = 0, begin = 0;
  const float* w = nullptr;
  float* gin = nullptr;  // laid out as in

  DSLIDE_HD int64_t Size() const { return in.B * in.cap; }
  DSLIDE_HD void operator()(int64_t t) const {
    const int64_t i = t / in.cap, e = t % in.cap;
    if (e >= in.n[i]) {
      gin[t] = 0.0f;
      return;
    }
    const int64_t col = in.dense ? e : in.ids[t];
    float sum = 0.0f;
    for (int64_t k = 0; k < delta.n[i]; ++k) {
      const float d = delta.vals[i * delta.cap + k];
      if (d != 0.0f) sum += d * w[(delta.ids[i * delta.cap + k] - begin) * cols + col];
    }
    gin[t] = sum;
  }
};
void LaunchInputGradient(StreamHandle s, const InputGradient& k);
inline void LaunchKernel(StreamHandle s, const InputGradient& k) { LaunchInputGradient(s, k); }
inline void RunOnHost(const InputGradient& k, HostOrderSalt* salt) { RunPerIndexOnHost(k, salt); }

/// Input-major first layer, a thread per (sample, active neuron): the weight gradient rows
/// of the sample's features and the bias gradient, added atomically.
struct FirstLayerGradient : PerIndex<FirstLayerGradient> {
  RowsView in, delta;  // the input rows (feature lists); the delta
  int64_t cols = 0, begin = 0;
  float *g = nullptr, *gb = nullptr;
  uint8_t* btouched = nullptr;

  DSLIDE_HD int64_t Size() const { return delta.B * delta.cap; }
  DSLIDE_HD void operator()(int64_t t) const {
    const int64_t i = t / delta.cap, k = t % delta.cap;
    if (k >= delta.n[i]) return;
    const int64_t c = delta.ids[t] - begin;
    const float d = delta.vals[t];
    AtomicAddF(gb + c, d);
    btouched[c] = 1;
    for (int64_t e = 0; e < in.n[i]; ++e)
      AtomicAddF(g + in.ids[i * in.cap + e] * cols + c, in.vals[i * in.cap + e] * d);
  }
};
void LaunchFirstLayerGradient(StreamHandle s, const FirstLayerGradient& k);
inline void LaunchKernel(StreamHandle s, const FirstLayerGradient& k) {
  LaunchFirstLayerGradient(s, k);
}
inline void RunOnHost(const FirstLayerGradient& k, HostOrderSalt* salt) {
  RunPerIndexOnHost(k, salt);
}

/// The rows an update over touched rows covers: all `max_rows` with `dense`, else the count
/// left in device memory (at most max_rows).
DSLIDE_HD inline int64_t CountedRows(bool dense, int64_t max_rows, const int64_t* count) {
  return dense ? max_rows : (*count < max_rows ? *count : max_rows);
}

/// Input-major first layer, a thread per (touched feature row, neuron): Adam on the weight
/// from the gradient rows, which it clears. The touched rows are listed in `list`, their
/// number read on the device (*count); with `dense` every row is updated.
struct FirstLayerUpdate {
  AdamConsts a;
  AdamTargets to;
  int64_t max_rows = 0, cols = 0;
  bool dense = false;
  const int64_t* count = nullptr;  // the touched rows, in device memory
  const int32_t* list = nullptr;
  float* g = nullptr;

  bool Empty() const { return max_rows * cols <= 0; }
  DSLIDE_HD int64_t Rows() const { return CountedRows(dense, max_rows, count); }
  DSLIDE_HD void operator()(int64_t t) const {
    const int64_t q = t / cols, r = dense ? q : list[q];
    const int64_t w = r * cols + t % cols;
    to.Weight(a, w, g[w]);
    g[w] = 0.0f;
  }
};
void LaunchFirstLayerUpdate(StreamHandle s, const FirstLayerUpdate& k);
inline void LaunchKernel(StreamHandle s, const FirstLayerUpdate& k) {
  LaunchFirstLayerUpdate(s, k);
}
inline void RunOnHost(const FirstLayerUpdate& k, HostOrderSalt* salt) {
  HostShuffled(k.Rows() * k.cols, salt, [&](int64_t t) { k(t); });
}

/// Row-per-neuron layer, a thread per (touched row, input coordinate): the pending batch
/// gradient of the weight (RowGradient, from the entries sorted by neuron and the saved
/// input) and Adam on it; coordinate 0 also updates the bias. The number of touched rows is
/// read on the device (*count); with `dense` every row is updated (rowq maps a row to its
/// touched index, or -1).
struct RowUpdate {
  AdamConsts a;
  AdamTargets to;
  int64_t max_rows = 0, cols = 0;
  bool dense = false, pending = false;
  const int64_t* count = nullptr;  // the touched rows, in device memory
  const float* x = nullptr;
  const int32_t *qrow = nullptr, *rowq = nullptr, *es = nullptr;
  const int64_t* qoff = nullptr;
  const float* ed = nullptr;

  bool Empty() const { return max_rows * cols <= 0 || (!dense && !pending); }
  DSLIDE_HD int64_t Rows() const { return CountedRows(dense, max_rows, count); }
  DSLIDE_HD void operator()(int64_t t) const {
    const int64_t j = t % cols;
    int64_t q = t / cols, r = q;
    if (dense)
      q = pending ? rowq[r] : -1;
    else
      r = qrow[q];
    float gw = 0.0f, gbias = 0.0f;
    if (q >= 0) RowGradient(qoff, es, ed, x, cols, q, j, &gw, &gbias);
    to.Weight(a, r * cols + j, gw);
    if (j == 0) to.Bias(a, r, gbias);
  }
};
void LaunchRowUpdate(StreamHandle s, const RowUpdate& k);
inline void LaunchKernel(StreamHandle s, const RowUpdate& k) { LaunchRowUpdate(s, k); }
inline void RunOnHost(const RowUpdate& k, HostOrderSalt* salt) {
  HostShuffled(k.Rows() * k.cols, salt, [&](int64_t t) { k(t); });
}

}  // namespace dslide::gpu
