// The query kernels (query.h, selection.h, batch_fill.h) on the device.
#include <cub/block/block_scan.cuh>

#include "gpu/kernels/batch_fill.h"
#include "gpu/kernels/grid.cuh"
#include "gpu/kernels/query.h"
#include "gpu/kernels/selection.h"

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

/// SampleDown(v, n, k) by thread 0 with the block's stream, in shared memory (sm, sm_n
/// entries) where v fits: the serial swaps then wait on shared, not global, memory.
__device__ void BlockSampleDown(int32_t* v, int64_t n, int64_t k, Rng* rng, int32_t* sm,
                                int64_t sm_n) {
  if (n > sm_n) {
    if (threadIdx.x == 0) SampleDown(v, n, k, rng);
    __syncthreads();
    return;
  }
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sm[j] = v[j];
  __syncthreads();
  if (threadIdx.x == 0) SampleDown(sm, n, k, rng);
  __syncthreads();
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) v[j] = sm[j];
  __syncthreads();
}

/// Shuffle(v, n) likewise.
__device__ void BlockShuffle(int32_t* v, int64_t n, Rng* rng, int32_t* sm, int64_t sm_n) {
  if (n > sm_n) {
    if (threadIdx.x == 0) Shuffle(v, n, rng);
    __syncthreads();
    return;
  }
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sm[j] = v[j];
  __syncthreads();
  if (threadIdx.x == 0) Shuffle(sm, n, rng);
  __syncthreads();
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) v[j] = sm[j];
  __syncthreads();
}

/// The parallel selection's last phases (RunTailOnHost's): the chosen candidates appended,
/// the batch's shared fill, the rest of the fill, the row finished.
__device__ void SelectTail(const Select& k, int64_t i, Select::Plan& pl, Rng& rng) {
  constexpr int nt = Select::kThreads;
  const int tid = threadIdx.x;
  if (!pl.done) {
    k.TakeChosen(i, pl, tid, nt);
    __syncthreads();
    if (tid == 0) pl.k += pl.take;
    __syncthreads();
    const int64_t k_lsh = pl.k, n_labels = k.shared_n[1];
    int64_t taken_labels = 0;
    if (k.SharedFill(pl)) {
      const int64_t need = pl.budget - pl.k, at = pl.k;
      int32_t* o = k.Out(i);
      __shared__ unsigned long long free_labels;
      if (tid == 0) free_labels = 0;
      __syncthreads();
      const int64_t free = BlockCompact<nt>(
          *k.shared_n, [&](int64_t j) { return k.SharedFree(i, j); },
          [&](int64_t j, int64_t r) {
            if (r < need) o[at + r] = k.shared[j];
            if (j < n_labels) atomicAdd(&free_labels, 1ull);
          });
      const int64_t taken = free < need ? free : need;
      const int64_t fl = static_cast<int64_t>(free_labels);
      taken_labels = fl < taken ? fl : taken;
      k.StampTaken(i, at, taken, tid, nt);
      __syncthreads();
      if (tid == 0) {
        pl.k += taken;
        pl.free_labels = fl;
      }
      __syncthreads();
    }
    if (tid == 0) {
      DeviceMarks mk = k.Marks(i);
      pl.k = SelectFillRest(k.policy.fill, pl.budget, pl.k, &rng, mk, k.Out(i));
      k.RateFill(&pl, k_lsh, taken_labels);
    }
    __syncthreads();
  }
  if (k.log_q != nullptr) {
    k.LogQ(i, pl, tid, nt);
    __syncthreads();
  }
  k.Finish(i, pl.k, tid, nt);
  __syncthreads();  // pl is the next sample's
}

/// Sample i's parallel vanilla selection (RunVanillaOnHost's phases, between barriers).
__device__ void SelectVanilla(const Select& k, int64_t i, Select::Plan& pl, int32_t* sm,
                              int64_t sm_n) {
  constexpr int nt = Select::kThreads;
  const int tid = threadIdx.x;
  Rng rng = k.SampleRng(i);  // thread 0's stream; the others never draw
  if (tid == 0) k.PlanVanilla(i, &rng, &pl);
  __syncthreads();
  if (!pl.done) {
    k.GatherVanilla(i, pl, tid, nt);
    __syncthreads();
    const int64_t gathered = BlockCompact<nt>(
        pl.total, [&](int64_t p) { return k.FirstMet(i, static_cast<int32_t>(p)); },
        [&](int64_t p, int64_t r) { k.EmitVanilla(i, &pl, r, static_cast<int32_t>(p)); });
    if (tid == 0) k.CountVanilla(i, gathered, &pl);
    __syncthreads();
    if (pl.nc > pl.room) BlockSampleDown(k.Cands(i), pl.nc, pl.room, &rng, sm, sm_n);
  }
  SelectTail(k, i, pl, rng);
}

