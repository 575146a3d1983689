#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (unit, MPI under mpiexec, CLI, real data
# where ../shared/data exists; GPU tests skip without a device), then the fuzz targets for
# FUZZ_SECONDS each (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/install-deps.sh --test
bash launch/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
cd ..
# Fuzz the data reader and the checkpoint loader for a bounded time (clang, libFuzzer).
FUZZ_SECONDS=${FUZZ_SECONDS:-60} bash launch/fuzz.sh
