// The CPU backend's selection: each sample's active neurons of a sampled layer (its labels,
// LSH candidates, the batch's shared fill).
#include "cpu/cpu_backend.h"

#include <algorithm>

#include "common/parallel.h"
#include "common/rng.h"
#include "cpu/cpu_layer.h"
#include "cpu/cpu_tuning.h"
#include "model/backend_streams.h"

namespace dslide::cpu {

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
  DSLIDE_ASSERT(L.hash != nullptr, "layer ", layer + 1, " selects before its tables are built");
  // The most any sample can get: its budget, raised where its labels leave fewer than the
  // floor of negatives. The batch's shared fill covers that many.
  const int64_t cap = BudgetSampler::ActiveCap(s.budget, max_labels, s.min_negatives, s.local());
  out->Strided(B, cap);
  // The log-Q correction's chances, written beside the ids (training with labels).
  L.batch.log_q_valid = labels != nullptr && CorrectsLogQ(s, opt_);
  if (L.batch.log_q_valid) {
    L.batch.log_q.resize(out->vals.size());
    if (L.batch.batch_q_of != B) {
      BatchLabelChances(opt_.label_share, B, &L.batch.batch_q);
      L.batch.batch_q_of = B;
    }
  }
  const bool batch_fill = opt_.lsh.fill == FillPolicy::kBatch;
  auto batch_list = [&] {
    Rng rng(StreamSeed(opt_.seed, streams::kBatchFill, iter, (uint64_t(layer) << 32) | spec_.rank));
    L.batch.batch_fill_labels = BudgetSampler::BatchList(
        s.begin, s.end, cap, labels ? &labels->ids : nullptr, &rng, &L.batch.batch_fill);
  };
  // Query [x, 1, 0]: the 1 meets the bias coordinate, so collisions follow w.x + b. Dense
  // inputs are hashed in blocks of samples (the rebuild's kernel: the same bits as one at a
  // time), sparse ones one at a time in the selection loop. The batch's shared list (one
  // thread's work) is made beside the hashing: task 0 of the same loop.
  const int64_t nt = L.hash->num_tables(), dim = L.hash->dim();
  if (in.dense) {
    constexpr int64_t kBlock = CpuTuning::kSelectBlock;
    L.batch.query_buckets.resize(static_cast<size_t>(B) * nt);
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
      L.hash->HashDenseRows(ts.dense.data(), dim, rows, L.batch.query_buckets.data() + i0 * nt,
                            &ts.hash);
    });
  } else if (batch_fill) {
    batch_list();
  }
  ParallelFor(B, 4, [&](int64_t i) {
    ThreadScratch& ts = *scratch_[ThreadId()];
    if (ts.sampler.size() != s.local()) ts.sampler.Resize(s.local());
    const uint32_t* buckets = nullptr;
    if (in.dense) {
      buckets = L.batch.query_buckets.data() + i * nt;
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
    Inclusion inclusion;
    if (L.batch.log_q_valid) {
      inclusion.batch_q = L.batch.batch_q.data();
      inclusion.batch_labels = batch_fill ? L.batch.batch_fill_labels : 0;
      inclusion.log_q = L.batch.log_q.data() + out->off[i];
    }
    const int64_t k = L.sampler->Select(&L.tables, buckets, ts.forced.data(), ts.forced.size(),
                                        s.budget, s.min_negatives, &rng, &ts.sampler, ids,
                                        batch_fill ? &L.batch.batch_fill : nullptr,
                                        L.batch.log_q_valid ? &inclusion : nullptr);
    for (int64_t j = 0; j < k; ++j) ids[j] += static_cast<int32_t>(s.begin);
    out->n[i] = k;
  });
}

}  // namespace dslide::cpu
