// The host executor of the GPU backend's kernels: every kernel body runs on the CPU, one
// index after another, over host arrays. It lets the tests run the whole GPU backend
// (layouts, indexing, kernel bodies, table builds, selection) on machines without a GPU;
// only the launch, copy and atomic primitives of CudaExec are left to the GPU tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dslide::gpu {

struct HostExec {
  static constexpr const char* kName = "gpu-host-emulation";
  static constexpr bool kDevice = false;

  template <class T>
  class Buffer {
   public:
    void Resize(size_t n) { v_.resize(n); }
    size_t size() const { return v_.size(); }
    T* data() { return v_.data(); }
    const T* data() const { return v_.data(); }
    void Upload(const T* h, size_t n) {
      v_.resize(n);
      std::copy(h, h + n, v_.begin());
    }
    void Download(T* h, size_t n) const { std::copy(v_.begin(), v_.begin() + n, h); }
    T Get(size_t i) const { return v_[i]; }
    size_t bytes() const { return v_.capacity() * sizeof(T); }

   private:
    std::vector<T> v_;
  };

  // Copies that overlap compute on the device are plain copies here, in program order.
  static void* Stage(size_t bytes) {
    static thread_local std::vector<uint64_t> s;
    if (s.size() * 8 < bytes) s.resize((bytes + 7) / 8);
    return s.data();
  }
  template <class T>
  static void CopyIn(T* dev, const T* host, size_t n) {
    std::copy(host, host + n, dev);
  }
  template <class T>
  static void CopyOut(T* host, const T* dev, size_t n) {
    std::copy(dev, dev + n, host);
  }
  static void ComputeAfterCopies() {}
  static void Synchronize() {}
  static void CopiesAfterCompute() {}
  using Mark = int;
  static Mark MarkCopies() { return 0; }
  static void WaitMark(Mark) {}

  template <class F>
  static void For(int64_t n, const F& f) {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
  /// `blocks` blocks of `threads` threads with `smem_bytes` of block-shared memory; every
  /// phase body(block, thread, threads, smem) runs for all threads of a block before the
  /// next phase starts (a barrier between phases, as __syncthreads on the device).
  template <class... Phases>
  static void ForBlocks(int64_t blocks, int threads, size_t smem_bytes, const Phases&... ph) {
    std::vector<uint64_t> smem((smem_bytes + 7) / 8 + 1);
    for (int64_t b = 0; b < blocks; ++b) (RunPhase(b, threads, smem.data(), ph), ...);
  }
  template <class F>
  static void RunPhase(int64_t b, int threads, void* smem, const F& f) {
    for (int t = 0; t < threads; ++t) f(b, t, threads, smem);
  }
  static void SortKeys(uint64_t* keys, int64_t n) { std::sort(keys, keys + n); }
  static void ExclusiveScan(const uint32_t* in, uint32_t* out, int64_t n) {
    std::exclusive_scan(in, in + n, out, uint32_t{0});
  }
};

}  // namespace dslide::gpu
