"""``tm2nn sweep report RESULTS``: what a finished (or half-finished) sweep found.

A summary (:func:`summarize`, JSON-able): outcome counts, time percentiles and peak memory
per backend and task kind, the slowest tasks, and the first failures with their error or
first divergence; rich tables of it (:func:`render`); and pictures where a table is hard
to read (:func:`plots`): the margin and β_min against a numeric grid option such as
``steps`` = T, verify's time against it (log-log), and a histogram of task times.
Rows are the results table's (docs/sweep.md, "Results"): ``options``, ``args`` and
``figures`` are JSON strings.  The report reads rows; it never runs a task.
"""

from __future__ import annotations

import json as _json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tm2nn.console import console as make_console
from tm2nn.errors import Tm2nnError
from tm2nn.sweep.store import Store
from tm2nn.viz.render import figure, save

OUTCOMES = ("ok", "mismatch", "error", "crash")
#: how many of the slowest tasks, and of the failures, the summary lists
SLOWEST = 10
FAILURES = 5
#: failures are listed worst first: a crash is a tm2nn bug, a mismatch a wrong network
_SEVERITY = {"crash": 0, "mismatch": 1, "error": 2}
#: numeric options that are replicates, not an axis (a sweep over seeds repeats a point)
NOT_AXES = ("seed",)
#: above this many sources, the points of every source share one series per backend
MAX_SOURCE_SERIES = 6
PERCENTILES = (50, 90, 99)


# ---------------------------------------------------------------------------------------------
# reading rows
# ---------------------------------------------------------------------------------------------
def _obj(v, default):
    """A row's JSON column as a Python value (already decoded values pass through)."""
    if v is None:
        return default
    if isinstance(v, (dict, list)):
        return v
    try:
        return _json.loads(v)
    except (TypeError, ValueError):
        return default


def _number(v) -> float | None:
    """``v`` as a finite float, or None (booleans, strings, None, inf and nan are not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _label(row) -> str:
    """A task's source as people read it: the file's name, and the item's name in it."""
    src = Path(str(row.get("source") or "?")).name
    return f"{src}:{row['name']}" if row.get("name") else src


def _sweep_name(rows, default: str = "sweep") -> str:
    names = sorted({str(r["sweep"]) for r in rows if r.get("sweep")})
    return ", ".join(names) if names else default


# ---------------------------------------------------------------------------------------------
# the summary
# ---------------------------------------------------------------------------------------------
def _times(values) -> dict:
    """p50, p90, p99 (linear interpolation, numpy's default), max and total of ``values``
    (None when there are none)."""
    import numpy as np

    xs = [x for x in (_number(v) for v in values) if x is not None]
    if not xs:
        return {**{f"p{q}": None for q in PERCENTILES}, "max": None, "total": 0.0}
    ps = np.percentile(np.asarray(xs), PERCENTILES)
    return {**{f"p{q}": float(p) for q, p in zip(PERCENTILES, ps)}, "max": max(xs), "total": float(sum(xs))}


def _group(rows, **key) -> dict:
    counts = {o: sum(r.get("outcome") == o for r in rows) for o in OUTCOMES}
    rss = [x for x in (_number(r.get("peak_rss_mb")) for r in rows) if x is not None]
    partial = sum(r.get("outcome") == "ok" and (c := _coverage(r)) is not None and not c.get("complete")
                  for r in rows)  # ok on part of the input space
    return {**key, "tasks": len(rows), **counts, "partial": partial, "seconds": _times(r.get("seconds") for r in rows),
            "peak_rss_mb": max(rss) if rss else None}


def _task_view(row) -> dict:
    return {"task_id": row.get("task_id"), "kind": row.get("kind"), "source": row.get("source"),
            "name": row.get("name"), "backend": row.get("backend"), "options": _obj(row.get("options"), {}),
            "args": _obj(row.get("args"), {})}


def _first_divergence(row) -> dict | None:
    """verify's first divergence (``figures["first"]``: step, field, expected, got), if any."""
    first = _obj(row.get("figures"), {})
    first = first.get("first") if isinstance(first, dict) else None
    return first if isinstance(first, dict) else None


