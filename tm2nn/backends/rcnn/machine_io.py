"""Machine mode of the RCNN backend: input strings to start grids, and the grids after
every filter step back to the source machine's run.

The machine is brought to Goel et al.'s B.1.2 form by :func:`tm2nn.passes.rcnn_form.to_rcnn_form`
(a ``Chain`` of lowerings).  A start grid is the lowered input written on row 0 of the
window (:mod:`.window`), the head on (0, 0) in the start state, every cell in the
compute phase (issue 5: "the input tape is written into the grid as after
memorization, the compute phase starts"), as B.1.1 cell values.  One application of
the filter is one step of the lowered machine (B.2, f̄_TM).  Start grids are made in the
net's float type (float32, or float64 past 12 digits: :func:`.filter_net.net_dtype`).
Decoding (:mod:`.trace_decode`, streamed and vectorised) reads every grid's digits back (:func:`~.encoding.from_value` within the
filter's input tolerance, :func:`.trace_decode.value_tolerance`, since a float network may be an ulp
off), stops at the lowered machine's halt, and maps the lowered run back through the
chain, so reports are the source machine's (ARCHITECTURE.md).
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.rcnn.encoding import CellCode
from tm2nn.backends.rcnn.plain_tables import fill_start_grids, start_grid_table
from tm2nn.backends.rcnn.trace_decode import decode_grids
from tm2nn.interp.machine import RunResult


def start_grids(chain, code: CellCode, texts: list[str], window, dtype=np.float32) -> np.ndarray:
    """``[B, H, W]`` cell values: each lowered input on row 0, head on (0, 0), compute
    phase; made from the model's start-grid table (:func:`.plain_tables.start_grid_table`),
    the one a plain script reads from the metadata."""
    for text in texts:
        chain.lower_input(text)  # each pass's located error for a bad input
    table = start_grid_table(chain, code, window)
    return fill_start_grids(table, texts, code.n_digits, dtype)


def decode_run(chain, code: CellCode, window, grids: np.ndarray, text: str, steps: int) -> RunResult:
    """``grids`` ``[L+1, H, W]`` (the state before and after each filter step) for input
    ``text`` -> the source machine's run (with trace), cut at ``steps`` source steps
    (:class:`.trace_decode.TraceDecoder`, in blocks).  Raises
    :class:`~tm2nn.errors.Tm2nnError` naming the step of a grid that is not a valid cell
    code, or of the start grid if it has no head.

    The run read back ends at the lowered machine's halt, or at the first grid without a
    head: the window (:mod:`.window`) holds every cell of the first ``steps`` source
    steps, but a machine that has not halted by then goes on for the rest of the L
    filter steps and may walk off it.  A head lost earlier shows as a run shorter than
    the interpreter's, which the comparison reports."""
    return decode_grids(chain, code, window, grids).result(text, steps)
