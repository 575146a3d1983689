#!/usr/bin/env bash
# launch/bench/scaling's matrix with the model-parallel PyTorch peer (torch-mp-full and
# torch-mp-sampled) beside dslide (sparse) on 2 simulated nodes, a small generated set, on an
# unshaped link and on a shaped one with a one-way delay (RATE@DELAY: netns-cluster's wire
# mode): every strategy's row holds figures for both links, and the delayed link's steps are
# slower for every strategy (each step waits for messages that now take the delay); then the
# time-to-accuracy runs with both peer modes, and their figure by ranks and link
# (launch/bench/tta-links).
# Usage: scaling_mp_smoke.sh DSLIDE WORKDIR. Skipped (77) without root, netns-cluster
# (NETNS_CLUSTER, default ../shared/tools/netns-cluster/netns-cluster beside the
# repository), PyTorch with Gloo or gnuplot.
set -uo pipefail
dslide=$1 work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
tool=${NETNS_CLUSTER:-$root/../shared/tools/netns-cluster/netns-cluster}
[[ $(id -u) -eq 0 ]] || { echo "skipped: the simulated nodes need root"; exit 77; }
[[ -x $tool ]] || { echo "skipped: no netns-cluster at $tool"; exit 77; }
py=
for cand in python3 /usr/bin/python3; do
  "$cand" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null &&
    { py=$cand; break; }
done
[[ -n $py ]] || { echo "skipped: no python3 imports PyTorch with Gloo"; exit 77; }
export TORCH_PYTHON=$py
command -v gnuplot >/dev/null || { echo "skipped: gnuplot is not installed"; exit 77; }
fail() { echo "FAIL: $*"; tail -30 "$work/log.txt"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$root" || exit 1
export DSLIDE_BIN=$dslide NETNS_CLUSTER=$tool OUT=$work/out DATASETS=small ITERS=6 RANKS=2
export LINKS="unshaped 1gbit@2ms" STRATEGIES="sparse torch-mp-full torch-mp-sampled"
launch/bench/scaling matrix > "$work/log.txt" 2>&1 || fail "launch/bench/scaling matrix exited $?"
md=$work/out/scaling.md
num='[0-9][0-9.]*'
for link in unshaped 1gbit@2ms; do
  grep -q "^### small, link $link:" "$md" || fail "no table for link $link in $md"
done
for s in sparse torch-mp-full torch-mp-sampled; do
  rows=$(grep -Ec "^\| $s \| 2 \| $num \| $num \| $num (k|M)?B? ?" "$md")
  [[ $rows == 2 ]] || fail "$s: $rows rows with figures in $md (expected one per link)"
  fast=$(sed -n 's/.*"ms_per_iter": *\([0-9.]*\).*/\1/p' "$work/out/runs/small-$s-p2-unshaped.json")
  slow=$(sed -n 's/.*"ms_per_iter": *\([0-9.]*\).*/\1/p' "$work/out/runs/small-$s-p2-1gbit@2ms.json")
  awk -v a="$fast" -v b="$slow" 'BEGIN { exit !(b > a + 2) }' ||
    fail "$s: $slow ms a step with a 2 ms delay, $fast without (the delay did not reach it)"
  echo "$s: $fast ms a step unshaped, $slow ms at 1 Gbit/s with 2 ms one-way delay"
done
[[ -s $work/out/small-ms-by-link.png ]] || fail "no plot small-ms-by-link.png"
# Time to accuracy with both peer modes: a row each, with the iterations each ran.
TTA_DATA=small TTA_RANKS=2 TTA_LINK=unshaped TTA_ITERS=40 TTA_EVERY=20 TTA_MP_FULL_ITERS=20 \
  TTA_EVAL_POINTS=200 TARGET_P1=0.01 launch/bench/scaling tta >> "$work/log.txt" 2>&1 ||
  fail "launch/bench/scaling tta exited $?"
grep -Eq "^\| torch-mp-sampled \| 40 \| $num \| $num \| $num \|" "$md" ||
  fail "no sampled peer time-to-accuracy row of 40 iterations"
grep -Eq "^\| torch-mp-full \| 20 \| $num \| $num \| $num \|" "$md" ||
  fail "no full-softmax peer time-to-accuracy row of 20 iterations"
[[ -s $work/out/tta-small.png ]] || fail "no plot tta-small.png"
# The figure of every node count and link (here one run): a panel for it; the same run
# twice is refused, naming both.
launch/bench/tta-links "$work/links.png" "$work/out" >> "$work/log.txt" 2>&1 ||
  fail "launch/bench/tta-links exited $?"
grep -q "wrote $work/links.png (1 x 1 panels)" "$work/log.txt" || fail "tta-links: no 1 x 1 figure"
[[ -s $work/links.png ]] || fail "no figure links.png"
out=$(launch/bench/tta-links "$work/twice.png" "$work/out" "$work/out" 2>&1) &&
  fail "tta-links took the same run twice"
[[ $out == *"two runs of 2 ranks on unshaped"* ]] || fail "tta-links refused two runs with: $out"
echo "ok: launch/bench/scaling ran dslide against the model-parallel PyTorch peer ($md)"
