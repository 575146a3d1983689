// CPU kernels of the sparse layers.
//
// The input-major first layer's training step sorts the batch's entries by feature and forms
// each touched row's gradient in a scratch row right before its Adam step (InputMajorStep);
// a gradient left pending (for an exchange) is accumulated HOGWILD over the samples (SLIDE
// section 3.2). Row-per-neuron layers (the wide output layer) do not keep a
// gradient matrix at all: the batch's (neuron, sample) entries are sorted by neuron (by
// Forward, or by Backward from the deltas' ids), and one pass over the touched neurons (fused with
// Adam by BackwardUpdate) reads each row once: its share of the input gradient from the old
// weights, then its gradient from the saved layer input and its Adam step while the row is in
// cache. That halves the memory traffic of the output layer (no gradient row is written, re-read
// and zeroed). Weight gradients there have no races and do not depend on the thread count; input
// gradients are summed from per-thread partials. Rows that every sample of the batch holds
// (the batch's shared fill) go eight at a time against the samples in vector lanes in the
// forward pass (LaneDots) and four at a time in the backward one, so that each input load
// serves several rows. Layers with every neuron active walk row blocks instead (DenseRows).
// With one thread every result is deterministic.
#include "cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend_streams.h"
#include "cpu_layer.h"
#include "error.h"
#include "layer_layout.h"
#include "memory_limit.h"
#include "parallel.h"
#include "rng.h"
#include "softmax.h"
#include "topk.h"

namespace dslide::cpu {

namespace {

inline float Dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t j = 0; j < n; ++j) acc += a[j] * b[j];
  return acc;
}

typedef float Vec16 __attribute__((vector_size(64)));

// The widest vector the build's instructions hold in one register: 16 floats with AVX-512,
// else 8 (AVX2). Element-wise kernels (RowsBlock, LaneDots) work in it; a wider generic vector than
// the hardware's is split by the compiler, which kept such values on the stack (an AVX2 build's
// backward pass ran several times slower). Element-wise results do not depend on the width.
#ifdef __AVX512F__
typedef Vec16 VecN;
#else
typedef float VecN __attribute__((vector_size(32)));
#endif
constexpr int kLanesN = sizeof(VecN) / sizeof(float);

// The 16 lane sums of a dot product (DotBlock) and their sums in lane order (LaneSums16),
// in the build's registers: one 16-float vector with AVX-512; with AVX2 two 8-float halves
// (lanes 0-7 and 8-15), formed and added per lane exactly as the 16-float vector, so that
// a 64-byte generic vector, which an AVX2 build keeps on the stack, is never used there.
#ifdef __AVX512F__
/// The 16 lane sums of Dot(w, x[d], n) for kN inputs x[d] at once (kN <= 16, n a multiple of
/// 16), into acc[d]: each load of the row serves kN sums, and the sums are independent
/// chains. Lane l sums j = l mod 16 in order, as Dot's vectorised loop does; LaneSums adds
/// the lanes.
template <int kN>
inline void DotBlock(const float* w, const float* const* x, int64_t n, Vec16* acc) {
  Vec16 a[kN] = {};
  for (int64_t j = 0; j < n; j += 16) {
    Vec16 wv;
    std::memcpy(&wv, w + j, sizeof wv);
    for (int d = 0; d < kN; ++d) {
      Vec16 xv;
      std::memcpy(&xv, x[d] + j, sizeof xv);
      a[d] += wv * xv;
    }
  }
  for (int d = 0; d < kN; ++d) acc[d] = a[d];
}

