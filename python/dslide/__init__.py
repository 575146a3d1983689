"""dslide: train, predict and evaluate extreme-classification networks from Python.

A thin layer over the C++ core of the ``dslide`` executable (the same trainer, options,
checkpoints and predictions). See docs/python.md for the reference.

    model = dslide.train((X, Y), test=(Xt, Yt), epochs=5, threads=2)
    ids, scores = model.predict(Xt, k=5)
    model.evaluate(Xt, Yt)          # {'p_at_1': ..., 'p_at_3': ..., 'p_at_5': ..., 'loss': ...}
    model.save("model")             # read by dslide eval/predict/export and dslide.load
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import hashlib
import json
import math
import os
import re
import signal as _signal
import sys

import numpy as np
import scipy.sparse as sp

# Idle OpenMP threads sleep instead of spinning (as the dslide executable does), unless the
# user chose: on a machine shared with other work spinning threads take the CPU their
# siblings need. The OpenMP runtime reads this when it loads, with the extension below
# (where another module loaded it earlier, its setting stays).
if "GOMP_SPINCOUNT" not in os.environ:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import _core  # noqa: E402
from ._data import Pending, fspath, input_data, is_path  # noqa: E402
from ._estimator import Classifier  # noqa: E402

__all__ = ["train", "load", "read_xc", "Model", "Classifier", "Interrupted", "Stopped", "Diverged",
           "options_help", "__version__"]

__version__ = _core.version
#: The backends this build has ("cpu" or "cpu, gpu"), as ``dslide --version`` says.
backends = _core.backends


class Interrupted(KeyboardInterrupt):
    """Training stopped by a signal (Ctrl-C: SIGINT; also SIGTERM, SIGUSR1) after its current
    step. ``model`` holds the model of the last step (as trained so far: a --keep-best
    selection is not applied), ``signal`` the signal's name; the message is the executable's
    ("stopped by SIGINT at iteration 58 of 3000; ...")."""

    def __init__(self, message: str, model: "Model | None", signal: str):
        super().__init__(message)
        self.model = model
        self.signal = signal


def _die_by_uncaught_interrupt(previous):
    """sys.excepthook: an Interrupted that nothing catches ends the process as Python ends it
    on an uncaught KeyboardInterrupt (by the signal itself: exit status 130 for SIGINT, as
    shells and schedulers read it), which Python does for KeyboardInterrupt alone, not for
    its subclasses (they would exit 1)."""

    def hook(kind, value, tb):
        previous(kind, value, tb)
        if issubclass(kind, Interrupted):
            sig = getattr(_signal, str(getattr(value, "signal", "")), _signal.SIGINT)
            sys.stderr.flush()
            sys.stdout.flush()
            _signal.signal(sig, _signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    return hook


class Stopped(Exception):
    """Training stopped because the callback raised (its own stopping rule, say) after its
    current step: on every rank alike, though the callback runs on rank 0 alone. ``model``
    holds the model of the last step (as trained so far: a --keep-best selection is not
    applied); on rank 0 ``__cause__`` is the callback's exception."""

    def __init__(self, message: str, model: "Model | None"):
        super().__init__(message)
        self.model = model


class Diverged(RuntimeError):
    """Training stopped because the loss diverged (the executable's exit 3), with its message
    (the iteration, the loss and advice). ``model`` holds the state of the last step."""

    def __init__(self, message: str, model: "Model | None"):
        super().__init__(message)
        self.model = model


sys.excepthook = _die_by_uncaught_interrupt(sys.excepthook)


# --- ranks -------------------------------------------------------------------------------

_mpi_initialized_here = False
_abort_hook_installed = False


def _abort_on_uncaught_exception(comm):
    """With several ranks, an exception that nothing catches on one rank ends every rank
    (MPI_Abort) after its traceback: the others would otherwise wait in their next
    collective, and this one in MPI_Finalize, for ever."""
    global _abort_hook_installed
    if _abort_hook_installed or comm.size < 2:
        return comm
    _abort_hook_installed = True
    previous = sys.excepthook
    rank = comm.rank

    def hook(kind, value, tb):
        try:
            previous(kind, value, tb)
            sys.stderr.write(f"dslide: rank {rank} ended with an uncaught {kind.__name__}: "
                             f"ending every rank of the job (MPI_Abort)\n")
            sys.stderr.flush()
        finally:
            _core.mpi_abort(130 if issubclass(kind, KeyboardInterrupt) else 1)

    sys.excepthook = hook
    return comm


# A rank that leaves Python while the others are in (or go on to) a collective call would
# leave them waiting in it for ever, and itself in MPI_Finalize. The job guard
# (python/src/job_guard.h), made with the first communicator over all of MPI's world, prevents
# it: every collective call first enters the guard (a non-blocking barrier, polled), and when
# Python exits a rank tells the others that it leaves, with its exit code, and waits for them
# to leave too. A rank that finds another gone while it waits to enter a collective call
# prints who left and how, and ends the job (MPI_Abort, with that rank's exit code where it is
# a failure, else 1). A run whose ranks all end normally exits as before, silently.

