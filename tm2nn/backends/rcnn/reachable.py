"""Which 3×3 patches the filter of Goel et al. (B.2) can meet: a reachability analysis of
the B.1.1 encoding, so that the network is built over the values that occur rather than over
all ``3^{9·D}`` patches (Lemma 5 enumerates the whole domain).

**Cell classes** (packed values, ``h = 3^{-(D-1)}`` the digit spacing):

=====  =====================================  ========================================
class  values                                 where
=====  =====================================  ========================================
Z      0                                      a row of W not memorized yet (Lemma 3)
M      ±1/3                                   a memorized input cell, phase unknown
W      1                                      a fresh working-tape cell (f_mem's 1s)
E      −1/9                                   memory phase
C      sym/3 + 1/9, sym ∈ {−1, 0, 1}          compute phase, no head
Cw     1 + 1/9                                a working cell the compute phase reached
H      sym/3 + 1/9 + 1/27 + state             compute phase, head (any state, symbol)
Hw     1 + 1/9 + 1/27 + state                 the head on an unwritten working cell
P      p = 1/6                                the window's padding (neighbours only)
=====  =====================================  ========================================

**Settings** (docs/rcnn.md, "Reachability", has the arguments):

* ``memorize`` — Lemma 3/4: rows ``< τ`` of ``±1/3``, the rest 0, working columns of 1,
  and the learner's frame on the left (a column of W with ``+1/3`` on top, then a column
  of W; docs/rcnn.md "The frame").  Every input column reads ``M… E… Z…`` top to bottom
  (no E at step 0), all input columns alike, frame and working columns stay as they are.
  A patch is a vertical window of that sequence (bottom row never M, since
  ``τ ≤ m + 1``), with left/right neighbours of the centre's row class (or W beside the
  first and last input columns, or p); a W centre sees W, p or the frame's mark above and
  W or p below; the mark sees p above and left, W below and right.
* ``compute`` — machine mode: a configuration of a machine in B.1.2 form written in the
  compute phase with the head placed.  Cells are C or H; at most one head in a patch; a
  head whose γ moves toward a neighbour has a C there (the window holds the whole run).
* ``handover`` — the memorized grid (all rows ``±1/3``, working columns 1) through the
  head placement of f̄_msg case 3 and the spreading compute phase into the run: classes M,
  W, C, Cw, H, Hw, P; at most one head; the head-placing pattern (M centre, W right, p
  below) has no compute neighbour; a moving head's target is C or Cw (the compute phase is
  always one cell ahead, because the first step is a no-op).

:func:`in_domain` tests patches against a setting; :func:`domain_patches` lists every
patch of a setting (corners, which B.2 never reads, set to a filler); :func:`conjunctions`
gives, per B.2 case, the (centre, neighbour) value sets that need a conjunction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tm2nn.backends.rcnn.encoding import CellCode
from tm2nn.backends.rcnn.filter_spec import (
    ABOVE,
    BELOW,
    CENTER,
    DOWN,
    LEFT,
    LEFT_OF,
    NEIGHBOURS,
    RIGHT,
    RIGHT_OF,
    STAY,
    UP,
    MachineTable,
    P,
    check_patches,
)
from tm2nn.errors import Tm2nnError

SETTINGS = ("memorize", "compute", "handover")
CLASSES = ("Z", "M", "W", "E", "C", "Cw", "H", "Hw", "P")
_ID = {k: i for i, k in enumerate(CLASSES)}
OTHER = -1
#: Positions B.2 reads, by name, in the order the network lays them out.
POSITIONS = {"c": CENTER, "u": ABOVE, "d": BELOW, "l": LEFT_OF, "r": RIGHT_OF}
COMPUTE_CLASSES = ("C", "Cw", "H", "Hw")
HEAD_CLASSES = ("H", "Hw")
UNKNOWN_CLASSES = ("Z", "M", "W")


@dataclass(frozen=True)
class CellClasses:
    """The packed values of each class for one cell code (module docstring), their
    names, and for head values the state index and symbol."""

    n_digits: int
    values: dict[str, np.ndarray]
    names: dict[int, str]
    head_state: dict[int, int] = field(repr=False)
    head_symbol: dict[int, int] = field(repr=False)

    def of(self, *classes: str) -> np.ndarray:
        return np.concatenate([self.values[k] for k in classes])

    def classify(self, packed: np.ndarray) -> np.ndarray:
        """Packed cells -> class ids (index into :data:`CLASSES`), ``OTHER`` if none."""
        allv = np.concatenate([self.values[k] for k in CLASSES])
        ids = np.concatenate([np.full(len(self.values[k]), _ID[k]) for k in CLASSES])
        order = np.argsort(allv, kind="stable")
        srt, sid = allv[order], ids[order]
        i = np.clip(np.searchsorted(srt, packed), 0, len(srt) - 1)
        return np.where(srt[i] == packed, sid[i], OTHER)

    def name(self, v: int) -> str:
        return self.names[int(v)]


def cell_classes(code: CellCode) -> CellClasses:
    """The cell classes of the module docstring for ``code`` (all states, all symbols)."""
    D = code.n_digits
    third, ninth, t27, one = 3 ** (D - 2), 3 ** (D - 3), 3 ** (D - 4), 3 ** (D - 1)
    w = 3 ** np.arange(D - 5, D - 5 - code.n_state_digits, -1, dtype=np.int64)
    st = (code.table.astype(np.int64) * w).sum(-1)
    s = len(code.states)
    sym_name = {-1: "-", 0: "_", 1: "+"}
    values: dict[str, list[int]] = {k: [] for k in CLASSES}
    names: dict[int, str] = {}
    head_state: dict[int, int] = {}
    head_symbol: dict[int, int] = {}

    def add(k: str, v: int, name: str, q: int | None = None, a: int | None = None):
        values[k].append(v)
        names[v] = name
        if q is not None:
            head_state[v], head_symbol[v] = q, a

    add("Z", 0, "0")
    add("M", third, "+1/3")
    add("M", -third, "-1/3")
    add("W", one, "1")
    add("E", -ninth, "-1/9")
    for a in (-1, 0, 1):
        add("C", a * third + ninth, f"cmp({sym_name[a]})")
    add("Cw", one + ninth, "cmp(_,w)")
    for q in range(s):
        for a in (-1, 0, 1):
            add("H", a * third + ninth + t27 + int(st[q]), f"head({code.states[q]},{sym_name[a]})", q, a)
    for q in range(s):
        add("Hw", one + ninth + t27 + int(st[q]), f"head({code.states[q]},_,w)", q, 0)
    names[int(P)] = "p"
    vals = {k: np.array(v, dtype=np.int64) for k, v in values.items()}
    vals["P"] = np.array([P], dtype=np.int64)
    return CellClasses(D, vals, names, head_state, head_symbol)


def reachable_values(classes: CellClasses, setting: str) -> dict[str, np.ndarray]:
    """The packed cell values that can occur in ``setting``, by phase (``unknown``,
    ``memory``, ``compute`` without a head, ``head``), and ``padding`` (p)."""
    _check_setting(setting)
    by = {
        "memorize": {"unknown": ("Z", "M", "W"), "memory": ("E",), "compute": (), "head": ()},
        "compute": {"unknown": (), "memory": (), "compute": ("C",), "head": ("H",)},
        "handover": {"unknown": ("M", "W"), "memory": (), "compute": ("C", "Cw"),
                     "head": ("H", "Hw")},
    }[setting]
    out = {ph: (classes.of(*ks) if ks else np.zeros(0, dtype=np.int64)) for ph, ks in by.items()}
    out["padding"] = classes.values["P"]
    return out


def _check_setting(setting: str) -> None:
    if setting not in SETTINGS:
        raise Tm2nnError(f"unknown setting {setting!r} (one of {', '.join(SETTINGS)})")


# -- the patch domain ------------------------------------------------------------------------
_PRED = {"Z": ("M", "E", "Z"), "E": ("M", "E"), "M": ("M",)}  # what may lie above
_SUCC = {"M": ("M", "E", "Z"), "E": ("E", "Z"), "Z": ("Z",)}  # what may lie below


def _ids(*ks: str) -> np.ndarray:
    return np.array([_ID[k] for k in ks])


def _head_moves(classes: CellClasses, table: MachineTable, packed: np.ndarray) -> np.ndarray:
    """γ's move for head values (STAY for anything else)."""
    out = np.full(packed.shape, STAY, dtype=np.int64)
    hv = classes.of(*HEAD_CLASSES)
    mv = np.array([table.move[classes.head_state[int(v)], classes.head_symbol[int(v)] + 1]
                   for v in hv], dtype=np.int64)
    order = np.argsort(hv)
    i = np.clip(np.searchsorted(hv[order], packed), 0, len(hv) - 1)
    hit = hv[order][i] == packed
    return np.where(hit, mv[order][i], out)


