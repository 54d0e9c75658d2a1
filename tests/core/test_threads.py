"""The thread counts (tm2nn.threads): decided in one place and applied to torch,
onnxruntime and numba when tm2nn uses them; ``TM2NN_THREADS`` and ``--threads`` override
them.  Counts, not timings: the timings are docs/benchmarks.md's "Threads".  The suite runs
one thread (tests/conftest.py); each test here sets its own and puts that back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tm2nn import threads
from tm2nn.errors import OptionError

ROOT = Path(__file__).resolve().parents[2]

def _probe(monkeypatch, env: str | None) -> dict:
    """torch and numba on 2 threads (their default on 2 cores) before tm2nn runs, then a
    small compile and run on each engine: the counts each library was left with."""
    import numba
    import numpy as np
    import torch

    import tm2nn
    from tm2nn import emit
    from tm2nn.syntax import load

    if env is None:
        monkeypatch.delenv(threads.ENV, raising=False)
    else:
        monkeypatch.setenv(threads.ENV, env)
    torch.set_num_threads(2)
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        c = tm2nn.compile(load(ROOT / "examples" / "bb3.tm"), "transformer", steps=12)
        c.run("", engine="torch")
        out = {"torch": torch.get_num_threads(),
               "onnxruntime": emit.onnx_session(c.onnx()).get_session_options().intra_op_num_threads}
        r = tm2nn.compile(load(ROOT / "examples" / "full_adder.circ"), "relu-circuit")
        r.runner("fused")(np.zeros((4, 3)))
        out.update(numba=numba.get_num_threads(), numba_pool=numba.config.NUMBA_NUM_THREADS,
                   policy={k: threads.count(k) for k in threads.DEFAULTS})
    finally:  # the suite's one thread again (tests/conftest.py)
        monkeypatch.setenv(threads.ENV, "1")
        threads.set_threads(None)
    return out


def test_the_policy_counts_are_applied_to_every_library(monkeypatch):
    got = _probe(monkeypatch, None)
    assert got["policy"] == {k: max(1, min(n, len(os.sched_getaffinity(0)))) for k, n in threads.DEFAULTS.items()}
    assert got["torch"] == got["onnxruntime"] == got["policy"][threads.STEP]
    assert got["numba"] == min(got["policy"][threads.BULK], got["numba_pool"])


def test_the_environment_overrides_every_count(monkeypatch):
    got = _probe(monkeypatch, "3")
    assert got["policy"] == {k: 3 for k in threads.DEFAULTS}
    assert got["torch"] == got["onnxruntime"] == 3
    assert got["numba"] == min(3, got["numba_pool"])


def test_the_flag_sets_the_count_for_one_command(run_cli, monkeypatch):
    """``--threads 2`` reaches torch during the command; after it the default is back."""
    import torch

    asked = []
    real = torch.set_num_threads
    real(1)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (asked.append(n), real(n)))
    r = run_cli("run", ROOT / "examples" / "bb3.tm", "--backend", "transformer", "--threads", "2")
    assert r.code == 0, r.err
    assert 2 in asked and torch.get_num_threads() == threads.count() == 1, asked  # conftest: TM2NN_THREADS=1


@pytest.mark.parametrize("argv,env,message", [
    (["--threads", "0"], None, "--threads: expected an integer in [1, 4096], got 0"),
    (["--threads", "2147483648"], None, "--threads: expected an integer in [1, 4096], got 2147483648"),
    (["--threads", "two"], None, "--threads: expected an integer in [1, 4096], got 'two'"),
    ([], "0", "TM2NN_THREADS: expected an integer in [1, 4096], got '0'"),
    ([], "lots", "TM2NN_THREADS: expected an integer in [1, 4096], got 'lots'"),
])
def test_a_bad_count_is_one_line_and_exit_2(run_cli, monkeypatch, argv, env, message):
    if env is not None:
        monkeypatch.setenv(threads.ENV, env)
    r = run_cli("run", ROOT / "examples" / "bb3.tm", "--backend", "transformer", *argv)
    assert r.code == 2 and r.err.strip().splitlines() == [f"tm2nn: error: {message}"], r.err
    monkeypatch.setenv(threads.ENV, "1")
    threads.set_threads(None)


def test_set_threads_checks_its_count():
    with pytest.raises(OptionError, match=r"threads: expected an integer in \[1, 4096\], got 0"):
        threads.set_threads(0)
    with pytest.raises(ValueError, match="unknown kind"):
        threads.count("huge")
