"""The toy step net's reference check: every step's configuration decoded from the net
(:func:`.codec.decode`: state, head and every cell of the window) against the interpreter's
(:func:`tm2nn.interp.configurations`), step by step; after the interpreter's run ends, the
net's rows must repeat its last configuration (a halted configuration is absorbing).  Then
the run the rows show (:func:`.codec.run_of`) against the interpreter's run with
:func:`tm2nn.verify.runs.compare_runs` (the steps and the report)."""

from __future__ import annotations

import numpy as np

from tm2nn.interp import configurations, run_machine
from tm2nn.verify.check import Checker, InputSpace
from tm2nn.verify.runs import EXHAUSTIVE_TAPES, compare_runs

from . import codec

#: exhaustive over every tape of at most this many cells (and at most T + 1)
MAX_INPUT = 6


def differ(k: int, want: tuple, got: tuple, blank: str):
    """``(k, field, expected, got)`` where configuration ``want`` and ``got`` (``(state,
    head, non-blank cells)``) first differ, or None."""
    for f, a, b in zip(("state", "head"), want, got):
        if a != b:
            return k, f, a, b
    if want[2] != got[2]:
        pos = sorted(set(want[2].items()) ^ set(got[2].items()), key=repr)[0][0]
        return k, f"cell {pos}", want[2].get(pos, blank), got[2].get(pos, blank)
    return None


def first_difference(want, configs: list[tuple[str, int, dict]]):
    """The first step where the net's configurations ``configs`` (rows 0..T) leave the
    interpreter's run ``want`` (with its trace), or None (module doc)."""
    blank = want.machine.blank
    last = None
    for k, q, head, cells in configurations(want):
        if k >= len(configs):
            return k, "steps", f"a configuration at step {k}", "none"
        d = differ(k, (q, head, cells), configs[k], blank)
        if d is not None:
            return d
        last = (q, head, dict(cells))  # configurations() updates one dict in place
    for k in range(want.steps + 1, len(configs)):
        d = differ(k, last, configs[k], blank)
        if d is not None:
            return d
    return None


class StepChecker(Checker):
    """Every step's configuration, then the run report, against the interpreter."""

    compares = "state, head and every cell at every step, then the run report"

    def __init__(self, compiled) -> None:
        super().__init__(compiled)
        self.steps = int(compiled.output_encoding["steps"])

    def space(self) -> InputSpace:
        return InputSpace(self.compiled.source.alphabet, 0, min(self.steps + 1, MAX_INPUT), EXHAUSTIVE_TAPES)

    def batch(self) -> int:
        return codec.batch(self.compiled.output_encoding)

    def prepare(self, texts: list[str]) -> list:
        codec.check_inputs(self.compiled, texts)
        return [run_machine(self.compiled.source, t, self.steps, trace=True) for t in texts]

    def check(self, engine: str, texts: list[str], want: list):
        y = codec.outputs(self.compiled, texts, engine)
        dev = float(np.max(np.abs(y - np.rint(y)), initial=0.0))
        out = []
        for text, row, w in zip(texts, y, want):
            try:
                configs = codec.decode(self.compiled.output_encoding, row)
            except codec.Malformed as e:
                out.append((e.step, "encoding", "one-hot groups", e.message))
                continue
            d = first_difference(w, configs)
            out.append(d if d is not None else compare_runs(w, codec.run_of(self.compiled, configs, text)))
        return out, dev, {}
