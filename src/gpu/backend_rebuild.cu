// The GPU backend's LSH tables: hash functions, and the rebuild of a shard's tables from its
// weights on the device.
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

template <class X>
void GpuBackendT<X>::RebuildTables(int layer, const RebuildPlan& plan) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  if (s.dense()) return;
  const LshConfig& c = opt_.lsh;
  const bool new_hashes = !L.hash || plan.hash_version != L.plan.hash_version;
  L.plan = plan;
  if (new_hashes) MakeHash(layer);
  const int64_t n = s.local(), in_dim = s.in_dim;
  const bool im = s.input_major;
  const float* w = L.w.data();
  const float* b = L.b.data();
  // MIPS scales the rows by the largest norm and completes them: the norms, only then.
  double* norm2 = nullptr;
  double inv_m = 1.0;
  if (c.mips) {
    norm2_.Resize(n);
    norm2 = norm2_.data();
    x_.For(n, [=] DSLIDE_HD(int64_t i) {
      double a = static_cast<double>(b[i]) * b[i];
      for (int64_t j = 0; j < in_dim; ++j) {
        const double wij = w[im ? j * n + i : i * in_dim + j];
        a = AddProductRounded(a, wij, wij);  // the CPU's roundings: the tables depend on it
      }
      norm2[i] = a;
    });
    std::vector<double> hn(n);
    x_.Download(norm2_, hn.data(), n);
    double max_norm2 = 0.0;
    for (double v : hn) max_norm2 = std::max(max_norm2, v);
    if (max_norm2 > 0) inv_m = 1.0 / std::sqrt(max_norm2);
  }
  HashLayerRows(L, norm2, inv_m);
  FillTables(L, plan.table_seed);
}

template <class X>
void GpuBackendT<X>::HashLayerRows(Layer& L, const double* norm2, double inv_m) {
  const LayerSpec& s = L.spec;
  const int64_t n = s.local(), in_dim = s.in_dim;
  const bool mips = opt_.lsh.mips;
  const HashView h = L.dhash;
  const int nt = h.l, bits = h.table_bits;
  const int64_t nh = h.num_hashes;
  DSLIDE_CHECK(static_cast<uint64_t>(nt) << bits <= (uint64_t{1} << 32),
               "the GPU backend needs L * 2^bits <= 2^32 (L=", nt, ", bits=", bits, ")");
  // Positions in the sorted (table, bucket, neuron) keys are 32-bit.
  DSLIDE_CHECK(static_cast<uint64_t>(nt) * static_cast<uint64_t>(n) < (uint64_t{1} << 32),
               "the GPU backend needs L * (neurons of a shard) < 2^32 (L=", nt, ", neurons=", n,
               "): use more ranks or fewer tables");
  // Hash the rows [w, b] (MIPS-transformed), a chunk of neurons at a time (their raw
  // hashes in at most 64 MB, and never fewer than 65,536 neurons).
  L.keys.Resize(static_cast<size_t>(nt) * n);
  uint64_t* keys = L.keys.data();
  const int64_t chunk = std::min<int64_t>(n, std::max<int64_t>(65536, (int64_t{16} << 20) / nh));
  arg_.Resize(chunk * nh);
  int32_t* arg = arg_.data();
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    HashRows k;
    k.h = h;
    k.c0 = c0;
    k.count = std::min(n, c0 + chunk) - c0;
    k.n = n;
    k.in_dim = in_dim;
    k.input_major = s.input_major;
    k.mips = mips;
    k.inv_m = inv_m;
    k.w = L.w.data();
    k.b = L.b.data();
    k.norm2 = norm2;
    k.arg = arg;
    k.keys = keys;
    x_.Launch(k);
  }
}

