// Learnable synthetic XC data (`dslide gen`): Zipf label popularity, a sparse feature
// prototype per label, uniform noise features.
#pragma once

#include "config/config.h"
#include "data/dataset.h"

namespace dslide {

/// Generates `n` points. Points with the same seed and index are identical whatever n is;
/// `first_index` lets the test split continue the stream after the training points.
Dataset GenerateSynthetic(const GenConfig& cfg, int64_t first_index, int64_t n);

/// P@1 of always predicting the most frequent label of `train` on the first `max_points`
/// points of `test` (all when <= 0).
double MostPopularLabelP1(const Dataset& train, const Dataset& test, int64_t max_points = 0);

}  // namespace dslide
