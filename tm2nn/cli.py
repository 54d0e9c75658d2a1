"""The ``tm2nn`` command line.  Thin: parse arguments, call the API, render with rich.

Exit codes (ARCHITECTURE.md): 0 ok; 1 verification mismatch or a machine that did
not halt within ``--max-steps``; 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from tm2nn.errors import Tm2nnError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that raises Tm2nnError (exit 2, our format) instead of printing its own."""

    def error(self, message: str):  # noqa: D401
        raise Tm2nnError(f"{message}\n{self.format_usage().strip()}")


def _add_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="a machine or circuit file")
    p.add_argument("--format", help="override the format guessed from the extension "
                   "(tm, circ, std, morphett, tmio, bench, aag, aig, blif)")
    p.add_argument("--name", help="pick one machine/circuit from a file holding several "
                   "(by name or 1-based index; default: the first)")


def build_parser() -> argparse.ArgumentParser:
    from tm2nn import __version__

    ap = _Parser(prog="tm2nn", description="Compile Turing machines and boolean circuits "
                 "into exact, verified neural networks.")
    ap.add_argument("--version", action="version", version=f"tm2nn {__version__}")
    sub = ap.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    p = sub.add_parser("check", help="parse and validate a source; print a summary")
    _add_source(p)
    p.add_argument("--all", action="store_true", help="summarise every item in the file")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    p = sub.add_parser("run", help="run a machine (or evaluate a circuit) and report")
    _add_source(p)
    p.add_argument("--input", help="initial tape (machines; grid rows separated by '/') "
                   "or input bits (circuits). Default: the input the file documents, else empty")
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop after N steps (default 10,000,000); not halting by then exits 1")
    p.add_argument("--backend", default="interp", help="execution backend (default: interp)")
    p.add_argument("--json", action="store_true", help="print the run report as one JSON line")
    p.add_argument("--trace", action="store_true", help="also print every step")

    p = sub.add_parser("convert", help="write a machine as tm/std text or a circuit as circ/bench")
    _add_source(p)
    p.add_argument("--to", required=True, choices=["tm", "std", "circ", "bench"], help="output format")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    p.add_argument("--all", action="store_true", help="convert every item in the file (tm/circ only)")

    p = sub.add_parser("demo", help="check and run every example; print a table")
    p.add_argument("--examples", default=None, help="examples folder (default: the repo's examples/)")
    return ap


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.verb is None:
            build_parser().print_help()
            return EXIT_USAGE
        return _VERBS[args.verb](args)
    except Tm2nnError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tm2nn: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


# -- verbs ----------------------------------------------------------------------------------


def cmd_check(args) -> int:
    from tm2nn.syntax import load_all, select

    items = load_all(args.source, args.format)
    chosen = items if args.all else [select(items, args.name, args.source)]
    summaries = [it.summary() for it in chosen]
    if args.json:
        print(json.dumps(summaries if args.all else summaries[0]))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for s in summaries:
        t = Table(title=f"{args.source}: {s['kind']} {s['name']!r}", show_header=False, title_justify="left")
        for k, v in s.items():
            if k in ("kind", "name"):
                continue
            t.add_row(k, ", ".join(f"{a} {b}" for a, b in v.items()) if isinstance(v, dict) else str(v))
        console.print(t)
    if len(items) > 1 and not args.all:
        console.print(f"({len(items)} items in the file; --all shows every one, --name picks one)")
    return EXIT_OK


def cmd_run(args) -> int:
    from tm2nn.api import default_input, run_circuit
    from tm2nn.interp import DEFAULT_MAX_STEPS, run_machine
    from tm2nn.ir import Circuit
    from tm2nn.syntax import load

    if args.backend != "interp":
        raise Tm2nnError(f"unknown backend {args.backend!r} (available: interp)")
    obj = load(args.source, args.format, args.name)
    text = args.input
    if text is None:
        text = default_input(args.source, args.format, args.name) or ""
    if isinstance(obj, Circuit):
        report = run_circuit(obj, text)
        print(json.dumps(report) if args.json else report["outputs"])
        return EXIT_OK
    max_steps = DEFAULT_MAX_STEPS if args.max_steps is None else args.max_steps
    result = _with_progress(
        lambda cb: run_machine(obj, text, max_steps, trace=args.trace, progress=cb),
        total=max_steps, quiet=args.json, label=f"running {obj.name}",
    )
    report = result.report()
    if args.json:
        if args.trace:
            report = dict(report, trace=_trace_rows(result))
        print(json.dumps(report))
    else:
        if args.trace:
            for row in _trace_rows(result):
                print(f"step {row['step']:>8}  {row['state']:<12} head {row['head']!s:>8}  "
                      f"read {row['read']!r} write {row['write']!r}")
        _print_report(report)
    return EXIT_OK if result.halted else EXIT_FAIL


def _trace_rows(result) -> list[dict]:
    m, tr = result.machine, result.trace
    grid = bool(len(tr.head_row))
    return [
        {
            "step": k + 1,
            "state": m.states[tr.state[k]],
            "head": [tr.head_row[k], tr.head[k]] if grid else tr.head[k],
            "read": m.alphabet[tr.read[k]],
            "write": m.alphabet[tr.write[k]],
        }
        for k in range(len(tr))
    ]


def _print_report(report: dict) -> None:
    from rich.console import Console

    c = Console(highlight=False)
    status = "[green]halted[/]" if report["halted"] else "[red]did not halt[/] within --max-steps"
    c.print(f"{status} after {report['steps']:,} steps in state {report['state']!r}"
            + (f" ({report['outcome']})" if report["outcome"] else ""))
    c.print(f"tape  {report['tape']!r}  head {report['head']}  sigma {report['sigma']}", markup=False)


def _with_progress(fn, total: int, quiet: bool, label: str):
    """Run ``fn(callback)``; on a terminal, show a rich progress bar fed by the callback."""
    if quiet or not sys.stderr.isatty():
        return fn(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=True) as prog:
        task = prog.add_task(label, total=total)
        return fn(lambda n: prog.update(task, completed=n))


def cmd_convert(args) -> int:
    from tm2nn.syntax import dump, load_all, select

    items = load_all(args.source, args.format)
    if args.all:
        if args.to not in ("tm", "circ"):
            raise Tm2nnError(f"--all writes several items, which only the tm and circ formats hold (not {args.to!r})")
        texts = [dump(it, args.to) for it in items]
        text = "\n".join(texts)
    else:
        text = dump(select(items, args.name, args.source), args.to)
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, so a failure leaves nothing partial."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    except OSError as e:
        raise Tm2nnError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise Tm2nnError(f"cannot write {path}: {e.strerror}") from None


def cmd_demo(args) -> int:
    from tm2nn.demo import run_demo

    return run_demo(args.examples)


_VERBS = {"check": cmd_check, "run": cmd_run, "convert": cmd_convert, "demo": cmd_demo}


if __name__ == "__main__":
    sys.exit(main())
