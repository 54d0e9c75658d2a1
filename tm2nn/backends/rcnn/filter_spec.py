"""The filter of Goel et al., App. B.2, as a plain numpy reference: ``f̄_Conv2D`` on 3×3
patches, computed exactly on packed base-3 integers, and the Jacobian B.2 prescribes.

**Patches.**  A patch is ``int64 [N, 3, 3]`` of packed cells (``N = a·3^{D-1}``, see
:mod:`.encoding`), row-major: ``patch[:, 1 + i, 1 + j]`` is the paper's ``x_{i,j}``
(``i`` down, ``j`` right).  The filter window's padding ``p = 1/6`` (B.2: "outside our bit
representation") is the sentinel :data:`P`; it has no digits, so every test of a digit of
``p`` (``val(p, k) = …``) is false and only ``x = p`` is true.  :func:`patch_values`
turns patches into the floats the network reads (``p`` -> 1/6).  A centre is never ``p``.

**The function** (B.2), by the phase digit of the centre ``x00``:

* ``val(x00, 2) = 0`` (unknown): ``f̄_msg``, its five cases in the paper's order (the
  first that holds wins);
* ``val(x00, 2) = 1`` (compute): ``f̄_TM``, its six cases in the paper's order (head on
  the centre, below, above, right, left, none);
* ``val(x00, 2) = −1`` (memorize): the identity.

The output is a packed cell (int64 [N]); all arithmetic is on integers, so it is exact.

**Decisions where the paper is inconsistent** (docs/rcnn.md, "The filter", gives the
reasons):

1. ``f̄_msg`` adds ``−3^{-2}`` (memory phase); Lemma 3's proof writing ``3^{-2}`` is a typo.
2. ``f̄_TM``'s "head on the right" case uses ``γ(x_{0,1})[0]``, not ``γ(x_{-1,0})[0]``.
3. The head-placing case keeps ``x_{0,1} = 1`` literally (the right neighbour is a fresh
   working-tape cell, value exactly 1) with ``x_{1,0} = p``: the head goes to the bottom
   *right* input cell ``(m+1, d+1)``, as B.3 says; Figure 3's "left-bottom" is wrong.
4. ``γ`` of a halting state, or of a pair without a rule, is ``(q, a, ×)``: the head
   stays and rewrites its own symbol, so a halted grid is a fixed point.
5. The "is head?" tests read digit 3 only; a head cell's state digits are decoded with the
   machine's :class:`~tm2nn.backends.rcnn.encoding.CellCode` (start state all 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.backends.rcnn.encoding import (
    HEAD,
    PHASE,
    STATE,
    SYMBOL,
    CellCode,
    cell_code,
    pack,
    unpack,
)
from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import GridMachine

#: The padding ``p = 1/6`` of B.2 in a packed patch (no cell packs to this).
P = np.int64(np.iinfo(np.int64).min)
P_VALUE = 1.0 / 6.0
#: Moves as small ints: stay (×), up (↑), down (↓), left (←), right (→).
STAY, UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3, 4
MOVE_CODE = {"S": STAY, "U": UP, "D": DOWN, "L": LEFT, "R": RIGHT}
#: Patch offsets (row, col) of the centre and the four neighbours B.2 reads.
CENTER, ABOVE, BELOW, LEFT_OF, RIGHT_OF = (1, 1), (0, 1), (2, 1), (1, 0), (1, 2)
#: The neighbours, each with the move that brings a head there onto the centre
#: (B.2, f̄_TM: head below moving ↑, above moving ↓, on the right moving ←, on the left →).
NEIGHBOURS = {"u": (ABOVE, DOWN), "d": (BELOW, UP), "l": (LEFT_OF, RIGHT), "r": (RIGHT_OF, LEFT)}
#: ``vec(z)`` is row-major: index ``3·(i+1) + (j+1)`` is ``x_{i,j}``; 4 is the centre.
VEC_LABELS = tuple(f"x[{i:+d},{j:+d}]" for i in (-1, 0, 1) for j in (-1, 0, 1))


@dataclass(frozen=True)
class MachineTable:
    """``γ(x) = δ(state(x), val(x, 1))`` of B.2 as arrays, for a machine in B.1.2 form.

    ``next_state``, ``write`` (−1, 0, 1) and ``move`` (:data:`MOVE_CODE`) are indexed by
    ``[state index, symbol + 1]``; ``state_packed[q]`` is state ``q``'s digits packed at
    digits ``4 …`` of a cell (``Σ_j code_j·3^{D-5-j}``, 0 for the start state)."""

    code: CellCode
    next_state: np.ndarray
    write: np.ndarray
    move: np.ndarray
    state_packed: np.ndarray

    @property
    def n_digits(self) -> int:
        return self.code.n_digits

    @property
    def n_states(self) -> int:
        return len(self.code.states)

    def state_index(self, digits: np.ndarray) -> np.ndarray:
        """State digits ``[..., S]`` -> state indices; −1 where they name no state."""
        S = self.code.n_state_digits
        D = self.n_digits
        w = 3 ** np.arange(D - 5, D - 5 - S, -1, dtype=np.int64)
        key = (digits.astype(np.int64) * w).sum(-1)
        order = np.argsort(self.state_packed, kind="stable")
        srt = self.state_packed[order]
        i = np.clip(np.searchsorted(srt, key), 0, len(srt) - 1)
        return np.where(srt[i] == key, order[i], -1)


def machine_table(m: GridMachine) -> MachineTable:
    """Goel et al., B.2 (``γ``) and B.1.2: the transition table of ``m`` (symbols ``_ - +``,
    see :func:`tm2nn.passes.rcnn_form.to_rcnn_form`) in the cell code of B.1.1.  A halting
    state or a pair without a rule maps to ``(q, a, ×)`` (decision 4)."""
    if not isinstance(m, GridMachine):
        raise Tm2nnError(f"machine {m.name!r}: the RCNN filter runs grid machines (B.1.2); "
                         "lower it with tm2nn.passes.rcnn_form.to_rcnn_form")
    code = cell_code(m)
    s = len(m.states)
    D = code.n_digits
    next_state = np.repeat(np.arange(s, dtype=np.int64)[:, None], 3, axis=1)
    write = np.repeat(np.array([[-1, 0, 1]], dtype=np.int8), s, axis=0)
    move = np.zeros((s, 3), dtype=np.int8)
    for r in m.rules:
        q, a = m.state_index[r.state], code.symbol_value(r.read) + 1
        next_state[q, a] = m.state_index[r.next]
        write[q, a] = code.symbol_value(r.write)
        move[q, a] = MOVE_CODE[r.move]
    w = 3 ** np.arange(D - 5, D - 5 - code.n_state_digits, -1, dtype=np.int64)
    state_packed = (code.table.astype(np.int64) * w).sum(-1)
    return MachineTable(code, next_state, write, move, state_packed)


# -- patches ---------------------------------------------------------------------------------
def check_patches(patches, n_digits: int) -> np.ndarray:
    """``int64 [N, 3, 3]`` packed patches (with :data:`P`), checked."""
    x = np.asarray(patches)
    if x.ndim != 3 or x.shape[1:] != (3, 3) or x.dtype != np.int64:
        raise Tm2nnError(f"patches must be int64 [N, 3, 3], got {x.dtype} {x.shape}")
    top = (3 ** n_digits - 1) // 2
    bad = (x != P) & (np.abs(x) > top)
    if bad.any():
        raise Tm2nnError(f"patch {int(np.argmax(bad.any((1, 2))))}: a cell is outside the "
                         f"{n_digits}-digit code")
    if (x[:, 1, 1] == P).any():
        raise Tm2nnError("a patch centre is the padding p")
    return x


def patches_from_digits(digits, pad) -> np.ndarray:
    """Digits ``int8 [N, 3, 3, D]`` and a padding mask ``bool [N, 3, 3]`` -> packed patches."""

    return np.where(np.asarray(pad, dtype=bool), P, pack(digits))


def grid_patches(grid) -> np.ndarray:
    """Goel et al., B.3 (``grid(X, i, j)``): every 3×3 window of packed grids ``[B, H, W]``,
    padded with ``p`` at the edges -> ``[B, H, W, 3, 3]`` (a strided view, no copy)."""
    g = np.asarray(grid, dtype=np.int64)
    if g.ndim != 3:
        raise Tm2nnError(f"grids must be [batch, rows, cols], got shape {g.shape}")
    padded = np.pad(g, ((0, 0), (1, 1), (1, 1)), constant_values=P)
    return np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))


def patch_values(patches, n_digits: int, dtype=np.float64) -> np.ndarray:
    """Packed patches ``[..., 3, 3]`` -> the network's input ``vec(z)``, ``[..., 9]``: each
    cell's value ``N/3^{D-1}`` (nearest float of ``dtype``), ``p`` -> 1/6."""
    x = np.asarray(patches, dtype=np.int64)
    pad = x == P
    v = np.where(pad, 0, x).astype(np.float64) / float(3 ** (n_digits - 1))
    v = np.where(pad, P_VALUE, v).astype(dtype)
    return v.reshape(x.shape[:-2] + (9,))