/// Sample i's counting selection after the gather (RunCountingOnHost's phases).
__device__ void SelectCounting(const Select& k, int64_t i, int64_t gathered, Select::Plan& pl,
                               int32_t* sm, int64_t sm_n) {
  constexpr int nt = Select::kThreads;
  const int tid = threadIdx.x;
  Rng rng = k.SampleRng(i);  // thread 0's stream; the others never draw
  if (tid == 0) k.PlanCounting(i, gathered, &pl);
  __syncthreads();
  if (!pl.done) {
    if (k.policy.query == QueryStrategy::kThreshold) {
      int32_t* spare = k.Spare(i);
      int32_t* c = k.Cands(i);
      const int64_t kept = BlockCompact<nt>(
          pl.nc, [&](int64_t j) { return k.OverThreshold(i, j); },
          [&](int64_t j, int64_t r) { spare[r] = c[j]; });
      for (int64_t j = tid; j < kept; j += nt) c[j] = spare[j];
      __syncthreads();
      if (tid == 0) pl.nc = kept;
      __syncthreads();
      if (pl.nc > pl.room) BlockSampleDown(c, pl.nc, pl.room, &rng, sm, sm_n);
    } else if (pl.nc > pl.room) {
      k.TopKKeys(i, pl.nc, tid, nt);
      __syncthreads();
      uint64_t* key = k.Keys(i);
      for (int64_t size = 2; size <= k.sort_cap; size *= 2)
        for (int64_t stride = size / 2; stride > 0; stride /= 2) {
          BitonicPassOn(key, k.sort_cap, size, stride, tid, nt);
          __syncthreads();
        }
      k.TopKIds(i, pl.nc, tid, nt);
      __syncthreads();
      if (tid == 0) k.TopKCut(i, &pl);
      __syncthreads();
      BlockSampleDown(k.Cands(i) + pl.lo, pl.hi - pl.lo, pl.room - pl.lo, &rng, sm, sm_n);
    }
    if (tid == 0) {
      k.RateCounting(&pl);
      pl.take = pl.nc < pl.room ? pl.nc : pl.room;
    }
    __syncthreads();
  }
  SelectTail(k, i, pl, rng);
}

__global__ void SelectKernel(const Select k, int64_t sm_n) {
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* sm = reinterpret_cast<int32_t*>(smem);
  __shared__ Select::Plan pl;
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int64_t i = blockIdx.x; i < k.B; i += gridDim.x) {
    k.Clear(i, tid, nt);
    __syncthreads();
    if (k.Parallel() && !k.Counting()) {
      SelectVanilla(k, i, pl, sm, sm_n);
      continue;
    }
    if (tid == 0) k.Prepare(i);
    __syncthreads();
    if (k.Counting()) {
      k.Count(i, tid, nt);
      __syncthreads();
      // The candidates in the order the tables list them.
      const int64_t gathered = BlockCompact<Select::kThreads>(
          k.Total(i), [&](int64_t p) { return k.FirstAt(i, static_cast<int32_t>(p)); },
          [&](int64_t p, int64_t r) { k.Emit(i, r, static_cast<int32_t>(p)); });
      SelectCounting(k, i, gathered, pl, sm, sm_n);
      continue;
    }
    if (tid == 0) k.Run(i);
    __syncthreads();  // the next sample's set reuses nothing, but its Clear follows Run
  }
}

void LaunchSelect(StreamHandle s, const Select& k) {
  // Shared memory for a sample's candidates while thread 0 samples them down: what the
  // default 48 KB of a block leaves beside the kernel's static shared memory (no opt-in).
  static const int64_t room = [] {
    cudaFuncAttributes attr{};
    DSLIDE_CUDA_CHECK(cudaFuncGetAttributes(&attr, SelectKernel));
    return (int64_t{48 * 1024} - static_cast<int64_t>(attr.sharedSizeBytes)) /
           int64_t{sizeof(int32_t)};
  }();
  const int64_t sm_n = k.Parallel() ? std::min<int64_t>(k.cand_cap, room) : 0;
  SelectKernel<<<GridFor(k.B, 1), Select::kThreads, sm_n * sizeof(int32_t), s>>>(k, sm_n);
}

