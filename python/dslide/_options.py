"""Options as the executable's option table spells them (train()'s keywords to its
command-line pairs, their help) and a run's progress events (_Events) on the calling
thread."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import sys

import numpy as np

from . import _core
from ._data import fspath


def _text(key: str, value) -> str:
    """An option's value as the command line writes it."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, os.PathLike)):
        return fspath(value)
    if isinstance(value, (list, tuple)) and value:
        if any(isinstance(v, (list, tuple)) for v in value):
            raise TypeError(f"option {key}: a list of numbers or names, not of lists")
        return ",".join(_text(key, v) for v in value)
    raise TypeError(f"option {key}: unsupported value {value!r} ({type(value).__name__})")


_option_names = None


def _known_option(key: str) -> bool:
    global _option_names
    if _option_names is None:
        _option_names = set(re.findall(r"^\s+--([a-z0-9-]+)", _core.train_help(), re.M))
    return key.replace("_", "-") in _option_names


def _pairs(options: dict) -> list:
    pairs = []
    for key, value in options.items():
        if key == "help":
            raise ValueError("option --help: not an option here; dslide.options_help() gives "
                             "the text of dslide train --help")
        if value is None:
            continue
        try:
            text = _text(key, value)
        except TypeError:
            if _known_option(key):
                raise
            # A data set under a misspelt name (validation=(X, Y)): say so, not its value's.
            near = difflib.get_close_matches(key, ["train", "test", "valid"], n=1)
            raise TypeError(f"train() got an unknown keyword {key}=: no option of dslide train "
                            f"(dslide.options_help() lists them), and the data sets are train, "
                            f"test and valid" + (f"; did you mean {near[0]}=?" if near else "")
                            ) from None
        if text == "":
            # As the executable says for `--checkpoint-dir ""` (the parser would say that the
            # value "should follow immediately after the equal sign").
            raise ValueError(f"option --{key.replace('_', '-')}: an empty value (leave the "
                             f"option out to go without it)")
        pairs.append((key.replace("_", "-"), text))
    return pairs


def options_help() -> str:
    """The text of ``dslide train --help``: every keyword of train() (dashes as
    underscores) with its default."""
    return _core.train_help()


# --- progress ----------------------------------------------------------------------------

class _Events:
    """A run's events as _core.train hands them over, on the thread that trains, with the GIL
    held: its lines to standard error (when verbose), its records to the callback (as dicts),
    its warnings to standard error. A callback that raises stops the run after its current
    step; train() raises Stopped from the exception."""

    def __init__(self, verbose: bool, callback):
        self.verbose = verbose
        self.callback = callback
        self.error = None

    def line(self, text: str):
        if self.verbose:
            self.warning(text)

    @staticmethod
    def warning(text: str):
        with contextlib.suppress(Exception):
            sys.stderr.write(text)
            sys.stderr.flush()

    def record(self, text: str):
        if self.callback is None or self.error is not None:
            return
        try:
            self.callback(json.loads(text))
        except BaseException as e:  # noqa: BLE001: handed to the caller
            self.error = e
            _core.request_stop()
