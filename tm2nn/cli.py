"""The ``tm2nn`` command line.  Thin: parse arguments, call the API, render with rich.

Backend options are not written here: every backend's options dataclass becomes flags of
the verbs that compile or train (:mod:`tm2nn.flags`), and the chosen backend validates
them.  Exit codes (ARCHITECTURE.md): 0 ok; 1 verification mismatch or a machine that did
not halt within the step bound; 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tm2nn import __version__, backends, export_command, interrupt, memwatch, verbs
from tm2nn.api import default_input, load_model, run
from tm2nn.compiler import compile as compile_source
from tm2nn.compiler import default_backend, learn, load_ir
from tm2nn.console import (
    console,
    examples_dir,
    print_beta,
    print_eval,
    print_interrupted,
    print_report,
    print_statistics,
    print_summaries,
    print_table,
    print_trace,
    print_verify,
    print_warnings,
    progress,
    verify_progress,
)
from tm2nn.errors import Tm2nnError
from tm2nn.fileio import read_input, write_atomic
from tm2nn.flags import Parser, add_device, add_source, engine_list, flag_of, limit_flags
from tm2nn.flags import add_backend_options as _add_backend_options
from tm2nn.flags import add_sample_flags as _add_sample_flags
from tm2nn.flags import add_statistics_flags as _add_statistics_flags
from tm2nn.flags import applied_limits as _applied_limits
from tm2nn.flags import backend_values as _backend_values
from tm2nn.flags import statistics_values as _statistics_values
from tm2nn.handle import Compiled
from tm2nn.limits import SEED_MAX, flag_int
from tm2nn.lint import check_report
from tm2nn.modelfile import SUFFIXES, check_model_path
from tm2nn.options import OptionError
from tm2nn.report import trace_rows
from tm2nn.source import SourceText
from tm2nn.syntax import dump, load_all, select
from tm2nn.verify import DEFAULT_BUDGET
from tm2nn.verify.statistics import statistics_report

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="tm2nn", description="Compile Turing machines and boolean circuits into exact, verified neural "
                "networks.", epilog=f"examples: {examples_dir()} (machines and circuits; tm2nn demo runs them)")
    ap.add_argument("--version", action="version", version=f"tm2nn {__version__}")
    sub = ap.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    _add, limits = sub.add_parser, limit_flags(Parser(add_help=False))
    sub.add_parser = lambda *a, **k: _add(*a, parents=[limits], **k)
    js = {"action": "store_true"}

    p = sub.add_parser("check", help="parse and validate a source, catch likely mistakes; print a summary")
    add_source(p, None)
    p.add_argument("--all", action="store_true", help="summarise every item in the file")
    p.add_argument("--json", **js, help="print the summary as JSON")

    p = sub.add_parser("run", help="run a machine (or evaluate a circuit) and report")
    add_source(p, None)
    runners = [b.name for b in backends.all() if b.stepping]
    p.add_argument("--backend", default="interp", choices=["interp", *runners], metavar="NAME",
                   help=f"interp (the reference interpreter, default) or a backend that runs machines: "
                   f"{', '.join(runners)} (compiled with T = --max-steps)")
    p.add_argument("--input", help="initial tape (machines; grid rows separated by '/') "
                   "or input bits (circuits). Default: the input the file documents, else empty")
    p.add_argument("--max-steps", type=flag_int(0), help="stop after N steps (default 10,000,000; a backend: its step "
                   f"bound T, default {', '.join(f'{b.name} {b.stepping.default}' for b in backends.all() if b.stepping)}); "
                   "not halting by then exits 1")
    p.add_argument("--engine", choices=(engines := backends.engine_names()), default="torch", help="a backend: torch (default), "
                   "onnxruntime, or a fused engine (transformer: index; relu-circuit: fused, fused-float; rcnn: fused)")
    p.add_argument("--json", **js, help="print the run report as one JSON line (with the whole tape)")
    p.add_argument("--full-tape", **js, help="print the whole tape (default: a window around the head when it is long)")
    p.add_argument("--trace", **js, help="interp: also print every step")
    add_device(p, "a backend's network (--backend NAME)")
    _add_backend_options(p, "run")

    p = sub.add_parser("convert", help="write a machine as tm/std text or a circuit as circ/bench")
    add_source(p, None)
    p.add_argument("--to", required=True, choices=["tm", "std", "circ", "bench"], help="output format")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    p.add_argument("--all", action="store_true", help="convert every item in the file (tm/circ only)")

    p = sub.add_parser("compile", help="compile a machine or circuit into a network (.onnx, .pt or .safetensors)")
    add_source(p)
    p.add_argument("-o", "--output", required=True, help="model file to write: NAME.onnx, NAME.pt or NAME.safetensors")
    p.add_argument("--json", **js, help="print the size report as JSON")
    _add_backend_options(p, "compile")

    p = sub.add_parser("eval", help="run a compiled model (.onnx in onnxruntime, .pt or .safetensors in torch) on inputs")
    p.add_argument("model", help="a model written by tm2nn compile or learn")
    p.add_argument("--input", action="append", help="an input: bits (circuits) or an initial tape (machines); "
                   "repeatable (default: one empty input)")
    p.add_argument("--inputs", metavar="FILE", help="a file of inputs, one per line")
    p.add_argument("--engine", choices=engines,
                   help="the engine (default: onnxruntime for .onnx, else torch; torch with a --device other "
                   "than cpu; fused engines: see run --engine)")
    p.add_argument("--json", **js, help="print one JSON report per input, one per line (with \"input\" when several or --inputs)")
    add_device(p, "the model (the torch engine)")

    p = sub.add_parser("info", help="size report of a model or a source, next to the paper's bounds")
    add_source(p)
    p.add_argument("--json", **js, help="print {backend, info, bounds} as JSON")
    _add_statistics_flags(p)
    _add_backend_options(p, "info")

    p = sub.add_parser("verify", help="check a compiled net against the reference interpreter")
    add_source(p)
    p.add_argument("--input", action="append", help="verify on this input (repeatable); "
                   "default: every input when few enough, else random inputs")
    _add_sample_flags(p)  # --budget, --samples, --min-samples
    p.add_argument("--seed", type=flag_int(0, SEED_MAX), help="seed for random inputs (printed when chosen)")
    p.add_argument("--no-onnx", action="store_true", help="check only the torch module")
    p.add_argument("--engines", type=engine_list(engines), metavar="LIST", help="check on these engines, "
                   f"comma-separated ({', '.join(engines)}); default: torch and onnxruntime (torch with --no-onnx)")
    p.add_argument("--find-beta", action="store_true",
                   help="transformer: search the smallest softmax beta with 0 mismatches (torch)")
    p.add_argument("--json", **js, help="print the verification report as JSON")
    p.add_argument("--ground-truth", action="store_true", help="an exported folder: check its ground_truth.json by ablation")
    add_device(p, "the torch module (with the default engines onnxruntime still runs on the CPU)")
    _add_backend_options(p, "verify")

    p = sub.add_parser("margin", help="robustness to per-layer perturbations (all-layer margin)")
    add_source(p)
    p.add_argument("--samples", type=flag_int(1), default=64, help="inputs to measure on (default 64)")
    p.add_argument("--trials", type=flag_int(1), default=8, help="random directions / attack restarts (default 8)")
    p.add_argument("--seed", type=flag_int(0, SEED_MAX), default=0, help="seed of the inputs and the attacks (default 0)")
    p.add_argument("--engines", type=engine_list(engines), metavar="LIST", help="relu-circuit: run the random attacks "
                   "on these, comma-separated: torch (default), fused-float (a row each; gradients: torch)")
    p.add_argument("--json", **js, help="print the rows as JSON")
    _add_sample_flags(p, "margin")  # --budget
    add_device(p, "the torch attacks (the certified bounds are computed on the CPU)")
    _add_backend_options(p, "margin")

    p = sub.add_parser("learn", help="train a network by SGD and compare it with the interpreter at every step")
    add_source(p, default_help="the first that trains the source")
    p.add_argument("--export-before", metavar="PATH", help="write the net before training (.onnx, .pt or .safetensors)")
    p.add_argument("--export-after", metavar="PATH", help="write the net after training (.onnx, .pt or .safetensors)")
    p.add_argument("--json", **js, help="end with one JSON line, the training summary")
    add_device(p, "the torch training (a backend that trains in numpy refuses another device)")
    _add_backend_options(p, "learn")

    p = sub.add_parser("viz", help="draw a picture: spacetime, weights, attention or layers (.png or .svg)")
    p.add_argument("kind", help="spacetime | weights | attention | layers")
    add_source(p, default_help="spacetime: transformer; weights: transformer for machines")
    p.add_argument("-o", "--output", required=True, help="picture to write: NAME.png or NAME.svg")
    p.add_argument("--input", default=None, help="input tape (default: the file's '# input:' line, else empty)")
    p.add_argument("--step", type=flag_int(0), help="attention: the decoder step to show (default: the last)")
    p.add_argument("--layer", help="weights: the one affine layer to draw (default: the first 12)")
    p.add_argument("--interpreter-only", action="store_true",
                   help="spacetime: draw only the interpreter's run (no network)")
    _add_backend_options(p, "viz")

    p = sub.add_parser("demo", help="check and run every example, compile and verify one per backend; print tables")
    p.add_argument("--examples", default=None, help="examples folder (default: the repo's examples/)")
    p.add_argument("--out", default=None, help="folder for the compiled models and the picture "
                   "(default: tm2nn-demo/ in the current folder)")
    verbs.add_parsers(sub)  # sweep, export, train: a module each (tm2nn.verbs)
    return ap


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.verb is None:
            build_parser().print_help()
            return EXIT_USAGE
        with _applied_limits(args), memwatch.watching(), interrupt.terminating():  # SIGTERM unwinds as Ctrl-C
            return (_VERBS.get(args.verb) or args.handler)(args)
    except OptionError as e:
        print(e.for_cli(flag_of).render(), file=sys.stderr)
        return EXIT_USAGE
    except Tm2nnError as e:
        if e.file == "input":  # an --input string
            e.file = "--input"
            e.message = e.message.replace("input: ", "--input: ", 1) if e.message.startswith("input: ") else e.message
        print(e.render(), file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:  # --help, --version
        return int(e.code or 0)
    except KeyboardInterrupt as e:  # Ctrl-C (130), or SIGTERM (interrupt.Terminated, 143)
        print(f"tm2nn: {e if isinstance(e, interrupt.Terminated) else 'interrupted'}", file=sys.stderr)
        return getattr(e, "exit_code", EXIT_INTERRUPTED)
    except BrokenPipeError:
        return EXIT_OK
    except (memwatch.MemoryLimitExceeded, Exception) as e:  # an allocation past the estimates or the limit
        if not memwatch.allocation_failure(e):  # a torch/onnxruntime/numpy one; any other error is a bug
            raise
        print(f"tm2nn: error: {memwatch.message(e)}", file=sys.stderr)
        return EXIT_USAGE


# -- verbs ----------------------------------------------------------------------------------
def _spec(args, learning: bool = False):
    """(the backend object, the source IR) of a verb that compiles or trains."""

    ir = load_ir(args.source, args.format, args.name)
    spec = backends.get(args.backend) if args.backend else default_backend(ir, learning)
    if not learning:  # what it compiles (learn checks what it trains)
        spec.check_source(ir)
    return spec, ir


def _compile(args, verb: str):
    """The source compiled with the chosen backend and the options given (the model
    records the source file's hash)."""
    if verb == "verify" and Path(args.source).suffix in SUFFIXES:  # a model file (tm2nn train -o)
        return load_model(args.source)
    ir = load_ir(args.source, args.format, args.name)
    spec = backends.get(args.backend) if args.backend else default_backend(ir)
    return compile_source(ir, spec.name, source_path=args.source, **_backend_values(args, spec, verb))


def _dump(obj) -> None:
    print(json.dumps(obj, default=str))


def cmd_check(args) -> int:
    items, diags = check_report(args.source, args.format, args.name, all_items=args.all)
    for d in diags:
        print(d.render(), file=sys.stderr)
    if any(d.severity == "error" for d in diags):
        return EXIT_USAGE
    summaries = [it.summary() for it in items]
    if args.json:
        _dump(summaries if args.all else summaries[0])
    else:
        print_summaries(args.source, summaries)
    return EXIT_OK


def cmd_run(args) -> int:
    text = default_input(args.source, args.format, args.name) or "" if args.input is None else args.input
    backend = None if args.backend == "interp" else args.backend
    values = _backend_values(args, backends.get(backend), "run") if backend else {}
    if backend is None and args.engine != "torch":
        raise Tm2nnError("--engine applies to a backend (--backend NAME); the interpreter has no engine")
    if backend is not None:  # the device before compiling (the interpreter refuses one in api.run)
        Compiled.checked_device(args.device, args.engine)
    if backend is not None and args.trace:
        raise Tm2nnError("--trace prints the interpreter's steps; a backend's run is checked step by step by "
                         "'tm2nn verify' (and drawn by 'tm2nn viz spacetime')")
    label = f"running {Path(args.source).name}" + (f" ({backend})" if backend else "")
    try:
        with interrupt.graceful(), progress(label, quiet=args.json) as bar:
            report = run(args.source, text, args.max_steps, backend=backend, engine=args.engine,
                         format=args.format, name=args.name, trace=args.trace, progress=bar, device=args.device,
                         **values)
    except OptionError as e:  # the backend's step bound is --max-steps here
        if backend is not None:
            e.flags = {backends.get(backend).stepping.option: "--max-steps"}
        raise
    except interrupt.Interrupted as e:  # Ctrl-C: the configuration reached, then exit 130
        print_interrupted(e, as_json=args.json, full_tape=args.full_tape)
        return EXIT_INTERRUPTED
    rows = trace_rows(report.run) if args.trace and "outputs" not in report else None
    if args.json:
        _dump(dict(report, trace=rows) if rows is not None else report)
    else:
        print_trace(rows)
        print_report(report, full_tape=args.full_tape)
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_convert(args) -> int:
    items = load_all(args.source, args.format)
    if args.all and args.to not in ("tm", "circ"):
        raise Tm2nnError(f"--all writes several items, which only the tm and circ formats hold (not {args.to!r})")
    text = "\n".join(dump(it, args.to) for it in items) if args.all else dump(select(items, args.name, args.source), args.to)
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_compile(args) -> int:
    out = check_model_path(args.output, "-o")
    compiled = _compile(args, "compile")
    compiled.save(out)
    info = compiled.info()["info"]
    if args.json:
        _dump({"output": str(out), "backend": compiled.backend, **info})
    else:
        print(f"wrote {out} ({out.stat().st_size:,} bytes): {compiled.backend}, "
              f"{info['affine_layers']} affine layers, max width {info['max_width']}, "
              f"{info['params_nonzero']:,} nonzero parameters")
    return EXIT_OK


def cmd_eval(args) -> int:
    """Run a model file; each report is checked against the reference its source gives."""

    texts = list(args.input or [])
    if args.inputs:
        lines = SourceText(args.inputs, read_input(args.inputs, "--inputs")).text.splitlines()
        if not lines:  # a run of nothing is no pass
            raise Tm2nnError(f"--inputs {args.inputs}: the file holds no input (one a line; an empty line is the empty input)")
        texts += lines
    if not texts and not args.inputs:
        texts = [""]
    Compiled.checked_device(args.device, args.engine or "torch")  # before loading (no engine: torch off the CPU)
    compiled = load_model(args.model)
    engine = args.engine or ("onnxruntime" if compiled.onnx_bytes is not None and args.device == "cpu" else "torch")
    if args.engine is None and engine not in compiled.spec.engines:  # e.g. an optimizer runs in torch
        engine = compiled.spec.engines[0]
    reports = compiled.run(texts, engine=engine, device=args.device)
    agree = print_eval(compiled, texts, reports, compiled.check(texts, engine, device=args.device), args.json,
                       echo=bool(args.inputs))
    return EXIT_OK if agree and all(r.ok for r in reports) else EXIT_FAIL


def cmd_info(args) -> int:
    stats = _statistics_values(args)
    if export_command.is_folder(args.source):  # an exported folder
        return export_command.info(args)

    if Path(args.source).suffix in SUFFIXES:

        model = load_model(args.source)
        rep = {**model.info(), "weights_edited": model.edited}
    else:
        spec, ir = _spec(args)
        values = _backend_values(args, spec, "info")
        table = None if stats or not spec.has("size_estimate") else spec.analyses["size_estimate"](ir, spec.options(**values))
        if table is not None:
            if args.json:
                _dump({"backend": spec.name, "info": {r[0].strip(): r[1] for r in table.rows}, "bounds": table.rows})
            else:
                print_table(f"{args.source}: {table.title}", table.columns, table.rows)
            return EXIT_OK
        model = _compile(args, "info")
        rep = model.info()
    if stats:
        rep = statistics_report(model, **stats)
        _dump(rep) if args.json else print_statistics(args.source, rep)
        return EXIT_OK
    if args.json:
        _dump(rep)
        return EXIT_OK
    rows = rep["bounds"] or [[k, f"{v:,.6g}" if isinstance(v, float) else f"{v:,}", ""] for k, v in rep["info"].items()
                             if k in ("affine_layers", "max_width", "params_dense", "params_nonzero", "l1_norm",
                                      "distinct_weight_values")]
    print_table(f"{args.source}: {rep['backend']}", ["quantity", "this network", "paper"], rows)
    if rep.get("weights_edited"):
        print(f"weights edited: not the construction's ({rep['weights_edited']}); the sizes are the construction's")
    return EXIT_OK


def cmd_verify(args) -> int:
    Compiled.checked_device(args.device)  # before compiling
    if export_command.is_folder(args.source) or args.ground_truth:  # an exported folder, run in TransformerLens
        return export_command.verify(args)
    if args.find_beta and args.device != "cpu":
        raise Tm2nnError("--find-beta runs on the CPU; drop --device")
    if args.find_beta:
        spec, ir = _spec(args)
        res = spec.analysis("find_beta", backends.having)(ir, _backend_values(args, spec, "verify"), inputs=args.input,
                             samples=args.samples or 256, seed=args.seed)
        if args.json:
            _dump(res)
        else:
            print_beta(res)
        return EXIT_OK if res["beta"] is not None else EXIT_FAIL
    compiled = _compile(args, "verify")
    with verify_progress(quiet=args.json) as bar:
        rep = compiled.verify(args.input, budget=args.budget or DEFAULT_BUDGET, samples=args.samples,
                              seed=args.seed, onnx=not args.no_onnx, progress=bar, engines=args.engines,
                              device=args.device, min_samples=args.min_samples)
    _dump(rep.to_json()) if args.json else print_verify(rep)
    print_warnings(rep.warnings)
    return EXIT_OK if rep.ok else EXIT_FAIL


def cmd_margin(args) -> int:
    device = Compiled.checked_device(args.device)
    if Path(args.source).suffix in SUFFIXES:  # a model file: its own weights (trained ones too), certified
        return verbs.model_margin(args)
    spec, ir = _spec(args)
    table = spec.analysis("margin", backends.having)(ir, spec.options(**_backend_values(args, spec, "margin")), samples=args.samples,
                        trials=args.trials, seed=args.seed, engines=args.engines, device=device, budget=args.budget)
    if args.json:
        _dump(table.json)
    else:
        print_table(f"{args.source}: {table.title}", table.columns, table.rows, right=tuple(range(len(table.columns))))
    return EXIT_OK


def cmd_learn(args) -> int:
    exports = {k: check_model_path(p, f"--export-{k}") for k, p in
               (("before", args.export_before), ("after", args.export_after)) if p}
    device = Compiled.checked_device(args.device)
    spec, ir = _spec(args, learning=True)
    with progress("training", quiet=args.json) as bar:
        res = learn(ir, spec.name, source_path=args.source, models=tuple(exports), progress=bar, device=device,
                    **_backend_values(args, spec, "learn"))
    for k, path in exports.items():
        res.models[k].save(path)
    if args.json:
        _dump(res.summary)
    else:
        c = console()
        for line in res.lines:
            c.print(line)
        for k, path in exports.items():
            c.print(f"  wrote the net {k} training to {path}")
    return EXIT_OK if res.ok else EXIT_FAIL


def cmd_viz(args) -> int:
    from tm2nn.viz.draw import draw

    spec = backends.get(args.backend) if args.backend else None
    values = _backend_values(args, spec, "viz")
    out, first, who = draw(args.kind, args.source, args.output, fmt=args.format, name=args.name, text=args.input,
                           backend=args.backend, step=args.step, layer=args.layer,
                           interpreter_only=args.interpreter_only, options=values)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    if first is not None:
        print(f"the {who} run diverges from the interpreter's at step {first}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def cmd_demo(args) -> int:
    from tm2nn.demo import run_demo

    return run_demo(main, args.examples, args.out)


_VERBS = {"check": cmd_check, "run": cmd_run, "convert": cmd_convert, "compile": cmd_compile, "eval": cmd_eval, "info":
          cmd_info, "verify": cmd_verify, "margin": cmd_margin, "demo": cmd_demo, "viz": cmd_viz, "learn": cmd_learn}


if __name__ == "__main__":
    sys.exit(main())
