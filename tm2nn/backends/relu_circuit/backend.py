"""The relu-circuit backend (Wei, Chen & Ma 2022, §3 and App. B) behind the common
interface: circuits compile directly (:mod:`.build`); line machines are unrolled into a
circuit for T steps over an N-cell window first (:mod:`.unroll`), with their own codec
(:mod:`.codec`) and reference check (:mod:`.check`)."""

from __future__ import annotations

from tm2nn.backends.base import Backend, Compiled, Table
from tm2nn.backends.relu_circuit import bounds, margin
from tm2nn.backends.relu_circuit.build import compile_circuit
from tm2nn.backends.relu_circuit.check import UnrolledChecker
from tm2nn.backends.relu_circuit.codec import (
    KIND,
    UnrollLayout,
    decode_outputs,
    encode_tapes,
    encoding,
)
from tm2nn.backends.relu_circuit.options import DEFAULT_MAX_GATES, Options
from tm2nn.backends.relu_circuit.unroll import unroll
from tm2nn.errors import Tm2nnError
from tm2nn.interp import exhaustive_inputs, random_inputs
from tm2nn.ir import Circuit, GridMachine, Machine
from tm2nn.limits import check_int, check_memory, check_seed
from tm2nn.options import OptionError
from tm2nn.report import Report
from tm2nn.verify.check import EXHAUSTIVE_LIMIT, InputSpace

__all__ = ["BACKEND", "DEFAULT_MAX_GATES", "Options", "ReluCircuit", "unroll_machine"]


def unroll_machine(m, opts: Options):
    """TM -> circuit: ``steps`` is required, the window defaults to 2T+1 cells (every run
    of T steps fits).  Returns (circuit, layout)."""
    if isinstance(m, GridMachine):
        raise Tm2nnError("the relu-circuit backend unrolls line machines; this is a grid machine "
                         "(try the rcnn backend)")
    if opts.steps is None:
        raise OptionError("compiling a machine to a circuit needs the step bound {steps} (T)", "steps")
    n = opts.tape if opts.tape is not None else 2 * opts.steps + 1
    return unroll(m, opts.steps, n, origin=opts.origin, max_gates=opts.max_gates)


def fused_runner(compiled, engine: str):
    """The array runner of ``--engine fused`` / ``fused-float`` (:mod:`.layered_engine`)."""
    # numba loads with the engine: imported when an engine is asked for, for start-up time
    from tm2nn.backends.relu_circuit.layered_engine import runner

    return runner(compiled, engine)


class ReluCircuit(Backend):
    name = "relu-circuit"
    summary = "Wei-Chen-Ma §3: a layered circuit as a ReLU net with round() corrections"
    paper = "Colin Wei, Yining Chen, Tengyu Ma: Statistically Meaningful Approximation: a Theoretical Analysis for Approximating Turing Machines with Transformers (§3, Lemma B.1, Prop. 3.4)"
    Options = Options
    takes_what = "circuits and line machines (unrolled for T steps)"
    takes = (Circuit, Machine)
    #: torch, onnxruntime, and the fused engines (:mod:`.layered_engine`):
    #: ``fused`` exact in integers on 0/1 inputs, ``fused-float`` every row in floats
    engines = ("torch", "onnxruntime", "fused", "fused-float")

    def compile(self, ir, opts: Options) -> Compiled:
        if isinstance(ir, Circuit):
            if opts.steps is not None or opts.tape is not None or opts.origin is not None:
                raise OptionError("{steps}, {tape} and {origin} are for machines; this is a circuit",
                                  "steps", "tape", "origin")
            return compile_circuit(ir, opts)
        circuit, layout = unroll_machine(ir, opts)
        inner = compile_circuit(circuit, opts)
        threshold = inner.output_encoding.get("threshold", 0.5)
        return Compiled(
            self.name, inner.net, ir,
            input_encoding=encoding(layout),
            output_encoding=encoding(layout, threshold),
            bounds=inner.bounds,
            options=dict(inner.options, steps=opts.steps, tape=layout.tape, origin=layout.origin,
                         circuit_gates=len(circuit.gates)),
        ).with_options(opts).with_info(inner.info()["info"])  # the same net: measured once

    def encode(self, compiled: Compiled, texts: list[str]):
        """Machines: the one-hot initial tape windows (:mod:`.codec`); circuits: the bits."""
        if compiled.input_encoding.get("kind") == KIND:
            return encode_tapes(compiled.input_encoding, texts)
        return super().encode(compiled, texts)

    def run(self, compiled: Compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
        """Machines: the run report after T steps (:func:`.codec.decode_outputs`)."""
        if compiled.output_encoding.get("kind") != KIND:
            return super().run(compiled, texts, engine, progress)
        y = compiled.runner(engine)(self.encode(compiled, texts))
        return [Report(r) for r in decode_outputs(compiled.output_encoding, y)]

    def array_runner(self, compiled: Compiled, engine: str):
        return fused_runner(compiled, engine)

    def decoding(self, compiled: Compiled) -> dict:
        """The run report of an unrolled machine (:meth:`UnrollLayout.description`), or a
        circuit's output bits (the default)."""
        if compiled.output_encoding.get("kind") == KIND:
            y = compiled.net.outputs[0]
            layout = UnrollLayout.from_json(compiled.output_encoding["layout"])
            return layout.description(y, compiled.net.spaces[y].labels)
        return super().decoding(compiled)

    def checker(self, compiled: Compiled):
        if compiled.input_encoding.get("kind") == KIND:
            return UnrolledChecker(compiled)
        return super().checker(compiled)

    def margin(self, ir, opts: Options, *, samples: int, trials: int, seed: int, engines=None) -> Table:
        """Wei-Chen-Ma's all-layer margin, per layer (:mod:`.margin`, :mod:`.attacks`): the
        certified lower bound and two attacks, with and without corrections; the random
        attacks on each of ``engines`` (torch, fused-float; default torch)."""
        # the attacks load torch and numba: imported when a margin is asked for, for start-up time
        from tm2nn.backends.relu_circuit.attacks import margin_report

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
            circuit, layout = unroll_machine(ir, opts)
            tapes, _, _ = InputSpace(layout.alphabet, 0, layout.tape - layout.origin, EXHAUSTIVE_LIMIT).pick(samples, seed)
            x = encode_tapes(encoding(layout), tapes[:samples]) > 0.5
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
        return bounds.function_class(compiled)

    def certified_margin(self, compiled: Compiled) -> dict:
        """The certified all-layer margin (:func:`.margin.certified_radius`, a lower bound on
        ρ of eq. 2.1 at every binary input), with (D.5) beside it."""
        if compiled.edited is not None:
            raise Tm2nnError(f"its weights are not the construction's ({compiled.edited}); the certificate "
                             "reads the construction's weights", file=compiled.path)
        cert = margin.certified_radius(compiled)
        d5 = margin.theorem_d6_bound(compiled)
        return {**cert, "kind": "per-layer: every parameter group moves by <= radius (l2); a lower bound on rho",
                "d5": d5["d5"], "d5_binding": d5["binding"]}


BACKEND = ReluCircuit()
