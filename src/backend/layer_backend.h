// The seam between the trainer (and the snapshot exchange) and the devices: one interface,
// LayerBackend, for one rank's shard of every layer: the step's phases on the backend's own
// batch buffers, table rebuilds, exact top-k, state in and out, and the gradient of data
// parallelism. The CPU and GPU backends implement it; nothing above it knows which one runs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/device_traffic.h"
#include "common/error.h"
#include "config/lsh_config.h"
#include "data/batch_rows.h"
#include "lsh/select_kernel.h"
#include "model/adam.h"
#include "model/dropout.h"
#include "model/model.h"
#include "model/softmax.h"

namespace dslide {

/// Wall-clock split of a step, accumulated by the caller.
struct PhaseTimes {
  double query = 0, forward = 0, backward = 0, update = 0, rebuild = 0, comm = 0;
  double backward_update = 0;  // Backward calls with a step (backward and Adam, fused)
};

/// The parts of a layer's state that SaveLayer and LoadLayer move (bits of a mask).
enum LayerPart : unsigned {
  kWeights = 1,   ///< w, b
  kMoments = 2,   ///< Adam's m, v, mb, vb
  kTables = 4,    ///< the LSH tables and their versions (sparse layers)
  kGradient = 8,  ///< the pending gradient gw, gb (SaveLayer only)
  kCheckpoint = kWeights | kMoments | kTables,
};

/// One build of a sparse layer's LSH tables, decided above the seam the same way for every
/// backend (TablePlans, train/table_plans.h): which hash functions, and the seed of the
/// buckets' insertion order. The tables are those of the layer's weights at the build.
struct RebuildPlan {
  int64_t hash_version = 0;  ///< the hash functions' draw: 1 the first, one more per redraw
  uint64_t hash_seed = 0;    ///< the seed they are drawn from
  int64_t rebuild = 0;       ///< the build's count: 1 the first
  uint64_t table_seed = 0;   ///< the seed of the insertion order (reservoir, FIFO)
};

/// One layer's shard, rows per neuron (local x in_dim): what a checkpoint keeps, and the
/// pending gradient (for tests).
struct LayerState {
  std::vector<float> w, b, m, v, mb, vb;
  /// (kMoments) The step of each weight row's and each bias's last Adam step (0: none yet),
  /// which the next lazy step catches up from (AdamCatchUp): a row per neuron (local
  /// entries), or for an input-major layer a row per input (in_dim, the same on every
  /// rank); a bias per neuron. Empty: the rows owe no steps (a checkpoint of an earlier
  /// version).
  std::vector<int64_t> row_step, bias_step;
  std::vector<float> gw, gb;  ///< the pending gradient (kGradient)
  RebuildPlan tables_plan;    ///< the build the tables below are of (kTables)
  /// The LSH tables (LshTables::Export); empty for a dense layer, or to have LoadLayer
  /// rebuild them from the weights (after resharding).
  std::vector<uint32_t> table_offsets;
  std::vector<int32_t> table_ids;
  std::vector<int64_t> table_sizes;
};

/// Throws dslide::Error (naming the layer, from 1 as training prints them) when the arrays of
/// `parts` (LayerPart bits) in a checkpoint's state do not fit the shard.
inline void CheckLayerState(const LayerSpec& s, int layer, const LayerState& st,
                            unsigned parts = kCheckpoint) {
  const size_t n = static_cast<size_t>(s.local()) * s.in_dim;
  const size_t local = static_cast<size_t>(s.local());
  const bool weights = !(parts & kWeights) || (st.w.size() == n && st.b.size() == local);
  const size_t rows = static_cast<size_t>(s.input_major ? s.in_dim : s.local());
  const bool moments =
      !(parts & kMoments) ||
      (st.m.size() == n && st.v.size() == n && st.mb.size() == local && st.vb.size() == local &&
       (st.row_step.empty() || st.row_step.size() == rows) &&
       (st.bias_step.empty() || st.bias_step.size() == local));
  DSLIDE_CHECK(weights && moments, "layer ", layer + 1,
               ": the checkpoint's arrays do not match the shard (", s.local(), " x ", s.in_dim,
               ")");
}

/// A layer state's last steps (LayerState::row_step, bias_step) into a backend's `to` (sized
/// for the layer): copied, or where the state has none, -1 (the rows owe no steps).
inline void LoadLastSteps(const std::vector<int64_t>& from, std::vector<int64_t>* to) {
  if (from.empty())
    std::fill(to->begin(), to->end(), int64_t{-1});
  else
    std::copy(from.begin(), from.end(), to->begin());
}

/// Backends index sparse layers with concrete LSH settings: "auto" is resolved before Init
/// (ResolveAuto, auto_settings.h).
inline void CheckLshResolved(const ModelSpec& spec, const LshConfig& lsh) {
  for (const auto& l : spec.layers)
    DSLIDE_ASSERT(l.dense() || lsh.resolved(), "LSH settings left to auto reached a backend");
}

/// The selection rules of a layer's (resolved) LSH settings.
inline SelectPolicy SelectionPolicy(const LshConfig& c) {
  SelectPolicy p;
  p.query = c.query;
  p.threshold = c.threshold;
  p.fill = c.fill;
  p.lsh_share = static_cast<float>(c.lsh_share);
  return p;
}

/// What a backend needs of the run's settings (its own options, not the command line's): the
/// (resolved) LSH settings and the seed of every random stream it draws from
/// (BackendOptionsOf, train/auto_settings.h, makes them from a run's TrainConfig).
struct BackendOptions {
  LshConfig lsh;
  uint64_t seed = 1;
  bool bf16_moments = false;  ///< Adam's weight moments in bfloat16 (--state bf16)
  /// BackwardStep's Adam on every parameter of the layer (--dense-adam), not only on the
  /// rows and biases the batch touched (lazy Adam).
  bool dense_adam = false;
  /// The batch size, for the memory check of the batch's rows (ShardStateNeed; 0: not
  /// counted).
  int64_t batch = 0;
  /// The output layer's initial biases, one per neuron of this shard (empty: zeros).
  std::vector<float> output_bias;
  /// The output layer's loss (resolved: kSoftmax or kOneVsRest).
  OutputLoss loss = OutputLoss::kSoftmax;
  /// Per neuron of the output layer's shard: the share of training points with its label,
  /// which the log-Q correction (lsh.log_q) of a sampled output layer needs: the chance that
  /// a batch-mate lists it among the batch's labels. Empty: no training set (no correction).
  std::vector<float> label_share;
  /// Scoring alone (`dslide eval`, `dslide predict`): no Adam moments, and the weights are
  /// not drawn (a model's are loaded over them).
  bool scoring_only = false;
};

/// Whether a backend corrects layer `s`'s training logits by log-Q: a sampled output layer
/// with lsh.log_q and the training set's label shares, under either loss. Under the softmax
/// the sampled normaliser then estimates the full one; under one-vs-rest a drawn negative's
/// push, sigmoid(z - log q), is about exp(z) / q while small against its chance q of being
/// drawn: the drawn negatives weighed by the inverse of that chance, so that a label
/// seldom drawn is pushed down about as much as a dense layer pushes it (capped at 1, the
/// push of a negative scored far too high).
inline bool CorrectsLogQ(const LayerSpec& s, const BackendOptions& o) {
  if (!s.is_output || s.dense() || !o.lsh.log_q || o.label_share.empty()) return false;
  DSLIDE_CHECK(static_cast<int64_t>(o.label_share.size()) == s.local(),
               "label shares: ", o.label_share.size(), " for ", s.local(), " neurons");
  return true;
}

/// The chance that one of B - 1 batch-mates has a label held by the share f of the
/// training points, per neuron: 1 - (1 - f)^(B - 1) (the log-Q correction's batch source).
inline void BatchLabelChances(const std::vector<float>& share, int64_t batch,
                              std::vector<float>* q) {
  q->resize(share.size());
  const double m = static_cast<double>(batch > 1 ? batch - 1 : 0);
  for (size_t j = 0; j < share.size(); ++j)
    (*q)[j] =
        static_cast<float>(-std::expm1(m * std::log1p(-std::min(0.999999, double{share[j]}))));
}

/// The least a backend holds of this rank's shard, for the memory checks before Init
/// allocates anything: every layer's weights and biases with both Adam moments (4 bytes
/// each, 2 in bfloat16), with `first_layer_gradient` the input-major layer's gradient rows
/// (the GPU backend keeps them), and with options.batch the batch's rows: per layer its
/// active entries' ids, values and deltas on this shard, and the next layer's gathered
/// input and its gradient (a hidden layer of 2^23 neurons: 51 GB at batch 256, where its
/// weights on 10 features took 1 GB); `what` names it in the refusal.
struct ShardNeed {
  int64_t bytes = 0;
  std::string what;
};
inline ShardNeed ShardStateNeed(const ModelSpec& spec, const BackendOptions& options,
                                bool first_layer_gradient) {
  int64_t params = 0, gradient = 0, steps = 0;
  int64_t rows = 0;  // a sample's entries in the batch buffers, all layers
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const LayerSpec& s = spec.layers[l];
    params += s.local() * (s.in_dim + 1);
    steps += (s.input_major ? s.in_dim : s.local()) + s.local();  // AdamCatchUp's last steps
    if (first_layer_gradient && s.input_major) gradient += s.local() * (s.in_dim + 1);
    const int64_t here = s.dense() ? s.local() : std::min(s.local(), s.budget);
    const int64_t gathered = s.dense() ? s.out_dim : std::min(s.out_dim, s.budget * spec.ranks);
    rows += here * 12;                                      // ids, values, deltas
    if (l + 1 < spec.layers.size()) rows += gathered * 12;  // the next input, its gradient
  }
  const int64_t batch_bytes = std::max<int64_t>(options.batch, 0) * rows;
  const int64_t moment = options.scoring_only ? 0 : options.bf16_moments ? 2 : 4;
  ShardNeed need;
  need.bytes = params * (4 + 2 * moment) + gradient * 4 + steps * 8 + batch_bytes;
  need.what = detail::Concat(
      first_layer_gradient   ? "its weights, Adam moments and first-layer gradient ("
      : options.scoring_only ? "its weights ("
                             : "its weights and Adam moments (",
      params, " parameters",
      spec.layers.back().local() < spec.layers.back().out_dim ? " on this rank" : "", ")",
      batch_bytes > 0 ? detail::Concat(" and a batch's activations and gradients (--batch ",
                                       options.batch, ": ", batch_bytes >> 20, " MB)")
                      : std::string());
  return need;
}

