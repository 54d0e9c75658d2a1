"""The relu-circuit backend (Wei, Chen & Ma 2022, §3 and App. B) behind the common
interface: circuits compile directly; line machines are unrolled into a circuit for T
steps over an N-cell window first (:mod:`tm2nn.passes.unroll`)."""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.backends.base import Backend, Compiled, Table
from tm2nn.errors import Tm2nnError
from tm2nn.options import OptionError, option, validate

DEFAULT_MAX_GATES = 5_000_000


@dataclass(frozen=True)
class Options:
    steps: int | None = option(None, "machines: the step bound T of the unrolling (required for machines)",
                               metavar="T", low=1)
    tape: int | None = option(None, "machines: the tape window, N cells (default 2T+1)", metavar="N", low=1)
    origin: int | None = option(None, "machines: the window index of the start cell (default N//2)", low=0)
    max_gates: int = option(DEFAULT_MAX_GATES, "refuse an unrolled circuit estimated above this many gates", low=1)
    corrections: bool = option(True, "the round() correction after every layer but the last (Prop. 3.4; "
                               "Lemma 3.3's large all-layer margin)")
    pm_one_output: bool = option(False, "the final map z -> 2z-1 of Theorem 3.1's proof: outputs in {-1, +1}",
                                 flag="--pm-one")

    def __post_init__(self):
        validate(self)


def unroll_machine(m, opts: Options):
    """TM -> circuit: ``steps`` is required, the window defaults to 2T+1 cells (every run
    of T steps fits).  Returns (circuit, layout)."""
    from tm2nn.ir import GridMachine
    from tm2nn.passes.unroll import unroll

    if isinstance(m, GridMachine):
        raise Tm2nnError("the relu-circuit backend unrolls line machines; this is a grid machine "
                         "(try the rcnn backend)")
    if opts.steps is None:
        raise OptionError("compiling a machine to a circuit needs the step bound {steps} (T)", "steps")
    n = opts.tape if opts.tape is not None else 2 * opts.steps + 1
    return unroll(m, opts.steps, n, origin=opts.origin, max_gates=opts.max_gates)


