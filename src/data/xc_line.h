// The parse of one point line of the XC text format (dataset_text.cpp), which DatasetStream
// (dataset.cpp) reads line by line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace dslide {

/// Parses the non-header line `line` (1-based line `ln` of `path`) into `d`; the buffers are
/// scratch kept between calls.
void ParseXcLine(const std::string& line, const std::string& path, int64_t ln, Dataset* d,
                 std::vector<int32_t>* fids_buf, std::vector<float>* fvals_buf,
                 std::vector<int32_t>* lbls_buf, std::vector<int32_t>* sorted_buf);

}  // namespace dslide
