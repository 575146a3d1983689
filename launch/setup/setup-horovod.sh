#!/usr/bin/env bash
# Real Horovod as a peer of dslide in launch/bench/scaling: installs Debian's PyTorch (python3-torch,
# libtorch-dev) and the build dependencies when missing, then builds Horovod 0.28.1 (PyTorch +
# MPI only) into a virtual environment kept outside the repository, so later calls reuse it.
#
#   launch/setup/setup-horovod.sh            install when missing, then print the versions
#   DSLIDE_HOROVOD_VENV=DIR ...        where the environment lives
#                                      (default ~/.cache/dslide/horovod-venv)
#
# The environment is made from /usr/bin/python3 (Debian's python3-torch lives in its
# dist-packages; a pyenv python3 earlier on PATH would not see it) with
# --system-site-packages. Building Horovod takes a few minutes on 2 cores. Needs root for
# apt-get when packages are missing. Prints the venv's python path on its last line.
set -euo pipefail
venv=${DSLIDE_HOROVOD_VENV:-$HOME/.cache/dslide/horovod-venv}
horovod_version=${HOROVOD_VERSION:-0.28.1}
py=/usr/bin/python3
say() { echo "setup-horovod: $*" >&2; }

# Debian packages: PyTorch for /usr/bin/python3, its C++ headers, venv, MPI and a compiler.
need=()
dpkg_has() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# pybind11-dev: torch's C++ headers include pybind11, which libtorch-dev does not pull in.
# libopenblas0-pthread: Debian's torch calls the system libblas.so.3, the reference BLAS unless
# OpenBLAS is installed (then the alternative points to it): ~1.7 GFLOP/s against tens, which
# would make PyTorch's output layer 20x slower than it is on an ordinary install.
for pkg in python3-torch libtorch-dev pybind11-dev libopenblas0-pthread python3-venv python3-dev \
           python3-pip cmake g++ make libopenmpi-dev openmpi-bin; do
  dpkg_has "$pkg" || need+=("$pkg")
done
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    say "missing Debian packages: ${need[*]}; install them as root (apt-get install ${need[*]})"
    exit 2
  fi
  say "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[[ -x $py ]] || { say "$py not found"; exit 2; }
"$py" -c 'import torch' 2>/dev/null || { say "$py cannot import torch after installing python3-torch"; exit 2; }

if [[ ! -x $venv/bin/python ]]; then
  say "creating the virtual environment $venv (from $py, --system-site-packages)"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv --system-site-packages "$venv"
fi
vpy=$venv/bin/python
if ! "$vpy" -c 'import horovod.torch' 2>/dev/null; then
  say "building horovod==$horovod_version with PyTorch and MPI (no TensorFlow, MXNet, Gloo); a few minutes"
  start=$(date +%s)
  # A build log outside the repository: the compiler output is long.
  log=$(dirname "$venv")/horovod-build.log
  if ! HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
       HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 MAKEFLAGS=-j"$(nproc)" \
       "$vpy" -m pip install --no-cache-dir --no-build-isolation "horovod==$horovod_version" > "$log" 2>&1; then
    tail -30 "$log" >&2
    say "building Horovod failed (full log: $log)"
    exit 1
  fi
  say "built Horovod in $(( $(date +%s) - start )) s (log: $log)"
fi

# The versions, checked from the environment that launch/bench/scaling uses.
"$vpy" - <<'EOF' >&2
import torch, horovod, horovod.torch as hvd
print(f"setup-horovod: torch {torch.__version__} ({torch.__file__})")
print(f"setup-horovod: horovod {horovod.__version__}: mpi built {hvd.mpi_built()}, "
      f"gloo built {hvd.gloo_built()}")
EOF
say "Debian: $(dpkg-query -W -f='${Package} ${Version}, ' python3-torch libtorch-dev pybind11-dev)python $("$vpy" -c 'import platform; print(platform.python_version())')"
say "$(mpirun --version 2>/dev/null | head -1)"
say "BLAS: libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo '?')"
say "venv: $venv"
echo "$vpy"
