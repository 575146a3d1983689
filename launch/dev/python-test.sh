#!/usr/bin/env bash
# The Python package's tests, as a user would meet the package: a fresh virtual environment in
# build-python/venv that sees Debian's NumPy, SciPy, mpi4py and pytest (launch/setup/install-deps.sh
# --test installs them), `pip install .` into it (the extension and the dslide executable of
# one build), then pytest on tests/python: arrays against files, predictions against the
# executable's, save and load, bad arrays, Ctrl-C, the GIL, and 2 ranks under mpirun. Exits
# non-zero when a test fails or none ran. PYTHON picks the interpreter (default: Debian's
# /usr/bin/python3).
#
# The build: pyproject.toml's build requirements (scikit-build-core, nanobind, from PyPI) go
# into the venv and pip builds without isolation, in pyproject.toml's build folder
# build-python/<wheel tag>, which the next run reuses: it compiles what changed (and
# nanobind's few sources, reinstalled), not the whole project. scikit-build-core's steps and
# CMake's progress lines are printed; the whole output is in build-python/pip-install.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-/usr/bin/python3}
[[ -x $python ]] || python=$(command -v python3)
venv=$PWD/build-python/venv
rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
start=$SECONDS
mapfile -t requires < <("$venv/bin/python" -c '
import re
text = open("pyproject.toml").read()
block = re.search(r"^\[build-system\]\s*requires\s*=\s*\[(.*?)\]", text, re.M | re.S).group(1)
print("\n".join(re.findall(r"\"([^\"]+)\"", block)))')
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requires[@]}"
log=$PWD/build-python/pip-install.log
if ! CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$venv/bin/python" -m pip install --verbose --no-build-isolation --no-cache-dir \
  --disable-pip-version-check . 2>&1 | tee "$log" |
  sed -un 's/^ *\(\*\*\* .*\|\[[0-9]*\/[0-9]*\] .*\)$/  \1/p'; then
  tail -n 40 "$log"
  echo "python-test: pip install . failed (its whole output: $log)" >&2
  exit 1
fi
echo "python-test: pip install . took $((SECONDS - start)) s"
# From outside the source tree, so that `import dslide` is the installed package.
cd build-python
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -p no:cacheprovider -ra \
  ../tests/python "$@"
