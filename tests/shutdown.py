"""The end of a test session, as a plugin (tests/conftest.py imports its hook;
tests/core/test_suite_shutdown.py loads it alone)."""

from __future__ import annotations

import gc


def pytest_sessionfinish(session):
    """Collect the garbage now, then freeze what is left, so that pytest's own collection
    at unconfigure has nothing to do.  A pytest-xdist worker has reported that it finished
    by then, and execnet sends a worker that has not exited 5 s later a SIGINT: on a loaded
    machine that final collection of a worker's heap (finalizers of torch, onnxruntime and
    numba objects included) can take longer, the KeyboardInterrupt lands in a finalizer,
    and the run ended with a stray ``PytestUnraisableExceptionWarning ... KeyboardInterrupt``
    after its summary (tests/core/test_suite_shutdown.py)."""
    gc.collect()
    gc.freeze()
