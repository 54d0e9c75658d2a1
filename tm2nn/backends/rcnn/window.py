"""The part of the grid a run can touch, so the RCNN's grid can be finite.

Goel et al.'s filter sees cells outside the grid as padding (B.2, p = 1/6), so the grid
must contain every cell the head can reach within the step bound, plus the input.  We
bound the reachable rows and columns separately by a reachability search over
``(state, offset)`` pairs that ignores the tape (every rule of a state is assumed
possible): sound, and tight for the normal form's rows, whose only vertical moves are
the preamble's one step down and back up (:mod:`tm2nn.passes.grid_normal_form`).

Columns are bounded a second way, through the chain of lowerings: within ``N`` steps
the source machine keeps its head and every non-blank cell in ``[-N, max(N, n − 1)]``
(its head starts at 0, an input of ``n`` cells), and each pass maps such a span to the
lowered machine's (:meth:`~tm2nn.passes.lowering.Lowering.lowered_columns`).  The
search alone is ±L columns for L lowered steps, while a source step takes up to
``3w − 2`` lowered steps (binarisation) and the normal form's cleanup another ``~5N``;
the chain's bound is ``~2wN``.  The window is the intersection of the two bounds.
"""

from __future__ import annotations

from tm2nn.ir.machine import Machine

#: Skip the column search when it could visit more (state, column) pairs than this.
SEARCH_MAX = 1_000_000

_DELTA = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1), "S": (0, 0)}


def _reach(m: Machine, steps: int, axis: int, clip: tuple[int, int] | None = None) -> tuple[int, int]:
    """(lowest, highest) head offset along ``axis`` (0 rows, 1 columns) within ``steps``.
    ``clip``, a sound bound on the offsets, drops pairs outside it, so the search ends
    once every reachable pair inside is seen (at most ``|Q|·width`` pairs)."""
    moves: dict[str, set[int]] = {}
    for r in m.rules:
        moves.setdefault(r.state, set()).add((r.next, _DELTA[r.move][axis]))
    frontier = {(m.start, 0)}
    seen = set(frontier)
    lo = hi = 0
    for _ in range(steps):
        nxt = set()
        for q, off in frontier:
            for q2, d in moves.get(q, ()):
                item = (q2, off + d)
                if item not in seen and (clip is None or clip[0] <= off + d <= clip[1]):
                    seen.add(item)
                    nxt.add(item)
                    lo, hi = min(lo, off + d), max(hi, off + d)
        if not nxt:
            break
        frontier = nxt
    return lo, hi


def head_window(m: Machine, steps: int, input_len: int,
                columns: tuple[int, int] | None = None) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` in grid coordinates (the start cell is (0, 0) and
    the input lies on row 0 from column 0): every cell the head can reach in ``steps``
    steps, and the input.  ``columns``, another sound bound on the columns (module
    docstring), narrows it."""
    r0, r1 = _reach(m, steps, 0)
    if columns is not None and len(m.states) * (columns[1] - columns[0] + 1) > SEARCH_MAX:
        c0, c1 = columns  # too wide to search; the chain's bound alone is sound
    else:
        c0, c1 = _reach(m, steps, 1, columns)
    c1 = max(c1, input_len - 1)
    return r0, c0, r1 - r0 + 1, c1 - c0 + 1


def source_columns(source_steps: int, input_len: int) -> tuple[int, int]:
    """Columns a line (or one-row grid) machine can touch in ``source_steps`` steps on an
    input of ``input_len`` cells: its head starts on column 0 and moves one cell a step."""
    return -source_steps, max(source_steps, input_len - 1)
