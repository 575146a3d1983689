#!/usr/bin/env python3
"""The time-to-accuracy report of launch/bench/bench-tta: reads OUT/runs (dslide's --metrics files,
the peer's JSON), writes OUT/tta.md (per set: each run's P@1 at every evaluation with its
training seconds, the time each run needs to reach the best peer's final P@1, and the checks
of dslide against the peers) and OUT/tta-SET.png (P@1 against training wall seconds).

Usage: tta_report.py OUT
"""
import glob
import json
import os
import platform
import re
import sys


def dslide_run(path):
    """[(iteration, P@1, wall s, CPU s)], the baseline, and the run's settings line."""
    curve, base = [], None
    for line in open(path):
        r = json.loads(line)
        if r.get("event") == "start":  # a file that holds several runs: the last one
            curve, base = [], None
        if "p_at_1" in r and "train_wall_s" in r:
            curve.append((r["iter"], r["p_at_1"], r["train_wall_s"], r["train_cpu_s"]))
            base = r.get("most_popular_label_p_at_1", base)
    return curve, base


def peer_run(path):
    """The peer's [(iteration, P@1, wall s, CPU s)] and its JSON ([] and None: no result)."""
    lines = [ln for ln in open(path) if ln.startswith("{")]
    if not lines:
        print(f"tta_report: {path} holds no result; left out", file=sys.stderr)
        return [], None
    r = json.loads(lines[-1])
    return [tuple(c) for c in r["p_at_1_by_iter"]], r


def reach(curve, target):
    """The first evaluation at or above target: (iteration, wall s, CPU s), or None."""
    for it, p, w, c in curve:
        if p >= target - 1e-12:
            return it, w, c
    return None


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def has_avx512():
    try:
        return " avx512f" in open("/proc/cpuinfo").read()
    except OSError:
        return False


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    runs = {}  # set -> threads -> engine -> curve
    bases = {}
    for path in sorted(glob.glob(os.path.join(out, "runs", "*.t*.jsonl")) +
                       glob.glob(os.path.join(out, "runs", "*.t*.json"))):
        m = re.match(r"(.+)\.(dslide-\w+|peer-(?:\d+|tf32))\.t(\d+)\.jsonl?$", os.path.basename(path))
        if not m:
            continue
        name, engine, t = m.group(1), m.group(2), int(m.group(3))
        if engine.startswith("dslide"):
            curve, base = dslide_run(path)
            if base is not None:
                bases[name] = base
        else:
            curve, _ = peer_run(path)
        if curve:
            runs.setdefault(name, {}).setdefault(t, {})[engine] = curve

    def label(engine):
        if engine.startswith("dslide"):
            return "dslide, " + {"native": "native build", "avx2": "AVX2 build",
                                 "gpu": "GPU backend"}.get(engine.split("-")[1], engine)
        if engine == "peer-tf32":
            return "PyTorch dense softmax, TF32 and fused Adam"
        return f"PyTorch sampled softmax, {engine.split('-')[1]} negatives"

    md = [f"Machine: {cpu_name()}, {os.cpu_count()} cores, "
          f"{'AVX-512' if has_avx512() else 'no AVX-512'}. Time: wall (CPU) seconds since the "
          "process started, evaluations left out (reading the data, initialisation, table "
          "builds and batch preparation included).", ""]
    verdicts = []
    for name in sorted(runs):
        md += [f"### {name}", ""]
        base = bases.get(name)
        if base is not None:
            md += [f"Most-popular-label P@1: {base:.4f}.", ""]
        for t in sorted(runs[name]):
            eng = runs[name][t]
            its = sorted({c[0] for curve in eng.values() for c in curve})
            md += [f"{t} thread(s): P@1, and in brackets wall (CPU) seconds",
                   "", "| engine | " + " | ".join(str(i) for i in its) + " |",
                   "|---|" + "---|" * len(its)]
            for e in sorted(eng):
                cells = {c[0]: f"{c[1]:.4f} ({c[2]:.1f} / {c[3]:.1f})" for c in eng[e]}
                md.append(f"| {label(e)} | " + " | ".join(cells.get(i, "") for i in its) + " |")
            md.append("")
            peers = {e: c for e, c in eng.items() if e.startswith("peer")}
            for d in sorted(e for e in eng if e.startswith("dslide")):
                dc = eng[d]
                for p, pc in sorted(peers.items()):
                    target, p_wall = pc[-1][1], pc[-1][2]
                    got = reach(dc, target)
                    ratio = got[1] / p_wall if got else float("inf")
                    below_peer = [(c[0], c[1], pc_p) for c in dc for (pi, pc_p, _, _) in pc
                                  if c[0] == pi and c[0] >= 500 and c[1] < pc_p]
                    below_base = [c for c in dc[1:] if base is not None and c[1] < base]
                    ok = ratio <= 0.5 and not below_peer and not below_base
                    verdicts.append(ok)
                    when = (f"at iteration {got[0]}, {got[1]:.1f} s wall ({got[2]:.1f} s CPU)"
                            if got else "not within the run")
                    md.append(
                        f"- {label(d)} against the {label(p)[len('PyTorch '):]}: the peer's final "
                        f"P@1 {target:.4f} ({p_wall:.1f} s) reached {when}: "
                        f"{ratio:.2f} of the peer's time; below the peer at "
                        f"{len(below_peer)} evaluation(s) from 500 on, below the baseline at "
                        f"{len(below_base)} after the first: {'met' if ok else 'NOT met'}")
            md.append("")
        plot(out, name, runs[name], base, label)
        md += [f"![P@1 against training seconds, {name}](tta-{name}.png)", ""]
    with open(os.path.join(out, "tta.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\n{sum(verdicts)} of {len(verdicts)} comparisons met "
          "(half the peer's time to its final P@1, never below it from 500 iterations, "
          "never below the baseline after the first evaluation)")


def plot(out, name, by_threads, base, label):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("tta_report: no matplotlib (apt-get install python3-matplotlib): no plot",
              file=sys.stderr)
        return
    fig, axes = plt.subplots(1, len(by_threads), figsize=(6 * len(by_threads), 4.2),
                             squeeze=False)
    for ax, t in zip(axes[0], sorted(by_threads)):
        for e, curve in sorted(by_threads[t].items()):
            style = "-o" if e.startswith("dslide") else "--s"
            ax.plot([c[2] for c in curve], [c[1] for c in curve], style, label=label(e),
                    markersize=4)
        if base is not None:
            ax.axhline(base, color="grey", linestyle=":", label="most popular label")
        ax.set_xlim(left=0)
        ax.set_title(f"{name}, {t} thread(s)")
        ax.set_xlabel("training wall seconds (process, evaluations left out)")
        ax.set_ylabel("P@1")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"tta-{name}.png"), dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
