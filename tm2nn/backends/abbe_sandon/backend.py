"""The abbe-sandon backend (Abbe & Sandon §4, Lemma 3 / Theorem 4; §4.2's Lemma 6) as a
construction of the protocol (:class:`tm2nn.backends.protocol.Backend`).

A *learner* (two circuits h and g, :mod:`tm2nn.ir.learner`) compiles to the emulation net
G_n.  §4.1's faithful constants do not fit float64, so the exact net runs in exact
arithmetic (:mod:`.train`, ``engine="exact"``: sizes and training only); the float64
re-parametrisation (:mod:`.ir_net`, ``engine="float64"``) is a network-IR net, so it
compiles, exports and trains under ``torch.optim.SGD``.  A noisy learner (§4.2) trains in
mpmath (:mod:`.noisy`).  The trainer (:func:`learn`) runs plain SGD on the net over a
sample stream and checks it against the learner's interpreter at every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import mpmath
import numpy as np

from tm2nn.backends.protocol import Backend, Codec, Example, Learned, Model, Table, Trainer
from tm2nn.devices import check_device, is_cpu
from tm2nn.errors import Tm2nnError
from tm2nn.ir import Learner
from tm2nn.ir.noisy_learner import NoisyLearner
from tm2nn.learners.targets import parse_target, samples
from tm2nn.limits import SEED_MAX, check_memory
from tm2nn.options import OptionError, option, validate
from tm2nn.report import Report

from . import codec
from .ir_net import build_ir_net
from .net import build_net
from .noisy import build_noisy_net, lemma6_bound, noise_bound, size_report, train_noisy
from .train import learn as learn_exact
from .train_torch import learn as learn_f64


@dataclass(frozen=True)
class Options:
    engine: Literal["exact", "float64"] = option(
        "exact", "exact: §4.1's G_n in exact arithmetic (sizes only; it trains under 'tm2nn learn'); float64: "
        "the dyadic re-parametrisation as a network-IR net, which compiles to torch and ONNX")


@dataclass(frozen=True)
class LearnOptions:
    samples: str | None = option(None, "the sample stream: a CSV of +1/-1 rows, n input bits (x) then the "
                                 "label, or x, r, r' then the label (else r, r' are drawn from --seed)",
                                 metavar="CSV", data="csv")
    target: str | None = option(None, "draw the stream: parity:SECRET (e.g. parity:1011 or parity:0,2) or "
                                "const:B; x, r, r' uniform from the seed", metavar="SPEC")
    steps: int | None = option(None, "SGD steps, one sample each (required with target; default: every "
                               "samples row)", low=1)
    test: int = option(1000, "fresh random test points (the stream's own rows with samples)", low=0)
    seed: int = option(0, "seed of the stream and the test points", low=0, high=SEED_MAX)
    engine: Literal["exact", "float64"] = option(
        "exact", "exact (§4.1's G_n in exact arithmetic, faster; docs/abbe_sandon.md \"float64 engine and "
        "export\") or float64 (the dyadic re-parametrisation as an IR net, emitted to torch and trained with "
        "torch.optim.SGD; it exports)")
    noise: Literal["uniform", "max", "none"] | None = option(
        None, "a noisy learner (§4.2, Lemma 6): the noise added to every weight at every step: uniform in "
        "[-B, B] (the default), exactly ±B (max), or none; B = min(1/(n^2 t), eps/t), Lemma 4's budget")

    def __post_init__(self):
        if (self.samples is None) == (self.target is None):
            raise OptionError("learn with the abbe-sandon backend needs exactly one of {samples} (a CSV) or "
                              "{target} (SPEC)", "samples", "target")
        validate(self)


NAME = "abbe-sandon"


# -- compile -----------------------------------------------------------------------------------
def compile(ir, opts: Options) -> Model:
    """The float64 re-parametrisation of G_n, untrained (:func:`.ir_net.build_ir_net`)."""
    if isinstance(ir, NoisyLearner):
        raise Tm2nnError(f"{ir.name!r} is a noisy learner (§4.2): its net (Lemma 6) runs in mpmath only; "
                         "'tm2nn learn' trains it, 'tm2nn info' gives its size")
    if opts.engine != "float64":
        raise OptionError("{engine} exact is §4.1's G_n in exact arithmetic, which is no network-IR net "
                          "('tm2nn learn' trains it, 'tm2nn info' gives its size); compile {engine} "
                          "float64 for a torch / ONNX model", "engine")
    return model(build_ir_net(ir))


def model(ir_net, net=None, steps: int = 0, memory=None) -> Model:
    """The :class:`~tm2nn.backends.protocol.Model` of the float64 net (with trained weights
    ``net`` after ``steps`` SGD steps): input Theorem 4's ±1 vector (x, r, r'), output the
    sign (:mod:`.codec`)."""
    net = ir_net.net if net is None else net
    lr = ir_net.graph.learner
    options = {"dtype": "float64", "engine": "float64", "steps": steps, "gamma": ir_net.gamma}
    if memory is not None:
        options["memory"] = "".join(map(str, memory))
    return Model(NAME, net, lr, {"kind": "pm1", "names": list(net.inputs[0].space.labels)},
                 {"kind": "sign", "names": ["out"]}, [list(r) for r in ir_net.size_report()], options,
                 build={"options": {"engine": "float64"}})


# -- the codec and the reference ---------------------------------------------------------------
def encode(compiled, texts: list[str]):
    """Theorem 4's ±1 input rows (:func:`.codec.encode`)."""
    return codec.encode(compiled.input_encoding, texts)


