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

import time
from pathlib import Path

from tm2nn.errors import Tm2nnError

# The header parser and what a documented result means live in tm2nn.syntax.headers
# (``tm2nn check`` compares the header with a run too); re-exported here.
from tm2nn.syntax.headers import circuit_mismatches, example_header, machine_mismatches


def default_examples_dir() -> Path:
    """The repository's examples/ beside the package, or, in an installed wheel, the copy
    it ships as ``tm2nn/examples`` (pyproject.toml's package data)."""
    here = Path(__file__).resolve().parent
    repo = here.parent / "examples"
    return repo if repo.is_dir() else here / "examples"


def run_examples(folder: Path) -> list[dict]:
    """Run every example; one row per example (the data behind the demo table)."""
    from tm2nn.api import run_circuit
    from tm2nn.interp import run_machine
    from tm2nn.ir import Circuit, Learner, NoisyLearner
    from tm2nn.syntax import EXTENSIONS, load

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
                row["result"], ok = _run_rcnn_learner_example(obj, path.parent / hdr["train"])
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
    from tm2nn.interp.circuit import exhaustive_inputs
    from tm2nn.interp.learner import predict, run_learner
    from tm2nn.learners.targets import parse_target, samples

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
    from tm2nn.interp.circuit import exhaustive_inputs
    from tm2nn.learners.targets import parse_target, samples

    if "target" not in hdr or hdr.get("samples", "") != str(lr.t) or lr.n > 16:
        return f"a noisy learner needs '# target:' and '# samples: {lr.t}' (its t) header lines", False
    tg = parse_target(hdr["target"], lr.n)
    S = samples(tg, lr.t, 0)
    X = exhaustive_inputs(lr.n)
    got = [lr(S.xs, S.ys, x) for x in X]
    acc = sum(int(g == int(w)) for g, w in zip(got, tg(X))) / len(got)
    return f"h on the {lr.t} stored samples: {acc:.0%} of all 2^{lr.n} inputs right", acc == 1.0


def _run_rcnn_learner_example(g, train: Path) -> tuple[str, bool]:
    """A learner machine in Goel et al.'s B.1.2 form on its training set: the
    interpreter's ``A(S)[x]`` for every ``x`` in ``{±1}^d`` (each run checked to end in
    B.1.2's halting position)."""
    import itertools

    import numpy as np

    from tm2nn.backends.rcnn.learner import MAX_STEPS
    from tm2nn.backends.rcnn.learner_form import Shape, check_learner_form, reference_answer
    from tm2nn.datasets import load_csv

    check_learner_form(g)
    X, Y = load_csv(train)
    shape = Shape(X.shape[0], X.shape[1], 1)
    xs, answers = [], []
    for x in itertools.product((-1, 1), repeat=X.shape[1]):
        a, _ = reference_answer(g, X, Y, np.array(x), shape, MAX_STEPS)
        xs.append("".join("+" if v > 0 else "-" for v in x))
        answers.append("+" if a > 0 else "-")
    return f"answers on x = {' '.join(xs)}: {' '.join(answers)}", True


#: One job per backend: (example, backend, the command that writes the model, the
#: command that verifies it or None when the first one checks itself).  ``{ex}`` is the
#: examples folder and ``{out}`` the output folder.  Each is exactly a documented CLI call.
BACKEND_JOBS = (
    ("ripple_adder4.circ", "relu-circuit",
     "compile {ex}/ripple_adder4.circ --backend relu-circuit -o {out}/ripple_adder4.onnx --json",
     "verify {ex}/ripple_adder4.circ --backend relu-circuit --json"),
    ("binary_increment.tm", "relu-circuit",
     "compile {ex}/binary_increment.tm --backend relu-circuit --steps 20 -o {out}/binary_increment.onnx --json",
     "verify {ex}/binary_increment.tm --backend relu-circuit --steps 20 --samples 2000 --seed 0 --json"),
    ("bb4.tm", "transformer",
     "compile {ex}/bb4.tm --backend transformer --steps 110 -o {out}/bb4_transformer.onnx --json",
     "verify {ex}/bb4.tm --backend transformer --steps 110 --json"),
    ("bb3.tm", "rcnn",
     "compile {ex}/bb3.tm --backend rcnn --steps 25 --max-input 2 -o {out}/bb3_rcnn.onnx --json",
     "verify {ex}/bb3.tm --backend rcnn --steps 25 --max-input 2 --json"),
    ("parity8.circ", "abbe-sandon",
     "learn {ex}/parity8.circ --target parity:10110010 --steps 64 --engine float64 "
     "--export-after {out}/parity8_trained.onnx --json", None),
    ("bb3.tm", "gd-trace",
     "compile {ex}/bb3.tm --backend gd-trace --steps 25 --max-input 2 -o {out}/bb3_gd_loss.onnx --json",
     "verify {ex}/bb3.tm --backend gd-trace --steps 25 --max-input 2 --json"),
    ("sign_sum_3x2.tm", "gd-trace §5",
     "learn {ex}/sign_sum_3x2.tm --backend gd-trace --train {ex}/sign_sum_3x2.csv "
     "--export-after {out}/sign_sum_trained.onnx --json", None),
)


