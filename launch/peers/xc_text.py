"""XC text files for the Python peers (launch/peers/horovod_peer.py, launch/peers/torch_peer.py): the
header 'points features labels', then one line per point ('l1,l2 f:v f:v ...')."""
import os
import sys


def read_lines(path):
    """(features, labels, the points' lines): lines are parsed when used (parse), so a short
    run touches few of them."""
    with open(path) as f:
        n, d, c = (int(v) for v in f.readline().split()[:3])
        lines = [ln for ln in f.read().split("\n") if ln.strip()]
    if len(lines) != n:
        print(f"{os.path.basename(sys.argv[0])}: {path}: header says {n} points, read {len(lines)}",
              file=sys.stderr)
    return d, c, lines


def read_train_test(train, test):
    """(features, labels, training lines, test lines) of a training and a test file, which must
    have the same dimensions (the process exits naming both where they differ)."""
    d, c, train_lines = read_lines(train)
    d_te, c_te, test_lines = read_lines(test)
    if (d_te, c_te) != (d, c):
        sys.exit(f"{os.path.basename(sys.argv[0])}: the test file's header ({d_te} features, "
                 f"{c_te} labels) does not match the training file's ({d}, {c})")
    return d, c, train_lines, test_lines


def parse(line):
    """(labels, feature ids, values) of one point's line."""
    parts = line.split()
    if parts and ":" not in parts[0]:
        labels = [int(v) for v in parts[0].split(",") if v]
        parts = parts[1:]
    else:
        labels = []
    ids, vals = [], []
    for p in parts:
        a, b = p.split(":")
        ids.append(int(a))
        vals.append(float(b))
    return labels, ids, vals
