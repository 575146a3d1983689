// Table build with capacity-limited buckets: reservoir (k/n replacement) or FIFO.
#include "lsh/lsh_table.h"

#include <algorithm>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/rng.h"
#include "lsh/select_kernel.h"

namespace dslide {

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 8;  // 64-bit lanes of an AVX-512 register

// GCC 12 warns that the intrinsics' internal placeholder operand "may be used uninitialized"
// (GCC bug 105593, fixed in GCC 13); nothing here reads an uninitialised value.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/// FillBucket's reservoir for up to kLanes buckets that overflow, a bucket per lane: the
/// draws of each bucket's stream (xoshiro256**, then Lemire's multiply-shift below
/// k + 1 < 2^32) are the integers Rng::Below draws, so each bucket keeps the same slots;
/// the lanes' steps overlap where one stream's steps would wait on each other.
void FillOverflowing(int lanes, const int32_t* const* items, const uint32_t* counts, int cap,
                     const uint64_t* seeds, int32_t* const* slots) {
  alignas(64) uint64_t st[4][kLanes] = {}, cnt[kLanes] = {}, at[kLanes];
  uint32_t most = 0;
  for (int l = 0; l < lanes; ++l) {
    const Rng rng(seeds[l]);
    for (int w = 0; w < 4; ++w) st[w][l] = rng.State(w);
    cnt[l] = counts[l];
    most = std::max(most, counts[l]);
    std::copy(items[l], items[l] + cap, slots[l]);
  }
  __m512i s0 = _mm512_load_si512(st[0]), s1 = _mm512_load_si512(st[1]);
  __m512i s2 = _mm512_load_si512(st[2]), s3 = _mm512_load_si512(st[3]);
  const __m512i vcnt = _mm512_load_si512(cnt), vcap = _mm512_set1_epi64(cap);
  for (uint64_t k = static_cast<uint64_t>(cap); k < most; ++k) {
    // Next(): rotl(s1 * 5, 7) * 9, then the state update.
    __m512i x = _mm512_add_epi64(s1, _mm512_slli_epi64(s1, 2));
    x = _mm512_rol_epi64(x, 7);
    x = _mm512_add_epi64(x, _mm512_slli_epi64(x, 3));
    const __m512i t = _mm512_slli_epi64(s1, 17);
    s2 = _mm512_xor_si512(s2, s0);
    s3 = _mm512_xor_si512(s3, s1);
    s1 = _mm512_xor_si512(s1, s2);
    s0 = _mm512_xor_si512(s0, s3);
    s2 = _mm512_xor_si512(s2, t);
    s3 = _mm512_rol_epi64(s3, 45);
    // Below(k + 1): the high word of x * (k + 1), from x's two 32-bit halves.
    const __m512i m = _mm512_set1_epi64(static_cast<int64_t>(k + 1));
    const __m512i lo = _mm512_mul_epu32(x, m);
    const __m512i hi = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
    const __m512i j = _mm512_srli_epi64(_mm512_add_epi64(hi, _mm512_srli_epi64(lo, 32)), 32);
    __mmask8 hit = _mm512_cmplt_epu64_mask(j, vcap) &
                   _mm512_cmplt_epu64_mask(_mm512_set1_epi64(static_cast<int64_t>(k)), vcnt);
    if (hit == 0) continue;
    _mm512_store_si512(at, j);
    for (; hit != 0; hit &= hit - 1) {
      const int l = __builtin_ctz(hit);
      slots[l][at[l]] = items[l][k];
    }
  }
}
#pragma GCC diagnostic pop
#else
constexpr int kLanes = 1;

/// Without AVX-512: FillBucket on each bucket.
void FillOverflowing(int lanes, const int32_t* const* items, const uint32_t* counts, int cap,
                     const uint64_t* seeds, int32_t* const* slots) {
  for (int l = 0; l < lanes; ++l)
    FillBucket(items[l], counts[l], cap, /*fifo=*/false, seeds[l], slots[l]);
}
#endif

}  // namespace

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
    // Buckets that overflow a reservoir go kLanes at a time (FillOverflowing); the same slots.
    const int32_t* lane_items[kLanes];
    int32_t* lane_slots[kLanes];
    uint32_t lane_count[kLanes];
    uint64_t lane_seed[kLanes];
    int lanes = 0;
    for (size_t b = 0; b < nb; ++b) {
      const uint32_t c = start[b + 1] - start[b];
      if (c == 0) continue;
      const uint64_t bucket_seed = BucketSeed(seed, t, static_cast<uint32_t>(b));
      if (fifo || c <= static_cast<uint32_t>(capacity_)) {
        FillBucket(items.data() + start[b], c, capacity_, fifo, bucket_seed,
                   tab.ids.data() + tab.offsets[b]);
        continue;
      }
      lane_items[lanes] = items.data() + start[b];
      lane_slots[lanes] = tab.ids.data() + tab.offsets[b];
      lane_count[lanes] = c;
      lane_seed[lanes++] = bucket_seed;
      if (lanes == kLanes) {
        FillOverflowing(lanes, lane_items, lane_count, capacity_, lane_seed, lane_slots);
        lanes = 0;
      }
    }
    if (lanes > 0) FillOverflowing(lanes, lane_items, lane_count, capacity_, lane_seed, lane_slots);
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
