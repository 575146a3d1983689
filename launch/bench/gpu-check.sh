#!/usr/bin/env bash
# One pass on a GPU machine, in the order that matters should time run out: build with the
# GPU backend (sm_90 alone by default), then the STAGES:
#   tests     the device tests (gpu_backend: the backend against the CPU backend;
#             mpi_gpu_np2/np4: 2 and 4 ranks sharing the GPU against as many CPU ranks)
#   tta       launch/bench/bench-tta with DEVICE=gpu on TTA_SETS: P@1 against training seconds for
#             the GPU backend and the PyTorch peers on the same GPU (OUT/tta.md, plots)
#   wide      `bench` on the 10^7-label shape in fp32 and bf16 state (step time, memory)
#   rebuild   `bench` on the 10^7-label and Amazon-670K shapes with the default rebuild
#             schedule and with none, for BASELINE's dslide (where set) and this one
#   bench-gpu launch/bench/bench-gpu.sh on SETS (the GPU backend beside the CPU backend on all
#             cores and the PyTorch peers on the same GPU)
#   curves    the sampled output layer against the dense control on the GPU: the defaults,
#             --log-q false and --sparsity 1 on CURVE_SETS (names under DATA; amazon-670k is
#             generated), P@1 every CURVE_EVERY iterations to CURVE_ITERS on the first 10,000
#             test points, one line per run; all three with the loss the defaults choose on
#             the set (--log-q false alone would turn a multi-label set's one-vs-rest into
#             the softmax)
# Each stage runs under a share of a deadline.
# Usage: launch/bench/gpu-check.sh            (from the repository root or anywhere)
# Environment: DEPS (a folder from ../shared/tools/device-deps, installed first where set),
#   BUDGET_S (seconds for the whole pass; 540), ARCH (CMAKE_CUDA_ARCHITECTURES; 90-real),
#   STAGES (tests wide bench-gpu), PREBUILT (a folder holding dslide, test_gpu and, for the
#   MPI device tests, test_mpi built elsewhere, e.g. with -DDSLIDE_NATIVE=OFF
#   -DCMAKE_CUDA_ARCHITECTURES=90-real: no build), WIDE_ITERS (200), WIDE_POINTS (20000),
#   SETS (amazon delicious gcide8), ITERS (500, for bench-gpu.sh), DATA (for bench-gpu.sh
#   and bench-tta), TTA_SETS (gcide8-skipgram amazon-670k delicious), TTA_OUT (a folder for
#   bench-tta's runs and report; /tmp/bench-tta), LOGS (a folder: every engine's output of
#   bench-gpu.sh is appended to LOGS/bench-gpu.log, so that few files carry all of them),
#   BASELINE (a folder holding another dslide, for the rebuild stage's before/after),
#   CURVE_SETS (amazon-670k gcide8-skipgram), CURVE_ITERS (1500), CURVE_EVERY (250).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
start=$SECONDS
budget=${BUDGET_S:-540}
left() { echo $((budget - (SECONDS - start))); }
stage() { echo; echo "=== $* ($(left) s left)"; }
# Runs "$@" under min(CAP, what is left - RESERVE) seconds: cap reserve cmd...
bounded() {
  local cap=$1 reserve=$2
  shift 2
  local t=$(($(left) - reserve))
  ((t > cap)) && t=$cap
  ((t < 10)) && { echo "skipped (no time left): $*"; return 124; }
  timeout --signal=INT --kill-after=10 "$t" "$@"
}

if [[ -n ${DEPS:-} ]]; then
  # shellcheck disable=SC1091
  source "$DEPS/install-debs" "$DEPS" /opt/deps >/dev/null || { echo "gpu-check: deps failed"; exit 2; }
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
nvcc --version | tail -1

bin=build-gpu/dslide
if [[ -n ${PREBUILT:-} ]]; then
  stage "prebuilt binaries in $PREBUILT"
  bin=$PREBUILT/dslide
  ldd "$bin" | grep 'not found' && { echo "gpu-check: libraries missing"; exit 1; }
