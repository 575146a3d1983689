// The query kernels (query.h) on the device.
#include <cub/block/block_scan.cuh>

#include "grid.cuh"
#include "query.h"

namespace dslide::gpu {

__global__ void QueryHashKernel(const QueryHash k) {
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int64_t i = blockIdx.x; i < k.q.B; i += gridDim.x) {
    k.Raw(i, tid, nt);
    __syncthreads();
    k.Densify(i, tid);
    __syncthreads();
    k.Combine(i, tid, nt);
  }
}

void LaunchQueryHash(StreamHandle s, const QueryHash& k) {
  QueryHashKernel<<<GridFor(k.q.B, 1), QueryHash::kThreads, 0, s>>>(k);
}

/// The block's stable compaction (HostCompact's device form): emit(i, rank) for the i in
/// [0, n) with flag(i), in tiles of the block's threads ranked by a block scan; every
/// thread gets the number emitted.
template <int kThreads, class Flag, class Emit>
__device__ int64_t BlockCompact(int64_t n, const Flag& flag, const Emit& emit) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage ts;
  __shared__ int64_t carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const int f = i < n && flag(i) ? 1 : 0;
    int rank, tile;
    Scan(ts).ExclusiveSum(f, rank, tile);
    if (f) emit(i, carry + rank);
    __syncthreads();  // carry read, ts free again
    if (threadIdx.x == 0) carry += tile;
    __syncthreads();
  }
  const int64_t r = carry;
  __syncthreads();  // read by all before another call sets it
  return r;
}

/// Sample i's parallel vanilla selection (RunVanillaOnHost's phases, between barriers).
__device__ void SelectVanilla(const Select& k, int64_t i) {
  constexpr int nt = Select::kThreads;
  const int tid = threadIdx.x;
  __shared__ Select::Plan pl;
  Rng rng = k.SampleRng(i);  // thread 0's stream; the others never draw
  if (tid == 0) k.PlanVanilla(i, &rng, &pl);
  __syncthreads();
  if (!pl.done) {
    k.GatherVanilla(i, pl, tid, nt);
    __syncthreads();
    const int64_t gathered = BlockCompact<nt>(
        pl.total, [&](int64_t p) { return k.FirstMet(i, static_cast<int32_t>(p)); },
        [&](int64_t p, int64_t r) { k.EmitVanilla(i, &pl, r, static_cast<int32_t>(p)); });
    if (tid == 0) k.CutVanilla(i, gathered, &rng, &pl);
    __syncthreads();
    k.TakeVanilla(i, pl, tid, nt);
    __syncthreads();
    if (tid == 0) pl.k += pl.take;
    __syncthreads();
    if (k.SharedFill(pl)) {
      const int64_t need = pl.budget - pl.k, at = pl.k;
      int32_t* o = k.Out(i);
      const int64_t free = BlockCompact<nt>(
          *k.shared_n, [&](int64_t j) { return k.SharedFree(i, j); },
          [&](int64_t j, int64_t r) {
            if (r < need) o[at + r] = k.shared[j];
          });
      const int64_t taken = free < need ? free : need;
      k.StampTaken(i, at, taken, tid, nt);
      __syncthreads();
      if (tid == 0) pl.k += taken;
      __syncthreads();
    }
    if (tid == 0) {
      DeviceMarks mk = k.Marks(i);
      pl.k = SelectFillRest(k.policy.fill, pl.budget, pl.k, &rng, mk, k.Out(i));
    }
    __syncthreads();
  }
  k.Finish(i, pl.k, tid, nt);
  __syncthreads();  // pl is the next sample's
}