def _coverage(row) -> dict | None:
    """A verify row's coverage (``figures``: ``space``, ``distinct``, ``coverage``,
    ``complete``), None for other kinds and for rows written before it was recorded."""
    f = _obj(row.get("figures"), {})
    if row.get("kind") != "verify" or not isinstance(f, dict) or "complete" not in f:
        return None
    return {k: f.get(k) for k in ("space", "distinct", "coverage", "complete", "n_inputs")}


def _coverage_text(c: dict) -> str:
    """``ok, 1 of 32 inputs`` for an ok check of part of its space."""
    if c.get("space") is None:
        return f"ok, {c.get('distinct') or 0:,} inputs (space not known)"
    return f"ok, {c.get('distinct') or 0:,} of {c['space']:,} inputs"


def summarize(rows: list[dict]) -> dict:
    """The sweep's summary (JSON-able): ``tasks``, ``outcomes`` (counts), ``groups`` (per
    backend and kind: the counts of each outcome, the time percentiles p50/p90/p99/max and
    the total, the peak RSS), ``total`` (the same over every row), ``slowest`` (the
    :data:`SLOWEST` slowest tasks), ``failures`` (the first :data:`FAILURES`, crashes first,
    each with its error and, for verify, the first divergence) and ``plots`` (the pictures
    the rows allow, and ``notes`` on those they do not)."""
    rows = list(rows)
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((str(r.get("backend")), str(r.get("kind"))), []).append(r)
    timed = [r for r in rows if _number(r.get("seconds")) is not None]
    slowest = sorted(timed, key=lambda r: -float(r["seconds"]))[:SLOWEST]
    bad = [r for r in rows if r.get("outcome") != "ok"]
    bad.sort(key=lambda r: (_SEVERITY.get(r.get("outcome"), -1), str(r.get("backend")), str(r.get("source")),
                            str(r.get("name")), str(r.get("options"))))
    plans, notes = _plan(rows)
    partial = [(r, c) for r in rows if r.get("outcome") == "ok" and (c := _coverage(r)) is not None
               and not c.get("complete")]
    return {
        "sweep": _sweep_name(rows, None),
        "tasks": len(rows),
        "outcomes": {o: sum(r.get("outcome") == o for r in rows) for o in OUTCOMES},
        "groups": [_group(rs, backend=b, kind=k) for (b, k), rs in sorted(groups.items())],
        "total": _group(rows),
        "slowest": [{**_task_view(r), "seconds": float(r["seconds"])} for r in slowest],
        "failures": [{**_task_view(r), "outcome": r.get("outcome"), "exit_class": r.get("exit_class"),
                      "error": r.get("error"), "first": _first_divergence(r)} for r in bad[:FAILURES]],
        # verify rows ok on part of their input space only (coverage below 1)
        "partial": {"tasks": len(partial), "first": [{**_task_view(r), **c, "text": _coverage_text(c)}
                                                     for r, c in partial[:FAILURES]]},
        "plots": {"planned": [{"kind": p.kind, "x": p.x, "file": p.file, "what": p.what} for p in plans],
                  "notes": notes},
    }


# ---------------------------------------------------------------------------------------------
# which plots the rows allow
# ---------------------------------------------------------------------------------------------
@dataclass
class _Plan:
    """One picture: the task ``kind`` it reads, its x axis (an option or argument name),
    the file it is written to and what it shows."""

    kind: str
    x: str | None
    file: str
    what: str
    rows: list = field(default_factory=list, repr=False)


def _params(row) -> dict:
    """A task's options, then its arguments (an option wins a name clash)."""
    args, opts = _obj(row.get("args"), {}), _obj(row.get("options"), {})
    return {**(args if isinstance(args, dict) else {}), **(opts if isinstance(opts, dict) else {})}


def _axis(rows) -> str | None:
    """The numeric parameter that takes two or more values over ``rows``: ``steps`` (T)
    when it does, else the first such name (sorted); seeds are replicates, never an axis."""
    values: dict[str, set] = {}
    for r in rows:
        for k, v in _params(r).items():
            if k not in NOT_AXES and not k.startswith("_"):
                values.setdefault(k, set()).add(_number(v) if _number(v) is not None else ("x", repr(v)))
    numeric = sorted(k for k, vs in values.items() if len(vs) >= 2 and all(isinstance(v, float) for v in vs))
    return "steps" if "steps" in numeric else numeric[0] if numeric else None


