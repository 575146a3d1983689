// The CPU backend's forward pass: the active neurons' values from the layer input, by the
// layer's kind: every neuron of a dense layer (in lanes, or row blocks), the active rows of a
// sampled layer by neuron (the rows every sample holds in lanes, the others walked), or
// sample by sample (sparse inputs, the input-major first layer).
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/parallel.h"
#include "cpu/cpu_layer.h"
#include "cpu/cpu_tuning.h"
#include "cpu/kernels/simd.h"

namespace dslide::cpu {

namespace {

/// The layer input transposed for LaneDots: coordinate j of sample i at lanes[j * stride + i]
/// (stride: the batch rounded up to 16, the lanes past it zero).
void InputInLanes(const BatchRows& in, int64_t width, int64_t stride, std::vector<float>* lanes) {
  lanes->assign(static_cast<size_t>(width * stride), 0.0f);
  for (int64_t i = 0; i < in.samples(); ++i)
    for (int64_t j = 0; j < width; ++j) (*lanes)[j * stride + i] = in.vals[in.off[i] + j];
}

/// Stores v (ReLU'd on a hidden layer) at out->vals[at]: the store of the active rows' values.
struct PutValue {
  BatchRows* out;
  bool relu;
  void operator()(int64_t at, float v) const { out->vals[at] = relu ? (v > 0.0f ? v : 0.0f) : v; }
};

/// Sums of the walk awaiting the addition of their lanes (16 at once, LaneSums16), and the
/// output value and bias each belongs to.
struct PendingSums {
  Acc16 sum[16] = {};
  int64_t at[16];
  float bias[16];
  int n = 0;
};

template <class Put>
inline void Flush(PendingSums* p, Put&& put) {
  if (p->n == 0) return;
  const Acc16 z = LaneSums16(p->sum);
  for (int d = 0; d < p->n; ++d) put(p->at[d], LaneOf(z, d) + p->bias[d]);
  p->n = 0;
}

#ifdef __AVX512F__
/// A row's entries one at a time, the row (width 16 kV) in kV vector registers: each sum runs
/// in one vector as DotBlock's does (the same bits), its lanes pending.
template <int kV, class Entry, class Put>
inline void RowInRegisters(const float* wr, float bias, const Entry* es, int64_t count,
                           const BatchRows& in, const BatchRows& out, PendingSums* p, Put&& put) {
  Vec16 wv[kV];
  for (int v = 0; v < kV; ++v) std::memcpy(&wv[v], wr + 16 * v, sizeof(Vec16));
  for (int64_t e = 0; e < count; ++e) {
    const Entry en = es[e];
    const float* x = in.vals.data() + in.off[en.sample];
    Vec16 acc = {};
    for (int v = 0; v < kV; ++v) {
      Vec16 xv;
      std::memcpy(&xv, x + 16 * v, sizeof xv);
      acc += wv[v] * xv;
    }
    p->sum[p->n] = acc;
    p->at[p->n] = out.off[en.sample] + en.slot;
    p->bias[p->n++] = bias;
    if (p->n == 16) Flush(p, put);
  }
}
#endif

/// One row of the walk (weights wr, its `count` entries es) through the pending lanes.
template <class Entry, class Put>
inline void WalkRow(const float* wr, float bias, const Entry* es, int64_t count, int64_t width,
                    const BatchRows& in, const BatchRows& out, PendingSums* p, Put&& put) {
#ifdef __AVX512F__  // up to 16 registers for the row: AVX-512 has 32
  switch (width) {
    case 32:
      return RowInRegisters<2>(wr, bias, es, count, in, out, p, put);
    case 64:
      return RowInRegisters<4>(wr, bias, es, count, in, out, p, put);
    case 128:
      return RowInRegisters<8>(wr, bias, es, count, in, out, p, put);
    case 256:
      return RowInRegisters<16>(wr, bias, es, count, in, out, p, put);
    default:
      break;
  }
#endif
  int64_t e = 0;
  if (width % 16 == 0) {
    // Groups of entries into the pending lanes; 16 pending sums are formed at once.
    constexpr int kN = 4;
    while (e < count) {
      const int kn = count - e >= kN && p->n <= 16 - kN ? kN : 1;
      const float* xs[kN];
      for (int d = 0; d < kn; ++d) {
        const Entry en = es[e + d];
        xs[d] = in.vals.data() + in.off[en.sample];
        p->at[p->n + d] = out.off[en.sample] + en.slot;
        p->bias[p->n + d] = bias;
      }
      if (kn == kN) {
        DotBlock16<kN>(wr, xs, width, p->sum + p->n);
      } else {
        DotBlock16<1>(wr, xs, width, p->sum + p->n);
      }
      p->n += kn;
      e += kn;
      if (p->n == 16) Flush(p, put);
    }
  }
  for (; e < count; ++e) {
    const float v = Dot(wr, in.vals.data() + in.off[es[e].sample], width) + bias;
    put(out.off[es[e].sample] + es[e].slot, v);
  }
}

}  // namespace

void CpuBackend::ForwardRows(int layer, const BatchRows& in, BatchRows* out) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  const bool full_width = in.FullRows(s.in_dim);
  if (!s.input_major && s.dense() && full_width && s.in_dim % 16 == 0) {
    ForwardAllInLanes(L, in, out);
    return;
  }
  if (!s.input_major && s.dense() && in.dense) {
    ForwardAllByBlocks(L, in, out);
    return;
  }
  // A sampled row-per-neuron layer over dense inputs goes neuron by neuron: each active row
  // is read once for all the samples that hold it (their inputs stay in cache), where a walk
  // sample by sample reads it once per sample. The same dot products, the same bits.
  const bool index = L.indexed && !s.dense() && full_width;
  L.batch.active.valid = false;
  if (index) {
    L.batch.active.Build(*out, s.begin, s.local());
    ForwardActive(L, in, out);
    return;
  }
  ForwardBySample(L, in, out);
}

