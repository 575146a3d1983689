// The OpenMP implementation of the layer backend: contiguous weights (input-major first
// layer, row per neuron elsewhere), gradients formed per touched row inside the lazy Adam
// pass (per feature in the first layer, per neuron elsewhere). Its batch
// buffers are host rows, so HostRows and CommitRows copy nothing.
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
//
// Files, by phase (the members of this class; kernels/ holds the free SIMD kernels they use,
// cpu_tuning.h their constants):
//   cpu_backend.cpp       construction (Init)
//   cpu_select.cpp        selection: labels, LSH candidates, the batch fill
//   cpu_forward.cpp       forward: dense layers in lanes or blocks, sampled ones by neuron
//   cpu_active_index.cpp  the batch's entries by neuron, the non-zero deltas
//   cpu_backward.cpp      backward of row-per-neuron layers over the touched rows
//   cpu_dense.cpp         layers with every neuron active (DenseRows, InputMajorStep)
//   cpu_adam.cpp          Adam steps
//   cpu_rebuild.cpp       hash functions and table rebuilds
//   cpu_topk.cpp          exact top-k
//   cpu_batch.cpp         the seam's step on the batch buffers (Select ... TopK, Chain, status)
//   cpu_state.cpp         layer state and gradients in and out (checkpoints, data parallelism)
//   cpu_layer.h           a layer's state and the per-thread scratch
#pragma once

#include <memory>
#include <vector>

#include "backend/layer_backend.h"
#include "lsh/budget_sampler.h"
#include "lsh/lsh_hash.h"
#include "lsh/lsh_table.h"

namespace dslide::cpu {

class CpuBackend : public LayerBackend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  void Init(const ModelSpec& spec, const BackendOptions& options) override;
  BackendCapabilities Capabilities() const override;
  BackendInfo Info() const override;

  BatchRows* HostRows(int layer, Rows which, Access access) override;
  void CommitRows(int layer, Rows which) override {}
  void SetLabels(const BatchLabels* labels) override;
  void Select(int layer, bool with_labels, int64_t iter) override;
  void Forward(int layer) override;
  void Softmax(int layer) override;
  void SoftmaxPartials(int layer, SoftmaxStats* st) override;
  void SoftmaxDelta(int layer, const SoftmaxStats& st) override;
  void Backward(int layer) override;
  void BackwardStep(int layer, const AdamStep& step) override;
  void Chain(int from, int to) override;
  void Dropout(int layer, const DropoutStep& d, bool backward) override;
  void QueueStatus(int loss_layer) override;
  std::vector<StepStatus> TakeQueued() override;
  void RebuildTables(int layer, const RebuildPlan& plan) override;
  void TopK(int layer, int k, std::vector<int32_t>* ids, std::vector<float>* scores,
            const BatchLabels* labels, SoftmaxStats* st) override;

  void SaveLayer(int layer, unsigned parts, LayerState* state) const override;
  void LoadLayer(int layer, unsigned parts, const LayerState& state) override;

  int64_t GradientSize(int layer) const override;
  void ExportGradient(int layer, float* out, float scale) const override;
  void ApplyGradient(int layer, const float* grad, const AdamStep& step) override;
  float* ExchangeBuffer(int64_t n, bool zero) override;
  RowExchange& InPlaceExchange() override;

 private:
  struct Layer;
  struct ThreadScratch;
  /// A layer's batch buffers (Rows): input, output, delta, input gradient.
  struct Buffers {
    BatchRows in, out, delta, in_grad;
  };
  Buffers& At(int layer);
  BatchRows& Of(int layer, Rows which);

