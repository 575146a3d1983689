// Table build with capacity-limited buckets: reservoir (k/n replacement) or FIFO.
#include "lsh_table.h"

#include <algorithm>

#include "error.h"
#include "rng.h"

namespace dslide {

LshTables::LshTables(int num_tables, int table_bits, int bucket_capacity, InsertPolicy policy)
    : tables_(num_tables), table_bits_(table_bits), capacity_(bucket_capacity), policy_(policy) {
  DSLIDE_ASSERT(table_bits >= 1 && table_bits <= 24);
  DSLIDE_ASSERT(bucket_capacity >= 1);
}

void LshTables::Build(const uint32_t* buckets, int64_t n, uint64_t seed) {
  const int L = static_cast<int>(tables_.size());
  const size_t nb = size_t{1} << table_bits_;
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < L; ++t) {
    Table& tab = tables_[t];
    std::vector<uint32_t> seen(nb, 0);
    for (int64_t i = 0; i < n; ++i) ++seen[buckets[t * n + i]];
    tab.offsets.assign(nb + 1, 0);
    for (size_t b = 0; b < nb; ++b)
      tab.offsets[b + 1] = tab.offsets[b] + std::min<uint32_t>(seen[b], capacity_);
    tab.ids.assign(tab.offsets[nb], -1);
    std::fill(seen.begin(), seen.end(), 0);
    Rng rng(StreamSeed(seed, 0x7461626c65, t));
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t b = buckets[t * n + i];
      const uint32_t k = seen[b]++;  // items already offered to this bucket
      int32_t* slots = tab.ids.data() + tab.offsets[b];
      if (k < static_cast<uint32_t>(capacity_)) {
        slots[k] = static_cast<int32_t>(i);
      } else if (policy_ == InsertPolicy::kFifo) {
        slots[k % capacity_] = static_cast<int32_t>(i);  // overwrite the oldest
      } else {
        const uint64_t j = rng.Below(uint64_t{k} + 1);  // keep with probability cap/(k+1)
        if (j < static_cast<uint64_t>(capacity_)) slots[j] = static_cast<int32_t>(i);
      }
    }
  }
}

size_t LshTables::MemoryBytes() const {
  size_t b = 0;
  for (const auto& t : tables_) b += t.offsets.capacity() * 4 + t.ids.capacity() * 4;
  return b;
}

}  // namespace dslide
