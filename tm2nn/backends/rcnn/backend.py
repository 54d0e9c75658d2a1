"""The rcnn backend (Goel, Kakade, Kalai & Zhang, Def. 5 / App. B) behind the common
interface.  Machine mode compiles; learner mode (Algorithm 1) is ``learn``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.backends.base import Backend, Compiled, Learned
from tm2nn.limits import SEED_MAX
from tm2nn.options import option, validate
from tm2nn.report import Report


@dataclass(frozen=True)
class Options:
    steps: int = option(help="the step bound T: L filter steps simulate T source steps",
                        metavar="T", low=1)
    max_input: int | None = option(None, "the longest input tape the grid must hold (default T)", metavar="N", low=0)

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class LearnOptions:
    train: str = option(help="the training set: a CSV, one example a line, d features then the label, each "
                        "+1 or -1 (an optional header line is skipped)", metavar="CSV", data="csv")
    test: int = option(100, "fresh random points on which the trained net is compared with the interpreter", low=0)
    seed: int = option(0, "seed of the test points", low=0, high=SEED_MAX)
    steps: int | None = option(None, "the learner's step bound t; L = t + 1 filter steps (default: the most "
                               "steps it takes on the training inputs)", metavar="t", low=1)
    work: int = option(1, "working columns right of the input (Definition 5 has L)", low=1)
    target: str | None = option(None, "label the test points by a target and report the test error: "
                                "parity:SECRET (e.g. parity:0,2 is y = x1*x3 on +-1 features, bit = (1 - x)/2) "
                                "or const:B (B = 0: +1, 1: -1); default: the training CSV's '# target:' line",
                                metavar="SPEC")
    restarts: int = option(0, "Algorithm 1 as Corollary 2 runs it: draw the filter and head R times from U_s, "
                           "train each, keep the best on --validation (0: the planted filter only)",
                           metavar="R", low=0, high=100_000)
    validation: str | None = option(None, "the validation set for --restarts (a CSV like the training set)",
                                    metavar="CSV", data="csv")
    offer_planted: bool = option(False, "with --restarts: add the planted filter as one more candidate, "
                                 "labelled 'planted' (shows that selection finds a working filter)")

    def __post_init__(self):
        validate(self)
        if self.restarts and self.validation is None:
            from tm2nn.options import OptionError

            raise OptionError("{restarts} needs {validation} (Corollary 2 selects on a validation set)",
                              "restarts", "validation")


def sign_target(spec: str, d: int):
    """``--target`` for ±1 data: :func:`tm2nn.learners.targets.parse_target`'s function of
    bits, with a feature or label ``x = (−1)^bit`` (so ``parity:S`` is ``∏_{i∈S} x_i``)."""
    from tm2nn.learners.targets import parse_target

    t = parse_target(spec, d)
    return lambda xs: 1 - 2 * t((1 - np.asarray(xs, dtype=np.int64)) // 2).astype(np.int64)


class RCNN(Backend):
    name = "rcnn"
    summary = "Goel-Kakade-Kalai-Zhang: one shared 3x3 filter applied recurrently over a 2D tape"
    paper = "Surbhi Goel, Sham Kakade, Adam Tauman Kalai, Cyril Zhang: Recurrent Convolutional Neural Networks Learn Succinct Learning Algorithms (Def. 5, App. B)"
    Options = Options
    LearnOptions = LearnOptions
    takes_what = "machines (machine mode; learners in the XOR-input form train with 'tm2nn learn')"
    run_steps = "steps"
    run_default_steps = 100
    #: ``fused``: :mod:`tm2nn.engines.grid_engine`, the filter fused and run incrementally
    engines = ("torch", "onnxruntime", "fused")
    #: what a model file must hold: rebuild's step bound, the grid encoding (the machine,
    #: its B.1.2 lowering, the cell code, the window) and the trace decoding reads, and the
    #: start-grid and decode tables a plain script reads (:mod:`.plain_tables`)
    model_keys = {"tm2nn.build/options/steps": "int", "tm2nn.input_encoding/machine": "string",
                  "tm2nn.input_encoding/lowering": "object", "tm2nn.input_encoding/code": "object",
                  "tm2nn.input_encoding/window": "list", "tm2nn.input_encoding/max_input": "int",
                  "tm2nn.input_encoding/start_grid": "object",
                  "tm2nn.output_encoding/source_steps": "int", "tm2nn.output_encoding/filter_steps": "int",
                  "tm2nn.output_encoding/digits": "int", "tm2nn.output_encoding/decode": "object"}

    @property
    def takes(self):
        from tm2nn.ir import Machine

        return (Machine,)

    learn_takes = takes

    def compile(self, ir, opts: Options) -> Compiled:
        from tm2nn.backends.rcnn import compile as compile_rcnn

        return compile_rcnn(ir, steps=opts.steps, max_input=opts.max_input)

    def options_for_run(self, values: dict, texts: list[str]) -> dict:
        """``run`` compiles for the inputs it is given: the grid holds the longest."""
        return {"max_input": max((len(t) for t in texts), default=0), **values}

    def encode(self, compiled: Compiled, texts: list[str]):
        """Start grids ``[n, H, W]``: each input written as after memorization (B.1.1 cells)."""
        from tm2nn.ir.machine import check_input
        from tm2nn.verify.grid import GridModel

        for t in texts:
            check_input(compiled.source, t)
        return GridModel(compiled).grids(texts)

    def run(self, compiled: Compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
        from tm2nn.interrupt import partial_reports
        from tm2nn.ir.machine import check_input
        from tm2nn.verify.grid import GridModel, run_grids

        for t in texts:
            check_input(compiled.source, t)
        gm = GridModel(compiled)
        with partial_reports(texts, lambda states, t: Report.of_run(gm.decode(states, t))):  # Ctrl-C
            return [Report.of_run(r) for r in run_grids(compiled, texts, engine, progress)]

    def array_runner(self, compiled: Compiled, engine: str):
        """``fused``: the grid engine on the model's own net (:func:`tm2nn.engines.grid_engine.runner`)."""
        if engine != "fused":
            return super().array_runner(compiled, engine)
        from tm2nn.engines.grid_engine import runner

        return runner(compiled)

    def info_source(self, ir, opts: Options):
        """A learner (a grid machine in B.1.2 learner form, which machine mode cannot lower):
        its learner-mode filter and sizes, with ``--steps`` as the learner's step bound
        ``t``.  Anything else compiles (machine mode)."""
        from tm2nn.backends.base import Table
        from tm2nn.backends.rcnn.build import filter_for
        from tm2nn.backends.rcnn.encoding import cell_code
        from tm2nn.backends.rcnn.learner_form import FRAME, check_learner_form
        from tm2nn.errors import Tm2nnError
        from tm2nn.ir import GridMachine

        if not isinstance(ir, GridMachine) or not any(r.move in ("U", "D") for r in ir.rules):
            return None
        try:
            check_learner_form(ir)
        except Tm2nnError:
            return None  # not a learner: machine mode says why it cannot take it
        code = cell_code(ir)
        filt = filter_for(ir, code)
        t = opts.steps
        rows = [["learner (B.1.2 form, XOR input)", f"{len(ir.states)} states, {code.n_digits} base-3 digits, "
                 "the same for every (m, d)", "Theorem 1: s fixed"],
                *[list(r) for r in filt.bounds],
                ["filter steps L", f"{t + 1} for t = {t} learner steps (at least m + 2)",
                 "L = c1(t + m + d) (Theorem 1)"],
                ["grid (rows x columns)", f"(m + 1) x ({FRAME} + d + 1 + work): frame, input region, working columns",
                 "Def. 5: [W diag(z)  1], d_mem = m + 1"],
                ["train", "tm2nn learn FILE --train DATA.csv (Algorithm 1)", ""]]
        return Table("rcnn learner mode (Algorithm 1)", ["quantity", "this network", "paper"], rows)

    def decoding(self, compiled: Compiled) -> dict:
        """The manifest's ``decoding``: each field through the output's decode table
        (:func:`.plain_tables.description`)."""
        from tm2nn.backends.rcnn.plain_tables import description

        return description(compiled)

    def checker(self, compiled: Compiled):
        from tm2nn.verify.grid import GridChecker

        return GridChecker(compiled)

    def learn(self, ir, opts: LearnOptions, *, data: dict, source_path=None, progress=None,
              models=()) -> Learned:
        """Algorithm 1 on a learner machine (:func:`tm2nn.backends.rcnn.learner.run`):
        SGD on the memory layer, Lemma 4 checked exactly after every example, then the
        trained net against the interpreter on fresh points."""
        from tm2nn.backends.rcnn.learner import run as learn_run

        X, Y = data["train"]
        if opts.restarts:
            return self._restarts(ir, opts, X, Y, data["validation"], progress)
        target, target_spec = self._target(opts, X, Y)
        m1, unit = X.shape[0] + 1, 100  # one bar: the m + 1 SGD steps, the net's steps, the interpreter

        def cb(phase, done, n):
            base, frac = {"train": (0, done / n), "test": (m1, done / n), "reference": (m1 + unit, done / n)}[phase]
            progress(base + (int(frac * m1) if phase == "train" else int(frac * unit)), m1 + 2 * unit)
        rep = learn_run(ir, X, Y, test=opts.test, seed=opts.seed, steps=opts.steps, work=opts.work,
                        progress=cb if progress else None, target=target)
        ok = rep["memorized"] and rep["test_agreement"] == 1.0
        yes = "[green]yes[/]" if rep["memorized"] else "[red]no[/]"
        lines = [f"{rep['examples']} examples of {rep['features']} features, memorized: {yes}"]
        lines += [f"  {k.replace('_', ' ')}: {rep[k]}" for k in ("states", "d_rc", "grid", "steps", "filter_steps",
                                                                  "working_columns", "max_w_error",
                                                                  "max_memorization_output", "max_prediction_error",
                                                                  "train_seconds", "test_seconds")]
        colour = "green" if ok else "red"
        lines.append(f"agreement with the interpreter on {opts.test} fresh points: "
                     f"[{colour}]{rep['test_agreement']:.4f}[/]")
        keys = ["examples", "memorized", "test_agreement"]
        if target is not None:  # from --target or the training set's '# target:' line
            keys.append("test_error")
            lines.append(f"error against the target {target_spec} on the same points: {rep['test_error']:.4f}")
        return Learned({k: rep[k] for k in keys}, ok, lines)

    @staticmethod
    def _target(opts: LearnOptions, X, Y):
        """``--target``, or else the training CSV's ``# target:`` line (checked against its
        labels: a set labelled by another function is an error at that line)."""
        from tm2nn.datasets import declared_target
        from tm2nn.errors import Tm2nnError

        if opts.target is not None:
            return sign_target(opts.target, X.shape[1]), opts.target
        found = declared_target(opts.train)
        if found is None:
            return None, None
        spec, line, col, text = found
        try:
            fn = sign_target(spec, X.shape[1])
        except Tm2nnError as e:
            raise Tm2nnError(e.message, file=opts.train, line=line, col=col, snippet=text) from None
        bad = np.flatnonzero(fn(X) != Y)
        if bad.size:
            raise Tm2nnError(f"the training set declares 'target: {spec}', but example {bad[0] + 1} is not "
                             "labelled by it", file=opts.train, line=line, col=col, snippet=text)
        return fn, spec

    def _restarts(self, ir, opts: LearnOptions, X, Y, val, progress) -> Learned:
        """Corollary 2 around Algorithm 1 (:func:`tm2nn.backends.rcnn.algorithm1.algorithm1`):
        ``opts.restarts`` draws from U_s, each trained and scored on the validation set."""
        from tm2nn.backends.rcnn.algorithm1 import algorithm1, format_report
        from tm2nn.errors import Tm2nnError

        Xv, Yv = val
        if Xv.shape[1] != X.shape[1]:
            raise Tm2nnError(f"the validation set has {Xv.shape[1]} features, the training set {X.shape[1]}",
                             file=opts.validation)
        rep = algorithm1(ir, X, Y, Xv, Yv, restarts=opts.restarts, seed=opts.seed,
                         offer_planted=opts.offer_planted, steps=opts.steps, work=opts.work,
                         progress=(lambda i, n: progress(i, n)) if progress else None)
        ch = rep["chosen"]
        ok = ch is not None and ch["memorized"] and ch["validation_error"] == 0.0
        summary = {"examples": rep["examples"], "restarts": rep["restarts"],
                   "chosen": None if ch is None else ch["label"],
                   "validation_error": None if ch is None else ch["validation_error"],
                   "log10_success_probability": rep["theorem1"]["log10_success_support"]}
        return Learned(summary, ok, format_report(rep))


BACKEND = RCNN()
