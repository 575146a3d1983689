// The host executor of the GPU backend, a test aid: element-wise bodies, sorts and scans run
// on the CPU over host arrays, and the named kernels of src/gpu/kernels/ through their host
// emulations (the kernels' own per-thread code, their block collectives done in order);
// indices, blocks and block threads run in shuffled orders (as on a device, no order is
// promised). It lets the tests run the GPU backend's layouts, indexing, kernel bodies, table
// builds and selection on machines without a GPU; the launches, warp and block collectives
// (CUB), copies and atomics of CudaExec are left to the GPU tests.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "backend/device_traffic.h"
#include "gpu/kernels/host_order.h"

namespace dslide::gpu {

class HostExec {
 public:
  static constexpr const char* kName = "gpu-host-emulation";
  static constexpr bool kDevice = false;

  /// Buffer growths that would wait for a device, for every backend of the process.
  static std::atomic<int64_t>& GrowthWaits() {
    static std::atomic<int64_t> n{0};
    return n;
  }
  /// What would cross to and from a device, counted as CudaExec counts it.
  DeviceTraffic Traffic() const {
    DeviceTraffic t = traffic_;
    t.syncs += GrowthWaits().load();
    return t;
  }
  DeviceTraffic& Count() { return traffic_; }
  /// No device: the emulation reports no device memory.
  static int64_t PeakBytes() { return 0; }
  static int64_t DeviceUsedBytes() { return 0; }
  /// Free and total device memory in bytes: not known (-1) without a device.
  static std::pair<int64_t, int64_t> DeviceFreeAndTotal() { return {-1, -1}; }

  /// Host memory that behaves as device memory does: growing it loses its contents, and
  /// memory no kernel has written holds a poison pattern (bytes 0xA5), never zeros, so a
  /// test fails where the device would read garbage.
  /// Growing one that holds memory counts a host wait (GrowthWaits), as a device's
  /// cudaFree waits, with the device buffer's headroom rule, so that the waits a step's
  /// growth costs on a device are counted here alike.
  template <class T>
  class Buffer {
   public:
    void Resize(size_t n) {
      if (n > v_.size()) {
        const size_t cap = v_.size();
        const size_t want = GrownCapacity(cap, n, sizeof(T));
        if (cap > 0) ++GrowthWaits();
        v_.assign(want, T{});
        std::memset(static_cast<void*>(v_.data()), 0xA5, want * sizeof(T));
      }
      n_ = n;
    }
    size_t size() const { return n_; }
    T* data() { return v_.data(); }
    const T* data() const { return v_.data(); }
    size_t bytes() const { return v_.size() * sizeof(T); }

   private:
    std::vector<T> v_;
    size_t n_ = 0;
  };
  template <class T>
  void Upload(Buffer<T>* b, const T* h, size_t n) {
    b->Resize(n);
    if (n > 0) std::copy_n(h, n, b->data());
    traffic_.h2d_bytes += static_cast<int64_t>(n * sizeof(T));
    ++traffic_.syncs;
  }
  template <class T>
  void Download(const Buffer<T>& b, T* h, size_t n) {
    if (n > 0) std::copy_n(b.data(), n, h);
    traffic_.d2h_bytes += static_cast<int64_t>(n * sizeof(T));
    ++traffic_.syncs;
  }
  template <class T>
  T Read(const Buffer<T>& b, size_t i) {
    traffic_.d2h_bytes += sizeof(T);
    ++traffic_.syncs;
    return b.data()[i];
  }

  // Copies that overlap compute on the device are plain copies here, in program order.
  void* Stage(size_t bytes) {
    if (stage_.size() * 8 < bytes) stage_.resize((bytes + 7) / 8);
    return stage_.data();
  }
  template <class T>
  void CopyIn(T* dev, const T* host, size_t n) {
    std::copy(host, host + n, dev);
    traffic_.h2d_bytes += static_cast<int64_t>(n * sizeof(T));
  }
  template <class T>
  void CopyOut(T* host, const T* dev, size_t n) {
    std::copy(dev, dev + n, host);
    traffic_.d2h_bytes += static_cast<int64_t>(n * sizeof(T));
  }
  void ComputeAfterCopies() {}
  void Synchronize() { ++traffic_.syncs; }
  void CopiesAfterCompute() {}
  using Mark = int;
  Mark MarkCopies() { return 0; }
  void WaitMark(Mark) { ++traffic_.syncs; }

  /// Host memory the host fills for CopyIn; Get would wait for the stage's last copies on a
  /// device (never pending here), Done lets compute go on after them.
  class SendStage {
   public:
    explicit SendStage(HostExec*) {}
    void* Get(size_t bytes) {
      if (mem_.size() * 8 < bytes) mem_.resize((bytes + 7) / 8);
      return mem_.data();
    }
    void Done() {}

   private:
    std::vector<uint64_t> mem_;
  };

  /// f(i) for i in [0, n), in a shuffled order (HostOrder).
  template <class F>
  void For(int64_t n, const F& f) {
    ++traffic_.launches;
    const HostOrder order(n, order_salt_.Next());
    for (int64_t k = 0; k < n; ++k) f(order[k]);
  }
  /// f(i) for i in [0, min(*count * scale, max_n)), where *count is in device memory (the
  /// host does not wait to read it).
  template <class F>
  void ForCounted(int64_t max_n, const int64_t* count, int64_t scale, const F& f) {
    ++traffic_.launches;
    const int64_t n = std::min(*count * scale, max_n);
    const HostOrder order(n, order_salt_.Next());
    for (int64_t k = 0; k < n; ++k) f(order[k]);
  }
  /// A named kernel of src/gpu/kernels/ through its host emulation (RunOnHost), whose blocks
  /// and threads run in shuffled orders.
  template <class K>
  void Launch(const K& k) {
    if (k.Empty()) return;
    ++traffic_.launches;
    RunOnHost(k, &order_salt_);
  }
  void SortKeys(uint64_t* keys, int64_t n) {
    ++traffic_.launches;
    std::sort(keys, keys + n);
  }
  void ExclusiveScan(const uint32_t* in, uint32_t* out, int64_t n) {
    ++traffic_.launches;
    std::exclusive_scan(in, in + n, out, uint32_t{0});
  }

 private:
  DeviceTraffic traffic_;
  std::vector<uint64_t> stage_;
  HostOrderSalt order_salt_;
};

}  // namespace dslide::gpu
