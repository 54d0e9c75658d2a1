"""The test suite's own end: no stray ``PytestUnraisableExceptionWarning ...
KeyboardInterrupt`` after the summary (issue 36).  execnet sends a pytest-xdist worker
that has not exited 5 s after the run a SIGINT; tests/shutdown.py's ``pytest_sessionfinish`` (in tests/conftest.py)
does the final garbage collection before the worker reports that it finished."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: a cycle whose finalizer takes 7 s (sleeping, no CPU; execnet waits 5): freed only by a collection
SLOW_END = '''
import gc
import time


class Slow:
    def __del__(self):
        time.sleep(7)


def test_leaves_a_slow_cycle():
    gc.disable()  # the cycle waits for the collection at the end of the session
    s = Slow()
    s.me = s
'''


def test_a_slow_collection_at_the_end_is_not_interrupted(tmp_path):
    (tmp_path / "test_slow_end.py").write_text(SLOW_END)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider", "-p",
                        "tests.shutdown", "test_slow_end.py"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "1 passed" in out, out
    assert "PytestUnraisableExceptionWarning" not in out and "KeyboardInterrupt" not in out, out