#: Seconds that MPI_Finalize may take, once every rank has left, before a rank ends the job.
_FINALIZE_SECONDS = 10.0
_NO_EXIT = object()
_exit_status = _NO_EXIT  # what sys.exit was last called with, for the others' message


def _recording_exit(original):
    """sys.exit, recording its status: an atexit handler cannot learn the exit code."""

    def exit(status=None, /):  # noqa: A001: stands for sys.exit
        global _exit_status
        _exit_status = status
        original(status)

    exit.__doc__ = original.__doc__
    exit.__wrapped__ = original
    exit.records_exit_status = True
    return exit


def _exit_code() -> int:
    """The exit code of the sys.exit call that ends Python (-1 where none was made: the end of
    the script, or a SystemExit raised by the script itself)."""
    status = _exit_status
    if status is _NO_EXIT:
        return -1
    if status is None:
        return 0
    if isinstance(status, (int, np.integer)):
        return int(status) & 0xFF
    return 1  # Python prints it and exits 1


def _leave_the_job():
    """atexit: this rank leaves; returns once every other rank has left too."""
    _core.guard_leave(_exit_code())


def _finalize_mpi():
    """atexit, where the package initialised MPI (after _leave_the_job: every rank is here)."""
    code = _exit_code()
    _core.mpi_finalize(_FINALIZE_SECONDS, code if code > 0 else 1)


def _mpi_comm(handle: int, what: str):
    """The core's communicator over the MPI communicator `handle` (-1: the world), for the
    collective call `what`; the first that spans the world makes the job guard."""
    if _core.guard_start(handle):
        if not getattr(sys.exit, "records_exit_status", False):
            sys.exit = _recording_exit(sys.exit)
        atexit.register(_leave_the_job)  # before MPI_Finalize, which is registered earlier
    return _core.mpi_comm(handle, what)


def _communicator(comm, what: str):
    return _abort_on_uncaught_exception(_communicator_of(comm, what))


def _communicator_of(comm, what: str):
    """The core's communicator for `comm` (an mpi4py communicator, or None: MPI's world when
    started by an MPI launcher, else the in-process one), for the collective call `what`."""
    global _mpi_initialized_here
    if comm is None:
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            if mpi.COMM_WORLD.Get_size() > 1 or _core.launched_by_mpi():
                return _mpi_comm(mpi.COMM_WORLD.py2f(), what)
            return _core.local_comm()
        if not _core.launched_by_mpi():
            return _core.local_comm()
        if _core.mpi_initialize():
            _mpi_initialized_here = True
            atexit.register(_finalize_mpi)
        return _mpi_comm(-1, what)
    if isinstance(comm, _core.Comm):
        return comm
    py2f = getattr(comm, "py2f", None)
    if py2f is None:
        raise TypeError(
            f"comm: expected an mpi4py communicator (such as MPI.COMM_WORLD) or None, got "
            f"{type(comm).__name__}")
    return _mpi_comm(py2f(), what)


def _agree(comm, error, parts, what: str) -> None:
    """Collective with P > 1 ranks: every rank learns whether the arguments of a collective
    call passed their checks on every rank and are alike (different data on different ranks
    would train a mixed model, and a rank that raised alone would leave the others waiting
    for ever). Raises this rank's error, else a ValueError when another rank's failed or
    differs. With one rank: raises `error` if any."""
    if comm.size == 1:
        if error is not None:
            raise error
        return
    h = hashlib.blake2b(digest_size=8)
    for part in parts if error is None else []:
        h.update(repr(part).encode() if not isinstance(part, _core.Data)
                 else part.digest().to_bytes(8, "little"))
    ok, same = comm.agree(error is None, int.from_bytes(h.digest(), "little"), what)
    if error is not None:
        raise error
    if not ok:
        raise ValueError(f"{what}: the arguments failed their checks on another rank (its "
                         f"error is in that rank's output)")
    if not same:
        raise ValueError(
            f"{what}: the ranks were given different arguments; under MPI every rank calls "
            f"{what} with the same data and options (each rank holds all of the data, as "
            f"each rank of the executable reads the whole files)")


# --- options -----------------------------------------------------------------------------

