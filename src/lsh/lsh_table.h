// L hash tables of fixed-capacity buckets over a shard's neurons, stored compactly (CSR per
// table), so only occupied slots cost memory (the original SLIDE allocates every bucket).
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"

namespace dslide {

class LshTables {
 public:
  LshTables() = default;
  LshTables(int num_tables, int table_bits, int bucket_capacity, InsertPolicy policy);

  /// Rebuilds every table from scratch. `buckets` is L x n, table-major: the bucket of item
  /// i in table t is buckets[t * n + i]. Items are inserted in increasing id; a full bucket
  /// keeps a uniform sample (reservoir, Vitter's algorithm R: the n-th item replaces a random
  /// slot with probability capacity/n) or the newest items (FIFO), with a random stream per
  /// (table, bucket) (BucketSeed), so the GPU backend builds the same tables. Parallel over
  /// tables; deterministic for a given seed.
  void Build(const uint32_t* buckets, int64_t n, uint64_t seed);

  struct Bucket {
    const int32_t* ids;
    int32_t size;
  };
  Bucket Get(int table, uint32_t bucket) const {
    const Table& t = tables_[table];
    const uint32_t b = t.offsets[bucket], e = t.offsets[bucket + 1];
    return {t.ids.data() + b, static_cast<int32_t>(e - b)};
  }
  int num_tables() const { return static_cast<int>(tables_.size()); }
  int capacity() const { return capacity_; }
  size_t MemoryBytes() const;

  /// The tables as flat arrays (for checkpoints): per table its 2^bits + 1 offsets, then
  /// its ids; `sizes` holds each table's id count.
  void Export(std::vector<uint32_t>* offsets, std::vector<int32_t>* ids,
              std::vector<int64_t>* sizes) const;
  /// Restores what Export wrote (same number of tables and bits); throws dslide::Error on
  /// inconsistent arrays.
  void Import(const std::vector<uint32_t>& offsets, const std::vector<int32_t>& ids,
              const std::vector<int64_t>& sizes, int64_t n);

 private:
  struct Table {
    std::vector<uint32_t> offsets;  ///< 2^bits + 1
    std::vector<int32_t> ids;
  };
  std::vector<Table> tables_;
  int table_bits_ = 0;
  int capacity_ = 0;
  InsertPolicy policy_ = InsertPolicy::kReservoir;
};

}  // namespace dslide