def _plan(rows) -> tuple[list[_Plan], list[str]]:
    """The plots ``rows`` allow, and a note for each one they do not."""
    plans, notes = [], []
    what = {"margin": ("margin", "the certified margin (lower bound) and the smallest attack (upper bound)"),
            "find-beta": ("beta_min", "beta_min, the smallest softmax beta with 0 mismatches"),
            "verify": ("verify_seconds", "verify's wall time per task (log-log)")}
    for kind, (stem, shows) in what.items():
        # verify's mismatches ran in full; find-beta's are the searches that found no beta
        done = [r for r in rows if r.get("kind") == kind and r.get("outcome") in
                (("ok",) if kind == "margin" else ("ok", "mismatch"))]
        if not done:
            continue
        x = _axis(done)
        if x is None:
            notes.append(f"{kind}: no plot of {stem} (no numeric option or argument takes two or more values "
                         f"over its {len(done)} finished tasks)")
            continue
        have = [r for r in done if _number(_params(r).get(x)) is not None]
        if len(have) < len(done):
            notes.append(f"{kind}: {len(done) - len(have)} of {len(done)} finished tasks have no numeric {x} "
                         "(not plotted)")
        plans.append(_Plan(kind, x, f"{stem}_vs_{x}.png", shows, have))
    seconds = [r for r in rows if _number(r.get("seconds")) is not None]
    if len(seconds) >= 2:
        plans.append(_Plan("*", None, "seconds_histogram.png", "a histogram of the task times", seconds))
    elif rows:
        notes.append("no histogram of task times (fewer than 2 timed tasks)")
    return plans, notes


# ---------------------------------------------------------------------------------------------
# the plots
# ---------------------------------------------------------------------------------------------
def _varying(rows, skip) -> list[str]:
    """The parameters (other than ``skip``) that take several values over ``rows``."""
    values: dict[str, set] = {}
    for r in rows:
        for k, v in _params(r).items():
            values.setdefault(k, set()).add(_json.dumps(v, sort_keys=True))
    return sorted(k for k, vs in values.items() if len(vs) > 1 and k not in skip and k not in NOT_AXES)


def _series(rows, x: str, skip=()):
    """``row -> key``: what tells a task's series apart: its backend, its source (when there
    are few sources), and each other parameter that varies over ``rows`` (say ``corrections``)."""
    sources = {_label(r) for r in rows}
    by_source = 1 < len(sources) <= MAX_SOURCE_SERIES
    varying = _varying(rows, {x, *skip})

    def key(row) -> tuple[str, ...]:
        p = _params(row)
        return (str(row.get("backend")), *([_label(row)] if by_source else []), *(f"{k}={p.get(k)}" for k in varying))
    return key


def _margin_points(plan: _Plan) -> tuple[dict, list[str]]:
    """(series label -> [(x, certified, attack)]) from the margin Tables' JSON rows: the
    certified per-layer margin (``certified``, a lower bound) and the smallest per-layer
    attack (``eps_min``, else ``min(eps_gradient, eps_random)``, an upper bound), split by
    the row's ``corrections`` (and ``engine`` when several ran)."""
    points: dict[tuple, list] = {}
    notes = []
    skipped = 0
    margin_rows = []
    for r in plan.rows:
        tab = _obj(r.get("figures"), {})
        js = tab.get("json") if isinstance(tab, dict) else None
        if not isinstance(js, list) or not all(isinstance(d, dict) for d in js):
            skipped += 1
            continue
        margin_rows.append((r, js))
    corr = {d.get("corrections") for _, js in margin_rows for d in js}
    engines = {d.get("engine") for _, js in margin_rows for d in js} - {None}
    series = _series([r for r, _ in margin_rows], plan.x, skip=("corrections",) if corr - {None} else ())
    for r, js in margin_rows:
        base = series(r)
        for d in js:
            key = base + ((f"corrections {'on' if d.get('corrections') else 'off'}",) if len(corr) > 1 else ()) \
                + ((str(d["engine"]),) if len(engines) > 1 and d.get("engine") is not None else ())
            att = [v for v in (_number(d.get(k)) for k in ("eps_min", "eps_gradient", "eps_random")) if v is not None]
            points.setdefault(key, []).append((_number(_params(r)[plan.x]), _number(d.get("certified")),
                                               min(att) if att else None))
    if skipped:
        notes.append(f"margin: {skipped} finished tasks have no margin rows in their figures (not plotted)")
    return {", ".join(k): v for k, v in sorted(points.items())}, notes


