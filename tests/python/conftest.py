"""Fixtures of the Python package's tests: the installed package and executable, generated
tasks (arrays and XC files), the real data sets where ../shared/data holds them, mpirun."""

import os
import shutil
import subprocess
import sys

import pytest

import tasks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The generated task: more labels than --dense-below (1024), so that the output layer is
# sampled with LSH tables, and small enough for seconds of training.
POINTS, TEST_POINTS, FEATURES, LABELS = 1500, 300, 400, 1200


def cli_path():
    """The dslide executable of the same build as the package (pip installs it beside the
    interpreter), or $DSLIDE_CLI."""
    path = os.environ.get("DSLIDE_CLI")
    if path:
        return path
    found = shutil.which("dslide", path=os.path.dirname(sys.executable))
    if found is None:
        pytest.skip("no dslide executable beside this Python (pip install . puts one there)")
    return found


@pytest.fixture(scope="session")
def cli():
    return cli_path()


def run_cli(*args, **kw):
    """Runs the executable; fails the test with its output when it fails."""
    r = subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True, **kw)
    command = " ".join(map(str, args))
    assert r.returncode == 0, f"dslide {command}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


class Task:
    def __init__(self, folder):
        X, Y = tasks.generate(POINTS + TEST_POINTS, FEATURES, LABELS, seed=7)
        self.X, self.Y = X[:POINTS], Y[:POINTS]
        self.Xt, self.Yt = X[POINTS:], Y[POINTS:]
        self.labels = LABELS
        self.train_file = os.path.join(folder, "train.txt")
        self.test_file = os.path.join(folder, "test.txt")
        tasks.write_xc(self.train_file, self.X, self.Y, LABELS)
        tasks.write_xc(self.test_file, self.Xt, self.Yt, LABELS)


@pytest.fixture(scope="session")
def task(tmp_path_factory):
    return Task(str(tmp_path_factory.mktemp("task")))


@pytest.fixture(scope="session")
def data_dir():
    return os.environ.get("DSLIDE_DATA_DIR", os.path.join(REPO, "..", "shared", "data"))


def mpirun_command(ranks):
    """mpirun for `ranks` ranks of one thread each, or None without an MPI launcher."""
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        return None
    cmd = [mpirun, "-n", str(ranks), "--oversubscribe", "--bind-to", "none",
           "-x", "OMP_NUM_THREADS=1"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd
