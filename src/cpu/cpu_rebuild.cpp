// The CPU backend's LSH tables: hash functions drawn, neurons hashed (only those moved since
// the last rebuild where the hash allows), tables built.
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "common/parallel.h"
#include "cpu/cpu_layer.h"
#include "cpu/cpu_tuning.h"

namespace dslide::cpu {

void CpuBackend::RebuildTables(int layer, const RebuildPlan& plan) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  if (s.dense()) return;
  const LshConfig& c = opt_.lsh;
  const bool new_hashes = !L.hash || plan.hash_version != L.plan.hash_version;
  L.plan = plan;
  if (new_hashes) MakeHash(layer);
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
  const bool incremental = !c.mips && L.indexed && L.buckets_of == L.plan.hash_version;
  for (int64_t i = 0; i < n; ++i)
    if (!incremental || L.moved[i]) todo.push_back(static_cast<int32_t>(i));
  if (L.indexed) {
    L.moved.assign(n, 0);
    L.buckets_of = L.plan.hash_version;
  }
  // Rows in blocks (the hash runs a block at a time).
  constexpr int64_t kRows = CpuTuning::kRebuildRows;
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
  L.tables.Build(buckets.data(), n, plan.table_seed);
}

void CpuBackend::MakeHash(int layer) {
  Layer& L = *layers_[layer];
  const LshConfig& c = opt_.lsh;
  L.buckets_of = 0;  // new hash functions: every neuron's buckets are hashed again
  L.hash = std::make_unique<LshHash>(c.family, L.spec.in_dim + 1 + (c.mips ? 1 : 0), c.k, c.l,
                                     c.bin_size, L.plan.hash_seed);
  L.tables = LshTables(c.l, L.hash->table_bits(), c.bucket_capacity, c.insert);
}

}  // namespace dslide::cpu
