"""Ranks: the communicator of a collective call (MPI's world, an mpi4py communicator or one
process), the job guard that keeps a rank from leaving the others waiting, and _agree, the
check that every rank's arguments passed and are alike."""

from __future__ import annotations

import atexit
import hashlib
import sys

import numpy as np

from . import _core


_mpi_initialized_here = False
_abort_hook_installed = False


def _abort_on_uncaught_exception(comm):
    """With several ranks, an exception that nothing catches on one rank ends every rank
    (MPI_Abort) after its traceback: the others would otherwise wait in their next
    collective, and this one in MPI_Finalize, for ever."""
    global _abort_hook_installed
    if _abort_hook_installed or comm.size < 2:
        return comm
    _abort_hook_installed = True
    previous = sys.excepthook
    rank = comm.rank

    def hook(kind, value, tb):
        try:
            previous(kind, value, tb)
            sys.stderr.write(f"dslide: rank {rank} ended with an uncaught {kind.__name__}: "
                             f"ending every rank of the job (MPI_Abort)\n")
            sys.stderr.flush()
        finally:
            _core.mpi_abort(130 if issubclass(kind, KeyboardInterrupt) else 1)

    sys.excepthook = hook
    return comm


# A rank that leaves Python while the others are in (or go on to) a collective call would
# leave them waiting in it for ever, and itself in MPI_Finalize. The job guard
# (python/src/job_guard.h), made with the first communicator over all of MPI's world, prevents
# it: every collective call first enters the guard (a non-blocking barrier, polled), and when
# Python exits a rank tells the others that it leaves, with its exit code, and waits for them
# to leave too. A rank that finds another gone while it waits to enter a collective call
# prints who left and how, and ends the job (MPI_Abort, with that rank's exit code where it is
# a failure, else 1). A run whose ranks all end normally exits as before, silently.

#: Seconds that MPI_Finalize may take, once every rank has left, before a rank ends the job.
_FINALIZE_SECONDS = 10.0
_NO_EXIT = object()
_exit_status = _NO_EXIT  # what sys.exit was last called with, for the others' message


def _recording_exit(original):
    """sys.exit, recording its status: an atexit handler cannot learn the exit code."""

    def exit(status=None, /):  # noqa: A001: stands for sys.exit
        global _exit_status
        _exit_status = status
        original(status)

    exit.__doc__ = original.__doc__
    exit.__wrapped__ = original
    exit.records_exit_status = True
    return exit


def _exit_code() -> int:
    """The exit code of the sys.exit call that ends Python (-1 where none was made: the end of
    the script, or a SystemExit raised by the script itself)."""
    status = _exit_status
    if status is _NO_EXIT:
        return -1
    if status is None:
        return 0
    if isinstance(status, (int, np.integer)):
        return int(status) & 0xFF
    return 1  # Python prints it and exits 1


def _leave_the_job():
    """atexit: this rank leaves; returns once every other rank has left too."""
    _core.guard_leave(_exit_code())


def _finalize_mpi():
    """atexit, where the package initialised MPI (after _leave_the_job: every rank is here)."""
    code = _exit_code()
    _core.mpi_finalize(_FINALIZE_SECONDS, code if code > 0 else 1)


def _mpi_comm(handle: int, what: str):
    """The core's communicator over the MPI communicator `handle` (-1: the world), for the
    collective call `what`; the first that spans the world makes the job guard."""
    if _core.guard_start(handle):
        if not getattr(sys.exit, "records_exit_status", False):
            sys.exit = _recording_exit(sys.exit)
        atexit.register(_leave_the_job)  # before MPI_Finalize, which is registered earlier
    return _core.mpi_comm(handle, what)


def _communicator(comm, what: str):
    return _abort_on_uncaught_exception(_communicator_of(comm, what))


def _communicator_of(comm, what: str):
    """The core's communicator for `comm` (an mpi4py communicator, or None: MPI's world when
    started by an MPI launcher, else the in-process one), for the collective call `what`."""
    global _mpi_initialized_here
    if comm is None:
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            if mpi.COMM_WORLD.Get_size() > 1 or _core.launched_by_mpi():
                return _mpi_comm(mpi.COMM_WORLD.py2f(), what)
            return _core.local_comm()
        if not _core.launched_by_mpi():
            return _core.local_comm()
        if _core.mpi_initialize():
            _mpi_initialized_here = True
            atexit.register(_finalize_mpi)
        return _mpi_comm(-1, what)
    if isinstance(comm, _core.Comm):
        return comm
    py2f = getattr(comm, "py2f", None)
    if py2f is None:
        raise TypeError(
            f"comm: expected an mpi4py communicator (such as MPI.COMM_WORLD) or None, got "
            f"{type(comm).__name__}")
    return _mpi_comm(py2f(), what)


def _agree(comm, error, parts, what: str) -> None:
    """Collective with P > 1 ranks: every rank learns whether the arguments of a collective
    call passed their checks on every rank and are alike (different data on different ranks
    would train a mixed model, and a rank that raised alone would leave the others waiting
    for ever). Raises this rank's error, else a ValueError when another rank's failed or
    differs. With one rank: raises `error` if any."""
    if comm.size == 1:
        if error is not None:
            raise error
        return
    h = hashlib.blake2b(digest_size=8)
    for part in parts if error is None else []:
        h.update(repr(part).encode() if not isinstance(part, _core.Data)
                 else part.digest().to_bytes(8, "little"))
    ok, same = comm.agree(error is None, int.from_bytes(h.digest(), "little"), what)
    if error is not None:
        raise error
    if not ok:
        raise ValueError(f"{what}: the arguments failed their checks on another rank (its "
                         f"error is in that rank's output)")
    if not same:
        raise ValueError(
            f"{what}: the ranks were given different arguments; under MPI every rank calls "
            f"{what} with the same data and options (each rank holds all of the data, as "
            f"each rank of the executable reads the whole files)")
