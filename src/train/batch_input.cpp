// A batch of a dataset as the backend takes it: the points' feature rows and their labels
// as output neurons.
#include "train/batch_input.h"

#include <algorithm>

namespace dslide {

void DataRows(const Dataset& data, const std::vector<int64_t>& points, BatchRows* rows) {
  const int64_t B = static_cast<int64_t>(points.size());
  rows->off.resize(B);
  rows->n.resize(B);
  int64_t total = 0;
  for (int64_t i = 0; i < B; ++i) {
    rows->off[i] = total;
    rows->n[i] = data.Features(points[i]).n;
    total += rows->n[i];
  }
  rows->ids.resize(total);
  rows->vals.resize(total);
  for (int64_t i = 0; i < B; ++i) {
    const SparseView x = data.Features(points[i]);
    std::copy(x.ids, x.ids + x.n, rows->ids.begin() + rows->off[i]);
    std::copy(x.vals, x.vals + x.n, rows->vals.begin() + rows->off[i]);
  }
  rows->dense = false;
  rows->width = data.num_features;
}

BatchLabels Labels(const Dataset& data, const std::vector<int64_t>& points, const LabelMap& map) {
  BatchLabels l;
  for (int64_t p : points) {
    const size_t first = l.ids.size();
    l.ids.insert(l.ids.end(), data.Labels(p), data.Labels(p) + data.NumLabels(p));
    if (!map.identity()) {
      map.ToNeurons(l.ids.data() + first, data.NumLabels(p));
      std::sort(l.ids.begin() + static_cast<std::ptrdiff_t>(first), l.ids.end());
    }
    l.off.push_back(static_cast<int64_t>(l.ids.size()));
  }
  return l;
}

}  // namespace dslide
