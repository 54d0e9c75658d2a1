"""The transformer's reference check: its run, decoded step by step
(:mod:`.decoding`), against the interpreter's.

The model's taps are decoded into the configuration after every source step 0..T —
state, head position and the symbol under the head — and compared with the interpreter's
trace, step by step (:func:`tm2nn.verify.runs.first_divergence`); then the final run
report field by field.  The first divergence names the input, the step, the field and
both values.  Runs in torch and, unless told not to, in onnxruntime.
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.transformer.cls import OUTCOME_VALUE
from tm2nn.backends.transformer.decoding import TraceDecoder
from tm2nn.backends.transformer.runtime import BATCH, LONG_RUN, run_taps
from tm2nn.interp import run_machine
from tm2nn.passes.stay import remove_stays
from tm2nn.verify.check import Checker, InputSpace
from tm2nn.verify.runs import EXHAUSTIVE_CELLS, EXHAUSTIVE_TAPES, first_divergence


class TraceChecker(Checker):
    """The transformer: every source step's state, head and symbol under the head,
    decoded from the taps, against the interpreter's trace; then the run report.  A model
    with the θ_cls readout (``output_encoding["cls_column"]``, Wei, Chen & Ma's proof of
    Theorem 4.1) also has its last step's ``cls`` column compared with
    :func:`expected_cls`; its deviation is from {0, 1} on the tap groups and from
    {−1, 0, 1} on ``cls``."""

    compares = "state, head and the symbol under the head after every step, then the run report"
    #: a decoder step is a chain of tiny ops: in torch and onnxruntime a batch of inputs
    #: costs about what one does (every run is T' steps); the index engine's early stop
    #: waits for the batch's longest run, but its steps cost microseconds
    batches_cheaply = True

    def __init__(self, compiled) -> None:
        super().__init__(compiled)
        self.steps = int(compiled.output_encoding["source_steps"])
        self.decoder = TraceDecoder(compiled.output_encoding)
        c = compiled.output_encoding.get("cls_column")
        self.column = None if c is None else int(c)
        if self.column is not None:
            self.compares += ", then cls = θ_clsᵀ o_T' (+1 accept, -1 reject, 0 otherwise)"

    def space(self) -> InputSpace:
        return InputSpace(self.compiled.source.alphabet, 0, min(EXHAUSTIVE_CELLS, self.steps + 1), EXHAUSTIVE_TAPES)

    def batch(self) -> int:
        return BATCH

    def prepare(self, texts: list[str]) -> list:
        runs = [run_machine(self.compiled.source, t, self.steps, trace=True) for t in texts]
        if self.column is None:
            return [(run, None) for run in runs]
        return [(run, expected_cls(self.compiled, t)) for run, t in zip(runs, texts)]

    def check(self, engine: str, texts: list[str], prepared):
        # the index engine stops once every input has decoded its T source steps (a machine
        # with stay moves has up to 2T decoder steps; the ones after source step T decode to
        # nothing), unless θ_cls is checked: it reads the last decoder step
        early = engine in LONG_RUN and self.column is None
        taps = run_taps(self.compiled, texts, engine, horizon=self.decoder.checked_horizon if early else None)
        out, dev = self.compare(taps, texts, prepared)
        return out, dev, {}

    def compare(self, taps, texts: list[str], prepared) -> tuple[list, float]:
        """``(per input: None or (step, field, expected, got), max deviation)`` of ``taps``
        (``[n, T'+1, tap_w]``, or the index engine's per-input list) against the reference
        runs :meth:`prepare` made."""
        c = self.column
        if isinstance(taps, list):  # the index engine's per-input taps: exact int8, -1/0/1 checked as they ran
            groups = [t if c is None else np.delete(t, c, axis=1) for t in taps]
            dev = float(any(np.any((g != 0) & (g != 1)) for g in groups))
        else:
            groups = taps if c is None else np.delete(taps, c, axis=2)
            dev = float(np.max(np.minimum(np.abs(groups), np.abs(groups - 1)), initial=0.0))
        if c is not None:
            got = np.array([t[-1, c] for t in taps], dtype=np.float64)
            dev = max(dev, float(np.max(np.abs(got - np.clip(np.rint(got), -1, 1)), initial=0.0)))
        m = self.compiled.source
        out = []
        for b, (text, (run, want)) in enumerate(zip(texts, prepared)):
            d = first_divergence(m, self.decoder.decode(taps[b], text), text, self.steps, run)
            if d is None and c is not None and abs(float(taps[b][-1, c]) - want) >= 0.5:
                d = (None, "cls (θ_clsᵀ o_T')", want, float(taps[b][-1, c]))
            out.append(d)
        return out, dev


def expected_cls(compiled, text: str) -> float:
    """What θ_clsᵀ o_{T'} must be on ``text``: θ_cls at the state the interpreter's run of
    the lowered (stay-free) machine is in after at most T' decoder steps (docs/transformer.md,
    "The θ_cls readout")."""
    enc = compiled.output_encoding
    low = remove_stays(compiled.source).machine
    run = run_machine(low, text, int(enc["layout"]["steps"]))
    return float(OUTCOME_VALUE.get(dict(enc["halting"]).get(run.report()["state"]), 0.0))
