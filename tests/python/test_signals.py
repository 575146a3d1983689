"""Ctrl-C during training, and the GIL released while C++ trains and predicts."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import dslide


def test_sigint_stops_after_the_step_with_the_model(task):
    """As a callback sees the first progress line, the process gets SIGINT (what Ctrl-C
    sends): the run ends after that step, raising KeyboardInterrupt with the model."""
    # Python's own handler, whatever the test runner was started with (a background job
    # starts with SIGINT ignored).
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupt_and_check(task)
    finally:
        signal.signal(signal.SIGINT, original)


def interrupt_and_check(task):
    sent = []

    def callback(o):
        if "loss" in o and not sent:
            sent.append(o["iter"])
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt) as caught:
        dslide.train((task.X, task.Y), iterations=100000, log_every=3, hidden=16, threads=1,
                     verbose=False, callback=callback)
    e = caught.value
    assert isinstance(e, dslide.Interrupted) and e.signal == "SIGINT"
    assert "stopped by SIGINT at iteration" in str(e)
    assert sent and sent[0] <= e.model.iteration < 100000
    ids, scores = e.model.predict(task.Xt, k=3)
    assert ids.shape == (task.Xt.shape[0], 3) and np.isfinite(scores).all()
    # Python's handler is back: the next Ctrl-C is Python's KeyboardInterrupt again.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)


def interrupt_script(script, *args):
    """Runs `script` (with SIGINT's default action), sends it SIGINT once its run has
    printed iteration 3, and returns (the process, its stdout, its stderr)."""
    p = subprocess.Popen([sys.executable, str(script), *map(str, args)], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    err = ""
    while "iter 3/" not in err:
        line = p.stderr.readline()
        assert line, f"the run ended early: {err}"
        err += line
    p.send_signal(signal.SIGINT)
    out, rest = p.communicate(timeout=120)
    return p, out, err + rest


def test_ctrl_c_in_a_script(task, tmp_path):
    """A script training for ever gets SIGINT from outside: it catches KeyboardInterrupt,
    saves the model, and the executable reads it."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        import dslide
        try:
            dslide.train({task.train_file!r}, iterations=10**6, log_every=1, hidden=16,
                         threads=1)
        except KeyboardInterrupt as e:
            e.model.save(sys.argv[1])
            print("saved", e.model.iteration, flush=True)
    """))
    p, out, err = interrupt_script(script, tmp_path / "m")
    assert p.returncode == 0, err
    assert "stop requested" in err
    iteration = int(out.split()[-1])
    assert iteration >= 3
    assert dslide.load(tmp_path / "m").iteration == iteration


def test_an_uncaught_interrupt_ends_the_process_by_the_signal(task, tmp_path):
    """Ctrl-C to a script that does not catch it: the traceback, then the process ends by
    SIGINT (status 130 in a shell), as Python ends on an uncaught KeyboardInterrupt; before,
    dslide.Interrupted, a subclass, exited 1."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        import dslide
        dslide.train({task.train_file!r}, iterations=10**6, log_every=1, hidden=16, threads=1)
    """))
    p, _, err = interrupt_script(script)
    assert p.returncode == -signal.SIGINT, err
    assert "dslide.Interrupted: stopped by SIGINT" in err


def test_the_gil_is_released(task):
    """While one thread trains (and then predicts), another keeps running Python."""
    done = threading.Event()
    result = {}

    def work():
        m = dslide.train((task.X, task.Y), iterations=150, hidden=64, threads=1,
                         verbose=False)
        t0 = time.monotonic()
        m.predict(task.Xt, k=5)
        result["predict_s"] = time.monotonic() - t0
        done.set()

    worker = threading.Thread(target=work)
    ticks = 0
    t0 = time.monotonic()
    worker.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    worker.join()
    elapsed = time.monotonic() - t0
    # Holding the GIL would block this loop for the whole run: it would tick a handful of
    # times (the GIL's switch interval is 5 ms, but C++ never gives it back).
    assert elapsed > 0.2
    assert ticks > elapsed * 100, (ticks, elapsed)
