"""``tm2nn demo``: check and run every example, print a table.

Each example documents itself in header comments::

    # input: 1011        the input to run it on (machines: tape, circuits: bits)
    # output: 1100       the expected tape (machines) or output bits (circuits)
    # target: parity:1011   learners: the target the samples come from
    # samples: 100          learners: how many samples (seed 0); ok = h equals the
    #                       target on every input afterwards
    #                       (a §4.2 noisy learner: samples = its t; ok = h, run on
    #                       the first t samples of seed 0, equals the target on
    #                       every input)
    # train: data.csv       RCNN learner machines (B.1.2 form): the training set; the
    #                       interpreter answers A(S)[x] for every x in {±1}^d

The demo runs every example on its documented input with the reference
interpreter and compares with the documented output.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

from tm2nn import backends
from tm2nn.api import run_circuit
from tm2nn.backends.protocol import Example
from tm2nn.compiler import default_backend
from tm2nn.console import console
from tm2nn.console import examples_dir as default_examples_dir
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.interp.circuit import exhaustive_inputs
from tm2nn.interp.learner import predict, run_learner
from tm2nn.ir import Circuit, Learner, NoisyLearner
from tm2nn.learners.targets import parse_target, samples
from tm2nn.syntax import EXTENSIONS, load

# The header parser and what a documented result means live in tm2nn.syntax.headers
# (``tm2nn check`` compares the header with a run too); re-exported here.
from tm2nn.syntax.headers import circuit_mismatches, example_header, machine_mismatches
from tm2nn.viz import spacetime_png
from tm2nn.viz.runs import machine_backend


def run_examples(folder: Path) -> list[dict]:
    """Run every example; one row per example (the data behind the demo table)."""

    rows = []
    for path in sorted(folder.iterdir()):
        if path.suffix not in EXTENSIONS:
            continue
        hdr = example_header(path)
        t0 = time.perf_counter()
        row = {"example": path.name, "input": hdr.get("input", "")}
        try:
            obj = load(path)
            if isinstance(obj, NoisyLearner):
                s = obj.summary()
                row["size"] = (f"noisy learner (§4.2): {s['inputs']} inputs, t = {s['samples']}, "
                               f"h {s['h_gates']} gates")
                row["input"] = f"{hdr.get('samples', '?')} samples of {hdr.get('target', '?')}"
                row["result"], ok = _run_noisy_learner_example(obj, hdr)
            elif isinstance(obj, Learner):
                s = obj.summary()
                row["size"] = (f"learner: {s['inputs']} inputs, {s['memory']} memory bits, "
                               f"h {s['h_gates']} / g {s['g_gates']} gates")
                row["input"] = f"{hdr.get('samples', '?')} samples of {hdr.get('target', '?')}"
                row["result"], ok = _run_learner_example(obj, hdr)
            elif isinstance(obj, Circuit):
                s = obj.summary()
                row["size"] = f"{s['gates']} gates, depth {s['depth']}"
                got = run_circuit(obj, row["input"])["outputs"]
                row["result"] = got
                ok = not circuit_mismatches(hdr, got) if "output" in hdr else None
            elif "train" in hdr:
                row["size"] = f"{len(obj.states)} states, {len(obj.rules)} rules"
                row["input"] = f"training set {hdr['train']}"
                row["result"], ok = _trained_example(obj, hdr, path.parent)
            else:
                row["size"] = f"{len(obj.states)} states, {len(obj.rules)} rules"
                r = run_machine(obj, row["input"], 10_000_000)
                row["result"] = f"{r.outcome or 'no halt'} in {r.steps} steps: {r.tape!r}"
                ok = r.halted and not machine_mismatches(hdr, r)
            row["ok"] = ok
        except Tm2nnError as e:
            row["size"] = "-"
            row["result"] = e.message
            row["ok"] = False
        row["ms"] = (time.perf_counter() - t0) * 1000
        rows.append(row)
    return rows


def _run_learner_example(lr, hdr: dict[str, str]) -> tuple[str, bool]:
    """Train ``lr`` on the documented target and check it computes it everywhere."""

    if "target" not in hdr or not hdr.get("samples", "").isdigit() or lr.n > 16:
        return "a learner needs '# target:' and '# samples:' header lines (and n <= 16)", False
    tg = parse_target(hdr["target"], lr.n)
    S = samples(tg, int(hdr["samples"]), 0, random_bits=len(lr.random))
    run = run_learner(lr, S.xs, S.ys, S.rs, S.r2s if lr.coin else None)
    X = exhaustive_inputs(lr.n)
    acc = float((predict(lr, run.final, X) == tg(X)).mean())
    return f"{int(run.wrong.sum())} wrong outputs; then {acc:.0%} of all 2^{lr.n} inputs right", acc == 1.0


def _run_noisy_learner_example(lr, hdr: dict[str, str]) -> tuple[str, bool]:
    """A §4.2 learner: the reference h on the first t samples of the documented target
    (seed 0), then h's answer on every input compared with the target."""

    if "target" not in hdr or hdr.get("samples", "") != str(lr.t) or lr.n > 16:
        return f"a noisy learner needs '# target:' and '# samples: {lr.t}' (its t) header lines", False
    tg = parse_target(hdr["target"], lr.n)
    S = samples(tg, lr.t, 0)
    X = exhaustive_inputs(lr.n)
    got = [lr(S.xs, S.ys, x) for x in X]
    acc = sum(int(g == int(w)) for g, w in zip(got, tg(X))) / len(got)
    return f"h on the {lr.t} stored samples: {acc:.0%} of all 2^{lr.n} inputs right", acc == 1.0


