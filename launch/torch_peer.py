#!/usr/bin/env python3
"""PyTorch peers of `dslide bench`: the same network (sparse input -> hidden ReLU -> softmax
output), initialisation, Adam, batch, iterations, data order and data files, in one of three
forms a PyTorch user would write:

  dense          every output neuron computed, fp32, torch.optim.Adam
  dense-tf32     the same with TF32 matrix products and fused Adam (where the device has them)
  sampled        sampled softmax: per step the batch's labels plus --negatives uniform
                 negatives shared by the batch, the output layer as a sparse embedding
                 updated with SparseAdam, TF32

Evaluation is exact (every output scored). Host-side batch preparation is excluded from the
timings; on a GPU each step ends with a synchronisation. Prints one JSON object with the
names dslide uses: ms_per_iter (median), ms_per_iter_mean, p_at_1, and p_at_1_by_iter
([iteration, P@1, training seconds so far] every --eval-every iterations).

With --match-dslide the peer starts from dslide's own initial weights (the values of
`dslide train --seed S --label-order identity`, drawn from dslide's random streams) and
takes dslide's batches (its shuffled order of each epoch, a short last batch), so that a
dense run and `dslide train --sparsity 1` differ only in float rounding.

Usage: torch_peer.py TRAIN.txt TEST.txt [--mode dense|dense-tf32|sampled] [--iterations 400]
                     [--batch 256] [--hidden 128] [--lr 1e-3] [--negatives 4096]
                     [--eval-points 1000] [--eval-every 0] [--device cuda|cpu] [--seed 1]
                     [--match-dslide]
"""
import argparse
import json
import math
import random
import statistics
import sys
import time

import torch

from xc_text import parse, read_lines

MODES = ("dense", "dense-tf32", "sampled")

# dslide's random numbers (src/common/rng.h): SplitMix64's finaliser, stream seeds and
# xoshiro256**, so that the peer can start where dslide starts and take its batches.
M64 = (1 << 64) - 1
K_INIT, K_EPOCH = 0x696E6974, 0x65706F6368  # streams::kInit, the training loop's kEpochStream


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def stream_seed(seed, a, b=0, c=0, d=0):
    return mix64(mix64(mix64(mix64(seed ^ mix64(a)) ^ b) ^ mix64(c)) ^ d)


class DslideRng:
    def __init__(self, seed):
        self.s = []
        for _ in range(4):
            seed = mix64(seed)
            self.s.append(seed)

    def next(self):
        s0, s1, s2, s3 = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64  # noqa: E731
        result = (rotl((s1 * 5) & M64, 7) * 9) & M64
        t = (s1 << 17) & M64
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        self.s = [s0, s1, s2, rotl(s3, 45)]
        return result

    def below(self, n):
        return (self.next() * n) >> 64

    def normal(self):
        u1 = (self.next() >> 11) * 2.0 ** -53
        u2 = (self.next() >> 11) * 2.0 ** -53
        u1 = max(u1, 1e-300)
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


def dslide_weights(seed, layer, rows, cols):
    """InitialWeights (src/model/layer_layout.cpp): row i from stream (kInit, layer, i)."""
    std = math.sqrt(2.0 / (cols + rows))
    w = torch.empty(rows, cols)
    for i in range(rows):
        rng = DslideRng(stream_seed(seed, K_INIT, layer, i))
        w[i] = torch.tensor([rng.normal() * std for _ in range(cols)], dtype=torch.float64)
    return w


def dslide_epoch(seed, e, n):
    """The training loop's order of epoch e: Fisher-Yates from the back."""
    order = list(range(n))
    rng = DslideRng(stream_seed(seed, K_EPOCH, e))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def batch_tensors(feats, idx, device):
    ids, vals, offs = [], [], []
    for i in idx:
        offs.append(len(ids))
        for f, v in feats[i]:
            ids.append(f)
            vals.append(v)
    return (torch.tensor(ids, dtype=torch.long, device=device),
            torch.tensor(vals, dtype=torch.float32, device=device),
            torch.tensor(offs, dtype=torch.long, device=device))


