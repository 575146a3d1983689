// The random streams every layer backend draws from: with the same (seed, purpose, indices)
// the CPU and GPU backends start from the same weights, hash functions and samples.
#pragma once

#include <cstdint>

namespace dslide::streams {

constexpr uint64_t kInit = 0x696e6974;       // weights: (layer, global neuron)
constexpr uint64_t kSample = 0x73616d70;     // per-sample selection: (iter, sample, layer|rank)
constexpr uint64_t kHash = 0x68617368;       // hash functions and table builds
constexpr uint64_t kBatchFill = 0x62666c6c;  // FillPolicy::kBatch: (iter, layer|rank)

}  // namespace dslide::streams
