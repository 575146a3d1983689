// The seam between the trainer loop (and src/dist) and the devices: forward, backward,
// update and table rebuild of one rank's shard of each sparse layer. CPU and GPU backends
// implement it; nothing above this interface knows which one runs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "adam.h"
#include "batch_rows.h"
#include "config.h"
#include "device_traffic.h"
#include "error.h"
#include "model.h"
#include "select_kernel.h"
#include "softmax.h"

namespace dslide {

/// Wall-clock split of a step, accumulated by the caller.
struct PhaseTimes {
  double query = 0, forward = 0, backward = 0, update = 0, rebuild = 0, comm = 0;
  double backward_update = 0;  // BackwardUpdate calls (a step's backward and Adam, fused)
};

/// What a checkpoint keeps of one layer's shard, rows per neuron (local x in_dim).
struct LayerState {
  std::vector<float> w, b, m, v, mb, vb;
  int64_t hash_version = 0;  ///< how many times hash functions were drawn
  int64_t rebuilds = 0;      ///< how many times the tables were built
  /// The LSH tables (LshTables::Export); empty for a dense layer, or to have LoadLayer
  /// rebuild them from the weights (after resharding).
  std::vector<uint32_t> table_offsets;
  std::vector<int32_t> table_ids;
  std::vector<int64_t> table_sizes;
};

/// Throws dslide::Error (naming the layer) when a checkpoint's arrays do not fit the shard.
inline void CheckLayerState(const LayerSpec& s, int layer, const LayerState& st) {
  const size_t n = static_cast<size_t>(s.local()) * s.in_dim;
  DSLIDE_CHECK(st.w.size() == n && st.m.size() == n && st.v.size() == n &&
                   static_cast<int64_t>(st.b.size()) == s.local() && st.mb.size() == st.b.size() &&
                   st.vb.size() == st.b.size(),
               "layer ", layer, ": the checkpoint's arrays do not match the shard (", s.local(),
               " x ", s.in_dim, ")");
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

/// What a backend needs of the run's settings: the (resolved) LSH settings and the seed of
/// every random stream it draws from.
struct BackendOptions {
  LshConfig lsh;
  uint64_t seed = 1;
  static BackendOptions Of(const TrainConfig& cfg) { return {cfg.lsh, cfg.seed}; }
};

/// What a training step and exact scoring need: select, forward, the softmax phases,
/// backward and update, table rebuilds, top-k.
class StepOps {
 public:
  virtual ~StepOps() = default;
  /// Chooses each sample's active neurons on this shard into out->ids (global ids), out->n:
  /// all local neurons for a dense layer; else LSH candidates queried with the sample's
  /// layer input, made exactly the per-rank budget (labels it owns first when `labels` is
  /// given). `iter` seeds the per-sample random streams.
  virtual void SelectActive(int layer, const BatchRows& in, const BatchLabels* labels, int64_t iter,
                            BatchRows* out) = 0;
  /// Computes out->vals for the active ids already in `out`: ReLU(Wx+b) for hidden layers,
  /// the logits Wx+b for the output layer.
  virtual void Forward(int layer, const BatchRows& in, BatchRows* out) = 0;
  /// Records the weight and bias gradients of the active neurons from `delta` (aligned
  /// with the forward output; one Backward per layer between Updates), and, when in_grad is not
  /// null, adds this shard's partial gradient w.r.t. the layer input into in_grad->vals (aligned
  /// with `in`).
  virtual void Backward(int layer, const BatchRows& in, const BatchRows& delta,
                        BatchRows* in_grad) = 0;
  /// Adam on the rows the batch touched (or every row with dense Adam); clears gradients.
  virtual void Update(int layer, const AdamStep& step, bool dense) = 0;
  /// Backward, then Update of the same layer; a backend may fuse the two into one pass over
  /// the touched rows. The input gradient uses the weights before the update.
  virtual void BackwardUpdate(int layer, const BatchRows& in, const BatchRows& delta,
                              BatchRows* in_grad, const AdamStep& step, bool dense) {
    Backward(layer, in, delta, in_grad);
    Update(layer, step, dense);
  }
  /// The output layer's softmax cross-entropy phases (softmax.h) on z, the output of this
  /// layer's last Forward; kSoftmaxDelta writes delta (aligned with z), which a backend may
  /// also keep for the next Backward of the layer when that call passes this same delta.
  virtual void Softmax(int layer, const BatchRows& z, const BatchLabels& labels, unsigned phases,
                       SoftmaxStats* st, BatchRows* delta) {
    (void)layer;
    SoftmaxOnHost(z, labels, phases, st, delta);
  }
  /// Rehashes this shard's neurons into its tables (new hash functions when `new_hashes`).
  /// Local: no communication.
  virtual void RebuildTables(int layer, bool new_hashes) = 0;
  /// Exact inference on the output layer: for each sample, the k best local neurons
  /// (global ids, scores), k per sample, -1/-inf padded. Scores every neuron of the shard.
  /// With `st` (and `labels`, global ids), also the shard's part of the full softmax, per
  /// sample i of B: st->mx[i] its largest logit, st->red[i] = sum_j exp(z_ij - mx[i]) over
  /// the shard, st->red[B + i] the sum of the logits of the sample's labels the shard owns.
  virtual void TopK(int layer, const BatchRows& in, int k, std::vector<int32_t>* ids,
                    std::vector<float>* scores, const BatchLabels* labels = nullptr,
                    SoftmaxStats* st = nullptr) = 0;

  /// True when an update of the layer produced a NaN or infinite parameter since the last
  /// call (then clears the flag).
  virtual bool TakeNonFinite(int layer) = 0;
};

/// What checkpoints, export and tests need: a layer's state out and in.
class LayerStateIO {
 public:
  virtual ~LayerStateIO() = default;
  /// This shard's layer as row-per-neuron weights (local x in_dim) and biases (for tests,
  /// checkpoints and export).
  virtual void GetLayer(int layer, std::vector<float>* w, std::vector<float>* b) const = 0;
  virtual void SetLayer(int layer, const std::vector<float>& w, const std::vector<float>& b) = 0;
  /// The accumulated (not yet applied) gradients, laid out like GetLayer.
  virtual void GetGradient(int layer, std::vector<float>* gw, std::vector<float>* gb) const = 0;
  /// Checkpoints: the whole state of a layer's shard, and its restoration. Pending
  /// gradients are not part of it (checkpoints are taken between steps).
  virtual void SaveLayer(int layer, LayerState* state) const = 0;
  virtual void LoadLayer(int layer, const LayerState& state) = 0;
  /// Bytes of model state held (weights, gradients, moments, tables).
  virtual size_t StateBytes() const = 0;
};

/// What data parallelism needs: the pending gradient out, the averaged one in, and where
/// the communicator may reduce it.
class ReplicaGradients {
 public:
  virtual ~ReplicaGradients() = default;
  /// Data parallelism (identical full replicas): the pending gradient of a layer in the
  /// backend's own storage order (GradientSize(layer) weights, then one per neuron for the
  /// biases), and Adam on every parameter with such a gradient (averaged over replicas);
  /// ApplyGradient also discards the pending gradient.
  virtual int64_t GradientSize(int layer) const = 0;
  virtual void ExportGradient(int layer, float* out) const = 0;
  virtual void ApplyGradient(int layer, const float* grad, const AdamStep& step) = 0;
  /// Data parallelism in the backend's memory: a buffer of n floats (zeroed when `zero`;
  /// ExportGradient writes every element it covers) where the trainer assembles the fused
  /// gradient when the communicator can reduce it there (a GPU backend under CUDA-aware
  /// MPI), or nullptr (the default: host memory). ExportGradient and ApplyGradient then take
  /// pointers into it; ScaleExchange scales it and waits until the backend's writes to it
  /// are visible to the communicator.
  virtual float* ExchangeBuffer(int64_t n, bool zero) {
    (void)n;
    (void)zero;
    return nullptr;
  }
  virtual void ScaleExchange(float* p, int64_t n, float s) {
    (void)p;
    (void)n;
    (void)s;
  }
};

/// A layer's batch buffers, which the backend owns (host memory for the CPU backend, device
/// memory for a GPU backend): its input rows, its output (active ids and values), the delta
/// of the loss w.r.t. that output, and this shard's partial gradient w.r.t. the input.
enum class Rows { kInput, kOutput, kDelta, kInputGrad };

/// What the trainer's step and exact scoring call: the phases of a step on the backend's own
/// batch buffers, named by (layer, Rows). The trainer sees host views only of what crosses
/// ranks (HostRows) and hands in only what arrived (StageRows + CommitRows); with one rank,
/// ChainForward and ChainBackward link a layer to the next inside the backend.
class BatchOps {
 public:
  virtual ~BatchOps() = default;
  /// The batch's labels (global ids; null: none, as in evaluation).
  virtual void SetLabels(const BatchLabels* labels) = 0;
  /// Selects layer `layer`'s active neurons for its input (StepOps::SelectActive), with the
  /// batch's labels when `with_labels`.
  virtual void BatchSelect(int layer, bool with_labels, int64_t iter) = 0;
  /// The output values of the active neurons (StepOps::Forward).
  virtual void BatchForward(int layer) = 0;
  /// One rank: layer + 1's input is layer's output, laid out as the snapshot exchange would
  /// gather it on one rank (no round trip through the trainer).
  virtual void ChainForward(int layer) = 0;
  /// The softmax phases on the output layer's output and the labels; the delta goes to the
  /// layer's kDelta buffer. The statistics go to `st`, or, when it is null (all phases, one
  /// rank), stay in the backend for QueueLoss.
  virtual void BatchSoftmax(int layer, unsigned phases, SoftmaxStats* st) = 0;
  /// A step's read-back: the batch's mean loss, and which layers' updates produced a NaN or
  /// infinite parameter since the entry before (bit l: layer l).
  struct StepStatus {
    double loss = 0;
    uint64_t bad_layers = 0;
  };
  /// Queues the mean loss (SoftmaxMeanLoss) of the statistics the last BatchSoftmax kept,
  /// with the non-finite flags of the updates so far (which TakeNonFinite then no longer
  /// reports); nothing waits.
  virtual void QueueLoss(int layer) = 0;
  /// The entries queued since the last call, oldest first: what the host waits for, once,
  /// when it reads (at the logging cadence, or on demand).
  virtual std::vector<StepStatus> TakeQueued() = 0;
  /// Backward (and, with `step`, the update) of a layer from its kDelta buffer; with
  /// `in_grad`, this shard's partial input gradient into its kInputGrad buffer.
  virtual void BatchBackward(int layer, bool in_grad, const AdamStep* step, bool dense_adam) = 0;
  /// One rank: layer - 1's delta is layer's input gradient times ReLU' of layer - 1's output.
  virtual void ChainBackward(int layer) = 0;
  /// Exact top-k of the output layer on its kInput buffer (StepOps::TopK).
  virtual void BatchTopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
                         const BatchLabels* labels, SoftmaxStats* st) = 0;
  /// A host view of a buffer, valid until the next call that writes it.
  virtual const BatchRows& HostRows(int layer, Rows which) = 0;
  /// A host buffer to fill with what arrived (the data rows, a gathered snapshot, an input
  /// gradient), then CommitRows to make it the backend's.
  virtual BatchRows* StageRows(int layer, Rows which) = 0;
  virtual void CommitRows(int layer, Rows which) = 0;
};

/// A backend: one rank's shard of every layer on one device (CPU threads or a GPU).
class LayerBackend : public StepOps, public BatchOps, public LayerStateIO, public ReplicaGradients {
 public:
  /// Allocates and initialises this rank's shard of every layer. Weights are a function of
  /// (seed, layer, global neuron) only, so any number of ranks starts from the same model.
  virtual void Init(const ModelSpec& spec, const BackendOptions& options) = 0;
  virtual const char* name() const = 0;
  /// What crossed between the backend's device and the host so far (zeros: host memory).
  virtual DeviceTraffic Counters() const { return {}; }
  /// True when the backend's work runs behind the host's calls (a device stream): a step's
  /// time is then seen only where the host waits.
  virtual bool Asynchronous() const { return false; }
};

/// The backend for cfg.device: "cpu", or "gpu" where built with CUDA and a device exists,
/// on the GPU of this rank's local rank (gpu::ChooseDevice; `rank` when the launcher does
/// not say). Throws dslide::Error with the reason otherwise. The only place that branches
/// on CUDA.
std::unique_ptr<LayerBackend> MakeBackend(Device device, int rank, int gpus_per_node = 0);
/// The backends this build has: "cpu" or "cpu gpu" (`dslide --version`).
const char* BuiltBackends();

}  // namespace dslide