def _medians(pts):
    """(sorted x, median y at each x) of ``pts`` = [(x, y)] with y not None."""
    import numpy as np

    by: dict[float, list] = {}
    for x, y in pts:
        if y is not None:
            by.setdefault(x, []).append(y)
    xs = sorted(by)
    return xs, [float(np.median(by[x])) for x in xs]


def _binned_medians(pts, most: int = 12):
    """:func:`_medians`, over at most ``most`` log-spaced bins of x when x takes more values
    (a corpus: every machine its own T), each at its bin's geometric centre."""
    import numpy as np

    xs = sorted({p[0] for p in pts})
    if len(xs) <= most or xs[0] <= 0:
        return _medians(pts)
    edges = np.geomspace(xs[0], xs[-1], most + 1)
    at = np.clip(np.searchsorted(edges, [p[0] for p in pts], side="right") - 1, 0, most - 1)
    by: dict[int, list] = {}
    for b, p in zip(at, pts):
        by.setdefault(int(b), []).append(p[1])
    keys = sorted(by)
    return [float(np.sqrt(edges[b] * edges[b + 1])) for b in keys], [float(np.median(by[b])) for b in keys]


def _scales(ax, xs, ys, log_x_from: float = 8.0, log_y_from: float = 20.0) -> None:
    """Log scales where the values are positive and span a wide range (T = 8 ... 1024)."""
    xs = [x for x in xs if x is not None]
    ys = [y for y in ys if y is not None]
    if xs and min(xs) > 0 and max(xs) / min(xs) >= log_x_from:
        ax.set_xscale("log", base=2 if all(float(x).is_integer() for x in xs) else 10)
    if ys and min(ys) > 0 and max(ys) / min(ys) >= log_y_from:
        ax.set_yscale("log")


def _draw_margin(plan: _Plan, title: str, notes: list[str]):
    series, more = _margin_points(plan)
    notes += more
    if not series:
        return None
    fig = figure(7, 4.5)
    ax = fig.add_subplot()
    allx, ally = [], []
    for i, (label, pts) in enumerate(series.items()):
        color = f"C{i % 10}"
        for j, style, what in ((1, "o-", "certified (lower)"), (2, "x--", "attack (upper)")):
            xs, ys = _medians([(p[0], p[j]) for p in pts])
            if xs:
                ax.plot(xs, ys, style, color=color, label=f"{label}: {what}")
                allx += xs
                ally += ys
    return _finish(fig, ax, allx, ally, plan.x, "per-layer all-layer margin (l2)", f"{title}: margin vs {plan.x}")


def _draw_beta(plan: _Plan, title: str, notes: list[str]):
    series: dict[tuple, list] = {}
    key = _series(plan.rows, plan.x)
    none = at_start = 0
    for r in plan.rows:
        res = _obj(r.get("figures"), {})
        beta = _number(res.get("beta")) if isinstance(res, dict) else None
        if beta is None:
            none += 1
            continue
        at_start += res.get("below") is None  # the first beta tried verified already
        series.setdefault(key(r), []).append((_number(_params(r)[plan.x]), beta))
    if none:
        notes.append(f"find-beta: {none} tasks found no beta (none up to the search's largest verifies; "
                     "not plotted)")
    if at_start:
        notes.append(f"find-beta: at {at_start} tasks the first beta tried verified already: the plotted "
                     "beta_min is an upper bound there")
    if not series:
        return None
    fig = figure(7, 4.5)
    ax = fig.add_subplot()
    allx, ally = [], []
    for i, (key, pts) in enumerate(sorted(series.items())):
        xs, ys = _medians(pts)
        ax.plot(xs, ys, "o-", color=f"C{i % 10}", label=", ".join(key))
        allx += xs
        ally += ys
    return _finish(fig, ax, allx, ally, plan.x, "beta_min (smallest softmax beta, 0 mismatches)",
                   f"{title}: beta_min vs {plan.x}")


