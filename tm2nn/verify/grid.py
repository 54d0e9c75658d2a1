"""Verify and run an RCNN machine-mode model (:mod:`tm2nn.backends.rcnn`): the grid
after every filter step is decoded into the source machine's configuration and
compared with the interpreter's (state, head, every cell), step by step."""

from __future__ import annotations

import numpy as np

from tm2nn.backends.base import Compiled
from tm2nn.verify.check import Mismatch, VerifyReport, onnx_bytes
from tm2nn.verify.trace import compare_runs, machine_tapes

#: Output floats held at once by a runner (the states of a batch of grids).
BATCH_FLOATS = 1 << 26


class GridModel:
    """The compiled model's encodings, for encoding inputs and decoding outputs."""

    def __init__(self, compiled: Compiled) -> None:
        self._setup(compiled.source, compiled.input_encoding, compiled.output_encoding)

    @classmethod
    def from_metadata(cls, enc_in: dict, enc_out: dict) -> "GridModel":
        """From a saved model's encodings: the machine is rebuilt from its text."""
        from tm2nn.errors import Tm2nnError
        from tm2nn.syntax import parse_text

        if "machine" not in enc_in:
            raise Tm2nnError("this RCNN model's metadata does not hold its machine (written by an older "
                             "tm2nn): compile it again")
        gm = cls.__new__(cls)
        gm._setup(parse_text(enc_in["machine"], "tm", "<model metadata>")[0], enc_in, enc_out)
        return gm

    def _setup(self, source, enc: dict, enc_out: dict) -> None:
        from tm2nn.backends.rcnn import machine_form

        self.source = source
        self.chain, self.code = machine_form(source, enc)
        self.window = tuple(enc["window"])
        self.steps = int(enc_out["source_steps"])
        self.filter_steps = int(enc_out["filter_steps"])
        self.max_input = int(enc["max_input"])

    def batch(self) -> int:
        _top, _left, h, w = self.window
        return max(1, BATCH_FLOATS // ((self.filter_steps + 1) * h * w))

    def grids(self, texts: list[str]) -> np.ndarray:
        from tm2nn.backends.rcnn.machine_io import start_grids
        from tm2nn.errors import Tm2nnError

        long = [t for t in texts if len(t) > self.max_input]
        if long:
            raise Tm2nnError(f"input {long[0]!r} is longer than the compiled bound of {self.max_input} cells "
                             "(compile with a larger --max-input)")
        return start_grids(self.chain, self.code, texts, self.window)

    def decode(self, states: np.ndarray, text: str):
        from tm2nn.backends.rcnn.machine_io import decode_run

        return decode_run(self.chain, self.code, self.window, states, text, self.steps)


def runners(compiled: Compiled, use_onnx: bool, batch: int):
    """(engine, run(grids) -> states) for torch and, optionally, onnxruntime."""
    from tm2nn.emit.torch_emit import run_torch, to_torch

    module = to_torch(compiled.net)
    yield "torch", lambda x: run_torch(module, x, batch_size=batch)
    if use_onnx:
        from tm2nn.emit.onnx_emit import run_onnx

        blob = onnx_bytes(compiled)
        yield "onnxruntime", lambda x: run_onnx(blob, x, batch_size=batch)


def verify_grid(compiled: Compiled, inputs, samples: int, seed, use_onnx: bool) -> VerifyReport:
    from tm2nn.backends.rcnn.machine_io import max_deviation
    from tm2nn.errors import Tm2nnError
    from tm2nn.interp import run_machine

    gm = GridModel(compiled)
    m = compiled.source
    if inputs is not None:
        xs, mode = list(inputs), "given"
    else:
        xs, mode, seed = machine_tapes(m.alphabet, gm.max_input, samples, seed)
    x = gm.grids(xs)
    rep = VerifyReport(compiled.backend, mode, len(xs), seed)
    want = [run_machine(m, t, gm.steps, trace=True) for t in xs]
    for name, run in runners(compiled, use_onnx, gm.batch()):
        states = run(x)
        rep.max_deviation[name] = max_deviation(states, gm.code.n_digits) / 3 ** (gm.code.n_digits - 1)
        bad = 0
        for text, s, w in zip(xs, states, want):
            try:
                d = compare_runs(w, gm.decode(s, text))
            except Tm2nnError as e:
                d = (None, "encoding", "a B.1.1 grid", str(e))
            if d is not None:
                bad += 1
                if rep.first is None:
                    rep.first = Mismatch(name, text, d[1], d[2], d[3], step=d[0])
        rep.engines[name] = bad
    return rep


def run_grid(compiled: Compiled, text: str, engine: str = "torch") -> dict:
    """One input through a machine-mode model; the source machine's run report."""
    gm = GridModel(compiled)
    run = dict(runners(compiled, engine != "torch", 1))["torch" if engine == "torch" else "onnxruntime"]
    return gm.decode(np.asarray(run(gm.grids([text])))[0], text).report()
