// Datasets from NumPy CSR arrays, every index and value checked before use.
#include "arrays.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"

namespace dslide::py {

namespace nb = nanobind;

namespace {

/// Element i of an int32 or int64 array, as int64.
class IntArray {
 public:
  IntArray(const Array& a, const std::string& what) : n_(static_cast<int64_t>(a.shape(0))) {
    if (a.dtype() == nb::dtype<int32_t>())
      p32_ = static_cast<const int32_t*>(a.data());
    else if (a.dtype() == nb::dtype<int64_t>())
      p64_ = static_cast<const int64_t*>(a.data());
    else
      throw Error(what + " must be int32 or int64");
  }
  int64_t operator[](int64_t i) const { return p32_ != nullptr ? p32_[i] : p64_[i]; }
  int64_t size() const { return n_; }

 private:
  const int32_t* p32_ = nullptr;
  const int64_t* p64_ = nullptr;
  int64_t n_;
};

/// Checks that `ptr` holds rows + 1 offsets from 0 that never decrease and end at `entries`.
void CheckOffsets(const IntArray& ptr, int64_t rows, int64_t entries, const std::string& what) {
  DSLIDE_CHECK(ptr.size() == rows + 1, what, ": indptr has ", ptr.size(), " entries, ", rows,
               " rows need ", rows + 1);
  DSLIDE_CHECK(ptr[0] == 0, what, ": indptr starts at ", ptr[0], ", not 0");
  for (int64_t r = 0; r < rows; ++r)
    DSLIDE_CHECK(ptr[r + 1] >= ptr[r], what, " row ", r, ": indptr decreases (", ptr[r], " to ",
                 ptr[r + 1], ")");
  DSLIDE_CHECK(ptr[rows] == entries, what, ": indptr ends at ", ptr[rows], ", the arrays hold ",
               entries, " entries");
}

}  // namespace

Dataset DatasetFromCsr(const std::string& name, const CsrArrays& a) {
  const std::string x = name + ": X", y = name + ": Y";
  DSLIDE_CHECK(a.rows >= 0, x, ": negative row count");
  DSLIDE_CHECK(a.features >= 1 && a.features <= (int64_t{1} << 31) - 1, x, " has ", a.features,
               " columns (features), expected 1 to 2^31 - 1");
  DSLIDE_CHECK(a.labels >= 1 && a.labels <= (int64_t{1} << 31) - 1, y, " has ", a.labels,
               " columns (labels), expected 1 to 2^31 - 1");
  const IntArray ptr(*a.indptr, x + ".indptr"), ids(*a.indices, x + ".indices");
  DSLIDE_CHECK(a.values->dtype() == nb::dtype<float>(), x, ": values must be float32");
  const float* vals = static_cast<const float*>(a.values->data());
  DSLIDE_CHECK(static_cast<int64_t>(a.values->shape(0)) == ids.size(), x, ": ", ids.size(),
               " indices but ", a.values->shape(0), " values");
  CheckOffsets(ptr, a.rows, ids.size(), x);

  Dataset d;
  d.num_features = a.features;
  d.num_labels = a.labels;
  d.feat_off.reserve(a.rows + 1);
  d.feat_ids.resize(ids.size());
  d.feat_vals.assign(vals, vals + ids.size());
  d.label_off.reserve(a.rows + 1);
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t e = ptr[r]; e < ptr[r + 1]; ++e) {
      const int64_t id = ids[e];
      DSLIDE_CHECK(id >= 0 && id < a.features, x, " row ", r, ": feature id ", id,
                   " is out of range [0, ", a.features, ")");
      DSLIDE_CHECK(e == ptr[r] || id > ids[e - 1], x, " row ", r, ": feature ids ", ids[e - 1],
                   " then ", id, " (ids of a row must ascend, each once: X.sum_duplicates())");
      DSLIDE_CHECK(std::isfinite(vals[e]), x, " row ", r, ": feature ", id, " has the value ",
                   vals[e], " (values must be finite)");
      d.feat_ids[e] = static_cast<int32_t>(id);
      const float m = std::fabs(vals[e]);
      if (m > d.max_abs_value) {
        d.max_abs_value = m;
        d.max_abs_at = detail::Concat(x, " row ", r);
      }
    }
    d.feat_off.push_back(ptr[r + 1]);
  }
  if (a.label_ptr == nullptr) {
    d.label_off.assign(a.rows + 1, 0);
    return d;
  }
  const IntArray lptr(*a.label_ptr, y + ".indptr"), lids(*a.label_ids, y + ".indices");
  CheckOffsets(lptr, a.rows, lids.size(), y);
  d.labels.resize(lids.size());
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t e = lptr[r]; e < lptr[r + 1]; ++e) {
      const int64_t id = lids[e];
      DSLIDE_CHECK(id >= 0, y, " row ", r, ": label id ", id, " is negative");
      DSLIDE_CHECK(id < a.labels, y, " row ", r, ": label id ", id, " is out of range [0, ",
                   a.labels, ")");
      d.labels[e] = static_cast<int32_t>(id);
    }
    int32_t* first = d.labels.data() + lptr[r];
    int32_t* last = d.labels.data() + lptr[r + 1];
    std::sort(first, last);
    const int32_t* dup = std::adjacent_find(first, last);
    DSLIDE_CHECK(dup == last, y, " row ", r, ": label id ", dup == last ? 0 : *dup,
                 " appears twice");
    d.label_off.push_back(lptr[r + 1]);
  }
  return d;
}

}  // namespace dslide::py
