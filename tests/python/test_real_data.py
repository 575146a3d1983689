"""A real data set (bibtex, from ../shared/data or $DSLIDE_DATA_DIR; skipped where absent):
from its files and from arrays, the same model, and one that beats the most-popular label."""

import os

import numpy as np
import pytest

import dslide
import tasks


@pytest.fixture(scope="module")
def bibtex(data_dir):
    folder = os.path.join(data_dir, "bibtex")
    train, test = os.path.join(folder, "train.txt"), os.path.join(folder, "test.txt")
    if not (os.path.exists(train) and os.path.exists(test)):
        pytest.skip(f"no bibtex data in {data_dir}")
    return train, test


def test_bibtex_from_files_and_arrays(bibtex):
    train, test = bibtex
    opts = dict(epochs=3, threads=1, seed=2, verbose=False)
    from_files = dslide.train(train, test=test, **opts)
    X, Y, labels = tasks.read_xc(train)
    Xt, Yt, _ = tasks.read_xc(test)
    assert labels == from_files.labels == 159
    from_arrays = dslide.train((X, Y), test=(Xt, Yt), **opts)
    for p in ("p_at_1", "p_at_3", "p_at_5", "loss", "points"):
        assert from_arrays.result[p] == from_files.result[p]
    for a, b in zip(from_arrays.predict(Xt), from_files.predict(test)):
        np.testing.assert_array_equal(a, b)
    counts = np.bincount([y for ys in Y for y in ys], minlength=labels)
    popular = int(np.argmax(counts))
    baseline = np.mean([popular in ys for ys in Yt])
    assert from_arrays.evaluate(Xt, Yt)["p_at_1"] > baseline + 0.1
