"""Under mpirun -np 2: train() runs model-parallel as the executable does, and predict()
gives every rank the merged top-k."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import dslide
import tasks
from conftest import cli_path, mpirun_command, run_cli

HERE = os.path.dirname(os.path.abspath(__file__))


def mpirun(*args, timeout=600):
    cmd = mpirun_command(2)
    if cmd is None:
        pytest.skip("no mpirun")
    cmd += [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def cli_model(task, tmp_path_factory):
    """The executable's model on 2 ranks, with the same options as mpi_train.py."""
    folder = tmp_path_factory.mktemp("cli2") / "model"
    mpirun(cli_path(), "train", "--train", task.train_file, "--test",
           task.test_file, "--iterations", 20, "--hidden", 32, "--seed", 5, "--threads", 1,
           "--save", folder)
    return folder


def mpi_train_command(task, tmp_path, how):
    """mpirun -np 2 of mpi_train.py run `how`'s way; skipped without mpirun, or without mpi4py
    where `how` (ending in mpi4py) uses it."""
    if how.endswith("mpi4py") and importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed")
    cmd = mpirun_command(2)
    if cmd is None:
        pytest.skip("no mpirun")
    return cmd + [sys.executable, os.path.join(HERE, "mpi_train.py"), str(tmp_path),
                  task.train_file, task.test_file, how]


