// The CUDA executor of the GPU backend: device arrays, a grid-stride launch of a kernel
// body over [0, n), radix sort and scan (CUB), all on one stream per backend thread.
// Host->device copies go through a pinned staging buffer, device->host copies into one.
#pragma once

#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <cstdint>
#include <cstring>

#include "device_traffic.h"
#include "error.h"

namespace dslide::gpu {

#define DSLIDE_CUDA_CHECK(call)                                                               \
  do {                                                                                        \
    const cudaError_t err_ = (call);                                                          \
    if (err_ != cudaSuccess)                                                                  \
      throw ::dslide::Error(                                                                  \
          ::dslide::detail::Concat("CUDA error in ", #call, ": ", cudaGetErrorString(err_))); \
  } while (0)

template <class F>
__global__ void ForKernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    f(i);
}

/// A grid-stride loop over [0, min(*count * scale, max_n)), the count read on the device.
template <class F>
__global__ void CountedKernel(const int64_t* count, int64_t scale, int64_t max_n, F f) {
  const int64_t n = *count * scale < max_n ? *count * scale : max_n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    f(i);
}

/// Blocks of a grid-stride loop over [0, blocks): the phases of each block run in order with
/// a barrier after each (the barrier after the last also guards the shared memory).
template <class... Phases>
__global__ void BlocksKernel(int64_t blocks, Phases... ph) {
  extern __shared__ __align__(16) unsigned char dslide_block_smem[];
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x)
    ((ph(b, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x),
         static_cast<void*>(dslide_block_smem)),
      __syncthreads()),
     ...);
}

