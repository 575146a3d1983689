#!/usr/bin/env bash
# The GPU backend against the CPU backend on all cores of the same machine and against dense
# PyTorch on the same GPU: one generated Amazon-670K-shaped data set, the same network,
# iterations and P@1 evaluation for all three. Prints the three JSON lines and a table.
# Usage: launch/bench-gpu.sh   (after a build with -DDSLIDE_CUDA=ON)
# Environment: ITERS (400), POINTS (100000), THREADS (all cores), OUT (a temporary folder).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/dslide
[[ -x $bin ]] || { echo "bench-gpu: build first (launch/build.sh)" >&2; exit 2; }
iters=${ITERS:-400} points=${POINTS:-100000} threads=${THREADS:-$(nproc)}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
"$bin" gen --shape amazon-670k --points "$points" --out "$out/amazon"
common=(--train "$out/amazon.train.txt" --test "$out/amazon.test.txt" --iterations "$iters"
        --eval-every "$iters" --eval-points 1000)
echo "== dslide, GPU backend"
"$bin" bench "${common[@]}" --device gpu --threads "$threads" | tee "$out/gpu.txt"
echo "== dslide, CPU backend, $threads threads"
"$bin" bench "${common[@]}" --device cpu --threads "$threads" | tee "$out/cpu.txt"
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "== dense PyTorch on the same GPU"
  python3 launch/dense_torch.py "$out/amazon.train.txt" "$out/amazon.test.txt" \
    --iterations "$iters" --eval-points 1000 | tee "$out/torch.txt"
else
  echo "bench-gpu: no PyTorch with CUDA; dense reference skipped" >&2
  echo '{}' > "$out/torch.txt"
fi
field() { grep '^{' "$1" | tail -1 | sed -n "s/.*\"$2\": *\([-0-9.e+]*\).*/\1/p"; }
awk -v g="$(field "$out/gpu.txt" ms_per_iter_mean)" -v c="$(field "$out/cpu.txt" ms_per_iter_mean)" \
    -v t="$(field "$out/torch.txt" ms_per_iter_mean)" -v gp="$(field "$out/gpu.txt" p_at_1)" \
    -v cp="$(field "$out/cpu.txt" p_at_1)" -v tp="$(field "$out/torch.txt" p_at_1)" -v it="$iters" \
    -v th="$threads" 'BEGIN {
  printf "\n| engine | mean ms per iteration | P@1 after %d iterations |\n|---|---|---|\n", it
  printf "| dslide GPU | %s | %s |\n| dslide CPU (%d threads) | %s | %s |\n| dense PyTorch GPU | %s | %s |\n", g, gp, th, c, cp, t, tp
  if (g > 0 && c > 0) printf "GPU backend vs CPU backend: %.1fx\n", c / g
  if (g > 0 && t > 0) printf "GPU backend vs dense PyTorch: %.1fx\n", t / g
}'
