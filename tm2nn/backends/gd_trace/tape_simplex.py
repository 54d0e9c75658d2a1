"""§4.4 of Welper, *Universality of Gradient Descent Neural Network Training*: the simplex
over (state, symbols under the heads) with tape variables ``T`` and head variables ``H``,
loss (21) with stop-gradients, weights (17), ``b`` per (18), the state tripling for (20)
and the mixed update (22).  Prop. 4.3: the iterates are the machine's configurations and
the loss obeys (23).

The machine is in §4.1's form (:class:`~tm2nn.ir.multitape.MultiTapeMachine`: ``d`` tapes
over ``{-1, 1}``, heads moving ±1, read-only tapes); :mod:`tm2nn.passes.welper_form`
lowers ordinary machines to it.

* Vertices ``V = Qbar x {-1,1}^d`` with ``Qbar = Q x {0, 1, 2}`` (the tripling before
  (20)), ``|V| = 3 |Q| 2^d``; ``x`` is the simplex variable (a torch Parameter).
* ``T in R^{tau x d}``: one entry per cell, the symbol ``±1`` (the paper's encoding).  The
  writable tapes are a Parameter; the read-only tapes are an *input* of the net (§5: a
  hidden layer holding the quantised data), never trained ((22): "the gradient with
  respect to the writable tapes of T only").  ``H in {0,1}^{tau x d}``: one-hot per tape.
* (17): ``omega_v = -b^3 gamma`` on halting vertices, ``omega_vw = -(b^3 + b #{i: t'_i =
  t_i}) gamma`` on edges ``q' = delta_1(q, t)`` (``r' = r + 1 mod 3``), 0 otherwise.
* (18), plus ``b^3 > 8 b^2 d + 3 d`` so that (23)'s halting bound is below ``c``
  (:func:`choose_b`).
* ``l_S(x) = sum_v omega_v l_v^{1/4}(x) + sum_{(v,w) in E} omega_vw lbar_vw(x)``; only the
  edges carry a weight, so the net has ``O(|E|) = O(|V| 2^d)`` ReLU units.  ``lbar_vw`` is
  our two-layer ReLU form (:func:`lbar_all`, docs/gd_trace.md; App. A's (34) is not used).
* Loss (21) is a network-IR net (:meth:`TapeSimplex.net`: Affine, ReLU, Mul,
  StopGradient, Param), emitted to torch for training and to ONNX; the update (22) is
  :class:`~.optimizer.ConditionalGradient`.

A *halting vertex* (a halting state, or ``(q, t)`` without a rule) has no out-edge, writes
back what it reads and does not move, so (22) keeps the iterate there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import product
from typing import TYPE_CHECKING

import numpy as np

from tm2nn import emit
from tm2nn.errors import Tm2nnError
from tm2nn.ir.multitape import MConfig, MultiTapeMachine
from tm2nn.nets import (
    Affine,
    Concat,
    Mul,
    Net,
    Param,
    Port,
    ReLU,
    Slice,
    Space,
    SparseMatrix,
    StopGradient,
)
from tm2nn.options import OptionError

from .lagrange import ell_v_all
from .optimizer import conditional_gradient
from .options import DEFAULT_MAX_DIM

if TYPE_CHECKING:
    import torch

MU = 0.25
#: the vertex sets of the §4.4 simplex: the paper's ``Qbar x {-1, 1}^d``, or the vertices
#: of the tripled states a run can reach (:func:`reachable_rounds`; docs/gd_trace.md)
VERTEX_SETS = ("all", "reachable")
#: the label of simplex vertex ``([q, r], t)``: ``t`` the symbols under the heads, tape 0
#: first, as ``+`` / ``-`` (model files record it: :mod:`.portable`)
VERTEX_LABEL = "s:{state}|{round}|{symbols}"


def choose_b(d: int = 1) -> int:
    """The smallest integer ``b`` with (18) and ``b^3 > 8 b^2 d + 3 d`` (halting loss of
    (23) below ``c``)."""
    b = 1
    while not (b ** 3 >= 0.5 * (b ** 3 + d * b) and 0.5 * b ** 3 - d * b >= 2 * d * b * b
               and b * b > b and b ** 3 > 8 * b * b * d + 3 * d):
        b += 1
    return b


def reachable_rounds(mm: MultiTapeMachine) -> frozenset[tuple[str, int]]:
    """The tripled states ``[q, r]`` of ``Qbar = Q x {0, 1, 2}`` (Welper §4.4, before (20))
    that a path of the rule graph reaches from ``[q0, 0]``: ``[q, r] -> [delta_1(q, t), r +
    1 mod 3]`` for every ``t`` with a rule.  Every run of the machine, on any tapes, visits
    only these (its ``k``-th state is ``[q_k, k mod 3]``), so the vertices ``([q, r], t)``
    with ``[q, r]`` outside this set are never an iterate of (22) and carry no edge of (17)
    that an iterate can take.  A machine whose every path to ``q`` has the same length mod 3
    (an acyclic machine with fixed-length passes, such as the perceptron) keeps one round
    in three.  This is an over-approximation (it ignores the tapes), so it is exact."""
    syms = list(product((-1, 1), repeat=mm.tapes))
    seen = {(mm.start, 0)}
    todo = [(mm.start, 0)]
    while todo:
        q, r = todo.pop()
        if q in mm.halting:
            continue
        for t in syms:
            rule = mm.delta.get((q, t))
            if rule is not None and (rule.next, (r + 1) % 3) not in seen:
                seen.add((rule.next, (r + 1) % 3))
                todo.append((rule.next, (r + 1) % 3))
    return frozenset(seen)


def reachable_reads(mm: MultiTapeMachine, ro_fixed: dict[int, int], lo: int, hi: int):
    """A finer exact reduction when the read-only tape's cells are known up to the data
    (§5: the cells no data bit changes, :meth:`Extended._ro_map`): a path of the rule graph
    over ``([q, r], h)``, ``h`` the read-only head's cell, reading ``ro_fixed[h]`` where the
    cell is fixed and either symbol where data sits (or outside ``[lo, hi]``, where ``h``
    is no longer followed).  Returns ``(vertices, succ)``: the vertices ``([q, r], t)``
    that some such path visits, and for each the read-only symbols its successor can read.
    The §4.1 lowering's simulation phase reads the fixed cells ``-2`` and ``-1`` in turn,
    so half of its (17) edges go to vertices no run takes next.  Only a machine with one
    read-only tape is refined; an over-approximation, so exact."""
    (j0,) = mm.read_only
    syms = list(product((-1, 1), repeat=mm.tapes))
    free = (-1, 1)

    def vals(h):
        return free if h is None else (ro_fixed[h],) if h in ro_fixed else free
    start = (mm.start, 0, 0)
    seen = {start}
    todo = [start]
    verts: set = set()
    succ: dict = {}
    while todo:
        q, r, h = todo.pop()
        here = vals(h)
        for t in syms:
            if t[j0] not in here:
                continue
            verts.add((q, r, t))
            rule = None if q in mm.halting else mm.delta.get((q, t))
            if rule is None:
                continue
            h2 = None if h is None else h + rule.move[j0]
            h2 = h2 if h2 is not None and lo <= h2 <= hi else None
            nxt = (rule.next, (r + 1) % 3, h2)
            succ.setdefault((q, r, t), set()).update(vals(h2))
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return frozenset(verts), succ


def vertex_count(mm: MultiTapeMachine, vertices: str = "all") -> int:
    """``|V|``: ``3 |Q| 2^d`` (``"all"``, the paper's ``Qbar x {-1, 1}^d``), or ``2^d`` per
    reachable tripled state (``"reachable"``, :func:`reachable_rounds`)."""
    if vertices not in VERTEX_SETS:
        raise Tm2nnError(f"vertices must be one of {', '.join(VERTEX_SETS)}, got {vertices!r}")
    q = 3 * len(mm.states) if vertices == "all" else len(reachable_rounds(mm))
    return q * 2 ** mm.tapes


def lbar_all(x: torch.Tensor) -> torch.Tensor:
    """Reference (dense, all pairs) of ``lbar_vw(x)`` (§4.4 properties before Fig. 2,
    ``mu = 1/4``); the net builds the same units for the edges only.

    ``lbar_vw = (P_vw + Q_vw) / 2`` with (``s = sum x``, equal to 1 on ``S``)

    * ``P_vw = relu(4 (x_v + x_w) - 3 s) - l_v^{1/4} - l_w^{1/4}``: 1 at ``e_vw^{1/4}`` and
      ``e_wv^{1/4}``, 0 at every other corner vertex, affine on every corner ``S_u^{1/4}``;
    * ``Q_vw = relu(4 x_v - 2 s) - relu(relu(4 x_v - 2 s) - 4 x_w)`` (``= min(4 x_w,
      relu(4 x_v - 2))`` on ``S``): ``4 x_w`` on ``S_v^{1/4}``, 0 on every other corner.

    So ``lbar_vw(e_vw^{1/4}) = 1``, ``lbar_vw(e_vw^{3/4}) = 1/2`` and 0 at the remaining
    corner vertices.  ``Q`` has a second ReLU layer (the paper's (34) is one layer).  Its
    only kink met at a vertex is at ``e_u``, ``u`` not in ``{v, w}``, where ``Q = 0`` on
    all of ``S_u^{1/4}`` and torch's ``relu'(0) = 0`` gives that zero gradient.
    """
    import torch

    m = x.shape[-1]
    s = x.sum()
    lv = ell_v_all(x, MU)
    p = torch.relu(4.0 * (x[:, None] + x[None, :]) - 3.0 * s) - lv[:, None] - lv[None, :]
    a = torch.relu(4.0 * x - 2.0 * s)[:, None]
    q = a - torch.relu(a - 4.0 * x[None, :])
    out = 0.5 * (p + q)
    return out * (1.0 - torch.eye(m, dtype=x.dtype))


def _affine(name: str, inp: str, rows, cols, vals, shape, out: Space, bias=None, cite: str = "") -> Affine:
    w = SparseMatrix(shape, np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64),
                     np.asarray(vals, dtype=np.float64))
    return Affine(name, (inp,), weight=w, bias=bias, out=out, cite=cite)


@dataclass(frozen=True)
class TraceStep44:
    """Optimizer step ``k``: the decoded configuration (absolute cells), the loss and
    whether the iterate sits at a halting vertex."""

    k: int
    config: MConfig
    loss: float
    halted: bool


class TapeSimplex:
    """The §4.4 loss (21) for one §4.1 machine on the window ``left .. left + tau - 1`` of
    every tape."""

    def __init__(self, mm: MultiTapeMachine, tau: int, left: int, b: float | None = None,
                 gamma: float = 1.0, c: float = 0.0, max_dim: int = DEFAULT_MAX_DIM, vertices: str = "all",
                 ro_fixed: dict[int, int] | None = None):
        if not isinstance(mm, MultiTapeMachine):
            raise Tm2nnError("the §4.4 GD trace takes a machine in Welper §4.1 form "
                             "(tm2nn.passes.welper_form lowers ordinary machines)")
        d = mm.tapes
        self.machine, self.tau, self.left, self.d = mm, tau, left, d
        self.gamma, self.c = float(gamma), float(c)
        self.b = float(choose_b(d) if b is None else b)
        if b is not None and not self.b ** 3 > 8 * self.b ** 2 * d + 3 * d:
            raise OptionError(f"{{b}} = {self.b:g} breaks (18): b^3 > 8 b^2 d + 3 d with d = {d} tapes fails "
                              f"(the default is the smallest integer that satisfies (18): {choose_b(d)})", "b")
        self.ro = sorted(mm.read_only)
        self.rw = list(mm.writable)
        syms = list(product((-1, 1), repeat=d))
        n_v = vertex_count(mm, vertices)
        n_e = n_v * len(syms)
        self.vertices = vertices
        succ = None
        if vertices == "reachable" and ro_fixed is not None and len(mm.read_only) == 1:
            keep_t, succ = reachable_reads(mm, ro_fixed, left, left + tau - 1)
            n_v = len(keep_t)
            n_e = sum(len(v) for v in succ.values()) * 2 ** (d - 1)
        dim = n_v + 2 * tau * d
        if dim > max_dim or n_e > 20 * max_dim:
            raise Tm2nnError(f"§4.4 variables would have dimension {dim} with {n_e} edge units "
                             f"(limit {max_dim}); use a smaller tape or raise the limit")
        keep = reachable_rounds(mm) if vertices == "reachable" else None
        self.verts = [(q, r, t) for q in mm.states for r in range(3) if keep is None or (q, r) in keep
                      for t in syms if succ is None or (q, r, t) in keep_t]
        self.vidx = {v: i for i, v in enumerate(self.verts)}
        m = len(self.verts)
        b, g = self.b, self.gamma
        self.halting = np.zeros(m, dtype=bool)
        self.down = np.zeros((d, m))    # T_down e_{q,t} = t
        self.arrow = np.zeros((d, m))   # T_arrow e_{q,t} = delta_2(q, t)
        self.shift = np.zeros((d, m), dtype=np.int64)  # delta_3(q, t); 0 at halting vertices
        edges: list[tuple[int, int, float]] = []
        for i, (q, r, t) in enumerate(self.verts):
            self.down[:, i] = t
            rule = None if q in mm.halting else mm.delta.get((q, t))
            if rule is None:  # halting: no out-edge, writes back t, stays
                self.halting[i] = True
                self.arrow[:, i] = t
                continue
            self.arrow[:, i] = rule.write
            self.shift[:, i] = rule.move
            for t2 in syms:  # (17): every t' is a legitimate successor symbol
                if succ is not None and t2[self.ro[0]] not in succ[(q, r, t)]:
                    continue   # a read-only symbol the next cell cannot hold (reachable_reads)
                same = sum(a == c2 for a, c2 in zip(t, t2))
                edges.append((i, self.vidx[(rule.next, (r + 1) % 3, t2)], -(b ** 3 + b * same) * g))
        pairs = {(v, w) for v, w, _ in edges}
        if any((w, v) in pairs for v, w in pairs):
            raise AssertionError("(20) violated")
        self.edges = np.array([(v, w) for v, w, _ in edges], dtype=np.int64).reshape(-1, 2)
        self.omega_e = np.array([o for _, _, o in edges])
        self.omega_v = np.where(self.halting, -b ** 3 * g, 0.0)

    @property
    def m(self) -> int:
        return len(self.verts)

    def omega_vw(self) -> np.ndarray:
        """The dense ``m x m`` matrix of (17) (for tests and reports)."""
        om = np.zeros((self.m, self.m))
        om[self.edges[:, 0], self.edges[:, 1]] = self.omega_e
        return om

    # -- the net ---------------------------------------------------------------------------
    def labels(self) -> dict[str, Space]:
        tau = self.tau
        vert = Space(tuple(VERTEX_LABEL.format(state=q, round=r, symbols="".join("+" if a > 0 else "-" for a in t))
                           for q, r, t in self.verts))
        cells = lambda tapes, g: Space(tuple(f"{g}{j}:{self.left + i}" for j in tapes for i in range(tau)))  # noqa: E731
        return {"s": vert, "T": cells(self.rw, "T"), "ro": cells(self.ro, "T"),
                "H": cells(range(self.d), "H")}

    @cached_property
    def net(self) -> Net:
        """Loss (21) as a network-IR net: input ``ro`` (the read-only tapes, ``tau`` cells
        each, tape-major; a constant ``one`` when there are none), Params ``s``, ``T``, ``H``;
        output ``loss`` (one dim)."""
        lab = self.labels()
        port = Port("ro", lab["ro"]) if self.ro else Port("one", Space(("one:1",)))
        ops = self.state_ops(port.name, "ro" if self.ro else None)
        ops, loss = self.loss_ops(ops, "s", "tape", "H", "")
        return Net("welper_loss21", (port,), tuple(ops), (loss,),
                   {"construction": "Welper §4.4 loss (21)"})

    def state_ops(self, ref: str, ro: str | None, pre: str = "") -> list:
        """The Params ``s``, ``T``, ``H`` (values read for their batch size from ``ref``)
        and the value ``tape`` (every tape, tape-major) built from ``ro`` (the read-only
        tapes' value, or None when there are none) and ``T``."""
        lab = self.labels()
        ops = [Param(pre + "s", (ref,), value=np.zeros(self.m), out=lab["s"], cite="Welper §4.4 simplex S"),
               Param(pre + "T", (ref,), value=np.full(len(lab["T"]), -1.0), out=lab["T"],
                     cite="Welper §4.4 tape variable T (writable tapes)"),
               Param(pre + "H", (ref,), value=np.zeros(self.tau * self.d), out=lab["H"],
                     cite="Welper §4.4 head variable H")]
        order = self.ro + self.rw
        ops.append(Concat(pre + "tape_cat", (ro, pre + "T") if self.ro else (pre + "T",)))
        perm = [order.index(j) * self.tau + i for j in range(self.d) for i in range(self.tau)]
        ops.append(Slice(pre + "tape", (pre + "tape_cat",), indices=perm))
        return ops

    def loss_ops(self, ops: list, x: str, tape: str, head: str, pre: str) -> tuple[list, str]:
        """Append the ops of loss (21) reading the simplex value ``x``, the tapes ``tape``
        (``d * tau``, tape-major) and the heads ``head``; return ``(ops, loss value)``.
        §5's extended network calls this with its own values."""
        m, d, tau = self.m, self.d, self.tau
        b, g = self.b, self.gamma
        n = lambda s: pre + s  # noqa: E731
        # x -> [x ; sum x]  (the sum enters every Lagrange unit)
        ops.append(_affine(n("xs"), x, list(range(m)) + [m] * m, list(range(m)) * 2, [1.0] * (2 * m),
                           (m + 1, m), Space(tuple(f"xs:{i}" for i in range(m)) + ("xs:sum",)),
                           cite="Welper App. A: [x; Σx], the sum every Lagrange unit reads (Σx = 1 on the simplex)"))
        S = m  # column of sum x
        # layer 1: l_v^{1/4} pre-activations (Lemma A.1 closed form), P_vw, a_v
        e = self.edges
        ne = len(e)
        sources = sorted(set(e[:, 0].tolist()))
        rows, cols, vals, bias, labs = [], [], [], [], []
        dmu = ((1.0 - MU) * m - 1.0) / (MU * m)
        for v in range(m):  # (m x_v - s)/(mu m) - d_mu
            rows += [len(bias)] * 2
            cols += [v, S]
            vals += [1.0 / MU, -1.0 / (MU * m)]
            bias.append(-dmu)
            labs.append(f"l:{v}")
        for k, (v, w) in enumerate(e):  # 4 (x_v + x_w) - 3 s
            rows += [len(bias)] * 3
            cols += [v, w, S]
            vals += [4.0, 4.0, -3.0]
            bias.append(0.0)
            labs.append(f"P:{k}")
        a_row = {}
        for v in sources:  # 4 x_v - 2 s
            a_row[v] = len(bias)
            rows += [len(bias)] * 2
            cols += [v, S]
            vals += [4.0, -2.0]
            bias.append(0.0)
            labs.append(f"a:{v}")
        n1 = len(bias)
        ops.append(_affine(n("lag1"), n("xs"), rows, cols, vals, (n1, m + 1), Space(tuple(labs)),
                           bias=np.array(bias), cite="Welper App. A Lemma A.1; lbar_vw (docs/gd_trace.md)"))
        ops.append(ReLU(n("lag1r"), (n("lag1"),)))
        # layer 2: relu(a_v - 4 x_w) per edge, reading [relu1 ; xs]
        ops.append(Concat(n("lag2in"), (n("lag1r"), n("xs"))))
        rows = np.repeat(np.arange(ne), 2)
        cols = np.stack([[a_row[int(v)] for v in e[:, 0]], n1 + e[:, 1]], axis=1).ravel()
        vals = np.tile([1.0, -4.0], ne)
        ops.append(_affine(n("lag2"), n("lag2in"), rows, cols, vals, (ne, n1 + m + 1),
                           Space(tuple(f"Q:{k}" for k in range(ne))), cite="lbar_vw second layer (docs/gd_trace.md)"))
        ops.append(ReLU(n("lag2r"), (n("lag2"),)))

        # tape terms.  xg = stop-gradient(x), hg = stop-gradient(H)
        ops.append(StopGradient(n("xg"), (x,)))
        ops.append(StopGradient(n("hg"), (head,)))
        # per tape j and move delta in (-1, 0, +1): m_{j,delta}(x) = sum of x_v over the
        # vertices moving head j by delta (halting vertices: delta = 0), then replicated
        # over the tau cells
        moves = (-1, 0, 1)
        rows, cols = [], []
        for j in range(d):
            for di, dl in enumerate(moves):
                vs = np.flatnonzero(self.shift[j] == dl) if dl else np.flatnonzero(self.halting)
                rows += [j * 3 + di] * len(vs)
                cols += vs.tolist()
        ops.append(_affine(n("mv"), n("xg"), rows, cols, [1.0] * len(rows), (3 * d, m),
                           Space(tuple(f"mv{j}:{'-0+'[di]}" for j in range(d) for di in range(3))),
                           cite="Welper §4.4 shift S(x): weight of each move"))
        lab3 = Space(tuple(f"mv{j}{'-0+'[di]}:{i}" for j in range(d) for di in range(3) for i in range(tau)))
        ops.append(_affine(n("mvx"), n("mv"), np.arange(3 * d * tau), np.repeat(np.arange(3 * d), tau),
                           np.ones(3 * d * tau), (3 * d * tau, 3 * d), lab3,
                           cite="Welper §4.4 shift S(x): each move's weight copied over the tau cells"))
        # shifted copies of H: (Sh_delta H)_{j,i} = H_{j, i - delta} (the indicator moves delta right)
        rows, cols = [], []
        for j in range(d):
            for di, dl in enumerate(moves):
                for i in range(tau):
                    src = i - dl
                    if 0 <= src < tau:
                        rows.append((j * 3 + di) * tau + i)
                        cols.append(j * tau + src)
        ops.append(_affine(n("shH"), n("hg"), rows, cols, [1.0] * len(rows), (3 * d * tau, d * tau),
                           Space(tuple("sh" + s[2:] for s in lab3.labels)),
                           cite="Welper §4.4 shift S(x)H: the head indicator H moved by each delta"))
        ops.append(Mul(n("mvH"), (n("mvx"), n("shH")), out=Space(tuple("p" + s for s in lab3.labels))))
        # S(x)H (all moves) and its moving part (delta = ±1)
        rows, cols, vals = [], [], []
        for j in range(d):
            for di in range(3):
                for i in range(tau):
                    rows += [j * tau + i, d * tau + j * tau + i] if di != 1 else [j * tau + i]
                    cols += [(j * 3 + di) * tau + i] * (2 if di != 1 else 1)
                    vals += [1.0, 1.0] if di != 1 else [1.0]
        cell = lambda g0: [f"{g0}{j}:{self.left + i}" for j in range(d) for i in range(tau)]  # noqa: E731
        ops.append(_affine(n("SH"), n("mvH"), rows, cols, vals, (2 * d * tau, 3 * d * tau),
                           Space(tuple(cell("SH") + cell("SHmove"))), cite="Welper §4.4 S(x)H"))
        ops.append(Slice(n("SHall"), (n("SH"),), indices=range(d * tau)))
        ops.append(Slice(n("SHmove"), (n("SH"),), indices=range(d * tau, 2 * d * tau)))
        # T^T [H] (write term) and T^T [S(x)H moving part] (read term), per tape
        ops.append(Mul(n("TH"), (tape, n("hg")), out=Space(tuple(cell("TH")))))
        ops.append(Mul(n("TSH"), (tape, n("SHmove")), out=Space(tuple(cell("TSH")))))
        ops.append(Concat(n("prods"), (n("TH"), n("TSH"), x, n("SHall"), head)))
        # residuals: w1 = T^T[H] - [T_arrow x]; w2 = [read] - T_down x, with the stay part of
        # the read T_arrow x at halting vertices; w3 = [S(x)H] - H.  Entries inside a
        # stop-gradient read ``prods_sg`` (the same values, gradient cut).
        ent: list[tuple[int, int, float, bool]] = []  # (row, col, value, under sg)
        o_x, o_sh, o_h = 2 * d * tau, 2 * d * tau + m, 3 * d * tau + m
        for j in range(d):
            for i in range(tau):
                ent.append((j, j * tau + i, 1.0, False))                 # T^T [H]
                ent.append((d + j, d * tau + j * tau + i, 1.0, True))    # [T^T S(x) H]
            for v in range(m):
                if self.arrow[j, v]:
                    ent.append((j, o_x + v, -self.arrow[j, v], True))    # -[T_arrow x]
                if self.halting[v] and self.arrow[j, v]:
                    ent.append((d + j, o_x + v, self.arrow[j, v], True))  # [stay read]
                if self.down[j, v]:
                    ent.append((d + j, o_x + v, -self.down[j, v], False))  # -T_down x
        for k in range(d * tau):
            ent += [(2 * d + k, o_sh + k, 1.0, True), (2 * d + k, o_h + k, -1.0, False)]
        nres = 2 * d + d * tau
        res_lab = Space(tuple([f"w1:{j}" for j in range(d)] + [f"w2:{j}" for j in range(d)] + cell("w3")))
        ops.append(StopGradient(n("prods_sg"), (n("prods"),)))

        def part(sg: bool) -> SparseMatrix:
            sel = [e_ for e_ in ent if e_[3] == sg]
            return SparseMatrix((nres, o_h + d * tau), np.array([e_[0] for e_ in sel]),
                                np.array([e_[1] for e_ in sel]), np.array([e_[2] for e_ in sel], dtype=np.float64))
        ops.append(Affine(n("res_live"), (n("prods"),), weight=part(False), out=res_lab,
                          cite="Welper (21) residuals w1-w3: the terms outside a stop-gradient"))
        ops.append(Affine(n("res_sg"), (n("prods_sg"),), weight=part(True),
                          out=Space(tuple("g" + s_ for s_ in res_lab.labels)),
                          cite="Welper (21) residuals w1-w3: the terms inside a stop-gradient (§4.4 before (21))"))
        ops.append(Concat(n("res2"), (n("res_live"), n("res_sg"))))
        ops.append(_affine(n("res"), n("res2"), list(range(nres)) * 2, list(range(2 * nres)),
                           [1.0] * (2 * nres), (nres, 2 * nres), res_lab, cite="Welper (21) residuals"))
        ops.append(Mul(n("sq"), (n("res"), n("res")), out=Space(tuple("sq" + s[1:] for s in res_lab.labels))))
        # loss = c + l_S + gamma/2 |w1|^2 + 4 b^2 gamma/2 |w2|^2 + gamma/2 |w3|^2
        ops.append(Concat(n("terms"), (n("lag1r"), n("lag2r"), n("sq"))))
        cols, vals = [], []
        for v in range(m):
            if self.omega_v[v]:
                cols.append(v)
                vals.append(self.omega_v[v])
        # lbar_vw = (P + Q)/2 with P = relu_P - l_v - l_w, Q = a_v - relu2
        lcoef = np.zeros(m)
        acoef = {}
        for k, ((v, w), om) in enumerate(zip(e, self.omega_e)):
            cols.append(m + k)
            vals.append(om / 2)
            lcoef[v] -= om / 2
            lcoef[w] -= om / 2
            acoef[int(v)] = acoef.get(int(v), 0.0) + om / 2
            cols.append(n1 + k)
            vals.append(-om / 2)
        for v in np.flatnonzero(lcoef):
            cols.append(int(v))
            vals.append(lcoef[v])
        for v, a in acoef.items():
            cols.append(a_row[v])
            vals.append(a)
        o_sq = n1 + ne
        for j in range(d):
            cols += [o_sq + j, o_sq + d + j]
            vals += [g / 2, 4 * b * b * g / 2]
        for k in range(d * tau):
            cols.append(o_sq + 2 * d + k)
            vals.append(g / 2)
        w = SparseMatrix.from_dense(_sum_rows(cols, vals, o_sq + nres))
        ops.append(Affine(n("loss"), (n("terms"),), weight=w, bias=np.array([self.c]),
                          out=Space(("loss:l_TM",)), cite="Welper (21)"))
        return ops, n("loss")

    # -- encode / decode -------------------------------------------------------------------
    def start(self, tapes) -> dict[str, np.ndarray]:
        """The start iterate for start tapes ``tapes[j]`` (cells holding +1, heads at 0):
        ``s = e_{([q0, 0], t0)}``, ``T``, ``H`` and the read-only input ``ro``."""
        tau, left = self.tau, self.left
        if left > 0 or left + tau <= 0:
            raise Tm2nnError(f"tape window [{left}, {left + tau}) does not hold the start cell 0")
        full = np.full((self.d, tau), -1.0)
        for j, cells in enumerate(tapes):
            for c in cells:
                if not left <= c < left + tau:
                    raise Tm2nnError(f"tape {j}: input cell {c} is outside the window [{left}, {left + tau})")
                full[j, c - left] = 1.0
        H = np.zeros((self.d, tau))
        H[:, -left] = 1.0
        t0 = tuple(int(full[j, -left]) for j in range(self.d))
        s = np.zeros(self.m)
        s[self.vidx[(self.machine.start, 0, t0)]] = 1.0
        return {"s": s, "T": full[self.rw].ravel(), "H": H.ravel(),
                "ro": full[self.ro].ravel() if self.ro else np.ones(1)}

    def decode(self, s, T, H, ro, tol: float = 1e-6) -> tuple[MConfig, bool]:
        """(configuration, halted) from an iterate; refuses non-integral iterates and a
        vertex whose symbols differ from the tapes under the heads."""
        def onehot(v, what):
            v = np.asarray(v, dtype=np.float64)
            i = int(np.argmax(v))
            if abs(v[i] - 1.0) > tol or np.abs(np.delete(v, i)).max(initial=0.0) > tol:
                raise ValueError(f"{what} is not integral")
            return i
        tau = self.tau
        v = onehot(s, "s")
        q, _, t = self.verts[v]
        full = np.zeros((self.d, tau))
        if self.ro:
            full[self.ro] = np.asarray(ro, dtype=np.float64).reshape(len(self.ro), tau)
        full[self.rw] = np.asarray(T, dtype=np.float64).reshape(len(self.rw), tau)
        if np.abs(np.abs(full) - 1.0).max() > tol:
            raise ValueError("T is not integral")
        Hm = np.asarray(H, dtype=np.float64).reshape(self.d, tau)
        heads = tuple(onehot(Hm[j], f"H (tape {j})") for j in range(self.d))
        under = tuple(int(np.sign(full[j, h])) for j, h in enumerate(heads))
        if under != t:
            raise ValueError(f"vertex symbols {t} differ from the tapes under the heads {under}")
        tapes = tuple(frozenset(self.left + int(i) for i in np.flatnonzero(full[j] > 0)) for j in range(self.d))
        return MConfig(q, tuple(self.left + h for h in heads), tapes), bool(self.halting[v])

    def bounds23(self, halted: bool) -> tuple[float, float]:
        """Prop. 4.3's (23): ``[c, c + 8 b^2 d g + 3 d g]`` before halting, upper bound
        lowered by ``b^3 g`` at the halting vertex (lower bound then ``c - b^3 g``)."""
        b, g, c, d = self.b, self.gamma, self.c, self.d
        hi = c + 8 * b * b * d * g + 3 * d * g
        return (c - b ** 3 * g, hi - b ** 3 * g) if halted else (c, hi)


def _sum_rows(cols, vals, width: int) -> np.ndarray:
    w = np.zeros((1, width))
    np.add.at(w[0], np.asarray(cols, dtype=np.int64), np.asarray(vals, dtype=np.float64))
    return w


class Tracer44:
    """Runs (22) on the emitted torch module of :attr:`TapeSimplex.net` (float64), or on
    ``module``, a module of that net (a compiled model's, with its own weights)."""

    def __init__(self, ts: TapeSimplex, tapes, dtype=None, module=None):
        import torch

        dtype = torch.float64 if dtype is None else dtype
        self.ts = ts
        self.module = emit.to_torch(ts.net, dtype) if module is None else module
        st = ts.start(tapes)
        with torch.no_grad():
            for k in ("s", "T", "H"):
                self.module.op(k).value.copy_(torch.from_numpy(st[k]))
        self.ro = torch.from_numpy(st["ro"]).to(dtype)[None, :]
        g = ts.gamma
        self.opt = conditional_gradient([
            {"params": [self.module.op("s").value], "kind": "simplex"},
            {"params": [self.module.op("T").value, self.module.op("H").value], "kind": "gd", "lr": 1.0 / g},
        ])

    def values(self) -> dict[str, np.ndarray]:
        return {k: self.module.op(k).value.detach().numpy().copy() for k in ("s", "T", "H")}

    def loss(self) -> torch.Tensor:
        return self.module(self.ro)[0, 0]

    def loss_value(self) -> float:
        import torch

        with torch.no_grad():
            return float(self.loss())

    def decode(self) -> tuple[MConfig, bool]:
        v = self.values()
        return self.ts.decode(v["s"], v["T"], v["H"], self.ro[0].numpy())

    def step(self) -> float:
        """One update (22); returns the loss at the iterate it started from.  The head
        leaving the window raises :class:`Tm2nnError`."""
        self.opt.zero_grad()
        loss = self.loss()
        loss.backward()
        self.opt.step()
        loss = loss.detach()
        H = self.module.op("H").value.detach().numpy().reshape(self.ts.d, self.ts.tau)
        if np.abs(H.sum(axis=1) - 1.0).max() > 1e-6:
            raise Tm2nnError(f"a head leaves the tape window [{self.ts.left}, {self.ts.left + self.ts.tau}) "
                             f"(§4.1 assumes tau = {self.ts.tau} cells)")
        return float(loss)


def trace44(mm: MultiTapeMachine, tapes, steps: int, tau: int, left: int, b: float | None = None,
            gamma: float = 1.0, c: float = 0.0) -> list[TraceStep44]:
    """Run (22) for ``steps`` iterations from the start configuration and decode every
    iterate (Prop. 4.3)."""
    ts = TapeSimplex(mm, tau, left, b=b, gamma=gamma, c=c)
    tr = Tracer44(ts, tapes)
    out = []
    for k in range(steps + 1):
        cfg, halted = tr.decode()
        loss = tr.loss_value() if k == steps else tr.step()
        out.append(TraceStep44(k, cfg, loss, halted))
    return out
