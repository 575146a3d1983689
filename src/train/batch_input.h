// A batch of a dataset as the backend takes it: the points' feature rows and their labels
// as output neurons.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch_rows.h"
#include "data/dataset.h"
#include "model/label_map.h"

namespace dslide {

/// The features of `points` of `data`, one row per point, into `rows` (sparse).
void DataRows(const Dataset& data, const std::vector<int64_t>& points, BatchRows* rows);

/// The batch's labels as output neurons (`map`), sorted per sample.
BatchLabels Labels(const Dataset& data, const std::vector<int64_t>& points, const LabelMap& map);

}  // namespace dslide