def run_job(cmd, timeout):
    """(exit code, stdout, stderr, seconds) of the job; a job that outlives `timeout` is ended
    (mpirun and its ranks: a killed mpirun would leave them waiting) and fails the test."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.terminate()  # mpirun ends its ranks
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        pytest.fail(f"the job still ran after {timeout} s (a rank waits for ever):\n{out}\n{err}")
    return p.returncode, out, err, time.monotonic() - t0


@pytest.mark.parametrize("how", ["raise", "raise-mpi4py"])
def test_an_uncaught_exception_on_one_rank_ends_the_job(task, tmp_path, how):
    """Rank 1's own code raises while rank 0 waits in training's collectives: the job ends
    within seconds with a non-zero code and the traceback, never hangs."""
    code, out, err, seconds = run_job(mpi_train_command(task, tmp_path, how), timeout=120)
    assert code != 0, out + err
    assert "RuntimeError: user code failed on rank 1" in err, err
    assert "ending every rank of the job (MPI_Abort)" in err, err
    assert seconds < 60


@pytest.mark.parametrize("how", ["exit", "exit-mpi4py", "end", "end-mpi4py", "late"])
def test_a_rank_that_leaves_python_ends_the_job(task, tmp_path, how):
    """Rank 1 leaves Python after training (sys.exit(3), or the end of its script) while rank 0
    goes on to train again: the job ends within seconds, with rank 1's exit code where it is a
    failure (else 1) and a line naming rank 1 and how it left. It waited for ever (rank 0 in
    its next collective, rank 1 in MPI_Finalize). A rank whose script ends before the others'
    without a collective call after it (late) waits for them: exit code 0, nothing printed."""
    code, out, err, seconds = run_job(mpi_train_command(task, tmp_path, how), timeout=90)
    output = out + err
    if how == "late":
        assert code == 0, output
        assert "dslide" not in output, output
        assert seconds >= 3
        return
    how_left = "sys.exit, exit code 3" if how.startswith("exit") else \
        "its script ended or raised SystemExit"
    assert code == (3 if how.startswith("exit") else 1), output
    assert (f"dslide: rank 1 left Python ({how_left}) while rank 0 waits for it in train: "
            f"ending every rank of the job (MPI_Abort)") in output, output
    assert seconds < 60


@pytest.mark.parametrize("how", ["mpi4py", "world"])
def test_two_ranks_train_as_the_executable(task, cli_model, tmp_path, how):
    if how == "mpi4py" and importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed")
    mpirun(sys.executable, os.path.join(HERE, "mpi_train.py"), tmp_path, task.train_file,
           task.test_file, how)
    ranks = [np.load(tmp_path / f"{how}-rank-{r}.npz") for r in (0, 1)]
    assert [int(r["ranks"]) for r in ranks] == [2, 2]
    assert [int(r["iteration"]) for r in ranks] == [20, 20]
    # Every rank gets the merged top-k, and the same evaluation.
    np.testing.assert_array_equal(ranks[0]["ids"], ranks[1]["ids"])
    np.testing.assert_array_equal(ranks[0]["scores"], ranks[1]["scores"])
    evals = [json.loads((tmp_path / f"{how}-rank-{r}.json").read_text()) for r in (0, 1)]
    for e in evals:
        e.pop("seconds")
    assert evals[0] == evals[1]
    # The 2-rank model is the executable's 2-rank model: the executable's predictions on one
    # rank from its own model equal the package's on two (ids exactly, scores to the
    # printed digits; the normaliser is summed in another order over two ranks).
    out = tmp_path / "cli.tsv"
    run_cli("predict", "--model", cli_model, "--input", task.test_file, "--top-k", 5,
            "--out", out)
    cli_ids, cli_scores = tasks.read_predictions(out)
    np.testing.assert_array_equal(ranks[0]["ids"], cli_ids)
    np.testing.assert_allclose(ranks[0]["scores"], cli_scores, rtol=1e-5)
    # The folder the 2 ranks saved loads on one rank (its shards re-cut) with equal weights,
    # which are those Model.weights() gathered on each of the 2 ranks.
    loaded = dslide.load(tmp_path / f"py_model_{how}")
    whole = loaded.weights()
    assert list(whole) == ["layer1", "layer2"]
    for name, layer in whole.items():
        for key, value in layer.items():
            for r in ranks:
                np.testing.assert_array_equal(r[f"{name}.{key}"], value)
    ids, scores = loaded.predict(task.Xt, k=5)
    np.testing.assert_array_equal(ids, cli_ids)
    np.testing.assert_allclose(scores, cli_scores, rtol=1e-5)
    # And the executable's evaluation of it is the package's on 2 ranks.
    line = run_cli("eval", "--model", tmp_path / f"py_model_{how}", "--test",
                   task.test_file).stdout
    assert f"P@1 {evals[0]['p_at_1']:.4f}" in line, line


def test_arguments_that_differ_between_ranks_raise_on_every_rank(task, tmp_path):
    """Different data on the ranks, or data that fails its checks on one rank only: every
    rank raises (none waits in a collective for ever), and the model still works."""
    mpirun(sys.executable, os.path.join(HERE, "mpi_train.py"), tmp_path, task.train_file,
           task.test_file, "mismatch", timeout=300)
    seen = [json.loads((tmp_path / f"mismatch-rank-{r}.json").read_text()) for r in (0, 1)]
    for s in seen:
        assert "train: the ranks were given different arguments" in s["train"]
        assert s["after"] == "ok"
    assert "predict: the arguments failed their checks on another rank" in seen[0]["predict"]
    assert "X: X row 0: feature" in seen[1]["predict"] and "nan" in seen[1]["predict"]


def test_a_callback_that_stops_the_run_raises_alike_on_every_rank(task, tmp_path):
    """Rank 0's callback raises: both ranks raise Stopped with the same message and the model
    of the same step, rank 0 from the callback's exception (no rank gets Interrupted)."""
    mpirun(sys.executable, os.path.join(HERE, "mpi_train.py"), tmp_path, task.train_file,
           task.test_file, "callback", timeout=300)
    seen = [json.loads((tmp_path / f"callback-rank-{r}.json").read_text()) for r in (0, 1)]
    for s in seen:
        assert s["raised"] == "Stopped", s
        # The ranks agree on the stop at the step after the callback's record.
        assert 4 <= s["iteration"] <= 5 and s["predicts"], s
    assert seen[0]["message"] == seen[1]["message"]
    assert seen[0]["iteration"] == seen[1]["iteration"]
    assert seen[0]["cause"] == "LookupError" and seen[1]["cause"] is None


def test_two_ranks_predict_from_the_exported_model(task, cli_model, tmp_path):
    """The serving model `export` writes, read by `predict` on 2 ranks (each its rows), gives
    the labels that one rank gives from the checkpoint (scores to the normaliser's order)."""
    served = tmp_path / "served.h5"
    run_cli("export", "--model", cli_model, "--out", served)
    one = tmp_path / "one.tsv"
    run_cli("predict", "--model", cli_model, "--input", task.test_file, "--top-k", 5,
            "--out", one)
    two = tmp_path / "two.tsv"
    mpirun(cli_path(), "predict", "--model", served, "--input", task.test_file, "--top-k", 5,
           "--out", two)
    ids1, scores1 = tasks.read_predictions(one)
    ids2, scores2 = tasks.read_predictions(two)
    np.testing.assert_array_equal(ids2, ids1)
    np.testing.assert_allclose(scores2, scores1, rtol=1e-5)