def in_domain(patches, table: MachineTable, setting: str = "all",
              classes: CellClasses | None = None) -> np.ndarray:
    """``bool [N]``: which packed patches lie in the analysed domain of ``setting``
    (``"all"``: any of :data:`SETTINGS`).  Corners are not looked at (B.2 never reads them)."""
    classes = classes or cell_classes(table.code)
    x = check_patches(patches, table.n_digits)
    if setting == "all":
        return (in_domain(x, table, "memorize", classes) | in_domain(x, table, "handover", classes))
    _check_setting(setting)
    k = {n: classes.classify(x[:, p[0], p[1]]) for n, p in POSITIONS.items()}
    if setting == "memorize":
        return _in_memorize(k)
    comp = ("C", "H") if setting == "compute" else COMPUTE_CLASSES
    cells = comp if setting == "compute" else ("M", "W") + COMPUTE_CLASSES
    ok = np.isin(k["c"], _ids(*cells))
    for n in "udlr":
        ok &= np.isin(k[n], _ids(*cells, "P"))
    heads = sum(np.isin(k[n], _ids(*HEAD_CLASSES)).astype(int) for n in POSITIONS)
    ok &= heads <= 1
    if setting == "handover":  # the head-placing pattern happens before any compute phase
        place = (k["c"] == _ID["M"]) & (k["r"] == _ID["W"]) & (k["d"] == _ID["P"])
        nb_compute = np.isin(k["u"], _ids(*COMPUTE_CLASSES)) | np.isin(k["l"], _ids(*COMPUTE_CLASSES))
        ok &= ~(place & nb_compute)
    # a moving head's target is a compute cell without a head
    mv = _head_moves(classes, table, x[:, 1, 1])
    target = ("C",) if setting == "compute" else ("C", "Cw")
    for move, n in ((UP, "u"), (DOWN, "d"), (LEFT, "l"), (RIGHT, "r")):
        ok &= ~((mv == move) & ~np.isin(k[n], _ids(*target)))
    return ok


