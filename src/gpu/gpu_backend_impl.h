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
// This header declares the class (its state and small helpers); its members are defined
// by phase, and instantiated for the executor their compiler serves
// (gpu_backend_instantiate.h), in
//   backend_batch.cu    host rows in and out of the device's padded layout, the labels,
//                       the one-rank chain
//   backend_exchange.cu the snapshot exchange's packing and regrouping (RowExchange, P
//                       ranks; in device memory under CUDA-aware MPI)
//   backend_select.cu   the query and the active sets
//   backend_forward.cu  the activations
//   backend_softmax.cu  softmax, the queued loss and non-finite flags
//   backend_backward.cu backward and Adam
//   backend_rebuild.cu  hash functions and table rebuilds
//   backend_topk.cu     exact top-k and the full softmax's statistics
//   backend_state.cu    Init, checkpoints, the data-parallel gradient, Info
//
// Per layer the device holds weights, biases, Adam moments, the LSH functions and tables,
// and the batch: the layer's input and output rows, its delta and its input gradient,
// padded per sample. With one rank a step sends up the data rows and the labels
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

#include "backend/layer_backend.h"
#include "common/error.h"
#include "common/hd.h"
#include "gpu/device_choice.h"
#include "gpu/gpu_tuning.h"
#include "gpu/kernels/kernels.h"
#include "lsh/budget_sampler.h"
#include "lsh/lsh_hash.h"
#include "lsh/lsh_kernels.h"
#include "lsh/select_kernel.h"
#include "model/backend_streams.h"
#include "model/layer_layout.h"
#include "model/topk.h"

namespace dslide::gpu {

template <class X>
class GpuBackendT : public LayerBackend, public RowExchange {
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
    // The log-Q correction (CorrectsLogQ): per output slot, the log of the active id's chance
    // of being drawn, which Forward subtracts (valid: this batch's selection wrote it).
    Buf<float> log_q;
    bool log_q_valid = false;
    BatchRows host[4];  // by Rows
    // The snapshot exchange in device memory (RowExchange): the output's counts (host) and
    // packed offsets; the input's segments (P x B) and their rank-major positions.
    std::vector<int64_t> out_n;
    Buf<int64_t> out_pos, in_seg, in_src;
    int64_t in_total = 0;
  };

  struct Layer {
    int index = 0;
    LayerSpec spec;
    int64_t rows = 0, cols = 0;
    Buf<float> w, m, v, b, mb, vb;
    Buf<uint16_t> m16, v16, mb16, vb16;  // --state bf16: the moments (m, v, mb, vb empty)
    Buf<int64_t> row_step, bias_step;    // each storage row's and bias's last Adam step
    Buf<float> g, gb;                    // input-major layer: gradient rows
    Buf<uint8_t> touched, btouched;      // input-major layer
    Buf<uint32_t> row_flag, row_pos;     // input-major layer: the touched rows, listed
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
    RebuildPlan plan;                // the build the tables are of (hash: its functions, if any)
    std::vector<int64_t> host_base;  // L + 1
  };

