#!/usr/bin/env bash
# launch/peers/torch_mp_peer.py (the model-parallel PyTorch peer of the scaling study) under
# mpirun: its full-softmax mode on 2 ranks takes the steps of the single-process peer's dense
# mode (launch/peers/torch_peer.py), both from dslide's initial weights and batches
# (--match-dslide): every step's loss within float rounding and the same P@1; its sampled mode
# on 2 ranks learns (P@1 well above the most popular label's), and both report the bytes a
# rank sends per step: about 2 x batch x hidden floats, as the sharded network needs.
# Usage: torch_mp_peer_test.sh DSLIDE WORKDIR. Exits 77 (skipped) without a python that
# imports PyTorch with Gloo, or without mpirun.
set -uo pipefail
dslide=$1 work=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
py=
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null &&
    "$cand" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    py=$(command -v "$cand")
    break
  fi
done
[[ -n $py ]] || { echo "skipped: PyTorch with Gloo is not importable (apt-get install python3-torch)"; exit 77; }
command -v mpirun >/dev/null || { echo "skipped: no mpirun"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
"$dslide" gen --features 400 --labels 200 --points 3000 --nnz 12 --out "$work/d" >/dev/null ||
  fail "dslide gen"
root=()
[[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
export PYTHONPATH=$here/launch/peers OMP_NUM_THREADS=1
# Each run meets through its own file, not a TCP port: ctest runs other jobs beside, and
# any of them may hold a port this test would pick.
mp() {  # NAME NP ARGS...: the peer on NP ranks, meeting through $work/NAME.rdv
  local name=$1 np=$2
  shift 2
  timeout 300 mpirun "${root[@]}" --oversubscribe --bind-to none -np "$np" \
    -x PYTHONPATH -x OMP_NUM_THREADS \
    "$py" "$here/launch/peers/torch_mp_peer.py" "$work/d.train.txt" "$work/d.test.txt" \
    --init-method "file://$work/$name.rdv" "$@"
}
# The peer's own words first (mpirun's abort notice follows them).
why() { grep -v -e '^---' -e '^ *$' "$1" | grep -m 8 -i -e error -e exception -e traceback; tail -8 "$1"; }
"$py" "$here/launch/peers/torch_peer.py" "$work/d.train.txt" "$work/d.test.txt" --mode dense \
  --device cpu --threads 1 --iterations 12 --batch 64 --match-dslide --losses \
  --eval-points 500 >"$work/single.json" 2>"$work/single.err" ||
  { tail -5 "$work/single.err"; fail "torch_peer.py exited $?"; }
mp full 2 --mode full --iterations 12 --batch 64 --match-dslide --losses --eval-points 500 \
  >"$work/full2.txt" 2>"$work/full2.err" || { rc=$?; why "$work/full2.err"; fail "full mode on 2 ranks exited $rc"; }
mp sampled 2 --mode sampled --negatives 32 --iterations 300 --batch 64 --eval-points 500 \
  >"$work/sampled2.txt" 2>"$work/sampled2.err" || { rc=$?; why "$work/sampled2.err"; fail "sampled mode on 2 ranks exited $rc"; }
"$py" - "$work" <<'PY' || fail "the model-parallel peer"
import json, sys
work = sys.argv[1]
def last(path):
    return json.loads([l for l in open(path) if l.startswith("{")][-1])
single, full, sampled = last(f"{work}/single.json"), last(f"{work}/full2.txt"), last(f"{work}/sampled2.txt")
worst = max(abs(a - b) / abs(b) for a, b in zip(full["losses"], single["losses"]))
print(f"full softmax on 2 ranks against one process: losses within {worst:.1e} (relative) over "
      f"{len(single['losses'])} steps; P@1 {full['p_at_1']:.4f} against {single['p_at_1']:.4f}")
assert len(full["losses"]) == len(single["losses"]) == 12
assert worst < 1e-5, "the steps differ"
assert full["p_at_1"] == single["p_at_1"]
for r in (full, sampled):
    per_step = r["bytes_sent_per_iter"] / 4
    assert 2 * 64 * 128 <= per_step <= 2 * 64 * 128 + 4 * 64, per_step
print(f"sampled on 2 ranks: P@1 {sampled['p_at_1']:.4f} after 300 steps; "
      f"{sampled['bytes_sent_per_iter']:.0f} bytes sent a step by a rank")
assert sampled["p_at_1"] > 0.5, sampled["p_at_1"]
PY
echo "ok: the model-parallel peer's full mode on 2 ranks takes the single process's steps"
