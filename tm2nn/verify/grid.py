"""Verify and run an RCNN machine-mode model (:mod:`tm2nn.backends.rcnn`): the grid
after every filter step is decoded into the source machine's configuration and
compared with the interpreter's (state, head, every cell), step by step."""

from __future__ import annotations

import numpy as np

from tm2nn.backends.base import Compiled
from tm2nn.verify.check import Checker, InputSpace
from tm2nn.verify.runs import EXHAUSTIVE_TAPES, compare_runs

#: Output floats held at once by a runner (the states of a batch of grids).
BATCH_FLOATS = 1 << 26


class GridModel:
    """The compiled model's encodings, for encoding inputs and decoding outputs."""

    def __init__(self, compiled: Compiled) -> None:
        from tm2nn.backends.rcnn import machine_form

        enc, enc_out = compiled.input_encoding, compiled.output_encoding
        self.source = compiled.source
        self.chain, self.code = machine_form(self.source, enc)
        self.window = tuple(enc["window"])
        self.steps = int(enc_out["source_steps"])
        self.filter_steps = int(enc_out["filter_steps"])
        self.max_input = int(enc["max_input"])
        #: the net's float type (float64 past float32's 12 digits, docs/rcnn.md): start grids are made in it
        self.dtype = np.dtype(enc.get("dtype", "float32"))

    def batch(self) -> int:
        _top, _left, h, w = self.window
        per_input = (self.filter_steps + 1) * h * w * self.dtype.itemsize // 4  # in float32s
        return max(1, BATCH_FLOATS // per_input)

    def grids(self, texts: list[str]) -> np.ndarray:
        from tm2nn.backends.rcnn.machine_io import start_grids
        from tm2nn.options import OptionError

        long = [t for t in texts if len(t) > self.max_input]
        if long:
            raise OptionError(f"input {long[0]!r} is longer than the compiled bound of {self.max_input} cells "
                              "(compile with a larger {max_input})", "max_input")
        return start_grids(self.chain, self.code, texts, self.window, self.dtype)

    def decode(self, states: np.ndarray, text: str):
        from tm2nn.backends.rcnn.machine_io import decode_run

        return decode_run(self.chain, self.code, self.window, states, text, self.steps)


class GridChecker(Checker):
    """The RCNN: the grid after every filter step, decoded and mapped back to the source
    machine, against the interpreter's configuration (state, head, every cell) at every
    source step."""

    compares = "state, head and every cell after every source step"

    def __init__(self, compiled: Compiled) -> None:
        super().__init__(compiled)
        self.gm = GridModel(compiled)

    def space(self) -> InputSpace:
        return InputSpace(self.compiled.source.alphabet, 0, self.gm.max_input, EXHAUSTIVE_TAPES)

    def batch(self) -> int:
        return self.gm.batch()

    def prepare(self, texts: list[str]) -> list:
        from tm2nn.interp import run_machine

        return [run_machine(self.compiled.source, t, self.gm.steps, trace=True) for t in texts]

    def check(self, engine: str, texts: list[str], want):
        from tm2nn.backends.rcnn.machine_io import max_deviation
        from tm2nn.errors import Tm2nnError

        gm = self.gm
        states = self.compiled.runner(engine)(gm.grids(texts), batch_size=gm.batch())
        dev = max_deviation(states, gm.code.n_digits) / 3 ** (gm.code.n_digits - 1)
        out = []
        for text, s, w in zip(texts, states, want):
            try:
                out.append(compare_runs(w, gm.decode(s, text)))
            except Tm2nnError as e:
                out.append((None, "encoding", "a B.1.1 grid", str(e)))
        return out, dev, {}


def run_grids(compiled: Compiled, texts: list[str], engine: str = "torch", progress=None) -> list:
    """The source machine's decoded runs (RunResults with traces) of ``texts``;
    ``progress(i, L)`` follows the filter steps (torch and the fused engine)."""
    gm = GridModel(compiled)
    run = compiled.runner(engine)
    if engine == "fused":
        states = run(gm.grids(texts), batch_size=gm.batch(), progress=progress)
    else:
        from tm2nn.emit.torch_emit import loop_progress

        with loop_progress(compiled.module() if engine == "torch" else None, progress):
            states = run(gm.grids(texts), batch_size=gm.batch())
    return [gm.decode(np.asarray(s), t) for s, t in zip(states, texts)]
