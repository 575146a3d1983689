// The CPU backend's per-layer state and per-thread scratch, shared by its source files.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/huge_pages.h"
#include "cpu/cpu_backend.h"
#include "model/layer_layout.h"

namespace dslide::cpu {

struct CpuBackend::Layer {
  LayerSpec spec;
  int index = 0;               // the layer's place in the model
  int64_t rows = 0, cols = 0;  // storage shape: input-major in_dim x local, else local x in_dim
  // The weight-shaped arrays (read a row at a time in data-dependent order) on huge pages.
  // g: an input-major layer's gradient rows, allocated when a gradient is first kept pending.
  BigVector<float> w, g, m, v;
  // --state bf16: the moments in bfloat16 (m16, v16; mb16, vb16) in place of m, v; mb, vb.
  bool bf16 = false;
  BigVector<uint16_t> m16, v16;
  std::vector<uint16_t> mb16, vb16;
  std::vector<float> b, gb, mb, vb;
  // The step of each storage row's and bias's last Adam step (AdamCatchUp); -1: it owes
  // none (loaded without them).
  std::vector<int64_t> row_step, bias_step;
  std::vector<uint8_t> touched;   // per storage row
  std::vector<uint8_t> btouched;  // per neuron (bias)
  // A row-per-neuron layer keeps a pending batch gradient as neuron -> (sample, delta) lists
  // (Batch::grad_rows, grad_off, ent_*).
  bool indexed = false;
  std::atomic<bool> nonfinite{false};  // an update produced NaN or inf
  std::unique_ptr<LshHash> hash;
  LshTables tables;
  std::unique_ptr<BudgetSampler> sampler;
  BigVector<uint32_t> rebuild_buckets;  // RebuildTables: every neuron's bucket in every table
  // rebuild_buckets was hashed with the hash functions of draw `buckets_of` (0: not valid);
  // since then the neurons marked in `moved` (a row-per-neuron layer's Adam steps) have
  // changed.
  int64_t buckets_of = 0;
  std::vector<uint8_t> moved;
  std::vector<int32_t> rehash;  // the neurons a rebuild hashes
  RebuildPlan plan;             // the build the tables are of (hash: its functions, if any)
  // A batch's entries by id: rows (the ids met, less `begin`) ascending, each row's entries
  // by sample; an entry is (sample, slot). `active` indexes a layer's neurons: Forward
  // builds it for sampled row-per-neuron layers over dense inputs; Backward reuses it when
  // its delta rows hold the same entries, else builds it from the deltas' ids.
  // `by_feature` indexes the first layer's input features (InputMajorStep).
  struct ActiveIndex {
    /// Indexes `rows`' ids, each in [begin, begin + n): a counting sort in parts of the
    /// batch (one per thread).
    void Build(const BatchRows& rows, int64_t begin, int64_t n);
    bool valid = false;
    std::vector<int32_t> rows;
    std::vector<int64_t> off;
    struct Entry {
      int32_t sample, slot;
    };
    std::vector<Entry> entry;
    std::vector<int64_t> batch_off, batch_n;  // the layout the entries index
    std::vector<int64_t> start;               // each sample's first entry in batch_ids
    std::vector<int32_t> batch_ids;           // the entries' neurons, packed by sample
    std::vector<BigVector<int32_t>> count;    // per part of the batch, per id; zero between
    std::vector<std::vector<uint64_t>> mark;  // per part, a bit per id it met; zero between
  };
  // The batch in flight: what one step's calls hand each other (the active index, the
  // pending gradient, gathers), rebuilt or overwritten every batch; the members above it are
  // the layer's state across batches (what a checkpoint keeps, and what it is rebuilt from).
  struct Batch {
    bool pending = false;        // a gradient waits for Update (Backward called)
    bool dense_pending = false;  // the pending gradient is in dense_g / dense_gb
    std::vector<float> dense_g, dense_gb;
    BatchRows saved_in;              // the layer input of the pending batch
    std::vector<int32_t> grad_rows;  // touched local neurons, ascending
    std::vector<int64_t> grad_off;   // grad_rows.size() + 1 offsets into ent_*
    std::vector<int32_t> ent_sample;
    std::vector<float> ent_delta;
    ActiveIndex active, by_feature;
    // ForwardRows over `active`: the rows every sample holds (taken with the samples in
    // lanes, over lane_in, the layer input coordinate-major) and the others (walked entry by
    // entry).
    std::vector<int64_t> full_rows, walk_rows;
    std::vector<float> lane_in;
    // KeepNonZero: per active row, its count of non-zero deltas; those entries at the index's
    // offsets (kept_*); per kept row, where its entries start there (keep_from).
    std::vector<int64_t> keep, keep_from;
    std::vector<int32_t> kept_sample;
    std::vector<float> kept_delta;
    std::vector<int32_t> batch_fill;  // FillPolicy::kBatch: this batch's shared random set
    int64_t batch_fill_labels = 0;    // the batch's labels listed first in batch_fill
    // The log-Q correction (CorrectsLogQ): per active slot, laid out as the layer's output,
    // the log of its chance of being drawn, which Forward subtracts (valid: this batch has it).
    bool log_q_valid = false;
    std::vector<float> log_q;
    std::vector<float> batch_q;  // BatchLabelChances for batch_q_of samples
    int64_t batch_q_of = 0;
    std::vector<uint32_t> query_buckets;  // SelectRows over dense inputs: L buckets per sample
  } batch;

  /// Offset of the weight from input j to local neuron i in the storage layout.
  size_t At(int64_t i, int64_t j) const { return WeightAt(spec, i, j); }
  float* Row(int64_t r) { return w.data() + r * cols; }
  const float* Row(int64_t r) const { return w.data() + r * cols; }
  float* GRow(int64_t r) { return g.data() + r * cols; }
  template <class Storage>
  void ToRows(const Storage& storage, std::vector<float>* rows) const {
    StorageToRows(spec, storage.data(), rows);
  }
  template <class Storage>
  void FromRows(const std::vector<float>& rows, Storage* storage) const {
    storage->resize(static_cast<size_t>(spec.local()) * spec.in_dim);
    RowsToStorage(spec, rows, storage->data());
  }
};

struct CpuBackend::ThreadScratch {
  SamplerScratch sampler;
  LshHash::Scratch hash;
  std::vector<uint32_t> buckets;
  std::vector<int32_t> forced;
  std::vector<float> dense;
  std::vector<int32_t> qids;
  std::vector<float> qvals;
  std::vector<float> grad;  // one gradient row
  std::vector<float> gin;   // a private input-gradient buffer
};

}  // namespace dslide::cpu