template <class X>
void GpuBackendT<X>::FillTables(Layer& L, uint64_t seed) {
  const HashView& h = L.dhash;
  const int nt = h.l;
  const int64_t n = L.spec.local(), nb = int64_t{1} << h.table_bits;
  uint64_t* keys = L.keys.data();
  const int64_t N = static_cast<int64_t>(nt) * n;
  x_.SortKeys(keys, N);
  // Run of each (table, bucket), capped sizes, and their offsets.
  run_start_.Resize(nt * nb);
  run_end_.Resize(nt * nb);
  Fill(run_start_.data(), nt * nb, uint32_t{0});
  Fill(run_end_.data(), nt * nb, uint32_t{0});
  uint32_t* rs = run_start_.data();
  uint32_t* re = run_end_.data();
  items_.Resize(N);
  int32_t* items = items_.data();
  x_.For(N, [=] DSLIDE_HD(int64_t p) {
    const uint64_t tb = keys[p] >> 32;
    items[p] = static_cast<int32_t>(keys[p] & 0xffffffffu);
    if (p == 0 || (keys[p - 1] >> 32) != tb) rs[tb] = static_cast<uint32_t>(p);
    if (p == N - 1 || (keys[p + 1] >> 32) != tb) re[tb] = static_cast<uint32_t>(p + 1);
  });
  const int cap = opt_.lsh.bucket_capacity;
  sizes_.Resize(nt * nb + 1);
  uint32_t* sz = sizes_.data();
  x_.For(nt * nb + 1, [=] DSLIDE_HD(int64_t u) {
    const uint32_t cnt = u < nt * nb ? re[u] - rs[u] : 0u;
    sz[u] = cnt < static_cast<uint32_t>(cap) ? cnt : static_cast<uint32_t>(cap);
  });
  gpos_.Resize(nt * nb + 1);
  x_.ExclusiveScan(sz, gpos_.data(), nt * nb + 1);
  const uint32_t* gp = gpos_.data();
  const int64_t total = x_.Read(gpos_, nt * nb);
  L.tids.Resize(std::max<int64_t>(total, 1));
  L.toff.Resize(nt * (nb + 1));
  L.tbase.Resize(nt + 1);
  int32_t* tids = L.tids.data();
  uint32_t* toff = L.toff.data();
  int64_t* tbase = L.tbase.data();
  const bool fifo = opt_.lsh.insert == InsertPolicy::kFifo;
  FillBuckets k;
  k.nt = nt;
  k.cap = cap;
  k.nb = nb;
  k.fifo = fifo;
  k.seed = seed;
  k.gp = gp;
  k.rs = rs;
  k.re = re;
  k.items = items;
  k.tids = tids;
  k.toff = toff;
  k.tbase = tbase;
  x_.Launch(k);
  L.host_base.resize(nt + 1);
  x_.Download(L.tbase, L.host_base.data(), nt + 1);
}

template <class X>
void GpuBackendT<X>::MakeHash(int layer) {
  Layer& L = *layers_[layer];
  const LshConfig& c = opt_.lsh;
  L.hash = std::make_unique<LshHash>(c.family, L.spec.in_dim + 1 + (c.mips ? 1 : 0), c.k, c.l,
                                     c.bin_size, L.plan.hash_seed);
  const HashView hv = L.hash->View();
  const int64_t nh = hv.num_hashes, dim = hv.dim;
  const bool srp = hv.family == HashView::kSrp;
  x_.Upload(&L.proj_off, hv.proj_off, srp ? nh + 1 : 0);
  x_.Upload(&L.proj_idx, hv.proj_idx, L.hash->proj_size());
  x_.Upload(&L.proj_sign, hv.proj_sign, L.hash->proj_size());
  x_.Upload(&L.inv_off, hv.inv_off, dim + 1);
  x_.Upload(&L.inv_hash, hv.inv_hash, L.hash->inv_size());
  x_.Upload(&L.inv_sign, hv.inv_sign, srp ? L.hash->inv_size() : 0);
  x_.Upload(&L.bins, hv.bins, L.hash->bins_size());
  L.dhash = hv;
  L.dhash.proj_off = L.proj_off.data();
  L.dhash.proj_idx = L.proj_idx.data();
  L.dhash.proj_sign = L.proj_sign.data();
  L.dhash.inv_off = L.inv_off.data();
  L.dhash.inv_hash = L.inv_hash.data();
  L.dhash.inv_sign = L.inv_sign.data();
  L.dhash.bins = L.bins.data();
  DSLIDE_CHECK(hv.l <= 64 * 1024, "too many tables");
}

#define DSLIDE_GPU_MEMBERS(X)                                                               \
  template void GpuBackendT<X>::RebuildTables(int layer, const RebuildPlan& plan);          \
  template void GpuBackendT<X>::HashLayerRows(Layer& L, const double* norm2, double inv_m); \
  template void GpuBackendT<X>::FillTables(Layer& L, uint64_t seed);                        \
  template void GpuBackendT<X>::MakeHash(int layer);
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
