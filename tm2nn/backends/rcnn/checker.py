"""Verify an RCNN machine-mode model (the reference check, :mod:`tm2nn.verify`): the grid
after every filter step is decoded into the source machine's configuration
(:class:`.runtime.GridModel`) and compared with the interpreter's (state, head, every
cell), step by step."""

from __future__ import annotations

from tm2nn.backends.protocol import Model
from tm2nn.backends.rcnn.runtime import GridModel
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.verify.check import Checker, InputSpace
from tm2nn.verify.runs import EXHAUSTIVE_TAPES, compare_runs


class GridChecker(Checker):
    """The RCNN: the grid after every filter step, decoded and mapped back to the source
    machine, against the interpreter's configuration (state, head, every cell) at every
    source step."""

    compares = "state, head and every cell after every source step"

    def __init__(self, compiled: Model) -> None:
        super().__init__(compiled)
        self.gm = GridModel(compiled)

    def space(self) -> InputSpace:
        return InputSpace(self.compiled.source.alphabet, 0, self.gm.max_input, EXHAUSTIVE_TAPES)

    def batch(self) -> int:
        return self.gm.batch()

    def prepare(self, texts: list[str]) -> list:
        return [run_machine(self.compiled.source, t, self.gm.steps, trace=True) for t in texts]

    def check(self, engine: str, texts: list[str], want):
        gm = self.gm
        decs = gm.decoders(self.compiled.runner(engine), texts)  # every grid, streamed where the engine streams
        dev = max((d.deviation for d in decs), default=0.0) / 3 ** (gm.code.n_digits - 1)
        out = []
        for text, d, w in zip(texts, decs, want):
            try:
                out.append(compare_runs(w, d.result(text, gm.steps)))
            except (Tm2nnError, ValueError) as e:  # ValueError: a run no source step maps to (mid-step)
                out.append((None, "encoding", "a B.1.1 grid", str(e)))
        return out, dev, {}
