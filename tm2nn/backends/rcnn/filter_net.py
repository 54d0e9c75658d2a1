"""The filter of Goel et al. (B.2) as the 5-layer ReLU network of Definition 5,
``f_Conv2D(z) = V5 σ(V4 V3 σ(V2 V1 vec(z)))`` (with biases, footnote 6), exact on the
analysed domain of :mod:`.reachable` and with B.2's Jacobian there.

**Idea** (Lemma 5's indicator bumps, over a decomposition instead of the whole domain).
On the analysed domain

    f̄(X) = base(x00) + Σ corrections,

where ``base(v)`` is f̄ when no neighbour matters (``v`` itself; ``γ``'s output for a head
cell) and each correction is one B.2 case that needs a conjunction (:func:`.reachable.conjunctions`):
a (centre, neighbour) pair, the three cells of the head-placing case, or case 4's OR over
the neighbours.  Each term is one second-layer unit ``σ(Σ ±ψ + b)`` over exact 0/1
indicators ``ψ``, so the widths grow with the number of reachable cell values, O(s).

**Layers** (Definition 5's factorisation, kept as five affine maps):

* ``V1`` (6×9): copy the five cells B.2 reads and add ``K = 2`` (see float32 below), and
  the centre once more for the ramps;
* ``V2`` + σ: four ReLUs per bump ``(position, value v)``: ``σ(z − a1)``, ``σ(z − a2)``,
  ``σ(a3 − z)``, ``σ(a4 − z)`` at ``a = c_v + K + (−4g, −2g, 2g, 4g)``, and one
  ``σ(a3 − z')`` per ramp on the centre's copy ``z'``;
* ``V3``: the bumps ``ψ = (σ1 − σ2 + σ4 − σ3)/2g − 1`` (1 on ``[c_v − 2g, c_v + 2g]``, 0
  outside ``(c_v − 4g, c_v + 4g)``, slope 0 on both), and for the two slope-1 cases a
  ramp ``R = 4g − σ(a3 − z')`` (``x − c_v + 2g`` on the plateau, never above 4g).  The
  ramp has its own units so that backward computes its slope 1 exactly (the bumps'
  ``±1/2g`` terms cancel among themselves, and nothing is added to them): Lemma 4's SGD
  step then writes W bit for bit at every digit count, not only where ``1/2g`` is small;
* ``V4`` + σ: the units — an indicator ``σ(Σ ψ − (n − 1))`` per term, and for a term
  whose Jacobian is 1 in ``x00`` a second unit ``σ(R + Σ ψ − n)`` that equals ``R`` when
  the term holds and 0 otherwise;
* ``V5``: the terms' values (the slope unit with weight 1, its indicator with
  ``y − v + c_v − 2g`` so the sum is ``y + (x00 − v)``).

``g`` is the largest power of two ``≤ h/16`` (``h = 3^{-(D-1)}``): the closest two domain
values are ``p = 1/6`` and a blank head cell in the highest state, ``h/2`` apart, and
bump centres ``c_v`` (``v`` rounded to a multiple of ``g``) are within ``g/2`` of ``v``.
So an input within ``1.5g`` of its value is on its bump's plateau and in every other
bump's flat zero region: the hidden units take exactly the values they take at the exact
input.

**float32.** A bump built from ReLUs that all point one way cancels large terms far from
its centre, and in float32 that cancellation is off by ``~ulp(x)/g``.  Here (i) ``V1`` adds
``K = 2``, which rounds every input onto the grid of ``2^{-23}``, and every breakpoint is a
multiple of ``g ≥ 2^{-22}``, so ``z − a`` is exact; (ii) each bump's two large terms come
from one side only and cancel exactly.  So every ``ψ`` is exactly 0 or 1 in float32 too,
every unit is exactly 0/1 (or the exact ramp), and the output is the float sum of at most
three of ``V5``'s values: error ≲ 2 ulp, against an input tolerance of ``1.5g``.  Nothing
accumulates over steps (slope 0 everywhere but the memory phase, whose pass-through is
exact after the first rounding).  Needs ``g ≥ 2^{-22}``: ``D ≤ 12`` (at most 257 states).
No rounding layer is needed.

**float64**, by the same argument with 53-bit significands: the shifted inputs and every
breakpoint lie in [1, 4), where float64 numbers are the multiples of ``2^{-52}`` (below 2)
and ``2^{-51}`` (above), so the breakpoints are float64 numbers when ``g ≥ 2^{-51}``, and
``z − a`` (a multiple of ``2^{-52}`` below 2 in size) is exact.  ``g = 2^{⌊log2(h/16)⌋}``
is at least ``2^{-51}`` while ``3^{D-1} ≤ 2^{47}``: ``D ≤ 30`` (26 state digits, at most
``2^{26} + 1 = 67 108 865`` states).  :func:`max_digits` derives both limits from the
dtype's epsilon (``g ≥ 2·eps``), and :func:`net_dtype` picks the narrower dtype that is
exact for a digit count (the paper needs O(log s) bits; float32 is our choice, not its
limit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tm2nn.backends.rcnn.filter_spec import STAY, VEC_LABELS, MachineTable, P
from tm2nn.backends.rcnn.reachable import (
    COMPUTE_CLASSES,
    HEAD_CLASSES,
    POSITIONS,
    UNKNOWN_CLASSES,
    CellClasses,
    cell_classes,
    conjunctions,
)
from tm2nn.errors import Tm2nnError
from tm2nn.nets import SparseMatrix

#: The shift ``V1`` adds: puts every input in [1.5, 3.2], on the float32 grid of 2^-23.
K_SHIFT = 2.0
#: ``vec(z)`` index of each position B.2 reads (row-major 3×3).
VEC_INDEX = {"c": 4, "u": 1, "d": 7, "l": 3, "r": 5}
#: Most digits for which the bump breakpoints are float32 numbers (g ≥ 2^-22).
MAX_DIGITS_FLOAT32 = 12
#: Most digits for which the bump breakpoints are float64 numbers (g ≥ 2^-51).
MAX_DIGITS_FLOAT64 = 30
#: The filter's exact range by dtype (:func:`max_digits` derives these).
MAX_DIGITS = {np.dtype(np.float32): MAX_DIGITS_FLOAT32, np.dtype(np.float64): MAX_DIGITS_FLOAT64}


def max_digits(dtype) -> int:
    """The most base-3 digits (B.1.1) for which Definition 5's filter of Goel et al. (B.2,
    built by :func:`build_filter`) is exact in ``dtype``: the largest ``D`` whose bump grid
    ``g`` (:func:`bump_grid`) is at least the spacing of ``dtype``'s numbers in [2, 4)
    (``2·eps``), where ``V1``'s shift ``K = 2`` puts the inputs and breakpoints (module
    docstring).  12 for float32, 30 for float64."""
    step = 2.0 * float(np.finfo(np.dtype(dtype)).eps)
    d = 1
    while bump_grid(d + 1) >= step:
        d += 1
    return d


def net_dtype(n_digits: int) -> str:
    """The dtype the emitted net computes in for ``n_digits`` B.1.1 digits (Goel et al.,
    B.1.1/B.2): ``"float32"`` up to :data:`MAX_DIGITS_FLOAT32`, ``"float64"`` up to
    :data:`MAX_DIGITS_FLOAT64`.  Beyond that no float type we emit carries the filter's
    bumps exactly: a :class:`Tm2nnError` names the digit count and the limits."""
    if n_digits <= MAX_DIGITS_FLOAT32:
        return "float32"
    if n_digits <= MAX_DIGITS_FLOAT64:
        return "float64"
    raise Tm2nnError(f"{n_digits} base-3 digits per cell: the filter is exact in float64 up to "
                     f"{MAX_DIGITS_FLOAT64} digits (bump grid g >= 2^-51, at most "
                     f"{2 ** (MAX_DIGITS_FLOAT64 - 4) + 1:,} states) and in float32 up to "
                     f"{MAX_DIGITS_FLOAT32} ({2 ** (MAX_DIGITS_FLOAT32 - 4) + 1} states)")


@dataclass(frozen=True)
class Unit:
    """One second-layer unit: ``σ(Σ weight·Σ_{v∈values} ψ_{pos,v} + bias [+ ramp])`` with
    output weight ``out``.  ``ramp`` (a packed centre value) marks a slope unit."""

    label: str
    literals: tuple[tuple[str, tuple[int, ...], float], ...]
    bias: float
    out: float
    ramp: int | None = None
    case: str = ""


@dataclass(frozen=True)
class FilterNet:
    """Definition 5's ``f_Conv2D`` for one machine.  ``matrices``/``biases`` are ``V1…V5``
    and their biases at their real widths (``(6, 9)``, ``(n1, 6)``, ``(n2, n1)``,
    ``(n3, n2)``, ``(1, n3)``); :meth:`padded` gives Definition 5's ``d_rc`` shapes.
    ``labels[i]`` names the outputs of ``V{i+1}``.  :func:`build_filter` stores the
    matrices sparse (``V3`` alone is ``n2 × n1`` ≈ 4.6·10⁸ entries for 534 states, 4
    nonzero per row); a caller may pass dense arrays instead.  :attr:`sparse` and
    :attr:`weights` give either form, the dense one built only when asked for."""

    matrices: tuple[SparseMatrix | np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    labels: tuple[tuple[str, ...], ...]
    units: tuple[Unit, ...] = field(repr=False)
    n_digits: int = 0
    n_states: int = 0
    g: float = 0.0
    input_labels: tuple[str, ...] = VEC_LABELS

    @cached_property
    def sparse(self) -> tuple[SparseMatrix, ...]:
        """``V1…V5`` as :class:`~tm2nn.nets.SparseMatrix` (row-major, the zeros dropped)."""
        return tuple(w if isinstance(w, SparseMatrix) else SparseMatrix.from_dense(w) for w in self.matrices)

    @cached_property
    def weights(self) -> tuple[np.ndarray, ...]:
        """``V1…V5`` as dense float64 arrays (built on first use: large for big machines)."""
        return tuple(w.dense() if isinstance(w, SparseMatrix) else np.asarray(w, dtype=np.float64)
                     for w in self.matrices)

    @property
    def widths(self) -> tuple[int, ...]:
        """Output widths of V1…V5."""
        return tuple(w.shape[0] for w in self.matrices)

    @property
    def d_rc(self) -> int:
        """Definition 5's hidden width: every hidden vector padded to the widest."""
        return max(self.widths[:4])

    @property
    def spacing(self) -> float:
        """``h = 3^{-(D-1)}``, the value of the last digit."""
        return 3.0 ** -(self.n_digits - 1)

    @property
    def tolerance(self) -> float:
        """How far (absolute) an input may be from its cell value and still give exactly
        the hidden units of the exact input: ``1.5 g``."""
        return 1.5 * self.g

    def padded(self) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[str, ...]]]:
        """``V1…V5`` and biases in Definition 5's shapes (``V1`` d_rc×9, ``V2…V4``
        d_rc×d_rc, ``V5`` 1×d_rc), zero-padded; padded dimensions are labelled ``pad:i``."""
        d = self.d_rc
        shapes = [(d, 9), (d, d), (d, d), (d, d), (1, d)]
        Ws, bs, labs = [], [], []
        for W, b, lab, shp in zip(self.weights, self.biases, self.labels, shapes):
            M = np.zeros(shp)
            M[:W.shape[0], :W.shape[1]] = W
            v = np.zeros(shp[0])
            v[:len(b)] = b
            Ws.append(M)
            bs.append(v)
            labs.append(tuple(lab) + tuple(f"pad:{i}" for i in range(len(lab), shp[0])))
        return Ws, bs, labs

    def layers(self, x, dtype=np.float64) -> list[np.ndarray]:
        """Every layer's output for inputs ``vec(z)`` ``[N, 9]``, computed in ``dtype``
        with five separate affine maps (the order float32 exactness relies on).  Layers
        whose rows have at most 8 nonzero weights are evaluated as gathers, the rest as
        dense products; the exactness argument holds for any summation order."""
        h = np.asarray(x, dtype=dtype)
        if h.ndim != 2 or h.shape[1] != 9:
            raise Tm2nnError(f"the filter reads vec(z) [N, 9], got {h.shape}")
        limit = MAX_DIGITS.get(h.dtype)
        if limit is None:
            raise Tm2nnError(f"the filter computes in float32 or float64, not {h.dtype}")
        if self.n_digits > limit:
            grid = "2^-22" if h.dtype == np.float32 else "2^-51"
            hint = "; use float64" if self.n_digits <= MAX_DIGITS_FLOAT64 else ""
            raise Tm2nnError(f"{self.n_digits} base-3 digits: the filter is exact in {h.dtype} "
                             f"up to {limit} digits (bump grid g >= {grid}){hint}")
        out = []
        for i, (W, b) in enumerate(zip(self.matrices, self.biases)):
            cols, vals = self._ell[i]
            if cols.shape[1] <= 8 and W.shape[1] > 64:
                h = (h[:, cols] * vals.astype(dtype)).sum(-1) + b.astype(dtype)
            else:
                h = h @ self.weights[i].T.astype(dtype) + b.astype(dtype)
            if i in (1, 3):
                h = np.maximum(h, 0)
            out.append(h)
        return out

    @cached_property
    def _ell(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [W.ell() for W in self.sparse]

    def __call__(self, x, dtype=np.float64, chunk: int = 16384) -> np.ndarray:
        """``f_Conv2D`` on ``vec(z)`` ``[N, 9]`` -> ``[N]`` in ``dtype``."""
        x = np.asarray(x, dtype=dtype)
        return np.concatenate([self.layers(x[i:i + chunk], dtype)[-1][:, 0]
                               for i in range(0, max(len(x), 1), chunk)])[:len(x)]

    def apply_grid(self, values, dtype=np.float64) -> np.ndarray:
        """Goel et al., B.3 (``f_ConvLayer``): the filter at every cell of value grids
        ``[B, H, W]``, the window padded with ``p = 1/6`` -> ``[B, H, W]`` in ``dtype``."""
        v = np.asarray(values, dtype=dtype)
        padded = np.pad(v, ((0, 0), (1, 1), (1, 1)), constant_values=dtype(1.0 / 6.0))
        win = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))
        return self(win.reshape(-1, 9), dtype).reshape(v.shape)

    def torch_module(self, dtype=None):
        """A ``torch.nn.Module`` with the same five affine maps (buffers), for autograd."""
        import torch

        dtype = dtype or torch.float64
        Ws = [torch.tensor(W, dtype=dtype) for W in self.weights]
        bs = [torch.tensor(b, dtype=dtype) for b in self.biases]

        class _Filter(torch.nn.Module):
            def forward(self, z):
                h = z
                for i, (W, b) in enumerate(zip(Ws, bs)):
                    h = h @ W.T + b
                    if i in (1, 3):
                        h = torch.relu(h)
                return h[:, 0]

        return _Filter()