def _finish(fig, ax, xs, ys, xlabel: str, ylabel: str, title: str):
    """Scales, labels, legend and grid of a line plot over a numeric option."""
    _scales(ax, xs, ys)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    return fig


def _draw_verify(plan: _Plan, title: str, notes: list[str]):
    series: dict[str, list] = {}
    for r in plan.rows:
        s = _number(r.get("seconds"))
        if s is not None and s > 0:
            series.setdefault(str(r.get("backend")), []).append((_number(_params(r)[plan.x]), s))
    if not series:
        return None
    fig = figure(7, 4.5)
    ax = fig.add_subplot()
    for i, (backend, pts) in enumerate(sorted(series.items())):
        color = f"C{i % 10}"
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, alpha=0.4, color=color, label=f"{backend}: tasks")
        xs, ys = _binned_medians(pts)
        ax.plot(xs, ys, "-", color=color, label=f"{backend}: median")
    if all(p[0] > 0 for pts in series.values() for p in pts):
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(plan.x)
    ax.set_ylabel("task seconds (wall)")
    ax.set_title(f"{title}: verify time vs {plan.x}")
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3, which="both")
    return fig


def _draw_histogram(plan: _Plan, title: str, notes: list[str]):
    import numpy as np


    by: dict[str, list] = {}
    for r in plan.rows:
        by.setdefault(f"{r.get('backend')} {r.get('kind')}", []).append(float(r["seconds"]))
    allv = [v for vs in by.values() for v in vs]
    lo, hi = min(allv), max(allv)
    log = lo > 0 and hi / lo > 10
    bins = np.geomspace(lo, hi, 31) if log else 30
    fig = figure(7, 4.5)
    ax = fig.add_subplot()
    labels = sorted(by)
    ax.hist([by[k] for k in labels], bins=bins, stacked=True, label=labels)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel("task seconds (wall)")
    ax.set_ylabel("tasks")
    ax.set_title(f"{title}: task times ({len(allv)} tasks)")
    ax.legend(fontsize="small")
    return fig


_DRAW = {"margin": _draw_margin, "find-beta": _draw_beta, "verify": _draw_verify, "*": _draw_histogram}


def _folder(folder: str | Path, what: str) -> Path:
    """``folder``, created when missing (its parent must exist); a Tm2nnError otherwise."""
    p = Path(folder)
    if p.exists() and not p.is_dir():
        raise Tm2nnError(f"the {what} folder {str(p)!r} is a file, not a folder")
    if not p.exists():
        if not p.parent.is_dir():
            raise Tm2nnError(f"cannot make the {what} folder {str(p)!r}: {str(p.parent)!r} does not exist")
        try:
            p.mkdir()
        except OSError as e:
            raise _Unwritable(f"cannot make the {what} folder {str(p)!r}: {e.strerror or e}") from None
    return p


class _Unwritable(Tm2nnError):
    """A folder that cannot be made (a read-only or full disk), not a mistake in a flag."""


def plots(rows: list[dict], folder: str | Path, notes: list[str] | None = None,
          failed: list[str] | None = None) -> list[Path]:
    """Draw the PNGs ``rows`` allow into ``folder`` (created if missing) and return their
    paths: margin vs a numeric option (T), beta_min vs it, verify's seconds vs it (log-log),
    each per backend (and per ``corrections`` where it varies), and a histogram of task
    seconds.  What cannot be drawn is appended to ``notes`` (when given); a plot that
    cannot be written (a read-only or full disk) gets a note too, and its path goes to
    ``failed`` (when given)."""

    rows = list(rows)
    plans, why = _plan(rows)
    notes = notes if notes is not None else []
    notes += [n for n in why if n not in notes]
    if not plans:
        return []
    failed = failed if failed is not None else []
    try:
        out = _folder(folder, "plots")
    except _Unwritable as e:  # a read-only or full disk: the tables still come out
        failed += [str(Path(folder) / plan.file) for plan in plans]
        notes.append(f"plots not written: {e.message}")
        return []
    title = _sweep_name(rows)
    written = []
    for plan in plans:
        fig = _DRAW[plan.kind](plan, title, notes)
        if fig is not None:
            try:
                written.append(save(fig, out / plan.file))
            except (Tm2nnError, OSError) as e:
                failed.append(str(out / plan.file))
                notes.append(f"{plan.file} not written: {e.message if isinstance(e, Tm2nnError) else e}")
    return written


