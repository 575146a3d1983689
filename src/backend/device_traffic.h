// What crosses between a backend's device and the host, and how often the host waits on it:
// the counters a device-resident step is judged by (bench prints them per iteration).
#pragma once

#include <cstdint>

namespace dslide {

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
