#!/usr/bin/env python3
"""Real Horovod as a peer of `dslide bench --strategy data-parallel` in launch/scaling.

The same network as dslide (sparse input -> hidden ReLU -> linear output, softmax
cross-entropy spread over the sample's labels: the mean over its labels of -log softmax),
dslide's initialisation (Glorot normal weights, zero biases), Adam with dslide's defaults, the
same XC data file and the same global batch (each of P ranks takes batch/P points of every
global batch, drawn from one shuffled order shared by all ranks). The first layer is an
EmbeddingBag (sparse input times W1) with a dense gradient, so Horovod all-reduces every
gradient as it does for any PyTorch model. One thread per rank.

  mpirun -np P python horovod_peer.py TRAIN.txt TEST.txt [--iterations 5] [--batch 256]
      [--fp16] [--fusion-threshold-mb MB] [--eval-every N] [--eval-points 500]
      [--time-limit S]
  python horovod_peer.py TRAIN.txt TEST.txt --no-horovod ...   (one process, plain Adam)

--fusion-threshold-mb sets HOROVOD_FUSION_THRESHOLD before hvd.init() (Horovod's default is
128 MiB, less than the Amazon-670K output layer's 343 MB gradient, which is then all-reduced
alone); "auto" sizes it to hold every gradient (in fp32) so one all-reduce carries the step.

Prints one JSON object (compact, on one line, from rank 0): s/iter median and mean over the
iterations after the first, samples/s over the same iterations, peak RSS (max over ranks and
per rank), P@1 on the first --eval-points test points by iteration with the training
wall-clock time (evaluations excluded), and the bytes this rank's network namespace sent
during the training loop (eth0 tx counter, when there is one).
"""
import argparse
import json
import os
import random
import resource
import statistics
import sys
import time

from xc_text import parse, read_train_test


