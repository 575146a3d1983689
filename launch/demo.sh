#!/usr/bin/env bash
# The default job: installs and builds if needed, generates synthetic data, and trains it on
# 2 MPI ranks. Extra arguments go to `dslide train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/install-deps.sh
[[ -x build/dslide ]] || bash launch/build.sh -DDSLIDE_BUILD_TESTS=OFF
mkdir -p out
[[ -f out/demo.train.txt ]] || ./build/dslide gen --points 20000 --features 5000 --labels 2000 \
  --nnz 30 --labels-per-point 3 --seed 1 --out out/demo
bash launch/mpirun.sh -np 2 ./build/dslide train --train out/demo.train.txt \
  --test out/demo.test.txt --hidden 128 --sparsity 0.05 --hash srp --K 6 --L 100 --query topk \
  --lr 1e-3 --batch 256 --epochs 5 --eval-every 200 --metrics out/demo.jsonl "$@"