void CpuBackend::ForwardAllInLanes(Layer& L, const BatchRows& in, BatchRows* out) {
  // Every neuron active over dense inputs of a width LaneDots takes: kR rows at a time
  // against the samples in vector lanes (over the inputs transposed), the same dot
  // products as Dot's.
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  const bool relu = !s.is_output;
  const int64_t width = s.in_dim, stride = (B + 15) / 16 * 16;
  InputInLanes(in, width, stride, &L.batch.lane_in);
  constexpr int kR = kLanesN == 16 ? 8 : 4;
  const int64_t n = s.local();
  ParallelFor((n + kR - 1) / kR, [&](int64_t grp) {
    const int64_t r0 = grp * kR, nk = std::min<int64_t>(kR, n - r0);
    const float* ws[kR];
    for (int k = 0; k < kR; ++k) ws[k] = L.Row(r0 + std::min<int64_t>(k, nk - 1));
    for (int64_t i0 = 0; i0 < B; i0 += kLanesN) {
      VecN z[kR];
      LaneDots<kR>(ws, L.batch.lane_in.data() + i0, stride, width, z);
      for (int64_t d = 0; d < std::min<int64_t>(kLanesN, B - i0); ++d) {
        float* zi = out->Vals(i0 + d);
        for (int64_t k = 0; k < nk; ++k) {
          const float v = z[k][d] + L.b[r0 + k];
          zi[r0 + k] = relu && v < 0.0f ? 0.0f : v;
        }
      }
    }
  });
}

void CpuBackend::ForwardAllByBlocks(Layer& L, const BatchRows& in, BatchRows* out) {
  // Every neuron active over dense inputs: a row block meets every sample while in cache.
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  const bool relu = !s.is_output;
  constexpr int64_t kRows = CpuTuning::kForwardDenseRows;
  ParallelFor((s.local() + kRows - 1) / kRows, [&](int64_t blk) {
    const int64_t r0 = blk * kRows, r1 = std::min(s.local(), r0 + kRows);
    for (int64_t i = 0; i < B; ++i) {
      const SparseView x = in.Row(i);
      float* z = out->Vals(i);
      for (int64_t r = r0; r < r1; ++r) {
        const float v = Dot(L.Row(r), x.vals, x.n) + L.b[r];
        z[r] = relu && v < 0.0f ? 0.0f : v;
      }
    }
  });
}

void CpuBackend::ForwardActive(Layer& L, const BatchRows& in, BatchRows* out) {
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  const Layer::ActiveIndex& a = L.batch.active;
  const int64_t nrows = static_cast<int64_t>(a.rows.size());
  const int64_t width = s.in_dim;  // every input row holds all of them (checked by the caller)
  const PutValue put{out, !L.spec.is_output};
  // Rows that every sample holds (their entries are samples 0..B-1; the batch's shared
  // fill) go against the samples in lanes (LaneDots, over the inputs transposed), kR at a
  // time, in the order of their slots in sample 0: the fill puts them in the same order in
  // every sample, so a sample's values land on few cache lines. The walk takes the others.
  const bool lanes = width % 16 == 0;
  std::vector<int64_t>& full = L.batch.full_rows;
  std::vector<int64_t>& walk = L.batch.walk_rows;
  full.clear();
  walk.clear();
  for (int64_t q = 0; q < nrows; ++q)
    (lanes && a.off[q + 1] - a.off[q] == B ? full : walk).push_back(q);
  if (!full.empty()) {
    std::sort(full.begin(), full.end(), [&](int64_t p, int64_t q) {
      return a.entry[a.off[p]].slot < a.entry[a.off[q]].slot;
    });
    const int64_t stride = (B + 15) / 16 * 16, nfull = static_cast<int64_t>(full.size());
    InputInLanes(in, width, stride, &L.batch.lane_in);
    // Rows per group: their sums and partial sums in 2 kR of the 32 (AVX-512) or 16 (AVX2)
    // vector registers.
    constexpr int kR = kLanesN == 16 ? 8 : 4;
    ParallelFor((nfull + kR - 1) / kR, [&](int64_t grp) {
      const int64_t f0 = grp * kR, nk = std::min<int64_t>(kR, nfull - f0);
      const float* ws[kR];
      float bs[kR];
      const Layer::ActiveIndex::Entry* es[kR];
      for (int k = 0; k < kR; ++k) {
        const int64_t q = full[f0 + std::min<int64_t>(k, nk - 1)];  // repeats past the end
        ws[k] = L.Row(a.rows[q]);
        bs[k] = L.b[a.rows[q]];
        es[k] = a.entry.data() + a.off[q];
      }
      for (int64_t k = 0; k < kR && f0 + kR + k < nfull; ++k)
        PrefetchToL2(L.Row(a.rows[full[f0 + kR + k]]), L.cols * sizeof(float));
      for (int64_t i0 = 0; i0 < B; i0 += kLanesN) {
        VecN z[kR];
        LaneDots<kR>(ws, L.batch.lane_in.data() + i0, stride, width, z);
        for (int64_t d = 0; d < std::min<int64_t>(kLanesN, B - i0); ++d) {
          const int64_t o = out->off[i0 + d];
          for (int64_t k = 0; k < nk; ++k) put(o + es[k][i0 + d].slot, z[k][d] + bs[k]);
        }
      }
    });
  }
  ForwardWalk(L, in, out);
}

