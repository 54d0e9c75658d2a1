"""Ctrl-C during a run: the interpreter and every backend that runs step by step stop at
a consistent point, the partial report is the interpreter's configuration after that many
steps, and ``tm2nn run`` prints it and exits 130 (tm2nn.interrupt)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import tm2nn
from tm2nn import interrupt
from tm2nn.interp import run_machine
from tm2nn.ir import Machine
from tm2nn.syntax import parse_text

ROOT = Path(__file__).resolve().parents[3]

# Never halts: the head walks right forever, writing 1 0 1 0 ...
LOOP = """machine loop {
  alphabet: 0 1
  blank: 0
  states: A B H
  start: A
  halt: H
  A 0 -> 1 R B
  B 0 -> 0 R A
}
"""


@pytest.fixture(scope="module")
def loop() -> Machine:
    return parse_text(LOOP, "tm", "loop.tm")[0]


def _sigint() -> None:
    """SIGINT to the main thread, from another thread (a timer).  ``os.kill(getpid())``
    lets the kernel pick any thread that does not block it (torch's and onnxruntime's
    pools included), and then Python may run the handler late, in a later test."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def _ctrl_c() -> None:
    """Press Ctrl-C now, from the main thread: ``raise_signal`` runs the handler before
    it returns (inside interrupt.graceful: only the flag is set)."""
    signal.raise_signal(signal.SIGINT)


def _expected(m, steps: int) -> dict:
    return dict(tm2nn.run(m, "", steps))


def test_outside_graceful_ctrl_c_is_keyboard_interrupt():
    # Python's own handler for the test: a process started in the background by a
    # non-interactive shell inherits SIGINT ignored (Python then keeps SIG_IGN).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with interrupt.graceful():
            pass
        assert not interrupt.active() and not interrupt.requested()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # graceful put it back
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)


def test_interpreter_stops_at_a_chunk_boundary_with_the_exact_configuration(loop):
    with interrupt.graceful():
        _ctrl_c()
        with pytest.raises(interrupt.Interrupted) as e:
            tm2nn.run(loop, "", 10**12)
    assert not interrupt.requested()  # reset on leaving
    exc = e.value
    assert exc.total == 10**12 and 0 < exc.done < 10**12
    (rep,) = exc.reports
    assert rep["steps"] == exc.done and not rep["halted"]
    assert dict(rep) == _expected(loop, exc.done)


def test_a_run_that_ends_normally_is_not_reported_as_interrupted(loop):
    with interrupt.graceful():
        _ctrl_c()
        r = run_machine(loop, "", 10)  # ends by its bound inside the first chunk
    assert r.steps == 10


@pytest.mark.parametrize("backend,steps", [("transformer", 40), ("rcnn", 12), ("gd-trace", 12)])
def test_backend_partial_report_is_the_interpreters_configuration(loop, backend, steps):
    c = tm2nn.compile(loop, backend, steps=steps, **({"max_input": 0} if backend != "transformer" else {}))
    def press_at_5(done, total=None, description=None):
        if done == 5:
            _ctrl_c()
    with interrupt.graceful(), pytest.raises(interrupt.Interrupted) as e:
        c.run("", progress=press_at_5)
    exc = e.value
    assert exc.done is not None and exc.done < exc.total
    (rep,) = exc.reports
    assert rep is not None
    want = _expected(loop, rep["steps"])
    assert {k: rep[k] for k in ("state", "head", "tape", "steps")} == {k: want[k] for k in ("state", "head", "tape",
                                                                                          "steps")}


def test_second_ctrl_c_stops_at_once():
    with interrupt.graceful():
        _ctrl_c()
        with pytest.raises(KeyboardInterrupt) as e:
            _ctrl_c()
        assert not isinstance(e.value, interrupt.Interrupted)


def test_onnxruntime_run_is_cancelled(loop):
    c = tm2nn.compile(loop, "transformer", steps=3000)
    c.runner("onnxruntime")  # build the session first
    timer = threading.Timer(0.5, _sigint)
    timer.start()
    t0 = time.perf_counter()
    try:
        with interrupt.graceful(), pytest.raises(interrupt.Interrupted) as e:
            c.run(["", "", "", ""] * 8, engine="onnxruntime")
    finally:
        timer.cancel()  # never a Ctrl-C after the test
    assert e.value.note and "torch" in e.value.note
    assert time.perf_counter() - t0 < 30


def _sigint_caught(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGINT (Linux: /proc/PID/status SigCgt)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status (Linux)")
def test_cli_run_ctrl_c_prints_the_partial_report_and_exits_130(tmp_path):
    """Ctrl-C once the run has started.  The child starts with SIGINT ignored, so it has a
    handler exactly while ``interrupt.graceful`` is on (Python keeps an inherited SIG_IGN,
    as in a shell's background job): the signal is sent 0.2 s after the handler appears.
    (A fixed 4 s sleep let the run reach ~2·10^7 steps: an 18 MB report, recomputed here.)"""
    src = tmp_path / "loop.tm"
    src.write_text(LOOP)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the child
    try:
        p = subprocess.Popen([sys.executable, "-m", "tm2nn.cli", "run", str(src), "--max-steps", "1000000000000",
                              "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    finally:
        signal.signal(signal.SIGINT, old)
    try:
        deadline = time.monotonic() + 60
        while not _sigint_caught(p.pid):
            assert p.poll() is None and time.monotonic() < deadline, "the run never reached interrupt.graceful"
            time.sleep(0.02)
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130, err
    import json

    rep = json.loads(out)
    assert rep["interrupted"] is True and "interrupted after" in err and "Traceback" not in err
    assert 0 < rep["steps"] < 10**12
    m = parse_text(LOOP, "tm", "loop.tm")[0]
    want = _expected(m, rep["steps"])
    assert {k: rep[k] for k in ("state", "head", "tape")} == {k: want[k] for k in ("state", "head", "tape")}
