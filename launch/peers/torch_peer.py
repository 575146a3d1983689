#!/usr/bin/env python3
"""PyTorch peers of `dslide bench`: the same network (sparse input -> hidden ReLU -> softmax
output) and the same data files, in one of three forms a PyTorch user would write:

  dense          every output neuron computed, fp32, torch.optim.Adam
  dense-tf32     the same with TF32 matrix products and fused Adam (where the device has them)
  sampled        sampled softmax as TensorFlow's sampled_softmax_loss computes it: per step
                 the batch's labels plus --negatives negatives shared by the batch, drawn
                 (with replacement, repeats dropped) from the training labels' frequency to
                 the power --distortion (0.75); every candidate's logit is corrected by the
                 log of its probability of being a candidate (log-Q); each candidate is one
                 column, so a sample's own labels are its targets, never its negatives
                 (accidental hits removed); the input and output layers are sparse
                 embeddings updated with SparseAdam, the hidden bias with Adam

Time is counted as a user feels it: each step with its batch's preparation (gathering the
points, drawing the negatives, the candidates and targets), and, for the time to accuracy, the
whole process (importing PyTorch, reading and parsing the files, initialising) but for the
evaluations (exact: every output scored, on the first --eval-points test points). Prints one
JSON object with the names dslide uses: ms_per_iter (median of the steps with their
preparation), ms_per_iter_mean, prep_ms_per_iter, p_at_1, load_s (reading and parsing the
files), and p_at_1_by_iter: [iteration, P@1, wall seconds since the process started, CPU
seconds of the process] at every --eval-every iterations and the last, evaluations left out
(as `dslide train` reports them in its metrics: train_wall_s, train_cpu_s).

With --match-dslide (dense modes) the peer starts from dslide's own initial weights (the
values of `dslide train --seed S --label-order identity`, drawn from dslide's random streams)
and takes dslide's batches (its shuffled order of each epoch, a short last batch), so that a
dense run and `dslide train --sparsity 1` differ only in float rounding.

Usage: torch_peer.py TRAIN.txt TEST.txt [--mode dense|dense-tf32|sampled] [--iterations 400]
                     [--batch 256] [--hidden 128] [--lr 1e-3] [--negatives 4096]
                     [--distortion 0.75] [--init torch|glorot] [--eval-points 1000]
                     [--eval-every 0] [--device cuda|cpu] [--threads N] [--seed 1]
                     [--match-dslide]
"""
import time

T_START = time.perf_counter()  # the process's start, as near as Python gets (before torch)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

from xc_text import parse, read_train_test

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

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53

    def symmetric_pair(self):
        """Rng::SymmetricPair: two values uniform on [-1, 1), 24 bits each, from one draw."""
        r = self.next()
        return (r >> 40) * 2.0 ** -23 - 1.0, ((r >> 16) & 0xFFFFFF) * 2.0 ** -23 - 1.0


def dslide_weights(seed, layer, rows, cols):
    """InitialWeights (src/model/layer_layout.cpp) of a dense layer: row i from stream
    (kInit, layer, i), uniform on [-h, h) two values per draw, h = sqrt(3) x Glorot's scale."""
    half = math.sqrt(3.0) * math.sqrt(2.0 / (cols + rows))
    w = torch.empty(rows, cols)
    for i in range(rows):
        rng = DslideRng(stream_seed(seed, K_INIT, layer, i))
        row = []
        while len(row) < cols:
            row.extend(rng.symmetric_pair())
        w[i] = torch.tensor([v * half for v in row[:cols]], dtype=torch.float64)
    return w


def dslide_epoch(seed, e, n):
    """The training loop's order of epoch e: Fisher-Yates from the back."""
    order = list(range(n))
    rng = DslideRng(stream_seed(seed, K_EPOCH, e))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


