// What crosses between a backend's device and the host, and how often the host waits on it:
// the counters a device-resident step is judged by (bench prints them per iteration).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dslide {

/// The capacity a device buffer of `cap` elements of `elem` bytes grows to for n > cap: n
/// at first (cap 0); after that at least half as much more, at most 64 MiB more, so that
/// per-step scratch, whose size follows each batch, stops growing after a few steps. Each
/// growth of a buffer that holds memory waits for the device (its cudaFree).
inline size_t GrownCapacity(size_t cap, size_t n, size_t elem) {
  constexpr size_t kHeadroom = size_t{64} << 20;
  if (cap == 0) return n;
  const size_t more = cap / 2 < kHeadroom / elem ? cap / 2 : kHeadroom / elem;
  return n > cap + more ? n : cap + more;
}

struct DeviceTraffic {
  int64_t h2d_bytes = 0;  ///< bytes copied host -> device
  int64_t d2h_bytes = 0;  ///< bytes copied device -> host
  int64_t syncs = 0;      ///< times the host blocked on the device
  int64_t launches = 0;   ///< kernel launches (a library sort or scan counts as one)

  DeviceTraffic operator+(const DeviceTraffic& o) const {
    return {h2d_bytes + o.h2d_bytes, d2h_bytes + o.d2h_bytes, syncs + o.syncs,
            launches + o.launches};
  }
  DeviceTraffic operator-(const DeviceTraffic& o) const {
    return {h2d_bytes - o.h2d_bytes, d2h_bytes - o.d2h_bytes, syncs - o.syncs,
            launches - o.launches};
  }
};

}  // namespace dslide