/// Whether layer `s` starts from `options.output_bias` rather than zero biases: the output
/// layer, when biases are given (they must be one per neuron of the shard).
inline bool StartsFromOutputBias(const LayerSpec& s, const BackendOptions& options) {
  if (!s.is_output || options.output_bias.empty()) return false;
  DSLIDE_CHECK(static_cast<int64_t>(options.output_bias.size()) == s.local(),
               "initial output biases: ", options.output_bias.size(), " for ", s.local(),
               " neurons");
  return true;
}

/// A buffer of n floats in host memory (`v`, kept between calls), zeroed when `zero`: an
/// ExchangeBuffer where the collectives read host memory.
inline float* HostExchangeBuffer(std::vector<float>* v, int64_t n, bool zero) {
  v->resize(static_cast<size_t>(n));
  if (zero) std::fill(v->begin(), v->end(), 0.0f);
  return v->data();
}

/// A layer's batch buffers, which the backend owns (host memory for the CPU backend, device
/// memory for a GPU backend): its input rows, its output (active ids and values), the delta
/// of the loss w.r.t. that output, and this shard's partial gradient w.r.t. the input.
enum class Rows { kInput, kOutput, kDelta, kInputGrad };
/// What the caller does with a host view of a batch buffer (LayerBackend::HostRows).
enum class Access { kRead, kWrite };