else
  stage build
  bounded 240 200 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSLIDE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90-real}" -DDSLIDE_NATIVE=ON -DDSLIDE_WERROR=OFF \
    -DDSLIDE_BUILD_TESTS=ON -DDSLIDE_FUZZ=OFF >build-gpu.cfg.log 2>&1 ||
    { tail -30 build-gpu.cfg.log; exit 1; }
  bounded 240 200 cmake --build build-gpu -j "$(nproc)" --target dslide test_gpu test_mpi 2>&1 |
    grep -E 'error|warning: |FAILED' | head -40
  [[ -x build-gpu/dslide && -x build-gpu/tests/test_gpu ]] || { echo "gpu-check: build failed"; exit 1; }
fi
"$bin" --version | tail -1
echo "ready at $((SECONDS - start)) s"

stages=" ${STAGES:-tests wide bench-gpu} "
if [[ $stages == *" tests "* ]]; then
  stage device tests
  if [[ -n ${PREBUILT:-} ]]; then
    bounded 120 150 "$PREBUILT/test_gpu" --gtest_color=no 2>&1 | grep -E '^\[ +(OK|FAILED|PASSED) |Failure|Which is|no CUDA device' | head -60
    if [[ -x $PREBUILT/test_mpi ]]; then
      root=()
      ((EUID == 0)) && root=(--allow-run-as-root)
      for np in 2 4; do
        echo "-- mpi_gpu_np$np"
        OMP_NUM_THREADS=1 DSLIDE_TEST_GPU_ONLY=1 bounded 60 150 mpiexec -n "$np" --oversubscribe \
          --bind-to none "${root[@]}" "$PREBUILT/test_mpi" --gtest_color=no \
          --gtest_filter=Distributed.GpuDenseEqualsCpu:Distributed.GpuSnapshotExchangeEqualsCpu 2>&1 |
          grep -E '^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure|Which is|staged|CUDA-aware' | sort | uniq -c | head -30
      done
    fi
  else
    (cd build-gpu && bounded 150 150 ctest -R '^(gpu_backend|mpi_gpu_np2|mpi_gpu_np4)$' \
      --output-on-failure 2>&1 | tail -60)
  fi
fi

if [[ $stages == *" curves "* ]]; then
  for name in ${CURVE_SETS:-amazon-670k gcide8-skipgram}; do
    dir=${DATA:-../shared/data}/$name
    if [[ $name == amazon-670k && ! -f $dir/test.txt ]]; then
      dir=/tmp/curves-data/amazon-670k
      mkdir -p "$dir"
      [[ -f $dir/test.txt ]] || { "$bin" gen --shape amazon-670k --out "$dir/g" >/dev/null &&
        mv "$dir/g.train.txt" "$dir/train.txt" && mv "$dir/g.test.txt" "$dir/test.txt"; }
    fi
    # The defaults' loss on this set (a one-iteration start on the CPU), for every variant.
    loss=$("$bin" train --train "$dir/train.txt" --iterations 1 --eval-every 0 --threads "$(nproc)" 2>&1 |
      sed -n 's/.*(output, \([a-z-]*\)).*/\1/p' | head -1)
    for variant in defaults "--log-q false" "--sparsity 1"; do
      stage "curve: $name, $variant"
      more=()
      [[ $variant != defaults ]] && read -r -a more <<<"$variant"
      [[ -n $loss ]] && more+=(--loss "$loss")
      bounded 60 20 "$bin" train --train "$dir/train.txt" --test "$dir/test.txt" --device gpu \
        --threads "$(nproc)" --iterations "${CURVE_ITERS:-1500}" --eval-every "${CURVE_EVERY:-250}" \
        --eval-points 10000 --log-every 500 "${more[@]}" 2>&1 |
        awk -v tag="curve $name $variant:" '/^test / { for (i = 1; i <= NF; ++i) if ($i == "P@1") { p = p " " $(i + 1); break } }
          /ms\/iter/ { for (i = 1; i <= NF; ++i) if ($i == "ms/iter") ms = $(i - 1) }
          /error/ { print }
          END { print tag p " | " ms " ms/iter" }'
    done
  done
