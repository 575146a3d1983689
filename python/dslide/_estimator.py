"""dslide.Classifier: train() and Model behind scikit-learn's estimator conventions, so that
a model is fitted, scored, cloned, pickled and put in a Pipeline or cross_val_score as any
scikit-learn classifier is. One process (no MPI communicator): for P ranks, use train()."""

import inspect
import io
import os
import sys
import tarfile
import tempfile

import numpy as np
import scipy.sparse as sp

from . import _core
from ._data import Pending
from ._options import _pairs


def _as_rows(X, what: str, normalize=None):
    """X as a CSR matrix of float32 (a SciPy sparse matrix or a 2-D array-like), its rows
    scaled to unit L2 norm with normalize="l2"."""
    if np.issubdtype((X if sp.issparse(X) else np.asarray(X)).dtype, np.complexfloating):
        raise ValueError(f"{what}: Complex data not supported (X holds complex numbers); give "
                         f"real features")
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float32)
    else:
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"{what}: X must be 2-D (points x features), got {X.ndim}-D. "
                             f"Reshape your data with X.reshape(-1, 1) if it has one feature "
                             f"or X.reshape(1, -1) if it is one point")
        if X.dtype == object or not np.issubdtype(X.dtype, np.number):
            X = X.astype(np.float32)  # raises for what is not a number
        X = sp.csr_matrix(X.astype(np.float32, copy=False))
    # The minimum-size messages in scikit-learn's words, which its tools look for.
    if X.shape[0] == 0:
        raise ValueError(f"{what}: X has 0 sample(s) (shape={X.shape}) while a minimum of 1 is "
                         f"required.")
    if X.shape[1] == 0:
        raise ValueError(f"{what}: X has 0 feature(s) (shape={X.shape}) while a minimum of 1 "
                         f"is required.")
    if X.nnz and not np.isfinite(X.data).all():
        raise ValueError(f"{what}: X holds NaN or infinite values")
    if normalize == "l2":
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        norms[norms == 0] = 1
        X = sp.csr_matrix(sp.diags(1.0 / norms).dot(X), dtype=np.float32)
    elif normalize is not None:
        raise ValueError(f"{what}: normalize must be 'l2' or None, got {normalize!r}")
    return X


def _targets(y):
    """(Y for train(), classes_, multilabel): a 1-D y of any labels (multiclass: classes_
    its sorted distinct values), or a 2-D 0/1 indicator matrix, dense or sparse, as
    scikit-learn's MultiLabelBinarizer writes (multilabel: classes_ its column numbers). A
    dense column (points x 1) is a 1-D y, with scikit-learn's DataConversionWarning."""
    lists = ValueError("fit: y holds a list of labels per point; give the 0/1 indicator matrix "
                       "of scikit-learn's MultiLabelBinarizer instead (or use train())")
    if not sp.issparse(y):
        try:
            y = np.asarray(y)
        except ValueError:  # lists of different lengths
            raise lists from None
    if not sp.issparse(y) and y.ndim == 2 and y.shape[1] == 1:
        import warnings

        try:
            from sklearn.exceptions import DataConversionWarning as kind
        except ImportError:
            kind = UserWarning
        warnings.warn("A column-vector y was passed when a 1d array was expected (fit: read "
                      "as one label per point)", kind, stacklevel=3)
        y = np.ravel(y)
    if sp.issparse(y) or y.ndim == 2:
        Y = sp.csr_matrix(y)
        if Y.shape[1] == 0:
            raise ValueError("fit: y has 0 columns (labels)")
        if Y.nnz and not np.isin(Y.data, (0, 1)).all():
            raise lists if not sp.issparse(y) else ValueError(
                "fit: a 2-D y must be a 0/1 indicator matrix (points x labels), as "
                "MultiLabelBinarizer writes; it holds other values")
        Y.data = (Y.data != 0).astype(np.float32)
        Y.eliminate_zeros()
        return Y, np.arange(Y.shape[1]), True
    if y.ndim != 1:
        raise ValueError(f"fit: y must be 1-D (a label per point) or a 2-D 0/1 indicator "
                         f"matrix, got shape {y.shape}")
    if y.dtype == object and len(y) and isinstance(y[0], (list, tuple, set, np.ndarray)):
        raise lists
    if np.issubdtype(y.dtype, np.floating):
        if not np.isfinite(y).all():
            raise ValueError("fit: y holds NaN or infinite values")
        if (y != np.round(y)).any():
            raise ValueError("fit: Unknown label type: continuous y (a regression target); "
                             "give class labels")
    classes, ids = np.unique(y, return_inverse=True)
    return ids.astype(np.int64), classes, False


