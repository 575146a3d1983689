"""dslide: train, predict and evaluate extreme-classification networks from Python.

A thin layer over the C++ core of the ``dslide`` executable (the same trainer, options,
checkpoints and predictions). See docs/python.md for the reference.

    model = dslide.train((X, Y), test=(Xt, Yt), epochs=5, threads=2)
    ids, scores = model.predict(Xt, k=5)
    model.evaluate(Xt, Yt)          # {'p_at_1': ..., 'p_at_3': ..., 'p_at_5': ..., 'loss': ...}
    model.save("model")             # read by dslide eval/predict/export and dslide.load
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

# Idle OpenMP threads spin briefly, then sleep (as the dslide executable sets them), unless
# the user chose: on a machine shared with other work spinning threads take the CPU their
# siblings need, and sleeping at once at every parallel region costs a step's many regions a
# wake-up each. The OpenMP runtime reads these when it loads, with the extension below
# (where another module loaded it earlier, its setting stays).
if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = "10000"

from . import _core  # noqa: E402
from ._data import Pending, fspath, is_path  # noqa: E402
from ._errors import Diverged, Interrupted, Stopped  # noqa: E402
from ._estimator import Classifier  # noqa: E402
from ._model import Model  # noqa: E402
from ._options import _Events, _pairs, options_help  # noqa: E402
from ._ranks import _agree, _communicator  # noqa: E402

__all__ = ["train", "load", "read_xc", "Model", "Classifier", "Interrupted", "Stopped", "Diverged",
           "options_help", "__version__"]

# The public classes under the package's name (their reprs, tracebacks and pickles), as
# users import them.
for _cls in (Model, Interrupted, Stopped, Diverged):
    _cls.__module__ = __name__
del _cls

__version__ = _core.version
#: The backends this build has ("cpu" or "cpu, gpu"), as ``dslide --version`` says.
backends = _core.backends


# --- train and load ----------------------------------------------------------------------

def train(train, test=None, valid=None, *, comm=None, callback=None, verbose: bool = True,
          **options) -> Model:
    """Trains a network as ``dslide train`` does and returns the Model.

    train, test, valid: a path (XC text, plain or gzip, or .dsb) or a pair (X, Y): X a SciPy
    sparse matrix of float32 (rows = points), Y a sparse label matrix, a list of label-id
    lists or a 1-D integer array. With arrays and no sparse Y, the label count is the largest
    id + 1 (of train, test and valid), or the training file's.

    options: every option of ``dslide train`` as a keyword, dashes as underscores (epochs=5,
    hidden=[256, 128], valid_fraction=0.1, threads=2, seed=3, save="model", ...), checked by
    the same option table: a bad one raises ValueError with the executable's message.

    comm: an mpi4py communicator; None: MPI's world under an MPI launcher, else one rank.
    callback: called with each metrics object (the JSON lines of --metrics, as dicts) on
    rank 0 as the run reports it, between its steps; an exception in it (a stopping rule of
    the caller's) stops the run after its step, and every rank raises Stopped, its ``model``
    the model of that step, on rank 0 from the callback's exception. verbose: the
    executable's lines on standard error (False: none).

    Ctrl-C (SIGINT, also SIGTERM, SIGUSR1) stops the run after its current step and raises
    Interrupted, a KeyboardInterrupt whose ``model`` attribute holds the model; a second
    Ctrl-C exits at once. A diverged loss raises Diverged.
    """
    return _train(train, test, valid, comm, callback, verbose, False, options)


def _train(train, test, valid, comm, callback, verbose, reranked, options) -> Model:
    """train(); reranked: a reranker follows the network (dslide.Classifier's), so that --lr
    and --patience auto resolve as `dslide train --rerank` resolves them."""
    if callback is not None and not callable(callback):
        raise TypeError(f"train: callback must be callable (it is called with each metrics "
                        f"record as a dict), got {type(callback).__name__}")
    sets = {"train": train, "test": test, "valid": valid}
    pairs = _pairs(options)
    names = {}
    for name, value in sets.items():
        if value is not None:
            if is_path(value) and fspath(value) == "":
                raise ValueError(f"{name}: an empty path (give a file, or a pair (X, Y))")
            names[name] = fspath(value) if is_path(value) else f"{name} (arrays)"
            pairs.append((name, names[name]))
    _core.parse_train_options(pairs)  # the options' errors before the data's
    core_comm = _communicator(comm, "train")
    data, error = {}, None
    try:
        for name, value in sets.items():
            if is_path(value) and not os.path.exists(fspath(value)):
                raise FileNotFoundError(f"{name}: no such file: {fspath(value)}")
        pending = {name: Pending(name, value, need_labels=True)
                   for name, value in sets.items() if value is not None and not is_path(value)}
        if pending:
            features, labels = _shape_of(sets, pending)
            for name, p in pending.items():
                if p.features != features:
                    raise ValueError(
                        f"{name}: X has {p.features} columns (features), train has {features}")
                data[name] = p.build(labels)
    except Exception as e:  # noqa: BLE001: raised by _agree, on every rank
        error = e
    # The same options (but --metrics, which rank 0 alone writes) and data on every rank.
    alike = sorted(p for p in pairs if p[0] != "metrics")
    _agree(core_comm, error, [alike, *(data[n] for n in sorted(data))], "train")

    events = _Events(verbose, callback)
    out = _core.train(pairs, core_comm, data.get("train"), data.get("valid"), data.get("test"),
                      events.line, events.record, events.warning, reranked)
    model = Model(out["model"], core_comm, out["result"]) if out["model"] is not None else None
    # The callback runs on rank 0 alone: every rank learns whether it stopped the run, and
    # each raises the same Stopped (where the stop would reach the others as a signal's).
    stopped = events.error is not None
    if core_comm.size > 1:
        stopped = not core_comm.agree(not stopped, 0, "train")[0]
    if stopped:
        at = model.iteration if model is not None else 0
        raise Stopped(f"training stopped by the callback (on rank 0) at iteration {at}; "
                      f"the model of that step is kept (Stopped.model)", model) from events.error
    if out["stopped"] == 75:
        raise Interrupted(out["message"], model, out["signal"])
    if out["stopped"] == 3:
        raise Diverged(out["message"], model)
    if out["stopped"] != 0:
        raise RuntimeError(out["message"])
    if out["signal"]:
        raise Interrupted(f"stopped by {out['signal']} after training ended at iteration "
                          f"{model.iteration}: the model is complete", model, out["signal"])
    return model


def read_xc(path):
    """(X, Y) of a data file in XC format (text, plain or gzip, or the binary `.dsb` of
    `dslide convert`), read by the C++ reader that training uses (its errors name the file
    and line): X a SciPy CSR matrix of float32, points x features; Y a SciPy CSR matrix of
    float32 ones, points x labels, a stored entry per label. Both are what `train`,
    `predict` and `evaluate` take. A missing file raises FileNotFoundError, a malformed one
    ValueError."""
    path = fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"read_xc: no such file: {path}")
    d = _core.read_data(path)
    indptr, indices, values, label_ptr, labels = d.arrays()
    X = sp.csr_matrix((values, indices, indptr), shape=(d.rows, d.features))
    Y = sp.csr_matrix((np.ones(len(labels), dtype=np.float32), labels, label_ptr),
                      shape=(d.rows, d.labels))
    return X, Y


def _shape_of(sets: dict, pending: dict):
    """Features and labels of a run with sets in memory: the training file's header, else
    train's X, and a sparse Y's columns (all alike), else the largest label id + 1."""
    if is_path(sets["train"]):
        _, features, labels = _core.data_header(fspath(sets["train"]))
        return features, labels
    features = pending["train"].features
    columns = {p.labels for p in pending.values() if p.labels is not None}
    if len(columns) > 1:
        raise ValueError(f"the sparse Y matrices have different label counts: {sorted(columns)}")
    _refuse_unlabelled(pending["train"])
    if columns:
        return features, columns.pop()
    _refuse_outlying_id(pending)
    return features, max([p.max_id for p in pending.values()] + [0]) + 1


def _refuse_outlying_id(pending: dict) -> None:
    """A largest label id far beyond every other (one mistyped id) would make the output
    layer that large without a word: 100,000 for 10 labels. Refused where it is at least
    1,000 and more than 10 times the next largest id; a sparse Y states the label count."""
    ids = np.unique(np.concatenate([p.lids for p in pending.values() if p.labels is None]
                                   + [np.zeros(0, dtype=np.int64)]))
    if ids.size == 0 or ids[-1] < 1000:
        return
    top = int(ids[-1])
    second = int(ids[-2]) if ids.size > 1 else -1
    if top > 10 * (second + 1):
        where = next(name for name, p in pending.items() if p.labels is None and
                     p.lids.size and int(p.lids.max()) == top)
        raise ValueError(
            f"{where}: label id {top} is more than 10 times the next largest ({second}): the "
            f"output layer would have {top + 1} neurons for {ids.size} labels. A mistyped "
            f"id? To mean it, give Y as a sparse matrix of {top + 1} columns")


def _refuse_unlabelled(train) -> None:
    """A training Y without a single label (every list empty, or a sparse Y without a
    non-zero entry) is nothing to learn: refused, not trained into a loss of nan over 0
    points."""
    if not train.has_labels or train.lids.size:
        return
    if train.labels is None:
        raise ValueError("train: Y holds no labels (every row's list is empty): nothing to "
                         "learn; give each point its labels, or a sparse Y of the label count")
    raise ValueError(f"train: Y holds no labels (the sparse Y of {train.labels} columns has no "
                     f"non-zero entry): nothing to learn; give each point its labels as "
                     f"non-zero entries")


def load(folder, *, comm=None) -> Model:
    """The model of a checkpoint folder (written by ``dslide train --save/--checkpoint-dir``
    or Model.save; a --checkpoint-dir gives its newest checkpoint), or of a serving model
    file (``dslide export``'s: the weights alone), spread over the ranks of `comm` (any
    number: the shards are re-cut)."""
    core_comm = _communicator(comm, "load")
    error = None
    try:
        folder = fspath(folder)
        if not os.path.exists(folder):
            raise FileNotFoundError(f"load: no such folder or file: {folder}")
    except Exception as e:  # noqa: BLE001: raised by _agree, on every rank
        error = e
    _agree(core_comm, error, [folder], "load")
    return Model(_core.load(folder, core_comm), core_comm)
