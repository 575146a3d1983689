#!/usr/bin/env bash
# The wide-output comparison: the same network trained for the same iterations with a
# sparse output layer (LSH-sampled) and a dense one (every neuron, full softmax), on one
# rank. Prints both JSON lines and the ratios. Usage:
#   launch/bench/bench-wide.sh [DATA_DIR] [extra dslide bench options...]
# DATA_DIR holds train.txt and test.txt (default ../shared/data/gcide8-skipgram).
# Environment: ITERS (300), SPARSITY (0.01), EVAL_POINTS (5000), THREADS (all cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/data/gcide8-skipgram}
shift || true
if [[ ! -f $data/train.txt || ! -f $data/test.txt ]]; then
  echo "bench-wide: no train.txt/test.txt in $data; skipped" >&2
  exit 0
fi
bin=build/dslide
[[ -x $bin ]] || { echo "bench-wide: build first (launch/setup/build.sh)" >&2; exit 2; }
iters=${ITERS:-300} sparsity=${SPARSITY:-0.01} points=${EVAL_POINTS:-5000} threads=${THREADS:-$(nproc)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--train "$data/train.txt" --test "$data/test.txt" --iterations "$iters"
        --eval-every $((iters / 3)) --eval-points "$points" --threads "$threads" --log-every 50 "$@")
echo "== sparse output (s=$sparsity)"
"$bin" bench "${common[@]}" --sparsity "$sparsity" | tee "$out/sparse.txt"
echo "== dense output (s=1)"
"$bin" bench "${common[@]}" --sparsity 1 | tee "$out/dense.txt"
field() { grep '^{' "$1" | tail -1 | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"; }
sp1=$(field "$out/sparse.txt" p_at_1) dp1=$(field "$out/dense.txt" p_at_1)
sms=$(field "$out/sparse.txt" ms_per_iter_mean) dms=$(field "$out/dense.txt" ms_per_iter_mean)
base=$(field "$out/sparse.txt" most_popular_label_p_at_1)
awk -v sp="$sp1" -v dp="$dp1" -v sm="$sms" -v dm="$dms" -v b="$base" -v it="$iters" -v s="$sparsity" 'BEGIN {
  printf "\n| output | P@1 after %d iterations | ms per iteration (mean) |\n|---|---|---|\n", it
  printf "| sparse (s=%s) | %.4f | %.1f |\n| dense | %.4f | %.1f |\n", s, sp, sm, dp, dm
  printf "\nP@1 difference (sparse - dense): %+.4f; most-popular-label P@1 %.4f\n", sp - dp, b
  printf "sparse iteration is %.1fx faster than dense\n", dm / sm
}'
