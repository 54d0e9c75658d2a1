"""Machine mode of the RCNN backend: input strings to start grids, and the grids after
every filter step back to the source machine's run.

The machine is brought to Goel et al.'s B.1.2 form by :func:`tm2nn.passes.rcnn_form.to_rcnn_form`
(a ``Chain`` of lowerings).  A start grid is the lowered input written on row 0 of the
window (:mod:`.window`), the head on (0, 0) in the start state, every cell in the
compute phase (issue 5: "the input tape is written into the grid as after
memorization, the compute phase starts"), as B.1.1 cell values.  One application of
the filter is one step of the lowered machine (B.2, f̄_TM).  Start grids are made in the
net's float type (float32, or float64 past 12 digits: :func:`.filter_net.net_dtype`).
Decoding reads every grid's digits back (:func:`~.encoding.from_value` within the
filter's input tolerance, :func:`value_tolerance`, since a float network may be an ulp
off), stops at the lowered machine's halt, and maps the lowered run back through the
chain, so reports are the source machine's (ARCHITECTURE.md).
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.rcnn.encoding import (
    CellCode,
    configs_from_grids,
    from_value,
    unpack,
)
from tm2nn.backends.rcnn.filter_net import bump_grid
from tm2nn.backends.rcnn.plain_tables import fill_start_grids, start_grid_table
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import RunResult
from tm2nn.passes.lowering import result_from_configurations

#: A decoded cell may be off by at most this many units of the last digit (an upper bound:
#: :func:`value_tolerance` is the one decoding uses).
VALUE_TOL = 0.25


def value_tolerance(n_digits: int) -> float:
    """How far, in units of the last digit ``h = 3^{-(D-1)}``, a network's cell may be
    from its B.1.1 value and still decode: the filter's own input tolerance ``1.5 g``
    (Goel et al., B.2, as built in :mod:`.filter_net`: within it the next step's hidden
    units are exactly the exact input's), ``1.5 g / h`` in [0.047, 0.094].  The same in
    float32 (D <= 12) and float64 (D <= 30): the dtype is chosen so that the net's error
    (a few ulp) stays inside it; a grid that decodes is one the net goes on with exactly."""
    return min(VALUE_TOL, 1.5 * float(bump_grid(n_digits)) * float(3 ** (n_digits - 1)))


def start_grids(chain, code: CellCode, texts: list[str], window, dtype=np.float32) -> np.ndarray:
    """``[B, H, W]`` cell values: each lowered input on row 0, head on (0, 0), compute
    phase; made from the model's start-grid table (:func:`.plain_tables.start_grid_table`),
    the one a plain script reads from the metadata."""
    for text in texts:
        chain.lower_input(text)  # each pass's located error for a bad input
    table = start_grid_table(chain, code, window)
    return fill_start_grids(table, texts, code.n_digits, dtype)


def lowered_halted(g, state: str, head, cells: dict) -> bool:
    """The lowered machine stops here: a halting state, or no rule for the symbol read."""
    return state in g.halting or (state, cells.get(head, g.blank)) not in g.delta


def decode_run(chain, code: CellCode, window, grids: np.ndarray, text: str, steps: int) -> RunResult:
    """``grids`` ``[L+1, H, W]`` (the state before and after each filter step) for input
    ``text`` -> the source machine's run (with trace), cut at ``steps`` source steps.
    Raises :class:`~tm2nn.errors.Tm2nnError` naming the step of a grid that is not a
    valid cell code, or of the start grid if it has no head.

    The run read back ends at the lowered machine's halt, or at the first grid without a
    head: the window (:mod:`.window`) holds every cell of the first ``steps`` source
    steps, but a machine that has not halted by then goes on for the rest of the L
    filter steps and may walk off it.  A head lost earlier shows as a run shorter than
    the interpreter's, which the comparison reports."""
    g = chain.machine
    digits = unpack(from_value(grids, code.n_digits, tol=value_tolerance(code.n_digits)), code.n_digits)
    configs = []
    halted = False
    for k, (state, head, cells, _phase) in enumerate(configs_from_grids(code, digits, window)):
        if state is None:
            if k == 0:
                raise Tm2nnError("the start grid has no head")
            break
        configs.append((k, state, head, cells))
        if lowered_halted(g, state, head, cells):
            halted = True
            break
    lowered = result_from_configurations(g, chain.lower_input(text), configs, halted)
    return chain.source_result(lowered, max_steps=steps)


def max_deviation(grids: np.ndarray, n_digits: int) -> float:
    """Largest distance of a value from the code, in units of the last digit."""
    scaled = np.asarray(grids, dtype=np.float64) * float(3 ** (n_digits - 1))
    return float(np.max(np.abs(scaled - np.rint(scaled)), initial=0.0))
