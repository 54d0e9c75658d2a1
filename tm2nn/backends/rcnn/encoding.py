"""The cell encoding of Goel et al., B.1.1: one base-3 number per grid cell.

A cell is ``a = Σ_{i=0}^{D-1} a(i)·3^{-i}`` with digits ``a(i) ∈ {-1, 0, 1}``:

=========  ==========================================================================
digit 0    padding: 1 for a cell outside the grid, else 0
digit 1    the tape symbol: blank 0, ``'-'`` −1, ``'+'`` +1
digit 2    the phase: memorization −1, computation +1, unknown 0
digit 3    the head: 1 on the head's cell, else 0
digit 4..  the state, on the head's cell only (all 0 elsewhere)
=========  ==========================================================================

**States** (B.1.2, "States").  The paper maps the states one-to-one to ±1 digit strings
"with 0 being the start state".  A string of ±1 digits is never 0, so we read this the
way B.2 uses it: when the message-passing filter places the head it adds ``3^{-3}`` to a
cell whose state digits are all 0, so the start state's digits are all 0, and every
other state gets a string of ±1.  Non-start state number ``j`` (machine order, start
left out) is ``j`` in binary, most significant digit first, 0 -> −1, 1 -> +1, with
``S = max(1, ceil(log2(s − 1)))`` state digits for ``s`` states.  (The paper's indices
``4 … log2(s) + 4`` give ``log2(s) + 1`` digits; ours is the fewest that fit and never
more.)  So ``D = 4 + S`` digits.

**Three forms, and where they are exact.**

* *digits*: ``int8 [..., D]`` — always exact; the form everything else converts from.
* *packed*: ``int64`` ``N = a·3^{D-1} = Σ a(i)·3^{D-1-i}`` — an integer,
  ``|N| ≤ (3^D − 1)/2``; exact in int64 for ``D ≤ 40`` (``S ≤ 36``).
* *value*: the float ``a`` itself.  ``a`` is a fraction with denominator ``3^{D-1}``,
  which no binary float holds exactly (1/3 is not a dyadic rational), so "exact" here
  means: the float is the nearest one to ``a`` and ``a`` (hence every digit) is read
  back by rounding ``a·3^{D-1}``.  That needs the float's rounding error (half an ulp,
  ``|a| ≤ 3/2``) below half the spacing ``3^{-(D-1)}``: **float32 up to D = 15**
  (S ≤ 11, at most 2049 states), **float64 up to D = 33** (S ≤ 29).  The packed integer
  as a float is exact up to D = 15 (float32, ``|N| < 2^24``) and D = 34 (float64).
  :func:`to_value` refuses more digits than its dtype can carry; use the digit or
  packed form then.

Padding is the digit-0 cell ``a = 1`` of B.1.1 (B.2 pads the 3×3 filter windows with
``p = 1/6`` instead, a value outside the code; that is the network's business).

Everything is vectorised over a batch of grids ``[B, H, W]``: Python loops run over the
``D`` digits only.  :func:`grids_from_configs` / :func:`configs_from_grids` convert
between machine configurations (state, head, cells) and the arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import Machine

PAD, SYMBOL, PHASE, HEAD, STATE = 0, 1, 2, 3, 4
MEMORIZE, UNKNOWN, COMPUTE = -1, 0, 1
SYMBOL_VALUE = {"-": -1, "+": 1}
#: Most digits whose packed number fits int64, and whose value form floats can carry.
MAX_DIGITS_INT64 = 40
MAX_DIGITS_VALUE = {np.dtype(np.float32): 15, np.dtype(np.float64): 33}


def state_digits(n_states: int) -> int:
    """Goel et al., B.1.1/B.1.2 ("States"): S of the module docstring; the start is all 0,
    the others need ``s − 1`` ±1 strings."""
    return max(1, math.ceil(math.log2(max(n_states - 1, 1))))


@dataclass(frozen=True)
class CellCode:
    """The B.1.1 code of one machine: its states, start and blank, and the state digits.

    ``table[i]`` is the state-digit string of ``states[i]`` (all 0 for the start)."""

    states: tuple[str, ...]
    start: str
    blank: str
    table: np.ndarray

    @property
    def n_state_digits(self) -> int:
        return self.table.shape[1]

    @property
    def n_digits(self) -> int:
        return STATE + self.n_state_digits

    def symbol_value(self, a: str) -> int:
        return 0 if a == self.blank else SYMBOL_VALUE[a]

    def value_symbol(self, v: int) -> str:
        return self.blank if v == 0 else ("-" if v < 0 else "+")

    def to_json(self) -> dict:
        return {"states": list(self.states), "start": self.start, "blank": self.blank,
                "state_digits": self.n_state_digits}


def cell_code(m: Machine) -> CellCode:
    """Goel et al., B.1.1 and B.1.2 ("States"): the cell code of ``m``, whose symbols must
    be its blank, ``'-'`` and ``'+'`` (lower other machines with
    :func:`tm2nn.passes.binarise.binarise`)."""
    if m.blank in SYMBOL_VALUE:
        raise Tm2nnError(f"machine {m.name!r}: the blank {m.blank!r} must not be '-' or '+' "
                         "(B.1.1 codes the blank as 0 and '-' '+' as -1 +1)")
    other = [a for a in m.alphabet if a != m.blank and a not in SYMBOL_VALUE]
    if other:
        raise Tm2nnError(f"machine {m.name!r}: B.1.1 codes a cell as blank, -1 or +1, but the "
                         f"machine has the symbols {' '.join(repr(a) for a in other)}; lower it "
                         "with tm2nn.passes.binarise first")
    s = len(m.states)
    k = state_digits(s)
    table = np.zeros((s, k), dtype=np.int8)
    others = [i for i, q in enumerate(m.states) if q != m.start]
    if others:
        j = np.arange(len(others))
        bits = (j[:, None] >> np.arange(k - 1, -1, -1)[None, :]) & 1
        table[others] = (2 * bits - 1).astype(np.int8)
    return CellCode(tuple(m.states), m.start, m.blank, table)


class Grids(NamedTuple):
    """A batch of grid configurations.  ``sym``: int8 [B, H, W] tape digits; ``head``:
    int64 [B, 2] (row, col) in the grid, (−1, −1) for none; ``state``: int64 [B] state
    index, −1 without a head; ``phase``: int8 [B, H, W]; ``pad``: bool [B, H, W]."""

    sym: np.ndarray
    head: np.ndarray
    state: np.ndarray
    phase: np.ndarray
    pad: np.ndarray


def encode(code: CellCode, sym, head, state, phase=COMPUTE, pad=None) -> np.ndarray:
    """Goel et al., B.1.1: a batch of grids -> digits ``int8 [B, H, W, D]``.

    ``sym`` [B, H, W] tape digits (−1, 0, 1); ``head`` [B, 2] (a row (−1, −1): no head);
    ``state`` [B] indices into ``code.states``; ``phase`` broadcasts to [B, H, W];
    ``pad`` [B, H, W] marks padding cells (their other digits must be 0)."""
    sym = np.asarray(sym)
    if sym.ndim != 3:
        raise Tm2nnError(f"encode: sym must be [batch, rows, cols], got shape {sym.shape}")
    B, H, W = sym.shape
    head = np.asarray(head, dtype=np.int64).reshape(B, 2)
    state = np.asarray(state, dtype=np.int64).reshape(B)
    ph = np.asarray(phase)
    if not np.isin(sym, (-1, 0, 1)).all() or not np.isin(ph, (-1, 0, 1)).all():
        raise Tm2nnError("encode: tape and phase digits must be -1, 0 or 1")
    if ph.ndim == 1:  # one phase per grid
        ph = ph.reshape(-1, 1, 1)
    phase = np.broadcast_to(ph.astype(np.int8), (B, H, W))
    pad = np.zeros((B, H, W), dtype=bool) if pad is None else np.asarray(pad, dtype=bool)
    has = head[:, 0] >= 0
    r, c = head[has, 0], head[has, 1]
    if (r >= H).any() or (c < 0).any() or (c >= W).any():
        raise Tm2nnError(f"encode: a head lies outside the {H}x{W} grid")
    if ((state[has] < 0) | (state[has] >= len(code.states))).any():
        raise Tm2nnError("encode: a state index is out of range")
    b = np.nonzero(has)[0]
    if pad[b, r, c].any():
        raise Tm2nnError("encode: the head is on a padding cell")
    if (pad & ((sym != 0) | (phase != 0))).any():
        raise Tm2nnError("encode: padding cells must have tape and phase digit 0")
    out = np.zeros((B, H, W, code.n_digits), dtype=np.int8)
    out[..., PAD] = pad
    out[..., SYMBOL] = sym
    out[..., PHASE] = phase
    out[b, r, c, HEAD] = 1
    out[b, r, c, STATE:] = code.table[state[has]]
    return out


def decode(code: CellCode, digits) -> Grids:
    """Goel et al., B.1.1: digits ``[B, H, W, D]`` -> :class:`Grids`; raises
    :class:`Tm2nnError` naming the first cell that is not a valid code."""
    d = np.asarray(digits)
    if d.ndim != 4 or d.shape[-1] != code.n_digits:
        raise Tm2nnError(f"decode: expected digits [batch, rows, cols, {code.n_digits}], got {d.shape}")
    B, H, W, _ = d.shape
    is_head = d[..., HEAD] == 1
    n_heads = is_head.sum((1, 2))
    _fail(cell_faults(d), BAD_CELL)
    if (n_heads > 1).any():
        raise Tm2nnError(f"decode: grid {int(np.argmax(n_heads > 1))} has {int(n_heads.max())} heads")
    head = np.full((B, 2), -1, dtype=np.int64)
    state = np.full(B, -1, dtype=np.int64)
    b, r, c = np.nonzero(is_head)
    head[b, 0], head[b, 1] = r, c
    if len(b):
        hs = d[b, r, c, STATE:]
        idx = head_states(code, hs)
        if (idx < 0).any():
            i = int(np.argmax(idx < 0))
            raise Tm2nnError(no_state(b[i], r[i], c[i], hs[i]))
        state[b] = idx
    return Grids(d[..., SYMBOL].astype(np.int8), head, state, d[..., PHASE].astype(np.int8),
                 d[..., PAD] == 1)


#: what :func:`decode` says of a cell :func:`cell_faults` flags
BAD_CELL = ("is not a B.1.1 cell code (bad digit, padding with content, or state digits off the head or "
            "partly 0)")


def cell_faults(d: np.ndarray) -> np.ndarray:
    """Goel et al., B.1.1: which cells of digits ``[..., D]`` are not a cell code (a digit
    outside −1..1, padding −1 or with content, a head digit −1, state digits off the head,
    or on the head partly 0)."""
    st = d[..., STATE:]
    is_head = d[..., HEAD] == 1
    bad = ~np.isin(d, (-1, 0, 1)).all(-1)
    bad |= (d[..., PAD] == -1) | (d[..., HEAD] == -1)
    bad |= (d[..., PAD] == 1) & (d[..., 1:] != 0).any(-1)
    bad |= ~is_head & (st != 0).any(-1)
    zero, full = (st == 0).all(-1), (st != 0).all(-1)
    return bad | (is_head & ~zero & ~full)


def head_states(code: CellCode, hs) -> np.ndarray:
    """Goel et al., B.1.1/B.1.2 ("States"): the state digits ``[m, S]`` of head cells (each
    all 0 or all ±1) -> state indices into ``code.states``, −1 where they name no state."""
    hs = np.asarray(hs).astype(np.int64)
    is_start = (hs == 0).all(-1)
    j = ((hs + 1) // 2) @ (1 << np.arange(code.n_state_digits - 1, -1, -1))
    others = np.array([i for i, q in enumerate(code.states) if q != code.start], dtype=np.int64)
    ok = is_start | (j < len(others))
    idx = np.full(len(hs), code.states.index(code.start), dtype=np.int64)
    named = ~is_start & ok
    idx[named] = others[j[named]]
    idx[~ok] = -1
    return idx


def no_state(b, r, c, hs) -> str:
    """:func:`decode`'s message for head cell ``(r, c)`` of grid ``b`` whose state digits
    ``hs`` name no state."""
    return f"decode: grid {b} cell ({r}, {c}): state digits {np.asarray(hs).astype(np.int64).tolist()} name no state"


def _fail(bad: np.ndarray, what: str) -> None:
    if bad.any():
        b, r, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
        raise Tm2nnError(f"decode: grid {b} cell ({r}, {c}) {what}")


# -- packed integers and values --------------------------------------------------------------
def pack(digits) -> np.ndarray:
    """Goel et al., B.1.1: digits ``[..., D]`` -> int64 ``N = Σ a(i)·3^{D-1-i}``
    (= ``a·3^{D-1}``), D ≤ 40."""
    d = np.asarray(digits)
    D = d.shape[-1]
    if D > MAX_DIGITS_INT64:
        raise Tm2nnError(f"pack: {D} base-3 digits do not fit int64 (at most {MAX_DIGITS_INT64}); "
                         "keep the digit form")
    w = 3 ** np.arange(D - 1, -1, -1, dtype=np.int64)
    return (d.astype(np.int64) * w).sum(-1)


def unpack(packed, n_digits: int) -> np.ndarray:
    """Goel et al., B.1.1: int64 ``N`` -> digits ``int8 [..., n_digits]`` (balanced ternary,
    most significant first)."""
    n = np.array(packed, dtype=np.int64)
    if n_digits > MAX_DIGITS_INT64:
        raise Tm2nnError(f"unpack: at most {MAX_DIGITS_INT64} digits fit int64")
    top = (3 ** n_digits - 1) // 2
    if (np.abs(n) > top).any():
        raise Tm2nnError(f"unpack: a packed cell is outside ±{top}, the range of {n_digits} digits")
    out = np.empty(n.shape + (n_digits,), dtype=np.int8)
    for i in range(n_digits - 1, -1, -1):
        r = (n + 1) % 3 - 1
        out[..., i] = r
        n = (n - r) // 3
    return out


def _check_value_dtype(n_digits: int, dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in MAX_DIGITS_VALUE:
        raise Tm2nnError(f"B.1.1 values are float32 or float64, not {dt}")
    if n_digits > MAX_DIGITS_VALUE[dt]:
        raise Tm2nnError(f"a B.1.1 value with {n_digits} digits cannot be read back from {dt} "
                         f"(at most {MAX_DIGITS_VALUE[dt]} digits); use float64, or the digit or "
                         "packed form")
    return dt


def to_value(packed, n_digits: int, dtype=np.float64) -> np.ndarray:
    """Goel et al., B.1.1: packed ``N`` -> the cell value ``a = N / 3^{D-1}`` as the nearest
    float of ``dtype`` (see the module docstring for the limits)."""
    dt = _check_value_dtype(n_digits, dtype)
    n = np.asarray(packed, dtype=np.int64)
    return (n.astype(np.float64) / float(3 ** (n_digits - 1))).astype(dt)


def from_value(values, n_digits: int, tol: float = 0.0) -> np.ndarray:
    """Goel et al., B.1.1: cell values -> packed ``N``, rounding ``a·3^{D-1}``.

    With ``tol = 0`` each value must be exactly the float :func:`to_value` gives (same
    dtype); otherwise it may be off by at most ``tol`` units of the last digit
    (``tol < 1/2``), as a network's float output may be."""
    v = np.asarray(values)
    n, ok = round_values(v, n_digits, tol)
    if not ok.all():
        i = np.unravel_index(int(np.argmin(ok)), ok.shape)
        raise Tm2nnError(not_a_value(v[i], i, n_digits))
    return n