void CpuBackend::ForwardWalk(Layer& L, const BatchRows& in, BatchRows* out) {
  // The active rows that not every sample holds (L.batch.walk_rows), a chunk of rows per task, each
  // row's entries through lanes of pending sums.
  const Layer::ActiveIndex& a = L.batch.active;
  const std::vector<int64_t>& walk = L.batch.walk_rows;
  const int64_t width = L.spec.in_dim;
  const PutValue put{out, !L.spec.is_output};
  const int64_t nwalk = static_cast<int64_t>(walk.size());
  constexpr int64_t kChunk = CpuTuning::kForwardWalkChunk;
  constexpr int64_t kNear = CpuTuning::kPrefetchNear, kFar = CpuTuning::kPrefetchFar;
  ParallelFor((nwalk + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t t0 = c * kChunk, t1 = std::min(nwalk, t0 + kChunk);
    auto row_at = [&](int64_t t) { return L.Row(a.rows[walk[t]]); };
    PendingSums pend;
    // The chunk's first rows, which no earlier step of this walk prefetched.
    for (int64_t t = t0; t < std::min(t1, t0 + kFar); ++t)
      PrefetchToL2(row_at(t), L.cols * sizeof(float));
    for (int64_t t = t0; t < t1; ++t) {
      if (t + kFar < t1) PrefetchToL2(row_at(t + kFar), L.cols * sizeof(float));
      if (t + kNear < t1) {
        PrefetchRow(row_at(t + kNear), L.cols);
        __builtin_prefetch(&L.b[a.rows[walk[t + kNear]]]);
      }
      const int64_t q = walk[t], r = a.rows[q];
      WalkRow(L.Row(r), L.b[r], a.entry.data() + a.off[q], a.off[q + 1] - a.off[q], width, in, *out,
              &pend, put);
    }
    Flush(&pend, put);
  });
}

void CpuBackend::ForwardBySample(Layer& L, const BatchRows& in, BatchRows* out) {
  // Sparse inputs, or the input-major first layer: each sample's active neurons in turn.
  const LayerSpec& s = L.spec;
  const bool relu = !s.is_output;
  constexpr int64_t kNear = CpuTuning::kPrefetchNear;
  ParallelFor(in.samples(), 4, [&](int64_t i) {
    const SparseView x = in.Row(i);
    const int32_t* act = out->Ids(i);
    float* z = out->Vals(i);
    const int64_t na = out->n[i];
    if (s.input_major) {
      if (s.dense()) {
        std::memcpy(z, L.b.data(), sizeof(float) * na);
        for (int64_t e = 0; e < x.n; ++e) {
          if (e + kNear < x.n) PrefetchRow(L.Row(x.ids[e + kNear]), na);
          Axpy(x.vals[e], L.Row(x.ids[e]), z, na);
        }
      } else {
        for (int64_t k = 0; k < na; ++k) {
          const int64_t c = act[k] - s.begin;
          float acc = L.b[c];
          for (int64_t e = 0; e < x.n; ++e) acc += x.vals[e] * L.w[x.ids[e] * L.cols + c];
          z[k] = acc;
        }
      }
    } else {
      for (int64_t k = 0; k < na; ++k) {
        if (k + kNear < na) PrefetchRow(L.Row(act[k + kNear] - s.begin), L.cols);
        const int64_t r = act[k] - s.begin;
        const float* wr = L.Row(r);
        float acc;
        if (in.dense) {
          acc = Dot(wr, x.vals, x.n);
        } else {
          acc = 0.0f;
          for (int64_t e = 0; e < x.n; ++e) acc += wr[x.ids[e]] * x.vals[e];
        }
        z[k] = acc + L.b[r];
      }
    }
    if (relu)
      for (int64_t k = 0; k < na; ++k) z[k] = z[k] > 0.0f ? z[k] : 0.0f;
  });
}

}  // namespace dslide::cpu