/// What a backend is and can do: fixed once Init has run (LayerBackend::Capabilities).
struct BackendCapabilities {
  const char* name = "";      ///< "cpu", "gpu", ...
  bool asynchronous = false;  ///< its work runs behind the host's calls (a device stream)
  /// It packs and regroups the snapshot exchange in its own memory (InPlaceExchange); else
  /// the trainer exchanges host views (HostRows).
  bool row_exchange = false;
  /// P ranks' collectives read and write its device memory (CUDA-aware MPI); else host
  /// memory.
  bool collectives_on_device = false;
};

/// What a backend has moved and holds so far (LayerBackend::Info).
struct BackendInfo {
  DeviceTraffic traffic;          ///< what crossed between its device and the host (zeros: host)
  size_t state_bytes = 0;         ///< model state held: weights, gradients, moments, tables
  int64_t device_peak_bytes = 0;  ///< device memory the process's buffers held at the peak
  int64_t device_used_bytes = 0;  ///< device memory in use now, by every process (0: none)
};

/// A step's read-back: the batch's mean loss, and which layers' updates produced a NaN or
/// infinite parameter since the entry before (bit l: layer l).
struct StepStatus {
  double loss = 0;
  uint64_t bad_layers = 0;
};

/// Buffers in a backend's memory for one collective of the snapshot exchange: what this
/// rank sends (values, and ids where the exchange carries them) and where it receives.
struct ExchangeBuffers {
  const float* send_vals = nullptr;
  const int32_t* send_ids = nullptr;
  float* recv_vals = nullptr;
  int32_t* recv_ids = nullptr;
};

