// The GPU layer backend, written once over an executor X (CudaExec on a device, HostExec
// for the tests on machines without one), which the backend owns (x_):
//   X::Buffer<T>  device array: Resize, data, size, bytes
//   x_.Upload(&buf, host, n), x_.Download(buf, host, n), x_.Read(buf, i)  blocking copies
//   x_.Launch(kernel)  a named kernel of src/gpu/kernels/ (kernels.h lists them): the query,
//                 selection, forward, softmax, loss, backward and update, rebuild and top-k
//   x_.For(n, f)  an element-wise body f(i) over [0, n); x_.ForCounted the same over a count
//                 left in device memory (DSLIDE_HD lambdas over raw pointers, never `this`)
//   X::SendStage, x_.CopyIn, CopyOut, Stage, ComputeAfterCopies, CopiesAfterCompute,
//   MarkCopies, WaitMark  pinned buffers and a copy stream ordered against the compute
//                 stream
//   x_.SortKeys, x_.ExclusiveScan, x_.Synchronize, x_.Traffic (what crossed, how often the
//                 host waited)
//
// Per layer the device holds weights, biases, Adam moments, the LSH functions and tables,
// and the batch: the layer's input and output rows, its delta and its input
// gradient, padded per sample. With one rank a step sends up the data rows and the labels
// and reads back the loss and the non-finite flags in one wait; with P ranks, also the rows
// the snapshot exchange sends and receives.
// The step's kernels:
//   query: a block per sample hashes [x, 1] (QueryHash); then a block per sample counts
//     candidates (top-k and threshold queries) into a per-sample hash set (DeviceMarks, in
//     place of the CPU's stamp arrays) and one of its threads runs SelectIds (Select), after
//     the batch's shared fill (BatchFill);
//   forward: a block per sample with its input in shared memory; a warp per active neuron
//     with coalesced weight-row loads (ForwardRows), or a thread per active neuron of the
//     input-major first layer (ForwardInputMajor);
//   softmax: a block per sample, CUB block reductions of the max and sums, then the delta
//     (Softmax); the loss by one block (StepLoss);
//   backward, row-per-neuron layers: the input gradient per (sample, input entry) from the
//     old weights (InputGradient); the (neuron, sample, delta) entries sorted by neuron;
//     then a thread per (touched neuron, input coordinate) forms the weight gradient and
//     applies Adam (RowUpdate);
//   backward, input-major first layer: atomics into gradient rows (FirstLayerGradient), Adam
//     on the touched rows, listed by a scan over their flags (FirstLayerUpdate);
//   rebuild: a thread per neuron hashes its [w, b] row (HashRows), a radix sort by (table,
//     bucket, neuron), and a thread per bucket fills it (FillBuckets, the CPU's FillBucket).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend_streams.h"
#include "budget_sampler.h"
#include "device_choice.h"
#include "error.h"
#include "gpu_tuning.h"
#include "hd.h"
#include "kernels/kernels.h"
#include "layer_backend.h"
#include "layer_layout.h"
#include "lsh_hash.h"
#include "lsh_kernels.h"
#include "select_kernel.h"
#include "topk.h"

namespace dslide::gpu {

template <class X>
class GpuBackendT : public LayerBackend {
 public:
  template <class T>
  using Buf = typename X::template Buffer<T>;

  /// `args` construct the executor (CudaExec: its device resources, on the current device).
  template <class... A>
  explicit GpuBackendT(const GpuTuning& tune = {}, A&&... args)
      : x_(std::forward<A>(args)...), tune_(tune) {
    // Kernels use at most the 48 KiB of shared memory a block gets without opting in.
    constexpr int64_t kShared = 48 * 1024;
    DSLIDE_CHECK(tune.shared_floats >= 0 && tune.shared_floats * int64_t{sizeof(float)} <= kShared,
                 "GPU tuning: shared_floats must be in [0, ", kShared / sizeof(float), "], got ",
                 tune.shared_floats);
    DSLIDE_CHECK(tune.shared_entries >= 0 &&
                     tune.shared_entries * int64_t{sizeof(float) + sizeof(int32_t)} <= kShared,
                 "GPU tuning: shared_entries must be in [0, ",
                 kShared / (sizeof(float) + sizeof(int32_t)), "], got ", tune.shared_entries);
  }

  /// Rows of a batch on the device, padded: row i's entries at [i * cap, i * cap + n[i]).
  struct DevRows {
    int64_t B = 0, cap = 1;
    Buf<int64_t> n;
    Buf<int32_t> ids;
    Buf<float> vals;
    bool dense = false;  // every row holds ids 0..n-1 (BatchRows::dense)
    int64_t width = 0;
    /// The rows for a kernel, with their own values or those of `v` (laid out alike).
    RowsView View(const Buf<float>* v = nullptr) const {
      return {B, cap, n.data(), ids.data(), v != nullptr ? v->data() : vals.data(), dense};
    }
  };

  /// A layer's batch in device memory: its input rows, its output rows (active
  /// ids and values), the delta aligned with the output and this shard's input gradient
  /// aligned with the input; host copies only of what crosses ranks (HostRows, StageRows).
  struct Batch {
    DevRows in, out;
    bool chained = false;  // the input is the previous layer's output (InRows)
    Buf<float> delta, in_grad;
    BatchRows host[4];  // by Rows
  };

  struct Layer {
    int index = 0;
    LayerSpec spec;
    int64_t rows = 0, cols = 0;
    Buf<float> w, m, v, b, mb, vb;
    Buf<float> g, gb;                 // input-major layer: gradient rows
    Buf<uint8_t> touched, btouched;   // input-major layer
    Buf<uint32_t> row_flag, row_pos;  // input-major layer: the touched rows, listed
    Buf<int32_t> row_list;
    // Row-per-neuron layers: the pending batch gradient. counts[0] is its number of
    // entries, counts[1] of touched rows (at most max_q), both left in device memory (the
    // input-major layer counts its touched feature rows in counts[0]).
    bool pending = false;
    int64_t max_q = 0;
    Buf<int64_t> counts;
    Buf<float> x;  // the pending batch's input, B x in_dim
    Buf<uint64_t> keys;
    Buf<uint32_t> flags, qidx;
    Buf<int32_t> qrow, rowq, ent_sample;
    Buf<int64_t> qoff;
    Buf<float> ent_delta;
    // LSH.
    std::unique_ptr<LshHash> hash;
    Buf<int64_t> proj_off, inv_off;
    Buf<int32_t> proj_idx, inv_hash, bins;
    Buf<int8_t> proj_sign, inv_sign;
    HashView dhash;
    Buf<uint32_t> toff;
    Buf<int64_t> tbase;
    Buf<int32_t> tids;
    int64_t hash_version = 0, rebuilds = 0;
    std::vector<int64_t> host_base;  // L + 1
  };

