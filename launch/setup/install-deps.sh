#!/usr/bin/env bash
# Installs what dslide needs to build on Debian bookworm (skips what is already there);
# with --test also what the tests use beyond the build (clang-format for the format check;
# Debian's PyTorch for the PyTorch peers' tests, torch_peer and horovod_peer; NumPy, SciPy,
# mpi4py, pytest and scikit-learn (the estimator's checks) for the Python package's tests,
# launch/dev/python-test.sh; h5dump for the dense-parity test). python3-dev and python3-venv:
# `pip install .` of the Python package in a virtual environment.
set -euo pipefail
pkgs=(build-essential cmake libopenmpi-dev openmpi-bin libboost-program-options-dev
      libhdf5-dev zlib1g-dev libgtest-dev libhnswlib-dev python3-dev python3-venv)
[[ ${1:-} == --test ]] && pkgs+=(clang-format python3-torch libopenblas0-pthread
                                 python3-numpy python3-scipy python3-mpi4py python3-pytest
                                 python3-sklearn hdf5-tools)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
