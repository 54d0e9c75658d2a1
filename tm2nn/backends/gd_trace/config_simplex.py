"""§4.3 of Welper, *Universality of Gradient Descent Neural Network Training*: the
simplex over full configurations, the weights ``omega_v``/``omega_vw``, loss (13) and the
conditional-gradient (Frank-Wolfe) step (14) that traces the machine.

* Vertices ``V``: the full configurations (state, head, tape window of ``tau`` cells)
  reachable from the start on the given inputs (§4.3, "The Loss Function"); edges ``E``:
  one machine step.  Each vertex ``v`` is the standard basis vector ``e_v`` of ``R^V``,
  ``S = conv{e_v}``.
* Weights (§4.3, after (13)): ``k(v)`` = steps from ``v`` to a halting configuration,
  ``W_j = j`` (``j = 0..K``), ``B = W_K`` with ``K = max k(v) + 1``;
  ``omega_v = W_{k(v)}``, ``omega_vw = (W_{k(v)} + W_{k(w)})/2`` on edges (either
  direction), ``B`` otherwise.  These satisfy (10) and (15).
* Loss (13): ``l(x) = sum_v omega_v l_v(x) + sum_{v<w} omega_vw l_vw(x)`` with the
  Appendix A functions (:mod:`.lagrange`), so (11) and (12) hold.  The pair sum runs over
  *unordered* pairs: summing ordered pairs, as (13) literally reads, would give
  ``l(e_vw) = 2 omega_vw`` and break (11).
* Step (14): ``y_k = argmin_{y in S} d_{y - x_k} l(x_k)``, which is the vertex ``e_u``
  minimising ``<grad l(x_k), e_u>`` (§4.3: the two forms are equivalent); the gradient
  comes from torch autograd.  ``x_{k+1} = x_k + alpha_k (y_k - x_k)`` with ``alpha_k = 1``
  (the paper prints ``x_k - alpha_k d_k``; with ``d_k = y_k - x_k`` that is a sign typo,
  see the proof of Prop. 4.2, which arrives at ``e_w``).  ``line_search=True`` takes
  Prop. 4.2's other learning rate, an exact line search along ``y_k - x_k``
  (:meth:`ConfigSimplex.line_search`); with (15) it lands on ``e_w`` too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import product

import numpy as np
import torch

from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import configurations, run_machine
from tm2nn.ir.machine import MOVE_DELTA, Machine
from tm2nn.nets import Affine, Net, Port, ReLU, Space, SparseMatrix

from .lagrange import ell_pair_all, ell_v_all

DEFAULT_MAX_VERTICES = 2000
#: Most Lemma A.2 units :meth:`ConfigSimplex.net` builds (|V| = 2000 gives 1,999,000).
MAX_PAIR_UNITS = 2_000_000


@dataclass(frozen=True)
class Config:
    """One vertex of ``S``: a full configuration on the bounded tape.

    ``tape`` holds cells ``left .. left + tau - 1`` (interpreter coordinates: the input
    starts at cell 0).  ``final`` marks the configuration after a counted no-rule step
    (``missing_rule_counts_step``): same state, head and tape, but halted.
    """

    state: str
    head: int
    tape: tuple[str, ...]
    left: int
    final: bool = False

    def cells(self, blank: str) -> dict[int, str]:
        """Non-blank cells as ``position -> symbol`` (the interpreter's ``cells``)."""
        return {self.left + i: a for i, a in enumerate(self.tape) if a != blank}


def start_config(m: Machine, input: str, tau: int, left: int) -> Config:
    if left > 0 or left + tau < max(len(input), 1):
        raise Tm2nnError(f"tape window [{left}, {left + tau}) does not hold the input "
                         f"{input!r} and the start cell 0")
    tape = [m.blank] * tau
    for i, ch in enumerate(input):
        tape[i - left] = ch
    return Config(m.start, 0, tuple(tape), left)


def step(m: Machine, c: Config) -> Config | None:
    """The successor of ``c`` (one edge of ``E``), or ``None`` if ``c`` halts.

    A move off the ``tau`` cells raises :class:`Tm2nnError` (§4.1 assumes the machine
    stays within ``tau`` cells).
    """
    if c.final or c.state in m.halting:
        return None
    i = c.head - c.left
    r = m.delta.get((c.state, c.tape[i]))
    if r is None:
        return Config(c.state, c.head, c.tape, c.left, True) if m.missing_rule_counts_step else None
    head = c.head + MOVE_DELTA[r.move][1]
    if not c.left <= head < c.left + len(c.tape):
        raise Tm2nnError(f"the head leaves the tape window [{c.left}, {c.left + len(c.tape)}) "
                         f"(§4.1 assumes at most tau = {len(c.tape)} cells); enlarge tau/left")
    tape = c.tape[:i] + (r.write,) + c.tape[i + 1:]
    return Config(r.next, head, tape, c.left)


def inputs_up_to(m: Machine, n: int) -> list[str]:
    """All inputs of length ``<= n`` over the non-blank symbols (the "relevant
    computations" of §4.3 when ``T_0`` is all short inputs)."""
    syms = [a for a in m.alphabet if a != m.blank]
    return ["".join(p) for k in range(n + 1) for p in product(syms, repeat=k)]


@dataclass
class ConfigSimplex:
    """The graph ``(V, E)`` of §4.3 with weights, and loss (13) on ``S = conv{e_v}``."""

    machine: Machine
    vertices: list[Config]
    index: dict[Config, int]
    succ: list[int | None]
    k: np.ndarray          # k(v): steps to halting
    W: np.ndarray          # W_0 < ... < W_K = B
    starts: dict[str, int]  # input -> start vertex

    @property
    def m(self) -> int:
        return len(self.vertices)

    @property
    def B(self) -> float:
        return float(self.W[-1])

    @property
    def omega_v(self) -> np.ndarray:
        """``omega_v = W_{k(v)}``."""
        return self.W[self.k]

    def omega_vw(self) -> np.ndarray:
        """The symmetric ``m x m`` matrix of ``omega_vw`` (diagonal: ``omega_v``)."""
        om = np.full((self.m, self.m), self.B)
        wv = self.omega_v
        for v, w in enumerate(self.succ):
            if w is not None:
                om[v, w] = om[w, v] = 0.5 * (wv[v] + wv[w])
        np.fill_diagonal(om, wv)
        return om

    def loss_terms(self) -> tuple[torch.Tensor, torch.Tensor]:
        wv = torch.as_tensor(self.omega_v, dtype=torch.float64)
        om = torch.as_tensor(self.omega_vw(), dtype=torch.float64)
        return wv, torch.triu(om, diagonal=1)

    def loss(self, x) -> torch.Tensor:
        """Loss (13): ``sum_v omega_v l_v(x) + sum_{v<w} omega_vw l_vw(x)`` (torch)."""
        x = torch.as_tensor(x, dtype=torch.float64)
        if not hasattr(self, "_terms"):
            self._terms = self.loss_terms()
        wv, upper = self._terms
        return (wv * ell_v_all(x)).sum() + (upper * ell_pair_all(x)).sum()

    def net(self) -> Net:
        """Loss (13) as a network-IR net (input ``x``, the simplex point, one label per
        vertex; output ``loss``): one ReLU layer of ``|V|`` Lemma A.1 units
        ``l_v^{1/2} = relu(x_v/mu - Σx/(mu m) - d_mu)`` and ``|V|(|V|-1)/2`` Lemma A.2 units
        ``relu(2(x_v + x_w) - 4Σx/m - c)`` (three weights each: ``Σx`` is computed once),
        then one affine read-out: ``l_vw = relu(..) - l_v - l_w`` folds into the ``l_v``
        weights, ``Σ_v (omega_v - Σ_{w≠v} omega_vw) l_v + Σ_{v<w} omega_vw relu(..)``.
        :meth:`loss` is the closed-form reference it is tested against."""
        m, mu = self.m, 0.5
        if m * (m - 1) // 2 > MAX_PAIR_UNITS:
            raise Tm2nnError(f"loss (13) of {m:,} vertices needs {m * (m - 1) // 2:,} pair units "
                             f"(limit {MAX_PAIR_UNITS:,}): use fewer inputs or steps")
        x = Port("x", Space(tuple(f"v:{i}" for i in range(m))))
        xs_lab = Space(tuple(f"v:{i}" for i in range(m)) + ("sum",))
        rows = np.r_[np.arange(m), np.full(m, m)]
        cols = np.r_[np.arange(m), np.arange(m)]
        xs = Affine("xs", ("x",), weight=SparseMatrix((m + 1, m), rows, cols, np.ones(2 * m)), out=xs_lab,
                    cite="[x; Σx] (Σx = 1 on S)")
        iu, ju = np.triu_indices(m, 1)
        P = len(iu)
        d_mu = ((1.0 - mu) * m - 1.0) / (mu * m)
        # rows 0..m-1: Lemma A.1 units; rows m..m+P-1: Lemma A.2 units
        r = np.r_[np.arange(m), np.arange(m), m + np.arange(P), m + np.arange(P), m + np.arange(P)]
        c = np.r_[np.arange(m), np.full(m, m), iu, ju, np.full(P, m)]
        v = np.r_[np.full(m, 1.0 / mu), np.full(m, -1.0 / (mu * m)), np.full(2 * P, 2.0), np.full(P, -4.0 / m)]
        bias = np.r_[np.full(m, -d_mu), np.full(P, -(1.0 - 4.0 / m))]
        units = Space(tuple(f"l_v:{i}" for i in range(m)) + tuple(f"l_vw:{a},{b}" for a, b in zip(iu, ju)))
        pre = Affine("lagrange", ("xs",), weight=SparseMatrix((m + P, m + 1), r, c, v), bias=bias, out=units,
                     cite="Welper App. A, Lemma A.1 (mu = 1/2) and Lemma A.2")
        om = self.omega_vw()
        np.fill_diagonal(om, 0.0)
        w_v = self.omega_v - om.sum(axis=1)
        w_out = np.r_[w_v, om[iu, ju]]
        nz = np.nonzero(w_out)[0]
        out = Affine("loss", ("relu",), weight=SparseMatrix((1, m + P), np.zeros(len(nz)), nz, w_out[nz]),
                     out=Space(("loss",)), cite="Welper (13)")
        return Net("welper_loss13", (x,), (xs, pre, ReLU("relu", ("lagrange",)), out), ("loss",),
                   {"construction": "Welper §4.3 loss (13)"})

    def gradient(self, x) -> np.ndarray:
        """``grad l(x)`` by autograd.  At a vertex or inside a corner ``S_v`` every ReLU is
        away from its kink (Lemmas A.1/A.2), so this is the gradient of the affine piece
        and ``<grad, y - x>`` is the one-sided derivative (6)."""
        xt = torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
        (g,) = torch.autograd.grad(self.loss(xt), xt)
        return g.numpy()

    def directional_derivative(self, x, y) -> float:
        """``d_{y-x} l(x)`` of (6) via the gradient of the affine piece."""
        x = np.asarray(x, dtype=np.float64)
        return float(self.gradient(x) @ (np.asarray(y, dtype=np.float64) - x))

    def fw_step(self, x, alpha: float = 1.0, line_search: bool = False) -> tuple[np.ndarray, int]:
        """One step of (14): ``u = argmin_u <grad l(x), e_u>``, ``x + alpha (e_u - x)``;
        with ``line_search``, ``alpha`` is :meth:`line_search`'s (Prop. 4.2's second
        learning rate, which needs (15))."""
        g = self.gradient(x)
        u = int(np.argmin(g))
        gs = np.sort(g)
        if len(gs) > 1 and gs[1] - gs[0] < 1e-9:
            raise RuntimeError("Frank-Wolfe direction is not unique; weights violate (10)")
        y = np.zeros(self.m)
        y[u] = 1.0
        x = np.asarray(x, dtype=np.float64)
        if line_search:
            alpha = self.line_search(x, y)
        return x + alpha * (y - x), u

    def _pre(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pre-activations of every Lemma A.1 unit (``mu = 1/2``) and Lemma A.2 unit
        (``m x m``) at ``x``: both affine in ``x``."""
        m, mu = self.m, 0.5
        s = x.sum()
        d_mu = ((1.0 - mu) * m - 1.0) / (mu * m)
        return (m * x - s) / (mu * m) - d_mu, 2.0 * (x[:, None] + x[None, :]) - 4.0 * s / m - (1.0 - 4.0 / m)

    def line_search(self, x, y) -> float:
        """Exact line search for (14): the ``alpha in [0, 1]`` minimising ``l(x + alpha (y -
        x))``.  On the segment every unit of loss (13) is ``relu`` of an affine function of
        ``alpha``, so ``l`` is piecewise affine there with kinks where a pre-activation
        changes sign; the minimum is at 0, 1 or a kink, and all of them are evaluated.  On a
        tie the largest ``alpha`` wins (Prop. 4.2: "follows this direction as far as
        possible")."""
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        cand = {0.0, 1.0}
        for a, b in zip(self._pre(x), self._pre(y)):
            a, b = a.ravel(), b.ravel()
            cross = (a * b < 0)
            cand.update(np.round(a[cross] / (a[cross] - b[cross]), 12).tolist())
        alphas = sorted(cand)
        vals = [float(self.loss(x + t * (y - x))) for t in alphas]
        best = min(vals)
        return max(t for t, v in zip(alphas, vals) if v <= best + 1e-12 * max(1.0, abs(best)))

    def vertex(self, v: int) -> np.ndarray:
        e = np.zeros(self.m)
        e[v] = 1.0
        return e

    def decode(self, x) -> Config:
        """The configuration of a vertex iterate ``x = e_v`` (refuses a non-vertex)."""
        x = np.asarray(x)
        v = int(np.argmax(x))
        if x[v] != 1.0 or np.count_nonzero(x) != 1:
            raise ValueError("iterate is not a vertex of S")
        return self.vertices[v]


def estimate_vertices(m: Machine, n_inputs: int, max_steps: int, tau: int) -> int:
    """Upper bound on ``|V|``: ``min(#inputs (max_steps + 1), |Q| |Gamma|^tau tau (+1))``
    (the second is §4.3's count of all configurations on ``tau`` cells)."""
    per = (max_steps + 1) * n_inputs
    extra = 2 if m.missing_rule_counts_step else 1
    allc = len(m.states) * len(m.alphabet) ** tau * tau * extra
    return min(per, allc)


def build(m: Machine, inputs: list[str], tau: int, left: int = 0, max_steps: int = 1000,
          max_vertices: int = DEFAULT_MAX_VERTICES) -> ConfigSimplex:
    """BFS from the start configuration of every input to the reachable set ``V``.

    Refuses (``Tm2nnError`` with the estimate) when the estimated ``|V|`` exceeds
    ``max_vertices``, and when a computation does not halt within ``max_steps`` steps
    (§4.3 needs every relevant computation to halt, else ``k(v) = K`` ties (10)).
    """
    if not isinstance(m, Machine) or m.tape_kind != "line":
        raise Tm2nnError("the §4.3 GD trace handles line machines only")
    est = estimate_vertices(m, len(inputs), max_steps, tau)
    if est > max_vertices:
        raise Tm2nnError(f"§4.3 simplex would have up to {est} vertices (limit {max_vertices}); "
                         "use fewer inputs, a smaller tape or step bound, or raise the limit")
    index: dict[Config, int] = {}
    vertices: list[Config] = []
    succ: list[int | None] = []
    depth: list[int] = []
    starts: dict[str, int] = {}
    queue: deque[int] = deque()

    def add(c: Config, d: int) -> int:
        if c not in index:
            index[c] = len(vertices)
            vertices.append(c)
            succ.append(None)
            depth.append(d)
            queue.append(index[c])
        return index[c]

    for inp in inputs:
        starts[inp] = add(start_config(m, inp, tau, left), 0)
    while queue:
        v = queue.popleft()
        nxt = step(m, vertices[v])
        if nxt is None:
            continue
        if depth[v] >= max_steps:
            raise Tm2nnError(f"a computation does not halt within {max_steps} steps "
                             "(§4.3 needs halting computations)")
        succ[v] = add(nxt, depth[v] + 1)
    # k(v): steps to halting, following the unique successor chain
    k = np.full(len(vertices), -1, dtype=np.int64)
    for v0 in range(len(vertices)):
        chain = []
        v = v0
        while k[v] < 0 and succ[v] is not None:
            chain.append(v)
            v = succ[v]
            if len(chain) > len(vertices):
                raise Tm2nnError("configuration cycle: the computation does not halt")
        if k[v] < 0:
            k[v] = 0
        for u in reversed(chain):
            k[u] = k[succ[u]] + 1
    K = int(k.max()) + 1
    W = np.arange(K + 1, dtype=np.float64)  # W_j = j, B = W_K = K
    return ConfigSimplex(m, vertices, index, succ, k, W, starts)


@dataclass(frozen=True)
class TraceStep:
    k: int
    config: Config
    loss: float


def window_for(m: Machine, input: str, steps: int) -> tuple[int, int]:
    """``(tau, left)``: the smallest window holding the input, cell 0 and every head
    position of the interpreter's run (a convenience default for :func:`trace`)."""
    res = run_machine(m, input, max_steps=steps, trace=True)
    lo, hi = 0, max(len(input), 1) - 1
    for _, _, head, cells in configurations(res):
        lo, hi = min(lo, head, *cells, lo), max(hi, head, *cells, hi)
    return hi - lo + 1, lo


def trace(m: Machine, input: str, steps: int, tau: int | None = None, left: int | None = None,
          max_vertices: int = DEFAULT_MAX_VERTICES, line_search: bool = False) -> list[TraceStep]:
    """Run (14) for ``steps`` iterations from ``x_0 = e_{v_0}`` (Prop. 4.2) and decode
    every iterate.  ``steps`` is also the step bound of the simplex construction.  The
    learning rate is the paper's constant ``alpha_k = 1``, or with ``line_search`` the
    exact line search (:meth:`ConfigSimplex.line_search`), which Prop. 4.2 allows when
    (15) holds (our weights satisfy it)."""
    if tau is None or left is None:
        t, lft = window_for(m, input, steps)
        tau = t if tau is None else tau
        left = lft if left is None else left
    cs = build(m, [input], tau, left, max_steps=steps, max_vertices=max_vertices)
    x = cs.vertex(cs.starts[input])
    out = [TraceStep(0, cs.decode(x), float(cs.loss(x)))]
    for k in range(1, steps + 1):
        x, _ = cs.fw_step(x, line_search=line_search)
        out.append(TraceStep(k, cs.decode(x), float(cs.loss(x))))
    return out