  void Init(const ModelSpec& spec, const BackendOptions& options) override {
    CheckLshResolved(spec, options.lsh);
    spec_ = spec;
    opt_ = options;
    exchange_on_device_ = tune_.device_exchange == 1 ||
                          (tune_.device_exchange < 0 && X::kDevice && MpiReadsDeviceMemory());
    layers_.clear();
    batch_.clear();
    for (size_t li = 0; li < spec.layers.size(); ++li) batch_.push_back(std::make_unique<Batch>());
    Zeros(&bad_, spec.layers.size());
    DSLIDE_CHECK(spec.layers.size() <= 64, "at most 64 layers");
    Zeros(&ring_loss_, kLossRing);
    Zeros(&ring_bad_, kLossRing);
    queued_ = 0;
    taken_.clear();
    for (size_t li = 0; li < spec.layers.size(); ++li) {
      auto L = std::make_unique<Layer>();
      L->index = static_cast<int>(li);
      L->spec = spec.layers[li];
      const LayerSpec& s = L->spec;
      L->rows = s.input_major ? s.in_dim : s.local();
      L->cols = s.input_major ? s.local() : s.in_dim;
      const size_t n = static_cast<size_t>(L->rows) * L->cols;
      std::vector<float> host(n);
      InitialWeights(s, li, options.seed, host.data());
      x_.Upload(&L->w, host.data(), n);
      Zeros(&L->m, n);
      Zeros(&L->v, n);
      Zeros(&L->b, s.local());
      Zeros(&L->mb, s.local());
      Zeros(&L->vb, s.local());
      Zeros(&L->counts, 2);
      if (s.input_major) {
        Zeros(&L->g, n);
        Zeros(&L->gb, s.local());
        Zeros(&L->touched, L->rows);
        Zeros(&L->btouched, s.local());
      } else {
        L->rowq.Resize(s.local());
        Fill(L->rowq.data(), s.local(), int32_t{-1});
      }
      layers_.push_back(std::move(L));
      if (!s.dense()) RebuildTables(static_cast<int>(li), /*new_hashes=*/true);
    }
  }

  // ---- small helpers (public: CUDA lambdas may not sit in private members) ----
  template <class T>
  void Fill(T* p, int64_t n, T value) const {
    x_.For(n, [=] DSLIDE_HD(int64_t i) { p[i] = value; });
  }
  template <class T>
  void Zeros(Buf<T>* b, size_t n) const {
    b->Resize(n);
    Fill(b->data(), static_cast<int64_t>(n), T{});
  }
  template <class T>
  void Copy(T* to, const T* from, int64_t n) const {
    x_.For(n, [=] DSLIDE_HD(int64_t i) { to[i] = from[i]; });
  }
  /// Where a layer's Adam step writes.
  AdamTargets Targets(Layer& L) {
    return {L.w.data(),  L.m.data(),  L.v.data(),           L.b.data(),
            L.mb.data(), L.vb.data(), bad_.data() + L.index};
  }

  /// The vector on the device; an empty one as one zero (so that kernels get a valid pointer).
  template <class T>
  void UploadAtLeastOne(const std::vector<T>& v, Buf<T>* b) const {
    if (v.empty())
      Zeros(b, 1);
    else
      x_.Upload(b, v.data(), v.size());
  }

  static int64_t MaxCount(const BatchRows& r) {
    int64_t m = 0;
    for (int64_t c : r.n) m = std::max(m, c);
    return m;
  }

