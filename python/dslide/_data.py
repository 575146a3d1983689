"""Data sets for the C++ core: paths, and (X, Y) pairs of SciPy/NumPy arrays.

X: a SciPy sparse matrix or array (any format, converted to CSR; rows are points) or a 2-D
NumPy array. Its values must be float32; float64 and float16 are converted to float32
(a value beyond float32's range is an error, not an infinity; a dense float16 array is
converted before a sparse matrix is made of it, as recent SciPy holds no float16); any other
dtype is a TypeError. Duplicate entries of a row are summed and its columns sorted (SciPy's
sum_duplicates), on a copy.

Y: a SciPy sparse matrix (a label is a stored non-zero entry; its columns are the labels),
a list (or any sequence) of label-id lists, or a 1-D integer NumPy array (one label per row).

The arrays are checked row by row in C++ (arrays.cpp): ids in range, a label once per row,
finite values; every error names the argument, X or Y, and the row.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import scipy.sparse as sp

from . import _core


def is_path(value) -> bool:
    return isinstance(value, (str, bytes, os.PathLike))


def fspath(value) -> str:
    path = os.fsdecode(os.fspath(value))
    return path


def _row_of(indptr, entry) -> int:
    return int(np.searchsorted(indptr, entry, side="right") - 1)


def _check_structure(what: str, M) -> None:
    """A CSR matrix's offsets, checked before SciPy's own routines read through them."""
    rows = M.shape[0]
    indptr, indices, data = np.asarray(M.indptr), np.asarray(M.indices), np.asarray(M.data)
    if indptr.ndim != 1 or len(indptr) != rows + 1:
        raise ValueError(f"{what}: indptr has {len(indptr)} entries, {rows} rows need {rows + 1}")
    if len(indices) != len(data):
        raise ValueError(f"{what}: {len(indices)} indices but {len(data)} values")
    if indptr[0] != 0:
        raise ValueError(f"{what}: indptr starts at {indptr[0]}, not 0")
    step = np.diff(indptr)
    if (step < 0).any():
        r = int(np.argmax(step < 0))
        raise ValueError(f"{what} row {r}: indptr decreases ({indptr[r]} to {indptr[r + 1]})")
    if indptr[-1] != len(indices):
        raise ValueError(
            f"{what}: indptr ends at {indptr[-1]}, the arrays hold {len(indices)} entries")


def as_csr(name: str, X):
    """X as a canonical float32 CSR matrix; TypeError or ValueError naming `name`."""
    if sp.issparse(X):
        if X.ndim != 2:
            raise ValueError(f"{name}: X must be 2-D (rows = points), got {X.ndim} dimension(s)")
        X = X.tocsr()
        _check_structure(f"{name}: X", X)
    elif isinstance(X, np.ndarray):
        if X.ndim != 2:
            raise ValueError(f"{name}: X must be 2-D (rows = points), got {X.ndim} dimension(s)")
        if X.dtype.kind != "f":
            raise TypeError(
                f"{name}: X must hold float32 values (float64 and float16 are converted), "
                f"got {X.dtype}")
        if X.dtype == np.float16:
            # Exact, before SciPy sees it: SciPy 1.15 and later hold no float16 matrix
            # ("scipy.sparse does not support dtype float16"), 1.13 fails otherwise.
            X = X.astype(np.float32)
        X = sp.csr_matrix(X)
    else:
        raise TypeError(
            f"{name}: X must be a scipy.sparse matrix (CSR, rows = points) or a 2-D NumPy "
            f"array, got {type(X).__name__}")
    if X.dtype != np.float32:
        if X.dtype not in (np.float64, np.float16):
            raise TypeError(
                f"{name}: X must hold float32 values (float64 and float16 are converted), "
                f"got {X.dtype}")
        with np.errstate(over="ignore", invalid="ignore"):
            values = X.data.astype(np.float32)
        lost = np.isfinite(X.data) & ~np.isfinite(values)
        if lost.any():
            entry = int(np.argmax(lost))
            value = X.data[entry].item()
            raise ValueError(f"{name}: X row {_row_of(X.indptr, entry)}: the value {value!r} is "
                             f"beyond float32's range")
        X = sp.csr_matrix((values, X.indices, X.indptr), shape=X.shape)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X


def label_arrays(name: str, Y, rows: int):
    """(indptr, ids, columns or None) of Y; columns is None for a list of lists."""
    if sp.issparse(Y):
        if Y.ndim != 2:
            raise ValueError(f"{name}: Y must be 2-D (rows = points), got {Y.ndim} dimension(s)")
        Y = Y.tocsr()
        if Y.shape[0] != rows:
            raise ValueError(f"{name}: Y has {Y.shape[0]} rows, X has {rows}")
        _check_structure(f"{name}: Y", Y)
        Y = Y.copy()
        Y.eliminate_zeros()
        Y.sum_duplicates()
        return Y.indptr, Y.indices, Y.shape[1]
    if isinstance(Y, np.ndarray) and Y.ndim != 1 or isinstance(Y, (str, bytes)):
        raise TypeError(
            f"{name}: Y must be a scipy.sparse matrix, a list of label-id lists or a 1-D "
            f"integer array, got {type(Y).__name__}"
            + (f" of {Y.ndim} dimensions" if isinstance(Y, np.ndarray) else ""))
    if isinstance(Y, np.ndarray):
        if Y.dtype.kind not in "iu":
            raise TypeError(f"{name}: a 1-D Y must hold integer label ids, got {Y.dtype}")
        if len(Y) != rows:
            raise ValueError(f"{name}: Y has {len(Y)} rows, X has {rows}")
        return np.arange(rows + 1, dtype=np.int64), Y.astype(np.int64), None
    try:
        lists = list(Y)
    except TypeError:
        raise TypeError(
            f"{name}: Y must be a scipy.sparse matrix, a list of label-id lists or a 1-D "
            f"integer array, got {type(Y).__name__}") from None
    if len(lists) != rows:
        raise ValueError(f"{name}: Y has {len(lists)} rows, X has {rows}")
    lengths = np.zeros(rows, dtype=np.int64)
    for r, row in enumerate(lists):
        try:
            lengths[r] = len(row)
        except TypeError:
            raise TypeError(
                f"{name}: Y row {r}: expected a list of label ids, got "
                f"{type(row).__name__}") from None
    flat = np.asarray(list(itertools.chain.from_iterable(lists)))
    if flat.size and flat.dtype.kind not in "iu":
        values = list(itertools.chain.from_iterable(lists))
        bad = next((i for i, v in enumerate(values)
                    if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_))),
                   0)
        row = _row_of(np.concatenate([[0], np.cumsum(lengths)]), bad)
        value = values[bad].item() if isinstance(values[bad], np.generic) else values[bad]
        raise TypeError(f"{name}: Y row {row}: label ids must be integers, got {value!r}")
    if flat.size and flat.dtype.kind == "u" and flat.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: Y: label id {flat.max()} is out of range")
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr, flat.astype(np.int64), None


def _index(a):
    """A contiguous int32 or int64 copy-free view of an index array where possible."""
    a = np.asarray(a)
    if a.dtype not in (np.int32, np.int64):
        a = a.astype(np.int64)
    return np.ascontiguousarray(a)


class Pending:
    """One argument on its way to the core: X as CSR, Y's arrays, the label count."""

    def __init__(self, name: str, value, need_labels: bool):
        self.name = name
        if not isinstance(value, tuple):
            if need_labels:
                raise TypeError(
                    f"{name}: expected a path (XC text, gzip or .dsb) or a pair (X, Y), got "
                    f"{type(value).__name__}")
            X, Y = value, None
        elif len(value) != 2:
            raise TypeError(f"{name}: expected a pair (X, Y), got a tuple of {len(value)}")
        else:
            X, Y = value
        self.X = as_csr(name, X)
        self.rows, self.features = self.X.shape
        self.labels = None  # columns of a sparse Y
        self.has_labels = Y is not None
        self.max_id = -1
        if Y is not None:
            self.lptr, self.lids, self.labels = label_arrays(name, Y, self.rows)
            if self.labels is None and self.lids.size:
                self.max_id = int(self.lids.max())
        if self.rows == 0 and need_labels:
            raise ValueError(f"{name}: X has no rows (points)")

    def build(self, labels: int):
        empty = np.zeros(0, dtype=np.int64)
        return _core.data_from_csr(
            self.name, self.rows, self.features, labels, _index(self.X.indptr),
            _index(self.X.indices), np.ascontiguousarray(self.X.data, dtype=np.float32),
            self.has_labels, _index(self.lptr) if self.has_labels else empty,
            _index(self.lids) if self.has_labels else empty)


def input_data(name: str, value, features: int, labels: int, need_labels: bool):
    """The _core.Data of a path or of X / (X, Y) for a model of `features` inputs and
    `labels` outputs."""
    if is_path(value):
        path = fspath(value)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{name}: no such file: {path}")
        return _core.read_data(path)
    pending = Pending(name, value, need_labels)
    if pending.features != features:
        raise ValueError(
            f"{name}: X has {pending.features} columns (features), the model has {features} "
            f"inputs")
    if pending.labels is not None and pending.labels != labels:
        raise ValueError(
            f"{name}: Y has {pending.labels} columns (labels), the model has {labels} outputs")
    return pending.build(labels)
