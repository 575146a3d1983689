"""Run under mpirun by test_mpi.py: trains on every rank (model-parallel), predicts and
evaluates (collective), saves the model, and writes what each rank got (predictions, the
whole weights) to OUT/HOW-rank-R.npz.

Usage: mpi_train.py OUT TRAIN_FILE TEST_FILE
           mpi4py|world|mismatch|raise[-mpi4py]|exit[-mpi4py]|end[-mpi4py]|late
  mpi4py:   comm=MPI.COMM_WORLD from mpi4py (which initialises MPI)
  world:    no mpi4py; the package's default (MPI's world, initialised by the extension)
  mismatch: arguments that differ between the ranks, or fail on one rank only, raise on every
            rank (no rank waits for ever); writes OUT/mismatch-rank-R.json
  raise:    after training, rank 1's own code raises and nothing catches it, while rank 0
            trains on (a collective): the job must end, not wait for ever (raise-mpi4py:
            the same with mpi4py's communicator)
  exit:     after training, rank 1 calls sys.exit(3) while rank 0 trains on: the job must end
            with rank 1's code, not wait for ever (exit-mpi4py: with mpi4py's communicator)
  end:      the same, rank 1's script ending there (exit code 0)
  late:     rank 1's script ends after training, rank 0's 3 s later, with no call of the
            package in between: a normal end (exit code 0, nothing printed)
"""

import json
import os
import sys
import time

out, train_file, test_file, how = sys.argv[1:5]
if how.endswith("mpi4py"):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
else:
    comm = None
    assert "mpi4py" not in sys.modules

import numpy as np  # noqa: E402

import dslide  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402

X, Y, _ = tasks.read_xc(train_file)
Xt, Yt, _ = tasks.read_xc(test_file)

if how == "mismatch":
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    seen = {}

    def attempt(what, call):
        try:
            call()
            seen[what] = "ok"
        except ValueError as e:
            seen[what] = str(e)

    # Rank 1 trains on one point fewer.
    attempt("train", lambda: dslide.train((X[: 1000 - rank], Y[: 1000 - rank]), iterations=2,
                                          hidden=8, threads=1, verbose=False))
    model = dslide.train((X, Y), iterations=2, hidden=8, threads=1, verbose=False)
    bad = Xt[:10].copy()
    if rank == 1:
        bad.data[0] = np.nan
    attempt("predict", lambda: model.predict(bad))
    attempt("after", lambda: model.predict(Xt[:10]))
    with open(os.path.join(out, f"mismatch-rank-{model.rank}.json"), "w") as f:
        json.dump(seen, f)
    sys.exit(0)
if how == "callback":
    # Rank 0's callback stops the run: every rank raises Stopped with the model of that step.
    def callback(o):
        if o.get("iter") == 4:
            raise LookupError("enough")

    try:
        dslide.train((X, Y), iterations=100000, log_every=2, hidden=8, threads=1,
                     verbose=False, callback=callback)
        seen = {"raised": None}
    except Exception as e:  # noqa: BLE001: what each rank raised, for the test to compare
        m = getattr(e, "model", None)
        seen = {"raised": type(e).__name__, "message": str(e),
                "cause": type(e.__cause__).__name__ if e.__cause__ else None,
                "iteration": m.iteration if m is not None else None,
                "predicts": m is not None and m.predict(Xt[:4], k=2)[0].shape == (4, 2)}
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    with open(os.path.join(out, f"callback-rank-{rank}.json"), "w") as f:
        json.dump(seen, f)
    sys.exit(0)
if how.startswith("raise"):
    model = dslide.train((X, Y), iterations=2, hidden=8, threads=1, verbose=False, comm=comm)
    if model.rank == 1:
        raise RuntimeError("user code failed on rank 1")
    dslide.train((X, Y), iterations=100000, hidden=8, threads=1, verbose=False, comm=comm)
    sys.exit(0)
if how.startswith(("exit", "end", "late")):
    model = dslide.train((X, Y), iterations=2, hidden=8, threads=1, verbose=False, comm=comm)
    if model.rank == 1 and how.startswith("exit"):
        sys.exit(3)
    if model.rank == 0 and how == "late":
        time.sleep(3)
    elif model.rank == 0:
        dslide.train((X, Y), iterations=100000, hidden=8, threads=1, verbose=False, comm=comm)
        sys.exit(0)
if how in ("mpi4py", "world"):
    model = dslide.train((X, Y), test=(Xt, Yt), iterations=20, hidden=32, seed=5, threads=1,
                         verbose=False, comm=comm)
    ids, scores = model.predict(Xt, k=5)
    result = model.evaluate(Xt, Yt)
    model.save(os.path.join(out, f"py_model_{how}"))
    weights = {f"{name}.{key}": value for name, layer in model.weights().items()
               for key, value in layer.items()}
    np.savez(os.path.join(out, f"{how}-rank-{model.rank}.npz"), ids=ids, scores=scores,
             ranks=model.ranks, iteration=model.iteration, **weights)
    with open(os.path.join(out, f"{how}-rank-{model.rank}.json"), "w") as f:
        json.dump(result, f)
