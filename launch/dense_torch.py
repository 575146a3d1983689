#!/usr/bin/env python3
"""Dense PyTorch reference for `dslide bench`: the same network (sparse input -> hidden ReLU
-> full softmax output), initialisation, Adam, batch, iterations and data files, every
output neuron computed. Prints one JSON object with the names dslide uses (ms_per_iter is the median).

Usage: dense_torch.py TRAIN.txt TEST.txt [--iterations 400] [--batch 256] [--hidden 128]
                      [--lr 1e-3] [--eval-points 1000] [--device cuda|cpu] [--seed 1]
"""
import argparse
import json
import random
import statistics
import sys
import time

import torch


def read_xc(path):
    """XC text format: header 'points features labels', then 'l1,l2 f:v f:v ...'."""
    with open(path) as f:
        n, d, c = (int(v) for v in f.readline().split())
        labels, feats = [], []
        for line in f:
            parts = line.split()
            if not parts:
                continue
            first = parts[0]
            if ":" in first:
                labels.append([])
                rest = parts
            else:
                labels.append([int(v) for v in first.split(",") if v])
                rest = parts[1:]
            feats.append([(int(a), float(b)) for a, b in (p.split(":") for p in rest)])
    return d, c, labels, feats


def batch_tensors(feats, labels, idx, device):
    ids, vals, offs = [], [], []
    for i in idx:
        offs.append(len(ids))
        for f, v in feats[i]:
            ids.append(f)
            vals.append(v)
    return (torch.tensor(ids, dtype=torch.long, device=device),
            torch.tensor(vals, dtype=torch.float32, device=device),
            torch.tensor(offs, dtype=torch.long, device=device))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-points", type=int, default=1000)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    d, c, ytr, xtr = read_xc(a.train)
    _, _, yte, xte = read_xc(a.test)
    emb = torch.nn.EmbeddingBag(d, a.hidden, mode="sum").to(dev)  # sparse x times W1
    b1 = torch.nn.Parameter(torch.zeros(a.hidden, device=dev))
    out = torch.nn.Linear(a.hidden, c).to(dev)
    # dslide's initialisation (Glorot normal weights, zero biases), so that the two differ
    # in what they compute per step, not in where they start.
    with torch.no_grad():
        emb.weight.normal_(0.0, (2.0 / (d + a.hidden)) ** 0.5)
        out.weight.normal_(0.0, (2.0 / (a.hidden + c)) ** 0.5)
        out.bias.zero_()
    params = list(emb.parameters()) + [b1] + list(out.parameters())
    opt = torch.optim.Adam(params, lr=a.lr)

    def forward(idx):
        ids, vals, offs = batch_tensors(xtr if forward.train else xte, None, idx, dev)
        h = torch.relu(emb(ids, offs, per_sample_weights=vals) + b1)
        return out(h)

    times = []
    n = len(xtr)
    order = []  # the training points in a fresh random order each epoch, as dslide takes them
    rng = random.Random(a.seed)
    for it in range(a.iterations):
        while len(order) < a.batch:
            perm = list(range(n))
            rng.shuffle(perm)
            order += perm
        idx, order = order[:a.batch], order[a.batch:]
        target = torch.zeros(a.batch, c, device=dev)
        for r, i in enumerate(idx):
            if ytr[i]:
                target[r, ytr[i]] = 1.0 / len(ytr[i])  # the target spread over the labels
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        forward.train = True
        logits = forward(idx)
        loss = -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
    forward.train = False
    hits, m = 0, min(a.eval_points, len(xte)) if a.eval_points > 0 else len(xte)
    with torch.no_grad():
        for s in range(0, m, 256):
            idx = list(range(s, min(m, s + 256)))
            top = forward(idx).argmax(dim=1).tolist()
            hits += sum(1 for r, i in enumerate(idx) if top[r] in yte[i])
    res = {"engine": "pytorch-dense", "device": str(dev), "iter": a.iterations,
           "ms_per_iter": statistics.median(times), "ms_per_iter_mean": statistics.mean(times),
           "p_at_1": hits / max(m, 1), "batch": a.batch, "torch": torch.__version__}
    if dev.type == "cuda":
        res["gpu"] = torch.cuda.get_device_name(0)
        res["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