def _cli_json(argv: list[str]) -> tuple[int, dict, str]:
    """Run one CLI command in-process; ``(exit code, its last JSON line, its stderr)``."""
    import contextlib
    import io
    import json

    from tm2nn.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("{")]
    return code, (json.loads(lines[-1]) if lines else {}), err.getvalue().strip()


def _verified(backend: str, made: dict, check: dict | None) -> tuple[bool, str]:
    """(verified, what was checked) from the JSON of the model command and of verify."""
    if check is not None:
        n = check.get("n_inputs", 0)
        return bool(check.get("ok")), f"{n:,} inputs ({check.get('mode', '')})"
    if backend == "abbe-sandon":
        ok = made.get("mismatches") == 0 and made.get("test_accuracy") == 1.0
        return ok, f"{made.get('steps')} SGD steps, {made.get('test_inputs')} tests"
    ok = bool(made.get("trace_matches") and made.get("theta_matches") and made.get("stopped_at_machine_steps_plus_1"))
    return ok, f"{made.get('optimizer_steps')} steps, theta ok" if ok else f"{made.get('optimizer_steps')} steps"


def run_backends(folder: Path, out: Path, progress=None) -> list[dict]:
    """Compile (or train) one example per backend into ``out``, verify each against the
    interpreter: one row per job (the data behind the demo's second table)."""
    rows = []
    for i, (example, backend, make, check) in enumerate(BACKEND_JOBS):
        if progress:
            progress(i, example, backend)
        fmt = {"ex": str(folder), "out": str(out)}
        t0 = time.perf_counter()
        code, made, err = _cli_json(make.format(**fmt).split())
        model = next((w for w in make.format(**fmt).split() if w.endswith(".onnx")), "")
        row = {"example": example, "backend": backend, "model": model}
        if code == 2 or not made:
            row.update(size="-", ok=False, checked=err.splitlines()[0] if err else f"exit code {code}")
        else:
            vjson = None
            if check is not None:
                _vc, vjson, verr = _cli_json(check.format(**fmt).split())
                if not vjson:
                    vjson = {"ok": False, "n_inputs": 0, "mode": verr.splitlines()[0] if verr else ""}
            row["ok"], row["checked"] = _verified(backend, made, vjson)
            size = Path(model).stat().st_size if model and Path(model).is_file() else 0
            params = made.get("params_nonzero")
            row["size"] = (f"{params:,} params, " if params else "") + f"{size / 1024:,.0f} KiB"
        row["s"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def demo_picture(folder: Path, out: Path) -> Path:
    """The picture the README promises: bb3's space-time diagram, the interpreter's run
    next to the transformer's decoded run."""
    from tm2nn.viz import spacetime_png

    return spacetime_png(folder / "bb3.tm", "", out / "bb3_spacetime.png", backend="transformer")


def run_demo(folder: str | None = None, out: str | None = None) -> int:
    from rich.table import Table

    from tm2nn.console import console

    folder_p = Path(folder) if folder else default_examples_dir()
    if not folder_p.is_dir():
        raise Tm2nnError(f"examples folder not found: {folder_p}")
    out_p = Path(out) if out else Path("tm2nn-demo")
    try:
        out_p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Tm2nnError(f"--out: cannot create {str(out_p)!r}: {e.strerror}") from None
    rows = run_examples(folder_p)
    t = Table(title="tm2nn examples (reference interpreter)")
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

    def progress(i, example, backend):
        err.print(f"[dim]({i + 1}/{len(BACKEND_JOBS)}) {backend}: {example} ...[/]")
    brows = run_backends(folder_p, out_p, progress)
    t = Table(title=f"compiled networks, verified against the interpreter in torch and onnxruntime "
                    f"(models in {out_p}/)")
    for col in ("example", "backend", "size", "verified", "checked", "time"):
        t.add_column(col, justify="right" if col == "time" else "left", no_wrap=col in ("example", "backend"))
    for r in brows:
        t.add_row(r["example"], r["backend"], r["size"], "[green]yes[/]" if r["ok"] else "[red]NO[/]",
                  r["checked"], f"{r['s']:.1f} s")
    con.print(t)
    png = demo_picture(folder_p, out_p)
    con.print(f"picture: {png} (bb3's space-time diagram: the interpreter and the transformer, side by side)")
    bad += [f"{r['example']} ({r['backend']})" for r in brows if not r["ok"]]
    return 1 if bad else 0