# -- the function ----------------------------------------------------------------------------
class _Cells:
    """Digit views of one patch position, with the padding tests of decision "p has no
    digits" folded in (every digit test on p is False)."""

    def __init__(self, packed: np.ndarray, digits: np.ndarray):
        self.packed = packed
        self.pad = packed == P
        self.sym = np.where(self.pad, 9, digits[..., SYMBOL])
        self.phase = np.where(self.pad, 9, digits[..., PHASE])
        self.head = ~self.pad & (digits[..., HEAD] == 1)
        self.state_digits = digits[..., STATE:]


def _split(patches: np.ndarray, D: int) -> dict[tuple[int, int], _Cells]:
    safe = np.where(patches == P, 0, patches)
    digits = unpack(safe, D)
    return {pos: _Cells(patches[:, pos[0], pos[1]], digits[:, pos[0], pos[1]])
            for pos in (CENTER, ABOVE, BELOW, LEFT_OF, RIGHT_OF)}


def gamma(cells: _Cells, table: MachineTable, where: np.ndarray):
    """``γ(x)`` for the cells selected by ``where`` (which must be head cells): arrays
    ``(next state, written symbol, move)``; zeros elsewhere."""
    n = len(cells.packed)
    nxt = np.zeros(n, dtype=np.int64)
    wr = np.zeros(n, dtype=np.int64)
    mv = np.zeros(n, dtype=np.int64)
    i = np.nonzero(where)[0]
    if len(i):
        q = table.state_index(cells.state_digits[i])
        if (q < 0).any():
            k = i[int(np.argmax(q < 0))]
            raise Tm2nnError(f"patch {k}: a head cell's state digits "
                             f"{cells.state_digits[k].tolist()} name no state")
        a = cells.sym[i] + 1
        nxt[i] = table.next_state[q, a]
        wr[i] = table.write[q, a]
        mv[i] = table.move[q, a]
    return nxt, wr, mv