def round_values(v: np.ndarray, n_digits: int, tol: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """:func:`from_value` without raising: ``(packed N, ok)``, ``ok`` False where a value is
    not within ``tol`` of a ``n_digits``-digit B.1.1 value (Goel et al., B.1.1)."""
    dt = _check_value_dtype(n_digits, v.dtype)
    scaled = v.astype(np.float64) * float(3 ** (n_digits - 1))
    with np.errstate(invalid="ignore"):  # a NaN or an infinity: not a value (below)
        n = np.rint(scaled).astype(np.int64)
    if tol == 0:
        ok = to_value(n, n_digits, dt) == v
    else:
        if not 0 < tol < 0.5:
            raise Tm2nnError(f"from_value: tol must be in (0, 1/2), got {tol}")
        ok = np.abs(scaled - n) <= tol
    top = (3 ** n_digits - 1) // 2
    ok &= np.abs(n) <= top
    return n, ok


def not_a_value(value, index, n_digits: int) -> str:
    """:func:`from_value`'s message for ``value`` at ``index``."""
    return f"from_value: {value!r} at {tuple(int(x) for x in index)} is not a {n_digits}-digit B.1.1 value"


# -- machine configurations <-> grids ---------------------------------------------------------
def grids_from_configs(code: CellCode, configs, window: tuple[int, int, int, int],
                       phase=COMPUTE) -> np.ndarray:
    """Goel et al., B.1.1: machine configurations ``(state, head, cells)`` (grid coordinates, cells a dict
    (row, col) -> symbol) -> digits ``[B, H, W, D]`` of the window
    ``(top, left, height, width)``; every non-blank cell and the head must lie in it."""
    top, left, H, W = window
    configs = list(configs)
    B = len(configs)
    sym = np.zeros((B, H, W), dtype=np.int8)
    head = np.empty((B, 2), dtype=np.int64)
    state = np.empty(B, dtype=np.int64)
    index = {q: i for i, q in enumerate(code.states)}
    values = {a: code.symbol_value(a) for a in (code.blank, "-", "+")}
    for b, (q, h, cells) in enumerate(configs):
        if q not in index:
            raise Tm2nnError(f"configuration {b}: {q!r} is not a state")
        state[b] = index[q]
        head[b] = (h[0] - top, h[1] - left)
        if cells:
            pos = np.array(list(cells), dtype=np.int64).reshape(-1, 2) - (top, left)
            try:
                val = np.fromiter((values[a] for a in cells.values()), dtype=np.int8, count=len(cells))
            except KeyError as e:
                raise Tm2nnError(f"configuration {b}: symbol {e.args[0]!r} has no B.1.1 code") from None
            if (pos < 0).any() or (pos[:, 0] >= H).any() or (pos[:, 1] >= W).any():
                raise Tm2nnError(f"configuration {b}: a non-blank cell lies outside the window {window}")
            sym[b, pos[:, 0], pos[:, 1]] = val
    if ((head < 0) | (head >= (H, W))).any():
        raise Tm2nnError(f"a head lies outside the window {window}")
    return encode(code, sym, head, state, phase)


def configs_from_grids(code: CellCode, digits, window: tuple[int, int, int, int]) -> list:
    """Goel et al., B.1.1: digits ``[B, H, W, D]`` of the window ``(top, left, height, width)`` -> a list of
    ``(state, head, cells, phase)``: grid coordinates, ``state``/``head`` ``None`` without
    a head, ``phase`` the int8 [H, W] phase digits."""
    top, left, _H, _W = window
    g = decode(code, digits)
    out = []
    for b in range(g.sym.shape[0]):
        rr, cc = np.nonzero(g.sym[b])
        cells = {(int(r) + top, int(c) + left): code.value_symbol(int(v))
                 for r, c, v in zip(rr, cc, g.sym[b, rr, cc])}
        if g.state[b] < 0:
            out.append((None, None, cells, g.phase[b]))
        else:
            h = (int(g.head[b, 0]) + top, int(g.head[b, 1]) + left)
            out.append((code.states[g.state[b]], h, cells, g.phase[b]))
    return out