  /// Host rows into the device's padded layout: their arrays go up as they are, through
  /// `stage` (no host wait), and a kernel pads them.
  void SendRows(const BatchRows& r, typename X::SendStage* stage, DevRows* d) {
    const int64_t B = r.samples(), cap = std::max<int64_t>(1, MaxCount(r));
    const int64_t ni = static_cast<int64_t>(r.ids.size()), nv = static_cast<int64_t>(r.vals.size());
    char* p = static_cast<char*>(
        stage->Get(2 * B * sizeof(int64_t) + ni * sizeof(int32_t) + nv * sizeof(float)));
    int64_t* h_off = reinterpret_cast<int64_t*>(p);
    int64_t* h_n = h_off + B;
    int32_t* h_ids = reinterpret_cast<int32_t*>(h_n + B);
    float* h_vals = reinterpret_cast<float*>(h_ids + ni);
    std::copy(r.off.begin(), r.off.end(), h_off);
    std::copy(r.n.begin(), r.n.end(), h_n);
    std::copy(r.ids.begin(), r.ids.end(), h_ids);
    std::copy(r.vals.begin(), r.vals.end(), h_vals);
    raw_off_.Resize(std::max<int64_t>(B, 1));
    raw_ids_.Resize(std::max<int64_t>(ni, 1));
    raw_vals_.Resize(std::max<int64_t>(nv, 1));
    d->B = B;
    d->cap = cap;
    d->dense = r.dense;
    d->width = r.width;
    d->n.Resize(std::max<int64_t>(B, 1));
    d->ids.Resize(B * cap);
    d->vals.Resize(B * cap);
    x_.CopyIn(raw_off_.data(), h_off, B);
    x_.CopyIn(d->n.data(), h_n, B);
    x_.CopyIn(raw_ids_.data(), h_ids, ni);
    x_.CopyIn(raw_vals_.data(), h_vals, nv);
    stage->Done();
    const int64_t* off = raw_off_.data();
    const int64_t* n = d->n.data();
    const int32_t* rid = raw_ids_.data();
    const float* rv = raw_vals_.data();
    int32_t* ids = d->ids.data();
    float* vals = d->vals.data();
    const bool has_ids = ni > 0, has_vals = nv > 0;
    x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
      const int64_t i = t / cap, e = t % cap;
      const bool in = e < n[i];
      ids[t] = !in ? 0 : has_ids ? rid[off[i] + e] : static_cast<int32_t>(e);
      vals[t] = in && has_vals ? rv[off[i] + e] : 0.0f;
    });
  }

  /// Values of the padded layout `like` (a layer's input or output) from host rows laid out
  /// like it (the same counts per sample), through `stage`.
  void SendValues(const BatchRows& r, const DevRows& like, typename X::SendStage* stage,
                  Buf<float>* to) {
    const int64_t B = like.B, cap = like.cap;
    DSLIDE_ASSERT(r.samples() == B, "staged rows of another batch");
    float* h = static_cast<float*>(stage->Get(B * cap * sizeof(float)));
    for (int64_t i = 0; i < B; ++i) {
      std::copy(r.vals.begin() + r.off[i], r.vals.begin() + r.off[i] + r.n[i], h + i * cap);
      std::fill(h + i * cap + r.n[i], h + (i + 1) * cap, 0.0f);
    }
    to->Resize(B * cap);
    x_.CopyIn(to->data(), h, B * cap);
    stage->Done();
  }

  /// Device rows (with the values of `vals`, or their own) as host rows, strided by cap.
  void HostCopy(const DevRows& d, const Buf<float>* vals, BatchRows* r) const {
    const int64_t B = d.B, cap = d.cap;
    r->Strided(B, cap);
    r->ids.resize(B * cap);
    r->vals.resize(B * cap);
    if (B > 0) {
      x_.Download(d.n, r->n.data(), B);
      x_.Download(d.ids, r->ids.data(), B * cap);
      x_.Download(vals != nullptr ? *vals : d.vals, r->vals.data(), B * cap);
    }
  }
  /// Rows [0, B) of padded values into host rows of the same counts (any layout).
  static void UnpadVals(const std::vector<float>& padded, int64_t cap, BatchRows* r) {
    for (int64_t i = 0; i < r->samples(); ++i)
      std::copy(padded.begin() + i * cap, padded.begin() + i * cap + r->n[i],
                r->vals.begin() + r->off[i]);
  }
  /// The first n elements of a device array (all of them by default) in host memory.
  template <class T>
  std::vector<T> Host(const Buf<T>& b, size_t n) const {
    std::vector<T> h(n);
    if (n > 0) x_.Download(b, h.data(), n);
    return h;
  }
  template <class T>
  std::vector<T> Host(const Buf<T>& b) const {
    return Host(b, b.size());
  }

  /// The rows as a dense B x width matrix (ids index the columns; dense rows are 0..n-1).
  void Densify(const DevRows& d, int64_t width, Buf<float>* out) const {
    const int64_t B = d.B, cap = d.cap;
    const bool dense_rows = d.dense;
    Zeros(out, static_cast<size_t>(B * width));
    float* o = out->data();
    const int64_t* n = d.n.data();
    const int32_t* ids = d.ids.data();
    const float* vals = d.vals.data();
    x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
      const int64_t i = t / cap, e = t % cap;
      if (e >= n[i]) return;
      const int64_t col = dense_rows ? e : ids[t];
      o[i * width + col] = vals[t];
    });
  }

  // ---- The step on the device ----

  void SetLabels(const BatchLabels* labels) override {
    has_labels_ = labels != nullptr;
    if (!has_labels_) return;
    const int64_t no = static_cast<int64_t>(labels->off.size()),
                  ni = static_cast<int64_t>(labels->ids.size());
    label_shape_ = {no - 1, ni, 0};
    for (int64_t i = 0; i + 1 < no; ++i)
      label_shape_.most = std::max(label_shape_.most, labels->Count(i));
    char* p = static_cast<char*>(send_labels_.Get(no * sizeof(int64_t) + ni * sizeof(int32_t)));
    int64_t* h_off = reinterpret_cast<int64_t*>(p);
    int32_t* h_ids = reinterpret_cast<int32_t*>(h_off + no);
    std::copy(labels->off.begin(), labels->off.end(), h_off);
    std::copy(labels->ids.begin(), labels->ids.end(), h_ids);
    lab_off_.Resize(no);
    lab_ids_.Resize(std::max<int64_t>(ni, 1));
    x_.CopyIn(lab_off_.data(), h_off, no);
    x_.CopyIn(lab_ids_.data(), h_ids, ni);
    send_labels_.Done();
  }

  /// The layer's active neurons for its input into its output rows.
  void Select(int layer, bool with_labels, int64_t iter) override {
    Layer& L = *layers_[layer];
    const LayerSpec& s = L.spec;
    const DevRows& in = InRows(layer);
    DevRows& out = batch_[layer]->out;
    const int64_t B = in.B;
    out.B = B;
    out.dense = false;
    out.width = 0;
    if (s.dense()) {
      const int64_t local = s.local(), begin = s.begin;
      out.cap = std::max<int64_t>(1, local);
      out.n.Resize(std::max<int64_t>(B, 1));
      out.ids.Resize(B * out.cap);
      out.vals.Resize(B * out.cap);
      int64_t* n = out.n.data();
      int32_t* ids = out.ids.data();
      const int64_t cap = out.cap;
      x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
        ids[t] = static_cast<int32_t>(begin + t % cap);
        if (t % cap == 0) n[t / cap] = local;
      });
      return;
    }
    // From the labels' shape (SetLabels): the most labels of a sample, and with it the most
    // any sample can get (its budget, raised by the floor of negatives), which the batch's
    // shared fill covers; as on the CPU backend.
    const bool with_lab = with_labels && has_labels_;
    const int64_t max_forced = with_lab ? label_shape_.most : 0;
    const int64_t cap = BudgetSampler::ActiveCap(s.budget, max_forced, s.min_negatives, s.local());
    const int64_t n_lab = with_lab ? label_shape_.total : 0;
    const int32_t* li = with_lab ? lab_ids_.data() : nullptr;
    // The batch's shared fill (BatchListInto, the CPU's code) drawn on one device thread.
    const bool batch_fill = opt_.lsh.fill == FillPolicy::kBatch;
    const int64_t room = batch_fill ? BatchFillRoom(s.local(), cap) : 0;
    fill_.Resize(std::max<int64_t>(room, 1));
    fill_own_.Resize(std::max<int64_t>(2 * n_lab, 1));
    shared_.Resize(std::max<int64_t>(n_lab + room, 1));
    shared_n_.Resize(1);
    ShardDraw draw;
    draw.begin = s.begin;
    draw.end = s.end;
    draw.cap = cap;
    draw.iter = iter;
    draw.seed = opt_.seed;
    draw.lane = (uint64_t(layer) << 32) | spec_.rank;
    {
      BatchFill k;
      k.on = batch_fill;
      k.draw = draw;
      k.n_lab = n_lab;
      k.li = li;
      k.fill = fill_.data();
      k.own = fill_own_.data();
      k.shared = shared_.data();
      k.shared_n = shared_n_.data();
      x_.Launch(k);
    }
    out.cap = cap;
    out.n.Resize(std::max<int64_t>(B, 1));
    out.ids.Resize(B * cap);
    out.vals.Resize(B * cap);

    // Device side: the query rows [x, 1] (dense inputs: the kernel adds the 1), per-sample
    // scratch, and the labels this shard owns as each sample's forced ids.
    const int64_t n = s.local();
    const int L_ = static_cast<int>(opt_.lsh.l);
    const int64_t nh = L.dhash.num_hashes;
    // Bucket positions of a sample (Select) are 32-bit.
    DSLIDE_CHECK(static_cast<int64_t>(L_) * opt_.lsh.bucket_capacity < (int64_t{1} << 31),
                 "the GPU backend needs L * bucket capacity < 2^31");
    const int64_t cand_cap =
        std::max<int64_t>(static_cast<int64_t>(L_) * opt_.lsh.bucket_capacity, 2 * cap > n ? n : 0);
    int64_t set = 1;
    while (set < 2 * (max_forced + static_cast<int64_t>(L_) * opt_.lsh.bucket_capacity + cap) + 2)
      set *= 2;
    const DevRows& q = QueryRows(in, s.in_dim);
    forced_ids_.Resize(std::max<int64_t>(n_lab, 1));
    acc_.Resize(B * nh);
    arg_.Resize(B * nh);
    bkt_.Resize(B * L_);
    set_keys_.Resize(B * set);
    set_counts_.Resize(B * set);
    set_stamps_.Resize(B * set);
    set_first_.Resize(B * set);
    n_forced_.Resize(std::max<int64_t>(B, 1));
    pre_n_.Resize(std::max<int64_t>(B, 1));
    boff_.Resize(B * (L_ + 1));
    cand_.Resize(B * cand_cap);
    order_.Resize(B * L_);
    {
      QueryHash k;
      k.h = L.dhash;
      k.q = q.View();
      k.in_dim = s.in_dim;
      k.acc = acc_.data();
      k.arg = arg_.data();
      k.bkt = bkt_.data();
      x_.Launch(k);
    }
    gpu::Select k;
    k.policy = SelectionPolicy(opt_.lsh);
    k.tables = Tables(L);
    k.draw = draw;
    k.B = B;
    k.n = n;
    k.budget = s.budget;
    k.min_neg = s.min_negatives;
    k.set = set;
    k.cand_cap = cand_cap;
    k.L = L_;
    k.bkt = bkt_.data();
    k.lo = with_lab ? lab_off_.data() : nullptr;
    k.li = li;
    k.forced_ids = forced_ids_.data();
    k.n_forced = n_forced_.data();
    k.pre_n = pre_n_.data();
    k.boff = boff_.data();
    k.keys = set_keys_.data();
    k.counts = set_counts_.data();
    k.first = set_first_.data();
    k.cand = cand_.data();
    k.order = order_.data();
    k.stamps = set_stamps_.data();
    k.shared = shared_.data();
    k.shared_n = shared_n_.data();
    k.out = out.ids.data();
    k.out_n = out.n.data();
    x_.Launch(k);
  }

  /// The query rows of a layer input: the rows themselves for dense inputs (the bias
  /// coordinate is added by the kernel), else each row with the coordinate (in_dim, 1).
  const DevRows& QueryRows(const DevRows& in, int64_t in_dim) {
    if (in.dense) return in;
    const int64_t B = in.B, icap = in.cap, cap = in.cap + 1;
    q_.B = B;
    q_.cap = cap;
    q_.n.Resize(std::max<int64_t>(B, 1));
    q_.ids.Resize(B * cap);
    q_.vals.Resize(B * cap);
    const int64_t* xn = in.n.data();
    const int32_t* xid = in.ids.data();
    const float* xv = in.vals.data();
    int64_t* qn = q_.n.data();
    int32_t* qid = q_.ids.data();
    float* qv = q_.vals.data();
    x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
      const int64_t i = t / cap, e = t % cap;
      if (e == 0) qn[i] = xn[i] + 1;
      const bool x = e < xn[i], bias = e == xn[i];
      qid[t] = x ? xid[i * icap + e] : bias ? static_cast<int32_t>(in_dim) : 0;
      qv[t] = x ? xv[i * icap + e] : bias ? 1.0f : 0.0f;
    });
    return q_;
  }

  TablesView Tables(Layer& L) const {
    TablesView tv;
    tv.off = L.toff.data();
    tv.base = L.tbase.data();
    tv.ids = L.tids.data();
    tv.L = L.hash ? L.hash->num_tables() : 0;
    tv.nb = int64_t{1} << (L.hash ? L.hash->table_bits() : 0);
    return tv;
  }

  /// The activations of the layer's active neurons: one block per sample with the sample's
  /// input in shared memory, one thread per active neuron. Row-per-neuron layers keep the
  /// input densified there (contiguous with the weight rows); the input-major first layer
  /// keeps the sample's (feature, value) list.
  void Forward(int layer) override {
    Layer& L = *layers_[layer];
    const DevRows& in = InRows(layer);
    DevRows& out = batch_[layer]->out;
    const LayerSpec& s = L.spec;
    const int64_t B = in.B;
    out.vals.Resize(B * out.cap);
    if (s.input_major) {
      ForwardInputMajor k;
      k.in = in.View();
      k.act = out.View();
      k.cols = L.cols;
      k.begin = s.begin;
      k.kept = std::min<int64_t>(in.cap, tune_.shared_entries);
      k.relu = !s.is_output;
      k.w = L.w.data();
      k.bias = L.b.data();
      k.z = out.vals.data();
      x_.Launch(k);
      return;
    }
    // Row-per-neuron: the densified input row in shared memory, or in global memory (xd_)
    // when it does not fit.
    ForwardRows k;
    k.in = in.View();
    k.act = out.View();
    k.cols = L.cols;
    k.begin = s.begin;
    k.relu = !s.is_output;
    k.shared = L.cols <= tune_.shared_floats;
    if (!k.shared) xd_.Resize(static_cast<size_t>(B * L.cols));
    k.w = L.w.data();
    k.bias = L.b.data();
    k.xg = xd_.data();
    k.z = out.vals.data();
    x_.Launch(k);
  }

  /// A layer's input rows: its own buffer, or after Chain the previous layer's output.
  DevRows& InRows(int layer) {
    Batch& b = *batch_[layer];
    return b.chained ? batch_[layer - 1]->out : b.in;
  }
  /// Host rows into the layer's own input buffer (which then is its input).
  void SendInput(int layer, const BatchRows& rows) {
    batch_[layer]->chained = false;
    SendRows(rows, &send_rows_, &batch_[layer]->in);
  }

  /// One block per sample over the layer's logits: block reductions of the max and of the
  /// sums, then the delta, in one kernel for kSoftmaxAll. Without `st` the statistics stay
  /// on the device (for QueueStatus); phases that are not run read them from `st`.
  void Softmax(int layer, unsigned phases, SoftmaxStats* st) override {
    const DevRows& z = batch_[layer]->out;
    const int64_t B = z.B;
    DSLIDE_ASSERT(has_labels_ && label_shape_.samples == B, "the softmax needs the batch's labels");
    const bool do_max = phases & kSoftmaxMax, do_sums = phases & kSoftmaxSums,
               do_delta = phases & kSoftmaxDelta;
    DSLIDE_ASSERT(st != nullptr || (do_max && do_sums), "softmax statistics to read");
    sm_mx_.Resize(B);
    sm_red_.Resize(2 * B);
    if (!do_max || !do_sums) {
      float* h = static_cast<float*>(send_misc_.Get(3 * B * sizeof(float)));
      if (!do_max) {
        std::copy(st->mx.begin(), st->mx.end(), h);
        x_.CopyIn(sm_mx_.data(), h, B);
      }
      if (!do_sums) {
        std::copy(st->red.begin(), st->red.end(), h + B);
        x_.CopyIn(sm_red_.data(), h + B, 2 * B);
      }
      send_misc_.Done();
    }
    if (do_delta) batch_[layer]->delta.Resize(B * z.cap);
    gpu::Softmax k;
    k.z = z.View();
    k.do_max = do_max;
    k.do_sums = do_sums;
    k.do_delta = do_delta;
    k.lo = lab_off_.data();
    k.li = lab_ids_.data();
    k.inv_b = 1.0f / static_cast<float>(B);
    k.mx = sm_mx_.data();
    k.red = sm_red_.data();
    k.d = batch_[layer]->delta.data();
    x_.Launch(k);
    if (st == nullptr) return;
    st->Resize(B);
    if (do_max) x_.Download(sm_mx_, st->mx.data(), B);
    if (do_sums) x_.Download(sm_red_, st->red.data(), 2 * B);
  }

  /// The batch's mean loss from the statistics the last Softmax left on the device
  /// (SoftmaxMeanLoss's formula; none for loss_layer < 0) and the layers' non-finite flags
  /// (taken), by one block (StepLoss) into the next slot of a ring in device memory:
  /// nothing waits.
  void QueueStatus(int loss_layer) override {
    if (queued_ == kLossRing) DrainQueue();
    StepLoss k;
    k.B = loss_layer >= 0 ? batch_[loss_layer]->out.B : 0;
    k.n_layers = static_cast<int64_t>(layers_.size());
    k.lo = lab_off_.data();
    k.red = sm_red_.data();
    k.bad = bad_.data();
    k.out = ring_loss_.data() + queued_;
    k.out_bad = ring_bad_.data() + queued_;
    ++queued_;
    x_.Launch(k);
  }
  std::vector<StepStatus> TakeQueued() override {
    DrainQueue();
    std::vector<StepStatus> out;
    out.swap(taken_);
    return out;
  }
  /// The queued entries into taken_, in one wait.
  void DrainQueue() {
    if (queued_ == 0) return;
    const int64_t n = queued_;
    char* p = static_cast<char*>(x_.Stage(n * (sizeof(double) + sizeof(uint64_t))));
    double* h_loss = reinterpret_cast<double*>(p);
    uint64_t* h_bad = reinterpret_cast<uint64_t*>(h_loss + n);
    x_.CopiesAfterCompute();
    x_.CopyOut(h_loss, ring_loss_.data(), n);
    x_.CopyOut(h_bad, ring_bad_.data(), n);
    x_.WaitMark(x_.MarkCopies());
    for (int64_t i = 0; i < n; ++i) taken_.push_back({h_loss[i], h_bad[i]});
    queued_ = 0;
  }

  /// Backward (and with `step` the update) of a layer from its delta; with `in_grad`, this
  /// shard's input gradient into the layer's input-gradient buffer.
  void Backward(int layer, bool in_grad, const AdamStep* step, bool dense_adam) override {
    Layer& L = *layers_[layer];
    DSLIDE_ASSERT(!(L.spec.input_major && in_grad), "the first layer has no input gradient");
    if (L.spec.input_major)
      FirstLayerBackward(L, InRows(layer), *batch_[layer]);
    else
      IndexBatch(L, InRows(layer), *batch_[layer], in_grad);
    // The input gradient is formed from the old weights before the update kernel runs.
    if (step != nullptr) Update(layer, *step, dense_adam);
  }

  /// One rank. Forward: to's input is from's output buffer itself (no copy), read as the
  /// snapshot would be: dense rows for a dense layer. Backward: to's delta is from's input
  /// gradient times ReLU' of to's output (the same padded layout: the input is the output).
  void Chain(int from, int to) override {
    if (to == from + 1) {
      DevRows& out = batch_[from]->out;
      out.dense = spec_.layers[from].dense();
      out.width = spec_.layers[from].out_dim;
      batch_[to]->chained = true;
      return;
    }
    DSLIDE_ASSERT(to == from - 1, "Chain links neighbouring layers");
    const DevRows& act = batch_[to]->out;
    const float* g = batch_[from]->in_grad.data();
    Buf<float>& delta = batch_[to]->delta;
    const int64_t B = act.B, cap = act.cap;
    delta.Resize(B * cap);
    const int64_t* n = act.n.data();
    const float* a = act.vals.data();
    float* d = delta.data();
    x_.For(B * cap,
           [=] DSLIDE_HD(int64_t t) { d[t] = t % cap < n[t / cap] && a[t] > 0.0f ? g[t] : 0.0f; });
  }

  void TopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
            const BatchLabels* labels, SoftmaxStats* st) override {
    DeviceTopK(layer, k, ids, scores, labels, st);
  }

  BatchRows* HostRows(int layer, Rows which, Access access) override {
    Batch& b = *batch_[layer];
    BatchRows& h = b.host[static_cast<int>(which)];
    if (access == Access::kWrite) return &h;
    switch (which) {
      case Rows::kInput:
        HostCopy(InRows(layer), nullptr, &h);
        h.dense = InRows(layer).dense;
        h.width = InRows(layer).width;
        break;
      case Rows::kOutput:
        HostCopy(b.out, nullptr, &h);
        break;
      case Rows::kDelta:
        HostCopy(b.out, &b.delta, &h);
        break;
      case Rows::kInputGrad:
        HostCopy(InRows(layer), &b.in_grad, &h);
        h.dense = InRows(layer).dense;
        h.width = InRows(layer).width;
        break;
    }
    return &h;
  }
  void CommitRows(int layer, Rows which) override {
    Batch& b = *batch_[layer];
    const BatchRows& h = b.host[static_cast<int>(which)];
    switch (which) {
      case Rows::kInput:
        SendInput(layer, h);
        break;
      case Rows::kOutput:
        SendRows(h, &send_rows_, &b.out);
        break;
      case Rows::kDelta:
        SendValues(h, b.out, &send_rows_, &b.delta);
        break;
      case Rows::kInputGrad:
        SendValues(h, InRows(layer), &send_rows_, &b.in_grad);
        break;
    }
  }

  /// Adam on the layer's pending gradient (every row with `dense`); clears it.
  void Update(int layer, const AdamStep& step, bool dense) {
    Layer& L = *layers_[layer];
    if (L.spec.input_major) {
      FirstLayerAdam(L, AdamConsts::Of(step), dense);
      return;
    }
    RowAdam(L, AdamConsts::Of(step), dense);
  }

  /// Input-major layer: gradient rows of the batch's features, by atomics, from the delta
  /// aligned with the layer's output.
  void FirstLayerBackward(Layer& L, const DevRows& in, const Batch& b) {
    const int64_t icap = in.cap;
    const int64_t* xn = in.n.data();
    const int32_t* xid = in.ids.data();
    uint8_t* touched = L.touched.data();
    x_.For(in.B * icap, [=] DSLIDE_HD(int64_t t) {
      if (t % icap < xn[t / icap]) touched[xid[t]] = 1;
    });
    FirstLayerGradient k;
    k.in = in.View();
    k.delta = b.out.View(&b.delta);
    k.cols = L.cols;
    k.begin = L.spec.begin;
    k.g = L.g.data();
    k.gb = L.gb.data();
    k.btouched = L.btouched.data();
    x_.Launch(k);
  }

  /// Adam on the touched feature rows (every row with `dense`), listed on the device: a
  /// scan over the rows' flags places each touched row, then one thread per weight of the
  /// listed rows; the flags are cleared on the way.
  void FirstLayerAdam(Layer& L, const AdamConsts& a, bool dense) {
    const AdamTargets to = Targets(L);
    float* gb = L.gb.data();
    uint8_t* touched = L.touched.data();
    uint8_t* btouched = L.btouched.data();
    const int64_t rows = L.rows;
    L.row_flag.Resize(rows + 1);
    L.row_pos.Resize(rows + 1);
    L.row_list.Resize(std::max<int64_t>(rows, 1));
    uint32_t* flag = L.row_flag.data();
    const uint32_t* pos = L.row_pos.data();
    int32_t* list = L.row_list.data();
    int64_t* count = L.counts.data();
    if (!dense) {
      x_.For(rows + 1, [=] DSLIDE_HD(int64_t r) { flag[r] = r < rows && touched[r] ? 1u : 0u; });
      x_.ExclusiveScan(flag, L.row_pos.data(), rows + 1);
      x_.For(rows + 1, [=] DSLIDE_HD(int64_t r) {
        if (r == rows) {
          count[0] = pos[rows];
        } else if (flag[r]) {
          list[pos[r]] = static_cast<int32_t>(r);
          touched[r] = 0;
        }
      });
    } else {
      x_.For(rows, [=] DSLIDE_HD(int64_t r) { touched[r] = 0; });
    }
    FirstLayerUpdate k;
    k.a = a;
    k.to = to;
    k.max_rows = rows;
    k.cols = L.cols;
    k.dense = dense;
    k.count = count;
    k.list = list;
    k.g = L.g.data();
    x_.Launch(k);
    x_.For(L.spec.local(), [=] DSLIDE_HD(int64_t c) {
      if (!dense && !btouched[c]) return;
      to.Bias(a, c, gb[c]);
      gb[c] = 0.0f;
      btouched[c] = 0;
    });
  }

  /// Row-per-neuron layer: saves the densified input, sorts the non-zero deltas by neuron
  /// and, with `in_grad`, forms this shard's input gradient (from the current weights) in
  /// the batch's input-gradient buffer. The numbers of entries and touched rows stay on the
  /// device (L.counts): the host never waits for them.
  void IndexBatch(Layer& L, const DevRows& in, Batch& b, bool in_grad) {
    const LayerSpec& s = L.spec;
    DSLIDE_ASSERT(!L.pending, "Backward called twice on a layer without an Update between");
    Densify(in, s.in_dim, &L.x);
    const int64_t B = in.B, dcap = b.out.cap, begin = s.begin;
    const int64_t* dn = b.out.n.data();
    const int32_t* did = b.out.ids.data();
    const float* dv = b.delta.data();
    if (in_grad) {
      b.in_grad.Resize(B * in.cap);
      InputGradient k;
      k.in = in.View();
      k.delta = b.out.View(&b.delta);
      k.cols = L.cols;
      k.begin = s.begin;
      k.w = L.w.data();
      k.gin = b.in_grad.data();
      x_.Launch(k);
    }
    // (local neuron, position) keys of the non-zero deltas; the rest sort to the end.
    const int64_t nkeys = B * dcap;
    DSLIDE_CHECK(nkeys < (int64_t{1} << 32), "batch too large for the GPU backend's index");
    L.keys.Resize(std::max<int64_t>(nkeys, 1));
    uint64_t* keys = L.keys.data();
    x_.For(nkeys, [=] DSLIDE_HD(int64_t t) {
      const int64_t i = t / dcap, k = t % dcap;
      keys[t] = k < dn[i] && dv[t] != 0.0f
                    ? (static_cast<uint64_t>(did[t] - begin) << 32) | static_cast<uint64_t>(t)
                    : ~uint64_t{0};
    });
    x_.SortKeys(keys, nkeys);
    // Bounds known on the host: every key an entry, every entry a row of its own.
    L.max_q = std::min<int64_t>(nkeys, s.local());
    L.flags.Resize(nkeys + 1);
    L.qidx.Resize(nkeys + 1);
    L.qrow.Resize(L.max_q + 1);
    L.qoff.Resize(L.max_q + 1);
    L.ent_sample.Resize(nkeys + 1);
    L.ent_delta.Resize(nkeys + 1);
    int64_t* count = L.counts.data();  // [entries, touched rows]
    uint32_t* flags = L.flags.data();
    // The entries: the keys before the first empty one (a binary search), and the start of
    // each run of equal neurons.
    x_.For(1, [=] DSLIDE_HD(int64_t) {
      int64_t lo = 0, hi = nkeys;
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (keys[mid] != ~uint64_t{0})
          lo = mid + 1;
        else
          hi = mid;
      }
      count[0] = lo;
    });
    x_.For(nkeys + 1, [=] DSLIDE_HD(int64_t e) {
      const int64_t nent = count[0];
      flags[e] = e < nent && (e == 0 || (keys[e] >> 32) != (keys[e - 1] >> 32)) ? 1u : 0u;
    });
    const uint32_t* qidx = L.qidx.data();
    x_.ExclusiveScan(flags, L.qidx.data(), nkeys + 1);
    x_.For(1, [=] DSLIDE_HD(int64_t) { count[1] = qidx[count[0]]; });
    // Runs of equal neurons -> touched rows q with their entry ranges.
    int32_t* qrow = L.qrow.data();
    int64_t* qoff = L.qoff.data();
    int32_t* rowq = L.rowq.data();
    int32_t* es = L.ent_sample.data();
    float* ed = L.ent_delta.data();
    x_.For(nkeys + 1, [=] DSLIDE_HD(int64_t e) {
      const int64_t nent = count[0];
      if (e > nent) return;
      if (e == nent) {
        qoff[count[1]] = nent;
        return;
      }
      const uint64_t pos = keys[e] & 0xffffffffu;
      es[e] = static_cast<int32_t>(pos / dcap);
      ed[e] = dv[pos];
      if (flags[e]) {
        const int32_t r = static_cast<int32_t>(keys[e] >> 32);
        qrow[qidx[e]] = r;
        qoff[qidx[e]] = e;
        rowq[r] = static_cast<int32_t>(qidx[e]);
      }
    });
    L.pending = true;
  }

  /// Row-per-neuron layer: the pending gradient of every touched row (or of every row with
  /// `dense`) formed from the saved input, and Adam on it.
  void RowAdam(Layer& L, const AdamConsts& a, bool dense) {
    RowUpdate k;
    k.a = a;
    k.to = Targets(L);
    k.max_rows = dense ? L.spec.local() : L.max_q;
    k.cols = L.cols;
    k.dense = dense;
    k.pending = L.pending;
    k.count = L.counts.data() + 1;
    k.x = L.x.data();
    k.qrow = L.qrow.data();
    k.rowq = L.rowq.data();
    k.es = L.ent_sample.data();
    k.qoff = L.qoff.data();
    k.ed = L.ent_delta.data();
    x_.Launch(k);
    ClearPending(L);
  }

  void ClearPending(Layer& L) {
    if (L.pending) {
      int32_t* rowq = L.rowq.data();
      const int32_t* qrow = L.qrow.data();
      x_.ForCounted(L.max_q, L.counts.data() + 1, 1,
                    [=] DSLIDE_HD(int64_t q) { rowq[qrow[q]] = -1; });
    }
    L.pending = false;
  }

  void RebuildTables(int layer, bool new_hashes) override {
    Layer& L = *layers_[layer];
    const LayerSpec& s = L.spec;
    if (s.dense()) return;
    const LshConfig& c = opt_.lsh;
    if (new_hashes || !L.hash) {
      ++L.hash_version;
      MakeHash(layer);
    }
    const int64_t n = s.local(), in_dim = s.in_dim;
    const bool im = s.input_major;
    const float* w = L.w.data();
    const float* b = L.b.data();
    norm2_.Resize(n);
    double* norm2 = norm2_.data();
    x_.For(n, [=] DSLIDE_HD(int64_t i) {
      double a = static_cast<double>(b[i]) * b[i];
      for (int64_t j = 0; j < in_dim; ++j) {
        const double wij = w[im ? j * n + i : i * in_dim + j];
        a = AddProductRounded(a, wij, wij);  // the CPU's roundings: the tables depend on it
      }
      norm2[i] = a;
    });
    std::vector<double> hn(n);
    x_.Download(norm2_, hn.data(), n);
    double max_norm2 = 0.0;
    for (double v : hn) max_norm2 = std::max(max_norm2, v);
    const double inv_m = c.mips && max_norm2 > 0 ? 1.0 / std::sqrt(max_norm2) : 1.0;
    const bool mips = c.mips;
    const HashView h = L.dhash;
    const int nt = h.l, bits = h.table_bits;
    const int64_t nh = h.num_hashes, nb = int64_t{1} << bits;
    DSLIDE_CHECK(static_cast<uint64_t>(nt) << bits <= (uint64_t{1} << 32),
                 "the GPU backend needs L * 2^bits <= 2^32 (L=", nt, ", bits=", bits, ")");
    // Positions in the sorted (table, bucket, neuron) keys are 32-bit.
    DSLIDE_CHECK(static_cast<uint64_t>(nt) * static_cast<uint64_t>(n) < (uint64_t{1} << 32),
                 "the GPU backend needs L * (neurons of a shard) < 2^32 (L=", nt, ", neurons=", n,
                 "): use more ranks or fewer tables");
    // Hash the rows [w, b] (MIPS-transformed), a chunk of neurons at a time.
    L.keys.Resize(static_cast<size_t>(nt) * n);
    uint64_t* keys = L.keys.data();
    const int64_t chunk = std::min<int64_t>(n, 65536);
    arg_.Resize(chunk * nh);
    int32_t* arg = arg_.data();
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      HashRows k;
      k.h = h;
      k.c0 = c0;
      k.count = std::min(n, c0 + chunk) - c0;
      k.n = n;
      k.in_dim = in_dim;
      k.input_major = im;
      k.mips = mips;
      k.inv_m = inv_m;
      k.w = w;
      k.b = b;
      k.norm2 = norm2;
      k.arg = arg;
      k.keys = keys;
      x_.Launch(k);
    }
    const int64_t N = static_cast<int64_t>(nt) * n;
    x_.SortKeys(keys, N);
    // Run of each (table, bucket), capped sizes, and their offsets.
    run_start_.Resize(nt * nb);
    run_end_.Resize(nt * nb);
    Fill(run_start_.data(), nt * nb, uint32_t{0});
    Fill(run_end_.data(), nt * nb, uint32_t{0});
    uint32_t* rs = run_start_.data();
    uint32_t* re = run_end_.data();
    items_.Resize(N);
    int32_t* items = items_.data();
    x_.For(N, [=] DSLIDE_HD(int64_t p) {
      const uint64_t tb = keys[p] >> 32;
      items[p] = static_cast<int32_t>(keys[p] & 0xffffffffu);
      if (p == 0 || (keys[p - 1] >> 32) != tb) rs[tb] = static_cast<uint32_t>(p);
      if (p == N - 1 || (keys[p + 1] >> 32) != tb) re[tb] = static_cast<uint32_t>(p + 1);
    });
    const int cap = c.bucket_capacity;
    sizes_.Resize(nt * nb + 1);
    uint32_t* sz = sizes_.data();
    x_.For(nt * nb + 1, [=] DSLIDE_HD(int64_t u) {
      const uint32_t cnt = u < nt * nb ? re[u] - rs[u] : 0u;
      sz[u] = cnt < static_cast<uint32_t>(cap) ? cnt : static_cast<uint32_t>(cap);
    });
    gpos_.Resize(nt * nb + 1);
    x_.ExclusiveScan(sz, gpos_.data(), nt * nb + 1);
    const uint32_t* gp = gpos_.data();
    const int64_t total = x_.Read(gpos_, nt * nb);
    L.tids.Resize(std::max<int64_t>(total, 1));
    L.toff.Resize(nt * (nb + 1));
    L.tbase.Resize(nt + 1);
    int32_t* tids = L.tids.data();
    uint32_t* toff = L.toff.data();
    int64_t* tbase = L.tbase.data();
    const bool fifo = c.insert == InsertPolicy::kFifo;
    const uint64_t bseed = StreamSeed(opt_.seed, streams::kHash, layer, ++L.rebuilds, spec_.rank);
    FillBuckets k;
    k.nt = nt;
    k.cap = cap;
    k.nb = nb;
    k.fifo = fifo;
    k.seed = bseed;
    k.gp = gp;
    k.rs = rs;
    k.re = re;
    k.items = items;
    k.tids = tids;
    k.toff = toff;
    k.tbase = tbase;
    x_.Launch(k);
    L.host_base.resize(nt + 1);
    x_.Download(L.tbase, L.host_base.data(), nt + 1);
  }

  /// Draws the hash functions of version L.hash_version and copies them to the device.
  void MakeHash(int layer) {
    Layer& L = *layers_[layer];
    const LshConfig& c = opt_.lsh;
    L.hash = std::make_unique<LshHash>(
        c.family, L.spec.in_dim + 1 + (c.mips ? 1 : 0), c.k, c.l, c.bin_size,
        StreamSeed(opt_.seed, streams::kHash, layer, L.hash_version, spec_.rank));
    const HashView hv = L.hash->View();
    const int64_t nh = hv.num_hashes, dim = hv.dim;
    const bool srp = hv.family == HashView::kSrp;
    x_.Upload(&L.proj_off, hv.proj_off, srp ? nh + 1 : 0);
    x_.Upload(&L.proj_idx, hv.proj_idx, L.hash->proj_size());
    x_.Upload(&L.proj_sign, hv.proj_sign, L.hash->proj_size());
    x_.Upload(&L.inv_off, hv.inv_off, dim + 1);
    x_.Upload(&L.inv_hash, hv.inv_hash, L.hash->inv_size());
    x_.Upload(&L.inv_sign, hv.inv_sign, srp ? L.hash->inv_size() : 0);
    x_.Upload(&L.bins, hv.bins, L.hash->bins_size());
    L.dhash = hv;
    L.dhash.proj_off = L.proj_off.data();
    L.dhash.proj_idx = L.proj_idx.data();
    L.dhash.proj_sign = L.proj_sign.data();
    L.dhash.inv_off = L.inv_off.data();
    L.dhash.inv_hash = L.inv_hash.data();
    L.dhash.inv_sign = L.inv_sign.data();
    L.dhash.bins = L.bins.data();
    DSLIDE_CHECK(hv.l <= 64 * 1024, "too many tables");
  }

  /// Exact top-k (LayerBackend::TopK) on the layer's input rows.
  void DeviceTopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
                  const BatchLabels* labels, SoftmaxStats* st) {
    Layer& L = *layers_[layer];
    const LayerSpec& s = L.spec;
    DSLIDE_ASSERT(!s.input_major, "exact top-k needs a row-per-neuron output layer");
    DSLIDE_CHECK(k >= 1 && k <= TopKSegments::kMaxK,
                 "top-k on the GPU supports k <= ", TopKSegments::kMaxK, ", got ", k);
    const DevRows& in = InRows(layer);
    Densify(in, s.in_dim, &xd_);
    const int64_t B = in.B, n = s.local(), cols = L.cols, begin = s.begin;
    const int64_t nseg = (n + kTopKSegment - 1) / kTopKSegment;
    topk_ids_.Resize(B * nseg * k);
    topk_sc_.Resize(B * nseg * k);
    // Per (sample, segment): the largest logit and the sum of exp(z - max) over the segment.
    topk_mx_.Resize(B * nseg);
    topk_sum_.Resize(B * nseg);
    const float* x = xd_.data();
    const float* w = L.w.data();
    const float* bias = L.b.data();
    {
      TopKSegments t;
      t.k = k;
      t.B = B;
      t.n = n;
      t.nseg = nseg;
      t.segment = kTopKSegment;
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
    // Each sample's nseg segment lists, one after another: one list of nseg * k.
    TopKSelector top;
    for (int64_t i = 0; i < B; ++i) {
      top.Clear();
      top.PushAll(hsc.data() + i * nseg * k, hid.data() + i * nseg * k, nseg * k);
      top.Take(k, ids->data() + i * k, scores->data() + i * k);
    }
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

  /// Into host memory, or straight into the exchange buffer when `out` points into it
  /// (then scaled there, and complete when the host returns: MPI reads it outside the
  /// backend's stream).
  int64_t ExportGradient(int layer, float* out, float scale) const override {
    const Layer& L = *layers_[layer];
    const size_t nw = static_cast<size_t>(L.rows) * L.cols;
    const int64_t size = static_cast<int64_t>(nw) + L.spec.local();
    if (out == nullptr) return size;
    const bool on_device = InExchange(out);
    if (on_device) {
      DSLIDE_ASSERT(InExchange(out + size - 1), "a gradient beyond the exchange buffer");
      ExportGradientTo(L, out);
      if (scale != 1.0f) x_.For(size, [=] DSLIDE_HD(int64_t t) { out[t] *= scale; });
      x_.Synchronize();
    } else {
      ExportGradientTo(L, out);
      if (scale != 1.0f)
        for (int64_t t = 0; t < size; ++t) out[t] *= scale;
    }
    return size;
  }
  /// The pending gradient in storage order into `out` (host memory or the exchange buffer).
  void ExportGradientTo(const Layer& L, float* out) const {
    const size_t nw = static_cast<size_t>(L.rows) * L.cols;
    const bool on_device = InExchange(out);
    if (L.spec.input_major) {
      if (on_device) {
        const float* g = L.g.data();
        const float* gb = L.gb.data();
        x_.For(static_cast<int64_t>(nw + L.spec.local()), [=] DSLIDE_HD(int64_t t) {
          out[t] = t < static_cast<int64_t>(nw) ? g[t] : gb[t - nw];
        });
        return;
      }
      x_.Download(L.g, out, nw);
      x_.Download(L.gb, out + nw, L.spec.local());
      return;
    }
    Buf<float> dg;
    float* g = out;
    if (on_device) {
      Fill(out, static_cast<int64_t>(nw + L.spec.local()), 0.0f);
    } else {
      std::fill(out, out + nw + L.spec.local(), 0.0f);
      if (!L.pending) return;
      Zeros(&dg, nw + L.spec.local());
      g = dg.data();
    }
    if (!L.pending) return;
    const int64_t cols = L.cols;
    const float* x = L.x.data();
    const int32_t* qrow = L.qrow.data();
    const int64_t* qoff = L.qoff.data();
    const int32_t* es = L.ent_sample.data();
    const float* ed = L.ent_delta.data();
    x_.ForCounted(L.max_q * cols, L.counts.data() + 1, cols, [=] DSLIDE_HD(int64_t t) {
      const int64_t q = t / cols, j = t % cols, r = qrow[q];
      float gbias;
      RowGradient(qoff, es, ed, x, cols, q, j, g + r * cols + j, &gbias);
      if (j == 0) g[nw + r] = gbias;
    });
    if (!on_device) x_.Download(dg, out, nw + L.spec.local());
  }
  void ApplyGradient(int layer, const float* grad, const AdamStep& step) override {
    Layer& L = *layers_[layer];
    const size_t nw = static_cast<size_t>(L.rows) * L.cols;
    const float* g = grad;
    if (!InExchange(grad)) {
      x_.Upload(&grad_, grad, nw + L.spec.local());
      g = grad_.data();
    }
    const AdamConsts a = AdamConsts::Of(step);
    const AdamTargets to = Targets(L);
    x_.For(static_cast<int64_t>(nw), [=] DSLIDE_HD(int64_t t) { to.Weight(a, t, g[t]); });
    x_.For(L.spec.local(), [=] DSLIDE_HD(int64_t c) { to.Bias(a, c, g[nw + c]); });
    if (L.spec.input_major) {
      Fill(L.g.data(), static_cast<int64_t>(nw), 0.0f);
      Fill(L.gb.data(), L.spec.local(), 0.0f);
      Fill(L.touched.data(), L.rows, uint8_t{0});
      Fill(L.btouched.data(), L.spec.local(), uint8_t{0});
    }
    ClearPending(L);
  }
  float* ExchangeBuffer(int64_t n, bool zero) override {
    if (!exchange_on_device_) return nullptr;
    exch_.Resize(static_cast<size_t>(n));
    if (zero) {
      Fill(exch_.data(), n, 0.0f);
      x_.Synchronize();  // MPI reads the buffer outside the backend's stream
    }
    return exch_.data();
  }
  bool InExchange(const float* p) const {
    return exch_.size() > 0 && p >= exch_.data() && p < exch_.data() + exch_.size();
  }
  void SaveLayer(int layer, unsigned parts, LayerState* st) const override {
    const Layer& L = *layers_[layer];
    const LayerSpec& s = L.spec;
    DSLIDE_ASSERT(!(parts & (kMoments | kTables)) || !L.pending,
                  "checkpoint with a pending gradient");
    if (parts & kWeights) {
      StorageToRows(s, Host(L.w), &st->w);
      st->b = Host(L.b);
    }
    if (parts & kMoments) {
      StorageToRows(s, Host(L.m), &st->m);
      StorageToRows(s, Host(L.v), &st->v);
      st->mb = Host(L.mb);
      st->vb = Host(L.vb);
    }
    if (parts & kGradient) {
      std::vector<float> flat(ExportGradient(layer, nullptr, 1.0f));
      ExportGradient(layer, flat.data(), 1.0f);
      const size_t nw = flat.size() - s.local();
      StorageToRows(s, std::vector<float>(flat.begin(), flat.begin() + nw), &st->gw);
      st->gb.assign(flat.begin() + nw, flat.end());
    }
    if (!(parts & kTables)) return;
    st->hash_version = L.hash_version;
    st->rebuilds = L.rebuilds;
    st->table_offsets.clear();
    st->table_ids.clear();
    st->table_sizes.clear();
    if (s.dense()) return;
    st->table_offsets = Host(L.toff);
    st->table_ids = Host(L.tids);
    st->table_ids.resize(L.host_base.back());
    for (size_t t = 0; t + 1 < L.host_base.size(); ++t)
      st->table_sizes.push_back(L.host_base[t + 1] - L.host_base[t]);
  }
  void LoadLayer(int layer, unsigned parts, const LayerState& st) override {
    Layer& L = *layers_[layer];
    const LayerSpec& s = L.spec;
    const size_t n = static_cast<size_t>(s.local()) * s.in_dim;
    DSLIDE_ASSERT(!(parts & kGradient), "a pending gradient is not loaded");
    CheckLayerState(s, layer, st, parts);
    std::vector<float> tmp;
    if (parts & kWeights) {
      RowsToStorage(s, st.w, &tmp);
      x_.Upload(&L.w, tmp.data(), n);
      x_.Upload(&L.b, st.b.data(), st.b.size());
    }
    if (parts & kMoments) {
      RowsToStorage(s, st.m, &tmp);
      x_.Upload(&L.m, tmp.data(), n);
      RowsToStorage(s, st.v, &tmp);
      x_.Upload(&L.v, tmp.data(), n);
      x_.Upload(&L.mb, st.mb.data(), st.mb.size());
      x_.Upload(&L.vb, st.vb.data(), st.vb.size());
    }
    if (!(parts & kTables) || s.dense()) return;
    L.hash_version = std::max<int64_t>(st.hash_version, 1);
    MakeHash(layer);
    if (st.table_sizes.empty()) {
      L.rebuilds = st.rebuilds - 1;  // RebuildTables counts this build again
      RebuildTables(layer, /*new_hashes=*/false);
      return;
    }
    // Validate through LshTables::Import (the CPU's checks), then copy.
    LshTables check(opt_.lsh.l, L.hash->table_bits(), opt_.lsh.bucket_capacity, opt_.lsh.insert);
    check.Import(st.table_offsets, st.table_ids, st.table_sizes, s.local());
    x_.Upload(&L.toff, st.table_offsets.data(), st.table_offsets.size());
    UploadAtLeastOne(st.table_ids, &L.tids);
    L.host_base.assign(1, 0);
    for (int64_t sz : st.table_sizes) L.host_base.push_back(L.host_base.back() + sz);
    x_.Upload(&L.tbase, L.host_base.data(), L.host_base.size());
    L.rebuilds = st.rebuilds;
  }
  BackendInfo Info() const override {
    BackendInfo info;
    info.name = X::kName;
    info.asynchronous = X::kDevice;
    info.traffic = x_.Traffic();
    size_t& bytes = info.state_bytes;
    for (const auto& L : layers_) {
      bytes += L->w.bytes() + L->m.bytes() + L->v.bytes() + L->g.bytes();
      bytes += L->b.bytes() + L->mb.bytes() + L->vb.bytes() + L->gb.bytes();
      bytes += L->touched.bytes() + L->btouched.bytes() + L->rowq.bytes();
      bytes += L->toff.bytes() + L->tids.bytes();
    }
    return info;
  }

  static constexpr int64_t kTopKSegment = 256;

 private:
  // The executor first: every device array below is freed before its streams go.
  mutable X x_;
  GpuTuning tune_;
  std::vector<std::unique_ptr<Layer>> layers_;
  ModelSpec spec_;
  BackendOptions opt_;  // the LSH settings and the seed of every random stream
  // The batch: per layer, the labels (on the device, with their shape on the
  // host for the selection's sizes) and the softmax statistics.
  std::vector<std::unique_ptr<Batch>> batch_;
  struct LabelShape {
    int64_t samples = 0, total = 0, most = 0;  // samples, labels, most labels of a sample
  };
  LabelShape label_shape_;  // of the labels on the device (lab_off_, lab_ids_)
  bool has_labels_ = false;
  Buf<int64_t> lab_off_;
  Buf<int32_t> lab_ids_;
  Buf<float> sm_mx_, sm_red_;
  // What the host reads back: per queued step the mean loss and the layers whose updates went
  // non-finite (a ring of kLossRing in device memory, queued_ of them not yet read, taken_
  // read and not yet handed out); every layer's flag (bad_), which QueueStatus takes.
  static constexpr int64_t kLossRing = 1024;
  Buf<double> ring_loss_;
  Buf<uint64_t> ring_bad_;
  int64_t queued_ = 0;
  std::vector<StepStatus> taken_;
  Buf<uint32_t> bad_;
  // Pinned stages of what goes up: rows, labels, the rest (softmax statistics).
  typename X::SendStage send_rows_{&x_}, send_labels_{&x_}, send_misc_{&x_};
  Buf<int64_t> raw_off_;
  Buf<int32_t> raw_ids_;
  Buf<float> raw_vals_;
  // Data parallelism: the fused gradient in device memory (CUDA-aware MPI).
  bool exchange_on_device_ = false;
  Buf<float> exch_;
  // Per-step scratch, reused.
  DevRows q_;
  Buf<float> xd_, acc_, grad_, topk_sc_, topk_mx_, topk_sum_;
  Buf<int32_t> arg_, items_, set_keys_, set_counts_, set_first_, boff_, cand_, order_, forced_ids_,
      shared_, fill_, fill_own_, topk_ids_, topk_lrow_;
  Buf<uint8_t> set_stamps_;
  Buf<uint32_t> bkt_, run_start_, run_end_, sizes_, gpos_;
  Buf<int64_t> topk_lsample_, shared_n_, n_forced_, pre_n_;
  Buf<double> norm2_;
};

}  // namespace dslide::gpu
