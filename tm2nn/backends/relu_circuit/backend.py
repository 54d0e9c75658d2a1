"""The relu-circuit backend (Wei, Chen & Ma 2022, §3 and App. B), declared: circuits compile
directly; line machines are unrolled into a circuit for T steps over an N-cell window first
(:mod:`.build`, :mod:`.unroll`), with their own codec (:mod:`.codec`) and reference check
(:mod:`.check`).  Fused engines: :mod:`.layered_engine`; analyses: the all-layer margin
(:mod:`.margin`, :mod:`.attacks`) and Theorem 3.1's function class (:mod:`.bounds`)."""

from __future__ import annotations

from tm2nn.backends.protocol import Backend, Example, Stepping, Training
from tm2nn.backends.relu_circuit.bounds import function_class
from tm2nn.backends.relu_circuit.build import compile
from tm2nn.backends.relu_circuit.check import reference
from tm2nn.backends.relu_circuit.codec import CODEC
from tm2nn.backends.relu_circuit.margin import certified_margin
from tm2nn.backends.relu_circuit.options import Options, TrainOptions
from tm2nn.ir import Circuit, Machine

__all__ = ["BACKEND"]


def _attacks():
    """:mod:`.attacks`: it loads torch and numba, so it is imported when an analysis that
    attacks is asked for (start-up time: every CLI call declares every backend)."""
    from tm2nn.backends.relu_circuit import attacks

    return attacks


def margin(ir, opts: Options, *, samples: int, trials: int, seed: int, engines=None, device=None,
           budget: float | None = None):
    """The ``margin`` analysis (:func:`.attacks.margin_table`; the torch attacks on ``device``,
    within ``budget`` seconds)."""
    return _attacks().margin_table(ir, opts, samples=samples, trials=trials, seed=seed, engines=engines,
                                   device=device, budget=budget)


def margin_attack(compiled, **kw) -> dict:
    """The ``margin_attack`` analysis (:func:`.attacks.margin_attack`)."""
    return _attacks().margin_attack(compiled, **kw)


def statistics_bracket(compiled, dataset, gamma: float, **kw) -> dict:
    """The ``statistics_bracket`` analysis (:func:`.attacks.statistics_bracket`)."""
    return _attacks().statistics_bracket(compiled, dataset, gamma, **kw)


def options_for_run(values: dict, texts: list[str]) -> dict:
    """``run`` unrolls for the inputs it is given: without a window given, the default one
    (2T+1 cells, the start cell in the middle) widened to the right for a longer input."""
    longest, steps = max((len(t) for t in texts), default=0), values["steps"]
    if values.get("tape") is None and values.get("origin") is None and longest > steps + 1:
        return {**values, "tape": steps + longest, "origin": steps}
    return values


def train_task(compiled, opts, extra):
    """``tm2nn train``'s hook (:func:`.train.training`; it loads torch, so it is imported
    when a training run starts)."""
    from tm2nn.backends.relu_circuit.train import training

    return training(compiled, opts, extra)


def fused(engine: str):
    """The factory of ``--engine fused`` / ``fused-float``: ``factory(compiled) -> run``
    (:func:`.layered_engine.runner`; numba loads with the engine, when one is asked for)."""
    def factory(compiled):
        from tm2nn.backends.relu_circuit.layered_engine import runner

        return runner(compiled, engine)
    return factory


BACKEND = Backend(
    name="relu-circuit",
    paper="Colin Wei, Yining Chen, Tengyu Ma: Statistically Meaningful Approximation: a Theoretical Analysis for "
          "Approximating Turing Machines with Transformers (§3, Lemma B.1, Prop. 3.4)",
    summary="Wei-Chen-Ma §3: a layered circuit as a ReLU net with round() corrections",
    Options=Options,
    takes=(Circuit, Machine),
    takes_what="circuits and line machines (unrolled for T steps)",
    compile=compile,
    codec=CODEC,
    reference=reference,
    # run --backend relu-circuit: a machine unrolled for T = --max-steps steps (default 50:
    # the unrolled circuit grows as T^2); a circuit compiles as it is
    stepping=Stepping("steps", 50, options_for_run),
    #: ``fused`` exact in integers on 0/1 inputs, ``fused-float`` every row in floats
    fused={"fused": fused("fused"), "fused-float": fused("fused-float")},
    training=Training(TrainOptions, train_task),
    analyses={"margin": margin, "certified_margin": certified_margin, "function_class": function_class,
              "statistics_bracket": statistics_bracket, "margin_attack": margin_attack},
    examples=(
        Example("ripple_adder4.circ", (
            "compile {ex}/ripple_adder4.circ --backend relu-circuit -o {out}/ripple_adder4.onnx --json",
            "verify {ex}/ripple_adder4.circ --backend relu-circuit --json")),
        Example("binary_increment.tm", (
            "compile {ex}/binary_increment.tm --backend relu-circuit --steps 20 -o {out}/binary_increment.onnx --json",
            "verify {ex}/binary_increment.tm --backend relu-circuit --steps 20 --samples 2000 --seed 0 --json")),
    ),
)
