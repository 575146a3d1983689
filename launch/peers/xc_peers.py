#!/usr/bin/env python3
"""The extreme-classification libraries a user would run instead of dslide, on the same XC
text files: napkinXC's probabilistic label tree (PLT), omikuji (Parabel/Bonsai trees) and
PECOS XR-Linear, each with its defaults on L2-normalised feature rows (what each expects),
with the same thread count; and a table of counts (`counts`: each feature's label counts in
the training data, a point's labels ranked by the sum over its features, weighted by its
values), which for one-hot inputs (word ids) is the most frequent context of each word. Prints one JSON object per library: P@1/3/5 on the test file
(hits in the top k / k over every test point, dslide's convention), training and prediction
seconds (wall; reading the files and normalising them are timed apart as `prep_s`).

Usage: xc_peers.py --train FILE --test FILE [--threads 2] [--libs plt,omikuji,pecos,counts]
                   [--test-points N] [--work DIR] [--json FILE]
Needs numpy, scipy and the libraries (PyPI: napkinxc, omikuji, libpecos); a missing one is
reported and skipped.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp


def read_xc(path, max_points=0):
    """(X csr float32 rows L2-normalised, list of label lists, features, labels)."""
    with open(path) as f:
        n, d, c = (int(v) for v in f.readline().split()[:3])
        indptr, ind, val, ys = [0], [], [], []
        for line in f:
            if max_points and len(ys) >= max_points:
                break
            parts = line.split()
            if line[:1] not in (" ", "\t") and parts and ":" not in parts[0]:
                ys.append([int(v) for v in parts[0].split(",") if v])
                parts = parts[1:]
            else:
                ys.append([])
            for p in parts:
                a, b = p.split(":")
                ind.append(int(a))
                val.append(float(b))
            indptr.append(len(ind))
    X = sp.csr_matrix((np.asarray(val, np.float32), np.asarray(ind, np.int64), np.asarray(indptr)),
                      shape=(len(ys), d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1
    X = sp.diags(1.0 / norms).dot(X).tocsr().astype(np.float32)
    X.sort_indices()
    return X, ys, d, c


def precision(ranked, ys, ks=(1, 3, 5)):
    out = {}
    for k in ks:
        hits = 0.0
        for r, y in zip(ranked, ys):
            s = set(y)
            hits += sum(1 for l in list(r)[:k] if l in s) / k
        out[f"p_at_{k}"] = hits / max(1, len(ys))
    return out


def label_matrix(ys, c):
    rows = np.repeat(np.arange(len(ys)), [len(y) for y in ys])
    cols = np.asarray([l for y in ys for l in y], np.int64)
    return sp.csr_matrix((np.ones(len(cols), np.float32), (rows, cols)), shape=(len(ys), c))


def write_xc(path, X, ys, c):
    """The points with features and labels (omikuji's reader refuses the others)."""
    keep = [i for i, y in enumerate(ys) if y and X.indptr[i + 1] > X.indptr[i]]
    with open(path, "w") as f:
        f.write(f"{len(keep)} {X.shape[1]} {c}\n")
        for i in keep:
            y = ys[i]
            a, b = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j}:{v:.6g}" for j, v in zip(X.indices[a:b], X.data[a:b]))
            f.write(",".join(map(str, y)) + " " + feats + "\n")


def run_plt(Xtr, ytr, Xte, c, threads, work):
    from napkinxc.models import PLT
    t0 = time.perf_counter()
    m = PLT(os.path.join(work, "plt"), threads=threads)
    m.fit(Xtr, ytr)
    t1 = time.perf_counter()
    pred = m.predict(Xte, top_k=5)
    t2 = time.perf_counter()
    return [[p for p in r] for r in pred], t1 - t0, t2 - t1


def run_omikuji(Xtr, ytr, Xte, c, threads, work):
    import omikuji
    path = os.path.join(work, "omikuji-train.txt")
    write_xc(path, Xtr, ytr, c)  # its trainer reads a file (not timed)
    t0 = time.perf_counter()
    m = omikuji.Model.train_on_data(path, omikuji.Model.default_hyper_param(), n_threads=threads)
    t1 = time.perf_counter()
    pred = []
    for i in range(Xte.shape[0]):
        a, b = Xte.indptr[i], Xte.indptr[i + 1]
        pairs = list(zip(Xte.indices[a:b].tolist(), Xte.data[a:b].tolist()))
        pred.append([l for l, _ in m.predict(pairs, top_k=5)])
    t2 = time.perf_counter()
    return pred, t1 - t0, t2 - t1


def run_pecos(Xtr, ytr, Xte, c, threads, work):
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel
    Y = label_matrix(ytr, c)
    t0 = time.perf_counter()
    feat = LabelEmbeddingFactory.create(Y, Xtr, method="pifa")
    chain = Indexer.gen(feat, threads=threads)
    m = XLinearModel.train(Xtr, Y, C=chain, threads=threads)
    t1 = time.perf_counter()
    P = m.predict(Xte, only_topk=5, threads=threads).tocsr()
    t2 = time.perf_counter()
    pred = []
    for i in range(P.shape[0]):
        a, b = P.indptr[i], P.indptr[i + 1]
        order = np.argsort(-P.data[a:b], kind="stable")
        pred.append(P.indices[a:b][order].tolist())
    return pred, t1 - t0, t2 - t1


def run_counts(Xtr, ytr, Xte, c, threads, work):
    t0 = time.perf_counter()
    C = (Xtr.T.tocsr() @ label_matrix(ytr, c)).tocsr()  # features x labels
    prior = np.asarray(label_matrix(ytr, c).sum(axis=0)).ravel()
    t1 = time.perf_counter()
    pred = []
    rows = max(16, (1 << 25) // max(1, c))  # a block of scores stays near 128 MB
    for a in range(0, Xte.shape[0], rows):
        S = (Xte[a:a + rows] @ C).toarray()
        S += 1e-9 * prior  # ties (and points without known features): the frequent labels
        top = np.argpartition(-S, min(5, c - 1), axis=1)[:, :5]
        for i in range(S.shape[0]):
            row = top[i][np.argsort(-S[i, top[i]], kind="stable")]
            pred.append(row.tolist())
    t2 = time.perf_counter()
    return pred, t1 - t0, t2 - t1


RUNNERS = {"plt": run_plt, "omikuji": run_omikuji, "pecos": run_pecos, "counts": run_counts}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--libs", default="plt,omikuji,pecos,counts")
    ap.add_argument("--test-points", type=int, default=0, help="score the first N (0: all)")
    ap.add_argument("--work", help="folder for the models (default: a temporary one)")
    ap.add_argument("--json", help="append the objects to this file too")
    a = ap.parse_args()
    t0 = time.perf_counter()
    Xtr, ytr, d, c = read_xc(a.train)
    Xte, yte, _, _ = read_xc(a.test, a.test_points)
    prep = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        for lib in a.libs.split(","):
            try:
                pred, train_s, pred_s = RUNNERS[lib](Xtr, ytr, Xte, c, a.threads, work)
            except ImportError as e:
                print(f"xc_peers: {lib} skipped: {e}", file=sys.stderr)
                continue
            r = {"lib": lib, "train": a.train, "threads": a.threads, "test_points": len(yte),
                 "train_s": round(train_s, 3), "predict_s": round(pred_s, 3), "prep_s": round(prep, 3)}
            r.update({k: round(v, 4) for k, v in precision(pred, yte).items()})
            line = json.dumps(r)
            print(line, flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(line + "\n")


if __name__ == "__main__":
    main()