def run(compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
    """The sign of G_n's output vertex on each input (:func:`.codec.run`)."""
    return codec.run(compiled, texts, engine)


def describe(compiled) -> dict:
    """The manifest's ``decoding``: the ``sign`` output is G_n's output vertex, the
    learner's answer as ±1 (Theorem 4; ``outputs`` is ``"1"`` when it is positive); the
    input is Theorem 4's ±1 vector (:func:`model`)."""
    enc = compiled.output_encoding
    if enc.get("kind") != "sign":
        raise Tm2nnError(f"the abbe-sandon backend does not describe how its {enc.get('kind')!r} output "
                         "is decoded")
    y = compiled.net.outputs[0]
    labels = list(compiled.net.spaces[y].labels)
    names = compiled.input_encoding["names"]
    return {"fields": {"outputs": {
        "value": y, "labels": labels,
        "rule": f"character i of 'outputs' is '1' when dimension i of {y!r} (G_n's output vertex "
                f"{', '.join(labels)}: the learner's answer as ±1, Abbe-Sandon Lemma 3 / Theorem 4) exceeds "
                f"{float(enc.get('threshold', 0.0))}, else '0'"}},
        "notes": f"the input {compiled.net.inputs[0].name!r} is Theorem 4's ±1 vector: bit b of each input "
                 f"({', '.join(names[:6])}{', ...' if len(names) > 6 else ''}) as 2b - 1, in this order; "
                 "SGD ('tm2nn learn') trains the M_s weights, which the file holds as they were saved"}


def reference(compiled):
    """None to verify: the net is checked against the learner at every SGD step, by the
    trainer."""
    raise OptionError("the abbe-sandon net is checked against the learner at every SGD step by 'tm2nn learn' "
                      "(it has no fixed function to verify before training)")


def size_estimate(ir, opts: Options):
    """The exact G_n (or Lemma 6's) without building a network-IR net; None for the
    float64 net (compiled and measured)."""
    if isinstance(ir, NoisyLearner):
        if opts.engine == "float64":
            raise OptionError("{engine} float64 is for §4.1 learners; a noisy learner's net (Lemma 6) runs in "
                              "mpmath only", "engine")
        return Table("abbe-sandon (Lemma 6's G_n, §4.2, perturbed SGD)", ["quantity", "this network", "paper"],
                     [list(r) for r in size_report(build_noisy_net(ir))])
    if opts.engine == "float64":
        return None
    return Table("abbe-sandon (Lemma 3's G_n, exact weights)", ["quantity", "this network", "paper"],
                 [list(r) for r in build_net(ir).size_report()])


# -- the trainer -------------------------------------------------------------------------------
def learn(ir, opts: LearnOptions, *, data: dict, source_path=None, progress=None, models=(), device=None) -> Learned:
    """Plain SGD on G_n over the sample stream, checked against the learner at every step
    (§4.1: :func:`.train.learn` in exact arithmetic, :func:`.train_torch.learn` in float64,
    the module on ``device``); a noisy learner (§4.2): Lemma 6's G_n under perturbed SGD
    (:func:`_learn_noisy`).  Only the float64 engine runs off the CPU: the exact and the
    noisy trainers run in Python on the CPU and refuse another device."""
    if not is_cpu(device) and isinstance(ir, NoisyLearner):
        raise OptionError(f"a noisy learner trains in mpmath, on the CPU only, not on {{device}} "
                          f"{check_device(device)!r}", "device")
    if not is_cpu(device) and opts.engine != "float64":
        raise OptionError(f"{{engine}} exact trains in exact arithmetic, on the CPU only; {{device}} "
                          f"{check_device(device)!r} takes {{engine}} float64 (torch)", "engine", "device")
    if isinstance(ir, NoisyLearner):
        return _learn_noisy(ir, opts, data, progress, models)
    if opts.noise is not None:
        raise OptionError("{noise} is for a noisy learner (§4.2, a noisy_learner block); "
                          f"{ir.name!r} is a §4.1 learner", "noise")
    if models and opts.engine != "float64":
        raise OptionError("exporting the net needs {engine} float64 (the exact engine's net is no IR net)",
                          "engine")
    xs, ys, rs, r2s, txs, tys, trs, tr2s = _stream(ir, opts, data)
    total = len(xs) + len(txs)
    cb = (lambda n, desc=None: progress(n, total, desc)) if progress else None
    out = {}
    if opts.engine == "float64":
        rep = learn_f64(ir, xs, ys, rs, r2s, txs, tys, trs, tr2s, progress=cb, device=device,
                        snapshots=lambda ir_net, net, steps, memory: out.__setitem__(
                            "before" if steps == 0 else "after", model(ir_net, net, steps, memory)))
    else:
        rep = learn_exact(ir, xs, ys, rs, r2s, txs, tys, trs, tr2s, progress=cb)
    how = ("in exact arithmetic" if opts.engine == "exact"
           else "with torch.optim.SGD in float64 (dyadic re-parametrisation)")
    lines = [f"{ir.name}: {rep['steps']} SGD steps {how} ({rep['steps_per_second']:.1f} steps/s), "
             f"memory changed in {rep['memory_changes']} steps, last at step {rep['samples_used']}",
             f"  training accuracy (net output = label): {rep['train_accuracy']:.3f}"]
    if rep["mismatch"]:
        lines.append(f"[red]mismatch with the learner at {rep['mismatch']}[/]")
    else:
        lines += ["  net output and decoded memory = the learner's at every step; no weight outside "
                  "the M_s copies changed",
                  f"test accuracy on {rep['test_inputs']} inputs: {rep['test_accuracy']:.4f}"]
    acc = rep["test_accuracy"]
    summary = {"steps": rep["steps"], "samples_used": rep["samples_used"],
               "test_accuracy": None if acc != acc else acc, "mismatches": rep["mismatches"],
               "test_inputs": rep["test_inputs"]}
    return Learned(summary, not rep["mismatches"], lines, {k: v for k, v in out.items() if k in models})


def _test_points(opts: LearnOptions):
    return np.random.default_rng([opts.seed, 1])


def _csv_rows(lr, opts: LearnOptions, data: dict):
    X, Y = data["samples"]
    return X > 0, Y > 0


def _check_stream_memory(lr, steps: int, test: int) -> None:
    """Refuse, before drawing, a stream of ``steps`` samples plus ``test`` test points
    that would not fit: numpy draws them as int64 before they become bools."""
    width = lr.n + len(getattr(lr, "random", ())) + len(getattr(lr, "coin", ())) + 1
    check_memory((steps + test) * width * 9, f"{steps:,} samples and {test:,} test points of {width} bits",
                 ("steps", "test"))


def _stream(lr, opts: LearnOptions, data: dict):
    """(train xs, ys, rs, r2s, test xs, ys, rs, r2s) as bool arrays for a §4.1 learner."""
    k_r, k_c = len(lr.random), len(lr.coin)
    rng = _test_points(opts)
    n_test = opts.test
    if opts.target is not None:
        if opts.steps is None:
            raise OptionError("{target} needs {steps} (the number of SGD steps, one fresh sample each)",
                              "target", "steps")
        tgt = parse_target(opts.target, lr.n)
        _check_stream_memory(lr, opts.steps, n_test)
        tr = samples(tgt, opts.steps, opts.seed, random_bits=k_r)
        tx = rng.integers(0, 2, size=(n_test, lr.n)).astype(bool)
        return (tr.xs, tr.ys, tr.rs, tr.r2s[:, None][:, :k_c], tx, tgt(tx),
                rng.integers(0, 2, size=(n_test, k_r)).astype(bool),
                rng.integers(0, 2, size=(n_test, k_c)).astype(bool))
    X, Y = _csv_rows(lr, opts, data)
    rows, d = X.shape
    if d not in (lr.n, lr.n + k_r + k_c):
        raise OptionError(f"{{samples}}: rows have {d} features; learner {lr.name!r} has {lr.n} input bits "
                          f"(and {k_r + k_c} random bits r, r')", "samples")
    steps = rows if opts.steps is None else opts.steps
    if steps > rows:
        raise OptionError(f"{{steps}} {steps} but {{samples}} has only {rows} samples", "steps", "samples")
    if d == lr.n:
        _check_stream_memory(lr, rows, 0)
        X = np.concatenate([X, rng.integers(0, 2, size=(rows, k_r + k_c)).astype(bool)], axis=1)
    xs, rs, r2 = X[:, :lr.n], X[:, lr.n:lr.n + k_r], X[:, lr.n + k_r:]
    # no target: the trained net is tested on the stream's own rows (documented)
    return xs[:steps], Y[:steps], rs[:steps], r2[:steps], xs, Y, rs, r2


def _learn_noisy(lr, opts: LearnOptions, data: dict, progress, models) -> Learned:
    """§4.2: Lemma 6's G_n trained by perturbed SGD (:func:`.noisy.train_noisy`)."""
    if opts.steps is not None and opts.steps != lr.t:
        raise OptionError(f"a noisy learner trains on exactly its t = {lr.t} samples (Lemma 6); "
                          f"{{steps}} {opts.steps} does not match (leave it out)", "steps")
    if opts.engine != "exact" or models:
        raise OptionError("{engine} float64 and exports are for §4.1 learners; a noisy learner's net (Lemma 6) "
                          "is trained in mpmath", "engine")
    if opts.target is not None:
        tgt = parse_target(opts.target, lr.n)
        _check_stream_memory(lr, lr.t, opts.test)
        tr = samples(tgt, lr.t, opts.seed)
        txs = _test_points(opts).integers(0, 2, size=(opts.test, lr.n)).astype(bool)
        xs, ys, tys = tr.xs, tr.ys, tgt(txs)
    else:
        X, Y = _csv_rows(lr, opts, data)
        if X.shape[1] != lr.n:
            raise OptionError(f"{{samples}}: rows have {X.shape[1]} features; noisy learner {lr.name!r} has "
                              f"{lr.n} input bits", "samples")
        if X.shape[0] < lr.t:
            raise OptionError(f"{{samples}} has {X.shape[0]} samples; noisy learner {lr.name!r} needs t = {lr.t}",
                              "samples")
        xs, ys, txs, tys = X[:lr.t], Y[:lr.t], X, Y
    mode = opts.noise or "uniform"
    tests = txs.astype(int).tolist()
    total = lr.t + len(tests)
    rep = train_noisy(lr, xs.astype(int).tolist(), ys.astype(int).tolist(), tests[0] if tests else [0] * lr.n,
                      noise=0 if mode == "none" else 1, mode="max" if mode == "max" else "uniform",
                      seed=opts.seed, tests=tests, progress=(lambda k: progress(k, total)) if progress else None)
    signs = np.array([float(o) > 0 for o in rep.test_outputs], dtype=bool)
    n = len(tests)
    acc = float((signs == tys).mean()) if n else None
    agree = float((signs == np.array(rep.test_expected, dtype=bool)).mean()) if n else None
    mism = len(rep.violations)
    bound, paper = float(noise_bound(lr.n, lr.t)), float(lemma6_bound(lr.n, lr.t))
    lines = [f"{lr.name}: Lemma 6's G_n, {lr.t} perturbed SGD steps (noise {mode}, max |delta| "
             f"{mpmath.nstr(rep.noise_max, 4)} per weight per step; bound eps/t = {bound:.3g}, Lemma 6's "
             f"1/(n^2 t) = {paper:.3g}) in {rep.seconds:.2f} s"]
    if mism:
        lines.append(f"[red]{mism} violation(s); first: step {rep.violations[0].step}: {rep.violations[0].what}[/]")
    else:
        lines.append("  memory decoded = the stored samples at every step; outputs within eps' of 1/2; "
                     "no weight outside the copies of M' moved beyond its noise")
    if n:
        lines.append(f"test accuracy on {n} inputs: {acc:.4f}; agreement with h on the stored samples: {agree:.4f}")
    return Learned({"steps": lr.t, "samples_used": lr.t, "test_accuracy": acc, "mismatches": mism,
                    "test_inputs": n, "noise": mode, "agreement": agree, "noise_max": float(rep.noise_max),
                    "noise_bound": bound, "lemma6_bound": paper}, not mism, lines)


BACKEND = Backend(
    name=NAME,
    paper="Emmanuel Abbe, Colin Sandon: On the universality of deep learning (§4, the positive results)",
    summary="Abbe-Sandon §4: a net on which plain SGD runs any learner given as circuits",
    Options=Options,
    takes=(Learner, NoisyLearner),
    takes_what="learners (a 'learner' block: circuits h and g)",
    compile=compile,
    codec=Codec(encode=encode, run=run, describe=describe),
    reference=reference,
    trainer=Trainer(LearnOptions, (Learner, NoisyLearner), learn, exports=("before", "after")),
    analyses={"size_estimate": size_estimate},
    #: what a model file must hold: rebuild's engine, the M_s weights training changed,
    #: the ±1 input names the encoding reads
    model_keys={"tm2nn.build/options/engine": "string", "tm2nn.trained": "object",
                "tm2nn.input_encoding/names": "list"},
    examples=(
        Example("parity8.circ", ("learn {ex}/parity8.circ --target parity:10110010 --steps 64 --engine float64 "
                                 "--export-after {out}/parity8_trained.onnx --json",),
                expect={"mismatches": 0, "test_accuracy": 1.0},
                checked="{steps} SGD steps, {test_inputs} tests"),
    ),
)

__all__ = ["BACKEND", "LearnOptions", "Options", "compile", "describe", "encode", "learn", "model", "reference",
           "run", "size_estimate"]