  void Init(const ModelSpec& spec, const BackendOptions& options) override;

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
    AdamTargets to{L.w.data(),  L.m.data(),  L.v.data(),           L.b.data(),
                   L.mb.data(), L.vb.data(), bad_.data() + L.index};
    to.row_step = L.row_step.data();
    to.bias_step = L.bias_step.data();
    to.cols = L.cols;
    if (opt_.bf16_moments) {
      to.m16 = L.m16.data();
      to.v16 = L.v16.data();
      to.mb16 = L.mb16.data();
      to.vb16 = L.vb16.data();
      to.bias_pos = L.rows * L.cols;
      to.stream = static_cast<uint32_t>(L.index);
    }
    return to;
  }

  /// After an update at step t, the last-step stamps (AdamTargets::row_step) of the rows it
  /// covered: every storage row with `dense`, else the first *count (at most max_rows) of
  /// `list`, the count read on the device.
  void StampRows(Layer& L, int64_t t, bool dense, int64_t max_rows = 0,
                 const int64_t* count = nullptr, const int32_t* list = nullptr) {
    int64_t* row_step = L.row_step.data();
    if (dense)
      Fill(row_step, L.rows, t);
    else
      x_.ForCounted(max_rows, count, 1, [=] DSLIDE_HD(int64_t q) { row_step[list[q]] = t; });
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
  void SendRows(const BatchRows& r, typename X::SendStage* stage, DevRows* d);

  /// Values of the padded layout `like` (a layer's input or output) from host rows laid out
  /// like it (the same counts per sample), through `stage`.
  void SendValues(const BatchRows& r, const DevRows& like, typename X::SendStage* stage,
                  Buf<float>* to);

  /// Device rows (with the values of `vals`, or their own) as host rows, strided by cap.
  void HostCopy(const DevRows& d, const Buf<float>* vals, BatchRows* r) const;
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

  /// The rows as a dense B x width matrix (ids index the columns; dense rows are 0..n-1);
  /// `by_column`: its transpose, width x B, a column per row.
  void Densify(const DevRows& d, int64_t width, Buf<float>* out, bool by_column = false) const;

  // ---- The step on the device ----

  void SetLabels(const BatchLabels* labels) override;

  /// The layer's active neurons for its input into its output rows.
  void Select(int layer, bool with_labels, int64_t iter) override;
  /// Each input row's bucket in every table of layer L (QueryHash) into bkt_.
  void HashQueries(Layer& L, const DevRows& in);
  /// A dense layer's active neurons: all of its shard, for each of the B samples.
  void SelectAll(const LayerSpec& s, int64_t B, DevRows* out);
  /// The batch's shared fill (BatchFill, one block) of `draw` with the n_lab batch labels
  /// `li`, into shared_ (sized for it).
  void DrawBatchFill(const LayerSpec& s, const ShardDraw& draw, int64_t n_lab, const int32_t* li);

  /// The query rows of a layer input: the rows themselves for dense inputs (the bias
  /// coordinate is added by the kernel), else each row with the coordinate (in_dim, 1).
  const DevRows& QueryRows(const DevRows& in, int64_t in_dim);

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
  void Forward(int layer) override;
  /// The output's sampled logits corrected by the selection's log-Q (where it wrote one).
  void SubtractLogQ(int layer);

  /// A layer's input rows: its own buffer, or after Chain the previous layer's output.
  DevRows& InRows(int layer) {
    Batch& b = *batch_[layer];
    return b.chained ? batch_[layer - 1]->out : b.in;
  }
  /// Host rows into the layer's own input buffer (which then is its input).
  void SendInput(int layer, const BatchRows& rows);

  /// One block per sample over the layer's logits: block reductions of the max and of the
  /// sums, then the delta, in one kernel (SoftmaxPhases with kSoftmaxAll); the statistics
  /// stay on the device (for QueueStatus).
  void Softmax(int layer) override;
  void SoftmaxPartials(int layer, SoftmaxStats* st) override;
  void SoftmaxDelta(int layer, const SoftmaxStats& st) override;
  /// The softmax kernel with `phases` (softmax.h); the phases not run read their statistics
  /// from `in`; with `out`, the statistics run come back to the host.
  void SoftmaxPhases(int layer, unsigned phases, const SoftmaxStats* in, SoftmaxStats* out);

  /// The batch's mean loss from the statistics the last Softmax left on the device
  /// (SoftmaxMeanLoss's formula; none for loss_layer < 0) and the layers' non-finite flags
  /// (taken), by one block (StepLoss) into the next slot of a ring in device memory:
  /// nothing waits.
  void QueueStatus(int loss_layer) override;
  std::vector<StepStatus> TakeQueued() override;
  /// The queued entries into taken_, in one wait.
  void DrainQueue();

  /// Backward of a layer from its delta (and with BackwardStep the update, after the input
  /// gradient of the layers above the first is formed from the old weights).
  void Backward(int layer) override;
  void BackwardStep(int layer, const AdamStep& step) override;

  /// One rank. Forward: to's input is from's output buffer itself (no copy), read as the
  /// snapshot would be: dense rows for a dense layer. Backward: to's delta is from's input
  /// gradient times ReLU' of to's output (the same padded layout: the input is the output).
  void Chain(int from, int to) override;
  void Dropout(int layer, const DropoutStep& d, bool backward) override;

  void TopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
            const BatchLabels* labels, SoftmaxStats* st) override;

  BatchRows* HostRows(int layer, Rows which, Access access) override;
  void CommitRows(int layer, Rows which) override;

  /// Adam on the layer's pending gradient (every row with `dense`); clears it.
  void Update(int layer, const AdamStep& step, bool dense);

  /// Input-major layer: gradient rows of the batch's features, by atomics, from the delta
  /// aligned with the layer's output.
  void FirstLayerBackward(Layer& L, const DevRows& in, const Batch& b);

  /// Adam on the touched feature rows (every row with `dense`), listed on the device: a
  /// scan over the rows' flags places each touched row, then one thread per weight of the
  /// listed rows; the flags are cleared on the way.
  void FirstLayerAdam(Layer& L, const AdamConsts& a, bool dense);

  /// Row-per-neuron layer: saves the densified input, sorts the non-zero deltas by neuron
  /// and forms this shard's input gradient (from the current weights) in the batch's
  /// input-gradient buffer. The numbers of entries and touched rows stay on the
  /// device (L.counts): the host never waits for them.
  void IndexBatch(Layer& L, const DevRows& in, Batch& b);

  /// Row-per-neuron layer: the pending gradient of every touched row (or of every row with
  /// `dense`) formed from the saved input, and Adam on it.
  void RowAdam(Layer& L, const AdamConsts& a, bool dense);

  void ClearPending(Layer& L);

  void RebuildTables(int layer, const RebuildPlan& plan) override;
  /// The sort keys of every neuron's bucket in every table (HashRows, by chunks of neurons)
  /// into L.keys, the rows scaled by inv_m (MIPS: with the norms norm2).
  void HashLayerRows(Layer& L, const double* norm2, double inv_m);
  /// The tables (L.tids, L.toff, L.tbase) from the sorted keys: each bucket's run, capped
  /// and filled as the CPU fills it (FillBuckets) with the stream of rebuild `seed`.
  void FillTables(Layer& L, uint64_t seed);

  /// Draws the hash functions of L.plan (from its hash_seed) and copies them to the device.
  void MakeHash(int layer);

  /// Exact top-k (LayerBackend::TopK) on the layer's input rows.
  void DeviceTopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
                  const BatchLabels* labels, SoftmaxStats* st);

  int64_t GradientSize(int layer) const override;
  /// Into host memory, or straight into the exchange buffer when `out` points into it
  /// (then scaled there, and complete when the host returns: MPI reads it outside the
  /// backend's stream).
  void ExportGradient(int layer, float* out, float scale) const override;
  /// The pending gradient in storage order into `out` (host memory or the exchange buffer).
  void ExportGradientTo(const Layer& L, float* out) const;
  void ApplyGradient(int layer, const float* grad, const AdamStep& step) override;
  float* ExchangeBuffer(int64_t n, bool zero) override;
  RowExchange& InPlaceExchange() override { return *this; }
  // RowExchange (backend_exchange.cu): packing and regrouping by kernels; the buffers MPI
  // reads are in device memory (synchronised first) under CUDA-aware MPI, else host copies
  // of the packed entries.
  std::vector<int64_t> OutputCounts(int layer) override;
  ExchangeBuffers PackOutput(int layer, bool with_ids, int64_t total) override;
  void UnpackInput(int layer, const std::vector<int64_t>& seg, bool dense, int64_t width) override;
  ExchangeBuffers PackInputGrad(int layer, int64_t mine) override;
  void UnpackDelta(int layer) override;
  /// Where the collectives read n packed entries of `dev`: the buffer itself under
  /// CUDA-aware MPI, else a host copy in `host`.
  template <class T>
  const T* SendFrom(const Buf<T>& dev, std::vector<T>* host, int64_t n) {
    if (exchange_on_device_) return dev.data();
    host->resize(std::max<int64_t>(n, 1));
    x_.Download(dev, host->data(), n);
    return host->data();
  }
  /// Where the collectives write n entries meant for `dev`: the buffer itself under
  /// CUDA-aware MPI, else `host`, which Received then takes up.
  template <class T>
  T* RecvInto(Buf<T>* dev, std::vector<T>* host, int64_t n) {
    if (exchange_on_device_) {
      dev->Resize(std::max<int64_t>(n, 1));
      return dev->data();
    }
    host->resize(std::max<int64_t>(n, 1));
    return host->data();
  }
  template <class T>
  void Received(Buf<T>* dev, const std::vector<T>& host, int64_t n) {
    if (!exchange_on_device_) x_.Upload(dev, host.data(), n);
  }
  bool InExchange(const float* p) const {
    return exch_.size() > 0 && p >= exch_.data() && p < exch_.data() + exch_.size();
  }
  void SaveLayer(int layer, unsigned parts, LayerState* st) const override;
  void LoadLayer(int layer, unsigned parts, const LayerState& st) override;
  BackendCapabilities Capabilities() const override;
  BackendInfo Info() const override;

  static constexpr int64_t kTopKSegment = 256;

 private:
  // The executor first: every device array below is freed before its streams go.
  mutable X x_;
  GpuTuning tune_;
  std::vector<std::unique_ptr<Layer>> layers_;
  ModelSpec spec_;
  BackendOptions opt_;  // the LSH settings, the seed of every random stream, dense Adam
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
  // Collectives on device memory (CUDA-aware MPI): the fused gradient of data parallelism,
  // the snapshot exchange's send and receive buffers.
  bool exchange_on_device_ = false;
  Buf<float> exch_, snap_send_, snap_recv_, snap_grad_;
  std::vector<float> host_exchange_;  // the fused gradient where collectives read host memory
  Buf<int32_t> snap_send_ids_, snap_recv_ids_;
  // Without CUDA-aware MPI: the packed entries staged in host memory.
  std::vector<float> host_send_, host_recv_, host_grad_;
  std::vector<int32_t> host_send_ids_, host_recv_ids_;
  int64_t snap_mine_ = 0;
  // Per-step scratch, reused.
  DevRows q_;
  Buf<float> xd_, acc_, grad_, topk_sc_, topk_mx_, topk_sum_;
  Buf<int32_t> arg_, items_, set_keys_, set_counts_, set_first_, boff_, cand_, order_, forced_ids_,
      shared_, fill_, fill_own_, fill_sort_, topk_ids_, topk_lrow_;
  Buf<uint8_t> set_stamps_;
  Buf<uint32_t> bkt_, run_start_, run_end_, sizes_, gpos_;
  Buf<int64_t> topk_lsample_, shared_n_, n_forced_;
  Buf<double> norm2_;
  Buf<uint64_t> sort_keys_;
  Buf<float> batch_q_;  // BatchLabelChances of the output shard for batch_q_of_ samples
  int64_t batch_q_of_ = 0;
};

}  // namespace dslide::gpu
