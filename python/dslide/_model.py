"""Model: a trained or loaded network over its ranks (predict, evaluate, save, weights)."""

from __future__ import annotations

import json
import math
import os

import numpy as np

from . import _core
from ._data import fspath, input_data, is_path
from ._ranks import _agree


#: The options left to auto that a checkpoint fixes (a loaded Model's settings resolve them).
_FIXED_BY_CHECKPOINT = {"sparsity", "hash", "K", "L", "query", "lsh-share", "label-order"}

#: The output index's defaults, the CLI's --ann-m, --ann-ef, --ann-build-ef and --ann-tail.
_ANN_M, _ANN_EF, _ANN_BUILD_EF, _ANN_TAIL = _core.ann_defaults


class Model:
    """A trained (train) or loaded (load) network, spread over the ranks it was made on."""

    def __init__(self, core, comm, result: dict | None = None):
        self._m = core
        self._comm = comm
        #: The run's final evaluation (of the test set when given): p_at_1, p_at_3, p_at_5,
        #: loss, points, seconds; None for a loaded model.
        self.result = result

    @property
    def features(self) -> int:
        """Inputs (columns of X)."""
        return self._m.features

    @property
    def labels(self) -> int:
        """Outputs (label ids are 0 to labels - 1)."""
        return self._m.labels

    @property
    def iteration(self) -> int:
        """Iterations trained."""
        return self._m.iteration

    @property
    def layer_sizes(self) -> list:
        """Neurons of each layer (hidden..., output)."""
        return list(self._m.layer_sizes)

    @property
    def ranks(self) -> int:
        """Ranks the model is spread over (1 without MPI)."""
        return self._m.ranks

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._m.rank

    @property
    def settings(self) -> dict:
        """Every train option with the value it ran with ("auto" resolved), as checkpoints
        and --metrics record them. A loaded model's come from its checkpoint's record; of the
        options left to auto there, those its checkpoint fixes (sparsity, the LSH settings,
        the label order) are resolved, those the training data chose (dropout,
        first-lr-scale, ...) stay "auto"."""
        now = json.loads(self._m.settings)
        recorded = self._m.recorded_settings
        if not recorded:
            return now
        return {key: now.get(key, value) if value == "auto" and key in _FIXED_BY_CHECKPOINT
                else value for key, value in json.loads(recorded).items()}

    @property
    def evals(self) -> list:
        """(iteration, evaluation dict) of every evaluation during training."""
        return list(self._m.evals)

    def build_index(self, *, m: int = _ANN_M, ef: int = _ANN_EF, build_ef: int = _ANN_BUILD_EF,
                    tail: int = _ANN_TAIL, file=None, threads: int | None = None) -> float:
        """Builds the output index that approximate ``predict`` and ``evaluate`` score from:
        an HNSW graph of the output layer's rows searched by inner product (each rank its
        own block of rows), as ``dslide predict --approximate`` does; m links per row,
        build_ef candidates while building, ef candidates (the rows scored) per point, tail
        rows drawn per point for the softmax normaliser beyond them. With ``file``, the graph
        is read from there when it indexes these weights, else built and written there (with
        P ranks, one file per rank: FILE.rank-R-of-P). Kept until the weights change.
        Returns the seconds the slowest rank took. Collective with P ranks."""
        error = None
        try:
            m, ef = _ranged("m", m, 2, 100), _ranged("ef", ef, 1, 10000)
            build_ef = _ranged("build_ef", build_ef, 1, 10000)
            tail = _ranged("tail", tail, 0, 100000)
            if file is not None:
                file = fspath(file)
                if not file:
                    raise ValueError("file: an empty path (None: no file)")
            file = file or ""
            threads = _threads(threads)
        except Exception as e:  # noqa: BLE001: raised by _agree, on every rank
            error = e
        _agree(self._comm, error, [m, ef, build_ef, tail, file], "build_index")
        return self._m.build_index(m, ef, build_ef, tail, file, threads)

    def _need_index(self, k: int, threads: int) -> None:
        # Every rank holds an index of the same ef (build_index agreed on it): the check is
        # alike on every rank.
        if self._m.index_ef == 0:
            self.build_index(threads=threads)
        if k > self._m.index_ef:
            raise ValueError(f"approximate: the index gives {self._m.index_ef} "
                             f"candidates a point, fewer than k = {k} (build_index(ef=...))")

    def predict(self, X, k: int = 5, *, threads: int | None = None, approximate: bool = False):
        """The k most probable labels of every row of X (best first) and their probabilities
        (a softmax model's over all labels; a one-vs-rest model's each label's own sigmoid):
        (ids, scores), NumPy arrays of int32 and float32 of shape (rows, k).
        X: a SciPy sparse matrix or 2-D array of the model's feature count (see the data
        rules in docs/python.md), or a path (XC text, gzip or .dsb; labels ignored).
        Scoring is exact, as ``dslide predict`` does; with ``approximate=True`` only the
        output index's candidates are scored (``build_index``, with its defaults where it
        was not called), and a softmax model's normaliser beyond them is estimated. With P
        ranks it is collective (every rank calls it with the same X) and every rank gets the
        merged lists."""
        data, error = None, None
        try:
            k = _count("k", k)
            data = input_data("X", X, self.features, self.labels, need_labels=False)
            threads = _threads(threads)
            if not isinstance(approximate, bool):
                raise TypeError(f"approximate must be True or False, got {approximate!r}")
        except Exception as e:  # noqa: BLE001: raised by _agree, on every rank
            error = e
        _agree(self._comm, error, [data, k, approximate], "predict")
        if approximate:
            self._need_index(k, threads)
        return self._m.predict(data, k, threads, approximate)

    def evaluate(self, X, Y=None, *, threads: int | None = None,
                 approximate: bool = False) -> dict:
        """Exact P@1, P@3, P@5 and the loss over every label (the model's: softmax or
        one-vs-rest) of the model on (X, Y), as
        ``dslide eval`` computes them: {'p_at_1', 'p_at_3', 'p_at_5', 'loss', 'points',
        'seconds'} (a cut-off above the label count is NaN). X may be a path instead (the
        file's labels are used). With ``approximate=True``, the P@k of the output index's
        top-k (``predict(approximate=True)``'s) with its 'recall' of the exact top 5 and its
        'seconds', and the exact evaluation under 'exact' (as ``dslide eval --approximate
        ann`` prints them). Collective with P ranks."""
        data, error = None, None
        try:
            value = X if Y is None else (X, Y)
            if not is_path(value) and not isinstance(value, tuple):
                raise TypeError("evaluate: give X and Y, or a path")
            data = input_data("evaluate", value, self.features, self.labels, need_labels=True)
            threads = _threads(threads)
            if not isinstance(approximate, bool):
                raise TypeError(f"approximate must be True or False, got {approximate!r}")
        except Exception as e:  # noqa: BLE001: raised by _agree, on every rank
            error = e
        _agree(self._comm, error, [data, approximate], "evaluate")
        ks = [k for k in (1, 3, 5) if k <= self.labels]
        if approximate:
            self._need_index(max(ks), threads)
            out = dict(self._m.evaluate_approximately(data, ks, threads))
            out["exact"] = dict(out["exact"])
            for k in (1, 3, 5):
                out["exact"].setdefault(f"p_at_{k}", math.nan)
        else:
            out = dict(self._m.evaluate(data, ks, threads))
        for k in (1, 3, 5):
            out.setdefault(f"p_at_{k}", math.nan)
        return out

    def weights(self) -> dict:
        """The model's parameters as NumPy arrays (copies), one entry per layer, named as
        training prints the layers and as ``dslide export`` names its groups: layer1 is the
        first hidden layer, the last is the output layer::

            {"layer1": {"weights": W1, "biases": b1}, ..., "layerN": {...}}

        weights: float32 of shape (out, in), a row per neuron (layer l computes
        relu(W @ x + b), the output layer softmax(W @ x + b)); biases: float32 of shape
        (out,). The output layer's row i is label i's, whatever label_order trained it in.
        Collective with P ranks: every rank gets the whole arrays."""
        return {f"layer{l + 1}": {"weights": w, "biases": b}
                for l, (w, b) in enumerate(self._m.weights())}

    def save(self, folder) -> None:
        """Writes the model as a checkpoint folder (meta.h5 and a shard per rank), which
        ``dslide eval/predict/export --model FOLDER``, ``dslide train --resume FOLDER`` and
        load() read. Like --save, it replaces a checkpoint folder but refuses a folder
        holding anything else (FileExistsError), and a path below a file (ValueError); missing
        folders above it are made. Collective with P ranks."""
        error = None
        try:
            folder = fspath(folder)
            while len(folder) > 1 and folder.endswith("/"):
                folder = folder[:-1]
            # A folder whose mode allows no writes (also as root, whom access() lets write)
            # is someone's choice: not replaced.
            if os.path.isdir(folder) and not os.stat(folder).st_mode & 0o222:
                raise PermissionError(
                    f"save: {folder} is read-only (mode {os.stat(folder).st_mode & 0o777:o}): "
                    f"make it writable or give another folder")
            if (os.path.exists(folder) and not os.path.isfile(os.path.join(folder, "meta.h5"))
                    and not (os.path.isdir(folder) and not os.listdir(folder))):
                raise FileExistsError(
                    f"save: {folder} exists and is not a checkpoint folder; give a new or "
                    f"empty folder (a checkpoint folder is replaced)")
            # The folders above it are made; the nearest that exists must be a folder.
            above = os.path.dirname(os.path.abspath(folder))
            while not os.path.exists(above) and os.path.dirname(above) != above:
                above = os.path.dirname(above)
            if not os.path.isdir(above):
                raise ValueError(f"save: cannot create {folder}: {above} is a file, not a "
                                 f"folder")
        except Exception as e:  # noqa: BLE001: raised by _agree, on every rank
            error = e
        _agree(self._comm, error, [folder], "save")
        self._m.save(folder)

    def __repr__(self) -> str:
        return (f"dslide.Model({self.features} features -> {self.layer_sizes}, iteration "
                f"{self.iteration}, {self.ranks} rank(s))")


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _ranged(name: str, value, lo: int, hi: int) -> int:
    value = _count(name, value)
    if not lo <= value <= hi:
        raise ValueError(f"{name}: must be in [{lo}, {hi}], got {value}")
    return value


def _threads(threads) -> int:
    """0 (or None): the default, as train's threads=0 and the executable's --threads 0."""
    if threads is None:
        return 0
    threads = _count("threads", threads)
    if not 0 <= threads <= 4096:
        raise ValueError(f"threads: must be in [0, 4096] (0: the default), got {threads}")
    return threads
