"""The standing fuzz suite's harness (tests/test_fuzz_*.py).

:func:`run_case` runs ``tm2nn.cli.main(argv)`` in-process with its output captured and a
wall-clock limit, and :func:`assert_clean` checks the only outcomes allowed: exit 0 or 1,
or exit 2 with tm2nn's own one-line message (``file:line:col: error: ...`` or
``tm2nn: error: ...``), never another exception, never a traceback, never a hang.

Profiles: the fast one runs with the suite (CI); the long one (:data:`LONG_FACTOR` times
the cases) runs only when asked: ``make fuzz`` (``TM2NN_FUZZ=long``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import time

import pytest

#: Cases of the long profile per case of the fast one.
LONG_FACTOR = 10
#: A case that runs longer than this (seconds) is a hang.
CASE_TIMEOUT = 30.0
#: The memory a fuzz case may plan to use (``--max-memory``): refusals come before allocation.
FUZZ_MEMORY = "3G"

_MESSAGE = re.compile(r"^(tm2nn|\S.*?)(:\d+:\d+)?: (error|warning): ", re.M)


class Hang(BaseException):
    """A case ran past :data:`CASE_TIMEOUT` (a BaseException, so no ``except Exception``
    inside tm2nn swallows it)."""


def long_profile(test):
    """A test of the long profile: marked slow, and skipped unless ``TM2NN_FUZZ=long``."""
    skip = pytest.mark.skipif(os.environ.get("TM2NN_FUZZ") != "long", reason="the long fuzz profile: make fuzz")
    return skip(pytest.mark.slow(test))


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`Hang` in the main thread after ``seconds`` (SIGALRM)."""
    def on_alarm(signum, frame):
        raise Hang(f"no answer after {seconds:g} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_case(argv: list[str], timeout: float = CASE_TIMEOUT) -> tuple[int, str, str, float]:
    """``(exit code, stdout, stderr, seconds)`` of ``tm2nn argv`` run in-process.  A foreign
    exception or a hang fails the calling test, naming the command line."""
    from tm2nn.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    try:
        with time_limit(timeout), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in argv])
    except Hang:
        raise AssertionError(f"hang (> {timeout:g} s): tm2nn {_shell(argv)}") from None
    except BaseException as e:  # noqa: BLE001 - what the fuzz looks for
        raise AssertionError(f"foreign exception {type(e).__name__}: {e!s:.300} from: tm2nn {_shell(argv)}") from e
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def assert_clean(code: int, out: str, err: str, argv) -> None:
    """The outcome is one tm2nn allows (see the module doc)."""
    cmd = f"tm2nn {_shell(argv)}"
    assert code in (0, 1, 2), f"exit {code} from: {cmd}\n{err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in out, f"traceback from: {cmd}\n{err[-2000:]}"
    if code == 2:
        assert _MESSAGE.search(err), f"exit 2 without a tm2nn error message from: {cmd}\n{err[-2000:]!r}"


def _shell(argv) -> str:
    import shlex

    return " ".join(shlex.quote(str(a)) for a in argv)
