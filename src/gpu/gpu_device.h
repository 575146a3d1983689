// Host-safe queries of the CUDA devices (no CUDA types in this header).
#pragma once

#include <string>

namespace dslide::gpu {

/// Number of visible CUDA devices; 0 when there is none or the driver is missing.
int DeviceCount();
/// The CUDA runtime's explanation of the last DeviceCount() result ("ok" when devices exist).
std::string DeviceError();

}  // namespace dslide::gpu