  // The kernels on host rows (cpu_*.cpp by phase).
  void SelectRows(int layer, const BatchRows& in, const BatchLabels* labels, int64_t iter,
                  BatchRows* out);
  void ForwardRows(int layer, const BatchRows& in, BatchRows* out);
  // ForwardRows by the layer's kind (cpu_forward.cpp): every neuron of a dense layer over
  // dense inputs (in vector lanes, or by row blocks); a sampled layer's active rows by neuron
  // (L.batch.active: the rows every sample holds in lanes, then the walk of the others);
  // sample by sample.
  void ForwardAllInLanes(Layer& L, const BatchRows& in, BatchRows* out);
  void ForwardAllByBlocks(Layer& L, const BatchRows& in, BatchRows* out);
  void ForwardActive(Layer& L, const BatchRows& in, BatchRows* out);
  void ForwardWalk(Layer& L, const BatchRows& in, BatchRows* out);
  void ForwardBySample(Layer& L, const BatchRows& in, BatchRows* out);
  /// The layer's kInputGrad buffer zeroed like its input; null for the first layer.
  BatchRows* ZeroedInputGrad(int layer);
  /// The gradients of the active neurons from `delta`, kept pending; with in_grad, adds
  /// this shard's input gradient into it.
  void BackwardRows(int layer, const BatchRows& in, const BatchRows& delta, BatchRows* in_grad);
  /// Adam on the pending gradient's rows (every row with `dense`); clears it.
  void Update(int layer, const AdamStep& step, bool dense);
  /// BackwardRows then Update in one pass over the touched rows.
  void BackwardUpdate(int layer, const BatchRows& in, const BatchRows& delta, BatchRows* in_grad,
                      const AdamStep& step, bool dense);
  void TopKRows(int layer, const BatchRows& in, int k, std::vector<int32_t>* ids,
                std::vector<float>* scores, const BatchLabels* labels, SoftmaxStats* st);
  /// Draws the hash functions of L.plan (from its hash_seed) and empties the tables.
  void MakeHash(int layer);
  // Row-per-neuron layers (see the top of this file). Input gradients go to per-thread buffers
  // (ClearInputGrads), summed into the caller's rows at the end (AddInputGrads).
  void ClearInputGrads(size_t width);
  void AddInputGrads(BatchRows* in_grad) const;
  void IndexBatch(Layer& L, const BatchRows& in, const BatchRows& delta);
  /// The batch's active entries of `out` by neuron, into L.batch.active (Forward's index).
  /// Whether L.batch.active indexes the entries of `rows` (same layout and ids).
  bool ActiveMatches(const Layer& L, const BatchRows& rows) const;
  /// IndexBatch's lists (grad_rows, grad_off, ent_*) from L.batch.active: the entries of
  /// `delta` (which L.batch.active indexes) with a non-zero value.
  void KeepNonZero(Layer& L, const BatchRows& delta);
  void TouchedRows(Layer& L, const BatchRows* in, BatchRows* in_grad, const AdamStep* step);
  void InputGradRow(const Layer& L, int64_t q, const BatchRows& in, float* buf) const;
  /// InputGradRow and GradientRow in one pass, over dense inputs x of a width divisible
  /// by 16.
  void RowGradients(const Layer& L, int64_t q, const BatchRows& x, float* buf, float* g,
                    float* gb) const;
  /// RowGradients for the rows q[0..3], whose entries are the same samples in the same order,
  /// in one pass (g[k], gb[k] for row q[k]).
  void RowsGradients(const Layer& L, const int64_t* q, const BatchRows& x, float* buf,
                     float* const* g, float* gb) const;
  void ApplyRow(Layer& L, int64_t r, int64_t q, const AdamStep& step);
  void UpdateIndexed(Layer& L, const AdamStep& step, bool dense);
  /// The input-major layer's gradient and Adam step in one pass over the batch's features
  /// (every neuron active, no input gradient): no gradient rows are written.
  void InputMajorStep(Layer& L, const BatchRows& in, const BatchRows& delta, const AdamStep& step);
  /// Adam on the n weights at storage offset o with gradient g: AdamUpdate, or with
  /// --state bf16 AdamUpdateBf16 on the bfloat16 moments.
  void AdamRow(Layer& L, const AdamStep& step, size_t o, int64_t n, float* g);
  /// Adam on bias c with gradient *g. Both record a non-finite result in the layer.
  void AdamBias(Layer& L, const AdamStep& step, int64_t c, float* g);
  void ApplyGradient(Layer& L, const float* gw, const float* gb, const AdamStep& step);
  void DenseRows(Layer& L, const BatchRows& in, const BatchRows& delta, BatchRows* in_grad,
                 const AdamStep* step);
  /// DenseRows for the kRowsAtOnce rows from r together, where their non-zero deltas are the
  /// same samples; false (nothing done) where they are not.
  bool DenseRowsAtOnce(Layer& L, int64_t r, const BatchRows& in, const BatchRows& delta,
                       const AdamStep* step, ThreadScratch* scratch);
  void GradientRow(const Layer& L, int64_t q, float* g, float* gb) const;
  /// The pending gradient in row-per-neuron layout (SaveLayer's kGradient).
  void GradientAsRows(int layer, std::vector<float>* gw, std::vector<float>* gb) const;

  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::unique_ptr<ThreadScratch>> scratch_;
  std::vector<float> exchange_;  // ExchangeBuffer: the fused gradient of data parallelism
  ModelSpec spec_;
  BackendOptions opt_;  // the LSH settings, the seed of every random stream, dense Adam
  // The batch.
  std::vector<Buffers> buffers_;
  BatchLabels labels_;
  bool has_labels_ = false;
  SoftmaxStats stats_;  // of the last Softmax (one rank), for QueueStatus
  std::vector<StepStatus> queued_;
};

}  // namespace dslide::cpu
