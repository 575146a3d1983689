"""The exceptions a run ends with (Interrupted, Stopped, Diverged), and the hook that ends
the process by the signal when an Interrupted goes uncaught."""

from __future__ import annotations

import os
import signal as _signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._model import Model


class Interrupted(KeyboardInterrupt):
    """Training stopped by a signal (Ctrl-C: SIGINT; also SIGTERM, SIGUSR1) after its current
    step. ``model`` holds the model of the last step (as trained so far: a --keep-best
    selection is not applied), ``signal`` the signal's name; the message is the executable's
    ("stopped by SIGINT at iteration 58 of 3000; ...")."""

    def __init__(self, message: str, model: "Model | None", signal: str):
        super().__init__(message)
        self.model = model
        self.signal = signal


def _die_by_uncaught_interrupt(previous):
    """sys.excepthook: an Interrupted that nothing catches ends the process as Python ends it
    on an uncaught KeyboardInterrupt (by the signal itself: exit status 130 for SIGINT, as
    shells and schedulers read it), which Python does for KeyboardInterrupt alone, not for
    its subclasses (they would exit 1)."""

    def hook(kind, value, tb):
        previous(kind, value, tb)
        if issubclass(kind, Interrupted):
            sig = getattr(_signal, str(getattr(value, "signal", "")), _signal.SIGINT)
            sys.stderr.flush()
            sys.stdout.flush()
            _signal.signal(sig, _signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    return hook


class Stopped(Exception):
    """Training stopped because the callback raised (its own stopping rule, say) after its
    current step: on every rank alike, though the callback runs on rank 0 alone. ``model``
    holds the model of the last step (as trained so far: a --keep-best selection is not
    applied); on rank 0 ``__cause__`` is the callback's exception."""

    def __init__(self, message: str, model: "Model | None"):
        super().__init__(message)
        self.model = model


class Diverged(RuntimeError):
    """Training stopped because the loss diverged (the executable's exit 3), with its message
    (the iteration, the loss and advice). ``model`` holds the state of the last step."""

    def __init__(self, message: str, model: "Model | None"):
        super().__init__(message)
        self.model = model


sys.excepthook = _die_by_uncaught_interrupt(sys.excepthook)