fi

if [[ $stages == *" tta "* ]]; then
  stage "bench-tta on the GPU: ${TTA_SETS:-gcide8-skipgram amazon-670k delicious}"
  DEVICE=gpu DSLIDE_BIN=$bin SETS=${TTA_SETS:-gcide8-skipgram amazon-670k delicious} \
    OUT=${TTA_OUT:-/tmp/bench-tta} PYTHONUNBUFFERED=1 \
    bounded 600 5 launch/bench/bench-tta "${DATA:-../shared/data}"
fi

if [[ $stages == *" wide "* ]]; then
  for state in fp32 bf16; do
    stage "bench, 10^7 labels, state $state"
    bounded 90 90 "$bin" bench --shape amazon-670k --labels 10000000 \
      --points "${WIDE_POINTS:-20000}" --device gpu --threads "$(nproc)" --state "$state" \
      --iterations "${WIDE_ITERS:-200}" --eval-every "$(( ${WIDE_ITERS:-200} / 4 ))" \
      --eval-points 500 2>&1 | tail -4
  done
fi

if [[ $stages == *" rebuild "* ]]; then
  # The table rebuilds' cost: `bench` with the default rebuild schedule and with none, on the
  # 10^7-label shape and the Amazon-670K shape, BASELINE's binary (where set) beside this one.
  summary() {
    python3 -c 'import json, sys
lines = sys.stdin.readlines()
runs = [l for l in lines if l.startswith("{")]
if not runs:
    sys.exit("  no result: " + "".join(lines[-4:]))
r = json.loads(runs[-1])
print("  ms/iter mean %.3f median %.3f, rebuild phase %.3f ms/iter, P@1 %.3f, device peak %d MB"
      % (r["ms_per_iter_mean"], r["ms_per_iter"], r["phase_ms"]["rebuild"], r["p_at_1"],
         r["device_peak_mb"]))'
  }
  for shape in wide amazon; do
    if [[ $shape == wide ]]; then
      args=(--labels 10000000 --points "${WIDE_POINTS:-20000}" --iterations "${WIDE_ITERS:-200}"
        --eval-points 500)
    else
      args=(--points 100000 --iterations 1500 --eval-points 1000)
    fi
    for b in ${BASELINE:+"$BASELINE/dslide"} "$bin"; do
      for schedule in default none; do
        [[ $schedule == none && $b != "$bin" ]] && continue
        stage "rebuild: $shape, $b, rebuilds $schedule"
        more=()
        [[ $schedule == none ]] && more=(--rebuild-n0 100000000)
        bounded 90 60 "$b" bench --shape amazon-670k "${args[@]}" --device gpu \
          --threads "$(nproc)" --eval-every 0 "${more[@]}" 2>&1 | summary
      done
    done
  done
fi

if [[ $stages == *" bench-gpu "* ]]; then
  stage "bench-gpu.sh ${SETS:-amazon delicious gcide8}"
  # shellcheck disable=SC2086
  OUT=/tmp/bench-gpu ITERS=${ITERS:-500} DSLIDE_BIN=$bin PYTHONUNBUFFERED=1 \
    bounded 600 5 launch/bench/bench-gpu.sh ${SETS:-amazon delicious gcide8}
  if [[ -n ${LOGS:-} ]]; then
    mkdir -p "$LOGS"
    for f in /tmp/bench-gpu/*.txt; do
      case $f in *.train.txt | *.test.txt) continue ;; esac
      { echo "== $f"; cat "$f"; } >>"$LOGS/bench-gpu.log"
    done
  fi
fi
echo "gpu-check: done at $((SECONDS - start)) s"
