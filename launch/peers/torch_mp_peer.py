#!/usr/bin/env python3
"""The model-parallel PyTorch peer of the scaling study: the network of `dslide train` (sparse
input -> hidden ReLU -> softmax output) sharded over P ranks as an expert would shard a huge
output layer (Megatron-LM's vocabulary-parallel cross-entropy), with torch.distributed over
Gloo on CPUs, one thread per rank:

  the input layer     rank r holds the rows of its block of input features; the hidden
                      pre-activations are the sum of every rank's part (one all-reduce of
                      batch x hidden floats), the hidden bias is replicated;
  the output layer    rank r holds its block of C / P output rows and computes their logits
                      for the whole batch; the softmax's max and sum are all-reduced (2 x
                      batch floats), and the labels' logits (batch floats);
  the backward pass   each rank's gradient with respect to the hidden activations is
                      all-reduced (batch x hidden floats); every rank then updates its own
                      rows and the replicated bias alike.

Modes: full (every output row; torch.optim.Adam) and sampled (each rank draws its own
--negatives / P negatives from its block's training-label frequency to the power
--distortion, its candidates the batch's labels in its block and those negatives, each logit
corrected by the log of its chance of being a candidate (log-Q); the rows a step touches
updated with SparseAdam, the hidden bias with Adam). --match-dslide starts from dslide's
initial weights and takes its batches (launch/peers/torch_peer.py), so that full mode on P
ranks and torch_peer.py's dense mode differ only in float rounding.

Started by mpirun (Open MPI's OMPI_COMM_WORLD_RANK and SIZE; `mpirun -x PYTHONPATH -x
MASTER_PORT ...`) or torchrun (RANK, WORLD_SIZE); MASTER_ADDR and MASTER_PORT default to
127.0.0.1:29500. --init-method file:///PATH meets through a file every rank can reach (a
fresh path each run) instead of a TCP port, which another job on the host may hold. Rank 0
prints one JSON object with
the names dslide uses (ms_per_iter, p_at_1, p_at_1_by_iter, ...), bytes_sent_per_iter (what
this rank's collectives send, as a ring sends them: 2 (P - 1) / P of each all-reduce's
bytes), and with --losses every step's loss.

Usage: torch_mp_peer.py TRAIN.txt TEST.txt [--mode full|sampled] [--iterations 400]
                        [--batch 256] [--hidden 128] [--lr 1e-3] [--negatives 4096]
                        [--distortion 0.75] [--eval-points 1000] [--eval-every 0] [--seed 1]
                        [--match-dslide] [--losses] [--init-method env://]
"""
import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from torch_peer import Points, dslide_epoch, dslide_weights  # noqa: E402
from xc_text import read_train_test  # noqa: E402


def block(n, r, p):
    """Rank r's block [begin, end) of n rows over p ranks (dslide's ModelSpec::BlockBegin)."""
    return n * r // p, n * (r + 1) // p


