#!/usr/bin/env python3
"""The report of launch/bench/bench-xc: OUT/xc.md (per set, each engine's P@1/3/5 on the test
set and its training and prediction seconds; then dslide against the best library per set)
and OUT/xc.png (P@1 against training seconds, a panel per set).

Usage: xc_report.py XC_JSONL OUT
"""
import collections
import json
import os
import sys

NAMES = {"dslide": "dslide (defaults, --valid-fraction 0.1)", "plt": "napkinXC PLT",
         "omikuji": "omikuji", "pecos": "PECOS XR-Linear", "counts": "table of counts"}


def main():
    path, out = sys.argv[1], sys.argv[2]
    runs = collections.OrderedDict()
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            runs.setdefault(r["set"], []).append(r)
    lines = ["| set | engine | P@1 | P@3 | P@5 | train s | predict s |", "|---|---|---|---|---|---|---|"]
    summary = ["| set | dslide P@1 / P@5 | best library P@1 (which) / best P@5 | dslide - best P@1 | "
               "dslide train s | the best library's train s |", "|---|---|---|---|---|---|"]
    for name, rs in runs.items():
        for r in rs:
            lines.append(f"| {name} | {NAMES.get(r['lib'], r['lib'])} | {r['p_at_1']:.4f} | "
                         f"{r['p_at_3']:.4f} | {r['p_at_5']:.4f} | {r['train_s']:.1f} | "
                         f"{r['predict_s']:.1f} |")
        mine = [r for r in rs if r["lib"] == "dslide"]
        libs = [r for r in rs if r["lib"] != "dslide"]
        if mine and libs:
            d = mine[0]
            b = max(libs, key=lambda r: r["p_at_1"])
            b5 = max(r["p_at_5"] for r in libs)
            summary.append(f"| {name} | {d['p_at_1']:.4f} / {d['p_at_5']:.4f} | {b['p_at_1']:.4f} "
                           f"({NAMES.get(b['lib'], b['lib'])}) / {b5:.4f} | "
                           f"{d['p_at_1'] - b['p_at_1']:+.4f} | {d['train_s']:.1f} | "
                           f"{b['train_s']:.1f} |")
    text = "\n".join(lines) + "\n\n" + "\n".join(summary) + "\n"
    with open(os.path.join(out, "xc.md"), "w") as f:
        f.write(text)
    print(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("xc_report: no matplotlib; no plot", file=sys.stderr)
        return
    n = len(runs)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False)
    marks = {"dslide": "o", "plt": "s", "omikuji": "^", "pecos": "D", "counts": "x"}
    for ax, (name, rs) in zip(axes.ravel(), runs.items()):
        for r in rs:
            ax.scatter(max(r["train_s"], 0.01), r["p_at_1"], marker=marks.get(r["lib"], "."),
                       s=60, label=NAMES.get(r["lib"], r["lib"]))
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("training seconds")
        ax.set_ylabel("test P@1")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(os.path.join(out, "xc.png"), dpi=90)


if __name__ == "__main__":
    main()
