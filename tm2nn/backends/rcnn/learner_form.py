"""Learners in Goel et al.'s B.1.2 form with the XOR input (docs/rcnn.md "Learner mode"):
the checker, the tape layout the memorized RCNN holds, the reference answer
``A(S)[x]`` by the interpreter, and a learner's sizes (:func:`size_estimate`).

A learner is a :class:`~tm2nn.ir.GridMachine` written directly in that form (no lowering:
:func:`tm2nn.passes.rcnn_form.to_rcnn_form` keeps machines on one row, and a learner must
move up and down).  :func:`check_learner_form` checks what can be checked before a run;
:func:`reference_answer` runs the interpreter on the memorized layout and checks the rest
(the run stays on the network's grid, halts within the step bound, and ends with the
answer in the top-left cell and the rest of the input region blank).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.backends.protocol import Table
from tm2nn.backends.rcnn.build import filter_for
from tm2nn.backends.rcnn.encoding import cell_code
from tm2nn.errors import OptionError, Tm2nnError
from tm2nn.interp.machine import run_machine
from tm2nn.ir import GridMachine, Machine
from tm2nn.source import error_at

SIGNS = ("-", "+")

#: What SGD can train (``tm2nn learn --sgd-on``): Algorithm 1's memory layer W, and also
#: the filter ``Θ_rc`` and the head ``Θ_head`` (their stored entries: the support).
PARTS = ("memory", "filter", "head")


def parse_parts(spec: str) -> tuple[str, ...]:
    """``"memory,filter,head"`` -> the parts, in :data:`PARTS` order; an unknown part, or
    a list without the memory layer, is an :class:`~tm2nn.errors.OptionError` on ``sgd_on``."""
    got = [p.strip() for p in str(spec).split(",")]
    bad = [p for p in got if p not in PARTS]
    if bad:
        raise OptionError(f"{{sgd_on}} is a comma-separated list of {', '.join(PARTS)}; "
                          f"{bad[0]!r} is not one", "sgd_on")
    if "memory" not in got:
        raise OptionError("{sgd_on} must include memory (Algorithm 1 trains the memory layer)", "sgd_on")
    return tuple(p for p in PARTS if p in got)


def check_learner_form(g: Machine) -> None:
    """Goel et al., B.1.2: ``g`` is a learner in the form the RCNN runs, or a
    :class:`~tm2nn.errors.Tm2nnError` at the offending declaration or rule:

    * a grid machine (moves U/D/L/R/S, "2D tape instead of 1D tape");
    * over ``_ - +`` with blank ``_`` (B.1.1 digit 1: blank 0, ±1);
    * "First step": every rule of the start state rewrites the symbol it reads and does
      not move, and the start state is not halting; it has a rule for ``+``, the symbol
      under the head at the start (the dummy example's label, B.3's ``(m+1, d+1)``);
    * no rule leads back into the start state: B.1.2 gets the no-op first step from "a
      single additional state with a path to the starting state", entered once; a
      learner that re-enters it repeats the no-op, which is almost surely a mistake.
    """
    where = g.loc
    if not isinstance(g, GridMachine):
        raise error_at(where, f"machine {g.name!r} is not a learner: B.1.2 learners run on a 2D tape "
                       "(declare 'tape: grid')")
    if g.blank != "_" or set(g.alphabet) != {"_", "-", "+"}:
        raise error_at(where, f"machine {g.name!r} is not a learner: its symbols must be _ - + with blank _ "
                       f"(B.1.1 codes a cell as blank, -1, +1); it has {' '.join(g.alphabet)} with blank {g.blank}")
    if g.start in g.halting:
        raise error_at(where, f"learner {g.name!r}: the start state {g.start!r} halts, but B.1.2's first step "
                       "is a no-op move")
    starts = [r for r in g.rules if r.state == g.start]
    for r in starts:
        if r.write != r.read or r.move != "S":
            raise error_at(r.loc or where, f"learner {g.name!r}: the first step must neither move nor write "
                           f"(B.1.2 'First step'), but this rule writes {r.write!r} and moves {r.move}")
    if not any(r.read == "+" for r in starts):
        raise error_at(where, f"learner {g.name!r}: the start state {g.start!r} has no rule for '+', the symbol "
                       "under the head at the start (the dummy example's label)")
    for r in g.rules:
        if r.next == g.start:
            raise error_at(r.loc or where, f"learner {g.name!r}: this rule goes back to the start state "
                           f"{g.start!r}; only the first step is in it (B.1.2)")


def xor_rows(X: np.ndarray, Y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Goel et al., B.1.2 "XOR input" as Lemma 4's memory layer writes it (times 3):
    ``[m+1, d+1]`` signs; row ``a < m`` is ``y⁽ᵃ⁾ (x ∘ x⁽ᵃ⁾)`` then ``y⁽ᵃ⁾`` (the cell is
    ``W_ab z_b`` with ``W_ab = y⁽ᵃ⁾x⁽ᵃ⁾_b/3``, ``W_{a,d+1} = y⁽ᵃ⁾/3``, ``z = [x, 1]``), and
    the last row is the dummy example ``(1_d, 1)``: ``x`` then ``+1``.  B.1.2 prints the
    last column as ``y⁽ⁱ⁾·y⁽ⁱ⁾``; the memory layer holds ``y⁽ⁱ⁾`` (docs/rcnn.md)."""
    X = np.asarray(X, dtype=np.int64)
    Y = np.asarray(Y, dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    rows = np.concatenate([np.concatenate([Y[:, None] * X * x[None, :], Y[:, None]], 1),
                           np.append(x, 1)[None, :]], 0)
    return rows


#: The frame f_mem writes left of the input region (docs/rcnn.md "The frame"): the
#: outer column ``+`` on the top row and blank below, the inner column blank.  The
#: values are B.1.1 cells in the unknown phase: ``+1/3`` (symbol ``+``) and ``1`` (digit 0
#: set, symbol blank: the same cell as a working column).
FRAME = 2


def frame_signs(rows: int) -> np.ndarray:
    """The frame as signs ``[rows, FRAME]``: ``+1`` for ``+``, ``0`` for blank."""
    f = np.zeros((rows, FRAME), dtype=np.int64)
    f[0, 0] = 1
    return f


def frame_values(rows: int) -> np.ndarray:
    """The frame as the memory layer writes it: ``+`` is the memorized-cell value
    ``1/3``, blank is the working-cell value ``1`` (B.1.1 digit 0)."""
    f = frame_signs(rows)
    return np.where(f > 0, 1.0 / 3.0, 1.0)


def layout_text(rows: np.ndarray) -> str:
    """The interpreter's input for the learner's grid: the frame (:data:`FRAME` columns),
    then the sign matrix ``rows``, rows joined by ``/``."""
    frame = frame_signs(len(rows))
    sym = {1: "+", -1: "-", 0: "_"}
    return "/".join("".join(sym[int(v)] for v in f) + "".join("+" if v > 0 else "-" for v in row)
                    for f, row in zip(frame, rows))


@dataclass(frozen=True)
class Shape:
    """The network's grid for ``m`` examples of ``d`` features: ``m + 1`` rows; the
    frame's :data:`FRAME` columns, ``d + 1`` input columns and ``work`` working columns
    (Def. 5's ``1_{d_mem × l}``).  Grid coordinates: the input region is columns
    ``left .. left + d``, the answer cell is ``(0, left)``, the head starts on
    ``(m, left + d)``."""

    m: int
    d: int
    work: int

    @property
    def rows(self) -> int:
        return self.m + 1

    @property
    def left(self) -> int:
        """The first input column."""
        return FRAME

    @property
    def cols(self) -> int:
        return FRAME + self.d + 1 + self.work

    @property
    def start(self) -> tuple[int, int]:
        """Where the head starts: the bottom-right input cell (B.3's ``(m+1, d+1)``)."""
        return (self.m, FRAME + self.d)


def reference_answer(g: GridMachine, X, Y, x, shape: Shape, max_steps: int) -> tuple[int, int]:
    """``(A(S)[x], steps)``: the learner run by :func:`tm2nn.interp.run_machine` on the
    memorized layout (:func:`xor_rows`, working columns blank), head on the bottom-right
    input cell (B.3).  Refuses (``Tm2nnError`` at the rule or the machine) a run that
    leaves the network's grid, does not halt within ``max_steps``, or does not end in
    B.1.2's halting position with a ±1 answer and the head on the answer cell or the
    working columns (any other head cell would change B.3's read-out)."""
    rows = xor_rows(X, Y, x)
    m, d, left = shape.m, shape.d, shape.left
    run = run_machine(g, layout_text(rows), max_steps, trace=True, start=shape.start)
    tr = run.trace
    hr = np.asarray(tr.head_row, dtype=np.int64)
    hc = np.asarray(tr.head, dtype=np.int64)
    out = np.flatnonzero((hr < 0) | (hr >= shape.rows) | (hc < 0) | (hc >= shape.cols))
    shape_note = (f"the grid is {shape.rows} x {shape.cols} (m + 1 = {m + 1} rows for m = {m} examples, "
                  f"{FRAME} frame columns, d + 1 = {d + 1} input columns for d = {d} features, "
                  f"{shape.work} working columns)")
    if out.size:
        k = int(out[0])
        rule = g.delta.get((g.states[tr.state[k - 1]] if k else g.start, g.alphabet[tr.read[k]]))
        raise error_at(getattr(rule, "loc", None) or g.loc,
                       f"learner {g.name!r} leaves the RCNN's grid at step {k + 1} (to row {hr[k]}, column "
                       f"{hc[k]}); {shape_note}. The top and bottom rows, the frame's outer column and the "
                       "last working column have the padding beyond them (give it more working columns: "
                       "the option work)")
    if not run.halted:
        raise error_at(g.loc, f"learner {g.name!r} did not halt within {max_steps} steps "
                       f"(the RCNN runs L = steps + 1 filter steps); raise the option steps")
    bad = [(r, c) for (r, c) in run.cells if r < shape.rows and left <= c <= left + d and (r, c) != (0, left)]
    ans = run.cells.get((0, left))
    if bad or ans is None:
        what = (f"cell {bad[0]} of the input region is not blank" if bad else "the top-left cell is blank")
        raise error_at(g.loc, f"learner {g.name!r} halted, but {what}: B.1.2 wants the answer (+ or -) in "
                       "the top-left cell and the rest of the input region blank")
    h = run.head
    if h != (0, left) and left <= h[1] <= left + d:
        raise error_at(g.loc, f"learner {g.name!r} halted with the head on input cell {h}: B.3's read-out "
                       f"needs it on the answer cell (0, {left}), the frame or the working columns")
    return (1 if ans == "+" else -1), run.steps


def size_estimate(ir, opts) -> Table | None:
    """``tm2nn info`` of a learner (a grid machine in B.1.2 learner form, which machine
    mode cannot lower): its learner-mode filter (B.2) and sizes against Theorem 1 and
    Definition 5, with ``opts.steps`` as the learner's step bound ``t``.  None for
    anything else (machine mode compiles it, or says why it cannot)."""
    if not isinstance(ir, GridMachine) or not any(r.move in ("U", "D") for r in ir.rules):
        return None
    try:
        check_learner_form(ir)
    except Tm2nnError:
        return None  # not a learner: machine mode says why it cannot take it
    code = cell_code(ir)
    filt = filter_for(ir, code)
    t = opts.steps
    rows = [["learner (B.1.2 form, XOR input)", f"{len(ir.states)} states, {code.n_digits} base-3 digits, "
             "the same for every (m, d)", "Theorem 1: s fixed"],
            *[list(r) for r in filt.bounds],
            ["filter steps L", f"{t + 1} for t = {t} learner steps (at least m + 2)",
             "L = c1(t + m + d) (Theorem 1)"],
            ["grid (rows x columns)", f"(m + 1) x ({FRAME} + d + 1 + work): frame, input region, working columns",
             "Def. 5: [W diag(z)  1], d_mem = m + 1"],
            ["train", "tm2nn learn FILE --train DATA.csv (Algorithm 1)", ""]]
    return Table("rcnn learner mode (Algorithm 1)", ["quantity", "this network", "paper"], rows)