def _trained_example(ir, hdr: dict[str, str], folder: Path) -> tuple[str, bool]:
    """A training example (a ``# train:`` header) run with the reference by the backend
    that trains it (its trainer's ``example``)."""
    spec = default_backend(ir, learning=True)
    if spec.trainer.example is None:
        return f"the {spec.name} backend shows no training example", False
    return spec.trainer.example(ir, hdr, folder)


def backend_jobs() -> list[tuple[str, Example]]:
    """Every backend's demo examples (its ``examples``), as ``(label, example)``: each
    example's commands are exactly documented CLI calls."""
    return [(ex.label or b.name, ex) for b in backends.all() for ex in b.examples]


def _cli_json(main, argv: list[str]) -> tuple[int, dict, str]:
    """Run one CLI command in-process with the CLI's ``main``; ``(exit code, its last JSON
    line, its stderr)``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("{")]
    return code, (json.loads(lines[-1]) if lines else {}), err.getvalue().strip()


def _verified(example: Example, code: int, made: dict, check: dict | None) -> tuple[bool, str]:
    """(verified, what was checked) from the JSON of the model command and of verify; a
    self-checking command must report every ``expect`` key with its value."""
    if check is not None:
        n = check.get("n_inputs", 0)
        return bool(check.get("ok")), f"{n:,} inputs ({check.get('mode', '')})"
    ok = code == 0 and all(made.get(k) == v for k, v in example.expect.items())
    try:
        checked = example.checked.format(**made)
    except (KeyError, IndexError, ValueError):
        checked = example.checked
    return ok, checked


def run_backends(main, folder: Path, out: Path, progress=None, jobs=None) -> list[dict]:
    """Compile (or train) every backend's demo examples into ``out``, verify each against
    the interpreter: one row per job (the data behind the demo's second table).  ``main`` is
    the CLI's entry point (each job is exactly a documented CLI call); ``jobs`` default to
    :func:`backend_jobs`."""
    rows = []
    jobs = backend_jobs() if jobs is None else jobs
    for i, (label, example) in enumerate(jobs):
        if progress:
            progress(i, len(jobs), example.file, label)
        fmt = {"ex": str(folder), "out": str(out)}
        make, checks = example.commands[0].format(**fmt), [c.format(**fmt) for c in example.commands[1:]]
        t0 = time.perf_counter()
        code, made, err = _cli_json(main, make.split())
        model = next((w for w in make.split() if w.endswith(".onnx")), "")
        row = {"example": example.file, "backend": label, "model": model}
        if code == 2 or not made:
            row.update(size="-", ok=False, checked=err.splitlines()[0] if err else f"exit code {code}")
        else:
            vjson = None
            for check in checks:
                _vc, vjson, verr = _cli_json(main, check.split())
                if not vjson:
                    vjson = {"ok": False, "n_inputs": 0, "mode": verr.splitlines()[0] if verr else ""}
                if not vjson.get("ok"):
                    break
            row["ok"], row["checked"] = _verified(example, code, made, vjson)
            size = Path(model).stat().st_size if model and Path(model).is_file() else 0
            params = made.get("params_nonzero")
            row["size"] = (f"{params:,} params, " if params else "") + f"{size / 1024:,.0f} KiB"
        row["s"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def demo_picture(folder: Path, out: Path) -> Path:
    """The picture the README promises: bb3's space-time diagram, the interpreter's run
    next to the run decoded from the default machine backend's network."""

    return spacetime_png(folder / "bb3.tm", "", out / "bb3_spacetime.png")


def run_demo(main, folder: str | None = None, out: str | None = None) -> int:
    from rich.table import Table


    folder_p = Path(folder) if folder else default_examples_dir()
    if not folder_p.is_dir():
        raise Tm2nnError(f"examples folder not found: {folder_p}")
    out_p = Path(out) if out else Path("tm2nn-demo")
    try:
        out_p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Tm2nnError(f"--out: cannot create {str(out_p)!r}: {e.strerror}") from None
    rows = run_examples(folder_p)
    t = Table(title=f"tm2nn examples (reference interpreter), from {folder_p.resolve()}")
    for col in ("example", "size", "input", "result", "as documented", "time"):
        t.add_column(col, justify="right" if col == "time" else "left")
    for r in rows:
        mark = {True: "[green]yes[/]", False: "[red]NO[/]", None: "-"}[r["ok"]]
        t.add_row(r["example"], r["size"], r["input"] or "(empty)", r["result"], mark, f"{r['ms']:.1f} ms")
    con, err = console(), console(stderr=True)
    con.print(t)
    bad = [r["example"] for r in rows if r["ok"] is False]
    if bad:
        err.print(f"[red]{len(bad)} example(s) did not run as documented: {', '.join(bad)}[/]")

    def progress(i, n, example, backend):
        err.print(f"[dim]({i + 1}/{n}) {backend}: {example} ...[/]")
    brows = run_backends(main, folder_p, out_p, progress)
    t = Table(title=f"compiled networks, verified against the interpreter in torch and onnxruntime "
                    f"(models in {out_p}/)")
    for col in ("example", "backend", "size", "verified", "checked", "time"):
        t.add_column(col, justify="right" if col == "time" else "left", no_wrap=col in ("example", "backend"))
    for r in brows:
        t.add_row(r["example"], r["backend"], r["size"], "[green]yes[/]" if r["ok"] else "[red]NO[/]",
                  r["checked"], f"{r['s']:.1f} s")
    con.print(t)
    png = demo_picture(folder_p, out_p)
    con.print(f"picture: {png} (bb3's space-time diagram: the interpreter and the {machine_backend()}, side by side)")
    bad += [f"{r['example']} ({r['backend']})" for r in brows if not r["ok"]]
    return 1 if bad else 0
