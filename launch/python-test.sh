#!/usr/bin/env bash
# The Python package's tests, as a user would meet the package: a fresh virtual environment in
# build-python/venv that sees Debian's NumPy, SciPy, mpi4py and pytest (launch/install-deps.sh
# --test installs them), `pip install .` into it (the extension and the dslide executable of
# one build; scikit-build-core and nanobind come from PyPI), then pytest on tests/python:
# arrays against files, predictions against the executable's, save and load, bad arrays,
# Ctrl-C, the GIL, and 2 ranks under mpirun. Exits non-zero when a test fails or none ran.
# PYTHON picks the interpreter (default: Debian's /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-/usr/bin/python3}
[[ -x $python ]] || python=$(command -v python3)
venv=$PWD/build-python/venv
rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
start=$SECONDS
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$venv/bin/python" -m pip install --quiet --no-cache-dir --disable-pip-version-check .
echo "python-test: pip install . took $((SECONDS - start)) s"
# From outside the source tree, so that `import dslide` is the installed package.
cd build-python
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -p no:cacheprovider -ra \
  ../tests/python "$@"
