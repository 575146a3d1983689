// Table build with capacity-limited buckets: reservoir (k/n replacement) or FIFO.
#include "lsh_table.h"

#include <algorithm>

#include "error.h"
#include "rng.h"
#include "select_kernel.h"

namespace dslide {

LshTables::LshTables(int num_tables, int table_bits, int bucket_capacity, InsertPolicy policy)
    : tables_(num_tables), table_bits_(table_bits), capacity_(bucket_capacity), policy_(policy) {
  DSLIDE_ASSERT(table_bits >= 1 && table_bits <= 24);
  DSLIDE_ASSERT(bucket_capacity >= 1);
}

void LshTables::Build(const uint32_t* buckets, int64_t n, uint64_t seed) {
  const int L = static_cast<int>(tables_.size());
  const size_t nb = size_t{1} << table_bits_;
  const bool fifo = policy_ == InsertPolicy::kFifo;
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < L; ++t) {
    Table& tab = tables_[t];
    const uint32_t* bt = buckets + t * n;
    // Stable counting sort of the items by bucket, then each bucket takes its items in
    // increasing id with its own random stream (so buckets can be filled in parallel, the
    // way the GPU backend does it, with the same result).
    std::vector<uint32_t> start(nb + 1, 0);
    for (int64_t i = 0; i < n; ++i) ++start[bt[i] + 1];
    for (size_t b = 0; b < nb; ++b) start[b + 1] += start[b];
    thread_local std::vector<int32_t> items;  // every element is written below
    items.resize(n);
    {
      std::vector<uint32_t> pos(start.begin(), start.end() - 1);
      for (int64_t i = 0; i < n; ++i) items[pos[bt[i]]++] = static_cast<int32_t>(i);
    }
    tab.offsets.assign(nb + 1, 0);
    for (size_t b = 0; b < nb; ++b)
      tab.offsets[b + 1] = tab.offsets[b] + std::min<uint32_t>(start[b + 1] - start[b], capacity_);
    tab.ids.assign(tab.offsets[nb], -1);
    for (size_t b = 0; b < nb; ++b) {
      const uint32_t c = start[b + 1] - start[b];
      if (c == 0) continue;
      FillBucket(items.data() + start[b], c, capacity_, fifo,
                 BucketSeed(seed, t, static_cast<uint32_t>(b)), tab.ids.data() + tab.offsets[b]);
    }
  }
}

void LshTables::Export(std::vector<uint32_t>* offsets, std::vector<int32_t>* ids,
                       std::vector<int64_t>* sizes) const {
  offsets->clear();
  ids->clear();
  sizes->clear();
  for (const auto& t : tables_) {
    offsets->insert(offsets->end(), t.offsets.begin(), t.offsets.end());
    ids->insert(ids->end(), t.ids.begin(), t.ids.end());
    sizes->push_back(static_cast<int64_t>(t.ids.size()));
  }
}

void LshTables::Import(const std::vector<uint32_t>& offsets, const std::vector<int32_t>& ids,
                       const std::vector<int64_t>& sizes, int64_t n) {
  const size_t nb = (size_t{1} << table_bits_) + 1;
  DSLIDE_CHECK(sizes.size() == tables_.size() && offsets.size() == nb * tables_.size(),
               "LSH tables in the checkpoint do not match the configuration (", sizes.size(),
               " tables of ", offsets.size() / std::max<size_t>(sizes.size(), 1),
               " offsets, expected ", tables_.size(), " of ", nb, ")");
  size_t id_at = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    Table& tab = tables_[t];
    tab.offsets.assign(offsets.begin() + t * nb, offsets.begin() + (t + 1) * nb);
    DSLIDE_CHECK(sizes[t] >= 0 && id_at + sizes[t] <= ids.size() && tab.offsets[0] == 0 &&
                     tab.offsets[nb - 1] == static_cast<uint64_t>(sizes[t]),
                 "LSH table ", t, " in the checkpoint is inconsistent");
    for (size_t b = 1; b < nb; ++b)
      DSLIDE_CHECK(tab.offsets[b] >= tab.offsets[b - 1] &&
                       tab.offsets[b] - tab.offsets[b - 1] <= static_cast<uint32_t>(capacity_),
                   "LSH table ", t, " in the checkpoint has a malformed bucket ", b - 1);
    tab.ids.assign(ids.begin() + id_at, ids.begin() + id_at + sizes[t]);
    for (int32_t id : tab.ids)
      DSLIDE_CHECK(id >= 0 && id < n, "LSH table ", t, " in the checkpoint names neuron ", id,
                   " outside the shard's ", n);
    id_at += sizes[t];
  }
  DSLIDE_CHECK(id_at == ids.size(), "LSH tables in the checkpoint have trailing ids");
}

size_t LshTables::MemoryBytes() const {
  size_t b = 0;
  for (const auto& t : tables_) b += t.offsets.capacity() * 4 + t.ids.capacity() * 4;
  return b;
}

}  // namespace dslide
