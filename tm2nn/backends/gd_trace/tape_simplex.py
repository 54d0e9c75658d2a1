"""§4.4 of Welper, *Universality of Gradient Descent Neural Network Training*: the simplex
over (state, symbol under the head) with tape variables ``T`` and head variables ``H``,
loss (21) with stop-gradients, weights (17), ``b`` per (18), the state tripling for (20)
and the mixed update (22).  Prop. 4.3: the iterates are the machine's configurations and
the loss obeys (23).

One tape over the IR's own alphabet ``Gamma`` (``d = 1``; not the paper's ``d`` tapes over
``{-1, 1}``):

* Vertices ``V = Qbar x Gamma`` with ``Qbar = Q x {0, 1, 2}`` (the tripling before (20)).
  ``|V| = 3 |Q| |Gamma|``.
* ``T in R^{tau x |Gamma|}``: one one-hot row per cell (symbol encoding), so the
  "tape symbol" ``T^T H`` is a one-hot vector in ``R^Gamma`` and ``T_down x``,
  ``T_arrow x`` are one-hot too.  ``H in {0,1}^tau`` is one-hot (the head cell).
* (17): ``omega_v = -b^3 gamma`` on halting vertices, ``omega_vw = -(b^3 + b [t' = t])
  gamma`` on edges ``q' = delta_1(q, t)`` (with ``r' = r + 1 mod 3``), 0 otherwise.
* (18) with ``d = 1``; we also take ``b^3 > 8 b^2 d + 3 d`` so that (23)'s halting bound is
  below ``c`` (the paper: "for b sufficiently large"); :func:`choose_b` gives ``b = 9``.
* ``l_S(x) = sum_v omega_v l_v^{1/4}(x) + sum_{(v,w) in E} omega_vw lbar_vw(x)``; see
  :func:`lbar_all` for our ReLU construction of ``lbar_vw`` (App. A (34) is not used).
* Loss (21) in :meth:`TapeSimplex.loss` (``detach`` = stop-gradient), step (22) in
  :meth:`TapeSimplex.step`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import run_machine
from tm2nn.ir.machine import MOVE_DELTA, Machine

from .config_simplex import start_config, window_for
from .lagrange import ell_v_all

DEFAULT_MAX_DIM = 20000


def choose_b(d: int = 1) -> int:
    """The smallest integer ``b`` with (18) and ``b^3 > 8 b^2 d + 3 d`` (halting loss of
    (23) below ``c``)."""
    b = 1
    while not (b ** 3 >= 0.5 * (b ** 3 + d * b) and 0.5 * b ** 3 - d * b >= 2 * d * b * b
               and b * b > b and b ** 3 > 8 * b * b * d + 3 * d):
        b += 1
    return b


def lbar_all(x: torch.Tensor) -> torch.Tensor:
    """The ``m x m`` matrix of ``lbar_vw(x)`` (§4.4 properties before Fig. 2, ``mu = 1/4``).

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
    m = x.shape[-1]
    s = x.sum()
    lv = ell_v_all(x, 0.25)
    p = torch.relu(4.0 * (x[:, None] + x[None, :]) - 3.0 * s) - lv[:, None] - lv[None, :]
    a = torch.relu(4.0 * x - 2.0 * s)[:, None]
    q = a - torch.relu(a - 4.0 * x[None, :])
    out = 0.5 * (p + q)
    return out * (1.0 - torch.eye(m, dtype=x.dtype))


@dataclass(frozen=True)
class TapeState:
    """A decoded iterate: machine state, absolute head cell, non-blank cells."""

    state: str
    head: int
    cells: dict
    halted: bool


@dataclass(frozen=True)
class TraceStep44:
    k: int
    config: TapeState
    loss: float