/// src[0, n) sorted, without repeats, into dst (the block's sort of k.scratch); returns
/// how many.
__device__ int64_t BlockSortUnique(const BatchFill& k, const int32_t* src, int64_t n,
                                   int32_t* dst) {
  k.ToScratch(src, n, threadIdx.x, blockDim.x);
  __syncthreads();
  for (int64_t size = 2; size <= k.pow2; size *= 2)
    for (int64_t stride = size / 2; stride > 0; stride /= 2) {
      k.BitonicPass(size, stride, threadIdx.x, blockDim.x);
      __syncthreads();
    }
  return BlockCompact<BatchFill::kThreads>(
      n, [&](int64_t i) { return k.FirstOfRun(i); },
      [&](int64_t i, int64_t r) { dst[r] = k.scratch[i]; });
}

/// The batch fill's sort scratch and shuffles in shared memory where the power-of-two
/// scratch fits (sm_n > 0: the launch gave pow2 ints of it), else in global memory.
__global__ void __launch_bounds__(BatchFill::kThreads)
    BatchFillKernel(const BatchFill k_in, int64_t sm_n) {
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* sm = reinterpret_cast<int32_t*>(smem);
  BatchFill k = k_in;
  if (sm_n > 0) k.scratch = sm;
  constexpr int nt = BatchFill::kThreads;
  const int tid = threadIdx.x;
  if (!k.on) {
    if (tid == 0) k.shared_n[0] = k.shared_n[1] = 0;
    return;
  }
  Rng rng = k.MakeRng();  // thread 0's stream; the others never draw
  const int64_t n = k.N(), count = k.Count();
  int64_t got = 0;
  if (count > 0 && k.DenseDraw()) {
    k.Iota(tid, nt);
    __syncthreads();
    BlockSampleDown(k.fill, n, count, &rng, sm, sm_n);
    got = count;
  } else if (count > 0) {
    while (got < count) {
      if (tid == 0)
        for (int64_t g = got; g < count; ++g) k.fill[g] = static_cast<int32_t>(rng.Below(n));
      __syncthreads();
      got = BlockSortUnique(k, k.fill, count, k.fill);
    }
    BlockShuffle(k.fill, count, &rng, sm, sm_n);
  }
  if (k.li == nullptr) {
    for (int64_t i = tid; i < got; i += nt) k.shared[i] = k.fill[i];
    if (tid == 0) {
      k.shared_n[0] = got;
      k.shared_n[1] = 0;
    }
    return;
  }
  int64_t m = BlockCompact<nt>(
      k.n_lab, [&](int64_t j) { return k.OnShard(j); },
      [&](int64_t j, int64_t r) { k.own[r] = k.Local(j); });
  m = BlockSortUnique(k, k.own, m, k.own);
  for (int64_t i = tid; i < m; i += nt) k.own[m + i] = k.own[i];
  __syncthreads();
  BlockShuffle(k.own, m, &rng, sm, sm_n);
  for (int64_t i = tid; i < m; i += nt) k.shared[i] = k.own[i];
  const int64_t o = BlockCompact<nt>(
      got, [&](int64_t i) { return k.NotALabel(i, m); },
      [&](int64_t i, int64_t r) { k.shared[m + r] = k.fill[i]; });
  if (tid == 0) {
    k.shared_n[0] = m + o;
    k.shared_n[1] = m;
  }
}

void LaunchBatchFill(StreamHandle s, const BatchFill& k) {
  // Shared memory beyond the default 48 KB needs the kernel's opt-in, up to the device's
  // limit less the kernel's static shared memory (the block scans); asked once per process
  // (one device per process).
  static const int64_t most = [] {
    int dev = 0, optin = 0;
    DSLIDE_CUDA_CHECK(cudaGetDevice(&dev));
    DSLIDE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes attr{};
    DSLIDE_CUDA_CHECK(cudaFuncGetAttributes(&attr, BatchFillKernel));
    const int dynamic = optin - static_cast<int>(attr.sharedSizeBytes);
    if (cudaFuncSetAttribute(BatchFillKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             dynamic) != cudaSuccess) {
      cudaGetLastError();  // refused: the default limit, without the opt-in
      return int64_t{48 * 1024} - static_cast<int64_t>(attr.sharedSizeBytes);
    }
    return int64_t{dynamic};
  }();
  const int64_t sm_n = k.pow2 * int64_t{sizeof(int32_t)} <= most ? k.pow2 : 0;
  BatchFillKernel<<<1, BatchFill::kThreads, sm_n * sizeof(int32_t), s>>>(k, sm_n);
}

}  // namespace dslide::gpu
