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