# -- the terms ---------------------------------------------------------------------------------
def _val(n: int, D: int) -> float:
    return float(n) / float(3 ** (D - 1))


def filter_units(classes: CellClasses, table: MachineTable) -> list[Unit]:
    """The second-layer units (module docstring): one ``base`` per centre value, then one
    per conjunction of :func:`.reachable.conjunctions`, each with its output value."""
    D = classes.n_digits
    V = classes.values
    t2, t3 = 3 ** (D - 3), 3 ** (D - 4)
    units: list[Unit] = []

    # base(x00): the value when no neighbour matters
    for cls in ("Z", "M", "W", "E", "C", "Cw"):
        for v in V[cls]:
            lit = (("c", (int(v),), 1.0),)
            units.append(Unit(f"base:c={classes.name(v)}", lit, 0.0, _val(v, D),
                              case="memory" if cls == "E" else ("msg5" if cls in UNKNOWN_CLASSES else "tm6")))
            if cls == "E":  # memory phase: identity with slope 1
                units.append(Unit(f"base:c={classes.name(v)}:slope", lit, -1.0, 1.0, int(v), "memory"))
    for v in classes.of(*HEAD_CLASSES):  # the head: γ's write, the phase, the head if it stays
        q, a = classes.head_state[int(v)], classes.head_symbol[int(v)] + 1
        n = int(table.write[q, a]) * 3 ** (D - 2) + t2
        if table.move[q, a] == STAY:
            n += t3 + int(table.state_packed[table.next_state[q, a]])
        units.append(Unit(f"base:c={classes.name(v)}", (("c", (int(v),), 1.0),), 0.0, _val(n, D),
                          case="tm1"))

    # the corrections
    for cj in conjunctions(classes, table):
        lits = tuple((pos, tuple(int(v) for v in vals), 1.0) for pos, vals in cj.literals.items())
        nlit = len(lits)
        where = ",".join(f"{pos}={_set_name(classes, vals)}" for pos, vals, _w in lits)
        if cj.case == "msg1":  # −1/9 with slope 1 in x00 (the centre is 0: base gives 0)
            y = _val(-t2, D)
            units.append(Unit(f"msg1:{where}", lits, -(nlit - 1), y, case="msg1"))
            units.append(Unit(f"msg1:{where}:slope", lits, -float(nlit), 1.0, 0, "msg1"))
        elif cj.case == "msg2":
            (v,) = cj.literals["c"]
            units.append(Unit(f"msg2:{where}", lits, -(nlit - 1), _val(-t2 - int(v), D), case="msg2"))
        elif cj.case == "msg3":
            units.append(Unit(f"msg3:{where}", lits, -(nlit - 1), _val(t2 + t3, D), case="msg3"))
        elif cj.case == "tm":
            (n,) = [p for p in cj.literals if p != "c"]
            y = _val(t3 + int(table.state_packed[cj.state]), D)
            units.append(Unit(f"tm:{n}->c:q={table.code.states[cj.state]}", lits, -(nlit - 1), y,
                              case=f"tm:{n}"))
    # case 4: c unknown and at least one neighbour computes: (1/9)·(σ(4U + S − 4) − σ(4U + S − 5))
    unk = tuple(int(v) for v in classes.of(*UNKNOWN_CLASSES))
    comp = tuple(int(v) for v in classes.of(*COMPUTE_CLASSES))
    lits = (("c", unk, 4.0),) + tuple((n, comp, 1.0) for n in "udlr")
    units.append(Unit("msg4:>=1", lits, -4.0, _val(t2, D), case="msg4"))
    units.append(Unit("msg4:>=2", lits, -5.0, -_val(t2, D), case="msg4"))
    return units


