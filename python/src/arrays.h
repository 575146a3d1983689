// Datasets built from NumPy arrays (CSR rows), checked row by row: the in-memory form of the
// Python package's (X, Y) pairs.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "data/dataset.h"

namespace dslide::py {

/// A one-dimensional, contiguous array on the host of any dtype (checked where used).
using Array = nanobind::ndarray<nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;

/// The CSR arrays of one set: X (`rows` x `features`: indptr, indices, values) and, where
/// `label_ptr` is not null, Y (`label_ptr`, `label_ids`, ids below `labels`). indptr and
/// label_ptr: int32 or int64; indices and label_ids: int32 or int64; values: float32.
struct CsrArrays {
  int64_t rows = 0, features = 0, labels = 0;
  const Array* indptr = nullptr;
  const Array* indices = nullptr;
  const Array* values = nullptr;
  const Array* label_ptr = nullptr;
  const Array* label_ids = nullptr;
};

/// The Dataset of `a`. Feature ids of a row must ascend (scipy's canonical CSR), label ids of
/// a row are sorted; every failed check throws dslide::Error naming `name` (the argument),
/// X or Y and the row: an offset array that does not start at 0 or decreases, an id out of
/// range, a repeated id, a value that is not finite. Needs no Python (GIL released).
Dataset DatasetFromCsr(const std::string& name, const CsrArrays& a);

}  // namespace dslide::py
