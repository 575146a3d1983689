#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (unit, MPI under mpiexec, CLI, real data
# where ../shared/data exists; GPU tests skip without a device).
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/install-deps.sh
bash launch/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