def targets(labels, idx, columns):
    """(row, column, value) of the target spread over each point's labels, the columns
    indexing `columns` (a sorted list of global label ids; None: every label, in order)."""
    where = None if columns is None else {l: k for k, l in enumerate(columns)}
    rows = []
    for r, i in enumerate(idx):
        for l in labels[i]:
            rows.append((r, l if where is None else where[l], 1.0 / len(labels[i])))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("--mode", choices=MODES, default="dense")
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--negatives", type=int, default=4096)
    ap.add_argument("--eval-points", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--match-dslide", action="store_true",
                    help="dslide's initial weights and batch order (see above)")
    a = ap.parse_args()
    if a.iterations < 1 or a.batch < 1 or a.hidden < 1 or a.negatives < 0:
        ap.error("--iterations, --batch and --hidden must be positive, --negatives >= 0")
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    tf32 = a.mode != "dense"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    d, c, train_lines = read_lines(a.train)
    d_te, c_te, test_lines = read_lines(a.test)
    if (d_te, c_te) != (d, c):
        sys.exit(f"torch_peer: the test file's header ({d_te} features, {c_te} labels) "
                 f"does not match the training file's ({d}, {c})")
    ytr, xtr = zip(*((p[0], list(zip(p[1], p[2]))) for p in map(parse, train_lines)))
    yte, xte = zip(*((p[0], list(zip(p[1], p[2]))) for p in map(parse, test_lines)))
    emb = torch.nn.EmbeddingBag(d, a.hidden, mode="sum").to(dev)  # sparse x times W1
    b1 = torch.nn.Parameter(torch.zeros(a.hidden, device=dev))
    sampled = a.mode == "sampled"
    # The output layer: rows of weights with their biases; sampled mode reads and updates
    # only the rows of a step's candidates (sparse gradients).
    w2 = torch.nn.Embedding(c, a.hidden, sparse=sampled).to(dev)
    b2 = torch.nn.Embedding(c, 1, sparse=sampled).to(dev)
    # dslide's initialisation (Glorot normal weights, zero biases), so that the peers differ
    # in what they compute per step, not in where they start.
    with torch.no_grad():
        if a.match_dslide:  # the same values: layer 0 is hidden x d, stored here as d x hidden
            emb.weight.copy_(dslide_weights(a.seed, 0, a.hidden, d).t().to(dev))
            w2.weight.copy_(dslide_weights(a.seed, 1, c, a.hidden).to(dev))
        else:
            emb.weight.normal_(0.0, (2.0 / (d + a.hidden)) ** 0.5)
            w2.weight.normal_(0.0, (2.0 / (a.hidden + c)) ** 0.5)
        b2.weight.zero_()
    dense_params = list(emb.parameters()) + [b1]
    if sampled:
        opts = [torch.optim.Adam(dense_params, lr=a.lr),
                torch.optim.SparseAdam(list(w2.parameters()) + list(b2.parameters()), lr=a.lr)]
    else:
        kw = {"fused": True} if (a.mode == "dense-tf32" and cuda) else {}
        opts = [torch.optim.Adam(dense_params + list(w2.parameters()) + list(b2.parameters()),
                                 lr=a.lr, **kw)]

    def hidden(feats, idx):
        ids, vals, offs = batch_tensors(feats, idx, dev)
        return torch.relu(emb(ids, offs, per_sample_weights=vals) + b1)

    def p_at_1():
        hits, m = 0, min(a.eval_points, len(xte)) if a.eval_points > 0 else len(xte)
        with torch.no_grad():
            for s in range(0, m, 256):
                idx = list(range(s, min(m, s + 256)))
                logits = hidden(xte, idx) @ w2.weight.t() + b2.weight.t()
                top = logits.argmax(dim=1).tolist()
                hits += sum(1 for r, i in enumerate(idx) if top[r] in yte[i])
        return hits / max(m, 1)

    times, curve = [], []
    n = len(xtr)
    order = []  # the training points in a fresh random order each epoch, as dslide takes them
    rng = random.Random(a.seed)
    epoch = -1
    for it in range(1, a.iterations + 1):
        if a.match_dslide:  # dslide's epochs: a short last batch, then a new order
            if not order:
                epoch += 1
                order = dslide_epoch(a.seed, epoch, n)
        else:
            while len(order) < a.batch:
                perm = list(range(n))
                rng.shuffle(perm)
                order += perm
        idx, order = order[:a.batch], order[a.batch:]
        # Host-side preparation, outside the timing: the batch's tensors, its candidates
        # (sampled: the labels, then shared uniform negatives) and the targets over them.
        ids, vals, offs = batch_tensors(xtr, idx, dev)
        cand = None
        if sampled:
            cand = sorted({l for i in idx for l in ytr[i]} |
                          {rng.randrange(c) for _ in range(min(a.negatives, c))})
            columns = torch.tensor(cand, dtype=torch.long, device=dev)
        target = torch.zeros(len(idx), c if cand is None else len(cand))
        for r, k, v in targets(ytr, idx, cand):
            target[r, k] = v
        target = target.to(dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        h = torch.relu(emb(ids, offs, per_sample_weights=vals) + b1)
        if sampled:
            logits = h @ w2(columns).t() + b2(columns).t()
        else:
            logits = h @ w2.weight.t() + b2.weight.t()
        loss = -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in opts:
            o.step()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
        if a.eval_every > 0 and it % a.eval_every == 0 and it < a.iterations:
            curve.append([it, p_at_1(), sum(times) / 1000])
    p1 = p_at_1()
    curve.append([a.iterations, p1, sum(times) / 1000])
    res = {"engine": "pytorch-" + a.mode, "device": str(dev), "iter": a.iterations,
           "ms_per_iter": statistics.median(times), "ms_per_iter_mean": statistics.mean(times),
           "p_at_1": p1, "p_at_1_by_iter": curve, "batch": a.batch, "torch": torch.__version__}
    if sampled:
        res["negatives"] = a.negatives
    if cuda:
        res["gpu"] = torch.cuda.get_device_name(0)
        res["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
