"""Bad arrays raise clear errors (naming the argument and the row) and never crash."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

import dslide

FEW = dict(iterations=2, hidden=8, threads=1, verbose=False)


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(3)
    X = sp.random(40, 30, density=0.2, format="csr", dtype=np.float32, random_state=3)
    Y = [[int(rng.integers(0, 20))] for _ in range(40)]
    return X, Y


@pytest.fixture(scope="module")
def model(small):
    return dslide.train(small, **FEW)


def csr(data, indices, indptr, shape):
    """A CSR matrix as given, unchecked (SciPy checks little at construction)."""
    m = sp.csr_matrix(shape, dtype=np.asarray(data).dtype)
    m.data, m.indices, m.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
    for cached in ("_has_canonical_format", "_has_sorted_indices"):
        m.__dict__.pop(cached, None)
    return m


def test_wrong_dtype(small):
    X, Y = small
    with pytest.raises(TypeError, match=r"train: X must hold float32 values .* got int64"):
        dslide.train((X.astype(np.int64), Y), **FEW)
    with pytest.raises(TypeError, match=r"test: X must hold float32 values .* got complex"):
        dslide.train((X, Y), test=(X.astype(np.complex64), Y), **FEW)
    with pytest.raises(TypeError, match="X must be a scipy.sparse matrix"):
        dslide.train(([[1.0]], Y), **FEW)
    with pytest.raises(TypeError, match=r"train: Y row 3: label ids must be integers, got 1.5"):
        dslide.train((X, Y[:3] + [[1.5]] + Y[4:]), **FEW)
    with pytest.raises(TypeError, match=r"train: a 1-D Y must hold integer label ids"):
        dslide.train((X, np.zeros(40)), **FEW)
    with pytest.raises(TypeError, match="expected a path .* or a pair"):
        dslide.train(X, **FEW)


def test_float64_is_converted(small, model):
    X, Y = small
    m = dslide.train((X.astype(np.float64), Y), **FEW)
    for a, b in zip(m.predict(X), model.predict(X)):
        np.testing.assert_array_equal(a, b)
    # A dense array and a CSR array predict alike.
    np.testing.assert_array_equal(model.predict(X.toarray())[0], model.predict(X)[0])
    big = X.astype(np.float64)
    big.data[5] = 1e300
    with pytest.raises(ValueError, match=r"train: X row \d+: the value 1e\+300 is beyond float32"):
        dslide.train((big, Y), **FEW)


def test_float16_is_converted(small):
    """float16 X, sparse (CSR, COO) or dense, trains, predicts and evaluates as its float32
    values (float16 to float32 is exact); a non-finite float16 value is refused by row."""
    X, Y = small
    X16 = X.astype(np.float16)
    X32 = X16.astype(np.float32)
    ref = dslide.train((X32, Y), **FEW)
    expected = ref.predict(X32)
    # (SciPy's toarray() refuses float16: the dense array is made from float32.)
    dense16 = X32.toarray().astype(np.float16)
    for given in (X16, X16.tocoo(), dense16):
        m = dslide.train((given, Y), **FEW)
        for a, b in zip(m.predict(X32), expected):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(ref.predict(given), expected):
            np.testing.assert_array_equal(a, b)
        scores = [{k: v for k, v in ref.evaluate(x, Y).items() if k != "seconds"}
                  for x in (given, X32)]
        assert scores[0] == scores[1]
    dense = dense16.copy()
    dense[3, 4] = np.inf
    with pytest.raises(ValueError, match=r"X: X row 3: feature 4 has the value inf"):
        ref.predict(dense)


def test_shape_mismatch(small, model):
    X, Y = small
    with pytest.raises(ValueError, match="train: Y has 39 rows, X has 40"):
        dslide.train((X, Y[:-1]), **FEW)
    with pytest.raises(ValueError, match=r"test: X has 29 columns \(features\), train has 30"):
        dslide.train((X, Y), test=(X[:, :29], Y), **FEW)
    with pytest.raises(ValueError, match="X: X has 31 columns .*the model has 30 inputs"):
        model.predict(sp.hstack([X, X[:, :1]]).tocsr())
    with pytest.raises(ValueError, match="evaluate: Y has 5 rows, X has 40"):
        model.evaluate(X, Y[:5])
    with pytest.raises(ValueError, match="top-k: 21 labels asked for, the model has 20"):
        model.predict(X, k=21)
    with pytest.raises(ValueError, match="X must be 2-D"):
        model.predict(np.zeros(30, dtype=np.float32))
    with pytest.raises(ValueError, match="train: X has no rows"):
        dslide.train((X[:0], []), **FEW)


def test_negative_and_out_of_range_ids(small, model):
    X, Y = small
    with pytest.raises(ValueError, match=r"train: Y row 2: label id -4 is negative"):
        dslide.train((X, Y[:2] + [[-4]] + Y[3:]), **FEW)
    with pytest.raises(ValueError,
                       match=r"evaluate: Y row 0: label id 20 is out of range \[0, 20\)"):
        model.evaluate(X, [[20]] + Y[1:])
    with pytest.raises(ValueError, match=r"train: Y row 1: label id 3 appears twice"):
        dslide.train((X, [[0], [3, 3]] + Y[2:]), **FEW)
    bad = csr(np.ones(2, np.float32), np.array([1, -3], np.int32), np.array([0, 1, 2]), (2, 30))
    with pytest.raises(ValueError, match=r"X: X row 1: feature id -3 is out of range \[0, 30\)"):
        model.predict(bad)
    bad = csr(np.ones(2, np.float32), np.array([1, 30], np.int64), np.array([0, 2, 2]), (2, 30))
    with pytest.raises(ValueError, match=r"X: X row 0: feature id 30 is out of range"):
        model.predict(bad)
    bad = csr(np.ones(2, np.float32), np.array([1, 2], np.int32), np.array([0, 2, 1]), (2, 30))
    with pytest.raises(ValueError, match=r"X: X row 1: indptr decreases"):
        model.predict(bad)
    bad = csr(np.ones(2, np.float32), np.array([1, 2], np.int32), np.array([0, 1, 5]), (2, 30))
    with pytest.raises(ValueError, match=r"X: X: indptr ends at 5, the arrays hold 2 entries"):
        model.predict(bad)


def test_non_finite_values(small, model):
    X, Y = small
    for v in (math.nan, math.inf, -math.inf):
        Xb = X.copy()
        row = 7
        Xb.data[Xb.indptr[row]] = v
        with pytest.raises(ValueError, match=rf"train: X row {row}: feature \d+ has the value "
                                             rf"-?(nan|inf) \(values must be finite\)"):
            dslide.train((Xb, Y), **FEW)
        with pytest.raises(ValueError, match=rf"X: X row {row}: .* must be finite"):
            model.predict(Xb)


def test_duplicates_and_unsorted_columns_are_summed(small, model):
    X, _ = small
    # Row 0 as two halves of each value, in reverse column order.
    cols = X.indices[X.indptr[0]:X.indptr[1]]
    vals = X.data[X.indptr[0]:X.indptr[1]]
    half = np.concatenate([vals / 2, vals / 2])[::-1].astype(np.float32)
    dup = csr(half, np.concatenate([cols, cols])[::-1].astype(np.int32),
              np.array([0, 2 * len(cols)]), (1, 30))
    np.testing.assert_array_equal(model.predict(dup)[0], model.predict(X[:1])[0])


def test_errors_leave_the_process_working(small, model):
    X, Y = small
    ids, _ = model.predict(X)
    assert ids.shape == (40, 5)
    assert model.evaluate(X, Y)["points"] == 40
