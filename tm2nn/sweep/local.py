"""The local engine: a sweep's tasks on a pool of worker processes on this machine, the
default of ``tm2nn sweep`` (docs/sweep.md, "Engines: the local pool").

:func:`run_local` skips the tasks the store has a row for, runs the rest on a
``concurrent.futures.ProcessPoolExecutor`` (``spawn`` processes: torch does not like a fork
after its threads started; each worker runs :func:`tm2nn.sweep.tasks.init_worker` once),
and appends each row in this process as it arrives.  Workers return rows and never write,
so a worker that dies cannot leave a partial row.

A worker that dies (killed, out of memory, a segfault) breaks the pool, and every task in
flight with it.  The engine makes a fresh pool and resubmits the unfinished tasks.  Each
worker notes which task it starts, so the engine knows which tasks were running when the
pool broke: when one was, the death is that task's; when several were, they cannot be
told apart, so each runs again alone (a pool of one worker), where a death is
unambiguous.  A task whose worker dies on its first run and on :data:`MAX_RETRIES` retries
gets a ``"crash"`` row, "worker died (...)", and the sweep goes on.  Ctrl-C (or SIGTERM)
stops the workers and re-raises; the rows written stay, and a rerun resumes.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from tm2nn.errors import Tm2nnError
from tm2nn.interrupt import terminating
from tm2nn.limits import check_int
from tm2nn.sweep.tasks import failed_row, init_worker, run_task

#: retries of a task whose worker died (then a "crash" row)
MAX_RETRIES = 2
#: tasks submitted ahead per worker (the rest wait in this process)
AHEAD = 4
#: pools in a row that die before any task starts: the workers cannot start at all
MAX_BARREN_POOLS = 3

#: the temporary folder where a pool's workers note their tasks: ``<prefix><driver pid>-<random>``
STARTED_PREFIX = "tm2nn-sweep-"
#: PR_SET_PDEATHSIG (linux/prctl.h): a signal the kernel sends a process when its parent dies
_PR_SET_PDEATHSIG = 1

_started_dir: str | None = None  # in a worker: where it notes the task it starts


def clean_started(folder: str | None = None) -> list[str]:
    """Remove the temporary folders of pools whose driver is gone (a driver killed with
    SIGKILL cannot remove its own); returns them.  Only this user's, and only those whose
    name gives a driver pid that no longer runs."""
    gone = []
    for d in Path(folder or tempfile.gettempdir()).glob(f"{STARTED_PREFIX}*-*"):
        pid = d.name[len(STARTED_PREFIX):].split("-", 1)[0]
        with contextlib.suppress(OSError):
            if pid.isdigit() and d.is_dir() and d.stat().st_uid == os.getuid() and not _alive(int(pid)):
                shutil.rmtree(d, ignore_errors=True)
                gone.append(str(d))
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def run_local(tasks, store, *, workers: int | None = None, progress=None) -> None:
    """Run the unfinished ``tasks`` (``Task`` objects or their ``to_json()`` dicts) on
    ``workers`` processes (default: the number of cores), appending each row to ``store``;
    ``progress(done, failed, remaining)`` is called at the start and after each row (done
    counts this run's rows, failed those whose outcome is not ``"ok"``).  See the module doc
    for dead workers and Ctrl-C."""

    n = (os.cpu_count() or 1) if workers is None else check_int("workers", workers, 1)
    with store.locked():  # one driver at a time on a results folder
        clean_started()
        _run_local(tasks, store, n, progress)


def _run_local(tasks, store, n: int, progress) -> None:
    state = _State(unfinished(tasks, store), store, progress)
    state.report()
    barren = 0
    with sigterm_as_interrupt():
        while state.pending or state.alone:
            alone = bool(state.alone)
            batch = state.alone if alone else state.pending
            if alone:
                state.alone = []
            else:
                state.pending = []
            lost = _pool_round(batch, 1 if alone else min(n, len(batch)), state)
            if lost is None:
                barren = 0
                continue
            running, waiting, how = lost
            (state.alone if alone else state.pending).extend(waiting)
            if not running:
                barren += 1
                if barren >= MAX_BARREN_POOLS:
                    raise Tm2nnError(f"the sweep's worker processes die before running a task ({how[None]}); "
                                     f"{_count(len(state.pending) + len(state.alone), 'task')} not run",
                                     notes=["a Python script that runs a sweep must do so under "
                                            "'if __name__ == \"__main__\":' (the workers import it)"])
                continue
            barren = 0
            if len(running) > 1:  # which one killed its worker is unknown: each runs again alone
                state.alone.extend(running)
                continue
            job = running[0]
            tid = job["id"]
            state.deaths[tid] = state.deaths.get(tid, 0) + 1
            if state.deaths[tid] > MAX_RETRIES:
                state.finish(failed_row(job, "crash", f"worker died ({how[tid]}) on {state.deaths[tid]} runs "
                                                      "of this task"))
            else:
                (state.alone if alone else state.pending).append(job)


@dataclass
class _State:
    """What the engine tracks across pools: tasks to run (``pending`` on the full pool,
    ``alone`` one at a time), deaths blamed on each task, and this run's counts."""

    pending: list
    store: object
    progress: object
    alone: list = field(default_factory=list)
    deaths: dict = field(default_factory=dict)
    done: int = 0
    failed: int = 0
    total: int = 0

    def __post_init__(self):
        self.total = len(self.pending)

    def finish(self, row: dict) -> None:
        self.store.append(row)
        self.done += 1
        self.failed += row["outcome"] != "ok"
        self.report()

    def report(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.failed, self.total - self.done)


def unfinished(tasks, store) -> list[dict]:
    """The tasks without a row, as JSON dicts, each id once, in the given order; a row that
    does not fit its task (stale: its source changed since) is set aside first
    (:meth:`~tm2nn.sweep.store.Store.settle`), and its task is among them."""
    tasks = list(tasks)
    store.settle(tasks)
    finished = store.finished()
    out, seen = [], set()
    for t in tasks:
        job = t.to_json() if hasattr(t, "to_json") else dict(t)
        if job["id"] not in finished and job["id"] not in seen:
            seen.add(job["id"])
            out.append(job)
    return out


def _pool_round(jobs: list[dict], size: int, state: _State):
    """Run ``jobs`` on a fresh pool of ``size`` workers, finishing each row; at most
    :data:`AHEAD` per worker are submitted at a time (a sweep of 10^6 tasks is not 10^6
    futures).  None when every job finished; when the pool broke, ``(running, waiting,
    how)``: the unfinished jobs that had started, those that had not, and how each started
    one's worker ended (task id -> "signal SIGKILL", "exit code 1"; key None: the pool's)."""
    started = tempfile.mkdtemp(prefix=f"{STARTED_PREFIX}{os.getpid()}-")
    pool = ProcessPoolExecutor(max_workers=size, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_local, initargs=(started,))
    queue, in_flight, broken = collections.deque(jobs), {}, []
    try:
        while queue or in_flight:
            while queue and not broken and len(in_flight) < AHEAD * size:
                try:
                    fut = pool.submit(_work, queue[0])
                except BrokenProcessPool:
                    broken.append(None)  # the pool broke: stop submitting
                    break
                in_flight[fut] = queue.popleft()
            if not in_flight:
                break
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for fut in done:
                job = in_flight.pop(fut)
                exc = fut.exception()
                if exc is None:
                    state.finish(fut.result())
                elif isinstance(exc, BrokenProcessPool):
                    broken.append(job)
                else:  # not from the task (run_task catches everything): the row could not come back
                    state.finish(failed_row(job, "crash", f"{type(exc).__name__}: {exc}"))
        procs = dict(getattr(pool, "_processes", None) or {})
    except BaseException:  # Ctrl-C, SIGTERM: stop the workers now; the rows written stay
        for p in (getattr(pool, "_processes", None) or {}).values():
            with contextlib.suppress(Exception):
                p.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(started, ignore_errors=True)
        raise
    pool.shutdown(wait=True)
    try:
        broken = [job for job in broken if job is not None]
        if not broken and not queue:
            return None
        current = {}  # pid -> the task it started last
        for f in Path(started).iterdir():
            with contextlib.suppress(OSError, ValueError):
                current[int(f.name)] = f.read_text()
        ids = {job["id"] for job in broken}
        running_pids = {tid: pid for pid, tid in current.items() if tid in ids}
        how = {tid: _ended(procs.get(pid)) for tid, pid in running_pids.items()}
        how[None] = "; ".join(sorted({_ended(p) for p in procs.values()})) or "no worker started"
        running = [job for job in broken if job["id"] in running_pids]
        waiting = [job for job in broken if job["id"] not in running_pids] + list(queue)
        return running, waiting, how
    finally:
        shutil.rmtree(started, ignore_errors=True)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _ended(proc) -> str:
    """How a worker process ended, in words."""
    code = getattr(proc, "exitcode", None)
    if code is None:
        return "unknown exit"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _init_local(started: str) -> None:
    """A local worker's start: one thread per library (:func:`init_worker`), and Ctrl-C
    left to the driver (which stops the workers), so a terminal's Ctrl-C does not print a
    traceback from every worker."""
    global _started_dir
    _started_dir = started
    die_with(int(Path(started).name[len(STARTED_PREFIX):].split("-", 1)[0]))
    init_worker()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def die_with(driver: int) -> None:
    """End this worker when the driver process ``driver`` ends, however it ends (SIGKILL
    too): on Linux the kernel sends SIGKILL when the parent dies (``PR_SET_PDEATHSIG``);
    elsewhere a thread checks the parent every second.  A worker whose driver is gone
    already exits at once."""
    armed = False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if os.getppid() != driver:  # it died before the signal was armed
        os._exit(1)
    if not armed:
        def watch():
            while os.getppid() == driver:
                time.sleep(1.0)
            os._exit(1)
        threading.Thread(target=watch, name="tm2nn-driver-watch", daemon=True).start()


def _work(job: dict) -> dict:
    """In a worker: note the task this process starts (what the driver reads when the pool
    breaks), then run it."""
    if _started_dir is not None:
        Path(_started_dir, str(os.getpid())).write_text(job["id"])
    return run_task(job)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM stops the sweep as Ctrl-C does (:func:`tm2nn.interrupt.terminating`: its
    :class:`~tm2nn.interrupt.Terminated` is a KeyboardInterrupt), unless the caller handles
    SIGTERM already (the CLI does, with the same mechanism)."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    with terminating():
        yield