def _in_memorize(k: dict[str, np.ndarray]) -> np.ndarray:
    c, u, d, l, r = k["c"], k["u"], k["d"], k["l"], k["r"]
    ok = np.zeros(len(c), dtype=bool)
    for cls in ("Z", "M", "E"):
        cid = _ID[cls]
        sel = c == cid
        up = np.isin(u, _ids("P", *_PRED[cls]))
        below = _SUCC[cls] + (("P",) if cls != "M" else ())
        dn = np.isin(d, _ids(*below))
        lf = np.isin(l, _ids("P", cls, "W"))
        rt = np.isin(r, _ids(cls, "W", "P"))
        ok |= sel & up & dn & lf & rt
    sel = c == _ID["W"]
    ok |= (sel & np.isin(u, _ids("W", "P", "M")) & np.isin(d, _ids("W", "P"))
           & np.isin(l, _ids("W", "Z", "M", "E", "P")) & np.isin(r, _ids("W", "P", "Z", "M", "E")))
    # the frame's top mark (learner_form.FRAME): +1/3 at the top-left corner, W below and right
    ok |= (c == _ID["M"]) & (u == _ID["P"]) & (d == _ID["W"]) & (l == _ID["P"]) & (r == _ID["W"])
    return ok


def _product(center, u, d, l, r, filler) -> np.ndarray:
    """All patches with the given value lists per position -> packed [N, 3, 3]."""
    grids = np.meshgrid(center, u, d, l, r, indexing="ij")
    flat = [g.ravel() for g in grids]
    n = len(flat[0])
    out = np.empty((n, 3, 3), dtype=np.int64)
    out[:] = filler
    for v, pos in zip(flat, (CENTER, ABOVE, BELOW, LEFT_OF, RIGHT_OF)):
        out[:, pos[0], pos[1]] = v
    return out