def tx_bytes():
    """Bytes sent so far by the non-loopback interfaces of this network namespace."""
    total = 0
    try:
        with open("/proc/net/dev") as f:
            for ln in f.readlines()[2:]:
                name, rest = ln.split(":", 1)
                if name.strip() != "lo":
                    total += int(rest.split()[8])
    except OSError:
        return None
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256, help="global batch (split over ranks)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--eval-every", type=int, default=0, help="0: only at the end")
    ap.add_argument("--eval-points", type=int, default=500, help="first N test points (0: all)")
    ap.add_argument("--time-limit", type=float, default=0,
                    help="stop after this many seconds of training (rank 0's clock, evaluations "
                         "excluded) or --iterations, whichever comes first (0: no limit)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fp16", action="store_true", help="hvd.Compression.fp16 on the wire")
    ap.add_argument("--fusion-threshold-mb", default=None,
                    help="HOROVOD_FUSION_THRESHOLD in MiB, or auto (every gradient in one buffer)")
    ap.add_argument("--no-horovod", action="store_true", help="one process, no Horovod")
    ap.add_argument("--label", default="", help="name put in the JSON (e.g. horovod-fp16)")
    a = ap.parse_args()

    # One thread per rank, also in the BLAS (Debian's torch calls the system libblas.so.3,
    # OpenBLAS when installed, which reads these when it is loaded).
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    import torch
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass

    t_load = time.perf_counter()
    d, c, train_lines, test_lines = read_train_test(a.train, a.test)
    load_s = time.perf_counter() - t_load

    if a.fusion_threshold_mb == "auto":
        grad_bytes = 4 * (d * a.hidden + a.hidden + c * a.hidden + c)
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(grad_bytes + (64 << 20))
    elif a.fusion_threshold_mb is not None:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(float(a.fusion_threshold_mb) * (1 << 20)))

    hvd = None
    rank, size = 0, 1
    if not a.no_horovod:
        import horovod
        import horovod.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()

    # dslide's initialisation; the same seed on every rank gives the same model everywhere,
    # checked below, so no broadcast of the parameters crosses the link.
    torch.manual_seed(a.seed)
    emb = torch.nn.EmbeddingBag(d, a.hidden, mode="sum")
    b1 = torch.nn.Parameter(torch.zeros(a.hidden))
    out = torch.nn.Linear(a.hidden, c)
    with torch.no_grad():
        emb.weight.normal_(0.0, (2.0 / (d + a.hidden)) ** 0.5)
        out.weight.normal_(0.0, (2.0 / (a.hidden + c)) ** 0.5)
        out.bias.zero_()
    named = [("w1", emb.weight), ("b1", b1), ("w2", out.weight), ("b2", out.bias)]
    params = [p for _, p in named]
    n_params = sum(p.numel() for p in params)
    opt = torch.optim.Adam(params, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    if hvd is not None:
        check = torch.tensor([float(sum(p.double().sum() for p in params))], dtype=torch.float64)
        sums = hvd.allgather(check, name="init_check")
        if float(sums.max() - sums.min()) != 0.0:
            sys.exit("horovod_peer: ranks initialised different models")
        compression = hvd.Compression.fp16 if a.fp16 else hvd.Compression.none
        opt = hvd.DistributedOptimizer(opt, named_parameters=named, compression=compression)

    parsed_train, parsed_test = {}, {}

    def batch(lines, cache, idx):
        ids, vals, offs, rows, labs, wts = [], [], [], [], [], []
        for r, i in enumerate(idx):
            p = cache.get(i)
            if p is None:
                p = cache[i] = parse(lines[i])
            labels, fi, fv = p
            offs.append(len(ids))
            ids += fi
            vals += fv
            for l in labels:
                rows.append(r)
                labs.append(l)
                wts.append(1.0 / len(labels))
        return (torch.tensor(ids, dtype=torch.long), torch.tensor(vals, dtype=torch.float32),
                torch.tensor(offs, dtype=torch.long), torch.tensor(rows, dtype=torch.long),
                torch.tensor(labs, dtype=torch.long), torch.tensor(wts, dtype=torch.float32))

    def logits(ids, vals, offs):
        return out(torch.relu(emb(ids, offs, per_sample_weights=vals) + b1))

    def evaluate():
        m = len(test_lines) if a.eval_points <= 0 else min(a.eval_points, len(test_lines))
        hits = 0
        with torch.no_grad():
            for s in range(0, m, 128):
                idx = list(range(s, min(m, s + 128)))
                ids, vals, offs, _, _, _ = batch(test_lines, parsed_test, idx)
                top = logits(ids, vals, offs).argmax(dim=1).tolist()
                for r, i in enumerate(idx):
                    hits += top[r] in parsed_test[i][0]
        return hits / max(m, 1), m

    # One shuffled order shared by all ranks (fresh each epoch, as dslide takes the points);
    # rank r takes its slice of each global batch.
    n = len(train_lines)
    rng = random.Random(a.seed)
    order = []
    lo = a.batch * rank // size
    hi = a.batch * (rank + 1) // size
    step_s, curve, losses = [], [], []
    train_s = 0.0
    tx0 = tx_bytes()
    for it in range(1, a.iterations + 1):
        while len(order) < a.batch:
            perm = list(range(n))
            rng.shuffle(perm)
            order += perm
        idx, order = order[lo:hi], order[a.batch:]
        t0 = time.perf_counter()
        ids, vals, offs, rows, labs, wts = batch(train_lines, parsed_train, idx)
        z = logits(ids, vals, offs)
        lsm = torch.log_softmax(z, dim=1)
        loss = -(lsm[rows, labs] * wts).sum() / max(len(idx), 1)
        opt.zero_grad()  # (Horovod 0.28.1 takes no set_to_none)
        loss.backward()
        opt.step()  # Horovod: waits for the averaged gradients, then Adam
        dt = time.perf_counter() - t0
        step_s.append(dt)
        train_s += dt
        losses.append(float(loss))
        last = it == a.iterations
        if a.time_limit > 0:
            # Rank 0's clock decides for every rank (one 1-element broadcast per step).
            flag = torch.tensor([1.0 if train_s >= a.time_limit else 0.0])
            if hvd is not None:
                flag = hvd.broadcast(flag, root_rank=0, name="time_limit")
            last = last or float(flag[0]) > 0
        if (a.eval_every > 0 and it % a.eval_every == 0) or last:
            if rank == 0:
                p1, _ = evaluate()
                curve.append([it, round(p1, 6), round(train_s, 3)])
        if last:
            break
    tx1 = tx_bytes()

    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    mean_loss = sum(losses) / len(losses)
    tx_iter = (tx1 - tx0) / len(step_s) if tx0 is not None and tx1 is not None else -1.0
    if hvd is not None:
        g = hvd.allgather(torch.tensor([[rss_mb, float(tx_iter), losses[-1]]], dtype=torch.float64),
                          name="report")
        rss_ranks = [float(v) for v in g[:, 0]]
        tx_ranks = [float(v) for v in g[:, 1]]
        last_losses = [float(v) for v in g[:, 2]]
        last_loss = sum(last_losses) / len(last_losses)
    else:
        rss_ranks, tx_ranks, last_loss = [rss_mb], [float(tx_iter)], losses[-1]
    if rank != 0:
        return 0
    rest = step_s[1:] if len(step_s) > 1 else step_s
    p1 = curve[-1][1] if curve else 0.0
    res = {
        "engine": "horovod" if hvd is not None else "pytorch",
        "strategy": a.label or ("horovod" if hvd is not None else "pytorch"),
        "data": a.train, "iterations": len(step_s), "batch": a.batch,
        "batch_per_rank": hi - lo, "hidden": a.hidden, "lr": a.lr, "ranks": size,
        "threads": torch.get_num_threads(), "parameters": n_params,
        "fp16": bool(a.fp16),
        "fusion_threshold_bytes": int(os.environ.get("HOROVOD_FUSION_THRESHOLD", 128 << 20)),
        "s_per_iter_median": statistics.median(rest), "s_per_iter_mean": statistics.mean(rest),
        "s_first_iter": step_s[0], "s_by_iter": [round(t, 4) for t in step_s],
        "ms_per_iter": 1000 * statistics.median(rest), "ms_per_iter_mean": 1000 * statistics.mean(rest),
        "samples_per_s": a.batch * len(rest) / sum(rest),
        "train_s": train_s, "load_s": load_s,
        "loss_first": losses[0], "loss_last": last_loss, "loss_mean_rank0": mean_loss,
        "peak_rss_mb": max(rss_ranks), "peak_rss_mb_by_rank": rss_ranks,
        "iface_tx_bytes_per_iter": max(tx_ranks), "iface_tx_bytes_per_iter_by_rank": tx_ranks,
        "p_at_1": p1, "p_at_1_by_iter": curve,
        "eval_points": min(a.eval_points, len(test_lines)) if a.eval_points > 0 else len(test_lines),
        "torch": torch.__version__,
    }
    if hvd is not None:
        res["horovod"] = horovod.__version__
    print(json.dumps(res, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
