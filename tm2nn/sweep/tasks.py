"""One sweep task in any process: a task's JSON (``Task.to_json()``) in, one results row out.

:func:`run_task` is what every engine runs, in its own worker processes (the local pool's,
Ray's) or in the caller's: it calls the public API only (``tm2nn.compile`` / ``.verify``
/ ``.info``, ``tm2nn.learn``, ``tm2nn.run``, and the backend's ``margin`` /
``find_beta`` through ``tm2nn.backends.get``), times the call and measures the process's
peak memory, and returns the row of docs/sweep.md, "Results" (every column always
present).  It never raises for a task: a bad input is an ``"error"`` row (exit class 2),
any other exception a ``"crash"`` row (exit class 70, a tm2nn bug), so one task cannot
stop a sweep.  Only Ctrl-C (``KeyboardInterrupt``) goes through.

:func:`init_worker` runs once in each worker process before its first task: several
workers share the cores, so each runs torch, numba and onnxruntime on one thread (as the
test suite does, tests/conftest.py).

Test hooks, honoured only when the environment holds ``TM2NN_SWEEP_TEST_HOOKS=1`` (the
engines' fault tests use them; without the variable they are unknown arguments, an
``"error"`` row, so nobody triggers them by accident):

* ``args["_test_sleep"] = s``: sleep ``s`` seconds before the task;
* ``args["_test_exit"] = true``: kill this process (SIGKILL) instead of running the task;
  ``= "PATH"``: only when ``PATH`` does not exist yet (it is created first), so the task
  kills one worker once and then runs normally on a retry.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

import tm2nn
from tm2nn import backends, threads
from tm2nn.errors import Tm2nnError
from tm2nn.options import fields_of
from tm2nn.sweep.spec import ARGS, canonical

#: outcome -> exit class (0, 1, 2 are the CLI's exit codes; 70 is EX_SOFTWARE, a bug)
EXIT_CLASS = {"ok": 0, "mismatch": 1, "error": 2, "crash": 70}
#: the arguments each task kind takes (the spec's table, :data:`tm2nn.sweep.spec.ARGS`,
#: which validates them; run_task refuses others)
TASK_ARGS = {kind: tuple(args) for kind, args in ARGS.items()}
#: the columns that differ between runs and engines; every other one is a function of the task
TIMING_COLUMNS = ("seconds", "peak_rss_mb", "worker", "finished_at")
#: the environment variable that turns the test hooks on
TEST_HOOKS_ENV = "TM2NN_SWEEP_TEST_HOOKS"
TEST_HOOKS = ("_test_sleep", "_test_exit")
ERROR_CHARS = 500

_initialised = False


def figures_json(obj) -> str:
    """The ``figures`` column: canonical JSON (sorted keys, no spaces, as
    :func:`tm2nn.sweep.spec.canonical`), with numpy values as numbers and NaN / infinity
    allowed (a margin attack that found nothing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_plain)


def _plain(o):
    """A JSON value for what ``json`` does not know (numpy scalars and arrays, sets)."""
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    return str(o)


def init_worker() -> None:
    """Run torch, numba and onnxruntime on one thread in this process, whatever the kind
    of work (:mod:`tm2nn.threads`; the workers share the cores).  Once per process: the
    engines call it before a worker's first task.  The environment variables reach the
    libraries imported later and the numpy BLAS; ``TM2NN_THREADS`` outlives a task's
    ``--threads`` reset."""
    global _initialised
    if _initialised:
        return
    _initialised = True
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", threads.ENV):
        os.environ[var] = "1"
    threads.set_threads(None)  # the loaded libraries get the count now


# -- peak memory ----------------------------------------------------------------------------
def _reset_peak() -> bool:
    """Reset this process's peak RSS (``VmHWM``) where Linux lets it (``clear_refs`` 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    """This process's peak RSS in MB: ``VmHWM`` (since the last reset), else the lifetime
    peak from ``getrusage``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


