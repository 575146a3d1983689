#!/usr/bin/env bash
# launch/bench/scaling end to end where it can run: dslide (sparse) against real Horovod (fp32) on
# 2 simulated nodes, a small generated set, the matrix and the time-to-accuracy runs; the
# tables must hold both rows with figures and the ratio, and the plots must exist.
# Usage: scaling_smoke.sh DSLIDE WORKDIR. Skipped (77) without root, netns-cluster
# (NETNS_CLUSTER, default ../shared/tools/netns-cluster/netns-cluster beside the
# repository) or the Horovod environment of launch/setup-horovod.sh.
set -uo pipefail
dslide=$1 work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
tool=${NETNS_CLUSTER:-$root/../shared/tools/netns-cluster/netns-cluster}
venv=${DSLIDE_HOROVOD_VENV:-$HOME/.cache/dslide/horovod-venv}
[[ $(id -u) -eq 0 ]] || { echo "skipped: the simulated nodes need root"; exit 77; }
[[ -x $tool ]] || { echo "skipped: no netns-cluster at $tool"; exit 77; }
if ! "$venv/bin/python" -c 'import horovod.torch' 2>/dev/null; then
  echo "skipped: no Horovod environment at $venv (launch/setup/setup-horovod.sh)"
  exit 77
fi
command -v gnuplot >/dev/null || { echo "skipped: gnuplot is not installed"; exit 77; }
fail() { echo "FAIL: $*"; tail -30 "$work/log.txt"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$root" || exit 1
export DSLIDE_BIN=$dslide NETNS_CLUSTER=$tool OUT=$work/out DATASETS=small ITERS=3 RANKS=2
export LINKS=unshaped STRATEGIES="sparse horovod-fp32"
launch/bench/scaling matrix > "$work/log.txt" 2>&1 || fail "launch/bench/scaling matrix exited $?"
TTA_DATA=small TTA_RANKS=2 TTA_LINK=unshaped TTA_ITERS=40 TTA_SECONDS=20 TTA_EVERY=20 \
  TTA_HVD_EVERY=20 TTA_EVAL_POINTS=200 TTA_STRATEGIES=horovod-fp32 TARGET_P1=0.01 \
  launch/bench/scaling tta >> "$work/log.txt" 2>&1 || fail "launch/bench/scaling tta exited $?"
md=$work/out/scaling.md
num='[0-9][0-9.]*'
grep -Eq "^\| sparse \| 2 \| $num \| $num \| $num MB \|" "$md" || fail "no dslide row with figures in $md"
grep -Eq "^\| horovod-fp32 \| 2 \| $num \| $num \| $num MB \(wire\) \| - \| ${num}x \| ${num}x \|" "$md" ||
  fail "no Horovod row with figures and ratios in $md"
grep -Eq "^\| horovod-fp32 \| $num \| $num \| $num \| $num \|" "$md" || fail "no Horovod time-to-accuracy row"
grep -Eq "^\| sparse \| 40 \| $num \| $num \| $num \| $num s \(iteration [0-9]+\) \|" "$md" ||
  fail "no dslide time-to-accuracy row reaching the target"
for png in small-ms-by-p small-bytes-by-p tta-small; do
  [[ -s $work/out/$png.png ]] || fail "no plot $png.png"
done
echo "ok: launch/bench/scaling ran dslide against Horovod end to end ($md)"