#if defined(__GNUC__) && !defined(__clang__)
/// One stage of a 16 x 16 transpose: rows i and i + kB (i without bit kB) swap their
/// off-diagonal kB-wide blocks.
template <int kB>
inline void TransposeStage(Vec16* m) {
  typedef int32_t Vec16i __attribute__((vector_size(64)));
  constexpr Vec16i lo = kB == 8   ? Vec16i{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}
                        : kB == 4 ? Vec16i{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}
                        : kB == 2
                            ? Vec16i{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}
                            : Vec16i{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
  constexpr Vec16i hi = lo + kB;
  for (int i = 0; i < 16; ++i) {
    if (i & kB) continue;
    const Vec16 a = m[i], b = m[i + kB];
    m[i] = __builtin_shuffle(a, b, lo);
    m[i + kB] = __builtin_shuffle(a, b, hi);
  }
}
inline void Transpose16(Vec16* m) {
  TransposeStage<8>(m);
  TransposeStage<4>(m);
  TransposeStage<2>(m);
  TransposeStage<1>(m);
}
#else
inline void Transpose16(Vec16* m) {
  float t[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) t[j][i] = m[i][j];
  for (int i = 0; i < 16; ++i) std::memcpy(&m[i], t[i], sizeof(Vec16));
}
#endif

/// Lane l of the result: the sum of m[l]'s lanes in lane order from 0.0f, as Dot's
/// vectorised loop adds its lanes (the same bits), for 16 sums at once: a transpose, then
/// 16 vector adds in lane order. m is overwritten.
inline Vec16 LaneSums(Vec16* m) {
  Transpose16(m);
  Vec16 s = {};
  for (int l = 0; l < 16; ++l) s += m[l];
  return s;
}

typedef Vec16 Acc16;
inline float LaneOf(const Acc16& z, int d) { return z[d]; }
/// The 16 entries' sums of m (each m[d]'s lanes in lane order from 0.0f); m is overwritten.
inline Acc16 LaneSums16(Acc16* m) { return LaneSums(m); }
template <int kN>
inline void DotBlock16(const float* w, const float* const* x, int64_t n, Acc16* acc) {
  DotBlock<kN>(w, x, n, acc);
}
#else
typedef VecN Vec8;
struct Acc16 {
  Vec8 lo, hi;
};
inline float LaneOf(const Acc16& z, int d) { return d < 8 ? z.lo[d] : z.hi[d - 8]; }
/// DotBlock's 16 lane sums for kN inputs, in two 8-float halves.
template <int kN>
inline void DotBlock16(const float* w, const float* const* x, int64_t n, Acc16* acc) {
  Vec8 lo[kN] = {}, hi[kN] = {};
  for (int64_t j = 0; j < n; j += 16) {
    Vec8 wl, wh;
    std::memcpy(&wl, w + j, sizeof wl);
    std::memcpy(&wh, w + j + 8, sizeof wh);
    for (int d = 0; d < kN; ++d) {
      Vec8 xl, xh;
      std::memcpy(&xl, x[d] + j, sizeof xl);
      std::memcpy(&xh, x[d] + j + 8, sizeof xh);
      lo[d] += wl * xl;
      hi[d] += wh * xh;
    }
  }
  for (int d = 0; d < kN; ++d) acc[d] = {lo[d], hi[d]};
}
/// Transposes the 8 x 8 floats of r[0..8) in place (row i becomes column i): pairs of rows
/// interleaved, then pairs of pairs, then the 128-bit halves swapped.
inline void Transpose8(Vec8* r) {
  // __builtin_shufflevector (GCC 12 and clang): lane k of the result is lane idx_k of the
  // two operands side by side.
  Vec8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int b = 0; b < 8; b += 4) {  // u[b + c]: columns c and c + 4 of rows b..b+3
    u[b] = __builtin_shufflevector(t[b], t[b + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[b + 1] = __builtin_shufflevector(t[b], t[b + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[b + 2] = __builtin_shufflevector(t[b + 1], t[b + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[b + 3] = __builtin_shufflevector(t[b + 1], t[b + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = __builtin_shufflevector(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[c + 4] = __builtin_shufflevector(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}
/// LaneSums for 16 entries in halves: entry d's sum of its 16 lanes in lane order from 0.0f,
/// in lane d of the result. m is overwritten.
inline Acc16 LaneSums16(Acc16* m) {
  Acc16 out;
  for (int half = 0; half < 2; ++half) {
    Vec8 lo[8], hi[8];
    for (int d = 0; d < 8; ++d) {
      lo[d] = m[8 * half + d].lo;
      hi[d] = m[8 * half + d].hi;
    }
    Transpose8(lo);
    Transpose8(hi);
    Vec8 sum = {};
    for (int l = 0; l < 8; ++l) sum += lo[l];
    for (int l = 0; l < 8; ++l) sum += hi[l];
    (half == 0 ? out.lo : out.hi) = sum;
  }
  return out;
}
#endif

/// Dot(w[k], x_i, n) for kR rows w[k] and the kLanesN samples i whose inputs are the lanes
/// of xt (coordinate-major: coordinate j's values at xt + j * stride; n a multiple of 16),
/// into s[k]: lane l of DotBlock's sums (j = l mod 16, in order) is formed in its own
/// register across the samples, then added to s[k] in lane order from 0.0f, as LaneSums
/// adds them: the same bits without a transpose, and each input load serves kR rows. Not
/// inlined: inside the caller's loop the compiler kept some of the sums on the stack.
template <int kR>
__attribute__((noinline)) void LaneDots(const float* const* w, const float* xt, int64_t stride,
                                        int64_t n, VecN* s) {
  const float* wk[kR];
  for (int k = 0; k < kR; ++k) wk[k] = w[k];
  VecN sum[kR] = {};
  for (int64_t l = 0; l < 16; ++l) {
    VecN acc[kR] = {};
    const float* x = xt + l * stride;
    for (int64_t j = l; j < n; j += 16, x += 16 * stride) {
      VecN xv;
      std::memcpy(&xv, x, sizeof xv);
      for (int k = 0; k < kR; ++k) acc[k] += wk[k][j] * xv;
    }
    for (int k = 0; k < kR; ++k) sum[k] += acc[k];
  }
  for (int k = 0; k < kR; ++k) s[k] = sum[k];
}

/// For kR rows w[k] whose entries are the same samples in the same order (their samples in
/// x, their deltas delta[k]), columns [c, c + kLanesN kV): the weight gradients g[k] +=
/// delta_ke x_e and the input gradient buf_e += delta_ke w[k], in entry order, with the rows'
/// weights and gradients in registers; each input and input-gradient load serves the kR
/// rows. Per element the operations of Axpy in the same order (GradientRow and
/// InputGradRow), the rows one after another.
template <int kR, int kV>
inline void RowsBlock(const float* const* w, int64_t c, const int32_t* sample,
                      const float* const* delta, int64_t count, const BatchRows& x, float* buf,
                      float* const* g) {
  constexpr int kL = kLanesN;
  VecN wv[kR][kV], gv[kR][kV] = {};
  for (int k = 0; k < kR; ++k)
    for (int v = 0; v < kV; ++v) std::memcpy(&wv[k][v], w[k] + c + kL * v, sizeof(VecN));
  for (int64_t e = 0; e < count; ++e) {
    float dk[kR];
    for (int k = 0; k < kR; ++k) dk[k] = delta[k][e];
    const int64_t o = x.off[sample[e]] + c;
    const float* xi = x.vals.data() + o;
    float* gi = buf + o;
    for (int v = 0; v < kV; ++v) {
      VecN xv, iv;
      std::memcpy(&xv, xi + kL * v, sizeof xv);
      for (int k = 0; k < kR; ++k) gv[k][v] += dk[k] * xv;
      std::memcpy(&iv, gi + kL * v, sizeof iv);
      for (int k = 0; k < kR; ++k) iv += dk[k] * wv[k][v];
      std::memcpy(gi + kL * v, &iv, sizeof iv);
    }
  }
  for (int k = 0; k < kR; ++k)
    for (int v = 0; v < kV; ++v) std::memcpy(g[k] + c + kL * v, &gv[k][v], sizeof(VecN));
}

/// Prefetches the cache lines of `bytes` from p with __builtin_prefetch's temporal locality
/// kLocality (3: into the first-level cache; 2: the second-level one). Weight rows are
/// visited in data-dependent order, which the hardware prefetcher cannot guess.
template <int kLocality>
inline void PrefetchLines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, kLocality);
}
/// Prefetches `floats` floats from p into the first-level cache.
inline void PrefetchRow(const float* p, int64_t floats) {
  PrefetchLines<3>(p, floats * static_cast<int64_t>(sizeof(float)));
}
/// Brings `bytes` from p into the second-level cache (the walks' far prefetch).
inline void PrefetchToL2(const void* p, int64_t bytes) { PrefetchLines<2>(p, bytes); }
// The row walks prefetch the rows kAhead rows on into the first-level cache and (the
// weights, and the moments where the walk steps) those kFar rows on into the second-level
// one: a row's lines are then on their way long before the near prefetch asks for them.
constexpr int64_t kAhead = 4;
constexpr int64_t kFar = 12;

inline void Axpy(float alpha, const float* __restrict x, float* __restrict y, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] += alpha * x[j];
}

}  // namespace

CpuBackend::CpuBackend() = default;
CpuBackend::~CpuBackend() = default;

void CpuBackend::Init(const ModelSpec& spec, const BackendOptions& options) {
  CheckLshResolved(spec, options.lsh);
  {
    // The least the layers hold, each layer's shard: its weights, biases and both Adam
    // moments. Refused before anything is allocated where that cannot fit.
    int64_t params = 0;
    for (const LayerSpec& s : spec.layers) params += s.local() * (s.in_dim + 1);
    const int64_t moment = options.bf16_moments ? 2 : 4;
    CheckMemoryFits(
        params * (4 + 2 * moment),
        detail::Concat(
            "its weights and Adam moments (", params, " parameters",
            spec.layers.back().local() < spec.layers.back().out_dim ? " on this rank" : "", ")"));
  }
  spec_ = spec;
  opt_ = options;
  layers_.clear();
  const int threads = NumThreads();
  scratch_.clear();
  for (int t = 0; t < threads; ++t) scratch_.push_back(std::make_unique<ThreadScratch>());
  for (size_t li = 0; li < spec.layers.size(); ++li) {
    auto L = std::make_unique<Layer>();
    L->spec = spec.layers[li];
    L->index = static_cast<int>(li);
    const LayerSpec& s = L->spec;
    L->rows = s.input_major ? s.in_dim : s.local();
    L->cols = s.input_major ? s.local() : s.in_dim;
    L->indexed = !s.input_major;
    const size_t n = static_cast<size_t>(L->rows) * L->cols;
    L->w.resize(n);
    L->bf16 = options.bf16_moments;
    if (L->bf16) {
      L->m16.assign(n, 0);
      L->v16.assign(n, 0);
    } else {
      L->m.assign(n, 0.0f);
      L->v.assign(n, 0.0f);
    }
    L->b.assign(s.local(), 0.0f);
    if (L->bf16) {
      L->mb16.assign(s.local(), 0);
      L->vb16.assign(s.local(), 0);
    } else {
      L->mb.assign(s.local(), 0.0f);
      L->vb.assign(s.local(), 0.0f);
    }
    if (L->indexed) {
    } else {
      // The gradient rows (g) only when a gradient is kept pending (BackwardRows): a
      // training step forms each row's gradient in scratch (InputMajorStep).
      L->gb.assign(s.local(), 0.0f);
      L->touched.assign(L->rows, 0);
      L->btouched.assign(s.local(), 0);
    }
    InitialWeights(s, li, options.seed, L->w.data());
    if (!s.dense()) {
      L->sampler = std::make_unique<BudgetSampler>(SelectionPolicy(options.lsh));
    }
    layers_.push_back(std::move(L));
    if (!s.dense()) RebuildTables(static_cast<int>(li), /*new_hashes=*/true);
  }
}

void CpuBackend::SelectRows(int layer, const BatchRows& in, const BatchLabels* labels, int64_t iter,
                            BatchRows* out) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  int64_t max_labels = 0;
  if (labels != nullptr)
    for (int64_t i = 0; i < B; ++i) max_labels = std::max(max_labels, labels->Count(i));
  if (s.dense()) {
    out->Strided(B, s.local());
    ParallelFor(B, 16, [&](int64_t i) {
      int32_t* ids = out->Ids(i);
      for (int64_t j = 0; j < s.local(); ++j) ids[j] = static_cast<int32_t>(s.begin + j);
      out->n[i] = s.local();
    });
    return;
  }
  // The most any sample can get: its budget, raised where its labels leave fewer than the
  // floor of negatives. The batch's shared fill covers that many.
  const int64_t cap = BudgetSampler::ActiveCap(s.budget, max_labels, s.min_negatives, s.local());
  out->Strided(B, cap);
  const bool batch_fill = opt_.lsh.fill == FillPolicy::kBatch;
  auto batch_list = [&] {
    Rng rng(StreamSeed(opt_.seed, streams::kBatchFill, iter, (uint64_t(layer) << 32) | spec_.rank));
    BudgetSampler::BatchList(s.begin, s.end, cap, labels ? &labels->ids : nullptr, &rng,
                             &L.batch_fill);
  };
  // Query [x, 1, 0]: the 1 meets the bias coordinate, so collisions follow w.x + b. Dense
  // inputs are hashed in blocks of samples (the rebuild's kernel: the same bits as one at a
  // time), sparse ones one at a time in the selection loop. The batch's shared list (one
  // thread's work) is made beside the hashing: task 0 of the same loop.
  const int64_t nt = L.hash->num_tables(), dim = L.hash->dim();
  if (in.dense) {
    constexpr int64_t kBlock = 32;
    L.query_buckets.resize(static_cast<size_t>(B) * nt);
    const int64_t list_tasks = batch_fill ? 1 : 0;
    ParallelFor(list_tasks + (B + kBlock - 1) / kBlock, [&](int64_t task) {
      if (task < list_tasks) {
        batch_list();
        return;
      }
      const int64_t blk = task - list_tasks;
      ThreadScratch& ts = *scratch_[ThreadId()];
      const int64_t i0 = blk * kBlock, rows = std::min(kBlock, B - i0);
      ts.dense.assign(static_cast<size_t>(rows) * dim, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const SparseView x = in.Row(i0 + r);
        float* q = ts.dense.data() + r * dim;
        std::copy(x.vals, x.vals + x.n, q);
        q[s.in_dim] = 1.0f;
      }
      L.hash->HashDenseRows(ts.dense.data(), dim, rows, L.query_buckets.data() + i0 * nt, &ts.hash);
    });
  } else if (batch_fill) {
    batch_list();
  }
  ParallelFor(B, 4, [&](int64_t i) {
    ThreadScratch& ts = *scratch_[ThreadId()];
    if (ts.sampler.size() != s.local()) ts.sampler.Resize(s.local());
    const uint32_t* buckets = nullptr;
    if (in.dense) {
      buckets = L.query_buckets.data() + i * nt;
    } else {
      const SparseView x = in.Row(i);
      ts.buckets.resize(nt);
      ts.qids.assign(x.ids, x.ids + x.n);
      ts.qvals.assign(x.vals, x.vals + x.n);
      ts.qids.push_back(static_cast<int32_t>(s.in_dim));
      ts.qvals.push_back(1.0f);
      L.hash->HashSparse(ts.qids.data(), ts.qvals.data(), x.n + 1, ts.buckets.data(), &ts.hash);
      buckets = ts.buckets.data();
    }
    ts.forced.clear();
    if (labels != nullptr) {
      const int32_t* lab = labels->Of(i);
      for (int64_t j = 0; j < labels->Count(i); ++j)
        if (lab[j] >= s.begin && lab[j] < s.end)
          ts.forced.push_back(static_cast<int32_t>(lab[j] - s.begin));
    }
    Rng rng(StreamSeed(opt_.seed, streams::kSample, iter, i, (uint64_t(layer) << 32) | spec_.rank));
    int32_t* ids = out->Ids(i);
    const int64_t k = L.sampler->Select(&L.tables, buckets, ts.forced.data(), ts.forced.size(),
                                        s.budget, s.min_negatives, &rng, &ts.sampler, ids,
                                        batch_fill ? &L.batch_fill : nullptr);
    for (int64_t j = 0; j < k; ++j) ids[j] += static_cast<int32_t>(s.begin);
    out->n[i] = k;
  });
}

void CpuBackend::ForwardRows(int layer, const BatchRows& in, BatchRows* out) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  const bool relu = !s.is_output;
  const bool full_width = in.FullRows(s.in_dim);
  if (!s.input_major && s.dense() && full_width && s.in_dim % 16 == 0) {
    // Every neuron active over dense inputs of a width LaneDots takes: kR rows at a time
    // against the samples in vector lanes (over the inputs transposed), the same dot
    // products as Dot's.
    const int64_t width = s.in_dim, stride = (B + 15) / 16 * 16;
    L.lane_in.assign(static_cast<size_t>(width * stride), 0.0f);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < width; ++j) L.lane_in[j * stride + i] = in.vals[in.off[i] + j];
    constexpr int kR = kLanesN == 16 ? 8 : 4;
    const int64_t n = s.local();
    ParallelFor((n + kR - 1) / kR, [&](int64_t grp) {
      const int64_t r0 = grp * kR, nk = std::min<int64_t>(kR, n - r0);
      const float* ws[kR];
      for (int k = 0; k < kR; ++k) ws[k] = L.Row(r0 + std::min<int64_t>(k, nk - 1));
      for (int64_t i0 = 0; i0 < B; i0 += kLanesN) {
        VecN z[kR];
        LaneDots<kR>(ws, L.lane_in.data() + i0, stride, width, z);
        for (int64_t d = 0; d < std::min<int64_t>(kLanesN, B - i0); ++d) {
          float* zi = out->Vals(i0 + d);
          for (int64_t k = 0; k < nk; ++k) {
            const float v = z[k][d] + L.b[r0 + k];
            zi[r0 + k] = relu && v < 0.0f ? 0.0f : v;
          }
        }
      }
    });
    return;
  }
  if (!s.input_major && s.dense() && in.dense) {
    // Every neuron active over dense inputs: a row block meets every sample while in cache.
    constexpr int64_t kRows = 32;
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
    return;
  }
  // A sampled row-per-neuron layer over dense inputs goes neuron by neuron: each active row
  // is read once for all the samples that hold it (their inputs stay in cache), where a walk
  // sample by sample reads it once per sample. The same dot products, the same bits.
  const bool index = L.indexed && !s.dense() && full_width;
  L.active.valid = false;
  if (index) {
    L.active.Build(*out, s.begin, s.local());
    const Layer::ActiveIndex& a = L.active;
    const int64_t nrows = static_cast<int64_t>(a.rows.size());
    const int64_t width = s.in_dim;  // every input row holds all of them (checked above)
    auto put = [&](int64_t at, float v) { out->vals[at] = relu ? (v > 0.0f ? v : 0.0f) : v; };
    // Rows that every sample holds (their entries are samples 0..B-1; the batch's shared
    // fill) go against the samples in lanes (LaneDots, over the inputs transposed), kR at a
    // time, in the order of their slots in sample 0: the fill puts them in the same order in
    // every sample, so a sample's values land on few cache lines. The walk takes the others.
    const bool lanes = width % 16 == 0;
    std::vector<int64_t>& full = L.full_rows;
    std::vector<int64_t>& walk = L.walk_rows;
    full.clear();
    walk.clear();
    for (int64_t q = 0; q < nrows; ++q)
      (lanes && a.off[q + 1] - a.off[q] == B ? full : walk).push_back(q);
    if (!full.empty()) {
      std::sort(full.begin(), full.end(), [&](int64_t p, int64_t q) {
        return a.entry[a.off[p]].slot < a.entry[a.off[q]].slot;
      });
      const int64_t stride = (B + 15) / 16 * 16, nfull = static_cast<int64_t>(full.size());
      L.lane_in.assign(static_cast<size_t>(width * stride), 0.0f);
      for (int64_t i = 0; i < B; ++i)
        for (int64_t j = 0; j < width; ++j) L.lane_in[j * stride + i] = in.vals[in.off[i] + j];
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
          LaneDots<kR>(ws, L.lane_in.data() + i0, stride, width, z);
          for (int64_t d = 0; d < std::min<int64_t>(kLanesN, B - i0); ++d) {
            const int64_t o = out->off[i0 + d];
            for (int64_t k = 0; k < nk; ++k) put(o + es[k][i0 + d].slot, z[k][d] + bs[k]);
          }
        }
      });
    }
    const int64_t nwalk = static_cast<int64_t>(walk.size());
    constexpr int64_t kChunk = 64;
    ParallelFor((nwalk + kChunk - 1) / kChunk, [&](int64_t c) {
      const int64_t t0 = c * kChunk, t1 = std::min(nwalk, t0 + kChunk);
      auto row_at = [&](int64_t t) { return L.Row(a.rows[walk[t]]); };
      // Lane sums of up to 16 entries awaiting their sums, and where these go.
      Acc16 pend[16] = {};
      int64_t pend_at[16];
      float pend_bias[16];
      int np = 0;
      auto flush = [&] {
        if (np == 0) return;
        const Acc16 z = LaneSums16(pend);
        for (int d = 0; d < np; ++d) put(pend_at[d], LaneOf(z, d) + pend_bias[d]);
        np = 0;
      };
#ifdef __AVX512F__
      // Row q's entries one at a time, the row in kV vector registers (width 16 kV): each
      // sum runs in one vector as DotBlock's does (the same bits), its lanes pending.
      auto row_in_registers = [&](auto kv, int64_t q) {
        constexpr int kV = decltype(kv)::value;
        const int64_t r = a.rows[q];
        const float bias = L.b[r];
        Vec16 wv[kV];
        for (int v = 0; v < kV; ++v) std::memcpy(&wv[v], L.Row(r) + 16 * v, sizeof(Vec16));
        for (int64_t e = a.off[q]; e < a.off[q + 1]; ++e) {
          const Layer::ActiveIndex::Entry en = a.entry[e];
          const float* x = in.vals.data() + in.off[en.sample];
          Vec16 acc = {};
          for (int v = 0; v < kV; ++v) {
            Vec16 xv;
            std::memcpy(&xv, x + 16 * v, sizeof xv);
            acc += wv[v] * xv;
          }
          pend[np] = acc;
          pend_at[np] = out->off[en.sample] + en.slot;
          pend_bias[np++] = bias;
          if (np == 16) flush();
        }
      };
#endif
      // Row q's entries through the pending lanes.
      auto one_row = [&](int64_t q) {
#ifdef __AVX512F__  // up to 16 registers for the row: AVX-512 has 32
        switch (width) {
          case 32:
            return row_in_registers(std::integral_constant<int, 2>{}, q);
          case 64:
            return row_in_registers(std::integral_constant<int, 4>{}, q);
          case 128:
            return row_in_registers(std::integral_constant<int, 8>{}, q);
          case 256:
            return row_in_registers(std::integral_constant<int, 16>{}, q);
          default:
            break;
        }
#endif
        const int64_t r = a.rows[q];
        const float* wr = L.Row(r);
        const float bias = L.b[r];
        int64_t e = a.off[q];
        if (width % 16 == 0) {
          // Groups of entries into the pending lanes; 16 pending sums are formed at once.
          constexpr int kN = 4;
          while (e < a.off[q + 1]) {
            const int kn = a.off[q + 1] - e >= kN && np <= 16 - kN ? kN : 1;
            const float* xs[kN];
            for (int d = 0; d < kn; ++d) {
              const Layer::ActiveIndex::Entry en = a.entry[e + d];
              xs[d] = in.vals.data() + in.off[en.sample];
              pend_at[np + d] = out->off[en.sample] + en.slot;
              pend_bias[np + d] = bias;
            }
            if (kn == kN) {
              DotBlock16<kN>(wr, xs, width, pend + np);
            } else {
              DotBlock16<1>(wr, xs, width, pend + np);
            }
            np += kn;
            e += kn;
            if (np == 16) flush();
          }
        }
        for (; e < a.off[q + 1]; ++e) {
          const float v = Dot(wr, in.vals.data() + in.off[a.entry[e].sample], width) + bias;
          put(out->off[a.entry[e].sample] + a.entry[e].slot, v);
        }
      };
      // The chunk's first rows, which no earlier step of this walk prefetched.
      for (int64_t t = t0; t < std::min(t1, t0 + kFar); ++t)
        PrefetchToL2(row_at(t), L.cols * sizeof(float));
      for (int64_t t = t0; t < t1; ++t) {
        if (t + kFar < t1) PrefetchToL2(row_at(t + kFar), L.cols * sizeof(float));
        if (t + kAhead < t1) {
          PrefetchRow(row_at(t + kAhead), L.cols);
          __builtin_prefetch(&L.b[a.rows[walk[t + kAhead]]]);
        }
        one_row(walk[t]);
      }
      flush();
    });
    return;
  }
  ParallelFor(B, 4, [&](int64_t i) {
    const SparseView x = in.Row(i);
    const int32_t* act = out->Ids(i);
    float* z = out->Vals(i);
    const int64_t na = out->n[i];
    if (s.input_major) {
      if (s.dense()) {
        std::memcpy(z, L.b.data(), sizeof(float) * na);
        for (int64_t e = 0; e < x.n; ++e) {
          if (e + kAhead < x.n) PrefetchRow(L.Row(x.ids[e + kAhead]), na);
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
        if (k + kAhead < na) PrefetchRow(L.Row(act[k + kAhead] - s.begin), L.cols);
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

void CpuBackend::BackwardRows(int layer, const BatchRows& in, const BatchRows& delta,
                              BatchRows* in_grad) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  DSLIDE_ASSERT(!(s.input_major && in_grad != nullptr), "the first layer has no input gradient");
  if (L.indexed && s.dense() && in.dense) {
    DenseRows(L, in, delta, in_grad, nullptr);
    return;
  }
  if (L.indexed) {
    IndexBatch(L, in, delta);
    // Input gradient: each touched row is read once and scattered into a private
    // per-thread buffer aligned with `in`; the buffers are summed afterwards.
    if (in_grad != nullptr) TouchedRows(L, &in, in_grad, nullptr);
    return;
  }
  if (L.g.empty()) L.g.assign(static_cast<size_t>(L.rows) * L.cols, 0.0f);
  // The input-major first layer: HOGWILD over samples into the gradient rows of the
  // sample's features.
  const bool all = s.dense();
  ParallelFor(B, 4, [&](int64_t i) {
    const SparseView x = in.Row(i);
    const SparseView d = delta.Row(i);
    for (int64_t k = 0; k < d.n; ++k) {
      const int64_t c = d.ids[k] - s.begin;
      L.gb[c] += d.vals[k];
      L.btouched[c] = 1;
    }
    for (int64_t e = 0; e < x.n; ++e) {
      const int64_t f = x.ids[e];
      L.touched[f] = 1;
      float* gr = L.GRow(f);
      if (all) {
        Axpy(x.vals[e], d.vals, gr, d.n);
      } else {
        for (int64_t k = 0; k < d.n; ++k) gr[d.ids[k] - s.begin] += x.vals[e] * d.vals[k];
      }
    }
  });
}

void CpuBackend::IndexBatch(Layer& L, const BatchRows& in, const BatchRows& delta) {
  DSLIDE_ASSERT(!L.pending, "Backward called twice on a layer without an Update between");
  // The batch's entries by neuron: the forward pass's index when the deltas sit on its
  // entries, else one sorted from the deltas' own ids; then those with a non-zero delta.
  if (!ActiveMatches(L, delta)) L.active.Build(delta, L.spec.begin, L.spec.local());
  KeepNonZero(L, delta);
  L.saved_in = in;
  L.pending = true;
}

void CpuBackend::Layer::ActiveIndex::Build(const BatchRows& out, int64_t begin, int64_t n) {
  // Each part counts its samples' entries per id and marks the ids it meets in a bitmap;
  // ranges of the bitmaps' words (their marked ids only, not every id of the range) turn the
  // counts into each part's offsets; each part scatters its entries. A row lists its
  // entries by sample.
  ActiveIndex& a = *this;
  const int64_t B = out.samples(), words = (n + 63) / 64;
  constexpr int64_t kIdsAhead = 16;  // ids whose counters are prefetched ahead
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(NumThreads(), B));
  a.count.resize(parts);
  for (auto& c : a.count)
    if (static_cast<int64_t>(c.size()) != n) c.assign(n, 0);
  a.mark.resize(parts);
  for (auto& m : a.mark)
    if (static_cast<int64_t>(m.size()) != words) m.assign(words, 0);
  a.batch_off = out.off;
  a.batch_n = out.n;
  std::vector<int64_t>& start = a.start;  // of each sample's entries, packed
  start.assign(B + 1, 0);
  for (int64_t i = 0; i < B; ++i) start[i + 1] = start[i] + out.n[i];
  const int64_t total = start[B];
  DSLIDE_ASSERT(total < std::numeric_limits<int32_t>::max());
  a.batch_ids.resize(total);
  ParallelFor(parts, [&](int64_t t) {
    int32_t* cnt = a.count[t].data();
    uint64_t* mark = a.mark[t].data();
    for (int64_t i = B * t / parts; i < B * (t + 1) / parts; ++i) {
      const int32_t* ids = out.ids.data() + out.off[i];
      std::memcpy(a.batch_ids.data() + start[i], ids, sizeof(int32_t) * out.n[i]);
      for (int64_t k = 0; k < out.n[i]; ++k) {
        if (k + kIdsAhead < out.n[i]) __builtin_prefetch(cnt + ids[k + kIdsAhead] - begin, 1);
        const int64_t r = ids[k] - begin;
        ++cnt[r];
        mark[r >> 6] |= uint64_t{1} << (r & 63);
      }
    }
  });
  // fn(r) for the marked neurons r of words [w0, w1), ascending.
  auto each_marked = [&](int64_t w0, int64_t w1, auto&& fn) {
    for (int64_t w = w0; w < w1; ++w) {
      uint64_t bits = 0;
      for (int64_t t = 0; t < parts; ++t) bits |= a.mark[t][w];
      for (; bits != 0; bits &= bits - 1) fn(w * 64 + __builtin_ctzll(bits));
    }
  };
  // Word ranges: their active rows and entries, then (after the prefix sums) the rows,
  // their offsets, and each part's first slot in each row.
  std::vector<int64_t> nrow(parts + 1, 0), nent(parts + 1, 0);
  ParallelFor(parts, [&](int64_t b) {
    int64_t rows = 0, entries = 0;
    each_marked(words * b / parts, words * (b + 1) / parts, [&](int64_t r) {
      for (int64_t t = 0; t < parts; ++t) entries += a.count[t][r];
      ++rows;
    });
    nrow[b + 1] = rows;
    nent[b + 1] = entries;
  });
  for (int64_t b = 0; b < parts; ++b) {
    nrow[b + 1] += nrow[b];
    nent[b + 1] += nent[b];
  }
  a.rows.resize(nrow[parts]);
  a.off.resize(nrow[parts] + 1);
  a.off[nrow[parts]] = total;
  ParallelFor(parts, [&](int64_t b) {
    int64_t q = nrow[b], o = nent[b];
    each_marked(words * b / parts, words * (b + 1) / parts, [&](int64_t r) {
      a.rows[q] = static_cast<int32_t>(r);
      a.off[q++] = o;
      for (int64_t t = 0; t < parts; ++t) {
        const int32_t ct = a.count[t][r];
        a.count[t][r] = static_cast<int32_t>(o);
        o += ct;
      }
    });
  });
  a.entry.resize(total);
  ParallelFor(parts, [&](int64_t t) {
    int32_t* cur = a.count[t].data();
    for (int64_t i = B * t / parts; i < B * (t + 1) / parts; ++i) {
      const int32_t* ids = out.ids.data() + out.off[i];
      for (int64_t k = 0; k < out.n[i]; ++k) {
        if (k + kIdsAhead < out.n[i]) __builtin_prefetch(cur + ids[k + kIdsAhead] - begin, 1);
        a.entry[cur[ids[k] - begin]++] = {static_cast<int32_t>(i), static_cast<int32_t>(k)};
      }
    }
    uint64_t* mark = a.mark[t].data();
    for (int32_t r : a.rows) {
      cur[r] = 0;
      mark[r >> 6] = 0;
    }
  });
  a.valid = true;
}

bool CpuBackend::ActiveMatches(const Layer& L, const BatchRows& rows) const {
  const Layer::ActiveIndex& a = L.active;
  if (!a.valid || rows.off != a.batch_off || rows.n != a.batch_n) return false;
  std::atomic<bool> same{true};
  ParallelFor(rows.samples(), 16, [&](int64_t i) {
    if (std::memcmp(a.batch_ids.data() + a.start[i], rows.ids.data() + rows.off[i],
                    sizeof(int32_t) * rows.n[i]) != 0)
      same.store(false, std::memory_order_relaxed);
  });
  return same.load();
}

void CpuBackend::KeepNonZero(Layer& L, const BatchRows& delta) {
  const Layer::ActiveIndex& a = L.active;
  // One gather of the deltas: each row's non-zero ones, with their samples, go to the row's
  // own place in kept_* (the index's offsets) and the row's count to `keep`. A softmax layer
  // has no zero deltas, so these are the entries as they stand (swapped in); otherwise the
  // rows with any are packed after their predecessors.
  const int64_t nrows = static_cast<int64_t>(a.rows.size());
  const int64_t total = a.off[nrows];
  std::vector<int64_t>& keep = L.keep;
  keep.resize(nrows);
  L.kept_sample.resize(total);
  L.kept_delta.resize(total);
  constexpr int64_t kChunk = 256;
  constexpr int64_t kGatherAhead = 32;  // entries whose deltas are prefetched ahead
  std::atomic<int64_t> kept{0};
  ParallelFor((nrows + kChunk - 1) / kChunk, [&](int64_t c) {
    int64_t mine = 0;
    for (int64_t q = c * kChunk; q < std::min(nrows, (c + 1) * kChunk); ++q) {
      int64_t p = a.off[q];
      for (int64_t e = a.off[q]; e < a.off[q + 1]; ++e) {
        if (e + kGatherAhead < total) {
          const Layer::ActiveIndex::Entry ahead = a.entry[e + kGatherAhead];
          __builtin_prefetch(delta.vals.data() + delta.off[ahead.sample] + ahead.slot);
        }
        const float d = delta.vals[delta.off[a.entry[e].sample] + a.entry[e].slot];
        L.kept_sample[p] = a.entry[e].sample;
        L.kept_delta[p] = d;
        p += d != 0.0f;
      }
      keep[q] = p - a.off[q];
      mine += keep[q];
    }
    kept.fetch_add(mine, std::memory_order_relaxed);
  });
  if (kept.load() == total) {
    L.ent_sample.swap(L.kept_sample);
    L.ent_delta.swap(L.kept_delta);
    L.grad_rows = a.rows;
    L.grad_off = a.off;
    return;
  }
  L.grad_rows.clear();
  L.grad_off.clear();
  std::vector<int64_t>& from = L.keep_from;  // per kept row, its entries' place in kept_*
  from.clear();
  int64_t o = 0;
  for (int64_t q = 0; q < nrows; ++q) {
    if (keep[q] == 0) continue;
    L.grad_rows.push_back(a.rows[q]);
    L.grad_off.push_back(o);
    from.push_back(a.off[q]);
    o += keep[q];
  }
  L.grad_off.push_back(o);
  L.ent_sample.resize(o);
  L.ent_delta.resize(o);
  ParallelFor(static_cast<int64_t>(L.grad_rows.size()), kChunk, [&](int64_t k) {
    const int64_t n = L.grad_off[k + 1] - L.grad_off[k];
    std::copy_n(L.kept_sample.data() + from[k], n, L.ent_sample.data() + L.grad_off[k]);
    std::copy_n(L.kept_delta.data() + from[k], n, L.ent_delta.data() + L.grad_off[k]);
  });
}

void CpuBackend::InputGradRow(const Layer& L, int64_t q, const BatchRows& in, float* buf) const {
  const float* wr = L.Row(L.grad_rows[q]);
  for (int64_t e = L.grad_off[q]; e < L.grad_off[q + 1]; ++e) {
    const int64_t i = L.ent_sample[e];
    const float dk = L.ent_delta[e];
    const SparseView x = in.Row(i);
    float* gin = buf + in.off[i];
    if (in.dense) {
      Axpy(dk, wr, gin, x.n);
    } else {
      for (int64_t j = 0; j < x.n; ++j) gin[j] += dk * wr[x.ids[j]];
    }
  }
}

namespace {

/// One row's weight gradient g (cols floats, a multiple of kLanesN) and bias gradient *gb
/// from its `count` entries (samples of x, deltas), and its share of the input gradient
/// added to buf: the operations of GradientRow and InputGradRow, the row in registers.
void RowEntriesGradients(const float* wr, const int32_t* sample, const float* delta, int64_t count,
                         int64_t cols, const BatchRows& x, float* buf, float* g, float* gb) {
  float sb = 0.0f;
  for (int64_t e = 0; e < count; ++e) sb += delta[e];
  *gb = sb;
  // The row's weights and gradient in 2 kV registers of the 32 (AVX-512) or 16 (AVX2).
  constexpr int kL = kLanesN, kV = kL == 16 ? 8 : 4;
  int64_t c = 0;
  for (; c + kL * kV <= cols; c += kL * kV)
    RowsBlock<1, kV>(&wr, c, sample, &delta, count, x, buf, &g);
  if (kV > 4)
    for (; c + kL * 4 <= cols; c += kL * 4)
      RowsBlock<1, 4>(&wr, c, sample, &delta, count, x, buf, &g);
  for (; c < cols; c += kL) RowsBlock<1, 1>(&wr, c, sample, &delta, count, x, buf, &g);
}

}  // namespace

void CpuBackend::RowGradients(const Layer& L, int64_t q, const BatchRows& x, float* buf, float* g,
                              float* gb) const {
  const int64_t e0 = L.grad_off[q], count = L.grad_off[q + 1] - e0;
  RowEntriesGradients(L.Row(L.grad_rows[q]), L.ent_sample.data() + e0, L.ent_delta.data() + e0,
                      count, L.cols, x, buf, g, gb);
}

namespace {

/// RowEntriesGradients for kRowsAtOnce rows whose entries are the same samples in the same
/// order (their deltas delta[k]): each input and input-gradient load serves the rows.
constexpr int kRowsAtOnce = 4;
void RowsEntriesGradients(const float* const* wr, const int32_t* sample, const float* const* delta,
                          int64_t count, int64_t cols, const BatchRows& x, float* buf,
                          float* const* g, float* gb) {
  constexpr int kR = kRowsAtOnce;
  for (int k = 0; k < kR; ++k) {
    float sb = 0.0f;
    for (int64_t e = 0; e < count; ++e) sb += delta[k][e];
    gb[k] = sb;
  }
  int64_t c = 0;
  if (kLanesN == 16)
    for (; c + 32 <= cols; c += 32) RowsBlock<kR, 2>(wr, c, sample, delta, count, x, buf, g);
  for (; c < cols; c += kLanesN) RowsBlock<kR, 1>(wr, c, sample, delta, count, x, buf, g);
}

}  // namespace

void CpuBackend::RowsGradients(const Layer& L, const int64_t* q, const BatchRows& x, float* buf,
                               float* const* g, float* gb) const {
  constexpr int kR = kRowsAtOnce;
  const int64_t e0 = L.grad_off[q[0]], count = L.grad_off[q[0] + 1] - e0;
  const float* delta[kR];
  const float* wr[kR];
  for (int k = 0; k < kR; ++k) {
    delta[k] = L.ent_delta.data() + L.grad_off[q[k]];
    wr[k] = L.Row(L.grad_rows[q[k]]);
  }
  RowsEntriesGradients(wr, L.ent_sample.data() + e0, delta, count, L.cols, x, buf, g, gb);
}

void CpuBackend::ApplyRow(Layer& L, int64_t r, int64_t q, const AdamStep& step) {
  ThreadScratch& ts = *scratch_[ThreadId()];
  ts.grad.resize(L.cols);
  float gb = 0.0f;
  if (q >= 0) {
    GradientRow(L, q, ts.grad.data(), &gb);
  } else {
    std::fill(ts.grad.begin(), ts.grad.end(), 0.0f);
  }
  const size_t o = static_cast<size_t>(r) * L.cols;
  AdamRow(L, step, o, L.cols, ts.grad.data());
  AdamBias(L, step, r, &gb);
}

void CpuBackend::ClearInputGrads(size_t width) {
  for (auto& ts : scratch_) ts->gin.assign(width, 0.0f);
}

void CpuBackend::AddInputGrads(BatchRows* in_grad) const {
  ParallelFor(static_cast<int64_t>(in_grad->vals.size()), 4096, [&](int64_t j) {
    float acc = 0.0f;
    for (const auto& ts : scratch_) acc += ts->gin[j];
    in_grad->vals[j] += acc;
  });
}

void CpuBackend::TouchedRows(Layer& L, const BatchRows* in, BatchRows* in_grad,
                             const AdamStep* step) {
  if (in_grad) ClearInputGrads(in_grad->vals.size());
  const int64_t nrows = static_cast<int64_t>(L.grad_rows.size());
  // Both gradients and the step over dense inputs: one pass over each row's entries.
  const bool fused = in_grad && step && in->dense && L.cols % 16 == 0;
  const int64_t batch = in ? in->samples() : 0;
  constexpr int64_t kChunk = 256;
  ParallelFor((nrows + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t q0 = c * kChunk, q1 = std::min(nrows, q0 + kChunk);
    float* buf = in_grad ? scratch_[ThreadId()]->gin.data() : nullptr;
    // Rows with an entry of every sample (the same samples, in order) wait in `fq` and go
    // four at a time: their gradients in one pass, then their steps.
    int64_t fq[4];
    int nf = 0;
    auto full_rows = [&] {
      ThreadScratch& ts = *scratch_[ThreadId()];
      ts.grad.resize(4 * L.cols);
      float* g[4];
      float gb[4];
      for (int k = 0; k < 4; ++k) g[k] = ts.grad.data() + k * L.cols;
      RowsGradients(L, fq, *in, buf, g, gb);
      for (int k = 0; k < 4; ++k) {
        AdamRow(L, *step, static_cast<size_t>(L.grad_rows[fq[k]]) * L.cols, L.cols, g[k]);
        AdamBias(L, *step, L.grad_rows[fq[k]], &gb[k]);
      }
      nf = 0;
    };
    auto fused_row = [&](int64_t q) {
      ThreadScratch& ts = *scratch_[ThreadId()];
      ts.grad.resize(L.cols);
      float gb;
      RowGradients(L, q, *in, buf, ts.grad.data(), &gb);
      AdamRow(L, *step, static_cast<size_t>(L.grad_rows[q]) * L.cols, L.cols, ts.grad.data());
      AdamBias(L, *step, L.grad_rows[q], &gb);
    };
    for (int64_t q = q0; q < q1; ++q) {
      if (q + kFar < q1) {
        const size_t o = static_cast<size_t>(L.grad_rows[q + kFar]) * L.cols;
        PrefetchToL2(L.w.data() + o, L.cols * sizeof(float));
        if (step && L.bf16) {
          PrefetchToL2(L.m16.data() + o, L.cols * sizeof(uint16_t));
          PrefetchToL2(L.v16.data() + o, L.cols * sizeof(uint16_t));
        } else if (step) {
          PrefetchToL2(L.m.data() + o, L.cols * sizeof(float));
          PrefetchToL2(L.v.data() + o, L.cols * sizeof(float));
        }
      }
      if (q + kAhead < q1) {
        const size_t o = static_cast<size_t>(L.grad_rows[q + kAhead]) * L.cols;
        PrefetchRow(L.w.data() + o, L.cols);
        const int32_t r = L.grad_rows[q + kAhead];
        if (step && L.bf16) {
          PrefetchLines<3>(L.m16.data() + o, L.cols * sizeof(uint16_t));
          PrefetchLines<3>(L.v16.data() + o, L.cols * sizeof(uint16_t));
          __builtin_prefetch(&L.mb16[r]);
          __builtin_prefetch(&L.vb16[r]);
        } else if (step) {
          PrefetchRow(L.m.data() + o, L.cols);
          PrefetchRow(L.v.data() + o, L.cols);
          __builtin_prefetch(&L.mb[r]);
          __builtin_prefetch(&L.vb[r]);
        }
        if (step) __builtin_prefetch(&L.b[r]);
      }
      if (fused && L.grad_off[q + 1] - L.grad_off[q] == batch) {
        fq[nf++] = q;
        if (nf == 4) full_rows();
      } else if (fused) {
        fused_row(q);
      } else {
        if (buf) InputGradRow(L, q, *in, buf);  // before the row changes
        if (step) ApplyRow(L, L.grad_rows[q], q, *step);
      }
    }
    for (int k = 0; k < nf; ++k) fused_row(fq[k]);
  });
  if (in_grad) AddInputGrads(in_grad);
}

void CpuBackend::DenseRows(Layer& L, const BatchRows& in, const BatchRows& delta,
                           BatchRows* in_grad, const AdamStep* step) {
  // Every neuron active: walk row blocks; each row gathers its deltas over the batch (a
  // cache line per sample for the block), forms its gradient, adds its input-gradient
  // share from the old weights, then takes its Adam step (with `step`; a row whose deltas
  // are all zero is not touched and does not step, as in the indexed path) or keeps the
  // gradient in dense_g (without).
  DSLIDE_ASSERT(!L.pending, "Backward called twice on a layer without an Update between");
  if (step == nullptr) {
    L.dense_g.resize(static_cast<size_t>(L.rows) * L.cols);
    L.dense_gb.resize(L.spec.local());
    L.pending = L.dense_pending = true;
  }
  const int64_t B = in.samples();
  if (in_grad) ClearInputGrads(in_grad->vals.size());
  constexpr int64_t kRows = 16;
  const int64_t n = L.spec.local();
  // Over dense inputs of the full width (a multiple of the vector width), with an input
  // gradient: each row in registers over its non-zero deltas (RowEntriesGradients), the
  // same operations in the same order.
  const bool in_registers = in_grad != nullptr && L.cols % kLanesN == 0 && in.FullRows(L.cols);
  ParallelFor((n + kRows - 1) / kRows, [&](int64_t blk) {
    ThreadScratch& ts = *scratch_[ThreadId()];
    const int64_t r0 = blk * kRows, r1 = std::min(n, r0 + kRows);
    constexpr int kR = kRowsAtOnce;
    ts.grad.resize(kR * L.cols);
    // kR rows whose non-zero deltas are the same samples (a softmax's rows, but for samples
    // without labels, whose deltas are all zero) go together: gradients, then the steps.
    auto rows_at_once = [&](int64_t r) {
      if (!in_registers || r + kR > r1) return false;
      ts.qids.clear();
      ts.qvals.clear();
      for (int64_t i = 0; i < B; ++i) {
        const float* d = delta.vals.data() + delta.off[i] + r;
        int nz = 0;
        for (int k = 0; k < kR; ++k) nz += d[k] != 0.0f;
        if (nz == 0) continue;
        if (nz != kR) return false;
        ts.qids.push_back(static_cast<int32_t>(i));
      }
      const int64_t count = static_cast<int64_t>(ts.qids.size());
      if (count == 0 && step) return true;  // no row touched: lazy Adam leaves them
      ts.qvals.resize(kR * count);
      const float* dk[kR];
      const float* wr[kR];
      float* g[kR];
      float gb[kR];
      for (int k = 0; k < kR; ++k) {
        float* d = ts.qvals.data() + k * count;
        for (int64_t e = 0; e < count; ++e) d[e] = delta.vals[delta.off[ts.qids[e]] + r + k];
        dk[k] = d;
        wr[k] = L.Row(r + k);
        g[k] = step ? ts.grad.data() + k * L.cols
                    : L.dense_g.data() + static_cast<size_t>(r + k) * L.cols;
      }
      RowsEntriesGradients(wr, ts.qids.data(), dk, count, L.cols, in, ts.gin.data(), g, gb);
      for (int k = 0; k < kR; ++k) {
        if (step == nullptr) {
          L.dense_gb[r + k] = gb[k];
          continue;
        }
        AdamRow(L, *step, static_cast<size_t>(r + k) * L.cols, L.cols, g[k]);
        AdamBias(L, *step, r + k, &gb[k]);
      }
      return true;
    };
    for (int64_t r = r0; r < r1; ++r) {
      if (rows_at_once(r)) {
        r += kR - 1;
        continue;
      }
      float* g = step ? ts.grad.data() : L.dense_g.data() + static_cast<size_t>(r) * L.cols;
      float gb = 0.0f;
      float* wr = L.Row(r);
      int64_t touched = 0;  // samples with a non-zero delta for the row
      if (in_registers) {
        ts.qids.clear();
        ts.qvals.clear();
        for (int64_t i = 0; i < B; ++i) {
          const float dk = delta.vals[delta.off[i] + r];
          if (dk == 0.0f) continue;
          ts.qids.push_back(static_cast<int32_t>(i));
          ts.qvals.push_back(dk);
        }
        touched = static_cast<int64_t>(ts.qids.size());
        if (touched == 0 && step) continue;
        RowEntriesGradients(wr, ts.qids.data(), ts.qvals.data(), touched, L.cols, in, ts.gin.data(),
                            g, &gb);
      } else {
        std::fill(g, g + L.cols, 0.0f);
        for (int64_t i = 0; i < B; ++i) {
          const float dk = delta.vals[delta.off[i] + r];
          if (dk == 0.0f) continue;
          const SparseView x = in.Row(i);
          ++touched;
          gb += dk;
          Axpy(dk, x.vals, g, x.n);
          if (in_grad) Axpy(dk, wr, ts.gin.data() + in.off[i], x.n);
        }
      }
      if (step == nullptr) {
        L.dense_gb[r] = gb;
        continue;
      }
      if (touched == 0) continue;  // lazy Adam: only the rows the batch touched step
      const size_t o = static_cast<size_t>(r) * L.cols;
      AdamRow(L, *step, o, L.cols, g);
      AdamBias(L, *step, r, &gb);
    }
  });
  if (in_grad) AddInputGrads(in_grad);
}

void CpuBackend::BackwardUpdate(int layer, const BatchRows& in, const BatchRows& delta,
                                BatchRows* in_grad, const AdamStep& step, bool dense) {
  Layer& L = *layers_[layer];
  if (!L.indexed && !dense && in_grad == nullptr && L.spec.dense()) {
    InputMajorStep(L, in, delta, step);
    return;
  }
  if (!L.indexed || dense) {
    BackwardRows(layer, in, delta, in_grad);
    Update(layer, step, dense);
    return;
  }
  if (L.spec.dense() && in.dense) {
    DenseRows(L, in, delta, in_grad, &step);
    return;
  }
  // One pass over the touched rows: the input gradient from the old row, then Adam.
  IndexBatch(L, in, delta);
  TouchedRows(L, &in, in_grad, &step);
  L.pending = false;
}

void CpuBackend::InputMajorStep(Layer& L, const BatchRows& in, const BatchRows& delta,
                                const AdamStep& step) {
  // The batch's (feature, sample) entries indexed by feature (features ascending, each
  // feature's entries by sample), then one pass over the features: each row's gradient
  // sum_i x_if delta_i in sample order in a scratch row (the operations and order of the
  // HOGWILD accumulation on one thread, so the same bits), then its Adam step. Gradient
  // rows are neither written, re-read nor zeroed, and two threads do not race on them.
  const LayerSpec& s = L.spec;
  const int64_t B = in.samples();
  if (B == 0) return;
  Layer::ActiveIndex& f = L.by_feature;
  f.Build(in, 0, L.rows);
  const int64_t nf = static_cast<int64_t>(f.rows.size());
  const int64_t local = s.local();
  constexpr int64_t kChunk = 64;
  ParallelFor((nf + kChunk - 1) / kChunk, [&](int64_t c) {
    ThreadScratch& ts = *scratch_[ThreadId()];
    ts.grad.assign(L.cols, 0.0f);  // AdamUpdate leaves it zero again
    const int64_t k0 = c * kChunk, k1 = std::min(nf, k0 + kChunk);
    for (int64_t k = k0; k < k1; ++k) {
      float* g = ts.grad.data();
      for (int64_t e = f.off[k]; e < f.off[k + 1]; ++e) {
        const int32_t i = f.entry[e].sample;
        const SparseView d = delta.Row(i);
        Axpy(in.vals[in.off[i] + f.entry[e].slot], d.vals, g, d.n);
      }
      AdamRow(L, step, static_cast<size_t>(f.rows[k]) * L.cols, L.cols, g);
    }
  });
  // The bias: its gradient summed over the samples in order, then its step.
  for (int64_t i = 0; i < B; ++i) {
    const SparseView d = delta.Row(i);
    DSLIDE_ASSERT(d.n == local, "an input-major layer with every neuron active");
    for (int64_t k = 0; k < d.n; ++k) L.gb[d.ids[k] - s.begin] += d.vals[k];
  }
  for (int64_t k = 0; k < local; ++k) AdamBias(L, step, k, &L.gb[k]);
}

/// The pending gradient of local neuron grad_rows[q] into g (cols floats) and its bias
/// gradient into *gb.
void CpuBackend::GradientRow(const Layer& L, int64_t q, float* g, float* gb) const {
  std::fill(g, g + L.cols, 0.0f);
  float sb = 0.0f;
  for (int64_t e = L.grad_off[q]; e < L.grad_off[q + 1]; ++e) {
    const float dk = L.ent_delta[e];
    const SparseView x = L.saved_in.Row(L.ent_sample[e]);
    sb += dk;
    if (L.saved_in.dense) {
      Axpy(dk, x.vals, g, x.n);
    } else {
      for (int64_t j = 0; j < x.n; ++j) g[x.ids[j]] += dk * x.vals[j];
    }
  }
  *gb = sb;
}

void CpuBackend::Update(int layer, const AdamStep& step, bool dense) {
  Layer& L = *layers_[layer];
  if (L.indexed) {
    UpdateIndexed(L, step, dense);
    return;
  }
  ParallelFor(L.rows, 256, [&](int64_t r) {
    if (!dense && !L.touched[r]) return;
    const size_t o = static_cast<size_t>(r) * L.cols;
    AdamRow(L, step, o, L.cols, L.g.data() + o);
    L.touched[r] = 0;
  });
  for (int64_t i = 0; i < L.spec.local(); ++i) {
    if (!dense && !L.btouched[i]) continue;
    AdamBias(L, step, i, &L.gb[i]);
    L.btouched[i] = 0;
  }
}

void CpuBackend::UpdateIndexed(Layer& L, const AdamStep& step, bool dense) {
  if (L.dense_pending) {
    ApplyGradient(L, L.dense_g.data(), L.dense_gb.data(), step);
    L.pending = L.dense_pending = false;
    return;
  }
  if (!dense) {
    if (L.pending) TouchedRows(L, nullptr, nullptr, &step);
  } else {
    ParallelFor(L.spec.local(), 256, [&](int64_t r) {
      int64_t q = -1;
      if (L.pending) {
        auto it = std::lower_bound(L.grad_rows.begin(), L.grad_rows.end(), static_cast<int32_t>(r));
        if (it != L.grad_rows.end() && *it == r) q = it - L.grad_rows.begin();
      }
      ApplyRow(L, r, q, step);
    });
  }
  L.pending = false;
}

void CpuBackend::RebuildTables(int layer, bool new_hashes) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  if (s.dense()) return;
  const LshConfig& c = opt_.lsh;
  if (new_hashes || !L.hash) {
    ++L.hash_version;
    MakeHash(layer);
  }
  const int64_t n = s.local();
  const int nt = L.hash->num_tables();
  // Kept between rebuilds (L x n ids): a fresh array each time would fault in every page.
  BigVector<uint32_t>& buckets = L.rebuild_buckets;
  buckets.resize(static_cast<size_t>(nt) * n);
  auto weight = [&](int64_t i, int64_t j) { return L.w[L.At(i, j)]; };
  // Rows are indexed as [w, b] (queries are [x, 1]). With the MIPS transform (Neyshabur &
  // Srebro, "simple-LSH") they become [w, b]/M plus sqrt(1 - |[w,b]|^2/M^2), M the shard's
  // largest norm, so collision probability grows with the logit w.x + b itself: neurons
  // with large logits (often the frequent labels) are retrieved instead of missed.
  std::vector<double> norm2;
  double max_norm2 = 0.0;
  if (c.mips) {
    norm2.assign(n, 0.0);
    ParallelFor(n, 1024, [&](int64_t i) {
      double a = static_cast<double>(L.b[i]) * L.b[i];
      for (int64_t j = 0; j < s.in_dim; ++j) a += static_cast<double>(weight(i, j)) * weight(i, j);
      norm2[i] = a;
    });
    for (double v : norm2) max_norm2 = std::max(max_norm2, v);
  }
  const double inv_m = c.mips && max_norm2 > 0 ? 1.0 / std::sqrt(max_norm2) : 1.0;
  // Without MIPS a neuron's buckets depend on its own row and the hash functions alone: the
  // buckets of the last rebuild stand for every neuron no Adam step has moved since (their
  // hashes would come out the same bits), and only the moved ones are hashed again.
  std::vector<int32_t>& todo = L.rehash;
  todo.clear();
  const bool incremental = !c.mips && L.indexed && L.buckets_of == L.hash_version;
  for (int64_t i = 0; i < n; ++i)
    if (!incremental || L.moved[i]) todo.push_back(static_cast<int32_t>(i));
  if (L.indexed) {
    L.moved.assign(n, 0);
    L.buckets_of = L.hash_version;
  }
  // Rows in blocks (the hash runs a block at a time).
  constexpr int64_t kRows = 64;
  const int64_t dim = L.hash->dim();
  const int64_t todo_n = static_cast<int64_t>(todo.size());
  ParallelFor((todo_n + kRows - 1) / kRows, 4, [&](int64_t blk) {
    ThreadScratch& ts = *scratch_[ThreadId()];
    const int64_t k0 = blk * kRows, rows = std::min(kRows, todo_n - k0);
    ts.buckets.resize(static_cast<size_t>(nt) * kRows);
    ts.dense.resize(static_cast<size_t>(dim) * kRows);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = todo[k0 + r];
      float* row = ts.dense.data() + r * dim;
      for (int64_t j = 0; j < s.in_dim; ++j) row[j] = static_cast<float>(weight(i, j) * inv_m);
      row[s.in_dim] = static_cast<float>(L.b[i] * inv_m);
      if (c.mips)
        row[s.in_dim + 1] =
            static_cast<float>(std::sqrt(std::max(0.0, 1.0 - norm2[i] * inv_m * inv_m)));
    }
    L.hash->HashDenseRows(ts.dense.data(), dim, rows, ts.buckets.data(), &ts.hash);
    for (int64_t r = 0; r < rows; ++r)
      for (int t = 0; t < nt; ++t)
        buckets[static_cast<size_t>(t) * n + todo[k0 + r]] = ts.buckets[r * nt + t];
  });
  L.tables.Build(buckets.data(), n,
                 StreamSeed(opt_.seed, streams::kHash, layer, ++L.rebuilds, spec_.rank));
}

void CpuBackend::MakeHash(int layer) {
  Layer& L = *layers_[layer];
  const LshConfig& c = opt_.lsh;
  L.buckets_of = 0;  // new hash functions: every neuron's buckets are hashed again
  L.hash = std::make_unique<LshHash>(
      c.family, L.spec.in_dim + 1 + (c.mips ? 1 : 0), c.k, c.l, c.bin_size,
      StreamSeed(opt_.seed, streams::kHash, layer, L.hash_version, spec_.rank));
  L.tables = LshTables(c.l, L.hash->table_bits(), c.bucket_capacity, c.insert);
}

void CpuBackend::AdamRow(Layer& L, const AdamStep& step, size_t o, int64_t n, float* g) {
  const bool ok = L.bf16 ? AdamUpdateBf16(step, n, L.w.data() + o, g, L.m16.data() + o,
                                          L.v16.data() + o, o, static_cast<uint32_t>(L.index))
                         : AdamUpdate(step, n, L.w.data() + o, g, L.m.data() + o, L.v.data() + o);
  if (!ok) L.nonfinite.store(true, std::memory_order_relaxed);
  if (!L.moved.empty()) L.moved[o / L.cols] = 1;  // a row per neuron: its buckets may change
}

void CpuBackend::AdamBias(Layer& L, const AdamStep& step, int64_t c, float* g) {
  // Bias c's noise stream follows the weights' (positions past rows x cols).
  const bool ok = L.bf16 ? AdamUpdateBf16(step, 1, &L.b[c], g, &L.mb16[c], &L.vb16[c],
                                          static_cast<uint64_t>(L.rows * L.cols + c),
                                          static_cast<uint32_t>(L.index))
                         : AdamUpdate(step, 1, &L.b[c], g, &L.mb[c], &L.vb[c]);
  if (!ok) L.nonfinite.store(true, std::memory_order_relaxed);
  if (!L.moved.empty()) L.moved[c] = 1;
}

void CpuBackend::TopKRows(int layer, const BatchRows& in, int k, std::vector<int32_t>* ids,
                          std::vector<float>* scores, const BatchLabels* labels, SoftmaxStats* st) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  DSLIDE_ASSERT(!s.input_major, "exact top-k needs a row-per-neuron output layer");
  const int64_t B = in.samples();
  ids->assign(B * k, -1);
  scores->assign(B * k, -std::numeric_limits<float>::infinity());
  // Dense copies of the inputs so a block of samples stays in cache while rows stream by.
  constexpr int64_t kBlock = 32;
  const int threads = NumThreads();
  std::vector<float> xs(B * s.in_dim, 0.0f);
  for (int64_t i = 0; i < B; ++i) {
    const SparseView x = in.Row(i);
    for (int64_t e = 0; e < x.n; ++e) xs[i * s.in_dim + x.ids[e]] = x.vals[e];
  }
  std::vector<int32_t> tids(static_cast<size_t>(threads) * B * k, -1);
  std::vector<float> tsc(static_cast<size_t>(threads) * B * k,
                         -std::numeric_limits<float>::infinity());
  // Per thread and sample, the running max of the logits and the sum of exp(z - max).
  const bool norm = st != nullptr;
  std::vector<float> tmx(norm ? static_cast<size_t>(threads) * B : 0,
                         -std::numeric_limits<float>::infinity());
  std::vector<double> tsum(norm ? static_cast<size_t>(threads) * B : 0, 0.0);
  const int64_t n = s.local();
  ParallelFor(threads, [&](int64_t t) {
    const int64_t r0 = n * t / threads, r1 = n * (t + 1) / threads;
    int32_t* my_ids = tids.data() + t * B * k;
    float* my_sc = tsc.data() + t * B * k;
    float* my_mx = norm ? tmx.data() + t * B : nullptr;
    double* my_sum = norm ? tsum.data() + t * B : nullptr;
    // Groups of rows: their logits for one sample at a time, so that the normaliser takes
    // one rescale per group and a vectorised exp over it.
    constexpr int64_t kGroup = 64;
    float z[kGroup];
    for (int64_t b0 = 0; b0 < B; b0 += kBlock) {
      const int64_t b1 = std::min(B, b0 + kBlock);
      for (int64_t g0 = r0; g0 < r1; g0 += kGroup) {
        const int64_t g1 = std::min(r1, g0 + kGroup), ng = g1 - g0;
        for (int64_t i = b0; i < b1; ++i) {
          const float* x = xs.data() + i * s.in_dim;
          float gmax = -std::numeric_limits<float>::infinity();
          for (int64_t r = 0; r < ng; ++r) {
            z[r] = Dot(L.Row(g0 + r), x, s.in_dim) + L.b[g0 + r];
            gmax = std::max(gmax, z[r]);
          }
          if (norm && ng > 0) {
            if (gmax > my_mx[i]) {
              my_sum[i] *= static_cast<double>(ExpNonPositive(my_mx[i] - gmax));
              my_mx[i] = gmax;
            }
            const float m = my_mx[i];
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t r = 0; r < ng; ++r) acc += ExpNonPositive(z[r] - m);
            my_sum[i] += acc;
          }
          float* sc = my_sc + i * k;
          int32_t* id = my_ids + i * k;
          for (int64_t r = 0; r < ng; ++r) {
            if (z[r] <= sc[k - 1]) continue;
            int p = k - 1;
            while (p > 0 && sc[p - 1] < z[r]) {
              sc[p] = sc[p - 1];
              id[p] = id[p - 1];
              --p;
            }
            sc[p] = z[r];
            id[p] = static_cast<int32_t>(s.begin + g0 + r);
          }
        }
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