class ReluCircuit(Backend):
    name = "relu-circuit"
    summary = "Wei-Chen-Ma §3: a layered circuit as a ReLU net with round() corrections"
    paper = "Colin Wei, Yining Chen, Tengyu Ma: Statistically Meaningful Approximation: a Theoretical Analysis for Approximating Turing Machines with Transformers (§3, Lemma B.1, Prop. 3.4)"
    Options = Options
    takes_what = "circuits and line machines (unrolled for T steps)"
    #: torch, onnxruntime, and the fused engines (:mod:`tm2nn.engines.layered_engine`):
    #: ``fused`` exact in integers on 0/1 inputs, ``fused-float`` every row in floats
    engines = ("torch", "onnxruntime", "fused", "fused-float")

    @property
    def takes(self):
        from tm2nn.ir import Circuit, Machine

        return (Circuit, Machine)

    def compile(self, ir, opts: Options) -> Compiled:
        from tm2nn.backends.relu_circuit import compile as compile_circuit
        from tm2nn.ir import Circuit

        if isinstance(ir, Circuit):
            if opts.steps is not None or opts.tape is not None or opts.origin is not None:
                raise OptionError("{steps}, {tape} and {origin} are for machines; this is a circuit",
                                  "steps", "tape", "origin")
            return compile_circuit(ir, corrections=opts.corrections, pm_one_output=opts.pm_one_output)
        circuit, layout = unroll_machine(ir, opts)
        inner = compile_circuit(circuit, corrections=opts.corrections, pm_one_output=opts.pm_one_output)
        threshold = inner.output_encoding.get("threshold", 0.5)
        return Compiled(
            self.name, inner.net, ir,
            input_encoding={"kind": "unrolled_tm", "layout": layout.to_json()},
            output_encoding={"kind": "unrolled_tm", "layout": layout.to_json(), "threshold": threshold},
            bounds=inner.bounds,
            options=dict(inner.options, steps=opts.steps, tape=layout.tape, origin=layout.origin,
                         circuit_gates=len(circuit.gates)),
        ).with_options(opts).with_info(inner.info()["info"])  # the same net: measured once

    def array_runner(self, compiled: Compiled, engine: str):
        from tm2nn.engines.layered_engine import runner

        return runner(compiled, engine)

    def decoding(self, compiled: Compiled) -> dict:
        """The run report of an unrolled machine (:meth:`UnrollLayout.description`), or a
        circuit's output bits (the default)."""
        if compiled.output_encoding.get("kind") == "unrolled_tm":
            from tm2nn.passes.unroll import UnrollLayout

            y = compiled.net.outputs[0]
            layout = UnrollLayout.from_json(compiled.output_encoding["layout"])
            return layout.description(y, compiled.net.spaces[y].labels)
        return super().decoding(compiled)

    def checker(self, compiled: Compiled):
        from tm2nn.verify.check import UnrolledChecker

        if compiled.input_encoding.get("kind") == "unrolled_tm":
            return UnrolledChecker(compiled)
        return super().checker(compiled)

    def margin(self, ir, opts: Options, *, samples: int, trials: int, seed: int, engines=None) -> Table:
        """Wei-Chen-Ma's all-layer margin, per layer (:mod:`tm2nn.verify.margin`): the
        certified lower bound and two attacks, with and without corrections; the random
        attacks on each of ``engines`` (torch, fused-float; default torch)."""
        from tm2nn.interp import exhaustive_inputs, random_inputs
        from tm2nn.ir import Circuit
        from tm2nn.limits import check_int, check_memory, check_seed
        from tm2nn.verify.margin import margin_report

        samples, trials = check_int("samples", samples, 1), check_int("trials", trials, 1)
        seed = check_seed("seed", seed)
        engines = tuple(dict.fromkeys(engines or ("torch",)))
        bad = [e for e in engines if e not in ("torch", "fused-float")]
        if bad:
            raise OptionError(f"the margin attacks run on torch or fused-float (real-valued perturbations), "
                              f"not {{engines}} {bad[0]!r}", "engines")
        if isinstance(ir, Circuit):
            circuit = ir
            n = len(circuit.inputs)
            if n > 10:
                check_memory(2 * samples * n, f"{samples:,} random inputs of {n} bits", ("samples",))
            x = exhaustive_inputs(n) if n <= 10 else random_inputs(n, samples, seed)
        else:
            from tm2nn.codec import encode_many
            from tm2nn.verify.check import EXHAUSTIVE_LIMIT, InputSpace

            circuit, layout = unroll_machine(ir, opts)
            enc = {"kind": "unrolled_tm", "layout": layout.to_json()}
            tapes, _, _ = InputSpace(layout.alphabet, 0, layout.tape - layout.origin, EXHAUSTIVE_LIMIT).pick(samples, seed)
            x = encode_many(enc, tapes[:samples]) > 0.5
        rows = margin_report(circuit, x, seed=seed, trials=trials, pm_one_output=opts.pm_one_output, engines=engines)
        which = ["engine"] if len(engines) > 1 else []
        return Table(f"all-layer margin, {len(x)} inputs: (D.5), certified <= per-layer margin <= per-layer "
                     "attacks; certified <= rho (eq. 2.1, one l2 ball over all parameters) <= joint attacks"
                     + ("" if engines == ("torch",) else f"; random attacks on {', '.join(engines)}"),
                     which + ["corrections", "layers", "(D.5) Thm D.6 (lower)", "certified (lower)",
                      "per-layer gradient (upper)", "per-layer random (upper)", "joint gradient (upper)",
                      "joint random (upper)"],
                     [[r["engine"]] * bool(which) + ["on" if r["corrections"] else "off", str(r["layers"]), f"{r['d5']:.3g}",
                       f"{r['certified']:.3g}", f"{r['eps_gradient']:.3g}", f"{r['eps_random']:.3g}",
                       f"{r['eps_joint_gradient']:.3g}", f"{r['eps_joint_random']:.3g}"] for r in rows], json=rows)

    # -- statistics (Wei, Chen & Ma Lemma 2.3 / Theorem 3.1) --------------------------------------
    def function_class(self, compiled: Compiled) -> dict:
        """Theorem 3.1's F_{w,d,α} for this net (:func:`.bounds.function_class`)."""
        from tm2nn.backends.relu_circuit.bounds import function_class

        return function_class(compiled)

    def certified_margin(self, compiled: Compiled) -> dict:
        """The certified all-layer margin (:func:`tm2nn.verify.margin.certified_radius`, a lower
        bound on ρ of eq. 2.1 at every binary input), with (D.5) beside it."""
        from tm2nn.verify.margin import certified_radius, theorem_d6_bound

        if compiled.edited is not None:
            raise Tm2nnError(f"its weights are not the construction's ({compiled.edited}); the certificate "
                             "reads the construction's weights", file=compiled.path)
        cert = certified_radius(compiled)
        d5 = theorem_d6_bound(compiled)
        return {**cert, "kind": "per-layer: every parameter group moves by <= radius (l2); a lower bound on rho",
                "d5": d5["d5"], "d5_binding": d5["binding"]}


BACKEND = ReluCircuit()