class Points:
    """A data file as CSR tensors on the device: features (ids, values) and labels."""

    def __init__(self, lines, device):
        fptr, fids, fvals, lptr, lids = [0], [], [], [0], []
        for ln in lines:
            labels, ids, vals = parse(ln)
            fids += ids
            fvals += vals
            lids += labels
            fptr.append(len(fids))
            lptr.append(len(lids))
        self.n = len(lines)
        self.fptr = torch.tensor(fptr, dtype=torch.long, device=device)
        self.fids = torch.tensor(fids, dtype=torch.long, device=device)
        self.fvals = torch.tensor(fvals, dtype=torch.float32, device=device)
        self.lptr = torch.tensor(lptr, dtype=torch.long, device=device)
        self.lids = torch.tensor(lids, dtype=torch.long, device=device)

    @staticmethod
    def _rows(ptr, idx):
        """Positions of the entries of rows idx (in order), and each row's offset and length."""
        start = ptr[idx]
        length = ptr[idx + 1] - start
        offs = torch.cumsum(length, 0) - length
        pos = torch.arange(int(length.sum()), device=ptr.device)
        pos += torch.repeat_interleave(start - offs, length)
        return pos, offs, length

    def features(self, idx):
        """(ids, values, offsets) of the points idx, for EmbeddingBag."""
        pos, offs, _ = self._rows(self.fptr, idx)
        return self.fids[pos], self.fvals[pos], offs

    def labels(self, idx):
        """(label ids, their point's row in idx, 1 / the point's label count)."""
        pos, _, length = self._rows(self.lptr, idx)
        row = torch.repeat_interleave(torch.arange(len(idx), device=idx.device), length)
        share = torch.repeat_interleave(1.0 / length.clamp(min=1).float(), length)
        return self.lids[pos], row, share

    def label_sets(self, idx):
        lptr, lids = self.lptr.tolist(), self.lids.tolist()
        return [set(lids[lptr[i]:lptr[i + 1]]) for i in idx]


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
    ap.add_argument("--distortion", type=float, default=0.75,
                    help="sampled: negatives drawn from label frequency to this power")
    ap.add_argument("--init", choices=("glorot", "torch"), default="torch",
                    help="torch (default): what PyTorch's modules start from, as a user "
                    "writes them (N(0, 1) for the input embedding, nn.Linear's uniform "
                    "+-1/sqrt(hidden) for the output layer); glorot: normal, std sqrt(2 / "
                    "(fan_in + fan_out)) for both (dslide's for dense layers)")
    ap.add_argument("--eval-points", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--match-dslide", action="store_true",
                    help="dense modes: dslide's initial weights and batch order (see above)")
    ap.add_argument("--losses", action="store_true", help="print every step's loss")
    a = ap.parse_args()
    if a.iterations < 1 or a.batch < 1 or a.hidden < 1 or a.negatives < 0:
        ap.error("--iterations, --batch and --hidden must be positive, --negatives >= 0")
    sampled = a.mode == "sampled"
    if a.match_dslide and sampled:
        ap.error("--match-dslide is for the dense modes")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    tf32 = a.mode != "dense"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32

    t_load = time.perf_counter()
    d, c, train_lines, test_lines = read_train_test(a.train, a.test)
    tr = Points(train_lines, dev)
    m_eval = min(a.eval_points, len(test_lines)) if a.eval_points > 0 else len(test_lines)
    te = Points(test_lines[:m_eval], dev)
    del train_lines, test_lines
    load_s = time.perf_counter() - t_load

    emb = torch.nn.EmbeddingBag(d, a.hidden, mode="sum", sparse=sampled).to(dev)  # x W1
    b1 = torch.nn.Parameter(torch.zeros(a.hidden, device=dev))
    # The output layer: rows of weights with their biases; sampled mode reads and updates
    # only the rows of a step's candidates (sparse gradients).
    w2 = torch.nn.Embedding(c, a.hidden, sparse=sampled).to(dev)
    b2 = torch.nn.Embedding(c, 1, sparse=sampled).to(dev)
    with torch.no_grad():
        if a.match_dslide:  # the same values: layer 0 is hidden x d, stored here as d x hidden
            emb.weight.copy_(dslide_weights(a.seed, 0, a.hidden, d).t().to(dev))
            w2.weight.copy_(dslide_weights(a.seed, 1, c, a.hidden).to(dev))
        elif a.init == "glorot":
            emb.weight.normal_(0.0, (2.0 / (d + a.hidden)) ** 0.5)
            w2.weight.normal_(0.0, (2.0 / (a.hidden + c)) ** 0.5)
        else:  # nn.EmbeddingBag keeps its N(0, 1); the output layer as nn.Linear(hidden, c)
            bound = 1.0 / a.hidden ** 0.5
            w2.weight.uniform_(-bound, bound)
        b2.weight.zero_()
    if sampled:
        opts = [torch.optim.Adam([b1], lr=a.lr),
                torch.optim.SparseAdam(list(emb.parameters()) + list(w2.parameters()) +
                                       list(b2.parameters()), lr=a.lr)]
    else:
        kw = {"fused": True} if (a.mode == "dense-tf32" and cuda) else {}
        opts = [torch.optim.Adam(list(emb.parameters()) + [b1] + list(w2.parameters()) +
                                 list(b2.parameters()), lr=a.lr, **kw)]

    if sampled:
        # Each label's probability of being a candidate of a step: a label of one of the
        # batch's points (B points drawn uniformly) or among the S draws from the
        # distorted frequency: q = 1 - (1 - f)^B (1 - p)^S; log q is subtracted from its logit.
        count = torch.bincount(tr.lids, minlength=c).double()  # points with each label
        p = count.pow(a.distortion)
        p /= p.sum()
        cdf = torch.cumsum(p, 0)
        log_miss = (a.batch * torch.log1p(-(count / tr.n).clamp(max=1 - 1e-12)) +
                    a.negatives * torch.log1p(-p.clamp(max=1 - 1e-12)))
        log_q = torch.log(-torch.expm1(log_miss)).clamp(min=-80.0).float().to(dev)
        cdf = cdf.to(dev)
        gen = torch.Generator(device=dev)
        gen.manual_seed(a.seed)

    def hidden(pts, idx):
        ids, vals, offs = pts.features(idx)
        return torch.relu(emb(ids, offs, per_sample_weights=vals) + b1)

    test_sets = []  # the test points' label sets, read at the first evaluation (one read)

    def p_at_1():
        if not test_sets:
            test_sets.extend(te.label_sets(range(te.n)))
        hits = 0
        with torch.no_grad():
            for s in range(0, te.n, 256):
                idx = torch.arange(s, min(te.n, s + 256), device=dev)
                top = (hidden(te, idx) @ w2.weight.t() + b2.weight.t()).argmax(dim=1).tolist()
                hits += sum(1 for r, y in enumerate(test_sets[s:s + len(top)]) if top[r] in y)
        return hits / max(te.n, 1)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times, prep_times, curve, losses = [], [], [], []
    train_s = cpu_s = 0.0
    eval_wall = eval_cpu = 0.0  # the evaluations' own time, left out of the curve

    def evaluate(it):
        nonlocal eval_wall, eval_cpu
        w0, c0 = time.perf_counter(), time.process_time()
        at = [it, 0.0, w0 - T_START - eval_wall, c0 - eval_cpu]
        at[1] = p_at_1()
        eval_wall += time.perf_counter() - w0
        eval_cpu += time.process_time() - c0
        curve.append(at)

    n = tr.n
    order = torch.empty(0, dtype=torch.long, device=dev)
    epoch = -1
    for it in range(1, a.iterations + 1):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        # The batch: its points, their features and labels, and for sampled mode the
        # candidates (labels, then the shared negatives) with their log-Q corrections.
        if a.match_dslide:  # dslide's epochs: a short last batch, then a new order
            if len(order) == 0:
                epoch += 1
                order = torch.tensor(dslide_epoch(a.seed, epoch, n), device=dev)
        else:
            while len(order) < a.batch:
                order = torch.cat([order, torch.randperm(n, device=dev)])
        idx, order = order[:a.batch], order[a.batch:]
        ids, vals, offs = tr.features(idx)
        lab, row, share = tr.labels(idx)
        if sampled:
            neg = torch.searchsorted(cdf, torch.rand(a.negatives, device=dev, generator=gen,
                                                     dtype=torch.float64) * cdf[-1])
            cand = torch.unique(torch.cat([lab, neg.clamp(max=c - 1)]))
            col = torch.searchsorted(cand, lab)
            cand_log_q = log_q[cand]
        else:
            col = lab
        sync()
        t1 = time.perf_counter()
        h = torch.relu(emb(ids, offs, per_sample_weights=vals) + b1)
        if sampled:
            logits = h @ w2(cand).t() + b2(cand).t() - cand_log_q
        else:
            logits = h @ w2.weight.t() + b2.weight.t()
        logp = torch.log_softmax(logits, dim=1)
        loss = -(share * logp[row, col]).sum() / len(idx)
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in opts:
            o.step()
        if a.losses:
            losses.append(float(loss))
        sync()
        t2 = time.perf_counter()
        times.append((t2 - t0) * 1000)
        prep_times.append((t1 - t0) * 1000)
        train_s += t2 - t0
        cpu_s += time.process_time() - c0
        if a.eval_every > 0 and it % a.eval_every == 0 and it < a.iterations:
            evaluate(it)
    evaluate(a.iterations)
    p1 = curve[-1][1]
    res = {"engine": "pytorch-" + a.mode, "device": str(dev), "iter": a.iterations,
           "ms_per_iter": statistics.median(times), "ms_per_iter_mean": statistics.mean(times),
           "prep_ms_per_iter": statistics.mean(prep_times), "steps_s": train_s, "steps_cpu_s": cpu_s,
           "load_s": load_s, "p_at_1": p1, "p_at_1_by_iter": curve, "eval_points": te.n,
           "batch": a.batch, "threads": torch.get_num_threads(), "init": a.init,
           "torch": torch.__version__}
    if sampled:
        res["negatives"] = a.negatives
        res["distortion"] = a.distortion
    if a.losses:
        res["losses"] = losses
    if cuda:
        res["gpu"] = torch.cuda.get_device_name(0)
        res["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