class Collectives:
    """All-reduces over Gloo, counting the bytes this rank sends (a ring: 2 (P - 1) / P of
    each buffer)."""

    def __init__(self, size):
        self.size = size
        self.sent = 0.0

    def reduce(self, t, op=dist.ReduceOp.SUM):
        if self.size > 1:
            dist.all_reduce(t, op=op)
            self.sent += 2.0 * (self.size - 1) / self.size * t.numel() * t.element_size()
        return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("--mode", choices=("full", "sampled"), default="full")
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--negatives", type=int, default=4096, help="sampled: over all ranks")
    ap.add_argument("--distortion", type=float, default=0.75)
    ap.add_argument("--eval-points", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--match-dslide", action="store_true")
    ap.add_argument("--losses", action="store_true", help="print every step's loss")
    ap.add_argument("--init-method", default="env://",
                    help="torch.distributed's rendezvous: env:// (MASTER_ADDR, MASTER_PORT) "
                    "or file:///PATH (a fresh file every rank can reach)")
    a = ap.parse_args()
    if a.iterations < 1 or a.batch < 1 or a.hidden < 1 or a.negatives < 0:
        ap.error("--iterations, --batch and --hidden must be positive, --negatives >= 0")
    env = os.environ
    rank = int(env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", "0")))
    size = int(env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", "1")))
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", init_method=a.init_method, rank=rank, world_size=size)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed + rank)
    comm = Collectives(size)
    sampled = a.mode == "sampled"

    t_load = time.perf_counter()
    d, c, train_lines, test_lines = read_train_test(a.train, a.test)
    tr = Points(train_lines, "cpu")
    m_eval = min(a.eval_points, len(test_lines)) if a.eval_points > 0 else len(test_lines)
    te = Points(test_lines[:m_eval], "cpu")
    del train_lines, test_lines
    load_s = time.perf_counter() - t_load

    f0, f1 = block(d, rank, size)  # this rank's input features
    c0, c1 = block(c, rank, size)  # and output rows
    if a.match_dslide:  # dslide's values (layer 0: hidden x d, here d x hidden)
        w1 = dslide_weights(a.seed, 0, a.hidden, d).t()[f0:f1].contiguous()
        w2 = dslide_weights(a.seed, 1, c, a.hidden)[c0:c1].contiguous()
    else:  # Glorot, as dslide's dense layers
        g = torch.Generator().manual_seed(a.seed)
        w1 = torch.randn(d, a.hidden, generator=g)[f0:f1] * (2.0 / (d + a.hidden)) ** 0.5
        w2 = torch.randn(c, a.hidden, generator=g)[c0:c1] * (2.0 / (a.hidden + c)) ** 0.5
    w1 = torch.nn.Parameter(w1)
    b1 = torch.nn.Parameter(torch.zeros(a.hidden))
    w2 = torch.nn.Parameter(w2)
    b2 = torch.nn.Parameter(torch.zeros(c1 - c0))
    if sampled:
        opts = [torch.optim.Adam([b1], lr=a.lr), torch.optim.SparseAdam([w1, w2, b2], lr=a.lr)]
        # This rank's share of the negatives, from its block's label frequency; a label's
        # chance of being a candidate: a batch-mate's label or among the draws.
        count = torch.bincount(tr.lids, minlength=c).double()[c0:c1]
        p = count.pow(a.distortion)
        p /= p.sum().clamp(min=1e-300)
        cdf = torch.cumsum(p, 0)
        s_local = (a.negatives * (rank + 1)) // size - (a.negatives * rank) // size
        log_miss = (a.batch * torch.log1p(-(count / tr.n).clamp(max=1 - 1e-12)) +
                    s_local * torch.log1p(-p.clamp(max=1 - 1e-12)))
        log_q = torch.log(-torch.expm1(log_miss)).clamp(min=-80.0).float()
        gen = torch.Generator().manual_seed(a.seed * 1000003 + rank)
    else:
        opts = [torch.optim.Adam([w1, b1, w2, b2], lr=a.lr)]

    def pre_activation(pts, idx):
        """This rank's part of the points' x W1 (its features), summed over the ranks."""
        ids, vals, offs = pts.features(idx)
        row = torch.repeat_interleave(torch.arange(len(idx)), torch.diff(
            torch.cat([offs, torch.tensor([len(ids)])])))
        mine = (ids >= f0) & (ids < f1)
        z = torch.zeros(len(idx), a.hidden)
        z.index_add_(0, row[mine], vals[mine, None] * w1.detach()[ids[mine] - f0])
        return comm.reduce(z), (row[mine], ids[mine] - f0, vals[mine])

    test_sets = []

    def p_at_1():
        if not test_sets:
            test_sets.extend(te.label_sets(range(te.n)))
        hits = 0
        with torch.no_grad():
            for s in range(0, te.n, 256):
                idx = torch.arange(s, min(te.n, s + 256))
                z, _ = pre_activation(te, idx)
                logits = torch.relu(z + b1) @ w2.t() + b2
                best, arg = logits.max(dim=1)
                # The best over the ranks: the largest logit, ties to the smaller label.
                top = comm.reduce(best.clone(), dist.ReduceOp.MAX)
                label = torch.where(best == top, arg + c0, torch.full_like(arg, c)).double()
                comm.reduce(label, dist.ReduceOp.MIN)
                hits += sum(1 for r, y in enumerate(test_sets[s:s + len(idx)])
                            if int(label[r]) in y)
        return hits / max(te.n, 1)

    times, losses, curve = [], [], []
    train_s = cpu_s = eval_wall = eval_cpu = 0.0

    def evaluate(it):
        nonlocal eval_wall, eval_cpu
        w0, t0 = time.perf_counter(), time.process_time()
        at = [it, 0.0, w0 - T_START - eval_wall, t0 - eval_cpu]
        sent = comm.sent
        at[1] = p_at_1()
        comm.sent = sent  # the evaluations' traffic is not the steps'
        eval_wall += time.perf_counter() - w0
        eval_cpu += time.process_time() - t0
        curve.append(at)

    n = tr.n
    order = torch.empty(0, dtype=torch.long)
    epoch = -1
    for it in range(1, a.iterations + 1):
        t0, p0 = time.perf_counter(), time.process_time()
        if a.match_dslide:
            if len(order) == 0:
                epoch += 1
                order = torch.tensor(dslide_epoch(a.seed, epoch, n))
        else:
            while len(order) < a.batch:
                g = torch.Generator().manual_seed(a.seed * 7919 + len(curve) + it)
                order = torch.cat([order, torch.randperm(n, generator=g)])
        idx, order = order[:a.batch], order[a.batch:]
        B = len(idx)
        lab, row, share = tr.labels(idx)
        mine = (lab >= c0) & (lab < c1)
        z, (erow, eid, evals) = pre_activation(tr, idx)
        h = torch.relu(z + b1.detach())
        if sampled:
            neg = torch.searchsorted(cdf, torch.rand(s_local, generator=gen, dtype=torch.float64) *
                                     cdf[-1]).clamp(max=c1 - c0 - 1)
            cand = torch.unique(torch.cat([lab[mine] - c0, neg]))
            logits = h @ w2.detach()[cand].t() + b2.detach()[cand] - log_q[cand]
            col = torch.searchsorted(cand, lab[mine] - c0)
        else:
            cand = None
            logits = h @ w2.detach().t() + b2.detach()
            col = lab[mine] - c0
        # The softmax over every rank's logits: max, then the sum, then the labels' term.
        m = logits.max(dim=1).values if logits.shape[1] else torch.full((B,), -float("inf"))
        comm.reduce(m, dist.ReduceOp.MAX)
        e = torch.exp(logits - m[:, None])
        s = comm.reduce(e.sum(dim=1))
        lab_term = torch.zeros(B)
        lab_term.index_add_(0, row[mine], share[mine] * logits[row[mine], col])
        comm.reduce(lab_term)
        # A point without labels has no loss and no gradient (as in dslide and torch_peer.py).
        has = (torch.bincount(row, minlength=B) > 0).float()
        loss = float(((m + torch.log(s) - lab_term) * has).sum() / B)
        # Backward by hand: the delta of this rank's logits, its rows' gradients, and the
        # hidden activations' gradient summed over the ranks.
        delta = e / s[:, None] * has[:, None]
        delta.index_put_((row[mine], col), -share[mine], accumulate=True)
        delta /= B
        dh = comm.reduce(delta @ (w2.detach()[cand] if sampled else w2.detach()))
        dz = dh * (z + b1.detach() > 0)
        gw2 = delta.t() @ h
        gb2 = delta.sum(dim=0)
        gw1_vals = evals[:, None] * dz[erow]
        if sampled:
            rows1, inv = torch.unique(eid, return_inverse=True)
            g1 = torch.zeros(len(rows1), a.hidden).index_add_(0, inv, gw1_vals)
            # A block of input features none of the batch's points has (word ids sorted by
            # frequency leave the last ranks' blocks empty in many batches): no gradient
            # (SparseAdam fails on an empty sparse one, and there is nothing to step).
            w1.grad = torch.sparse_coo_tensor(rows1[None], g1, w1.shape) if len(rows1) else None
            w2.grad = torch.sparse_coo_tensor(cand[None], gw2, w2.shape)
            b2.grad = torch.sparse_coo_tensor(cand[None], gb2, b2.shape)
        else:
            w1.grad = torch.zeros_like(w1).index_add_(0, eid, gw1_vals)
            w2.grad = gw2
            b2.grad = gb2
        b1.grad = dz.sum(dim=0)
        for o in opts:
            o.step()
        times.append((time.perf_counter() - t0) * 1000)
        train_s += time.perf_counter() - t0
        cpu_s += time.process_time() - p0
        losses.append(loss)
        if a.eval_every > 0 and it % a.eval_every == 0 and it < a.iterations:
            evaluate(it)
    steps_sent = comm.sent
    evaluate(a.iterations)
    if rank == 0:
        res = {"engine": "pytorch-mp-" + a.mode, "device": "cpu", "ranks": size,
               "iter": a.iterations, "ms_per_iter": statistics.median(times),
               "ms_per_iter_mean": statistics.mean(times), "steps_s": train_s,
               "steps_cpu_s": cpu_s, "load_s": load_s, "p_at_1": curve[-1][1],
               "p_at_1_by_iter": curve, "eval_points": te.n, "batch": a.batch,
               "bytes_sent_per_iter": steps_sent / a.iterations, "threads": 1,
               "torch": torch.__version__}
        if sampled:
            res["negatives"] = a.negatives
        if a.losses:
            res["losses"] = losses
        print(json.dumps(res))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
