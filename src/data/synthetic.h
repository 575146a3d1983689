// Learnable synthetic XC data (`dslide gen`): Zipf label popularity, a sparse feature
// prototype per label, uniform noise features.
#pragma once

#include "config/config.h"
#include "data/dataset.h"

namespace dslide {

/// Generates `n` points. Points with the same seed and index are identical whatever n is;
/// `first_index` lets the test split continue the stream after the training points.
/// An allocation that fails throws dslide::Error saying how many points were generated.
Dataset GenerateSynthetic(const GenConfig& cfg, int64_t first_index, int64_t n);

/// Throws dslide::Error naming --points when `points` and `test_points` generated points
/// cannot fit in the memory this process may have (at least 28 bytes a point: its offsets,
/// a label and a feature), before any is generated.
void CheckGeneratedDataFits(const GenConfig& cfg, int64_t points, int64_t test_points);

/// P@1 of always predicting the most frequent label of `train` on the first `max_points`
/// points of `test` (all when <= 0).
double MostPopularLabelP1(const Dataset& train, const Dataset& test, int64_t max_points = 0);

}  // namespace dslide
