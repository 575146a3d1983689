// The CPU backend's construction: each layer's state, its initial weights and first tables.
#include "cpu/cpu_backend.h"

#include "common/memory_limit.h"
#include "common/parallel.h"
#include "cpu/cpu_layer.h"
#include "model/layer_layout.h"

namespace dslide::cpu {

CpuBackend::CpuBackend() = default;
CpuBackend::~CpuBackend() = default;

void CpuBackend::Init(const ModelSpec& spec, const BackendOptions& options) {
  CheckLshResolved(spec, options.lsh);
  {
    // Refused before anything is allocated where the shard's least state cannot fit.
    const ShardNeed need = ShardStateNeed(spec, options, /*first_layer_gradient=*/false);
    CheckMemoryFits(need.bytes, need.what);
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
    if (StartsFromOutputBias(s, options)) {
      L->b = options.output_bias;
    } else {
      L->b.assign(s.local(), 0.0f);
    }
    // Scoring alone keeps no moments (the checkpoint's are not read either).
    if (!options.scoring_only && L->bf16) {
      L->m16.assign(n, 0);
      L->v16.assign(n, 0);
      L->mb16.assign(s.local(), 0);
      L->vb16.assign(s.local(), 0);
    } else if (!options.scoring_only) {
      L->m.assign(n, 0.0f);
      L->v.assign(n, 0.0f);
      L->mb.assign(s.local(), 0.0f);
      L->vb.assign(s.local(), 0.0f);
    }
    L->row_step.assign(L->rows, 0);
    L->bias_step.assign(s.local(), 0);
    if (L->indexed) {
    } else {
      // The gradient rows (g) only when a gradient is kept pending (BackwardRows): a
      // training step forms each row's gradient in scratch (InputMajorStep).
      L->gb.assign(s.local(), 0.0f);
      L->touched.assign(L->rows, 0);
      L->btouched.assign(s.local(), 0);
    }
    if (!options.scoring_only) InitialWeights(s, li, options.seed, L->w.data());
    if (!s.dense()) {
      L->sampler = std::make_unique<BudgetSampler>(SelectionPolicy(options.lsh));
    }
    layers_.push_back(std::move(L));
  }
}

}  // namespace dslide::cpu
