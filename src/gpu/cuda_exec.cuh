// The CUDA executor of the GPU backend: device arrays, a grid-stride launch of an
// element-wise body over [0, n), the named kernels of src/gpu/kernels/ (Launch), radix sort
// and scan (CUB), over the streams, events, pinned stages and library scratch of one
// DeviceResources object, which the backend owns (one per backend: nothing is per thread).
// Host->device copies go through pinned stages on a copy stream ordered against the compute
// stream by events; the counters of DeviceTraffic record what crosses and every host wait.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "backend/device_traffic.h"
#include "common/error.h"
#include "gpu/kernels/cuda_check.cuh"

namespace dslide::gpu {

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

/// Host waits that device-memory growth costs (cudaFree waits for the whole device): counted
/// for every backend of the process, as the memory is the device's.
inline std::atomic<int64_t>& GrowthWaits() {
  static std::atomic<int64_t> n{0};
  return n;
}

/// Device memory held in DeviceBuffers by this process, now and at its peak (bytes).
struct DeviceMemoryCount {
  std::atomic<int64_t> now{0}, peak{0};
  void Add(int64_t b) {
    const int64_t v = now += b;
    int64_t p = peak.load();
    while (v > p && !peak.compare_exchange_weak(p, v)) {
    }
  }
};
inline DeviceMemoryCount& DeviceMemory() {
  static DeviceMemoryCount c;
  return c;
}

/// Pinned host memory that grows on demand (staging for copies).
class Pinned {
 public:
  Pinned() = default;
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
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
        ++GrowthWaits();
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

/// A device array that grows on demand and keeps its memory.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_) {
      cudaFree(p_);
      DeviceMemory().Add(-static_cast<int64_t>(bytes()));
    }
  }
  /// Growing frees the old memory, which waits for all the device's work (cudaFree does):
  /// queued kernels and copies that still use it finish first. Counted (GrowthWaits). A
  /// buffer that grows again takes half as much more room (GrownCapacity),
  /// so that per-step scratch, whose size follows each batch, stops growing after a few
  /// steps without holding memory that a later allocation may need.
  void Resize(size_t n) {
    if (n > cap_) {
      const size_t want = GrownCapacity(p_ ? cap_ : 0, n, sizeof(T));
      if (p_) {
        cudaFree(p_);
        DeviceMemory().Add(-static_cast<int64_t>(bytes()));
        ++GrowthWaits();
      }
      p_ = nullptr;
      cap_ = 0;
      n_ = 0;  // size() and data() agree should the allocation fail
      size_t got = want;
      cudaError_t err = cudaMalloc(&p_, got * sizeof(T));
      if (err != cudaSuccess && want > n) {  // no room for the headroom: the size asked
        cudaGetLastError();
        got = n;
        err = cudaMalloc(&p_, got * sizeof(T));
      }
      if (err != cudaSuccess) {
        cudaGetLastError();
        p_ = nullptr;
        throw Error(detail::Concat("GPU out of memory: allocating ", n * sizeof(T) >> 20,
                                   " MiB failed (", cudaGetErrorString(err), ")"));
      }
      cap_ = got;
      DeviceMemory().Add(static_cast<int64_t>(bytes()));
    }
    n_ = n;
  }
  size_t size() const { return n_; }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t bytes() const { return cap_ * sizeof(T); }

 private:
  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

/// What a backend's work on one device runs on: a compute stream, a copy stream, a ring of
/// events that order them, pinned stages, the sort's and scan's scratch, and the counters.
/// Created on the current device; the backend that owns it owns its streams.
class DeviceResources {
 public:
  // A ring of events, reused in turn: a mark is waited for (or superseded) long before the
  // ring comes back to it.
  static constexpr int kEvents = 64;

  DeviceResources() {
    DSLIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    DSLIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  }
  DeviceResources(const DeviceResources&) = delete;
  DeviceResources& operator=(const DeviceResources&) = delete;
  ~DeviceResources() {
    cudaStreamSynchronize(compute_);
    cudaStreamSynchronize(copy_);
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
    cudaStreamDestroy(compute_);
    cudaStreamDestroy(copy_);
  }
  cudaStream_t compute() const { return compute_; }
  cudaStream_t copy() const { return copy_; }
  cudaEvent_t NextEvent() {
    cudaEvent_t& e = events_[next_];
    next_ = (next_ + 1) % kEvents;
    if (e == nullptr) DSLIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  Pinned& staging() { return staging_; }  ///< blocking copies on the compute stream
  Pinned& stage() { return stage_; }      ///< copies on the copy stream
  DeviceBuffer<unsigned char>& temp() { return temp_; }
  DeviceBuffer<uint64_t>& alt_keys() { return alt_keys_; }
  DeviceTraffic& traffic() { return traffic_; }

 private:
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cudaEvent_t events_[kEvents] = {};
  int next_ = 0;
  Pinned staging_, stage_;
  DeviceBuffer<unsigned char> temp_;
  DeviceBuffer<uint64_t> alt_keys_;
  DeviceTraffic traffic_;
};

class CudaExec {
 public:
  static constexpr const char* kName = "gpu";
  static constexpr bool kDevice = true;
  template <class T>
  using Buffer = DeviceBuffer<T>;

