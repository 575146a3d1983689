#!/usr/bin/env bash
# Dense parity, step by step: dslide --sparsity 1 and torch.optim.Adam take the same step.
# On the first 256 points of bibtex (a small real set) with batch 256, every step sees the
# whole set, so batch order cannot differ; dslide writes a checkpoint after each step, and
# tests/system/dense_step.py loads the weights and Adam moments of step t into PyTorch, takes one
# step and compares it with dslide's step t + 1: weights, biases and both moments.
# Usage: dense_step_test.sh DSLIDE WORKDIR DATADIR. Exits 77 (skipped) where bibtex, PyTorch
# or h5dump (hdf5-tools) is missing.
set -uo pipefail
dslide=$1 work=$2 data=$3
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "skipped: $*"; exit 77; }
[[ -f $data/bibtex/train.txt ]] || skip "no $data/bibtex/train.txt"
command -v h5dump >/dev/null || skip "h5dump is not installed (apt-get install hdf5-tools)"
py=
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null && "$cand" -c 'import torch, numpy' 2>/dev/null; then
    py=$cand
    break
  fi
done
[[ -n $py ]] || skip "PyTorch is not importable (apt-get install python3-torch)"
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
read -r _ d c < <(head -1 "$data/bibtex/train.txt")
{ echo "256 $d $c"; sed -n '2,257p' "$data/bibtex/train.txt"; } >"$work/tiny.txt"
# Under either output loss (bibtex's 2.4 labels a point make one-vs-rest the auto choice).
for loss in softmax one-vs-rest; do
  "$dslide" train --train "$work/tiny.txt" --sparsity 1 --hidden 64 --batch 256 --iterations 4 \
    --lr 1e-3 --threads 1 --seed 1 --label-order identity --valid-fraction 0 --eval-every 0 \
    --loss $loss --checkpoint-dir "$work/ck-$loss" --checkpoint-every 1 >"$work/train.txt" 2>&1 ||
    { tail -5 "$work/train.txt"; fail "dslide train --loss $loss exited $?"; }
  for t in 3 4; do
    ck=$(printf '%s/ck-%s/ckpt-%012d/rank-00000.h5' "$work" "$loss" "$t")
    [[ -f $ck ]] || fail "no checkpoint of iteration $t ($ck)"
    mkdir -p "$work/$loss-s$t"
    for l in 0 1; do
      for a in w b m v mb vb; do
        h5dump -b LE -d "/layer$l/$a" -o "$work/$loss-s$t/l${l}_$a.bin" "$ck" >/dev/null ||
          fail "h5dump /layer$l/$a of $ck"
      done
    done
  done
  "$py" "$here/dense_step.py" "$work/tiny.txt" "$work/$loss-s3" "$work/$loss-s4" 3 64 $loss ||
    fail "the steps differ (--loss $loss)"
  echo "dense step equals PyTorch's (bibtex, first 256 points, --loss $loss)"
done
