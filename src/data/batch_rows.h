// A batch of sparse rows (one per sample): active ids with values, the unit that layers
// consume and produce and that ranks exchange.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace dslide {

/// Sample s holds n[s] entries at [off[s], off[s] + n[s]) of ids/vals. Filled either
/// strided (off[s] = s * cap, each sample writes its own slot range in parallel) or packed.
/// Host memory.
struct BatchRows {
  std::vector<int64_t> off, n;
  std::vector<int32_t> ids;
  std::vector<float> vals;
  /// Every row holds ids 0..width-1 in order (a dense layer's full activation): kernels may
  /// use contiguous loads instead of gathers.
  bool dense = false;
  int64_t width = 0;

  int64_t samples() const { return static_cast<int64_t>(n.size()); }
  /// Dense, and every row holds all `cols` entries (a full activation of that width).
  bool FullRows(int64_t cols) const {
    return dense && std::all_of(n.begin(), n.end(), [cols](int64_t c) { return c == cols; });
  }
  SparseView Row(int64_t s) const { return {ids.data() + off[s], vals.data() + off[s], n[s]}; }
  float* Vals(int64_t s) { return vals.data() + off[s]; }
  int32_t* Ids(int64_t s) { return ids.data() + off[s]; }
  int64_t Total() const {
    int64_t t = 0;
    for (auto c : n) t += c;
    return t;
  }
  /// B rows of capacity cap each (strided).
  void Strided(int64_t batch, int64_t cap) {
    off.resize(batch);
    n.assign(batch, 0);
    for (int64_t s = 0; s < batch; ++s) off[s] = s * cap;
    if (static_cast<int64_t>(ids.size()) < batch * cap) {
      ids.resize(batch * cap);
      vals.resize(batch * cap);
    }
    dense = false;
    width = 0;
  }
  /// Same layout as `other`, values zeroed (for gradients aligned with activations).
  void LikeZero(const BatchRows& other) {
    off = other.off;
    n = other.n;
    ids.clear();
    vals.assign(other.vals.size(), 0.0f);
    dense = other.dense;
    width = other.width;
  }
};

/// Copies the rows' entries sample after sample (the packed order the snapshot exchange
/// sends) into vals and, when not null, ids.
inline void PackRows(const BatchRows& rows, float* vals, int32_t* ids) {
  for (int64_t i = 0, o = 0; i < rows.samples(); ++i) {
    std::copy(rows.vals.begin() + rows.off[i], rows.vals.begin() + rows.off[i] + rows.n[i],
              vals + o);
    if (ids != nullptr)
      std::copy(rows.ids.begin() + rows.off[i], rows.ids.begin() + rows.off[i] + rows.n[i],
                ids + o);
    o += rows.n[i];
  }
}

/// The inverse for values: `out` laid out like `layout` (its offsets, counts and ids), with
/// the values taken sample after sample from `packed`.
inline void UnpackLike(const float* packed, const BatchRows& layout, BatchRows* out) {
  out->LikeZero(layout);
  for (int64_t i = 0, o = 0; i < layout.samples(); ++i) {
    std::copy(packed + o, packed + o + layout.n[i], out->Vals(i));
    o += layout.n[i];
  }
  out->ids = layout.ids;
}

/// Subtracts from each entry of `rows` the value at its place in `v` (laid out as rows' values).
inline void SubtractRows(const std::vector<float>& v, BatchRows* rows) {
  for (int64_t i = 0; i < rows->samples(); ++i) {
    float* z = rows->Vals(i);
    const float* d = v.data() + rows->off[i];
    for (int64_t j = 0; j < rows->n[i]; ++j) z[j] -= d[j];
  }
}

/// Labels of the samples of a batch (global label ids, sorted per sample).
struct BatchLabels {
  std::vector<int64_t> off{0};
  std::vector<int32_t> ids;
  int64_t Count(int64_t s) const { return off[s + 1] - off[s]; }
  const int32_t* Of(int64_t s) const { return ids.data() + off[s]; }
};

}  // namespace dslide