def f_msg_cases(patches: np.ndarray, D: int) -> np.ndarray:
    """Goel et al., B.2, ``f̄_msg``: which of its cases 1–5 applies to each patch (the first
    that holds), as int [N].  Meaningful where the centre's phase is unknown."""
    x = _split(patches, D)
    c, u, dn, r = x[CENTER], x[ABOVE], x[BELOW], x[RIGHT_OF]
    one = 3 ** (D - 1)  # the value 1: a fresh working-tape cell
    m1 = (c.packed == 0) & (u.pad | (~u.pad & (u.sym != 0)))
    m2 = (u.phase == -1) | (dn.phase == -1)
    m3 = (c.sym != 0) & (r.packed == one) & dn.pad
    m4 = np.zeros_like(m1)
    for pos in (ABOVE, BELOW, LEFT_OF, RIGHT_OF):
        m4 |= x[pos].phase == 1
    return np.select([m1, m2, m3, m4], [1, 2, 3, 4], 5)


def f_conv(patches, table: MachineTable) -> np.ndarray:
    """Goel et al., B.2: ``f̄_Conv2D`` on packed patches ``int64 [N, 3, 3]`` -> packed
    cells ``int64 [N]`` (module docstring for the cases and the decisions)."""
    D = table.n_digits
    x = check_patches(patches, D)
    n = len(x)
    cells = _split(x, D)
    c = cells[CENTER]
    t1, t2, t3 = 3 ** (D - 2), 3 ** (D - 3), 3 ** (D - 4)
    out = c.packed.copy()

    # f̄_msg (phase unknown)
    unk = c.phase == 0
    case = f_msg_cases(x, D)
    out = np.where(unk & ((case == 1) | (case == 2)), -t2, out)
    out = np.where(unk & (case == 3), c.packed + t2 + t3, out)
    out = np.where(unk & (case == 4), c.packed + t2, out)

    # f̄_TM (compute phase), the cases in the paper's order
    cmp_ = c.phase == 1
    done = np.zeros(n, dtype=bool)
    sel = cmp_ & c.head
    nxt, wr, mv = gamma(c, table, sel)
    head_out = wr * t1 + t2 + np.where(mv == STAY, t3 + table.state_packed[nxt], 0)
    out = np.where(sel, head_out, out)
    done |= sel
    for name in ("d", "u", "r", "l"):  # below, above, right, left (B.2's order)
        pos, toward = NEIGHBOURS[name]
        nb = cells[pos]
        sel = cmp_ & ~done & nb.head
        nxt, _wr, mv = gamma(nb, table, sel)
        moved = sel & (mv == toward)
        out = np.where(moved, c.packed + t3 + table.state_packed[nxt], out)
        done |= sel
    # phase −1 (memorize): the identity — out already holds x00
    return out