#: predict_proba's proba="auto": a dense array of every class's probability up to this many
#: classes, above it a sparse matrix of the k most probable.
_DENSE_PROBA_MOST = 1024


class Classifier:
    """A dslide network as a scikit-learn classifier.

    fit(X, y) trains with dslide's defaults and, by default, a tenth of the points held back
    for validation (early stopping keeps the best model; with it, dropout on small sets): y is
    a label per point (multiclass, any labels: ``classes_``) or a 0/1 indicator matrix of
    points x labels, dense or sparse (multi-label, as MultiLabelBinarizer writes).
    predict(X): the most probable label of each point (multi-label: an indicator matrix
    with that one label set). predict_proba(X): points x classes of probabilities (under the
    softmax loss, a distribution over the classes; under one-vs-rest, each class's own
    probability; the loss is dslide's --loss auto: one-vs-rest for multi-label y of at least
    1.5 labels a point on average, else the softmax;
    ``options={"loss": ...}`` sets it): up to 1,024
    classes an array of all of them, above it (or with proba="sparse") a SciPy CSR matrix
    of each point's k most probable (the rest are not computed). score(X, y): precision at
    1, the share of points whose most probable label is one of theirs (for a label per
    point, accuracy).

    ensemble="auto" trains as `dslide train --ensemble` does: 3 models (seeds seed, seed + 1,
    seed + 2, each holding back its own validation points) when validating with
    epochs="auto" on at most 25,600 training points, else 1; an int sets it.
    predict, predict_proba and score then use the mean of the members' probabilities
    (``models_``; ``model_`` is the first). Such an ensemble of fewer than 1,024 classes
    (and at most 2^26 weights and 2^31 classes x nonzeros of X) also solves a linear
    one-vs-rest member, as `dslide train --linear auto` does
    (``linear_``, its share of the mean ``linear_share_``, chosen on the first member's
    validation points; at a share of 1 the networks have no weight in the mix, and the
    members after the first are not trained); ``options={"linear": False}`` leaves it out.
    One model of 1,024 classes or more, validating with epochs="auto", is followed by the
    reranker of its lists, as `dslide train --rerank auto` does: ``linear_``
    (``linear_.shortlist`` true), solved per class on the points whose 30 most probable
    classes hold it, rescores each point's list of the network, mixed with it by
    ``linear_share_``; the network then trains at lr="auto"'s 2e-3 and patience="auto"'s 3
    (else 1e-3 and 5). ``options={"rerank": False}`` leaves it out.

    lr_decay="auto" multiplies the learning rate by 0.5 at each evaluation whose validation
    P@1 is more than 0.005 below the best so far and two or more evaluations after it,
    where the output layer is sampled (more than 1,023 classes) and an epoch is at most 300
    batches, as `dslide train --lr-decay` does; a factor in (0, 1] sets it, 1
    never decays.

    Parameters are train()'s options of the same names; ``options`` passes any other
    (``{"sparsity": 0.1}``). normalize="l2" (the default) scales every row of X to unit L2
    norm before training and prediction, as the extreme-classification libraries expect
    their input (None: X as it is, what train() and the executable see). Pickling keeps the
    trained model (its checkpoint files)."""

    _estimator_type = "classifier"  # scikit-learn's is_classifier (stratified folds, checks)

    def __init__(self, hidden=128, epochs="auto", iterations=0, valid_fraction=0.1,
                 patience="auto", dropout="auto", lr="auto", batch=256, threads=0, seed=1, k=5,
                 normalize="l2", proba="auto", verbose=False, options=None, ensemble="auto",
                 lr_decay="auto"):
        self.hidden = hidden
        self.epochs = epochs
        self.iterations = iterations
        self.valid_fraction = valid_fraction
        self.patience = patience
        self.dropout = dropout
        self.lr = lr
        self.batch = batch
        self.threads = threads
        self.seed = seed
        self.k = k
        self.normalize = normalize
        self.proba = proba
        self.verbose = verbose
        self.options = options
        self.ensemble = ensemble
        self.lr_decay = lr_decay

    # scikit-learn's parameter protocol (BaseEstimator's, without depending on it).
    @classmethod
    def _param_names(cls):
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    def get_params(self, deep=True):
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        names = self._param_names()
        for name, value in params.items():
            if name not in names:
                raise ValueError(f"Classifier.set_params: no parameter {name!r} (it has "
                                 f"{', '.join(names)})")
            setattr(self, name, value)
        return self

    def __repr__(self):
        default = inspect.signature(type(self).__init__).parameters
        given = [f"{n}={getattr(self, n)!r}" for n in self._param_names()
                 if getattr(self, n) != default[n].default]
        return f"Classifier({', '.join(given)})"

    def _more_tags(self):
        return {"multilabel": True, "requires_y": True}

    def fit(self, X, y):
        from . import _train  # the package's, imported at call time (no cycle at import)

        if y is None:
            raise ValueError("fit: Classifier requires y to be passed, but the target y is None")
        X = _as_rows(X, "fit", self.normalize)
        Y, classes, multilabel = _targets(y)
        if Y.shape[0] != X.shape[0]:
            raise ValueError(f"fit: X has {X.shape[0]} points, y {Y.shape[0]}")
        options = dict(self.options or {})
        hidden = self.hidden
        options.update(
            hidden=list(hidden) if isinstance(hidden, (list, tuple)) else hidden,
            epochs=self.epochs, iterations=self.iterations, patience=self.patience,
            dropout=self.dropout, lr=self.lr, lr_decay=self.lr_decay, batch=self.batch,
            threads=self.threads, seed=self.seed)
        if self.valid_fraction:
            options["valid_fraction"] = self.valid_fraction
        elif self.patience == "auto":
            options.pop("patience")  # nothing to stop on without validation
        if not multilabel:
            # Every class an output, also one that only the held-back points have.
            Y = sp.csr_matrix((np.ones(len(Y), dtype=np.float32), Y, np.arange(len(Y) + 1)),
                              shape=(len(Y), len(classes)))
        # --ensemble as `dslide train` resolves it: members with seeds seed, seed + 1, ...
        # (--linear and --rerank are the ensemble's, not a member's: train() refuses them).
        asked = _pairs(dict(options, ensemble=self.ensemble, train="X"))
        options.pop("linear", None)
        options.pop("rerank", None)
        members = _core.ensemble_members(asked, X.shape[0])
        # --linear and --rerank as `dslide train` resolves them: a dense linear member beside
        # an ensemble's networks, or the reranker of one network's lists.
        dense_linear = _core.auto_linear(asked, members, X.shape[1], Y.shape[1], X.nnz)
        rerank = not dense_linear and _core.auto_rerank(asked, members, X.shape[0], Y.shape[1])
        def member(m):  # the m-th network (0: the first), its seed seed + m
            return _train((X, Y), None, None, None, None, self.verbose, rerank,
                          dict(options, seed=self.seed + m))

        self.models_ = [member(0)]
        self.model_ = self.models_[0]
        # Its share of the mean chosen on the first member's validation points.
        self.linear_, self.linear_share_ = None, 0.0
        valid_fraction = float(options.get("valid_fraction", 0) or 0)
        if dense_linear or rerank:
            self._fit_linear(X, Y, valid_fraction, rerank)
        if dense_linear and self.linear_share_ >= 1 and members > 1:
            # The linear member takes the whole mix (the networks' weight 0): as `dslide
            # train`, the other members are not trained.
            if self.verbose:
                left = "members 2-%d" % members if members > 2 else "member 2"
                print(f"ensemble {left} not trained: the linear member's share is 1 on the "
                      "first member's validation points, which leaves the networks no weight "
                      "in the mix", file=sys.stderr)
        else:
            self.models_ += [member(m) for m in range(1, members)]
        self.classes_ = classes
        self.multilabel_ = multilabel
        self.n_features_in_ = X.shape[1]
        return self

    def _fit_linear(self, X, Y, valid_fraction, rerank=False):
        """The linear member, as `dslide train --linear` solves it, or with rerank the
        reranker, as `dslide train --rerank` does (per label, on the points that have it and
        the points whose list of the network's 30 best labels holds it): on every training
        point; where validating, a second one on the first member's training points, mixed
        with that member on its validation points at each share of the grid
        (_core.choose_linear_share), chooses its share; else 0.5."""
        labels, threads = Y.shape[1], self.threads or 0
        length = _core.ensemble_list_length(5, labels)
        if rerank:
            heads, _ = self.model_.predict(X, k=min(_core.rerank_list, length),
                                           threads=self.threads or None)

        def solve(rows):  # on the training points `rows` (None: every one)
            data = Pending("X", (X, Y) if rows is None else (X[rows], Y[rows]), True)
            if not rerank:
                return _core.linear_train(data.build(labels), self.seed, threads)
            lists = heads if rows is None else np.ascontiguousarray(heads[rows])
            return _core.linear_train_shortlist(data.build(labels), lists, self.seed, threads)

        self.linear_ = solve(None)
        self.linear_share_ = 0.5
        if valid_fraction > 0:
            held = _core.holdout_points(X.shape[0], valid_fraction, self.seed)
            check = solve(np.setdiff1d(np.arange(X.shape[0]), held))
            points = Pending("X", (X[held], Y[held]), True).build(labels)
            net = self.models_[0].predict(X[held], k=length, threads=self.threads or None)
            lin = check.rescore(points, net[0], threads) if rerank else \
                check.top(points, length, threads)
            self.linear_share_, why = _core.choose_linear_share(*net, *lin, points)
            if self.verbose:
                what = ("reranker: its share of the network's probability" if rerank else
                        "linear member: its share of the mean probability")
                print(f"{what} {self.linear_share_:g} ({why})", file=sys.stderr)

    def _check_fitted(self, what):
        if not hasattr(self, "model_"):
            raise _not_fitted(f"Classifier.{what}: call fit first")

    def _rows(self, X, what):
        self._check_fitted(what)
        X = _as_rows(X, what, self.normalize)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"{what}: X has {X.shape[1]} features, the model was fitted on "
                             f"{self.n_features_in_}")
        return X

    def _top(self, X, k):
        """Each point's k most probable classes and their probabilities: one model's, or the
        mean of an ensemble's members' (each member's 100 most probable, or k where more,
        counted; a class outside a member's list counts 0 for it, as `dslide predict`
        averages them)."""
        models = getattr(self, "models_", None) or [self.model_]
        threads = self.threads or None
        linear, share = getattr(self, "linear_", None), getattr(self, "linear_share_", 0.0)
        if linear is None or share <= 0:
            linear = None
        if len(models) == 1 and linear is None:
            return models[0].predict(X, k=k, threads=threads)
        length = _core.ensemble_list_length(k, len(self.classes_))  # as dslide predict's
        lists = [model.predict(X, k=length, threads=threads) for model in models]
        if linear is None:
            return _core.merge_member_lists([ids for ids, _ in lists], [p for _, p in lists], k)
        points = Pending("X", X, False).build(len(self.classes_))
        if linear.shortlist:  # the reranker: the network's list rescored
            lists.append(linear.rescore(points, lists[0][0], self.threads or 0))
        else:
            lists.append(linear.top(points, length, self.threads or 0))
        return _core.merge_member_lists([ids for ids, _ in lists], [p for _, p in lists], k,
                                        _core.member_weights(len(models), share))

    def predict(self, X):
        X = self._rows(X, "predict")
        ids, _ = self._top(X, 1)
        top = ids[:, 0]
        if not self.multilabel_:
            return self.classes_[top]
        out = np.zeros((X.shape[0], len(self.classes_)), dtype=np.int64)
        out[np.arange(X.shape[0]), top] = 1
        return out

    def predict_proba(self, X):
        """Points x classes: with proba "sparse" (auto: above 1,024 classes) a CSR matrix of
        each point's k most probable classes' probabilities, the rest not computed; with
        "dense" (auto: up to 1,024) an array of every class's."""
        X = self._rows(X, "predict_proba")
        c = len(self.classes_)
        dense = self.proba == "dense" or (self.proba == "auto" and c <= _DENSE_PROBA_MOST)
        if self.proba not in ("auto", "dense", "sparse"):
            raise ValueError(f"predict_proba: proba must be 'auto', 'dense' or 'sparse', got "
                             f"{self.proba!r}")
        k = c if dense else max(1, min(int(self.k), c))
        ids, scores = self._top(X, k)
        n = X.shape[0]
        keep = ids >= 0
        rows = np.repeat(np.arange(n), k).reshape(n, k)
        if dense:
            out = np.zeros((n, c), dtype=np.float64)
            out[rows[keep], ids[keep]] = scores[keep]
            return out
        return sp.csr_matrix((scores[keep], (rows[keep], ids[keep])), shape=(n, c))

    def score(self, X, y, sample_weight=None):
        """Precision at 1: the (weighted) share of points whose most probable label is one of
        theirs."""
        X = self._rows(X, "score")
        ids, _ = self._top(X, 1)
        top = ids[:, 0]
        if self.multilabel_:
            Y = sp.csr_matrix(y) if sp.issparse(y) else sp.csr_matrix(np.asarray(y))
            hit = np.asarray(Y[np.arange(X.shape[0]), top]).ravel() != 0
        else:
            hit = self.classes_[top] == np.asarray(y)
        return float(np.average(hit, weights=sample_weight))

    # Pickling: the models' checkpoint files travel with the estimator (the first member in
    # "model", the others in "member-2", "member-3", ...).
    def __getstate__(self):
        state = self.__dict__.copy()
        model = state.pop("model_", None)
        models = state.pop("models_", None) or ([model] if model is not None else [])
        if models:
            with tempfile.TemporaryDirectory() as tmp:
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w") as tar:
                    for m, member in enumerate(models):
                        name = "model" if m == 0 else f"member-{m + 1}"
                        member.save(os.path.join(tmp, name))
                        tar.add(os.path.join(tmp, name), arcname=name)
                state["_model_tar"] = buf.getvalue()
                state["_members"] = len(models)
        linear = state.pop("linear_", None)
        if linear is not None and linear.shortlist:  # the reranker's file, as train writes it
            with tempfile.TemporaryDirectory() as tmp:
                linear.save(tmp, state.get("linear_share_", 0.0), self.seed)
                folder = os.path.join(tmp, "linear")  # the file and its checksum sidecar
                state["_reranker_files"] = {}
                for name in sorted(os.listdir(folder)):
                    with open(os.path.join(folder, name), "rb") as f:
                        state["_reranker_files"][name] = f.read()
        elif linear is not None:
            state["_linear_weights"] = linear.weights()
        return state

    def __setstate__(self, state):
        from . import load

        blob = state.pop("_model_tar", None)
        members = state.pop("_members", 1)
        weights = state.pop("_linear_weights", None)
        reranker = state.pop("_reranker_files", None)
        self.__dict__.update(state)
        if "linear_share_" in state:  # fitted: linear_ is the member or None, as before pickling
            self.linear_ = None if weights is None else _core.linear_from_weights(
                np.ascontiguousarray(weights, np.float32))
        if reranker is not None:
            with tempfile.TemporaryDirectory() as tmp:
                os.makedirs(os.path.join(tmp, "linear"))
                for name, data in reranker.items():
                    with open(os.path.join(tmp, "linear", os.path.basename(name)), "wb") as f:
                        f.write(data)
                self.linear_, _ = _core.linear_load(tmp)
        if blob is not None:
            with tempfile.TemporaryDirectory() as tmp:
                with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
                    tar.extractall(tmp)
                self.models_ = [load(os.path.join(tmp, "model" if m == 0 else f"member-{m + 1}"))
                                for m in range(members)]
                self.model_ = self.models_[0]


def _not_fitted(message):
    """scikit-learn's NotFittedError where it is installed (what its checks expect), else a
    ValueError with the same message."""
    try:
        from sklearn.exceptions import NotFittedError
    except ImportError:
        return ValueError(message)
    return NotFittedError(message)
