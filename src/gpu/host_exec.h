// The host executor of the GPU backend's kernels: every kernel body runs on the CPU, one
// index after another in a shuffled order (as on a device, no order is promised), over host
// arrays. It lets the tests run the whole GPU backend
// (layouts, indexing, kernel bodies, table builds, selection) on machines without a GPU;
// only the launch, copy and atomic primitives of CudaExec are left to the GPU tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "device_traffic.h"

namespace dslide::gpu {

struct HostExec {
  static constexpr const char* kName = "gpu-host-emulation";
  static constexpr bool kDevice = false;

  /// What would cross to and from a device, counted as CudaExec counts it.
  static DeviceTraffic& Traffic() {
    static thread_local DeviceTraffic t;
    return t;
  }

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
      Traffic().h2d_bytes += static_cast<int64_t>(n * sizeof(T));
      ++Traffic().syncs;
    }
    void Download(T* h, size_t n) const {
      std::copy(v_.begin(), v_.begin() + n, h);
      Traffic().d2h_bytes += static_cast<int64_t>(n * sizeof(T));
      ++Traffic().syncs;
    }
    T Get(size_t i) const {
      Traffic().d2h_bytes += sizeof(T);
      ++Traffic().syncs;
      return v_[i];
    }
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
    Traffic().h2d_bytes += static_cast<int64_t>(n * sizeof(T));
  }
  template <class T>
  static void CopyOut(T* host, const T* dev, size_t n) {
    std::copy(dev, dev + n, host);
    Traffic().d2h_bytes += static_cast<int64_t>(n * sizeof(T));
  }
  static void ComputeAfterCopies() {}
  static void Synchronize() { ++Traffic().syncs; }
  static void CopiesAfterCompute() {}
  using Mark = int;
  static Mark MarkCopies() { return 0; }
  static void WaitMark(Mark) { ++Traffic().syncs; }

  /// Host memory the host fills for CopyIn; Get would wait for the stage's last copies on a
  /// device (never pending here), Done lets compute go on after them.
  class SendStage {
   public:
    void* Get(size_t bytes) {
      if (mem_.size() * 8 < bytes) mem_.resize((bytes + 7) / 8);
      return mem_.data();
    }
    void Done() {}

   private:
    std::vector<uint64_t> mem_;
  };

  /// The k-th index of a fixed permutation of [0, n) (k * stride + offset mod n, the stride
  /// coprime to n). Device threads and blocks run in no set order, so the host executor does
  /// not run them in index order either: a kernel that assumes an order fails its tests here.
  class Order {
   public:
    Order(int64_t n, uint64_t salt) : n_(n) {
      if (n_ <= 1) return;
      const uint64_t un = static_cast<uint64_t>(n_);
      stride_ = (0x9E3779B97F4A7C15ull ^ salt) % un;
      if (stride_ == 0) stride_ = 1;
      while (std::gcd(stride_, un) != 1) stride_ = stride_ + 1 == un ? 1 : stride_ + 1;
      offset_ = (salt * 0xBF58476D1CE4E5B9ull) % un;
    }
    int64_t operator[](int64_t k) const {
      if (n_ <= 1) return k;
      const unsigned __int128 v =
          static_cast<unsigned __int128>(k) * stride_ + static_cast<unsigned __int128>(offset_);
      return static_cast<int64_t>(v % static_cast<uint64_t>(n_));
    }

   private:
    int64_t n_;
    uint64_t stride_ = 1, offset_ = 0;
  };
  static uint64_t NextSalt() {
    static thread_local uint64_t salt = 0;
    return ++salt;
  }

  template <class F>
  static void For(int64_t n, const F& f) {
    ++Traffic().launches;
    const Order order(n, NextSalt());
    for (int64_t k = 0; k < n; ++k) f(order[k]);
  }
  /// f(i) for i in [0, min(*count * scale, max_n)), where *count is in device memory (the
  /// host does not wait to read it).
  template <class F>
  static void ForCounted(int64_t max_n, const int64_t* count, int64_t scale, const F& f) {
    ++Traffic().launches;
    const int64_t n = std::min(*count * scale, max_n);
    const Order order(n, NextSalt());
    for (int64_t k = 0; k < n; ++k) f(order[k]);
  }
  /// `blocks` blocks of `threads` threads with `smem_bytes` of block-shared memory; every
  /// phase body(block, thread, threads, smem) runs for all threads of a block before the
  /// next phase starts (a barrier between phases, as __syncthreads on the device). Blocks,
  /// and the threads of each phase, run in a shuffled order (Order).
  template <class... Phases>
  static void ForBlocks(int64_t blocks, int threads, size_t smem_bytes, const Phases&... ph) {
    ++Traffic().launches;
    std::vector<uint64_t> smem((smem_bytes + 7) / 8 + 1);
    const Order block_order(blocks, NextSalt());
    for (int64_t k = 0; k < blocks; ++k) (RunPhase(block_order[k], threads, smem.data(), ph), ...);
  }
  template <class F>
  static void RunPhase(int64_t b, int threads, void* smem, const F& f) {
    const Order order(threads, NextSalt());
    for (int k = 0; k < threads; ++k) f(b, static_cast<int>(order[k]), threads, smem);
  }
  static void SortKeys(uint64_t* keys, int64_t n) {
    ++Traffic().launches;
    std::sort(keys, keys + n);
  }
  static void ExclusiveScan(const uint32_t* in, uint32_t* out, int64_t n) {
    ++Traffic().launches;
    std::exclusive_scan(in, in + n, out, uint32_t{0});
  }
};

}  // namespace dslide::gpu
