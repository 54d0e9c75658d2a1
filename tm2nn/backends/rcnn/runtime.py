"""Run an RCNN machine-mode model (:mod:`.machine_mode`): start grids in (each input
written as after memorization, Goel et al. B.1.1), and the grid after every filter step
out, decoded into the source machine's run (state, head, every cell) by
:func:`.machine_io.decode_run`.  The backend's codec: :func:`encode` and :func:`run`; its
``configurations`` analysis (every step decoded, for space-time pictures).

The functions that take a compiled model get the user's handle (duck-typed: ``.source``,
the encodings, ``.runner(engine)``, ``.module()``)."""

from __future__ import annotations

import numpy as np

from tm2nn.backends.protocol import Model
from tm2nn.backends.rcnn.machine_io import decode_run, start_grids
from tm2nn.backends.rcnn.machine_mode import machine_form
from tm2nn.backends.rcnn.trace_decode import TraceDecoder, feed_blocks
from tm2nn.errors import Tm2nnError
from tm2nn.interp import configurations as run_configurations
from tm2nn.interrupt import Interrupted, partial_reports
from tm2nn.ir.machine import check_input
from tm2nn.limits import check_memory
from tm2nn.options import OptionError
from tm2nn.report import Report

#: Output floats held at once by a runner (the states of a batch of grids).
BATCH_FLOATS = 1 << 26


class GridModel:
    """The compiled model's encodings, for encoding inputs and decoding outputs."""

    def __init__(self, compiled: Model) -> None:
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
        long = [t for t in texts if len(t) > self.max_input]
        if long:
            raise OptionError(f"input {long[0]!r} is longer than the compiled bound of {self.max_input} cells "
                              "(compile with a larger {max_input})", "max_input")
        return start_grids(self.chain, self.code, texts, self.window, self.dtype)

    def decode(self, states: np.ndarray, text: str):
        return decode_run(self.chain, self.code, self.window, states, text, self.steps)

    def decoders(self, run, texts: list[str], progress=None) -> list[TraceDecoder]:
        """Each input's :class:`~.trace_decode.TraceDecoder`, fed every state of its run by
        the runner ``run``: streamed block by block when the runner streams (the fused
        engine: memory for one block whatever L), else from the whole scan the runner
        returns (torch, onnxruntime: ``[n, L + 1, H, W]``, the net's output, checked
        against the memory limit first)."""
        x = self.grids(texts)
        decs = [TraceDecoder(self.chain, self.code, self.window) for _ in texts]
        stream = getattr(run, "stream", None)
        try:
            if stream is not None:
                for _k, block in stream(x, progress):
                    for d, b in zip(decs, block):
                        d.feed(b)
                return decs
            _top, _left, h, w = self.window
            batch = min(len(texts), self.batch())
            check_memory(2 * batch * (self.filter_steps + 1) * h * w * self.dtype.itemsize,
                         f"the states of {batch} grid(s) of {h}x{w} cells over {self.filter_steps:,} filter steps "
                         "(the net's output, and its copy)", ("steps", "max_input"))
            for d, s in zip(decs, run(x, batch_size=self.batch())):
                feed_blocks(d, np.asarray(s))
        except Interrupted as e:  # a streamed run: what was decoded so far
            if e.partial is None and e.reports is None:
                e.reports = [_partial(d, t, self.steps) for d, t in zip(decs, texts)]
            raise
        return decs


def _partial(dec: TraceDecoder, text: str, steps: int):
    """The report of the steps ``dec`` decoded before a Ctrl-C (None when they do not map
    back: a run stopped in the middle of a source step)."""
    try:
        return Report.of_run(dec.result(text, steps))
    except (Tm2nnError, ValueError):
        return None


def run_grids(compiled: Model, texts: list[str], engine: str = "torch", progress=None) -> list:
    """The source machine's decoded runs (RunResults with traces) of ``texts``;
    ``progress(i, L)`` follows the filter steps (torch and the fused engine)."""
    gm = GridModel(compiled)
    run = compiled.runner(engine)
    if engine == "fused":
        decs = gm.decoders(run, texts, progress)
    else:
        from tm2nn.emit.torch_emit import loop_progress  # loads torch

        with loop_progress(compiled.module() if engine == "torch" else None, progress):
            decs = gm.decoders(run, texts)
    return [d.result(t, gm.steps) for d, t in zip(decs, texts)]


def encode(compiled: Model, texts: list[str]) -> np.ndarray:
    """Start grids ``[n, H, W]``: each input written as after memorization (B.1.1 cells)."""
    for t in texts:
        check_input(compiled.source, t)
    return GridModel(compiled).grids(texts)


def run(compiled: Model, texts: list[str], engine: str, progress=None) -> list[Report]:
    """One run report each: the grids decoded and mapped back to the source machine (a
    Ctrl-C reports the steps decoded so far)."""
    for t in texts:
        check_input(compiled.source, t)
    gm = GridModel(compiled)
    with partial_reports(texts, lambda states, t: Report.of_run(gm.decode(states, t))):  # Ctrl-C
        return [Report.of_run(r) for r in run_grids(compiled, texts, engine, progress)]


def configurations(compiled: Model, text: str, engine: str = "torch") -> list:
    """Every step's ``(state, head, non-blank cells)`` decoded from the network's grids
    (the ``configurations`` analysis: space-time pictures)."""
    r = run(compiled, [text], engine)[0]
    # run_configurations() updates one dict in place: copy it per step
    return [(q, head, dict(cells)) for _k, q, head, cells in run_configurations(r.run)]
