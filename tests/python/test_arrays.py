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


@pytest.fixture(params=["scipy", "scipy-without-float16"])
def float16_scipy(request, monkeypatch):
    """SciPy as installed, and SciPy as 1.15 and later are: no sparse matrix can hold float16
    ("scipy.sparse does not support dtype float16"; 1.13 fails otherwise), which older
    versions accept (1.10 converts to float32). The package must not ask SciPy for one."""
    if request.param == "scipy-without-float16":
        original = sp.csr_matrix

        def csr_matrix(arg1, *args, **kwargs):
            parts = arg1 if isinstance(arg1, tuple) else (arg1,)
            if any(getattr(p, "dtype", None) == np.float16 for p in parts) or (
                    kwargs.get("dtype") is not None and np.dtype(kwargs["dtype"]) == np.float16):
                raise ValueError("scipy.sparse does not support dtype float16")
            return original(arg1, *args, **kwargs)

        monkeypatch.setattr(sp, "csr_matrix", csr_matrix)
    return request.param


def sparse_float16(X):
    """X as a float16 sparse matrix, or None where SciPy cannot hold one (1.15 on)."""
    try:
        return X.astype(np.float16)
    except ValueError:
        return None


def test_dense_float16_trains_as_float32(float16_scipy):
    """A dense float16 X is converted to float32 before any sparse matrix is made: the same
    model (weights, loss, predictions) as the same X given as float32."""
    rng = np.random.default_rng(5)
    dense = rng.random((60, 12)).astype(np.float16)
    dense[dense < np.float16(0.6)] = 0
    Y = rng.integers(0, 7, size=60)
    X32 = dense.astype(np.float32)
    opts = dict(FEW, seed=2)
    ref = dslide.train((X32, Y), test=(X32, Y), **opts)
    m = dslide.train((dense, Y), test=(dense, Y), **opts)
    assert m.result["loss"] == ref.result["loss"] and m.result["points"] == 60
    for name, layer in ref.weights().items():
        for key, value in layer.items():
            np.testing.assert_array_equal(m.weights()[name][key], value)
    for a, b in zip(m.predict(dense), ref.predict(X32)):
        np.testing.assert_array_equal(a, b)
    assert m.evaluate(dense, Y)["loss"] == ref.evaluate(X32, Y)["loss"]
    # The all-zero float16 X of the report trains too.
    zeros = dslide.train((np.zeros((4, 3), np.float16), np.array([0, 1, 2, 0])), **FEW)
    assert zeros.features == 3 and zeros.labels == 3


def test_float16_is_converted(small):
    """float16 X, sparse (CSR, COO, where SciPy holds float16) or dense, trains, predicts and
    evaluates as its float32 values (float16 to float32 is exact); a non-finite float16 value
    is refused by row."""
    X, Y = small
    X16 = sparse_float16(X)
    X32 = X.copy()
    X32.data = X.data.astype(np.float16).astype(np.float32)
    ref = dslide.train((X32, Y), **FEW)
    expected = ref.predict(X32)
    # (SciPy's toarray() refuses float16: the dense array is made from float32.)
    dense16 = X32.toarray().astype(np.float16)
    for given in ([] if X16 is None else [X16, X16.tocoo()]) + [dense16]:
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


def test_a_sparse_y_without_labels_is_refused(small):
    """A sparse training Y with no label (no stored entry, or stored zeros only) is refused as
    a list of empty lists is: nothing to learn, not a model of loss nan over 0 points."""
    X, _ = small
    with pytest.raises(ValueError, match=r"^train: Y holds no labels \(the sparse Y of 5 columns "
                                         r"has no non-zero entry\): nothing to learn"):
        dslide.train((X[:10], sp.csr_matrix((10, 5))), iterations=3, verbose=False)
    zeros = sp.csr_matrix((np.zeros(2, np.float32), ([0, 3], [1, 4])), shape=(10, 5))
    assert zeros.nnz == 2
    with pytest.raises(ValueError, match=r"^train: Y holds no labels"):
        dslide.train((X[:10], zeros), **FEW)
    # One label is enough, and a test set without labels is no training set.
    one = sp.csr_matrix((np.ones(1, np.float32), ([0], [4])), shape=(10, 5))
    m = dslide.train((X[:10], one), test=(X[10:20], sp.csr_matrix((10, 5))), **FEW)
    assert m.labels == 5


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
