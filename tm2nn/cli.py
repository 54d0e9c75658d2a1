"""The ``tm2nn`` command line.  Thin: parse arguments, call the API, render with rich.

Exit codes (ARCHITECTURE.md): 0 ok; 1 verification mismatch or a machine that did
not halt within ``--max-steps``; 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tm2nn.errors import Tm2nnError
from tm2nn.fileio import write_atomic

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


def _add_compile_options(p: argparse.ArgumentParser, corrections_flag: bool = True) -> None:
    p.add_argument("--backend", default="relu-circuit", help="construction to compile with (default relu-circuit)")
    p.add_argument("--steps", type=int, help="machines: step bound T for unrolling")
    p.add_argument("--tape", type=int, help="machines: tape window N cells (default 2T+1)")
    p.add_argument("--origin", type=int, help="machines: window index of the start cell (default N//2)")
    p.add_argument("--max-gates", type=int, default=5_000_000, help="refuse unrolls estimated above this many gates")
    if corrections_flag:
        p.add_argument("--no-corrections", action="store_true", help="omit the round() correction layers (Prop. 3.4)")
    p.add_argument("--pm-one", action="store_true", help="final map z -> 2z-1: outputs in {-1, +1}")
    p.add_argument("--max-input", type=int, help="rcnn: longest input tape the grid must hold (default T)")
    _add_attention_options(p)


def _add_attention_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--attention", choices=["hardmax", "softmax"], default="hardmax",
                   help="transformer: hard-max attention (ties averaged, as in the paper) or softmax")
    p.add_argument("--beta", type=float, default=10.0,
                   help="transformer: softmax inverse temperature (default 10)")


def _compile_from_args(args):
    from tm2nn.compiler import compile as tm2nn_compile

    return tm2nn_compile(
        args.source, args.backend, format=args.format, name=args.name, steps=args.steps,
        tape=args.tape, origin=args.origin, max_gates=args.max_gates,
        corrections=not getattr(args, "no_corrections", False), pm_one_output=args.pm_one,
        attention=args.attention, beta=args.beta, max_input=args.max_input,
    )


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
    p.add_argument("--backend", default="interp",
                   help="execution backend: interp (default), transformer (compiled with "
                   "T = --max-steps, default 1000, and decoded with its key/value cache) or rcnn "
                   "(the 3x3 filter applied over the grid, T = --max-steps, default 100) or gd-trace "
                   "(Welper §4.4: Frank-Wolfe steps on a ReLU loss, T = --max-steps, default 100)")
    p.add_argument("--engine", choices=["torch", "onnxruntime"], default="torch",
                   help="transformer, rcnn: run the torch module or the ONNX model")
    p.add_argument("--no-corrections", action="store_true", help="transformer: omit the round() corrections")
    _add_attention_options(p)
    p.add_argument("--json", action="store_true", help="print the run report as one JSON line")
    p.add_argument("--trace", action="store_true", help="also print every step")

    p = sub.add_parser("convert", help="write a machine as tm/std text or a circuit as circ/bench")
    _add_source(p)
    p.add_argument("--to", required=True, choices=["tm", "std", "circ", "bench"], help="output format")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    p.add_argument("--all", action="store_true", help="convert every item in the file (tm/circ only)")

    p = sub.add_parser("compile", help="compile a machine or circuit into a network (.onnx or .pt)")
    _add_source(p)
    _add_compile_options(p)
    p.add_argument("-o", "--output", required=True, help="model file to write: NAME.onnx or NAME.pt")
    p.add_argument("--json", action="store_true", help="print the size report as JSON")

    p = sub.add_parser("eval", help="run a compiled model (.onnx in onnxruntime, or .pt) on one input")
    p.add_argument("model", help="a model written by tm2nn compile")
    p.add_argument("--input", default="", help="input bits (circuits) or initial tape (machines)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON line")

    p = sub.add_parser("info", help="size report of a model or a source, next to the paper's bounds")
    p.add_argument("source", help="a model (.onnx/.pt) or a machine/circuit source")
    p.add_argument("--format", help="source format override")
    p.add_argument("--name", help="pick one machine/circuit from the source")
    _add_compile_options(p)
    p.add_argument("--engine", choices=["exact", "float64"], default="exact",
                   help="--backend abbe-sandon: the size of the exact G_n or of the float64 IR net")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("verify", help="check a compiled net against the reference interpreter")
    _add_source(p)
    _add_compile_options(p)
    p.add_argument("--input", action="append", help="verify on this input (repeatable); "
                   "default: exhaustive when small, else random")
    p.add_argument("--samples", type=int, default=10_000, help="random inputs when not exhaustive")
    p.add_argument("--seed", type=int, help="seed for random inputs (printed when chosen)")
    p.add_argument("--no-onnx", action="store_true", help="check only the torch module")
    p.add_argument("--find-beta", action="store_true",
                   help="transformer: search the smallest softmax beta with 0 mismatches (torch)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("margin", help="robustness to per-layer perturbations (all-layer margin)")
    _add_source(p)
    _add_compile_options(p, corrections_flag=False)
    p.add_argument("--samples", type=int, default=64, help="inputs to measure on")
    p.add_argument("--trials", type=int, default=8, help="random directions / attack restarts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("learn", help="train a network by SGD and compare it with the interpreter: a learner "
                       "machine (rcnn: Algorithm 1), a learner circuit (abbe-sandon: Lemma 3's net, exact) "
                       "or a machine with a '# gd-trace:' layout (gd-trace: Welper §5's extended network)")
    _add_source(p)
    p.add_argument("--train", help="rcnn and gd-trace: training set: CSV, one example a line, d features then "
                   "the label, each +1 or -1 (an optional header line is skipped)")
    p.add_argument("--samples", help="abbe-sandon: sample stream, a CSV of +1/-1 rows: n input bits (x) then "
                   "the label, or x, r, r' then the label (else r, r' are drawn from --seed)")
    p.add_argument("--target", help="abbe-sandon: draw the stream: parity:SECRET (e.g. parity:1011 or "
                   "parity:0,2) or const:B; x, r, r' uniform from --seed")
    p.add_argument("--test", type=int, default=None, help="fresh random test points (default 100 for rcnn, "
                   "1000 for abbe-sandon)")
    p.add_argument("--seed", type=int, default=0, help="seed of the samples and test points (default 0)")
    p.add_argument("--backend", default=None, help="construction to train (default: abbe-sandon for a learner "
                   f"circuit file, rcnn otherwise; available: {', '.join(_LEARN_BACKENDS)})")
    p.add_argument("--steps", type=int, help="rcnn: the learner's step bound t; L = t + 1 filter steps "
                   "(default: the most steps it takes on the training inputs).  abbe-sandon: SGD steps, "
                   "one sample each (required with --target; default: every --samples row)")
    p.add_argument("--noise", choices=["uniform", "max", "none"], default=None,
                   help="abbe-sandon, a noisy learner (§4.2, Lemma 6): the noise added to every weight at "
                   "every step: uniform in [-B, B] (the default), exactly ±B (max), or none; B = min(1/(n^2 t), "
                   "eps/t), Lemma 4's budget (docs/abbe_sandon.md)")
    p.add_argument("--work", type=int, help="rcnn: working columns right of the input (default 1; Definition 5 has L)")
    p.add_argument("--engine", choices=["exact", "float64"], default="exact",
                   help="abbe-sandon: exact (§4.1's G_n in exact arithmetic, the default: faster, "
                   "docs/abbe_sandon.md \"float64 engine and export\") or float64 (the dyadic re-parametrisation "
                   "as an IR net, emitted to torch and trained with torch.optim.SGD)")
    p.add_argument("--export-before", metavar="PATH", help="abbe-sandon --engine float64 and gd-trace: write the "
                   "net before training (.onnx or .pt)")
    p.add_argument("--export-after", metavar="PATH", help="abbe-sandon --engine float64 and gd-trace: write the "
                   "net after training (.onnx or .pt)")
    p.add_argument("--json", action="store_true", help="end with one JSON line (rcnn: examples, memorized, "
                   "test_agreement; abbe-sandon: steps, samples_used, test_accuracy, mismatches, test_inputs)")

    p = sub.add_parser("viz", help="draw a picture: spacetime, weights, attention or layers (.png or .svg)")
    p.add_argument("kind", help="spacetime | weights | attention | layers")
    _add_source(p)
    p.add_argument("-o", "--output", required=True, help="picture to write: NAME.png or NAME.svg")
    p.add_argument("--input", default=None, help="input tape (default: the file's '# input:' line, else empty)")
    p.add_argument("--steps", type=int, help="step bound (default: to halting, at most 200)")
    p.add_argument("--step", type=int, help="attention: the decoder step to show (default: the last)")
    p.add_argument("--layer", help="weights: the one affine layer to draw (default: the first 12)")
    p.add_argument("--backend", help="spacetime: transformer (default), rcnn or gd-trace; weights: any "
                   "compiling backend (default: relu-circuit for circuits, transformer for machines)")
    p.add_argument("--interpreter-only", action="store_true",
                   help="spacetime: draw only the interpreter's run (no network)")

    p = sub.add_parser("demo", help="check and run every example, compile and verify one per backend; print tables")
    p.add_argument("--examples", default=None, help="examples folder (default: the repo's examples/)")
    p.add_argument("--out", default=None, help="folder for the compiled models and the picture "
                   "(default: tm2nn-demo/ in the current folder)")
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


def _reject_learner(obj, verb: str) -> None:
    """A clear error for verbs that take one input, given a learner (which needs a sample stream)."""
    from tm2nn.backends.abbe_sandon.noisy_learner import NoisyLearner
    from tm2nn.ir import Learner

    if isinstance(obj, NoisyLearner):
        raise Tm2nnError(
            f"{obj.name!r} is a noisy learner (§4.2): it runs on {obj.t} samples, not on one --input, so "
            f"'{verb}' cannot run it ('learn' trains its net, 'check' summarises it). "
            f"--name {obj.h.name} picks its circuit h")
    if isinstance(obj, Learner):
        raise Tm2nnError(
            f"{obj.name!r} is a learner: it runs on a stream of samples, not on one --input, so "
            f"'{verb}' cannot run it (tm2nn.interp.learner.run_learner does; 'check' summarises it). "
            f"--name {obj.h.name} or --name {obj.g.name} picks one of its circuits")


def cmd_run(args) -> int:
    from tm2nn.api import default_input, run_circuit
    from tm2nn.interp import DEFAULT_MAX_STEPS, run_machine
    from tm2nn.ir import Circuit
    from tm2nn.syntax import load

    if args.backend not in ("interp", "transformer", "rcnn", "gd-trace"):
        raise Tm2nnError(f"unknown run backend {args.backend!r} (available: interp, transformer, rcnn, gd-trace)")
    obj = load(args.source, args.format, args.name)
    _reject_learner(obj, "run")
    text = args.input
    if text is None:
        text = default_input(args.source, args.format, args.name) or ""
    if args.backend == "transformer":
        return _run_transformer(args, obj, text)
    if args.backend == "rcnn":
        return _run_rcnn(args, obj, text)
    if args.backend == "gd-trace":
        return _run_gd(args, obj, text)
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


TRANSFORMER_DEFAULT_STEPS = 1000


def _run_transformer(args, m, text: str) -> int:
    """``run --backend transformer``: compile with T = --max-steps, decode incrementally."""
    from tm2nn.backends.transformer import compile as compile_transformer
    from tm2nn.ir import Circuit
    from tm2nn.ir.machine import check_input
    from tm2nn.verify.trace import run_compiled

    if isinstance(m, Circuit):
        raise Tm2nnError("the transformer backend runs machines, not circuits")
    check_input(m, text)
    steps = TRANSFORMER_DEFAULT_STEPS if args.max_steps is None else args.max_steps
    compiled = compile_transformer(m, steps=steps, attention=args.attention, beta=args.beta,
                                   corrections=not args.no_corrections)
    total = compiled.options["decoder_steps"]
    engine = "torch" if args.engine == "torch" else "onnx"
    report = _with_progress(
        lambda cb: run_compiled(compiled, text, engine, progress=(lambda i, n: cb(i)) if cb else None),
        total=total, quiet=args.json or engine != "torch", label=f"decoding {m.name}")
    if args.json:
        print(json.dumps(report))
    else:
        _print_report(report)
    return EXIT_OK if report["halted"] else EXIT_FAIL


RCNN_DEFAULT_STEPS = 100


def _run_rcnn(args, m, text: str) -> int:
    """``run --backend rcnn``: compile machine mode with T = --max-steps and the input's
    length, run the filter steps, decode the last source configuration."""
    from tm2nn.backends.rcnn import compile as compile_rcnn
    from tm2nn.ir import Circuit
    from tm2nn.ir.machine import check_input
    from tm2nn.verify.grid import run_grid

    if isinstance(m, Circuit):
        raise Tm2nnError("the rcnn backend runs machines, not circuits")
    check_input(m, text)
    steps = RCNN_DEFAULT_STEPS if args.max_steps is None else args.max_steps
    compiled = compile_rcnn(m, steps=steps, max_input=len(text))
    report = run_grid(compiled, text, "torch" if args.engine == "torch" else "onnxruntime")
    if args.json:
        print(json.dumps(report))
    else:
        _print_report(report)
    return EXIT_OK if report["halted"] else EXIT_FAIL


def _run_gd(args, m, text: str) -> int:
    """``run --backend gd-trace``: compile Welper §4.4's loss for T = --max-steps source
    steps and this input, run the optimizer (22), decode every iterate (mapped back to the
    source machine) and check it against the interpreters at every step."""
    from tm2nn.backends.gd_trace.machine_mode import DEFAULT_STEPS
    from tm2nn.backends.gd_trace.machine_mode import compile as compile_gd
    from tm2nn.ir import Circuit
    from tm2nn.ir.machine import check_input
    from tm2nn.verify.gd import check_one

    if isinstance(m, Circuit):
        raise Tm2nnError("the gd-trace backend runs machines, not circuits")
    if args.engine != "torch":
        raise Tm2nnError("the gd-trace backend trains its loss net with torch autograd (--engine torch); "
                         "the ONNX model is checked by 'tm2nn verify'")
    check_input(m, text)
    steps = DEFAULT_STEPS if args.max_steps is None else args.max_steps
    compiled = compile_gd(m, steps=steps, max_input=len(text))
    g, d, _ = check_one(compiled, text)
    report = g.result.report()
    report = dict(report, optimizer_steps=len(g.losses) - 1, verified=d is None)
    if args.trace:
        report["loss"] = g.losses
    if args.json:
        print(json.dumps(report))
    else:
        _print_report(report)
        print(f"{len(g.losses) - 1:,} optimizer steps (Welper (22)) on the §4.1 machine "
              f"({len(g.lowered.machine.states)} states, 2 tapes); "
              + ("every step matches the interpreter" if d is None else
                 f"FIRST DIVERGENCE at step {d[0]}: {d[1]}: expected {d[2]!r}, got {d[3]!r}"))
    if d is not None:
        return EXIT_FAIL
    return EXIT_OK if report["halted"] else EXIT_FAIL


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
    """Run ``fn(callback)``; on a terminal, show a rich progress bar fed by the callback
    ``callback(n, description=None)`` (a description replaces the bar's label)."""
    if quiet or not sys.stderr.isatty():
        return fn(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=True) as prog:
        task = prog.add_task(label, total=total)

        def update(n, description=None):
            if description is None:
                prog.update(task, completed=n)
            else:
                prog.update(task, completed=n, description=description)
        return fn(update)


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


def check_model_path(path: str, flag: str) -> Path:
    """A model file to write: ``.onnx`` or ``.pt`` in an existing folder, checked before
    any work is done (so a long compile or training never ends in a failed write)."""
    out = Path(path)
    if out.suffix not in (".onnx", ".pt"):
        raise Tm2nnError(f"{flag} must name a .onnx or .pt file, got {out.name!r}")
    if not out.parent.is_dir():
        raise Tm2nnError(f"{flag}: folder {str(out.parent)!r} does not exist")
    return out


def cmd_compile(args) -> int:
    from tm2nn.compiler import save, sha256_of

    out = check_model_path(args.output, "-o")
    compiled = _compile_from_args(args)
    save(compiled, out, sha256_of(args.source))
    info = compiled.net.info()
    if args.json:
        info.pop("widths", None)
        print(json.dumps({"output": str(out), "backend": compiled.backend, **info}))
    else:
        print(f"wrote {out} ({out.stat().st_size:,} bytes): {compiled.backend}, "
              f"{info['affine_layers']} affine layers, max width {info['max_width']}, "
              f"{info['params_nonzero']:,} nonzero parameters")
    return EXIT_OK


def load_model(path: str):
    """(runner, metadata) for a model file written by ``tm2nn compile``."""
    p = Path(path)
    if not p.is_file():
        raise Tm2nnError(f"no such file: {p}")
    if p.suffix == ".onnx":
        from tm2nn.emit.onnx_emit import onnx_metadata, run_onnx

        try:
            meta = onnx_metadata(p)
        except Exception as e:  # a corrupt or foreign file
            raise Tm2nnError(f"{p}: not a readable ONNX model ({type(e).__name__})") from None
        blob = p.read_bytes()
        runner = lambda x: run_onnx(blob, x)  # noqa: E731
        if _takes_tokens(meta):
            from tm2nn.verify.trace import onnx_runner

            runner = onnx_runner(blob)
    elif p.suffix == ".pt":
        import torch

        from tm2nn.emit.torch_emit import run_torch

        try:
            saved = torch.load(p, weights_only=False)
            meta, module = saved["metadata"], saved["module"]
        except Exception as e:
            raise Tm2nnError(f"{p}: not a model saved by tm2nn ({type(e).__name__})") from None
        runner = lambda x: run_torch(module, x)  # noqa: E731
        if _takes_tokens(meta):
            from tm2nn.verify.trace import torch_runner

            runner = torch_runner(module)
    else:
        raise Tm2nnError(f"{p.name}: a model file ends in .onnx or .pt")
    if "tm2nn.input_encoding" not in meta:
        raise Tm2nnError(f"{p}: no tm2nn metadata (was it written by tm2nn compile?)")
    return runner, meta


def _takes_tokens(meta: dict) -> bool:
    return json.loads(meta.get("tm2nn.input_encoding", "{}")).get("kind") == "tokens"


def cmd_eval(args) -> int:
    from tm2nn.codec import decode, encode

    runner, meta = load_model(args.model)
    enc_in = json.loads(meta["tm2nn.input_encoding"])
    enc_out = json.loads(meta["tm2nn.output_encoding"])
    if enc_in.get("kind") == "tokens":  # a transformer: token ids in, per-step taps out
        from tm2nn.backends.transformer.decoding import TraceDecoder
        from tm2nn.verify.trace import encode_tokens

        report = TraceDecoder(enc_out).decode(runner(encode_tokens(enc_in, [args.input]))[0], args.input).report
    elif enc_in.get("kind") == "gd_trace":  # Welper §4.4: run the optimizer on the rebuilt net
        from tm2nn.backends.gd_trace.machine_mode import from_metadata, run_gd

        report = run_gd(from_metadata(enc_in, enc_out), args.input).result.report()
    elif enc_in.get("kind") == "rcnn_grid":  # the RCNN: a start grid in, every step's grid out
        from tm2nn.verify.grid import GridModel

        gm = GridModel.from_metadata(enc_in, enc_out)
        import numpy as np

        report = gm.decode(np.asarray(runner(gm.grids([args.input]))[0]), args.input).report()
    else:
        x = encode(enc_in, args.input)[None, :]
        report = decode(enc_out, runner(x)[0])
    if args.json:
        print(json.dumps(report))
    elif "outputs" in report:
        print(report["outputs"])
    else:
        _print_report(report)
    return EXIT_FAIL if report.get("halted") is False or report.get("overflow") else EXIT_OK


def cmd_info(args) -> int:
    p = Path(args.source)
    if p.suffix in (".onnx", ".pt"):
        _, meta = load_model(args.source)
        info = json.loads(meta["tm2nn.info"])
        bounds = json.loads(meta["tm2nn.bounds"])
        backend = meta["tm2nn.backend"]
    elif args.backend == "abbe-sandon":
        return _info_abbe_sandon(args)
    else:
        args.no_corrections = getattr(args, "no_corrections", False)
        compiled = _compile_from_args(args)
        info, bounds, backend = compiled.net.info(), compiled.bounds, compiled.backend
        info.pop("widths", None)
    if args.json:
        print(json.dumps({"backend": backend, "info": info, "bounds": bounds}))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{args.source}: {backend}", title_justify="left")
    t.add_column("quantity")
    t.add_column("this network", justify="right")
    t.add_column("paper")
    for q, ours, paper in bounds:
        t.add_row(q, str(ours), str(paper))
    if not bounds:
        for k in ("affine_layers", "max_width", "params_dense", "params_nonzero", "l1_norm",
                  "distinct_weight_values"):
            v = info[k]
            t.add_row(k, f"{v:,.6g}" if isinstance(v, float) else f"{v:,}", "")
    Console().print(t)
    return EXIT_OK


def _info_abbe_sandon(args) -> int:
    """``info --backend abbe-sandon``: the size of Lemma 3's net G_n for a learner."""
    from tm2nn.backends.abbe_sandon.net import build_net
    from tm2nn.backends.abbe_sandon.noisy_learner import NoisyLearner
    from tm2nn.ir import Learner
    from tm2nn.syntax import load

    obj = load(args.source, args.format, args.name)
    if isinstance(obj, NoisyLearner):
        from tm2nn.backends.abbe_sandon.noisy import build_noisy_net, size_report

        if getattr(args, "engine", "exact") == "float64":
            raise Tm2nnError("--engine float64 is for §4.1 learners; a noisy learner's net (Lemma 6) runs in "
                             "mpmath only")
        rows = size_report(build_noisy_net(obj))
        title = f"{args.source}: abbe-sandon (Lemma 6's noise-tolerant G_n, §4.2)"
    elif not isinstance(obj, Learner):
        raise Tm2nnError(f"the abbe-sandon backend builds a net for a learner (h and g circuits); "
                         f"{obj.name!r} is a {type(obj).__name__.lower()}")
    elif getattr(args, "engine", None) == "float64":
        from tm2nn.backends.abbe_sandon.ir_net import build_ir_net

        rows = build_ir_net(obj).size_report()
    else:
        rows = build_net(obj).size_report()
    if not isinstance(obj, NoisyLearner):
        what = ("float64 dyadic weights, IR net" if getattr(args, "engine", None) == "float64"
                else "exact weights")
        title = f"{args.source}: abbe-sandon (Lemma 3's G_n, {what})"
    if args.json:
        print(json.dumps({"backend": "abbe-sandon", "info": {q.strip(): v for q, v, _ in rows},
                          "bounds": [list(r) for r in rows]}))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column("quantity")
    t.add_column("this network", justify="right")
    t.add_column("paper")
    for q, ours, paper in rows:
        t.add_row(q, ours, paper)
    Console().print(t)
    return EXIT_OK


def cmd_verify(args) -> int:
    from tm2nn.verify import verify_compiled

    if args.find_beta:
        return _find_beta(args)
    compiled = _compile_from_args(args)
    rep = verify_compiled(compiled, inputs=args.input, samples=args.samples, seed=args.seed,
                          use_onnx=not args.no_onnx)
    if args.json:
        print(json.dumps(rep.to_json()))
        return EXIT_OK if rep.ok else EXIT_FAIL
    what = {"exhaustive": "all", "random": "random", "given": "given"}[rep.mode]
    seed = f" (seed {rep.seed})" if rep.seed is not None else ""
    ref = "the bit-parallel evaluator" if compiled.output_encoding["kind"] == "bits" else "the interpreter"
    print(f"{compiled.backend}: {rep.n_inputs:,} {what} inputs{seed} against {ref}")
    for eng, bad in rep.engines.items():
        dev = rep.max_deviation.get(eng, 0.0)
        print(f"  {eng:<12} {'ok' if bad == 0 else 'MISMATCH'}: {bad} mismatching inputs "
              f"(max |output - exact value| = {dev:.2g})")
    if rep.out_of_window:
        print(f"  {rep.out_of_window:,} inputs run outside the {compiled.options.get('tape')}-cell tape window "
              "within T steps; the net flags them as overflow (use a larger --tape to cover them)")
    if rep.first is not None:
        f = rep.first
        at = f" step {f.step}," if f.step is not None else ""
        print(f"first divergence ({f.engine}): input {f.input!r},{at} {f.field}: expected {f.expected!r}, got {f.got!r}")
    return EXIT_OK if rep.ok else EXIT_FAIL


def _find_beta(args) -> int:
    """``verify --find-beta``: the smallest softmax β with 0 mismatches (torch)."""
    from tm2nn.verify.beta import find_beta

    if args.backend != "transformer":
        raise Tm2nnError("--find-beta applies to --backend transformer")
    res = find_beta(lambda beta: _compile_from_args(argparse.Namespace(**{**vars(args), "attention": "softmax", "beta": beta})),
                    inputs=args.input, samples=args.samples, seed=args.seed)
    if args.json:
        print(json.dumps(res))
    elif res["beta"] is None:
        print(f"no beta up to {res['tried'][-1][0]:g} gave 0 mismatches")
    else:
        print(f"smallest beta with 0 mismatches: {res['beta']:.4g} "
              f"({res['n_inputs']:,} {res['mode']} inputs; next lower tried: {res['below']:.4g})")
        for beta, bad in res["tried"]:
            print(f"  beta {beta:<10.4g} {bad} mismatching inputs")
    return EXIT_OK if res["beta"] is not None else EXIT_FAIL


def cmd_margin(args) -> int:

    from tm2nn.interp import exhaustive_inputs, random_inputs
    from tm2nn.ir import Circuit
    from tm2nn.syntax import load
    from tm2nn.verify.margin import margin_report

    if args.backend != "relu-circuit":
        raise Tm2nnError(f"margin is measured for the relu-circuit backend, not {args.backend!r}")
    ir = load(args.source, args.format, args.name)
    _reject_learner(ir, "margin")
    if isinstance(ir, Circuit):
        circuit = ir
        n = len(circuit.inputs)
        x = exhaustive_inputs(n) if n <= 10 else random_inputs(n, args.samples, args.seed)
    else:
        from tm2nn.codec import encode_many
        from tm2nn.compiler import unroll_machine
        from tm2nn.verify.check import machine_inputs

        circuit, layout = unroll_machine(ir, args.steps, args.tape, args.origin, args.max_gates)
        enc = {"kind": "unrolled_tm", "layout": layout.to_json()}
        tapes, _, _ = machine_inputs(enc["layout"], args.samples, args.seed)
        x = encode_many(enc, tapes[: args.samples]) > 0.5
    rows = margin_report(circuit, x, seed=args.seed, trials=args.trials, pm_one_output=args.pm_one)
    if args.json:
        print(json.dumps(rows))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{args.source}: per-layer parameter perturbation margin (l2 per layer), "
              f"{len(x)} inputs", title_justify="left")
    for col in ("corrections", "layers", "certified (lower bound)", "gradient attack (upper)",
                "random directions (upper)"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row("on" if r["corrections"] else "off", str(r["layers"]), f"{r['certified']:.3g}",
                  f"{r['eps_gradient']:.3g}", f"{r['eps_random']:.3g}")
    Console().print(t)
    return EXIT_OK


def cmd_viz(args) -> int:
    """``tm2nn viz KIND SOURCE -o OUT``: one of the pictures of :mod:`tm2nn.viz`."""
    from tm2nn.api import default_input
    from tm2nn.ir import Circuit, Machine
    from tm2nn.syntax import load
    from tm2nn.viz import KINDS, check_out, save

    if args.kind not in KINDS:
        raise Tm2nnError(f"unknown picture {args.kind!r} (one of: {', '.join(KINDS)})")
    out = check_out(args.output)
    obj = load(args.source, args.format, args.name)
    text = args.input
    if text is None:  # what the file documents: an embedded tape, else its '# input:' line
        from tm2nn.demo import example_header

        text = default_input(args.source, args.format, args.name)
        if text is None and isinstance(obj, Machine):
            text = example_header(Path(args.source)).get("input", "")
        text = text or ""
    kind = args.kind
    if kind == "layers":
        if not isinstance(obj, Circuit):
            raise Tm2nnError("viz layers draws a circuit's layering; this source is not a circuit")
        from tm2nn.viz import draw_layers

        fig, _ = draw_layers(obj)
    elif kind == "weights":
        from tm2nn.compiler import compile as compile_source
        from tm2nn.viz import draw_weights

        backend = args.backend or ("relu-circuit" if isinstance(obj, Circuit) else "transformer")
        steps = args.steps
        if isinstance(obj, Machine) and steps is None:
            from tm2nn.viz.runs import default_steps

            steps = default_steps(obj, text)
        fig, _ = draw_weights(compile_source(obj, backend, steps=steps, max_input=len(text)).net, args.layer)
    else:
        if not isinstance(obj, Machine):
            raise Tm2nnError(f"viz {kind} draws a machine's run; this source is a {type(obj).__name__.lower()}")
        from tm2nn.ir import GridMachine
        from tm2nn.viz.runs import default_steps

        if isinstance(obj, GridMachine):
            raise Tm2nnError(f"viz {kind} draws line machines; {obj.name!r} has a 2D tape")
        steps = default_steps(obj, text) if args.steps is None else args.steps
        if kind == "attention":
            if (args.backend or "transformer") != "transformer":
                raise Tm2nnError(f"viz attention shows the transformer's attention, not {args.backend!r}'s")
            from tm2nn.compiler import compile as compile_source
            from tm2nn.viz import draw_attention

            fig, _ = draw_attention(compile_source(obj, "transformer", steps=steps), text, args.step)
        else:
            from tm2nn.viz import draw_spacetime, interpreter_run, net_run

            backend = None if args.interpreter_only else (args.backend or "transformer")
            got = net_run(obj, text, steps, backend) if backend else None
            fig, first = draw_spacetime(obj, text, interpreter_run(obj, text, steps), got, backend or "")
            save(fig, out)
            print(f"wrote {out} ({out.stat().st_size:,} bytes)")
            if first is not None:
                print(f"the {backend} run diverges from the interpreter's at step {first}", file=sys.stderr)
                return EXIT_FAIL
            return EXIT_OK
    save(fig, out)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return EXIT_OK


def cmd_demo(args) -> int:
    from tm2nn.demo import run_demo

    return run_demo(args.examples, args.out)


def _learn_rcnn(args, obj, X, Y) -> dict:
    from tm2nn.backends.rcnn.learner import run as learn_run

    def fn(cb):
        def progress(phase, done, total):  # one bar: the m + 1 SGD steps, then the test points
            if cb is not None:
                cb(done if phase == "train" else X.shape[0] + 1 + done)
        return learn_run(obj, X, Y, test=args.test, seed=args.seed, steps=args.steps, work=args.work,
                         progress=progress)
    return _with_progress(fn, X.shape[0] + 1 + max(args.test, 0), args.json, "learning")


def _learn_rcnn_verb(args, obj) -> int:
    from tm2nn.datasets import load_csv

    if args.train is None:
        raise Tm2nnError("learn --backend rcnn needs --train CSV (the training set)")
    if args.samples is not None or args.target is not None:
        raise Tm2nnError("--samples and --target are for --backend abbe-sandon; rcnn reads --train")
    args.test = 100 if args.test is None else args.test
    if args.test < 0:
        raise Tm2nnError("--test must be >= 0")
    X, Y = load_csv(args.train)
    rep = _learn_rcnn(args, obj, X, Y)
    ok = rep["memorized"] and rep["test_agreement"] == 1.0
    if not args.json:
        from rich.console import Console

        c = Console()
        c.print(f"{rep['examples']} examples of {rep.get('features', X.shape[1])} features, memorized: "
                + ("[green]yes[/]" if rep["memorized"] else "[red]no[/]"))
        for k in ("steps", "filter_steps", "working_columns", "max_w_error", "max_memorization_output",
                  "max_prediction_error"):
            if k in rep:
                c.print(f"  {k.replace('_', ' ')}: {rep[k]}")
        c.print(f"agreement with the interpreter on {args.test} fresh points: "
                + (f"[green]{rep['test_agreement']:.4f}[/]" if ok else f"[red]{rep['test_agreement']:.4f}[/]"))
    if args.json:
        print(json.dumps({"examples": rep["examples"], "memorized": rep["memorized"],
                          "test_agreement": rep["test_agreement"]}))
    return EXIT_OK if ok else EXIT_FAIL


def _stream_args(args):
    """The checks shared by both abbe-sandon learner kinds: (number of test points, the
    test points' generator)."""
    import numpy as np

    if (args.samples is None) == (args.target is None):
        raise Tm2nnError("learn --backend abbe-sandon needs exactly one of --samples CSV or --target SPEC")
    if args.train is not None:
        raise Tm2nnError("--train is for --backend rcnn; the abbe-sandon backend reads --samples or --target")
    if args.steps is not None and args.steps < 1:
        raise Tm2nnError("--steps must be >= 1")
    n_test = 1000 if args.test is None else args.test
    if n_test < 0:
        raise Tm2nnError("--test must be >= 0")
    return n_test, np.random.default_rng([args.seed, 1])


def _noisy_stream(args, lr):
    """(train xs [t, n], ys [t], test xs [N, n], test labels [N]) as bool arrays for a §4.2
    learner: the first t samples of the stream; tests fresh from --seed (--target) or the
    CSV's own rows (--samples, as for §4.1)."""
    from tm2nn.learners.targets import parse_target, samples

    n_test, rng = _stream_args(args)
    if args.steps is not None and args.steps != lr.t:
        raise Tm2nnError(f"a noisy learner trains on exactly its t = {lr.t} samples (Lemma 6); "
                         f"--steps {args.steps} does not match (leave it out)")
    if args.engine != "exact" or args.export_before or args.export_after:
        raise Tm2nnError("--engine float64 and --export-* are for §4.1 learners; a noisy learner's net "
                         "(Lemma 6) is trained in mpmath")
    if args.target is not None:
        tgt = parse_target(args.target, lr.n)
        tr = samples(tgt, lr.t, args.seed)
        tx = rng.integers(0, 2, size=(n_test, lr.n)).astype(bool)
        return tr.xs, tr.ys, tx, tgt(tx)
    from tm2nn.datasets import load_csv

    X, Y = load_csv(args.samples)
    X, Y = X > 0, Y > 0
    if X.shape[1] != lr.n:
        raise Tm2nnError(f"{args.samples}: rows have {X.shape[1]} features; noisy learner {lr.name!r} has "
                         f"{lr.n} input bits")
    if X.shape[0] < lr.t:
        raise Tm2nnError(f"{args.samples} has {X.shape[0]} samples; noisy learner {lr.name!r} needs t = {lr.t}")
    return X[:lr.t], Y[:lr.t], X, Y


def _learn_noisy(args, lr) -> int:
    """``learn`` on a §4.2 learner: Lemma 6's G_n trained by perturbed SGD (noisy.train_noisy)."""
    import numpy as np

    from tm2nn.backends.abbe_sandon.noisy import train_noisy

    xs, ys, txs, tys = _noisy_stream(args, lr)
    mode = args.noise or "uniform"
    xs_l, ys_l = xs.astype(int).tolist(), ys.astype(int).tolist()
    tests = txs.astype(int).tolist()
    x0 = tests[0] if tests else [0] * lr.n

    def fn(cb):
        return train_noisy(lr, xs_l, ys_l, x0, noise=0 if mode == "none" else 1,
                           mode="max" if mode == "max" else "uniform", seed=args.seed, tests=tests,
                           progress=cb)
    rep = _with_progress(fn, lr.t + len(tests), args.json, "training (§4.2)")
    signs = np.array([float(o) > 0 for o in rep.test_outputs], dtype=bool)
    n = len(tests)
    acc = float((signs == tys).mean()) if n else None
    agree = float((signs == np.array(rep.test_expected, dtype=bool)).mean()) if n else None
    mism = len(rep.violations)
    if args.json:
        print(json.dumps({"steps": lr.t, "samples_used": lr.t, "test_accuracy": acc, "mismatches": mism,
                          "test_inputs": n, "noise": mode, "agreement": agree}))
    else:
        import mpmath
        from rich.console import Console

        c = Console(highlight=False)
        c.print(f"{lr.name}: Lemma 6's G_n, {lr.t} perturbed SGD steps (noise {mode}, max |delta| "
                f"{mpmath.nstr(rep.noise_max, 4)}) in {rep.seconds:.2f} s")
        if mism:
            c.print(f"[red]{mism} violation(s); first: step {rep.violations[0].step}: {rep.violations[0].what}[/]")
        else:
            c.print("  memory decoded = the stored samples at every step; outputs within eps' of 1/2; "
                    "no weight outside the copies of M' moved beyond its noise")
        if n:
            c.print(f"test accuracy on {n} inputs: {acc:.4f}; agreement with h on the stored samples: {agree:.4f}")
    return EXIT_OK if not mism else EXIT_FAIL


def _abbe_sandon_stream(args, lr):
    """(train xs, ys, rs, r2s, test xs, ys, rs, r2s) as bool arrays for ``learn --backend abbe-sandon``."""
    import numpy as np

    from tm2nn.learners.targets import parse_target, samples

    k_r, k_c = len(lr.random), len(lr.coin)
    n_test, rng = _stream_args(args)
    if args.noise is not None:
        raise Tm2nnError("--noise is for a noisy learner (§4.2, a noisy_learner block); "
                         f"{lr.name!r} is a §4.1 learner")
    if args.target is not None:
        if args.steps is None:
            raise Tm2nnError("--target needs --steps N (the number of SGD steps, one fresh sample each)")
        tgt = parse_target(args.target, lr.n)
        tr = samples(tgt, args.steps, args.seed, random_bits=k_r)
        tx = rng.integers(0, 2, size=(n_test, lr.n)).astype(bool)
        return (tr.xs, tr.ys, tr.rs, tr.r2s[:, None][:, :k_c], tx, tgt(tx),
                rng.integers(0, 2, size=(n_test, k_r)).astype(bool),
                rng.integers(0, 2, size=(n_test, k_c)).astype(bool))
    from tm2nn.datasets import load_csv

    X, Y = load_csv(args.samples)
    X, Y = X > 0, Y > 0
    rows, d = X.shape
    if d not in (lr.n, lr.n + k_r + k_c):
        raise Tm2nnError(f"{args.samples}: rows have {d} features; learner {lr.name!r} has {lr.n} input bits "
                         f"(and {k_r + k_c} random bits r, r')")
    steps = rows if args.steps is None else args.steps
    if steps > rows:
        raise Tm2nnError(f"--steps {steps} but {args.samples} has only {rows} samples")
    if d == lr.n:
        rb = rng.integers(0, 2, size=(rows, k_r + k_c)).astype(bool)
        X = np.concatenate([X, rb], axis=1)
    xs, rs, r2 = X[:, :lr.n], X[:, lr.n:lr.n + k_r], X[:, lr.n + k_r:]
    # no target: the trained net is tested on the stream's own rows (documented)
    return xs[:steps], Y[:steps], rs[:steps], r2[:steps], xs, Y, rs, r2


def _learn_abbe_sandon(args, obj) -> int:
    from tm2nn.backends.abbe_sandon.noisy_learner import NoisyLearner
    from tm2nn.ir import Learner

    if isinstance(obj, NoisyLearner):
        return _learn_noisy(args, obj)
    if not isinstance(obj, Learner):
        raise Tm2nnError(f"the abbe-sandon backend trains a learner (h and g circuits, Abbe & Sandon Lemma 3); "
                         f"{obj.name!r} is a {type(obj).__name__.lower()}")
    engine = getattr(args, "engine", "exact") or "exact"
    exports = {k: getattr(args, k, None) for k in ("export_before", "export_after")}
    for k, path in exports.items():
        if path and engine != "float64":
            raise Tm2nnError(f"--{k.replace('_', '-')} needs --engine float64 (the exact engine's net is no IR net)")
        if path:
            check_model_path(path, f"--{k.replace('_', '-')}")
    xs, ys, rs, r2s, txs, tys, trs, tr2s = _abbe_sandon_stream(args, obj)
    total = len(xs) + len(txs)

    def fn(cb):
        if engine == "float64":
            from tm2nn.backends.abbe_sandon.train_torch import learn as learn_f64

            return learn_f64(obj, xs, ys, rs, r2s, txs, tys, trs, tr2s, progress=cb, **exports)
        from tm2nn.backends.abbe_sandon.train import learn

        return learn(obj, xs, ys, rs, r2s, txs, tys, trs, tr2s, progress=cb)
    rep = _with_progress(fn, total, args.json, "training")
    if not args.json:
        from rich.console import Console

        c = Console(highlight=False)
        how = ("in exact arithmetic" if engine == "exact"
               else "with torch.optim.SGD in float64 (dyadic re-parametrisation)")
        c.print(f"{obj.name}: {rep['steps']} SGD steps {how} ({rep['steps_per_second']:.1f} steps/s), "
                f"memory changed in {rep['memory_changes']} steps, last at step {rep['samples_used']}")
        for k, path in exports.items():
            if path:
                c.print(f"  wrote the net {k.split('_')[1]} training to {path}")
        c.print(f"  training accuracy (net output = label): {rep['train_accuracy']:.3f}")
        if rep["mismatch"]:
            c.print(f"[red]mismatch with the learner at {rep['mismatch']}[/]")
        else:
            c.print("  net output and decoded memory = the learner's at every step; no weight outside "
                    "the M_s copies changed")
            c.print(f"test accuracy on {rep['test_inputs']} inputs: {rep['test_accuracy']:.4f}")
    else:
        acc = rep["test_accuracy"]
        print(json.dumps({"steps": rep["steps"], "samples_used": rep["samples_used"],
                          "test_accuracy": None if acc != acc else acc, "mismatches": rep["mismatches"],
                          "test_inputs": rep["test_inputs"]}))
    return EXIT_OK if not rep["mismatches"] else EXIT_FAIL


#: ``learn --backend B``: one function per construction, ``(args, source object) -> exit code``.
def _learn_gd(args, obj) -> int:
    """``learn MACHINE.tm --backend gd-trace --train CSV``: Welper §5's extended network,
    trained by least squares (2) with the mixed Frank-Wolfe / gradient update (3) until the
    stopping criterion (4); checked against the interpreters (Prop. 2.1)."""
    from tm2nn.backends.gd_trace.extended import Extended, Layout
    from tm2nn.datasets import load_csv
    from tm2nn.ir import Machine
    from tm2nn.syntax import gd_layout
    from tm2nn.verify.gd import learn_report

    if not isinstance(obj, Machine):
        raise Tm2nnError("learn --backend gd-trace trains the extended network of a machine (Welper §5)")
    if args.train is None:
        raise Tm2nnError("learn --backend gd-trace needs --train CSV (the training set)")
    if args.samples is not None or args.target is not None:
        raise Tm2nnError("--samples and --target are for --backend abbe-sandon; gd-trace reads --train")
    for flag in ("export_before", "export_after"):
        if getattr(args, flag) is not None:
            check_model_path(getattr(args, flag), f"--{flag.replace('_', '-')}")
    X, Y = load_csv(args.train)
    layout = Layout.from_header(gd_layout.parse(Path(args.source).read_text(encoding="utf-8"), args.source))
    if X.shape != (layout.n, layout.M):
        raise Tm2nnError(f"{args.source} is laid out for {layout.n} samples of {layout.M} features; "
                         f"{args.train} has {X.shape[0]} samples of {X.shape[1]}")
    ext = Extended(obj, layout)
    if args.export_before:
        _save_net(ext, ext.net, args.export_before, "before training")
    tests = 20 if args.test is None else args.test
    rep = _with_progress(lambda cb: learn_report(ext, X, Y, tests=tests, seed=args.seed, progress=cb),
                         total=ext.low.lowered_steps(layout.steps, ext.text_len) + 1, quiet=args.json,
                         label="training the extended network")
    r = rep.pop("result")
    if args.export_after:
        _save_net(ext, r.module.to_net(), args.export_after, "after training")
    ok = (rep["stopped_at_machine_steps_plus_1"] and rep["trace_matches"] and rep["theta_matches"]
          and rep["z_equals_y"]
          and rep["F_equals_f_theta_on_train"] and rep["test_agreement"] == 1.0)
    if args.json:
        print(json.dumps(rep))
    else:
        from rich.console import Console

        c = Console(highlight=False)
        c.print(f"{rep['samples']} samples of {rep['features']} features: stopping criterion (4) after "
                f"{rep['optimizer_steps']} optimizer steps = {rep['machine_steps']} machine steps + 1 "
                f"({rep['source_steps']} source steps)")
        c.print(f"  every iterate = the §4.1 machine's configuration: {'yes' if rep['trace_matches'] else 'NO'}")
        c.print(f"  theta = {rep['theta']} (interpreter: {rep['theta_interpreter']})")
        c.print(f"  F = f_theta on the training set and on {tests} fresh datasets: "
                f"{rep['F_equals_f_theta_on_train']} / {rep['test_agreement']:.4f}")
    return EXIT_OK if ok else EXIT_FAIL


def _save_net(ext, net, path: str, what: str) -> None:
    """Write Welper §5's extended net (trained or not) as ``.onnx`` or ``.pt`` (a torch
    module), with the metadata ``tm2nn eval`` / ``info`` read: the input is the dataset's
    ``n x M`` feature signs (``--input +-+-..``), the output ``F(x)``, one value per sample."""
    import io

    from tm2nn.fileio import write_atomic

    k = ext.k
    info = net.info()
    info.pop("widths", None)
    bounds = [["simplex dimension |V| (§4.4, tripled)", f"{len(ext.ts.verts):,}", ""],
              ["tape cells τ (2 tapes)", f"{ext.tau:,}", ""],
              ["b, γ, c (§5.4 option 2)", f"{k.b:g}, {k.gamma:.4g}, {k.c:.6g}", "docs/gd_trace.md, Part 4"],
              ["B_stop = B_lo < B_hi", f"{k.B_stop:g} < {k.B_hi:.6g}", "(4), §5.3"]]
    meta = {"tm2nn.backend": "gd-trace", "tm2nn.what": f"Welper §5 extended network, {what}",
            "tm2nn.source": ext.m.name,
            "tm2nn.input_encoding": json.dumps({"kind": "signs", "names": list(net.inputs[0].space.labels)}),
            "tm2nn.output_encoding": json.dumps({"kind": "values", "names": list(net.spaces[net.outputs[0]].labels)}),
            "tm2nn.info": json.dumps(info, default=str), "tm2nn.bounds": json.dumps(bounds)}
    out = Path(path)
    if out.suffix == ".onnx":
        from tm2nn.emit.onnx_emit import save_onnx, to_onnx

        save_onnx(to_onnx(net, meta), out)
    else:
        import torch

        from tm2nn.emit.torch_emit import to_torch

        buf = io.BytesIO()
        torch.save({"module": to_torch(net, torch.float64), "metadata": meta}, buf)
        write_atomic(out, buf.getvalue())


_LEARN_BACKENDS = {"rcnn": _learn_rcnn_verb, "abbe-sandon": _learn_abbe_sandon, "gd-trace": _learn_gd}


def cmd_learn(args) -> int:
    from tm2nn.backends.abbe_sandon.noisy_learner import NoisyLearner
    from tm2nn.ir import Learner
    from tm2nn.syntax import load

    if args.backend is not None and args.backend not in _LEARN_BACKENDS:
        raise Tm2nnError(f"unknown learn backend {args.backend!r} (available: {', '.join(_LEARN_BACKENDS)})")
    obj = load(args.source, args.format, args.name)
    backend = args.backend or ("abbe-sandon" if isinstance(obj, (Learner, NoisyLearner)) else "rcnn")
    return _LEARN_BACKENDS[backend](args, obj)


_VERBS = {
    "check": cmd_check, "run": cmd_run, "convert": cmd_convert, "compile": cmd_compile,
    "eval": cmd_eval, "info": cmd_info, "verify": cmd_verify, "margin": cmd_margin, "demo": cmd_demo, "viz": cmd_viz,
    "learn": cmd_learn,
}


if __name__ == "__main__":
    sys.exit(main())
