// The OpenMP implementation of the layer backend: contiguous weights (input-major first
// layer, row per neuron elsewhere), HOGWILD over samples in the first layer, gradients of
// row-per-neuron layers formed per touched neuron inside the lazy Adam pass.
#pragma once

#include <memory>
#include <vector>

#include "budget_sampler.h"
#include "host_batch.h"
#include "lsh_hash.h"
#include "lsh_table.h"

namespace dslide::cpu {

class CpuBackend : public HostBatchBackend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  void Init(const ModelSpec& spec, const BackendOptions& options) override;
  void SelectActive(int layer, const BatchRows& in, const BatchLabels* labels, int64_t iter,
                    BatchRows* out) override;
  void Forward(int layer, const BatchRows& in, BatchRows* out) override;
  void Backward(int layer, const BatchRows& in, const BatchRows& delta,
                BatchRows* in_grad) override;
  void Update(int layer, const AdamStep& step, bool dense) override;
  void BackwardUpdate(int layer, const BatchRows& in, const BatchRows& delta, BatchRows* in_grad,
                      const AdamStep& step, bool dense) override;
  void RebuildTables(int layer, bool new_hashes) override;
  /// Draws the hash functions of version L.hash_version and empties the tables.
  void MakeHash(int layer);
  void TopK(int layer, const BatchRows& in, int k, std::vector<int32_t>* ids,
            std::vector<float>* scores, const BatchLabels* labels = nullptr,
            SoftmaxStats* st = nullptr) override;
  void GetLayer(int layer, std::vector<float>* w, std::vector<float>* b) const override;
  void SetLayer(int layer, const std::vector<float>& w, const std::vector<float>& b) override;
  void GetGradient(int layer, std::vector<float>* gw, std::vector<float>* gb) const override;
  int64_t GradientSize(int layer) const override;
  void ExportGradient(int layer, float* out) const override;
  void ApplyGradient(int layer, const float* grad, const AdamStep& step) override;
  bool TakeNonFinite(int layer) override;
  void SaveLayer(int layer, LayerState* state) const override;
  void LoadLayer(int layer, const LayerState& state) override;
  size_t StateBytes() const override;
  const char* name() const override { return "cpu"; }

 protected:
  const LayerSpec& Spec(int layer) const override { return spec_.layers[layer]; }
  int NumLayers() const override { return static_cast<int>(spec_.layers.size()); }

 private:
  struct Layer;
  struct ThreadScratch;
  // Row-per-neuron layers (see cpu_backend.cpp). Input gradients go to per-thread buffers
  // (ClearInputGrads), summed into the caller's rows at the end (AddInputGrads).
  void ClearInputGrads(size_t width);
  void AddInputGrads(BatchRows* in_grad) const;
  void IndexBatch(Layer& L, const BatchRows& in, const BatchRows& delta);
  void TouchedRows(Layer& L, const BatchRows* in, BatchRows* in_grad, const AdamStep* step);
  void InputGradRow(const Layer& L, int64_t q, const BatchRows& in, float* buf) const;
  void ApplyRow(Layer& L, int64_t r, int64_t q, const AdamStep& step);
  void UpdateIndexed(Layer& L, const AdamStep& step, bool dense);
  /// AdamUpdate, recording a non-finite result in the layer.
  void Adam(Layer& L, const AdamStep& step, int64_t n, float* w, float* g, float* m, float* v);
  void ApplyGradient(Layer& L, const float* gw, const float* gb, const AdamStep& step);
  void DenseRows(Layer& L, const BatchRows& in, const BatchRows& delta, BatchRows* in_grad,
                 const AdamStep* step);
  void GradientRow(const Layer& L, int64_t q, float* g, float* gb) const;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::unique_ptr<ThreadScratch>> scratch_;
  ModelSpec spec_;
  BackendOptions opt_;  // the LSH settings and the seed of every random stream
};

}  // namespace dslide::cpu
