"""Small generated tasks for the Python package's tests, as arrays and as XC text files."""

import numpy as np
import scipy.sparse as sp


def generate(points, features, labels, seed, nnz=12):
    """(X, Y): X a float32 CSR matrix whose rows carry a feature prototype of one of their
    labels plus noise, Y a list of 1-3 label ids per row (Zipf-like popularity), so that
    there is something to learn."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, labels + 1)
    popularity /= popularity.sum()
    order = rng.permutation(labels)
    prototypes = rng.integers(0, features, size=(labels, nnz // 2))
    rows, cols, vals, Y = [], [], [], []
    for i in range(points):
        ys = sorted(set(order[rng.choice(labels, size=rng.integers(1, 4), p=popularity)]))
        Y.append([int(y) for y in ys])
        feats = set(prototypes[ys[0]].tolist()) | set(rng.integers(0, features, nnz // 2).tolist())
        for f in sorted(feats):
            rows.append(i)
            cols.append(f)
            vals.append(rng.uniform(0.1, 1.0))
    X = sp.csr_matrix((np.array(vals, dtype=np.float32), (rows, cols)),
                      shape=(points, features), dtype=np.float32)
    X.sum_duplicates()
    return X, Y


def write_xc(path, X, Y, labels):
    """The Extreme Classification Repository text format that `dslide` reads."""
    with open(path, "w") as f:
        f.write(f"{X.shape[0]} {X.shape[1]} {labels}\n")
        for i in range(X.shape[0]):
            s, e = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j}:{v!r}" for j, v in zip(X.indices[s:e].tolist(),
                                                          X.data[s:e].tolist()))
            lab = ",".join(str(y) for y in sorted(Y[i]))
            f.write((lab if lab else "") + " " + feats + "\n")


def read_xc(path):
    """(X, Y, labels) of an XC text file (the tests' own reader, for real data sets)."""
    with open(path) as f:
        points, features, labels = (int(v) for v in f.readline().split())
        rows, cols, vals, Y = [], [], [], []
        for i, line in enumerate(f):
            head, _, rest = line.rstrip("\n").partition(" ")
            if ":" in head:  # no labels: the line starts with a feature
                head, rest = "", line.strip()
            Y.append([int(v) for v in head.split(",") if v])
            for item in rest.split():
                j, v = item.split(":")
                rows.append(i)
                cols.append(int(j))
                vals.append(float(v))
    X = sp.csr_matrix((np.array(vals, dtype=np.float32), (rows, cols)),
                      shape=(points, features), dtype=np.float32)
    return X, Y, labels


def read_predictions(path):
    """(ids, scores) of `dslide predict`'s TSV output."""
    ids, scores = [], []
    with open(path) as f:
        for line in f:
            _, items = line.rstrip("\n").split("\t")
            pairs = [p.split(":") for p in items.split(" ")]
            ids.append([int(a) for a, _ in pairs])
            scores.append([float(b) for _, b in pairs])
    return np.array(ids, dtype=np.int32), np.array(scores, dtype=np.float64)