def domain_patches(table: MachineTable, setting: str, classes: CellClasses | None = None,
                   filler: int = P) -> np.ndarray:
    """Every patch of ``setting``'s domain (corners = ``filler``), packed ``[N, 3, 3]``.
    Sizes: ``memorize`` a few hundred; ``compute`` ~ ``4^5 + 3s·(4^4 + 4·4^4)``;
    ``handover`` ~ ``7·8^4 + 4s·(8^4 + 4·7·8^3)``."""
    _check_setting(setting)
    classes = classes or cell_classes(table.code)
    V = classes.values
    parts = []
    if setting == "memorize":
        for cls in ("Z", "M", "E"):
            up = np.concatenate([V[k] for k in ("P",) + _PRED[cls]])
            below = np.concatenate([V[k] for k in _SUCC[cls] + (("P",) if cls != "M" else ())])
            parts.append(_product(V[cls], up, below, classes.of("P", cls, "W"),
                                  classes.of(cls, "W", "P"), filler))
        WP = classes.of("W", "P")
        ZMEWP = classes.of("W", "Z", "M", "E", "P")
        parts.append(_product(V["W"], classes.of("W", "P", "M"), WP, ZMEWP, ZMEWP, filler))
        parts.append(_product(V["M"][V["M"] > 0], V["P"], V["W"], V["P"], V["W"], filler))  # the frame's mark
        out = np.concatenate(parts)
        return out[in_domain(out, table, setting, classes)]
    plain = ("C",) if setting == "compute" else ("M", "W", "C", "Cw")
    heads = ("H",) if setting == "compute" else HEAD_CLASSES
    centers = classes.of(*plain)
    nb = classes.of(*plain, "P")
    hv = classes.of(*heads)
    parts.append(_product(centers, nb, nb, nb, nb, filler))      # no head
    parts.append(_product(hv, nb, nb, nb, nb, filler))           # head in the centre
    for n in "udlr":                                             # head on neighbour n
        lists = {m: (hv if m == n else nb) for m in "udlr"}
        parts.append(_product(centers, lists["u"], lists["d"], lists["l"], lists["r"], filler))
    out = np.concatenate(parts)
    return out[in_domain(out, table, setting, classes)]


# -- conjunctions per B.2 case -----------------------------------------------------------------
@dataclass(frozen=True)
class Conjunction:
    """One B.2 case's condition as a conjunction of value sets: ``literals`` maps a
    position (``c u d l r``) to the packed values that satisfy it there."""

    case: str
    literals: dict[str, np.ndarray]
    note: str = ""
    state: int = -1  # for "tm": the state the head moves in with