class TapeSimplex:
    """The §4.4 loss (21) for one machine on the window ``left .. left + tau - 1``."""

    def __init__(self, m: Machine, tau: int, left: int, b: float | None = None,
                 gamma: float = 1.0, c: float = 0.0, max_dim: int = DEFAULT_MAX_DIM):
        if not isinstance(m, Machine) or m.tape_kind != "line":
            raise Tm2nnError("the §4.4 GD trace handles line machines only")
        self.machine, self.tau, self.left = m, tau, left
        self.gamma, self.c = float(gamma), float(c)
        self.b = float(choose_b(1) if b is None else b)
        self.syms = list(m.alphabet)
        self.sidx = {a: i for i, a in enumerate(self.syms)}
        G = len(self.syms)
        # vertices ([q, r], t): the tripling before (20)
        self.verts = [(q, r, a) for q in m.states for r in range(3) for a in self.syms]
        nV = len(self.verts)
        dim = nV + tau * G + tau
        if dim > max_dim:
            raise Tm2nnError(f"§4.4 variables would have dimension {dim} (limit {max_dim}); "
                             "use a smaller tape or raise the limit")
        self.vidx = {v: i for i, v in enumerate(self.verts)}
        b, g = self.b, self.gamma
        self.halting = np.zeros(nV, dtype=bool)
        self.down = np.zeros((G, nV))    # T_down e_{q,t} = t
        self.arrow = np.zeros((G, nV))   # T_arrow e_{q,t} = delta_2(q, t)
        self.shift = np.zeros(nV, dtype=np.int64)  # delta_3(q, t)
        self.next_q = [None] * nV
        om = np.zeros((nV, nV))
        for i, (q, r, a) in enumerate(self.verts):
            self.down[self.sidx[a], i] = 1.0
            rule = None if q in m.halting else m.delta.get((q, a))
            if rule is None:  # halting state or missing rule: no out-edge, stays
                self.halting[i] = True
                self.arrow[self.sidx[a], i] = 1.0
                continue
            self.arrow[self.sidx[rule.write], i] = 1.0
            self.shift[i] = MOVE_DELTA[rule.move][1]
            self.next_q[i] = (rule.next, (r + 1) % 3)
            for a2 in self.syms:  # (17): every t' is a legitimate successor symbol
                j = self.vidx[(rule.next, (r + 1) % 3, a2)]
                om[i, j] = -(b ** 3 + (b if a2 == a else 0.0)) * g
        assert not np.any((om != 0) & (om.T != 0)), "(20) violated"
        self.omega_v = np.where(self.halting, -b ** 3 * g, 0.0)
        self.omega_vw = om
        t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
        self._wv, self._om = t(self.omega_v), t(om)
        self._down, self._arrow = t(self.down), t(self.arrow)
        self._stay = t((self.shift == 0).astype(float))
        # shift matrices Sh[d] with (Sh H)_i = H_{i + d} for d in {-1, 0, 1}
        self._sh = {d: t(np.eye(tau, k=d)) for d in (-1, 0, 1)}
        self._move = {d: t((self.shift == d) & ~self.halting | ((d == 0) & self.halting))
                      for d in (-1, 0, 1)}

    @property
    def m(self) -> int:
        return len(self.verts)

    # -- pieces of (21) --------------------------------------------------------------------
    def ell_S(self, x: torch.Tensor) -> torch.Tensor:
        """``l_S(x) = sum_v omega_v l_v^{1/4}(x) + sum_{v,w} omega_vw lbar_vw(x)`` (before (21))."""
        return (self._wv * ell_v_all(x, 0.25)).sum() + (self._om * lbar_all(x)).sum()

    def shifted_head(self, x: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
        """``S(x) H = sum_v x_v Sh_{delta_3(v)} H`` (bilinear; the head after the move).
        ``Sh_d`` maps ``H`` to ``h_{i - d}``, i.e. the indicator moves ``d`` cells right
        (the paper's ``h_{i + delta_3}`` with its sign convention for moves)."""
        out = torch.zeros_like(H)
        for d, sel in self._move.items():
            out = out + (x * sel).sum() * (self._sh[-d] @ H) if d else out + (x * sel).sum() * H
        return out

    def read_next(self, x, T, H) -> torch.Tensor:
        """The symbol at the next head position, ``diag(T^T S(x) H)`` of (21).  For a stay
        move (``delta_3 = 0``, not in the paper) the next cell is the cell just written, so
        the read is ``T_arrow x`` for those vertices (decision 4 in docs)."""
        stay = (x * self._stay).sum()
        return T.T @ (self.shifted_head(x, H) - stay * H) + self._arrow @ (x * self._stay)

    def loss(self, x, T, H) -> torch.Tensor:
        """Loss (21), stop-gradient ``\\.\\`` = ``detach``:
        ``c + l_S(x) + g/2 |T^T \\H\\ - \\T_arrow x\\|^2 + 4 b^2 g/2 |\\read\\ - T_down x|^2
        + g/2 |\\S(x) H\\ - H|^2`` (term 1 writes, term 2 reads, term 3 moves)."""
        g, b = self.gamma, self.b
        w1 = T.T @ H.detach() - (self._arrow @ x).detach()
        w2 = self.read_next(x, T, H).detach() - self._down @ x
        w3 = self.shifted_head(x, H).detach() - H
        return (self.c + self.ell_S(x) + 0.5 * g * (w1 ** 2).sum()
                + 0.5 * 4 * b * b * g * (w2 ** 2).sum() + 0.5 * g * (w3 ** 2).sum())

    def step(self, x, T, H):
        """Update (22): ``x_{k+1} = argmin_{y in S} d_{y-x} l = e_u`` with ``u`` minimising
        ``<grad_x l, e_u>`` (autograd at the vertex, as §4.3), ``T_{k+1} = T - grad_T l /
        gamma``, ``H_{k+1} = H - grad_H l / gamma``.  The head leaving the window raises."""
        x = x.detach().requires_grad_(True)
        T = T.detach().requires_grad_(True)
        H = H.detach().requires_grad_(True)
        gx, gT, gH = torch.autograd.grad(self.loss(x, T, H), (x, T, H))
        H1 = (H - gH / self.gamma).detach()
        if abs(float(H1.sum()) - 1.0) > 1e-9:
            raise Tm2nnError(f"the head leaves the tape window [{self.left}, "
                             f"{self.left + self.tau}) (§4.1 assumes tau = {self.tau} cells)")
        gs = torch.sort(gx).values
        if gs[1] - gs[0] < 1e-9:
            raise RuntimeError("conditional-gradient vertex is not unique; (18) violated")
        x1 = torch.zeros_like(x)
        x1[int(torch.argmin(gx))] = 1.0
        return x1, (T - gT / self.gamma).detach(), H1

    # -- encode / decode -------------------------------------------------------------------
    def start(self, input: str):
        m, tau, left = self.machine, self.tau, self.left
        tape = start_config(m, input, tau, left).tape
        T = torch.zeros(tau, len(self.syms), dtype=torch.float64)
        for i, a in enumerate(tape):
            T[i, self.sidx[a]] = 1.0
        H = torch.zeros(tau, dtype=torch.float64)
        H[-left] = 1.0
        x = torch.zeros(self.m, dtype=torch.float64)
        x[self.vidx[(m.start, 0, tape[-left])]] = 1.0
        return x, T, H

    def decode(self, x, T, H) -> TapeState:
        """(state, head, tape) from (vertex, T, H); refuses non-integral iterates and a
        vertex symbol that differs from the tape under the head."""
        def onehot(v):
            v = np.asarray(v.detach())
            i = int(np.argmax(v))
            if abs(v[i] - 1.0) > 1e-9 or np.abs(np.delete(v, i)).max(initial=0.0) > 1e-9:
                raise ValueError("iterate is not integral")
            return i
        q, _, a = self.verts[onehot(x)]
        h = onehot(H)
        tape = [self.syms[onehot(T[i])] for i in range(self.tau)]
        if tape[h] != a:
            raise ValueError("vertex symbol differs from the tape under the head")
        cells = {self.left + i: s for i, s in enumerate(tape) if s != self.machine.blank}
        return TapeState(q, self.left + h, cells, bool(self.halting[onehot(x)]))

    def bounds23(self, halted: bool) -> tuple[float, float]:
        """Prop. 4.3's (23) with ``d = 1``: ``[c, c + 8 b^2 d g + 3 d g]`` before halting,
        upper bound lowered by ``b^3 g`` at the halting vertex (lower bound then ``c - b^3 g``)."""
        b, g, c = self.b, self.gamma, self.c
        hi = c + 8 * b * b * g + 3 * g
        return (c - b ** 3 * g, hi - b ** 3 * g) if halted else (c, hi)


def trace44(m: Machine, input: str, steps: int, tau: int | None = None,
            left: int | None = None, b: float | None = None,
            require_halt: bool = True) -> list[TraceStep44]:
    """Run (22) for ``steps`` iterations from the start configuration and decode each
    iterate (Prop. 4.3).  With ``require_halt`` a run that does not reach a halting vertex
    within ``steps`` raises ``Tm2nnError``."""
    if tau is None or left is None:
        t, lft = window_for(m, input, steps)
        tau = t if tau is None else tau
        left = lft if left is None else left
    if require_halt and not run_machine(m, input, max_steps=steps).halted:
        raise Tm2nnError(f"the machine does not halt within {steps} steps "
                         "(Prop. 4.3 traces a halting computation)")
    ts = TapeSimplex(m, tau, left, b=b)
    x, T, H = ts.start(input)
    out = [TraceStep44(0, ts.decode(x, T, H), float(ts.loss(x, T, H)))]
    for k in range(1, steps + 1):
        x, T, H = ts.step(x, T, H)
        out.append(TraceStep44(k, ts.decode(x, T, H), float(ts.loss(x, T, H))))
    return out
