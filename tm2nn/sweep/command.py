"""``tm2nn sweep SPEC.toml -o RESULTS [--ray ADDRESS]`` and ``tm2nn sweep report RESULTS``:
the verb's flags and what it does (docs/sweep.md).  The spec is checked and expanded
before any task runs; then the unfinished tasks run on the local pool or on Ray, each
finished one appended to RESULTS, with a bar of done / failed / remaining and an ETA.
Exit 0 when every task of the sweep is ``ok``, 1 when one is not (its row says why), 2 for
a bad spec or flag."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tm2nn.console import progress
from tm2nn.errors import Tm2nnError
from tm2nn.fileio import write_atomic
from tm2nn.limits import flag_int
from tm2nn.sweep.spec import load_spec


def add_parser(sub) -> None:
    """The ``sweep`` verb on the CLI's subparsers (``handler``: :func:`run`)."""

    p = sub.add_parser("sweep", help="run a sweep spec (TOML) on a local process pool or a Ray cluster; "
                                     "'sweep report RESULTS' summarises and plots the results")
    p.add_argument("spec", metavar="SPEC", help="the sweep spec (.toml), or 'report' followed by RESULTS")
    p.add_argument("results", nargs="?", metavar="RESULTS", help="with 'report': the results folder")
    p.add_argument("-o", "--output", metavar="RESULTS", help="the results folder (rerunning skips its finished "
                   "tasks); with 'report': the folder for the plots (default RESULTS/plots)")
    p.add_argument("--ray", metavar="ADDRESS", help="run on the Ray cluster at ADDRESS (HOST:PORT, or 'auto'); "
                   "needs pip install 'tm2nn[ray]'. Default: a local process pool")
    p.add_argument("--workers", type=flag_int(1, 4096), help="local pool size (default: the number of cores)")
    p.add_argument("--retry-failed", action="store_true", help="run again the tasks whose row is not ok (a mismatch, "
                   "an error or a crash), replacing their rows; finished ok tasks are still skipped")
    p.add_argument("--dry-run", action="store_true", help="check the spec and list its tasks; run nothing")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    p.set_defaults(handler=run)


def run(args) -> int:
    if args.spec == "report":
        return _report(args)
    if args.results is not None:
        raise Tm2nnError(f"sweep takes one spec, got a second argument {args.results!r} (the results folder "
                         "goes after -o)")

    with progress("reading the spec", counts=False) as bar:
        spec = load_spec(args.spec, seen=bar and (lambda n: bar(0, None, f"spec: its globs read {n:,} entries")))
    tasks = spec.tasks()
    if args.dry_run:
        for t in tasks:
            print(json.dumps(t.to_json(), sort_keys=True) if args.json else _task_line(t))
        print(f"{len(tasks):,} tasks", file=sys.stderr)
        return 0
    if not args.output:
        raise Tm2nnError("sweep needs -o RESULTS: the folder its results table is written to")
    if args.ray and args.workers:
        raise Tm2nnError("--workers sizes the local pool; on Ray the cluster's CPUs decide (drop one of the two)")
    from tm2nn.sweep.store import Store

    store = Store(args.output)
    with store.locked():  # while this driver runs: a second driver on the folder stops here (exit 2)
        return _drive(args, spec, tasks, store)


def _drive(args, spec, tasks, store) -> int:
    """The sweep on its locked results folder: rows that do not fit set aside, the
    unfinished tasks run, the counts printed; the exit code."""
    _write_info(Path(args.output), spec, len(tasks))
    store.settle(tasks, whole=True)  # rows of other tasks, or stale ones, set aside (one line each)
    ids = {t.id for t in tasks}
    if args.retry_failed:
        retried = store.forget(r["task_id"] for r in store.rows() if r["task_id"] in ids and r["outcome"] != "ok")
        print(f"{spec.name}: {retried:,} failed rows removed, to run again", file=sys.stderr)
    todo = len(ids - store.finished())
    where = f"the Ray cluster at {args.ray}" if args.ray else "a local process pool"
    print(f"{spec.name}: {len(tasks):,} tasks, {len(tasks) - todo:,} already in {args.output}; "
          f"running {todo:,} on {where}", file=sys.stderr)
    _run_engine(args, tasks, store)
    rows = [r for r in store.rows() if r["task_id"] in ids]
    bad = [r for r in rows if r["outcome"] != "ok"]
    counts = {o: sum(r["outcome"] == o for r in rows) for o in ("ok", "mismatch", "error", "crash")}
    if args.json:
        print(json.dumps({"sweep": spec.name, "tasks": len(tasks), **counts, "results": str(args.output)}))
    else:
        print(f"{spec.name}: {len(rows):,} of {len(tasks):,} tasks in {args.output}: "
              + ", ".join(f"{n:,} {o}" for o, n in counts.items() if n))
        for r in bad[:5]:
            print(f"  {r['outcome']}: {Path(r['source']).name}{':' + r['name'] if r['name'] else ''} "
                  f"{r['backend']} {r['options']} {r['args']}: {r['error'] or r['figures'][:200]}")
        if bad:
            print(f"  tm2nn sweep report {args.output}: the summary and plots")
    return 0 if not bad and len(rows) == len(tasks) else 1


def _run_engine(args, tasks, store) -> None:
    """The tasks on the chosen engine, with a bar (on a terminal) of done, failed and
    remaining and an ETA; Ctrl-C keeps every row written and says how to resume."""

    with progress("sweep", counts=True) as bar:
        def update(done, failed, remaining):
            if bar is not None:
                bar(done, done + remaining, f"sweep: {done:,} done, {failed:,} failed, {remaining:,} to go")
        try:
            if args.ray:
                from tm2nn.sweep.ray_engine import run_ray

                run_ray(tasks, store, address=args.ray, progress=update)
            else:
                from tm2nn.sweep.local import run_local

                run_local(tasks, store, workers=args.workers, progress=update)
        except KeyboardInterrupt:
            kept = len({t.id for t in tasks} & store.finished())
            print(f"tm2nn: interrupted; {kept:,} finished rows are kept in {args.output}: rerun the same "
                  "command to resume", file=sys.stderr)
            raise


def _write_info(folder: Path, spec, n_tasks: int) -> None:
    """``RESULTS/sweep.json``: which spec wrote the rows (informational; rows carry their task)."""

    info = {"name": spec.name, "spec": str(Path(spec.path).resolve()), "spec_sha256": spec.sha256, "tasks": n_tasks}
    write_atomic(folder / "sweep.json", (json.dumps(info, indent=1) + "\n").encode())


def _task_line(t) -> str:
    where = Path(t.source).name + (f":{t.name}" if t.name else "")
    opts = " ".join(f"{k}={v}" for k, v in {**t.options, **t.args}.items())
    return f"{t.id}  {t.kind} {t.backend} {where} {opts}".rstrip()


def _report(args) -> int:
    if args.results is None:
        raise Tm2nnError("sweep report needs the results folder: tm2nn sweep report RESULTS")
    from tm2nn.sweep.report import report

    report(Path(args.results), out=args.output, json=args.json)
    return 0
