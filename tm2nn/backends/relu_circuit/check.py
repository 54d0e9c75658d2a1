"""relu-circuit's reference check (:func:`reference`): for machines unrolled into circuits,
the decoded configuration after T steps against the interpreter's run report
(:class:`UnrolledChecker`); for circuits the shared :class:`tm2nn.verify.check.CircuitChecker`."""

from __future__ import annotations

from tm2nn.backends.relu_circuit.codec import KIND, decode_outputs, encode_tapes
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.ir import Circuit
from tm2nn.verify.check import (
    EXHAUSTIVE_LIMIT,
    REPORT_FIELDS,
    Checker,
    CircuitChecker,
    InputSpace,
    deviation,
)


class UnrolledChecker(Checker):
    """A machine unrolled for T steps: the decoded configuration after T steps against
    the interpreter's run report, field by field; runs that leave the tape window must be
    flagged as overflow."""

    compares = "the configuration after T steps (every report field)"

    def space(self) -> InputSpace:
        lay = self.compiled.input_encoding["layout"]
        return InputSpace(lay["alphabet"], 0, lay["tape"] - lay["origin"], EXHAUSTIVE_LIMIT)

    def prepare(self, texts: list[str]) -> list[dict]:
        """The interpreter's report of each input, or ``{"overflow": True}`` for a run that
        leaves the tape window within T steps."""
        m = self.compiled.source
        steps = self.compiled.options["steps"]
        lay = self.compiled.input_encoding["layout"]
        want = []
        for s in texts:
            r = run_machine(m, s, steps, trace=True)
            heads = [0, *r.trace.head]
            inside = lay["origin"] + min(heads) >= 0 and lay["origin"] + max(heads) < lay["tape"]
            want.append(r.report() if inside else {"overflow": True})
        return want

    def check(self, engine: str, texts: list[str], want):
        enc = self.compiled.output_encoding
        y = self.compiled.runner(engine)(encode_tapes(self.compiled.input_encoding, texts))
        out = []
        for got, w in zip(decode_outputs(enc, y), want):
            if w.get("overflow"):  # outside the window: the net must say so, nothing more
                diff = [] if got.get("overflow") else ["overflow"]
            else:
                diff = [f for f in ("overflow",) + REPORT_FIELDS if got.get(f) != w.get(f)]
            out.append((None, diff[0], w.get(diff[0]), got.get(diff[0])) if diff else None)
        return out, deviation(enc, y), {"out_of_window": sum(1 for w in want if w.get("overflow"))}


def reference(compiled) -> Checker:
    """What ``verify`` compares a relu-circuit model with: an unrolled machine's final
    configuration (:class:`UnrolledChecker`), a circuit's bits (:class:`CircuitChecker`)."""
    if compiled.input_encoding.get("kind") == KIND:
        return UnrolledChecker(compiled)
    if isinstance(compiled.source, Circuit) and compiled.output_encoding.get("kind") == "bits":
        return CircuitChecker(compiled)
    raise Tm2nnError(f"the relu-circuit backend has no verifier for {compiled.output_encoding.get('kind')!r} models")