def _set_name(classes: CellClasses, vals) -> str:
    vals = list(vals)
    if len(vals) <= 3:
        return "|".join(classes.name(v) for v in vals)
    return f"{len(vals)} values"


# -- the weights -------------------------------------------------------------------------------
def bump_grid(n_digits: int) -> float:
    """``g``: the largest power of two ``≤ h/16``, ``h = 3^{-(D-1)}`` (module docstring)."""
    h = 3.0 ** -(n_digits - 1)
    return 2.0 ** np.floor(np.log2(h / 16))


def build_filter(table: MachineTable) -> FilterNet:
    """Goel et al., Definition 5 / B.2 / Lemma 5 (over the decomposition): the filter
    network for ``table``'s machine (module docstring)."""
    D = table.n_digits
    if D > MAX_DIGITS_FLOAT64:
        raise Tm2nnError(f"{D} base-3 digits: the bumps are exact up to D = {MAX_DIGITS_FLOAT64}, "
                         "even in float64 (bump grid g >= 2^-51)")
    classes = cell_classes(table.code)
    units = filter_units(classes, table)
    g = bump_grid(D)
    pos_names = list(POSITIONS)

    # the bumps every unit reads, position by position, values in increasing order
    need: dict[str, set[int]] = {p: set() for p in pos_names}
    ramps: list[int] = []
    for u in units:
        for pos, vals, _w in u.literals:
            need[pos].update(vals)
        if u.ramp is not None and u.ramp not in ramps:
            ramps.append(u.ramp)
    for v in ramps:
        need["c"].add(v)
    bumps = [(p, v) for p in pos_names for v in sorted(need[p], key=_sort_key)]
    bump_index = {b: i for i, b in enumerate(bumps)}

    def value(v: int) -> float:
        return 1.0 / 6.0 if v == P else _val(v, D)

    def center(v: int) -> float:
        return float(np.round(value(v) / g) * g)

    # V1: copy the five cells, + K; and the centre once more, for the ramps alone (below)
    V1 = np.zeros((6, 9))
    for i, p in enumerate(pos_names):
        V1[i, VEC_INDEX[p]] = 1.0
    V1[5, VEC_INDEX["c"]] = 1.0
    b1 = np.full(6, K_SHIFT)
    lab1 = tuple(f"in:{p}+K" for p in pos_names) + ("in:c+K:ramp",)

    # V2: four ReLUs per bump, then one σ(c_v + 2g + K − z) per ramp on its own copy of
    # the centre.  A ramp sharing its bump's σ3 (the same function) would make backward
    # add the ramp's gradient v to the bump's ±v/2g terms: rounded, so the memory
    # pass-through's slope 1 would not be exactly 1 in floating point (Lemma 4's SGD step
    # would miss W by ~ulp(1/2g)).  Apart, the bumps' terms cancel exactly (one magnitude)
    # and the ramp's gradient reaches the centre unrounded.
    n1 = 4 * len(bumps) + len(ramps)
    V2 = np.zeros((n1, 6))
    b2 = np.zeros(n1)
    lab2 = []
    offs = (-4 * g, -2 * g, 2 * g, 4 * g)
    sides = (1.0, 1.0, -1.0, -1.0)
    for j, (p, v) in enumerate(bumps):
        c = center(v) + K_SHIFT
        for k in range(4):
            V2[4 * j + k, pos_names.index(p)] = sides[k]
            b2[4 * j + k] = -sides[k] * (c + offs[k])
            lab2.append(f"relu:{p}={classes.name(v)}@{('-4g', '-2g', '+2g', '+4g')[k]}")
    for i, v in enumerate(ramps):
        V2[4 * len(bumps) + i, 5] = -1.0
        b2[4 * len(bumps) + i] = center(v) + K_SHIFT + 2 * g
        lab2.append(f"relu:ramp:c={classes.name(v)}@+2g")

    # V3: bumps, then ramps (built sparse, row-major: V3 is n2 × n1, four entries a row)
    nb, n2 = len(bumps), len(bumps) + len(ramps)
    inv = 1.0 / (2 * g)
    V3 = SparseMatrix((n2, n1), np.concatenate([np.repeat(np.arange(nb), 4), nb + np.arange(len(ramps))]),
                      np.concatenate([np.arange(4 * nb), 4 * nb + np.arange(len(ramps))]),
                      np.concatenate([np.tile([inv, -inv, -inv, inv], nb), np.full(len(ramps), -1.0)]))
    b3 = np.concatenate([np.full(nb, -1.0), np.full(len(ramps), 4 * g)])
    lab3 = [f"ind:{p}={classes.name(v)}" for p, v in bumps] + [f"ramp:c={classes.name(v)}" for v in ramps]

    # V4: the units (sparse; a literal's weights summed per bump in order, a ramp's 1 set
    # last); V5: their values
    n3 = len(units)
    rows4: list[int] = []
    cols4: list[int] = []
    vals4: list[float] = []
    b4 = np.zeros(n3)
    V5 = np.zeros((1, n3))
    lab4 = []
    for k, u in enumerate(units):
        row: dict[int, float] = {}
        for pos, vals, w in u.literals:
            for v in vals:
                j = bump_index[(pos, v)]
                row[j] = row.get(j, 0.0) + w
        if u.ramp is not None:
            row[nb + ramps.index(u.ramp)] = 1.0
        cols = sorted(row)
        rows4 += [k] * len(cols)
        cols4 += cols
        vals4 += [row[j] for j in cols]
        b4[k] = u.bias
        lab4.append(f"rule:{u.label}")
        V5[0, k] = u.out
    V4 = SparseMatrix((n3, n2), np.array(rows4, dtype=np.int64), np.array(cols4, dtype=np.int64),
                      np.array(vals4, dtype=np.float64))
    # a slope term's indicator carries y − v + c_v − 2g, so indicator + ramp = y + (x − v)
    for u in units:
        if u.ramp is not None:
            ind = next(i for i, w in enumerate(units) if w.label == u.label.rsplit(":slope", 1)[0])
            V5[0, ind] = units[ind].out - value(u.ramp) + center(u.ramp) - 2 * g
    return FilterNet(tuple(SparseMatrix.from_dense(W) for W in (V1, V2)) + (V3, V4, SparseMatrix.from_dense(V5)),
                     (b1, b2, b3, b4, np.zeros(1)),
                     (lab1, tuple(lab2), tuple(lab3), tuple(lab4), ("out",)), tuple(units),
                     D, table.n_states, float(g))


def _sort_key(v: int) -> float:
    return float("inf") if v == P else float(v)