/// The snapshot exchange's packing and regrouping done by a backend whose rows live in its
/// own memory (a GPU backend): the trainer keeps the protocol (SnapshotExchange: counts,
/// collectives, bytes). The buffers handed to the collectives are in the backend's memory
/// where the communicator reads it (CUDA-aware MPI: then only the per-sample counts come
/// to the host), else host copies of the packed entries. Every buffer is complete on return.
class RowExchange {
 public:
  virtual ~RowExchange() = default;
  /// How many entries each sample of hidden layer `layer`'s output holds (B counts).
  virtual std::vector<int64_t> OutputCounts(int layer) = 0;
  /// Forward: this rank's output of `layer` packed sample after sample (ids when
  /// `with_ids`), and a buffer for the `total` entries every rank sends.
  virtual ExchangeBuffers PackOutput(int layer, bool with_ids, int64_t total) = 0;
  /// Layer `layer`'s input from the received entries (rank-major: rank 0's entries of
  /// every sample, then rank 1's, ...): sample i's row is rank 0's seg[i] entries, then rank
  /// 1's seg[B + i], ...; a dense snapshot (no ids) numbers them 0.. in the row; `width`
  /// is the layer's input width.
  virtual void UnpackInput(int layer, const std::vector<int64_t>& seg, bool dense,
                           int64_t width) = 0;
  /// Backward: layer `layer`'s input gradient (laid out like the input UnpackInput made)
  /// packed rank-major as the input arrived, and a buffer for the `mine` summed entries of
  /// this rank.
  virtual ExchangeBuffers PackInputGrad(int layer, int64_t mine) = 0;
  /// Layer `layer`'s delta from the received sums (this rank's output entries of `layer`,
  /// in PackOutput's order), times ReLU' of that output.
  virtual void UnpackDelta(int layer) = 0;
};

/// A backend: one rank's shard of every layer on one device (CPU threads or a GPU). The
/// trainer drives a step through it on the backend's own batch buffers, named by (layer,
/// Rows); it sees host views only of what crosses ranks (HostRows) and hands in only what
/// arrived (HostRows for writing, then CommitRows). This interface is all a backend
/// implements; the tests drive it the same way (tests/common/backend_driver.h).
class LayerBackend {
 public:
  virtual ~LayerBackend() = default;

  /// Allocates and initialises this rank's shard of every layer. Weights are a function of
  /// (seed, layer, global neuron) only, so any number of ranks starts from the same model.
  /// Sparse layers have no tables until their first RebuildTables.
  virtual void Init(const ModelSpec& spec, const BackendOptions& options) = 0;
  /// The backend's name and what it can do.
  virtual BackendCapabilities Capabilities() const = 0;
  /// Its host-device traffic, state bytes and device memory so far.
  virtual BackendInfo Info() const = 0;

  // ---- The batch ----
  /// A host view of a buffer: with kRead, its current rows (valid until the next call that
  /// writes it); with kWrite, a buffer to fill (the data rows, a gathered snapshot, an input
  /// gradient) and hand over by CommitRows.
  virtual BatchRows* HostRows(int layer, Rows which, Access access) = 0;
  /// Makes the rows written into HostRows(layer, which, kWrite) the backend's.
  virtual void CommitRows(int layer, Rows which) = 0;
  /// The batch's labels (global ids; null: none, as in evaluation).
  virtual void SetLabels(const BatchLabels* labels) = 0;

