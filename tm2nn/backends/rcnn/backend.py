"""The rcnn construction (Goel, Kakade, Kalai & Zhang, Def. 5 / App. B) as the registry
sees it (:class:`tm2nn.backends.protocol.Backend`): its options, spelled once, and the
module-level functions it is made of.  Machine mode compiles (:mod:`.machine_mode`), runs
(:mod:`.runtime`, the fused :mod:`.grid_engine`) and is checked (:mod:`.checker`);
learner mode (Algorithm 1, Corollary 2) trains (:mod:`.trainer`)."""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.backends.protocol import Backend, Codec, Example, Learned, Model, Stepping, Trainer
from tm2nn.backends.rcnn import machine_mode, runtime
from tm2nn.backends.rcnn.checker import GridChecker
from tm2nn.backends.rcnn.learner_form import parse_parts, size_estimate
from tm2nn.backends.rcnn.plain_tables import description
from tm2nn.ir import Machine
from tm2nn.limits import SEED_MAX
from tm2nn.options import OptionError, option, validate


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
    seed: int = option(0, "seed of the test points and of the draws from U_s", low=0, high=SEED_MAX)
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
    sgd_on: str = option("memory", "what SGD trains, comma-separated: memory (Algorithm 1), and also filter "
                         "and head (their stored weights; a departure from Algorithm 1)", metavar="PARTS")
    random_fraction: float | None = option(None, "draw this fraction of the filter's and head's stored weights "
                                           "uniformly from U_s (Theorem 1's initialisation), planting the rest; "
                                           "seeded by --seed (default: 1 with --restarts, else 0)", metavar="F",
                                           low=0.0, high=1.0)

    def __post_init__(self):
        validate(self)
        parse_parts(self.sgd_on)
        if self.restarts and self.validation is None:
            raise OptionError("{restarts} needs {validation} (Corollary 2 selects on a validation set)",
                              "restarts", "validation")


def options_for_run(values: dict, texts: list[str]) -> dict:
    """``run`` compiles for the inputs it is given: the grid holds the longest."""
    return {"max_input": max((len(t) for t in texts), default=0), **values}


def fused_runner(compiled: Model):
    """``--engine fused``: :func:`tm2nn.backends.rcnn.grid_engine.runner`, the filter fused
    and run incrementally on the model's own net."""
    from tm2nn.backends.rcnn.grid_engine import runner  # loads numba

    return runner(compiled)


def learn(ir, opts: LearnOptions, **kw) -> Learned:
    """``tm2nn learn``: Algorithm 1 on a learner machine, or Corollary 2's restarts
    (:func:`tm2nn.backends.rcnn.trainer.learn`)."""
    from tm2nn.backends.rcnn import trainer  # loads torch

    return trainer.learn(ir, opts, **kw)


def example(ir, header: dict, folder) -> tuple[str, bool]:
    """``tm2nn demo``'s row for a learner machine and its ``# train:`` set: the
    interpreter's answer on every input (:func:`tm2nn.backends.rcnn.learner.demo_learner`)."""
    from tm2nn.backends.rcnn.learner import demo_learner  # loads torch

    return demo_learner(ir, folder / header["train"])


BACKEND = Backend(
    name="rcnn",
    paper="Surbhi Goel, Sham Kakade, Adam Tauman Kalai, Cyril Zhang: Recurrent Convolutional Neural Networks "
          "Learn Succinct Learning Algorithms (Def. 5, App. B)",
    summary="Goel-Kakade-Kalai-Zhang: one shared 3x3 filter applied recurrently over a 2D tape",
    Options=Options,
    takes=(Machine,),
    takes_what="machines (machine mode; learners in the XOR-input form train with 'tm2nn learn')",
    compile=machine_mode.compile,
    # start grids in, every grid decoded out; the manifest's decoding through the output's
    # decode table (:func:`.plain_tables.description`)
    codec=Codec(encode=runtime.encode, run=runtime.run, describe=description),
    reference=GridChecker,
    stepping=Stepping("steps", 100, options_for_run),
    fused={"fused": fused_runner},
    trainer=Trainer(Options=LearnOptions, takes=(Machine,), learn=learn, example=example),
    # size_estimate: a learner (B.1.2 learner form, which machine mode cannot lower) is
    # reported without compiling; configurations: every step decoded from the network
    analyses={"size_estimate": size_estimate, "configurations": runtime.configurations},
    # what a model file must hold: rebuild's step bound, the grid encoding (the machine,
    # its B.1.2 lowering, the cell code, the window) and the trace decoding reads, and the
    # start-grid and decode tables a plain script reads (:mod:`.plain_tables`)
    model_keys={"tm2nn.build/options/steps": "int", "tm2nn.input_encoding/machine": "string",
                "tm2nn.input_encoding/lowering": "object", "tm2nn.input_encoding/code": "object",
                "tm2nn.input_encoding/window": "list", "tm2nn.input_encoding/max_input": "int",
                "tm2nn.input_encoding/start_grid": "object",
                "tm2nn.output_encoding/source_steps": "int", "tm2nn.output_encoding/filter_steps": "int",
                "tm2nn.output_encoding/digits": "int", "tm2nn.output_encoding/decode": "object"},
    examples=(Example("bb3.tm", ("compile {ex}/bb3.tm --backend rcnn --steps 25 --max-input 2 -o {out}/bb3_rcnn.onnx "
                                 "--json",
                                 "verify {ex}/bb3.tm --backend rcnn --steps 25 --max-input 2 --json")),),
)
