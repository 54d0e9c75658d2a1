"""Ctrl-C during a long run: stop at a step boundary and keep what was computed.

Inside :func:`graceful` (the CLI's ``run`` uses it), the first SIGINT only sets a flag.
The long loops poll it where their state is consistent (the interpreter every chunk of
steps, a network's loop or decoder every step, the gd-trace optimizer every step) and
raise :class:`Interrupted`, carrying how far they got and what they computed so far; a
backend decodes that into a partial report, and the CLI prints it and exits 130.  A
second Ctrl-C raises :class:`KeyboardInterrupt` at once.  Outside :func:`graceful` (the
Python API, tests) nothing changes: SIGINT is Python's KeyboardInterrupt, and the
polls cost one global read.

SIGTERM (what ``timeout``, ``kill`` and schedulers send) is an interruption too, inside
:func:`terminating` (the CLI's ``main``): it raises :class:`Terminated`, a
``KeyboardInterrupt``, wherever the program is, so the same cleanup runs as for Ctrl-C
(a file being written keeps its old content and its temporary file is removed,
:mod:`tm2nn.fileio`), and the CLI prints one line and exits 143 (128 + 15).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from tm2nn.errors import Tm2nnError

_active = False
_requested = False


class Interrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C at a consistent point: ``done`` of ``total`` steps
    (``what`` says which: "steps", "network steps", "optimizer steps"), the ``partial``
    values computed so far (for the backend to decode) and, once decoded, ``reports``
    (one per input run, or None where nothing could be decoded)."""

    def __init__(self, done: int | None = None, total: int | None = None, *, partial=None, reports=None,
                 what: str = "steps", note: str | None = None):
        super().__init__(f"interrupted after {done:,} of {total:,} {what}" if done is not None else "interrupted")
        self.done, self.total, self.what = done, total, what
        self.partial, self.reports, self.note = partial, reports, note


class Terminated(KeyboardInterrupt):
    """SIGTERM, inside :func:`terminating`: unwinds like Ctrl-C; the CLI exits
    :attr:`exit_code`."""

    exit_code = 128 + signal.SIGTERM

    def __init__(self):
        super().__init__("terminated (SIGTERM)")


@contextlib.contextmanager
def terminating():
    """Turn SIGTERM into :class:`Terminated` (main thread only; elsewhere this does
    nothing).  A second SIGTERM while the first unwinds is ignored, so the cleanup it
    runs is not cut short (SIGKILL still stops the process).  A process forked inside
    dies of SIGTERM as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pid, raised = os.getpid(), []

    def on_sigterm(signum, frame):
        if os.getpid() != pid:  # a forked child: the default action
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if not raised:
            raised.append(True)
            raise Terminated

    old = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def active() -> bool:
    """Whether Ctrl-C is being turned into a flag (inside :func:`graceful`)."""
    return _active


def requested() -> bool:
    """Whether Ctrl-C was pressed inside :func:`graceful` (loops poll this)."""
    return _requested


@contextlib.contextmanager
def graceful():
    """Turn the first Ctrl-C into a flag for the loops to poll (main thread only;
    elsewhere this does nothing)."""
    global _active, _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum, frame):
        global _requested
        if _requested:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        _requested = True

    old = signal.signal(signal.SIGINT, on_sigint)
    _active, _requested = True, False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        _active, _requested = False, False


def run_blocking(call, cancel, period: float = 0.1):
    """``call()`` (a C call that does not return to Python until done, e.g. an
    onnxruntime run) in a worker thread, so Ctrl-C can ``cancel()`` it; raises
    :class:`Interrupted` when it was cancelled.  Outside :func:`graceful`, just ``call()``."""
    if not _active:
        return call()
    out: dict = {}

    def work():
        try:
            out["value"] = call()
        except BaseException as e:  # handed to the caller's thread
            out["error"] = e
    t = threading.Thread(target=work, daemon=True)
    t.start()
    while t.is_alive():
        t.join(period)
        if _requested and t.is_alive():
            cancel()
            t.join()
            raise Interrupted(note="the engine ran the whole loop as one call, so it kept no partial run "
                              "(--engine torch keeps the run so far)")
    if "error" in out:
        raise out["error"]
    return out["value"]


@contextlib.contextmanager
def partial_reports(texts: list[str], decode):
    """Around a network run of ``texts``: when it is interrupted with the values computed
    so far (batch-major, one row per input), attach ``decode(row, text)`` for each input
    to the :class:`Interrupted` (a decode that fails leaves that report None)."""
    try:
        yield
    except Interrupted as e:
        rows = e.partial
        if e.reports is None and rows is not None and len(rows) == len(texts):
            e.reports = [_try(decode, _numpy(r), t) for r, t in zip(rows, texts)]
        raise


def _numpy(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def _try(decode, row, text):
    try:
        return decode(row, text)
    except (Tm2nnError, ValueError, IndexError):  # a half-finished state that does not decode
        return None
