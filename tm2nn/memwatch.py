"""The memory limit as a guarantee: a watchdog on the process's resident memory, and one
message for every way an allocation can fail.

:func:`tm2nn.limits.check_memory` refuses, before the work starts, what tm2nn can estimate.
What it cannot (an estimate that is missing, a library's own buffers) is caught here:

* **The watchdog.**  Inside :func:`watching`, when a limit was *set* (``--max-memory``,
  ``TM2NN_MAX_MEMORY`` or :func:`tm2nn.limits.set_memory_limit`), a thread reads the
  resident set size (``/proc/self/statm``) every :data:`PERIOD` seconds.  Past the limit
  plus :data:`OVERHEAD` (the baseline every command may use: Python, torch, onnxruntime
  and numba loaded, numba's compiler at work) it raises :class:`MemoryLimitExceeded` in the
  main thread (a signal to it, so a wait in a system call is woken too).  The exception is
  raised at the main thread's next Python instruction: one C call (a numpy or torch
  operation, a JSON parse) runs to its end first, so the bound is the limit, plus the
  overhead, plus what one such call allocates and what ``PERIOD`` of allocation adds.
  With no limit set (the default is a share of the memory available when asked) nothing
  is watched: the estimates and the allocation failures below still hold.
* **Allocation failures** inside numpy (``MemoryError``), torch (``RuntimeError:
  DefaultCPUAllocator: can't allocate memory``) or onnxruntime (``Failed to allocate``),
  e.g. under an address-space limit (``ulimit -v``): :func:`allocation_failure` tells them
  from other errors, and :func:`message` words each as one line.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import threading

from tm2nn import limits
from tm2nn.errors import Tm2nnError

#: Bytes every command may use on top of the limit: the largest peak RSS measured for a
#: tiny task of any verb and backend (about 500 MB: Python 45 MB, torch 170 MB,
#: onnxruntime 20 MB, numba 55 MB, numba compiling its kernels and onnxruntime's session
#: the rest), rounded up.  ``TM2NN_MEMORY_OVERHEAD`` (a size) overrides it.
OVERHEAD = 512 * 2**20
#: Seconds between two readings of the resident memory.
PERIOD = 0.02
#: The signal the watchdog sends to the main thread (its handler is installed only
#: inside :func:`watching`; a stray one is ignored there).
SIGNAL = signal.SIGUSR1
#: Words in the errors of torch, onnxruntime and the C++ runtime when an allocation fails.
_ALLOCATION_WORDS = ("can't allocate memory", "cannot allocate memory", "not enough memory", "failed to allocate",
                     "out of memory", "bad_alloc", "std::bad_alloc")


class MemoryLimitExceeded(BaseException):
    """The process's resident memory went past the limit plus the overhead.  A
    BaseException, as KeyboardInterrupt is, so that no ``except Exception`` on the way
    swallows it."""

    def __init__(self, peak: int, limit: int, overhead: int):
        self.peak, self.limit, self.overhead = peak, limit, overhead
        super().__init__(f"out of memory: peak {peak / 2**20:,.0f} MB over the limit of {limit / 2**20:,.0f} MB "
                         f"(+ overhead {overhead / 2**20:,.0f} MB); lower the sizes asked for, or raise the limit "
                         "(--max-memory SIZE)")


def overhead() -> int:
    """:data:`OVERHEAD`, or ``TM2NN_MEMORY_OVERHEAD`` when set."""
    text = os.environ.get("TM2NN_MEMORY_OVERHEAD")
    if not text:
        return OVERHEAD
    try:
        return limits.parse_size(text)
    except ValueError:
        raise Tm2nnError(f"TM2NN_MEMORY_OVERHEAD: expected a size such as 512M, got {text!r}") from None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss() -> int | None:
    """This process's resident memory now (bytes), or None where /proc is missing."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def peak_rss() -> int:
    """This process's peak resident memory so far (bytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@contextlib.contextmanager
def watching(limit: int | None = None):
    """Watch the resident memory against ``limit`` (default: the limit set, if any) plus
    :func:`overhead` (or plus the resident memory at the start, when the process already
    holds more than the overhead) while the block runs (main thread only; elsewhere, or with no limit,
    nothing is watched)."""
    limit = limits.explicit_memory_limit() if limit is None else limit
    if limit is None or threading.current_thread() is not threading.main_thread() or rss() is None:
        yield
        return
    # the overhead is the libraries' baseline; a host process that already holds more
    # (a notebook, a test runner calling main()) is held to what this block adds
    extra = max(overhead(), rss() or 0)
    ceiling = limit + extra
    stop, tripped = threading.Event(), {}
    main = threading.main_thread().ident

    def on_signal(signum, frame):
        if tripped.pop("peak", None) is not None:  # once: a stray SIGUSR1 is ignored
            raise MemoryLimitExceeded(max(peak_rss(), rss() or 0), limit, extra)

    def watch():
        while not stop.wait(PERIOD):
            now = rss()
            if now is not None and now > ceiling:
                tripped["peak"] = now
                signal.pthread_kill(main, SIGNAL)
                return

    old = signal.signal(SIGNAL, on_signal)
    thread = threading.Thread(target=watch, name="tm2nn-memwatch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        signal.signal(SIGNAL, old)


def allocation_failure(e: BaseException) -> bool:
    """Whether ``e`` is an allocation that failed: a MemoryError, the watchdog's stop, or
    a torch / onnxruntime error saying so (other errors are not)."""
    if isinstance(e, (MemoryError, MemoryLimitExceeded)):
        return True
    if not isinstance(e, RuntimeError) and not type(e).__module__.startswith("onnxruntime"):
        return False
    text = str(e).lower()
    return any(w in text for w in _ALLOCATION_WORDS)


def message(e: BaseException) -> str:
    """The one line (after ``tm2nn: error: ``) for an allocation failure ``e``."""
    if isinstance(e, MemoryLimitExceeded):
        return str(e)
    what = str(e).strip().splitlines()[0] if str(e).strip() else "an allocation failed"
    what = what.split(" for an array")[0]
    if len(what) > 160:
        what = what[:159] + "\u2026"
    limit = limits.explicit_memory_limit()
    was = f"; the limit is {limits.human(limit)}" if limit is not None else ""
    return (f"out of memory ({what}){was}: lower the sizes asked for (--max-memory sets how much tm2nn may plan "
            "to use)")
