"""What the CLI prints, with rich: run reports, tables, verification summaries and
progress bars (with an ETA) on a terminal.

Output that is not a terminal (a pipe, a file, a test's capture) is not wrapped at 80
columns: tables keep their natural width, so no cell is cut.

A run report's tape longer than ``2 * TAPE_WINDOW + 1`` cells is shown as a window around
the head, with how many cells were left out on each side (a machine that does not halt can
leave millions): in every human output, terminal or not, since a line of megabytes is read
by nobody; ``--json`` keeps the whole tape, and ``run --full-tape`` prints it.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from tm2nn.errors import render_located

#: the width used when standard output is not a terminal (tables take what they need)
PIPE_WIDTH = 1000
#: cells shown on each side of the head when a tape is too long to print whole
TAPE_WINDOW = 40


def examples_dir() -> Path:
    """The repository's examples/ beside the package, or, in an installed wheel, the copy
    it ships as ``tm2nn/examples`` (pyproject.toml's package data); ``tm2nn --help`` and
    ``tm2nn demo`` say where it is."""
    here = Path(__file__).resolve().parent
    repo = here.parent / "examples"
    return repo if repo.is_dir() else here / "examples"


def console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    width = None if tty else PIPE_WIDTH  # not COLUMNS: a pipe has no width (and CI sets 80)
    return Console(file=stream, width=width, highlight=False, soft_wrap=not tty)


def tape_window(tape: str, at: int | None, width: int = TAPE_WINDOW) -> list:
    """``tape`` as pieces to print: strings (cells shown) and ints (cells left out).  Whole
    when it has at most ``2 * width + 1`` cells; else the ``2 * width + 1`` cells around
    index ``at`` (the head), or, where the head's cell is not known (``at`` None), the first
    and the last ``width`` cells."""
    n = len(tape)
    if n <= 2 * width + 1:
        return [tape]
    if at is None:
        return [tape[:width], n - 2 * width, tape[-width:]]
    mid = min(max(at, width), n - width - 1)
    return [p for p in (mid - width, tape[mid - width:mid + width + 1], n - mid - width - 1) if p != 0]


def _tape_text(report, full: bool) -> str:
    """The tape of a line machine's report: whole, or a window around its head."""
    tape, run = report["tape"], getattr(report, "run", None)
    start = getattr(run, "tape_start", None) if run is not None else None
    at = report["head"] - start if isinstance(start, int) and isinstance(report["head"], int) else None
    pieces = [tape] if full else tape_window(tape, at)
    if len(pieces) == 1:
        return repr(tape)
    return " ".join(repr(p) if isinstance(p, str) else f"[{p:,} cells left out]" for p in pieces) + \
        f" (of {len(tape):,}; --full-tape prints them all)"


def print_report(report, notes=(), full_tape: bool = False) -> None:
    """A machine's run report in words (``{"outputs": ...}`` reports print the bits);
    a long tape as a window around the head unless ``full_tape`` (module doc)."""
    c = console()
    if "outputs" in report:
        out = report["outputs"]
        c.print(out if isinstance(out, str) else " ".join(f"{v:g}" for v in out), markup=False)
    else:
        status = ("[green]halted[/]" if report["halted"] else "[yellow]interrupted[/]" if report.get("interrupted")
                  else "[red]did not halt[/] within the step bound")
        c.print(f"{status} after {report['steps']:,} steps in state {report['state']!r}"
                + (f" ({report['outcome']})" if report["outcome"] else ""))
        c.print(f"tape  {_tape_text(report, full_tape)}  head {report['head']}  sigma {report['sigma']}", markup=False)
        if report.get("overflow"):
            c.print("[red]the run left the compiled tape window (overflow)[/]")
    for line in (*notes, *getattr(report, "notes", ())):
        c.print(line)
    if getattr(report, "failure", None):
        console(stderr=True).print(f"[red]{report.failure}[/]")


def print_trace(rows) -> None:
    """``run --trace``'s steps (:func:`tm2nn.report.trace_rows`), one line each."""
    for row in rows or ():
        print(f"step {row['step']:>8}  {row['state']:<12} head {row['head']!s:>8}  "
              f"read {row['read']!r} write {row['write']!r}")


def print_interrupted(e, as_json: bool = False, full_tape: bool = False) -> None:
    """A run stopped by Ctrl-C (:class:`tm2nn.interrupt.Interrupted`): the partial report
    when one was decoded (marked ``"interrupted": true``), then one line on stderr."""
    import json

    report = e.reports[0] if e.reports else None
    if report is not None:
        report["interrupted"] = True
        if as_json:
            print(json.dumps(report, default=str))
        else:
            print_report(report, full_tape=full_tape)
    why = e.note or ("" if report is not None else "the network's state there does not decode")
    print(f"tm2nn: {e} (Ctrl-C)" + (f"; {why}" if why else ""), file=sys.stderr)


def print_table(title: str, columns: list[str], rows, right: tuple[int, ...] = (1,)) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        t.add_column(col, justify="right" if i in right else "left")
    for r in rows:
        t.add_row(*(str(v) for v in r))
    console().print(t)


def print_verify(rep) -> None:
    """A :class:`~tm2nn.verify.VerifyReport` in words: what was checked, how, and the
    first divergence."""
    from rich.markup import escape

    c = console()
    c.print(f"{rep.backend}: {rep.n_inputs:,} inputs against {rep.reference}, {rep.seconds:.1f} s", markup=False)
    cut = "" if not rep.cut else f" (stopped by the {rep.budget:g} s budget after {rep.n_inputs:,})"
    if rep.min_samples and rep.n_inputs >= rep.min_samples and rep.seconds > (rep.budget or 0):
        cut += f" (past the {rep.budget:g} s budget to reach --min-samples {rep.min_samples:,})"
    c.print(f"  inputs: {rep.how}{cut}", markup=False)
    c.print(f"  coverage: {rep.covered}", markup=False)
    c.print(f"  compared: {rep.compares}", markup=False)
    for eng, bad in rep.engines.items():
        dev = rep.max_deviation.get(eng, 0.0)
        why = getattr(rep, "not_checked", {}).get(eng)
        if why is not None:  # this engine cannot check what the torch row checks
            verdict = "[yellow]not checked[/]" if bad == 0 else "[red]MISMATCH[/]"
            c.print(f"  {eng:<12} {verdict}: {escape(why)} ({bad} mismatching inputs)")
            continue
        c.print(f"  {eng:<12} {'[green]ok[/]' if bad == 0 else '[red]MISMATCH[/]'}: {bad} mismatching inputs "
                f"(max |output - exact value| = {dev:.2g})")
    if rep.out_of_window:
        c.print(f"  {rep.out_of_window:,} inputs run outside the tape window within T steps; the net flags "
                "them as overflow (use a larger --tape to cover them)")
    if rep.first is not None:
        f = rep.first
        at = f" step {f.step}," if f.step is not None else ""
        c.print(f"first divergence ({f.engine}): input {f.input!r},{at} {f.field}: expected {f.expected!r}, "
                f"got {f.got!r}", markup=False)


def print_warnings(lines) -> None:
    """Each line on standard error as ``tm2nn: warning: ...`` (e.g. a verification the
    budget cut after few inputs: :attr:`~tm2nn.verify.VerifyReport.warnings`)."""
    for line in lines:
        print(render_located("warning", line, None, None, None, None), file=sys.stderr)


def divergence_text(m) -> str:
    """A :class:`~tm2nn.verify.check.Mismatch` in one line: the input, the step, the
    field and both values."""
    at = f" at step {m.step}" if m.step is not None else ""
    return f"input {m.input!r}{at}: {m.field} is {m.got!r}, expected {m.expected!r}"


def print_eval(compiled, texts: list[str], reports, checked, as_json: bool, echo: bool = False) -> bool:
    """``tm2nn eval``'s output: each report (JSON lines with ``as_json``, each led by the
    ``"input"`` it answers with ``echo`` or several inputs), marked where
    it is not the reference's (``checked``: :meth:`~tm2nn.handle.Compiled.check`'s
    answer); on standard error, a warning for edited weights and one line naming the
    first divergence.  Returns whether every report agrees with the reference."""
    import json

    from rich.markup import escape


    reference, diverged = checked or (None, [None] * len(texts))
    if compiled.edited is not None:
        how = f"each report is checked against {reference}" if checked else "no reference checks its reports"
        print(render_located("warning", f"its weights are not the construction's ({compiled.edited}); {how}",
                             compiled.path, None, None, None), file=sys.stderr)
    for text, r, d in zip(texts, reports, diverged):
        if as_json:
            why = {} if d is None else {"diverges": {"step": d.step, "field": d.field, "expected": d.expected,
                                                     "got": d.got}}
            said = {"input": text} if echo or len(texts) > 1 else {}  # which input the line answers
            print(json.dumps({**said, **r, **why}, default=str))
            continue
        if len(texts) > 1:
            print(f"input {text!r}:")
        print_report(r)
        if d is not None:
            console().print(f"[red]not {escape(reference)}'s run:[/] " + escape(divergence_text(d)))
    bad = [d for d in diverged if d is not None]
    if not as_json:  # how many inputs it ran, and how many the reference agrees with
        checked_how = (f": {len(texts) - len(bad):,} agree with {reference}" if checked
                       else " (no reference checks its reports)")
        print(f"ran {len(texts):,} input{'s' if len(texts) != 1 else ''}{checked_how}")
    if bad:
        print(render_located("error", f"its run is not {reference}'s on {len(bad)} of {len(texts)} input(s); first: "
                             f"{divergence_text(bad[0])}", compiled.path, None, None, None), file=sys.stderr)
    return not bad


@contextlib.contextmanager
def progress(label: str, quiet: bool = False, counts: bool = True):
    """On a terminal (and unless ``quiet``), a progress bar with an ETA; yields
    ``update(done, total=None, description=None)``, or None when nothing is shown.
    ``counts``: show done/total (else a percentage)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn() if counts else TaskProgressColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console(stderr=True),
                  transient=True) as prog:
        task = prog.add_task(label, total=None)

        def update(done, total=None, description=None):
            kw = {} if description is None else {"description": description}
            prog.update(task, completed=done, total=total, **kw)
        yield update


@contextlib.contextmanager
def verify_progress(quiet: bool = False):
    """A bar for ``verify``: done / total inputs, or the share of the time budget used
    when the inputs are random and unbounded; yields ``verify_compiled``'s callback."""
    with progress("verifying", quiet, counts=False) as bar:
        if bar is None:
            yield None
            return

        def update(done, total, elapsed, budget):
            share = max(done / total if total else 0.0, min(1.0, elapsed / budget) if budget else 0.0)
            bar(int(1000 * share), 1000, f"verifying: {done:,} inputs checked")
        yield update


def print_summaries(source: str, summaries: list[dict]) -> None:
    """``check``'s summary of each item, one table each."""
    from rich.table import Table

    c = console()
    for s in summaries:
        t = Table(title=f"{source}: {s['kind']} {s['name']!r}", show_header=False, title_justify="left")
        for k, v in s.items():
            if k not in ("kind", "name"):
                t.add_row(k, ", ".join(f"{a} {b}" for a, b in v.items()) if isinstance(v, dict) else str(v))
        c.print(t)


def print_beta(res: dict) -> None:
    """``verify --find-beta``'s search, in words."""
    if res["beta"] is None:
        print(f"no beta up to {res['tried'][-1][0]:g} gave 0 mismatches")
        return
    print(f"smallest beta with 0 mismatches: {res['beta']:.4g} "
          f"({res['n_inputs']:,} {res['mode']} inputs; next lower tried: {res['below']:.4g})")
    for beta, bad in res["tried"]:
        print(f"  beta {beta:<10.4g} {bad} mismatching inputs")


def _num(v) -> str:
    """A number for the statistics table: integers with separators, others to 4 digits."""
    if v is None:
        return "-"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}" if abs(v) < 10 ** 15 else f"{v:.4g}"
    return f"{v:.4g}"


