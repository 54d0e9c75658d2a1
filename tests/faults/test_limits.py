"""Issue 40, the memory limit as a whole (point 6), allocation failures as one line
(point 8, rcnn verify under an address-space cap) and coverage in every report (point 9).

The subprocess tests set ``TM2NN_MEMORY_OVERHEAD`` low so that a small job shows the
guarantee: peak RSS (``ru_maxrss`` of the child) within the limit plus the overhead, and
a one-line error, exit 2, where the job would have gone past it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tm2nn
from tm2nn.sweep.report import render, summarize
from tm2nn.sweep.tasks import run_task

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"
MB = 2**20
#: what the watchdog may overshoot by: PERIOD (20 ms) of allocation, the GIL's switch
#: interval, and the unwinding
SLACK = 48 * MB


#: run first in each child: at exit, write the child's own peak RSS (VmHWM, reset at exec;
#: ru_maxrss is not: it keeps the forking pytest's size) to the file $PEAK_FILE
_PEAK = ("import atexit, os\n"
         "def _peak():\n"
         "    hwm = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
         "    open(os.environ['PEAK_FILE'], 'w').write(hwm)\n"
         "atexit.register(_peak)\n")


def _capped(argv, limit: str, overhead: str, tmp_path: Path, code: str | None = None, timeout: float = 60):
    """``tm2nn ARGV`` (or ``python -c CODE``) under TM2NN_MAX_MEMORY=limit with the
    overhead ``overhead``: (exit code, stderr, the child's peak RSS in bytes)."""
    peak_file = tmp_path / "peak"
    env = dict(os.environ, TM2NN_MAX_MEMORY=limit, TM2NN_MEMORY_OVERHEAD=overhead, PEAK_FILE=str(peak_file))
    code = _PEAK + (code or f"import sys\nfrom tm2nn.cli import main\nsys.exit(main({[str(a) for a in argv]!r}))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, r.stderr, int(peak_file.read_text()) * 1024


def _one_error(code, err) -> str:
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tm2nn: error: "), err
    return lines[0]


# -- point 6: the limit holds for what tm2nn builds without an estimate --------------------------
def test_a_run_past_the_limit_is_stopped_within_limit_plus_overhead(tmp_path):
    """issue 40, point 6: with TM2NN_MAX_MEMORY set, the interpreter's result of a machine
    that writes 1.5 million cells (a dict of about 150 MB) ran to the end at 3x the
    limit plus overhead, unrefused; now it is refused (exit 2) within limit + overhead."""
    tm = tmp_path / "runaway.tm"
    tm.write_text("machine runaway {\n  alphabet: 0 1\n  blank: 0\n  states: A Z\n  start: A\n  halt: Z\n"
                  "  A 0 -> 1 R A\n  A 1 -> 1 R Z\n}\n")
    code, err, peak = _capped(["run", tm, "--max-steps", 1_500_000], "16M", "64M", tmp_path)
    line = _one_error(code, err)
    assert "1,500,000 non-blank cells" in line or "out of memory" in line, line
    assert peak <= (16 + 64) * MB + SLACK, peak / MB


WATCHED = """
import sys
import time
from tm2nn import cli
def grow(args):  # an allocation no estimate knows: 10 MB a step every 10 ms, up to 400 MB
    keep = []
    for _ in range(40):
        keep.append(b"x" * (10 << 20))
        time.sleep(0.01)
    return 0
cli._VERBS["check"] = grow
sys.exit(cli.main(["check", "examples/bb3.tm"]))
"""


def test_the_watchdog_stops_an_unestimated_allocation_in_the_cli(tmp_path):
    """issue 40, point 6: an allocation no estimate covers (400 MB in 10 MB steps) under
    TM2NN_MAX_MEMORY=16M: old main ran it to the end (exit 0, 450 MB); now the watchdog
    stops it at the limit plus the overhead with one line and exit 2.  The bound is the
    ceiling plus one call's allocation plus what memwatch.PERIOD (20 ms) of allocation
    adds, so the allocation runs at a known rate (1 GB/s at most): unpaced, a quiet
    machine's memset adds 70 MB in one period and the slack below is not the bound's."""
    code, err, peak = _capped(None, "16M", "64M", tmp_path, code=WATCHED)
    line = _one_error(code, err)
    assert "out of memory: peak" in line and "over the limit of 16 MB (+ overhead 64 MB)" in line, line
    assert peak <= (16 + 64) * MB + SLACK, peak / MB


def test_the_watchdog_wakes_a_main_thread_that_waits(tmp_path):
    """issue 40, point 6: the main thread blocked in a wait (a worker thread allocating)
    is woken by the watchdog's signal, not left waiting for the work to end."""
    code = """
import threading, time, sys
from tm2nn import limits, memwatch
keep = []
def work():
    for _ in range(60):
        keep.append(b"x" * (10 << 20)); time.sleep(0.01)
    time.sleep(30)
limits.set_memory_limit(16 << 20)
t0 = time.monotonic()
try:
    with memwatch.watching():
        t = threading.Thread(target=work, daemon=True); t.start(); t.join()
except memwatch.MemoryLimitExceeded as e:
    print(f"stopped {e.peak >> 20} {time.monotonic() - t0:.1f}", file=sys.stderr); sys.exit(2)
sys.exit(0)
"""
    rc, err, peak = _capped(None, "16M", "64M", tmp_path, code=code)
    assert rc == 2 and err.startswith("stopped"), err
    assert float(err.split()[2]) < 10 and peak <= (16 + 64) * MB + SLACK


# -- point 8: an allocation failure inside torch or onnxruntime is the one-line error -------------
ALLOCATION_ERRORS = [
    ("torch", lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate "
                                   "memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)")),
    ("onnxruntime", lambda: __import__("onnxruntime.capi.onnxruntime_pybind11_state", fromlist=["x"]).RuntimeException(
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory for requested buffer of size 1024")),
]


@pytest.mark.parametrize("engine,error", ALLOCATION_ERRORS, ids=[e for e, _ in ALLOCATION_ERRORS])
def test_an_allocation_failure_in_verify_is_one_line(run_cli, monkeypatch, engine, error):
    """issue 40, point 8: rcnn verify under ``ulimit -v 2G`` gave torch's RuntimeError
    (a traceback): an allocation failure in torch or onnxruntime while verifying is now
    ``tm2nn: error: out of memory (...)``, exit 2."""
    from tm2nn.backends.rcnn.checker import GridChecker

    def fail(self, eng, texts, prepared):
        if eng == engine:
            raise error()
        return real(self, eng, texts, prepared)
    real = GridChecker.check
    monkeypatch.setattr(GridChecker, "check", fail)
    r = run_cli("verify", EX / "bb3.tm", "--backend", "rcnn", "--steps", "4", "--input", "1", "--json")
    line = _one_error(r.code, r.err)
    assert line.startswith("tm2nn: error: out of memory (") and "allocate" in line, line


def test_another_runtime_error_is_not_called_out_of_memory(run_cli, monkeypatch):
    """issue 40, point 8: only allocation failures become the out-of-memory line; any
    other RuntimeError (a bug) still propagates."""
    from tm2nn.backends.rcnn.checker import GridChecker

    def fail(self, eng, texts, prepared):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)")
    monkeypatch.setattr(GridChecker, "check", fail)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        run_cli("verify", EX / "bb3.tm", "--backend", "rcnn", "--steps", "4", "--input", "1")


# -- point 9: every report says what share of its input space it covered --------------------------
@pytest.fixture
def wide32(xor_circuit) -> Path:
    return xor_circuit(32)


def test_a_random_verify_of_one_input_is_not_complete(run_cli, wide32):
    """issue 40, point 9: ``verify --json`` said ``"complete": true`` for a random run that
    checked 1 input of 2^32; now it is false, with the space and the coverage."""
    r = run_cli("verify", wide32, "--backend", "relu-circuit", "--samples", "1", "--seed", "1", "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["mode"] == "random" and d["n_inputs"] == 1 and d["complete"] is False
    assert d["space"] == 2**32 and d["distinct"] == 1 and d["coverage"] == pytest.approx(2.0**-32)
    assert d["covered"] == "checked 1 of 4,294,967,296 inputs (2.3e-10)"
    r = run_cli("verify", wide32, "--backend", "relu-circuit", "--samples", "1", "--seed", "1")
    assert "coverage: checked 1 of 4,294,967,296 inputs (2.3e-10)" in r.out


def test_an_exhaustive_verify_is_complete_only_when_it_checked_every_input():
    """issue 40, point 9: ``complete`` means every input of the space, in every mode."""
    c = tm2nn.compile(EX / "full_adder.circ", "relu-circuit")
    rep = c.verify(onnx=False)
    assert rep.mode == "exhaustive" and rep.complete and rep.coverage == 1.0 and rep.space == rep.distinct == 8
    given = c.verify(["110", "110", "001"], onnx=False)
    assert given.distinct == 2 and given.space == 8 and given.coverage == 0.25 and not given.complete


def test_a_sweep_row_of_a_cut_exhaustive_check_is_not_a_plain_ok(tmp_path):
    """issue 40, point 9: a sweep row was ``ok`` for an exhaustive verify cut to 1 of 32
    inputs; the row now carries coverage, space and complete, and ``sweep report`` reads
    "ok, 1 of 32 inputs"."""
    names = [f"x{i}" for i in range(5)]
    circ = tmp_path / "five.circ"
    circ.write_text(f"circuit five {{\n  input {' '.join(names)}\n  output y\n  y = XOR({', '.join(names)})\n}}\n")
    task = {"task_id": "t1", "kind": "verify", "source": str(circ), "backend": "relu-circuit", "options": {},
            "args": {"budget": 1e-9, "onnx": False}}
    row = run_task(task)
    fig = json.loads(row["figures"])
    assert row["outcome"] == "ok" and fig["n_inputs"] == 1
    assert fig["space"] == 32 and fig["distinct"] == 1 and fig["coverage"] == 1 / 32 and fig["complete"] is False
    summary = summarize([row])
    assert summary["partial"]["tasks"] == 1 and summary["partial"]["first"][0]["text"] == "ok, 1 of 32 inputs"
    assert summary["groups"][0]["partial"] == 1
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    render(summary, console)
    assert "ok, 1 of 32 inputs" in console.export_text()


def test_eval_of_an_empty_inputs_file_is_an_error(run_cli, tmp_path):
    """issue 40, point 9: ``eval --inputs EMPTYFILE`` exited 0 with no output; now it is
    a one-line error, exit 2, and eval's report says how many inputs it ran."""
    model = tmp_path / "fa.onnx"
    tm2nn.compile(EX / "full_adder.circ", "relu-circuit").save(model)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    r = run_cli("eval", model, "--inputs", empty)
    line = _one_error(r.code, r.err)
    assert "--inputs" in line and "holds no input" in line
    two = tmp_path / "two.txt"
    two.write_text("110\n011\n")
    r = run_cli("eval", model, "--inputs", two)
    assert r.code == 0 and "ran 2 inputs: 2 agree with" in r.out, r.out