# ---------------------------------------------------------------------------------------------
# the tables
# ---------------------------------------------------------------------------------------------
def _s(v) -> str:
    """Seconds for a table: 3 significant digits (whole seconds from 1,000 on), or '-'."""
    return "-" if v is None else f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"


def _cut(text: str, most: int) -> str:
    """``text`` cut to ``most`` characters (a tape or an error can be long)."""
    return text if len(text) <= most else text[:most - 1] + "\u2026"


def _options_text(opts, most: int = 60) -> str:
    return _cut(", ".join(f"{k}={v}" for k, v in opts.items()) if isinstance(opts, dict) else str(opts), most)


def _why(f: dict) -> str:
    """A failure in one line: verify's first divergence, else its error."""
    d = f.get("first")
    if d:
        at = f"step {d['step']}: " if d.get("step") is not None else ""
        inp = f"input {d['input']!r}, " if "input" in d else ""
        return f"{inp}{at}{d.get('field')} expected {d.get('expected')!r}, got {d.get('got')!r}"
    return str(f.get("error") or f.get("outcome"))


def render(summary: dict, console=None) -> None:
    """Print ``summary`` (:func:`summarize`) as rich tables on ``console`` (default
    :func:`tm2nn.console.console`): outcomes and times per backend and kind, the slowest
    tasks, the first failures, then the plots written and the notes."""
    from rich.markup import escape
    from rich.table import Table


    c = console or make_console()
    name = summary.get("sweep") or "sweep"
    n = summary["tasks"]
    if not n:
        of = f" (of {summary['spec_tasks']:,})" if summary.get("spec_tasks") else ""
        c.print(f"{escape(name)}: no finished tasks yet{of}")
    else:
        of = f" of {summary['spec_tasks']:,}" if summary.get("spec_tasks") else ""
        t = Table(title=f"{escape(name)}: {n:,}{of} tasks finished", title_justify="left")
        cols = ["backend", "kind", "tasks", *OUTCOMES, "p50 s", "p90 s", "p99 s", "max s", "total s", "peak RSS MB"]
        for i, col in enumerate(cols):
            t.add_column(col, justify="left" if i < 2 else "right")
        groups = summary["groups"] + ([{**summary["total"], "backend": "all", "kind": ""}]
                                      if len(summary["groups"]) > 1 else [])
        for g in groups:
            sec = g["seconds"]
            counts = [(f"[red]{g[o]:,}[/]" if g[o] and o != "ok" else f"{g[o]:,}") for o in OUTCOMES]
            if g.get("partial"):  # an ok on part of the space is not a plain ok
                counts[0] += f" [yellow]({g['partial']:,} partial)[/]"
            t.add_row(escape(g["backend"]), escape(g["kind"]), f"{g['tasks']:,}", *counts,
                      *(_s(sec[k]) for k in ("p50", "p90", "p99", "max", "total")),
                      "-" if g["peak_rss_mb"] is None else f"{g['peak_rss_mb']:.0f}",
                      end_section=g is summary["groups"][-1] and len(groups) > len(summary["groups"]))
        c.print(t)
    if summary["slowest"]:
        t = Table(title=f"the {len(summary['slowest'])} slowest tasks", title_justify="left")
        for col in ("seconds", "kind", "backend", "source", "options"):
            t.add_column(col, justify="right" if col == "seconds" else "left")
        for s in summary["slowest"]:
            t.add_row(_s(s["seconds"]), escape(str(s["kind"])), escape(str(s["backend"])), escape(_label(s)),
                      escape(_options_text(s["options"])))
        c.print(t)
    if summary["failures"]:
        bad = n - summary["outcomes"]["ok"]
        t = Table(title=f"failures: {len(summary['failures'])} of {bad:,} (crashes first)", title_justify="left")
        for col in ("outcome", "kind", "backend", "source", "options", "error / first divergence"):
            t.add_column(col)
        for f in summary["failures"]:
            t.add_row(f"[red]{escape(str(f['outcome']))}[/]", escape(str(f["kind"])), escape(str(f["backend"])),
                      escape(_label(f)), escape(_options_text(f["options"], 40)), escape(_cut(_why(f), 200)))
        c.print(t)
    part = summary.get("partial") or {}
    if part.get("tasks"):
        t = Table(title=f"checks ok on part of their input space: {part['tasks']:,} (not a plain ok)",
                  title_justify="left")
        for col in ("outcome", "coverage", "backend", "source", "options"):
            t.add_column(col, justify="right" if col == "coverage" else "left")
        for f in part["first"]:
            share = "-" if f.get("coverage") is None else f"{f['coverage']:.2g}"
            t.add_row(f"[yellow]{escape(f['text'])}[/]", share, escape(str(f["backend"])), escape(_label(f)),
                      escape(_options_text(f["options"], 40)))
        c.print(t)
    for p in summary["plots"].get("files", []):
        c.print(f"plot: {escape(str(p))}")
    for note in summary["plots"]["notes"]:
        c.print(f"note: {escape(note)}")