def print_statistics(source: str, rep: dict) -> None:
    """``info --statistics``: Lemma 2.3's factors and n (:func:`tm2nn.verify.statistics.statistics_report`),
    the theorem's own form, then the constants chosen where the paper gives only orders."""
    fc, form = rep["function_class"], rep["theorem_form"]
    how = {"w": "width", "d": "depth", "alpha": "||theta||_1", "p": "parameter count", **rep.get("how", {})}
    if "p_uniform" in fc:
        how["p"] += f"; F_(w,d) with every layer of width w: {fc['p_uniform']:,}"
    rows = [[k, _num(rep[k]), how[k]] for k in ("w", "d", "alpha", "p")]
    rows.append(["gamma", _num(rep["gamma"]), f"certified margin ({rep['gamma_kind']})"])
    if rep.get("d5") is not None:
        rows.append(["(D.5)", _num(rep["d5"]), "Theorem D.6's bound with the net's constants (another lower bound)"])
    rows += [
        ["eps, delta", f"{rep['eps']:g}, {rep['delta']:g}", "target 0-1 error; failure probability"],
        ["A", _num(rep["A"]), "(alpha/gamma) sqrt(log(2p+1))"],
        ["n", _num(rep["n"]), "Lemma 2.3, explicit: the least n with 4 Rad_n + 2 sqrt(log(2/delta)/n) <= eps"],
        ["  4 Rad_n at n", _num(None if rep["rademacher"] is None else 4 * rep["rademacher"]),
         "Dudley: (48A/sqrt n)(1 + log(sqrt n/(3A))) + 48 sqrt(log(4p+2))/sqrt n"],
        ["  confidence at n", _num(rep["confidence"]), "2 sqrt(log(2/delta)/n) (Prop. 2.2)"],
        ["alpha^2 log p/(gamma^2 eps^2)", _num(rep["order_value"]), "Lemma 2.3's order, no constants or logs"],
    ]
    scaling = ", ".join(f"{k} = {_num(v)}" for k, v in rep["scaling"].items())
    rows.append([f"{rep['theorem']}: {rep['order']}", _num(form["(alpha/gamma)^2 log(wd)/eps^2"]),
                 f"as (alpha/gamma)^2 log(wd)/eps^2, constants 1; log(wd) = {form['log(wd)']:.3g}, "
                 f"log p = {form['log p']:.3g}" + (f"; {scaling}" if scaling else "")])
    if "alpha/s" in form:
        rows.append(["  alpha/s, 1/gamma", f"{form['alpha/s']:.3g}, {form['1/gamma']:.4g}",
                     rep.get("scaling_how", "")])
    for k, v in fc.items():
        if k != "p_uniform" and isinstance(v, (int, float)):
            rows.append([k, _num(v), "function class (backend)"])
    print_table(f"{source}: {rep['backend']}, sample complexity ({rep['theorem']}, Lemma 2.3)",
                ["quantity", "value", "how"], rows)
    c = console()
    for line in rep["constants"]:
        c.print(f"constant chosen: {line}", markup=False)
