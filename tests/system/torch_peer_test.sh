#!/usr/bin/env bash
# launch/peers/torch_peer.py (the PyTorch peers of launch/bench/bench-gpu.sh) on the CPU: every mode
# trains on a small learnable generated set and must report its timings, its P@1 curve and a
# P@1 well above the most popular label's; dense mode must land near dslide's dense mode on
# the same data, batch and iterations (the two compute the same model; dslide with its first
# layer at --lr, as the peer's, where --first-lr-scale auto would raise it for these inputs).
# Usage: torch_peer_test.sh DSLIDE WORKDIR. Exits 77 (skipped) when no python here can import
# PyTorch (PYTHON, then python3, then /usr/bin/python3, which Debian's python3-torch serves).
set -uo pipefail
dslide=$1 work=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
py=
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null && "$cand" -c 'import torch' 2>/dev/null; then py=$cand; break; fi
done
if [[ -z $py ]]; then
  echo "skipped: PyTorch is not importable (apt-get install python3-torch)"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
"$dslide" gen --features 500 --labels 300 --points 4000 --nnz 15 --out "$work/d" >/dev/null ||
  fail "dslide gen"
"$dslide" bench --train "$work/d.train.txt" --test "$work/d.test.txt" --iterations 200 --batch 64 \
  --eval-every 100 --eval-points 1000 --strategy dense-model-parallel --threads 1 \
  --first-lr-scale 1 >"$work/dslide.txt" 2>&1 || fail "dslide bench exited $?"
# The dense peer from Glorot's weights, as dslide's dense layers start (the others from
# PyTorch's own).
for mode in dense dense-tf32 sampled; do
  init=torch
  [[ $mode == dense ]] && init=glorot
  "$py" "$here/launch/peers/torch_peer.py" "$work/d.train.txt" "$work/d.test.txt" --mode "$mode" \
    --init "$init" \
    --iterations 200 --batch 64 --negatives 64 --eval-every 100 --eval-points 1000 --device cpu \
    >"$work/$mode.txt" 2>&1 || { tail -5 "$work/$mode.txt"; fail "torch_peer.py --mode $mode exited $?"; }
done
"$py" - "$work" <<'PY' || fail "see above"
import json, math, os, sys
work = sys.argv[1]
def last(name):
    lines = [l for l in open(os.path.join(work, name)) if l.startswith("{")]
    return json.loads(lines[-1])
ref = last("dslide.txt")
base = ref["most_popular_label_p_at_1"]
ok = True
for mode in ("dense", "dense-tf32", "sampled"):
    r = last(mode + ".txt")
    curve = r["p_at_1_by_iter"]
    checks = {
        "engine": r["engine"] == "pytorch-" + mode,
        "timings": r["ms_per_iter"] > 0 and math.isfinite(r["ms_per_iter_mean"]),
        "curve": [c[0] for c in curve] == [100, 200] and curve[-1][1] == r["p_at_1"]
                 and curve[0][2] < curve[1][2],
        "learns": r["p_at_1"] > 1.5 * base,
        # Wall and CPU seconds since the process started, evaluations left out, growing;
        # the batch's preparation timed with the step.
        "process time": all(len(c) == 4 and c[2] > r["load_s"] > 0 and c[3] > 0 for c in curve)
                        and curve[0][3] < curve[1][3],
        "preparation": 0 < r["prep_ms_per_iter"] < r["ms_per_iter_mean"],
    }
    if mode == "dense":  # the same model as dslide's dense mode, up to float order
        checks["near dslide dense"] = abs(r["p_at_1"] - ref["p_at_1"]) < 0.05
    for what, good in checks.items():
        if not good:
            print(f"{mode}: {what} fails: {r}")
            ok = False
    print(f"{mode}: P@1 {r['p_at_1']:.4f} (dslide dense {ref['p_at_1']:.4f}, "
          f"most popular label {base:.4f}), {r['ms_per_iter']:.2f} ms/iter")
sys.exit(0 if ok else 1)
PY
echo "PASS"