# -- the row ----------------------------------------------------------------------------------
def _source_sha256(path) -> str | None:
    """sha256 of the source file's bytes (None when it cannot be read: the task's error says why)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except (OSError, TypeError, ValueError):
        return None


def reads(task: dict) -> list[str]:
    """The files a task reads: its source, then (for a ``learn`` task) the training sets its
    options name (the backend's data fields)."""
    out = [str(task.get("source"))]
    if task.get("kind") == "learn":
        try:
            trainer = backends.get(str(task.get("backend"))).trainer
            opts = task.get("options") or {}
            out += [opts[f.name] for f in fields_of(trainer.Options) if f.data is not None
                    and isinstance(opts.get(f.name), str)]
        except (Tm2nnError, AttributeError, TypeError):  # no such backend, or none that learns: its error row says so
            pass
    return out


def reads_sha256(task: dict, cache: dict | None = None) -> str | None:
    """The ``source_sha256`` column: the sha256 of the source file's bytes; for a task that
    reads more files (a learn task's training set), the sha256 of their sha256s (hex, one a
    line, the source's first).  None when one of them cannot be read.  ``cache`` maps a
    file to its sha256 (a spec's tasks share their files)."""
    cache = {} if cache is None else cache
    sums = []
    for path in reads(task):
        if path not in cache:
            cache[path] = _source_sha256(path)
        if cache[path] is None:
            return None
        sums.append(cache[path])
    if len(sums) == 1:
        return sums[0]
    return hashlib.sha256("".join(f"{h}\n" for h in sums).encode()).hexdigest()


def one_line(text: str) -> str:
    """A message as one line of at most :data:`ERROR_CHARS` characters."""
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line if len(line) <= ERROR_CHARS else line[:ERROR_CHARS - 3] + "..."


def _error_text(e: BaseException) -> str:
    """A tm2nn error's message, after its ``file:line:col`` when it has one; any other
    exception as ``Type: message``."""

    if isinstance(e, Tm2nnError):
        where = str(e.loc) if e.loc is not None else e.file
        return one_line(f"{where}: {e.message}" if where else e.message)
    return one_line(f"{type(e).__name__}: {e}")


def failed_row(task: dict, outcome: str, message: str, *, seconds: float = 0.0,
               peak_rss_mb: float = 0.0, worker: str | None = None, sha256=False) -> dict:
    """A task's row with empty figures: an ``"error"`` or ``"crash"`` row (:func:`run_task`
    fills in the figures of the others).  The engines use it for a task whose worker died
    (``worker`` then names the driver's process).  ``sha256``: the ``source_sha256`` of
    what the task read (default: hashed now)."""

    return {
        "task_id": str(task.get("id")), "sweep": None, "kind": str(task.get("kind")),
        "source": str(task.get("source")), "name": task.get("name"), "format": task.get("format"),
        "backend": str(task.get("backend")), "options": _json_column(task.get("options")),
        "args": _json_column(task.get("args")), "outcome": outcome, "exit_class": EXIT_CLASS[outcome],
        "error": one_line(message) if message is not None else None, "figures": figures_json({}),
        "seconds": float(seconds), "peak_rss_mb": float(peak_rss_mb), "tm2nn_version": tm2nn.__version__,
        "source_sha256": reads_sha256(task) if sha256 is False else sha256, "worker": worker or _worker(),
        "finished_at": _now(),
    }


def _json_column(d) -> str:
    """``options`` / ``args``: the canonical JSON the task id hashes (:func:`tm2nn.sweep.spec.canonical`);
    a value JSON does not hold (a hand-made task's) as text rather than an exception."""

    try:
        return canonical(d or {})
    except (TypeError, ValueError):
        return figures_json(d or {})


def _worker() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def run_task(task: dict) -> dict:
    """Run one task (a ``Task.to_json()`` dict) and return its row (every column of
    docs/sweep.md, "Results"; ``sweep`` is None until the driver's store fills it in).
    Never raises for the task itself: see the module doc."""

    sha256 = reads_sha256(task)  # before the task: a file edited while it runs leaves a row that reruns
    _reset_peak()
    t0 = time.perf_counter()
    try:
        args = _task_args(task)
        outcome, figures, message = *_KINDS[task["kind"]](task, args), None
    except Tm2nnError as e:  # bad input for this task (OptionError is one too)
        outcome, figures, message = "error", {}, _error_text(e)
    except Exception as e:  # noqa: BLE001 - a bug in tm2nn: recorded, and the sweep goes on (MemoryError too)
        outcome, figures, message = "crash", {}, _error_text(e)
    seconds = time.perf_counter() - t0
    row = failed_row(task, outcome, message, seconds=seconds, peak_rss_mb=_peak_mb(), sha256=sha256)  # lifetime peak if not reset
    row["figures"] = figures_json(figures)
    return row


def _task_args(task: dict) -> dict:
    """The task's own arguments, checked against its kind; the test hooks are run (when
    allowed, see the module doc) and removed."""

    kind = task.get("kind")
    if kind not in TASK_ARGS:
        raise Tm2nnError(f"unknown task kind {kind!r} (kinds: {', '.join(TASK_ARGS)})")
    args = dict(task.get("args") or {})
    hooks = {k: args.pop(k) for k in TEST_HOOKS if k in args} if os.environ.get(TEST_HOOKS_ENV) == "1" else {}
    unknown = [k for k in args if k not in TASK_ARGS[kind]]
    if unknown:
        takes = ", ".join(TASK_ARGS[kind]) or "none"
        raise Tm2nnError(f"a {kind} task takes no argument {unknown[0]!r} (its arguments: {takes})")
    _run_hooks(hooks)
    return args


def _run_hooks(hooks: dict) -> None:
    """The test hooks (module doc): sleep, or kill this process."""
    if "_test_sleep" in hooks:
        time.sleep(float(hooks["_test_sleep"]))
    marker = hooks.get("_test_exit")
    if marker is True or (isinstance(marker, str) and _create(marker)):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _create(path: str) -> bool:
    """Create ``path``; False when it exists already."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


# -- the kinds: each (task, args) -> (outcome, figures) ----------------------------------------
def _compile(task: dict):
    return tm2nn.compile(task["source"], task["backend"], name=task.get("name"), format=task.get("format"),
                         **(task.get("options") or {}))


def _backend_and_ir(task: dict):
    """The backend object and the source IR, for the analyses that take IR (margin,
    find-beta); the backend refuses a source it does not compile, as the CLI's."""

    spec = tm2nn.backends.get(task["backend"])
    ir = tm2nn.load(task["source"], task.get("format"), task.get("name"))
    spec.check_source(ir)
    return spec, ir


def _verify(task: dict, args: dict):
    compiled = _compile(task)
    rep = compiled.verify(args.get("inputs"), budget=args.get("budget"), samples=args.get("samples"),
                          seed=args.get("seed"), onnx=args.get("onnx", True), engines=args.get("engines"))
    first = rep.first
    info = compiled.info()["info"]
    figures = {"ok": rep.ok, "mode": rep.mode, "n_inputs": rep.n_inputs, "engines": rep.engines,
               # what share of the input space it checked: an ok row is ok on that share only
               "space": rep.space, "distinct": rep.distinct, "coverage": rep.coverage, "complete": rep.complete,
               "first": None if first is None else {"step": first.step, "field": first.field,
                                                    "expected": first.expected, "got": first.got},
               **{k: info.get(k) for k in ("params_nonzero", "depth", "max_width")}}
    return ("ok" if rep.ok else "mismatch"), figures


def _margin(task: dict, args: dict):
    spec, ir = _backend_and_ir(task)
    table = spec.analysis("margin", backends.having)(ir, spec.options(**(task.get("options") or {})), samples=args.get("samples", 64),
                        trials=args.get("trials", 8), seed=args.get("seed", 0), engines=args.get("engines"))
    return "ok", {"title": table.title, "columns": table.columns, "rows": table.rows, "json": table.json}


def _find_beta(task: dict, args: dict):
    spec, ir = _backend_and_ir(task)
    res = spec.analysis("find_beta", backends.having)(ir, dict(task.get("options") or {}), inputs=args.get("inputs"),
                         samples=args.get("samples", 256), seed=args.get("seed"))
    return ("ok" if res.get("beta") is not None else "mismatch"), res  # no beta up to the search's cap: exit 1, as the CLI


def _info(task: dict, args: dict):
    return "ok", _compile(task).info()


def _learn(task: dict, args: dict):
    learned = tm2nn.learn(task["source"], task["backend"], name=task.get("name"), format=task.get("format"),
                          **(task.get("options") or {}))
    return ("ok" if learned.ok else "mismatch"), {**learned.summary, "ok": learned.ok}


def _run(task: dict, args: dict):
    report = tm2nn.run(task["source"], args.get("input"), args.get("max_steps"), backend=task["backend"],
                       engine=args.get("engine", "torch"), name=task.get("name"), format=task.get("format"),
                       **(task.get("options") or {}))
    return ("ok" if report.ok else "mismatch"), dict(report)


_KINDS = {"verify": _verify, "margin": _margin, "find-beta": _find_beta, "info": _info, "learn": _learn,
          "run": _run}