def jacobian(patches, n_digits: int) -> np.ndarray:
    """Goel et al., B.2: ``∇_{x_{i,j}} f̄_Conv2D`` as ``float64 [N, 9]`` (``vec(z)``
    row-major, centre at 4): 1 on the centre when its phase is memorize, or unknown with
    ``x00 = 0`` and (``x_{-1,0} = p`` or ``val(x_{-1,0}, 1) ≠ 0``); 0 everywhere else."""
    x = check_patches(patches, n_digits)
    c = _split(x, n_digits)[CENTER]
    case1 = f_msg_cases(x, n_digits) == 1
    g = np.zeros((len(x), 9))
    g[:, 4] = ((c.phase == -1) | ((c.phase == 0) & case1)).astype(np.float64)
    return g


# -- whole grids -----------------------------------------------------------------------------
def conv_layer(grid, table: MachineTable) -> np.ndarray:
    """Goel et al., B.3: ``f̄_ConvLayer`` — ``f̄_Conv2D`` at every cell of packed grids
    ``[B, H, W]`` (padding ``p`` at the edges), vectorised."""
    g = np.asarray(grid, dtype=np.int64)
    pt = grid_patches(g).reshape(-1, 3, 3)
    return f_conv(pt, table).reshape(g.shape)


def run_filter(grid, table: MachineTable, steps: int) -> np.ndarray:
    """``steps`` applications of :func:`conv_layer`: ``int64 [steps + 1, B, H, W]``."""
    g = np.asarray(grid, dtype=np.int64)
    out = np.empty((steps + 1,) + g.shape, dtype=np.int64)
    out[0] = g
    for k in range(steps):
        out[k + 1] = conv_layer(out[k], table)
    return out
