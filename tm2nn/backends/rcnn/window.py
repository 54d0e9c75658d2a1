"""The part of the grid a run can touch, so the RCNN's grid can be finite.

Goel et al.'s filter sees cells outside the grid as padding (B.2, p = 1/6), so the grid
must contain every cell the head can reach within the step bound, plus the input.  We
bound the reachable rows and columns separately by a reachability search over
``(state, offset)`` pairs that ignores the tape (every rule of a state is assumed
possible): sound, and tight for the normal form, whose only vertical moves are the
preamble's one step down and back up (:mod:`tm2nn.passes.grid_normal_form`).
"""

from __future__ import annotations

from tm2nn.ir.machine import Machine

_DELTA = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1), "S": (0, 0)}


def _reach(m: Machine, steps: int, axis: int) -> tuple[int, int]:
    """(lowest, highest) head offset along ``axis`` (0 rows, 1 columns) within ``steps``."""
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
                if item not in seen:
                    seen.add(item)
                    nxt.add(item)
                    lo, hi = min(lo, off + d), max(hi, off + d)
        if not nxt:
            break
        frontier = nxt
    return lo, hi


def head_window(m: Machine, steps: int, input_len: int) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` in grid coordinates (the start cell is (0, 0) and
    the input lies on row 0 from column 0): every cell the head can reach in ``steps``
    steps, and the input."""
    r0, r1 = _reach(m, steps, 0)
    c0, c1 = _reach(m, steps, 1)
    c1 = max(c1, input_len - 1)
    return r0, c0, r1 - r0 + 1, c1 - c0 + 1