  // ---- The step ----
  /// Chooses each sample's active neurons on this shard into the layer's output ids: all
  /// local neurons for a dense layer; else LSH candidates queried with the sample's input,
  /// made exactly the per-rank budget (labels it owns first when `with_labels`). `iter`
  /// seeds the per-sample random streams.
  virtual void Select(int layer, bool with_labels, int64_t iter) = 0;
  /// The output values of the active neurons: ReLU(Wx+b) for hidden layers, the logits
  /// Wx+b for the output layer.
  virtual void Forward(int layer) = 0;
  /// The softmax cross-entropy (softmax.h) on the output layer's output and the labels,
  /// its whole normaliser on this shard (one rank): the delta goes to the layer's kDelta
  /// buffer, the statistics stay in the backend for QueueStatus. A backend may fuse the
  /// phases.
  virtual void Softmax(int layer) = 0;
  /// This shard's part of the softmax's normaliser (kSoftmaxMax and kSoftmaxSums of
  /// softmax.h) into `st`: per sample its largest active logit, the sum of exp(z - max)
  /// over its active neurons, and the sum of its labels' logits.
  virtual void SoftmaxPartials(int layer, SoftmaxStats* st) = 0;
  /// The softmax's delta into the layer's kDelta buffer (kSoftmaxDelta of softmax.h), from
  /// the normaliser over every shard expressed in this shard's terms: st.mx as
  /// SoftmaxPartials gave it, st.red the sum over every shard relative to st.mx.
  virtual void SoftmaxDelta(int layer, const SoftmaxStats& st) = 0;
  /// Records the gradients of the active neurons from the kDelta buffer (one backward call
  /// per layer between updates), pending for ExportGradient or ApplyGradient; every layer
  /// above the first puts this shard's partial gradient w.r.t. its input into kInputGrad.
  virtual void Backward(int layer) = 0;
  /// Backward, then Adam on the rows the batch touched (every row with
  /// BackendOptions::dense_adam), in one pass where the backend can: the input gradient is
  /// formed from the weights before the update.
  virtual void BackwardStep(int layer, const AdamStep& step) = 0;
  /// One rank, no round trip through the trainer: to = from + 1 makes from's output to's
  /// input (packed, as the snapshot exchange gathers it); to = from - 1 makes to's delta
  /// from's input gradient times ReLU' of to's output.
  virtual void Chain(int from, int to) = 0;
  /// Training's dropout of a hidden layer (model/dropout.h). Forward, after Forward: the
  /// layer's kOutput entries that d drops set to 0, the kept ones scaled. Backward, once the
  /// layer's kDelta holds the gradient through ReLU' (Chain or the exchange): the kept
  /// entries' deltas scaled (the dropped ones are 0 already).
  virtual void Dropout(int layer, const DropoutStep& d, bool backward) = 0;
  /// Queues the mean loss (SoftmaxMeanLoss) of the statistics the last Softmax of
  /// `loss_layer` kept (0 when loss_layer < 0), with the non-finite flags of the updates
  /// since the entry before; nothing waits.
  virtual void QueueStatus(int loss_layer) = 0;
  /// The entries queued since the last call, oldest first: what the host waits for, once,
  /// when it reads (at the logging cadence, or on demand).
  virtual std::vector<StepStatus> TakeQueued() = 0;
  /// Builds the layer's tables from this shard's weights as `plan` says, drawing its hash
  /// functions (from plan.hash_seed) where they are not of plan.hash_version already. Local:
  /// no communication.
  virtual void RebuildTables(int layer, const RebuildPlan& plan) = 0;
  /// Exact inference on the output layer's kInput rows: for each sample the k best local
  /// neurons (global ids, scores), -1/-inf padded, scoring every neuron of the shard. With
  /// `st` (and `labels`, global ids), the shard's part of the full softmax, per sample i of
  /// B: st->mx[i] its largest logit, st->red[i] = sum_j exp(z_ij - mx[i]) over the shard,
  /// st->red[B + i] the sum of the logits of the sample's labels the shard owns.
  virtual void TopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
                    const BatchLabels* labels, SoftmaxStats* st) = 0;

  // ---- State ----
  /// The `parts` (LayerPart bits) of this shard's layer, rows per neuron (local x in_dim).
  /// kMoments, kTables: only between steps (no pending gradient).
  virtual void SaveLayer(int layer, unsigned parts, LayerState* state) const = 0;
  /// Restores the `parts` (kWeights, kMoments, kTables) of `state`: kTables the tables of
  /// state.tables_plan (its hash functions drawn again); with empty tables (after
  /// resharding) the layer has none until the caller's RebuildTables. Weights alone leave
  /// the tables as they are.
  virtual void LoadLayer(int layer, unsigned parts, const LayerState& state) = 0;

  // ---- Data parallelism (identical full replicas) ----
  /// How many floats a layer's gradient has in the backend's own storage order (its weights,
  /// then one per neuron for the biases): what ExportGradient writes.
  virtual int64_t GradientSize(int layer) const = 0;
  /// The pending gradient of a layer times `scale`, GradientSize(layer) floats in the
  /// backend's own storage order, into `out` (host memory, or a place in ExchangeBuffer);
  /// complete on return.
  virtual void ExportGradient(int layer, float* out, float scale) const = 0;
  /// Adam on every parameter from `grad` (laid out as ExportGradient writes it); discards
  /// the pending gradient.
  virtual void ApplyGradient(int layer, const float* grad, const AdamStep& step) = 0;
  /// A buffer of n floats (zeroed when `zero`) where the trainer assembles the fused
  /// gradient and the communicator reduces it: in the backend's device memory where the
  /// communicator reads it there (BackendCapabilities::collectives_on_device), else in host
  /// memory.
  /// Kept by the backend until the next call.
  virtual float* ExchangeBuffer(int64_t n, bool zero) = 0;
  /// The backend's side of the snapshot exchange (a GPU backend: its kernels pack and
  /// regroup): only where Capabilities().row_exchange.
  virtual RowExchange& InPlaceExchange() = 0;
};

}  // namespace dslide