  CudaExec() = default;
  CudaExec(const CudaExec&) = delete;
  CudaExec& operator=(const CudaExec&) = delete;

  /// What crossed between host and device, and how often the host blocked on it.
  DeviceTraffic Traffic() const {
    DeviceTraffic t = res_.traffic();
    t.syncs += GrowthWaits().load();
    return t;
  }
  DeviceTraffic& Count() { return res_.traffic(); }
  /// Device memory this process has held in its buffers at the peak, and what the whole
  /// device has in use now (every process's, the CUDA contexts included).
  static int64_t PeakBytes() { return DeviceMemory().peak.load(); }
  static int64_t DeviceUsedBytes() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return static_cast<int64_t>(total_b - free_b);
  }
  /// Free and total memory of the current device in bytes (-1 where it cannot be asked).
  static std::pair<int64_t, int64_t> DeviceFreeAndTotal() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      return {-1, -1};
    }
    return {static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
  }
  cudaStream_t Stream() const { return res_.compute(); }
  cudaStream_t CopyStream() const { return res_.copy(); }

  /// Pinned host memory of at least `bytes` for the copy stream (kept between calls).
  void* Stage(size_t bytes) { return res_.stage().Get(bytes); }
  template <class T>
  void CopyIn(T* dev, const T* host, size_t n) {
    if (n == 0) return;
    DSLIDE_CUDA_CHECK(
        cudaMemcpyAsync(dev, host, n * sizeof(T), cudaMemcpyHostToDevice, CopyStream()));
    Count().h2d_bytes += static_cast<int64_t>(n * sizeof(T));
  }
  template <class T>
  void CopyOut(T* host, const T* dev, size_t n) {
    if (n == 0) return;
    DSLIDE_CUDA_CHECK(
        cudaMemcpyAsync(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost, CopyStream()));
    Count().d2h_bytes += static_cast<int64_t>(n * sizeof(T));
  }
  /// The host waits for the compute stream (before another library reads device memory).
  void Synchronize() {
    ++Count().syncs;
    DSLIDE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
  }
  /// Work queued on the compute stream from now on waits for the copies queued so far.
  void ComputeAfterCopies() {
    cudaEvent_t e = res_.NextEvent();
    DSLIDE_CUDA_CHECK(cudaEventRecord(e, CopyStream()));
    DSLIDE_CUDA_CHECK(cudaStreamWaitEvent(Stream(), e, 0));
  }
  /// Copies queued from now on wait for the compute queued so far.
  void CopiesAfterCompute() {
    cudaEvent_t e = res_.NextEvent();
    DSLIDE_CUDA_CHECK(cudaEventRecord(e, Stream()));
    DSLIDE_CUDA_CHECK(cudaStreamWaitEvent(CopyStream(), e, 0));
  }
  /// A mark after the copies queued so far, for WaitMark.
  using Mark = cudaEvent_t;
  Mark MarkCopies() {
    cudaEvent_t e = res_.NextEvent();
    DSLIDE_CUDA_CHECK(cudaEventRecord(e, CopyStream()));
    return e;
  }
  /// The host waits until the copies before the mark are done.
  void WaitMark(Mark m) {
    ++Count().syncs;
    DSLIDE_CUDA_CHECK(cudaEventSynchronize(m));
  }

  /// Pinned host memory that the host fills and CopyIn sends: Get hands it out once its
  /// last copies are done (the host blocks only if they are still running) and orders the
  /// copies to come after the compute queued so far (which may still read their targets);
  /// Done makes the compute queued from then on wait for the copies.
  class SendStage {
   public:
    explicit SendStage(CudaExec* x) : x_(x) {}
    SendStage(const SendStage&) = delete;
    SendStage& operator=(const SendStage&) = delete;
    ~SendStage() {
      if (done_) cudaEventDestroy(done_);
    }
    void* Get(size_t bytes) {
      if (pending_) {
        const cudaError_t q = cudaEventQuery(done_);
        if (q == cudaErrorNotReady) {
          ++x_->Count().syncs;
          DSLIDE_CUDA_CHECK(cudaEventSynchronize(done_));
        } else {
          DSLIDE_CUDA_CHECK(q);
        }
        pending_ = false;
      }
      x_->CopiesAfterCompute();
      return mem_.Get(bytes);
    }
    void Done() {
      if (done_ == nullptr)
        DSLIDE_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
      DSLIDE_CUDA_CHECK(cudaEventRecord(done_, x_->CopyStream()));
      DSLIDE_CUDA_CHECK(cudaStreamWaitEvent(x_->Stream(), done_, 0));
      pending_ = true;
    }

   private:
    CudaExec* x_;
    Pinned mem_;
    cudaEvent_t done_ = nullptr;
    bool pending_ = false;
  };

  /// Blocking copies through pinned memory on the compute stream (set-up, checkpoints,
  /// tests): the copy runs at full bus speed.
  template <class T>
  void Upload(Buffer<T>* b, const T* h, size_t n) {
    b->Resize(n);
    if (n == 0) return;
    void* stage = res_.staging().Get(n * sizeof(T));
    DSLIDE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
    ++Count().syncs;
    Count().h2d_bytes += static_cast<int64_t>(n * sizeof(T));
    std::memcpy(stage, h, n * sizeof(T));
    DSLIDE_CUDA_CHECK(
        cudaMemcpyAsync(b->data(), stage, n * sizeof(T), cudaMemcpyHostToDevice, Stream()));
  }
  template <class T>
  void Download(const Buffer<T>& b, T* h, size_t n) {
    if (n == 0) return;
    void* stage = res_.staging().Get(n * sizeof(T));
    DSLIDE_CUDA_CHECK(
        cudaMemcpyAsync(stage, b.data(), n * sizeof(T), cudaMemcpyDeviceToHost, Stream()));
    DSLIDE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
    ++Count().syncs;
    Count().d2h_bytes += static_cast<int64_t>(n * sizeof(T));
    std::memcpy(h, stage, n * sizeof(T));
  }
  template <class T>
  T Read(const Buffer<T>& b, size_t i) {
    T v;
    DSLIDE_CUDA_CHECK(
        cudaMemcpyAsync(&v, b.data() + i, sizeof(T), cudaMemcpyDeviceToHost, Stream()));
    DSLIDE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
    ++Count().syncs;
    Count().d2h_bytes += sizeof(T);
    return v;
  }

  /// An element-wise body f(i) over [0, n).
  template <class F>
  void For(int64_t n, const F& f) {
    if (n <= 0) return;
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20);
    ForKernel<<<static_cast<unsigned>(blocks), kThreads, 0, Stream()>>>(n, f);
    DSLIDE_CUDA_CHECK(cudaGetLastError());
    ++Count().launches;
  }
  template <class F>
  void ForCounted(int64_t max_n, const int64_t* count, int64_t scale, const F& f) {
    if (max_n <= 0) return;
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((max_n + kThreads - 1) / kThreads, 8192);
    CountedKernel<<<static_cast<unsigned>(blocks), kThreads, 0, Stream()>>>(count, scale, max_n, f);
    DSLIDE_CUDA_CHECK(cudaGetLastError());
    ++Count().launches;
  }
  /// A named kernel of src/gpu/kernels/: its LaunchXxx wrapper on the compute stream.
  template <class K>
  void Launch(const K& k) {
    if (k.Empty()) return;
    LaunchKernel(Stream(), k);
    DSLIDE_CUDA_CHECK(cudaGetLastError());
    ++Count().launches;
  }
  // CUB's sort and scan on the stream, with their temporary storage and the sort's second
  // key buffer kept between calls: no allocation and no host wait per call.
  void SortKeys(uint64_t* keys, int64_t n) {
    if (n <= 1) return;
    res_.alt_keys().Resize(static_cast<size_t>(n));
    cub::DoubleBuffer<uint64_t> db(keys, res_.alt_keys().data());
    size_t bytes = 0;
    DSLIDE_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, db, n, 0, 64, Stream()));
    res_.temp().Resize(bytes);
    DSLIDE_CUDA_CHECK(
        cub::DeviceRadixSort::SortKeys(res_.temp().data(), bytes, db, n, 0, 64, Stream()));
    ++Count().launches;
    if (db.Current() != keys) {
      DSLIDE_CUDA_CHECK(cudaMemcpyAsync(keys, db.Current(), n * sizeof(uint64_t),
                                        cudaMemcpyDeviceToDevice, Stream()));
      ++Count().launches;
    }
  }
  void ExclusiveScan(const uint32_t* in, uint32_t* out, int64_t n) {
    if (n <= 0) return;
    size_t bytes = 0;
    DSLIDE_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, Stream()));
    res_.temp().Resize(bytes);
    DSLIDE_CUDA_CHECK(
        cub::DeviceScan::ExclusiveSum(res_.temp().data(), bytes, in, out, n, Stream()));
    ++Count().launches;
  }

 private:
  mutable DeviceResources res_;
};

}  // namespace dslide::gpu