# ---------------------------------------------------------------------------------------------
# the verb
# ---------------------------------------------------------------------------------------------
def load_rows(results_folder: str | Path) -> list[dict]:
    """The rows of a results folder (:meth:`tm2nn.sweep.store.Store.rows`); a Tm2nnError when
    ``results_folder`` is not one (no ``rows/`` and no ``sweep.json`` in it)."""
    p = Path(results_folder)
    if not p.exists():
        raise Tm2nnError("no such results folder (give the folder a sweep wrote, its -o)", file=str(p))
    if not p.is_dir():
        raise Tm2nnError("not a folder (give the results folder a sweep wrote, its -o)", file=str(p))
    if not (p / "rows").is_dir() and not (p / "sweep.json").is_file():
        raise Tm2nnError("not a sweep's results folder (it has no rows/ and no sweep.json)", file=str(p))
    if not (p / "rows").is_dir():  # the driver wrote sweep.json, no row yet
        return []

    return Store(p, create=False).rows()


def report(results_folder: str | Path, out: str | Path | None = None, json: bool = False) -> dict:
    """``tm2nn sweep report``: summarize the results folder's rows, draw the plots into
    ``out`` (default ``RESULTS/plots``), and print the summary as tables (or, with
    ``json``, as one JSON object on standard output).  Returns the summary, with the
    written plots under ``["plots"]["files"]`` and the spec's task count (from
    ``RESULTS/sweep.json``, when the driver wrote it) as ``spec_tasks``."""
    rows = load_rows(results_folder)
    summary = summarize(rows)
    info = Path(results_folder) / "sweep.json"  # the driver's: the spec's name and task count
    meta = _obj(info.read_text(errors="replace") if info.is_file() else None, {})
    meta = meta if isinstance(meta, dict) else {}
    summary["sweep"] = summary["sweep"] or meta.get("name")
    if isinstance(meta.get("tasks"), int) and not isinstance(meta.get("tasks"), bool):
        summary["spec_tasks"] = meta["tasks"]
    notes = summary["plots"]["notes"]
    failed: list[str] = []
    files = plots(rows, Path(out) if out is not None else Path(results_folder) / "plots", notes, failed)
    summary["plots"]["files"] = [str(f) for f in files]
    if failed:
        print(f"tm2nn: warning: {len(failed)} plot{'s' if len(failed) > 1 else ''} not written "
              f"({', '.join(Path(f).name for f in failed)} in {Path(failed[0]).parent}): see the notes", file=sys.stderr)
    if json:
        print(_json.dumps(summary, default=str))
    else:
        render(summary)
    return summary