def conjunctions(classes: CellClasses, table: MachineTable) -> list[Conjunction]:
    """The conjunctions B.2's cases need on the analysed domain (docs/rcnn.md,
    "Reachability"): single-cell cases need none; these are the rest.

    * f̄_msg case 1: ``x00 = 0`` and ``x_{-1,0} ∈ {p, ±1/3}`` (the only ``p``-or-``val ≠ 0``
      values above a 0 in the domain);
    * case 2: ``(0, above −1/9)`` and ``(±1/3, below −1/9)`` (memory comes from above into
      zeros and from below into memorized rows; W columns never see it);
    * case 3: ``x00 = ±1/3``, ``x_{0,1} = 1``, ``x_{1,0} = p`` (three cells, as B.2 states);
    * case 4: an unknown centre and *any* neighbour in the compute phase — an OR over
      neighbours, counted (see the network);
    * f̄_TM, head beside: a compute centre without a head and the neighbour's head values
      whose γ moves onto the centre, grouped by the new state.
    """
    V = classes.values
    unk = classes.of(*UNKNOWN_CLASSES)
    out = [
        Conjunction("msg1", {"c": V["Z"], "u": classes.of("P", "M")},
                    "x00 = 0 and (x_{-1,0} = p or val(x_{-1,0}, 1) != 0); slope 1 in x00"),
        Conjunction("msg2", {"c": V["Z"], "u": V["E"]}, "above in memory phase"),
    ]
    for v in V["M"]:
        out.append(Conjunction("msg2", {"c": np.array([v]), "d": V["E"]}, "below in memory phase"))
    out.append(Conjunction("msg3", {"c": V["M"], "r": V["W"], "d": V["P"]}, "place the head"))
    for n in "udlr":
        out.append(Conjunction("msg4", {"c": unk, n: classes.of(*COMPUTE_CLASSES)},
                               "a neighbour in the compute phase (OR over u d l r)"))
    hv = classes.of(*HEAD_CLASSES)
    # γ of every head value, once (not once per neighbour and state: O(|hv|), not O(k |hv|))
    hs = np.array([classes.head_state[int(v)] for v in hv], dtype=np.int64)
    hy = np.array([classes.head_symbol[int(v)] + 1 for v in hv], dtype=np.int64)
    moves, nexts = table.move[hs, hy], table.next_state[hs, hy]
    for n, (_pos, toward) in NEIGHBOURS.items():
        for q in range(table.n_states):
            sel = hv[(moves == toward) & (nexts == q)]  # in hv's order, as before
            out.append(Conjunction("tm", {"c": classes.of("C", "Cw"), n: np.asarray(sel, dtype=np.int64)},
                                   f"head {n} moves onto the centre into state {table.code.states[q]}",
                                   q))
    return out


def sample_patches(table: MachineTable, setting: str, n: int, rng: np.random.Generator,
                   classes: CellClasses | None = None) -> np.ndarray:
    """About ``n`` random patches of ``setting``'s domain, without listing it: cells drawn
    from the setting's classes (a head at a random one of the five positions, or none),
    corners random too, then filtered with :func:`in_domain`.  For large ``s``, where
    :func:`domain_patches` runs to millions."""
    _check_setting(setting)
    classes = classes or cell_classes(table.code)
    if setting == "memorize":
        pts = domain_patches(table, setting, classes)
        return pts[rng.choice(len(pts), min(n, len(pts)), replace=False)]
    plain = ("C",) if setting == "compute" else ("M", "W", "C", "Cw")
    heads = ("H",) if setting == "compute" else HEAD_CLASSES
    nb, hv = classes.of(*plain, "P"), classes.of(*heads)
    out, have = [], 0
    while have < n:
        m = 2 * (n - have) + 16
        x = rng.choice(nb, (m, 3, 3))
        x[:, 1, 1] = rng.choice(classes.of(*plain), m)
        where = rng.integers(0, 6, m)  # 5: no head
        for i, pos in enumerate(POSITIONS.values()):
            sel = where == i
            x[sel, pos[0], pos[1]] = rng.choice(hv, int(sel.sum()))
        x = x[in_domain(x, table, setting, classes)]
        out.append(x)
        have += len(x)
    return np.concatenate(out)[:n]
