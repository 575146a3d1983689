#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (unit, MPI under mpiexec, CLI, real data
# where ../shared/data exists; GPU tests skip without a device), then the Python package's
# (launch/dev/python-test.sh: pip install . into a fresh venv, pytest), then the fuzz targets for
# FUZZ_SECONDS each (default 60). Whatever build/ holds (the demo builds it without tests),
# the tests are built: launch/setup/build.sh states every option. A run that finds no tests, or
# fewer than the suite registers, fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Tests every build registers (the CUDA build adds gpu_backend and mpi_gpu_np2). Lower it
# only when tests are removed on purpose.
min_tests=333
bash launch/setup/install-deps.sh --test
bash launch/setup/build.sh -DDSLIDE_BUILD_TESTS=ON
cd build
registered=$(ctest -N | sed -n 's/^Total Tests: *//p')
if ((${registered:-0} < min_tests)); then
  echo "test: ctest registers ${registered:-0} tests, the suite has at least $min_tests:" \
       "part of it was not built (see the cmake output above)" >&2
  exit 1
fi
ctest --output-on-failure --no-tests=error -j "$(nproc)"
echo "test: $registered tests registered and run"
cd ..
bash launch/dev/python-test.sh
# Fuzz the data reader and the checkpoint loader for a bounded time (clang, libFuzzer).
FUZZ_SECONDS=${FUZZ_SECONDS:-60} bash launch/dev/fuzz.sh