/// Pinned host memory that grows on demand (staging for copies).
class Pinned {
 public:
  ~Pinned() {
    if (p_) cudaFreeHost(p_);
  }
  /// Growing waits for the whole device first: a copy queued from the old memory may still
  /// be reading it.
  void* Get(size_t bytes) {
    if (bytes > cap_) {
      if (p_) {
        DSLIDE_CUDA_CHECK(cudaDeviceSynchronize());
        cudaFreeHost(p_);
      }
      p_ = nullptr;
      cap_ = 0;
      DSLIDE_CUDA_CHECK(cudaMallocHost(&p_, bytes));
      cap_ = bytes;
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

struct CudaExec {
  static constexpr const char* kName = "gpu";
  static constexpr bool kDevice = true;

  /// What crossed between host and device, and how often the host blocked on it (this
  /// thread's backends).
  static DeviceTraffic& Traffic() {
    static thread_local DeviceTraffic t;
    return t;
  }

  static cudaStream_t& Stream() {
    static thread_local cudaStream_t s = nullptr;
    return s;
  }
  static Pinned& Staging() {
    static thread_local Pinned p;
    return p;
  }

  // ---- Copies that overlap compute: a second stream for copies, ordered against the
  // compute stream by events, from and into pinned stage buffers. ----
  // A ring of events, reused in turn: a mark is waited for (or superseded) long before the
  // ring comes back to it.
  static constexpr int kEvents = 64;
  static cudaStream_t& CopyStream() {
    static thread_local cudaStream_t s = nullptr;
    return s;
  }
  /// Pinned host memory of at least `bytes` for the copy stream (kept between calls).
  static void* Stage(size_t bytes) {
    static thread_local Pinned p;
    return p.Get(bytes);
  }
  static cudaEvent_t NextEvent() {
    static thread_local cudaEvent_t ev[kEvents] = {};
    static thread_local int next = 0;
    cudaEvent_t& e = ev[next];
    next = (next + 1) % kEvents;
    if (e == nullptr) DSLIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  template <class T>
  static void CopyIn(T* dev, const T* host, size_t n) {
    if (n == 0) return;
    DSLIDE_CUDA_CHECK(
        cudaMemcpyAsync(dev, host, n * sizeof(T), cudaMemcpyHostToDevice, CopyStream()));
    Traffic().h2d_bytes += static_cast<int64_t>(n * sizeof(T));
  }
  template <class T>
  static void CopyOut(T* host, const T* dev, size_t n) {
    if (n == 0) return;
    DSLIDE_CUDA_CHECK(
        cudaMemcpyAsync(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost, CopyStream()));
    Traffic().d2h_bytes += static_cast<int64_t>(n * sizeof(T));
  }
  /// The host waits for the compute stream (before another library reads device memory).
  static void Synchronize() {
    ++Traffic().syncs;
    DSLIDE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
  }
  /// Work queued on the compute stream from now on waits for the copies queued so far.
  static void ComputeAfterCopies() {
    cudaEvent_t e = NextEvent();
    DSLIDE_CUDA_CHECK(cudaEventRecord(e, CopyStream()));
    DSLIDE_CUDA_CHECK(cudaStreamWaitEvent(Stream(), e, 0));
  }
  /// Copies queued from now on wait for the compute queued so far.
  static void CopiesAfterCompute() {
    cudaEvent_t e = NextEvent();
    DSLIDE_CUDA_CHECK(cudaEventRecord(e, Stream()));
    DSLIDE_CUDA_CHECK(cudaStreamWaitEvent(CopyStream(), e, 0));
  }
  /// A mark after the copies queued so far, for WaitMark.
  using Mark = cudaEvent_t;
  static Mark MarkCopies() {
    cudaEvent_t e = NextEvent();
    DSLIDE_CUDA_CHECK(cudaEventRecord(e, CopyStream()));
    return e;
  }
  /// The host waits until the copies before the mark are done.
  static void WaitMark(Mark m) {
    ++Traffic().syncs;
    DSLIDE_CUDA_CHECK(cudaEventSynchronize(m));
  }

  /// Pinned host memory that the host fills and CopyIn sends: Get hands it out once its
  /// last copies are done (the host blocks only if they are still running) and orders the
  /// copies to come after the compute queued so far (which may still read their targets);
  /// Done makes the compute queued from then on wait for the copies.
  class SendStage {
   public:
    SendStage() = default;
    SendStage(const SendStage&) = delete;
    SendStage& operator=(const SendStage&) = delete;
    ~SendStage() {
      if (done_) cudaEventDestroy(done_);
    }
    void* Get(size_t bytes) {
      if (pending_) {
        const cudaError_t q = cudaEventQuery(done_);
        if (q == cudaErrorNotReady) {
          ++Traffic().syncs;
          DSLIDE_CUDA_CHECK(cudaEventSynchronize(done_));
        } else {
          DSLIDE_CUDA_CHECK(q);
        }
        pending_ = false;
      }
      CopiesAfterCompute();
      return mem_.Get(bytes);
    }
    void Done() {
      if (done_ == nullptr)
        DSLIDE_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
      DSLIDE_CUDA_CHECK(cudaEventRecord(done_, CopyStream()));
      DSLIDE_CUDA_CHECK(cudaStreamWaitEvent(Stream(), done_, 0));
      pending_ = true;
    }

   private:
    Pinned mem_;
    cudaEvent_t done_ = nullptr;
    bool pending_ = false;
  };

  template <class T>
  class Buffer {
   public:
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() {
      if (p_) cudaFree(p_);
    }
    /// Growing frees the old memory, which waits for all the device's work (cudaFree does):
    /// queued kernels and copies that still use it finish first. Counted as a host wait.
    void Resize(size_t n) {
      if (n > cap_) {
        if (p_) {
          cudaFree(p_);
          ++Traffic().syncs;
        }
        p_ = nullptr;
        cap_ = 0;
        const cudaError_t err = cudaMalloc(&p_, n * sizeof(T));
        if (err != cudaSuccess) {
          cudaGetLastError();
          throw Error(detail::Concat("GPU out of memory: allocating ", n * sizeof(T) >> 20,
                                     " MiB failed (", cudaGetErrorString(err), ")"));
        }
        cap_ = n;
      }
      n_ = n;
    }
    size_t size() const { return n_; }
    T* data() { return p_; }
    const T* data() const { return p_; }
    void Upload(const T* h, size_t n) {
      Resize(n);
      if (n == 0) return;
      // Through pinned memory: the copy runs at full bus speed, asynchronously to the host
      // until the staging buffer is needed again.
      void* stage = Staging().Get(n * sizeof(T));
      DSLIDE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
      ++Traffic().syncs;
      Traffic().h2d_bytes += static_cast<int64_t>(n * sizeof(T));
      std::memcpy(stage, h, n * sizeof(T));
      DSLIDE_CUDA_CHECK(
          cudaMemcpyAsync(p_, stage, n * sizeof(T), cudaMemcpyHostToDevice, Stream()));
    }
    void Download(T* h, size_t n) const {
      if (n == 0) return;
      void* stage = Staging().Get(n * sizeof(T));
      DSLIDE_CUDA_CHECK(
          cudaMemcpyAsync(stage, p_, n * sizeof(T), cudaMemcpyDeviceToHost, Stream()));
      DSLIDE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
      ++Traffic().syncs;
      Traffic().d2h_bytes += static_cast<int64_t>(n * sizeof(T));
      std::memcpy(h, stage, n * sizeof(T));
    }
    T Get(size_t i) const {
      T v;
      DSLIDE_CUDA_CHECK(cudaMemcpyAsync(&v, p_ + i, sizeof(T), cudaMemcpyDeviceToHost, Stream()));
      DSLIDE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
      ++Traffic().syncs;
      Traffic().d2h_bytes += sizeof(T);
      return v;
    }
    size_t bytes() const { return cap_ * sizeof(T); }

   private:
    T* p_ = nullptr;
    size_t n_ = 0, cap_ = 0;
  };

  template <class F>
  static void For(int64_t n, const F& f) {
    if (n <= 0) return;
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20);
    ForKernel<<<static_cast<unsigned>(blocks), kThreads, 0, Stream()>>>(n, f);
    DSLIDE_CUDA_CHECK(cudaGetLastError());
    ++Traffic().launches;
  }
  template <class F>
  static void ForCounted(int64_t max_n, const int64_t* count, int64_t scale, const F& f) {
    if (max_n <= 0) return;
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((max_n + kThreads - 1) / kThreads, 8192);
    CountedKernel<<<static_cast<unsigned>(blocks), kThreads, 0, Stream()>>>(count, scale, max_n, f);
    DSLIDE_CUDA_CHECK(cudaGetLastError());
    ++Traffic().launches;
  }
  template <class... Phases>
  static void ForBlocks(int64_t blocks, int threads, size_t smem_bytes, const Phases&... ph) {
    if (blocks <= 0) return;
    const int64_t grid = std::min<int64_t>(blocks, int64_t{1} << 20);
    BlocksKernel<<<static_cast<unsigned>(grid), threads, smem_bytes, Stream()>>>(blocks, ph...);
    DSLIDE_CUDA_CHECK(cudaGetLastError());
    ++Traffic().launches;
  }
  // CUB's sort and scan on the stream, with their temporary storage and the sort's second
  // key buffer kept between calls: no allocation and no host wait per call.
  static Buffer<unsigned char>& Temp() {
    static thread_local Buffer<unsigned char> t;
    return t;
  }
  static Buffer<uint64_t>& AltKeys() {
    static thread_local Buffer<uint64_t> k;
    return k;
  }
  static void SortKeys(uint64_t* keys, int64_t n) {
    if (n <= 1) return;
    AltKeys().Resize(static_cast<size_t>(n));
    cub::DoubleBuffer<uint64_t> db(keys, AltKeys().data());
    size_t bytes = 0;
    DSLIDE_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, db, n, 0, 64, Stream()));
    Temp().Resize(bytes);
    DSLIDE_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(Temp().data(), bytes, db, n, 0, 64, Stream()));
    ++Traffic().launches;
    if (db.Current() != keys) {
      DSLIDE_CUDA_CHECK(cudaMemcpyAsync(keys, db.Current(), n * sizeof(uint64_t),
                                        cudaMemcpyDeviceToDevice, Stream()));
      ++Traffic().launches;
    }
  }
  static void ExclusiveScan(const uint32_t* in, uint32_t* out, int64_t n) {
    if (n <= 0) return;
    size_t bytes = 0;
    DSLIDE_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, Stream()));
    Temp().Resize(bytes);
    DSLIDE_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(Temp().data(), bytes, in, out, n, Stream()));
    ++Traffic().launches;
  }
};

}  // namespace dslide::gpu