__global__ void SelectKernel(const Select k) {
  using Scan = cub::BlockScan<int, Select::kThreads>;
  __shared__ typename Scan::TempStorage ts;
  __shared__ int carry;  // candidates gathered by the tiles before
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int64_t i = blockIdx.x; i < k.B; i += gridDim.x) {
    k.Clear(i, tid, nt);
    __syncthreads();
    if (k.Parallel()) {
      SelectVanilla(k, i);
      continue;
    }
    if (tid == 0) k.Prepare(i);
    __syncthreads();
    if (k.Counting()) {
      k.Count(i, tid, nt);
      if (tid == 0) carry = 0;
      __syncthreads();
      const int32_t total = k.Total(i);
      for (int32_t base = 0; base < total; base += nt) {
        const int32_t p = base + tid;
        const int flag = p < total && k.FirstAt(i, p) ? 1 : 0;
        int rank, tile;
        Scan(ts).ExclusiveSum(flag, rank, tile);
        if (flag) k.Emit(i, carry + rank, p);
        __syncthreads();  // carry read, ts free again
        if (tid == 0) carry += tile;
        __syncthreads();
      }
      if (tid == 0) k.SetGathered(i, carry);
      __syncthreads();
    }
    if (tid == 0) k.Run(i);
    __syncthreads();  // the next sample's set reuses nothing, but its Clear follows Run
  }
}

void LaunchSelect(StreamHandle s, const Select& k) {
  SelectKernel<<<GridFor(k.B, 1), Select::kThreads, 0, s>>>(k);
}

__device__ void BlockBitonic(const BatchFill& k) {
  for (int64_t size = 2; size <= k.pow2; size *= 2)
    for (int64_t stride = size / 2; stride > 0; stride /= 2) {
      k.BitonicPass(size, stride, threadIdx.x, blockDim.x);
      __syncthreads();
    }
}

__global__ void __launch_bounds__(BatchFill::kThreads) BatchFillKernel(const BatchFill k) {
  constexpr int nt = BatchFill::kThreads;
  const int tid = threadIdx.x;
  if (!k.on) {
    if (tid == 0) *k.shared_n = 0;
    return;
  }
  Rng rng = k.MakeRng();  // thread 0's stream; the others never draw
  const int64_t n = k.N(), count = k.Count();
  int64_t got = 0;
  if (count > 0 && k.DenseDraw()) {
    k.Iota(tid, nt);
    __syncthreads();
    if (tid == 0) SampleDown(k.fill, n, count, &rng);
    __syncthreads();
    got = count;
  } else if (count > 0) {
    while (got < count) {
      if (tid == 0)
        for (int64_t g = got; g < count; ++g) k.fill[g] = static_cast<int32_t>(rng.Below(n));
      __syncthreads();
      k.ToScratch(k.fill, count, tid, nt);
      __syncthreads();
      BlockBitonic(k);
      got = BlockCompact<nt>(
          count, [&](int64_t i) { return k.FirstOfRun(i); },
          [&](int64_t i, int64_t r) { k.fill[r] = k.scratch[i]; });
    }
    if (tid == 0) Shuffle(k.fill, count, &rng);
    __syncthreads();
  }
  if (k.li == nullptr) {
    for (int64_t i = tid; i < got; i += nt) k.shared[i] = k.fill[i];
    if (tid == 0) *k.shared_n = got;
    return;
  }
  int64_t m = BlockCompact<nt>(
      k.n_lab, [&](int64_t j) { return k.OnShard(j); },
      [&](int64_t j, int64_t r) { k.own[r] = k.Local(j); });
  k.ToScratch(k.own, m, tid, nt);
  __syncthreads();
  BlockBitonic(k);
  m = BlockCompact<nt>(
      m, [&](int64_t i) { return k.FirstOfRun(i); },
      [&](int64_t i, int64_t r) { k.own[r] = k.scratch[i]; });
  for (int64_t i = tid; i < m; i += nt) k.own[m + i] = k.own[i];
  __syncthreads();
  if (tid == 0) Shuffle(k.own, m, &rng);
  __syncthreads();
  for (int64_t i = tid; i < m; i += nt) k.shared[i] = k.own[i];
  const int64_t o = BlockCompact<nt>(
      got, [&](int64_t i) { return k.NotALabel(i, m); },
      [&](int64_t i, int64_t r) { k.shared[m + r] = k.fill[i]; });
  if (tid == 0) *k.shared_n = m + o;
}

void LaunchBatchFill(StreamHandle s, const BatchFill& k) {
  BatchFillKernel<<<1, BatchFill::kThreads, 0, s>>>(k);
}

}  // namespace dslide::gpu