def _text(key: str, value) -> str:
    """An option's value as the command line writes it."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, os.PathLike)):
        return fspath(value)
    if isinstance(value, (list, tuple)) and value:
        if any(isinstance(v, (list, tuple)) for v in value):
            raise TypeError(f"option {key}: a list of numbers or names, not of lists")
        return ",".join(_text(key, v) for v in value)
    raise TypeError(f"option {key}: unsupported value {value!r} ({type(value).__name__})")


_option_names = None


def _known_option(key: str) -> bool:
    global _option_names
    if _option_names is None:
        _option_names = set(re.findall(r"^\s+--([a-z0-9-]+)", _core.train_help(), re.M))
    return key.replace("_", "-") in _option_names


def _pairs(options: dict) -> list:
    pairs = []
    for key, value in options.items():
        if key == "help":
            raise ValueError("option --help: not an option here; dslide.options_help() gives "
                             "the text of dslide train --help")
        if value is None:
            continue
        try:
            text = _text(key, value)
        except TypeError:
            if _known_option(key):
                raise
            # A data set under a misspelt name (validation=(X, Y)): say so, not its value's.
            near = difflib.get_close_matches(key, ["train", "test", "valid"], n=1)
            raise TypeError(f"train() got an unknown keyword {key}=: no option of dslide train "
                            f"(dslide.options_help() lists them), and the data sets are train, "
                            f"test and valid" + (f"; did you mean {near[0]}=?" if near else "")
                            ) from None
        if text == "":
            # As the executable says for `--checkpoint-dir ""` (the parser would say that the
            # value "should follow immediately after the equal sign").
            raise ValueError(f"option --{key.replace('_', '-')}: an empty value (leave the "
                             f"option out to go without it)")
        pairs.append((key.replace("_", "-"), text))
    return pairs


def options_help() -> str:
    """The text of ``dslide train --help``: every keyword of train() (dashes as
    underscores) with its default."""
    return _core.train_help()


# --- progress ----------------------------------------------------------------------------

class _Events:
    """A run's events as _core.train hands them over, on the thread that trains, with the GIL
    held: its lines to standard error (when verbose), its records to the callback (as dicts),
    its warnings to standard error. A callback that raises stops the run after its current
    step; train() raises Stopped from the exception."""

    def __init__(self, verbose: bool, callback):
        self.verbose = verbose
        self.callback = callback
        self.error = None

    def line(self, text: str):
        if self.verbose:
            self.warning(text)

    @staticmethod
    def warning(text: str):
        with contextlib.suppress(Exception):
            sys.stderr.write(text)
            sys.stderr.flush()

    def record(self, text: str):
        if self.callback is None or self.error is not None:
            return
        try:
            self.callback(json.loads(text))
        except BaseException as e:  # noqa: BLE001: handed to the caller
            self.error = e
            _core.request_stop()


# --- the model ---------------------------------------------------------------------------

#: The options left to auto that a checkpoint fixes (a loaded Model's settings resolve them).
_FIXED_BY_CHECKPOINT = {"sparsity", "hash", "K", "L", "query", "lsh-share", "label-order"}


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

    def predict(self, X, k: int = 5, *, threads: int | None = None):
        """The k most probable labels of every row of X (best first) and their probabilities
        (a softmax model's over all labels; a one-vs-rest model's each label's own sigmoid):
        (ids, scores), NumPy arrays of int32 and float32 of shape (rows, k).
        X: a SciPy sparse matrix or 2-D array of the model's feature count (see the data
        rules in docs/python.md), or a path (XC text, gzip or .dsb; labels ignored).
        Scoring is exact, as ``dslide predict`` does; with P ranks it is collective (every
        rank calls it with the same X) and every rank gets the merged lists."""
        data, error = None, None
        try:
            k = _count("k", k)
            data = input_data("X", X, self.features, self.labels, need_labels=False)
            threads = _threads(threads)
        except Exception as e:  # noqa: BLE001: raised by _agree, on every rank
            error = e
        _agree(self._comm, error, [data, k], "predict")
        return self._m.predict(data, k, threads)

    def evaluate(self, X, Y=None, *, threads: int | None = None) -> dict:
        """Exact P@1, P@3, P@5 and the loss over every label (the model's: softmax or
        one-vs-rest) of the model on (X, Y), as
        ``dslide eval`` computes them: {'p_at_1', 'p_at_3', 'p_at_5', 'loss', 'points',
        'seconds'} (a cut-off above the label count is NaN). X may be a path instead (the
        file's labels are used). Collective with P ranks."""
        data, error = None, None
        try:
            value = X if Y is None else (X, Y)
            if not is_path(value) and not isinstance(value, tuple):
                raise TypeError("evaluate: give X and Y, or a path")
            data = input_data("evaluate", value, self.features, self.labels, need_labels=True)
            threads = _threads(threads)
        except Exception as e:  # noqa: BLE001: raised by _agree, on every rank
            error = e
        _agree(self._comm, error, [data], "evaluate")
        ks = [k for k in (1, 3, 5) if k <= self.labels]
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


def _threads(threads) -> int:
    """0 (or None): the default, as train's threads=0 and the executable's --threads 0."""
    if threads is None:
        return 0
    threads = _count("threads", threads)
    if not 0 <= threads <= 4096:
        raise ValueError(f"threads: must be in [0, 4096] (0: the default), got {threads}")
    return threads


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
                      events.line, events.record, events.warning)
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
