"""A float64 parametrisation of Abbe & Sandon's memory gadget M_s (§4.1, Definition 6) that
keeps Lemma 2's *exact* flip property under plain SGD in binary floating point.

Why the paper's parameters cannot (docs/abbe_sandon.md, "float64 parametrisation"):
along an active path of M_s every vertex applies x**3, so the contribution c to the output
is a monomial of degree 3**(6-j) in the weight w_j of the j-th path edge and
``dL/dw_j = delta 3**(6-j) c / w_j``.  Lemma 2's flip w_j -> -w_j with one learning rate
gamma needs ``gamma delta 3**(6-j) c / w_j = 2 w_j`` for every j, hence
``(w_j / w_{j+1})**2 = 3``: consecutive path weights differ by the irrational factor
sqrt(3) (Def. 6's ``3**(3-t/2) s``), so no two of them are both floats, a float64 flip
is never exact, and Finding 1's amplification (2D-3 = 725 per flip) takes over.  For
``sign(x)|x|**p`` the ratio is sqrt(p): exact weights need p to be the square of a rational.

**This parametrisation** (every difference from the paper is named here and in the docs):

* activation ``fpl`` (our choice; p = 1 in Remark 9's family, with §4.2's dead zone):
  odd, continuous, nondecreasing, piecewise linear with dyadic breakpoints and slopes::

      |x| <= a            : 0                      (dead zone, a = 2**-48; f' = 0)
      a < |x| < 2a        : sign(x) 2(|x| - a)     (ramp, slope 2)
      2a <= |x| <= 5/4    : x                      (identity, slope 1)
      5/4 < |x| < 3/2     : sign(x)(3|x| - 5/2)    (slope 3)
      |x| >= 3/2          : 2 sign(x)              (saturated; f' = 0, Lemma 1)

  Differences from §4.1's f: x (not x**3) on the working range, f'(0) = 0 comes from a
  dead zone (as f* of §4.2) instead of the cube, and f is not smooth (Lemmas 1-3 never
  use smoothness; they use f = ±2, f' = 0 beyond 3/2, f(0) = f'(0) = 0, f(±1) = ±1).
  Derivative convention at the kinks (never met by the construction): the piece
  selected by the comparisons above.
* gadget ``M_s`` with the vertices and edges of Definition 6 but weights for p = 1
  (the p-generalisation ``w_t = p**((6-t)/2) s`` of Def. 6): every path edge ``s``
  (v5'->v6: ``-s``) instead of ``3**(3-t/2) s``; control edges ``-s**4`` instead of
  ``-2**26 3**91 s**40`` (in both cases half of v4's input from v3);
  ``s = 2**-k`` (k >= 1) instead of Lemma 3's irrational root.
* constants: one active gadget adds ``P = 2 s**6 = 2**(1-6k)`` to the output's input, so
  Lemma 3's ``m' = 1/P = 2**(6k-1)`` (32 for k = 1, instead of >= 1.3e79);
  the output's delta is ``f'(1) 2 (y - label) = ±4`` (not ±12, since f'(1) = 1);
  ``gamma = 2 s**2/(4 P) = 2**(4k-2)`` (4 for k = 1); the read value (v1's output) is
  ``±2s`` (Figure 2's ``s'``).

Every number the gadget meets -- weights, vertex inputs and outputs, deltas, gradients,
gamma * gradient, the output's input m'P = ±1 -- is ±2**e with |e| <= 6k + 3 (or 0,
or a sum of at most m' <= 2**53 equal terms), so float64 (indeed float32 for k <= 9)
computes all of it exactly: a flip maps the exact weights to the exact negated weights
and Finding 1's instability has nothing to amplify.  ``k <= K_MAX = 9`` keeps the
output's sum of m' = 2**(6k-1) contributions exact (2**53) and v5's input 2 s**5 >= 2**-44
on the identity piece (which starts at 2**-47).

Exactness is essential, not a convenience: a weight that is off by a relative 1e-13
breaks the gadget at the second flip (``tests/backends/abbe_sandon/test_abbe_sandon_float64.py``,
``test_exactness_is_essential``): the inactive path's gate v4' then gets a residual
input ~5e-14 instead of 0, outside the dead zone (2**-48 ~ 3.6e-15), so the "frozen"
path and its control edge receive gradient (the control weight moves by 126x); on the
active path the error also grows ~9x per flip (Finding 1's 2D - 3 with D = 6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tm2nn import threads
from tm2nn.nets.activations import ActivationFn, register

from . import gadgets

#: The dead zone |x| <= DEAD of :func:`fpl` (f = 0, f' = 0): as wide as K_MAX allows
#: (v5's input 2 s**5 = 2**-44 at k = 9 must reach the identity piece).
DEAD = 2.0**-48
#: End of the ramp / start of the identity piece.
RAMP_END = 2.0**-47
#: End of the identity piece.
LIN_END = 1.25
#: Saturation: f = ±2, f' = 0 for |x| >= SAT (as the paper's f beyond 3/2).
SAT = 1.5
#: Largest k (s = 2**-k): m' = 2**(6k-1) <= 2**53 keeps the output's sum exact.
K_MAX = 9
CITE = "float64 parametrisation of Abbe & Sandon §4.1, Def. 6 / Lemma 2 (docs/abbe_sandon.md)"


# ---------------------------------------------------------------- the activation
def fpl(x) -> np.ndarray:
    """The piecewise-linear dyadic activation (module doc), numpy float64."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    g = np.where(a <= DEAD, 0.0,
                 np.where(a < RAMP_END, 2.0 * (a - DEAD),
                          np.where(a <= LIN_END, a,
                                   np.where(a < SAT, 3.0 * a - 2.5, 2.0))))
    return np.sign(x) * g


def dfpl(x) -> np.ndarray:
    """fpl' with the module's kink convention: 0, 2, 1, 3, 0 on the five pieces."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    return np.where(a <= DEAD, 0.0, np.where(a < RAMP_END, 2.0, np.where(a <= LIN_END, 1.0,
                                                                         np.where(a < SAT, 3.0, 0.0))))


def fpl_torch(x):
    """fpl in torch (Abs, Sign, Where, Mul, Sub only): the identity piece returns |x|
    itself, so f(x) = x and f'(x) = 1 there exactly, and the flat pieces are constants
    (gradient exactly 0)."""
    import torch

    a = torch.abs(x)
    zero, two = torch.zeros_like(a), torch.full_like(a, 2.0)
    g = torch.where(a <= DEAD, zero,
                    torch.where(a < RAMP_END, 2.0 * (a - DEAD),
                                torch.where(a <= LIN_END, a,
                                            torch.where(a < SAT, 3.0 * a - 2.5, two))))
    return torch.sign(x) * g


def fpl_scalar(x):
    """fpl on one number of any ordered field (float, Fraction)."""
    a = abs(x)
    sg = 1 if x > 0 else (-1 if x < 0 else 0)
    if a <= DEAD:
        return 0 * x
    if a < RAMP_END:
        return sg * 2 * (a - (Fraction(DEAD) if isinstance(x, Fraction) else DEAD))
    if a <= LIN_END:
        return x
    if a < SAT:
        return sg * (3 * a - Fraction(5, 2))
    return sg * 2 + 0 * x


def dfpl_scalar(x):
    a = abs(x)
    if a <= DEAD:
        return 0 * x
    if a < RAMP_END:
        return 2 + 0 * x
    if a <= LIN_END:
        return 1 + 0 * x
    if a < SAT:
        return 3 + 0 * x
    return 0 * x


def onnx_steps_fpl(x: str, const) -> list:
    """fpl as ONNX steps (see :mod:`tm2nn.nets.activations`)."""
    return [
        ("abs", "Abs", [x], {}),
        ("sign", "Sign", [x], {}),
        ("dead", "LessOrEqual", ["@abs", const("dead", DEAD)], {}),
        ("in_ramp", "Less", ["@abs", const("ramp_end", RAMP_END)], {}),
        ("in_lin", "LessOrEqual", ["@abs", const("lin_end", LIN_END)], {}),
        ("in_up", "Less", ["@abs", const("sat", SAT)], {}),
        ("ramp.sub", "Sub", ["@abs", const("dead", DEAD)], {}),
        ("ramp", "Mul", ["@ramp.sub", const("two", 2.0)], {}),
        ("up.mul", "Mul", ["@abs", const("three", 3.0)], {}),
        ("up", "Sub", ["@up.mul", const("five_halves", 2.5)], {}),
        ("g.up", "Where", ["@in_up", "@up", const("two", 2.0)], {}),
        ("g.lin", "Where", ["@in_lin", "@abs", "@g.up"], {}),
        ("g.ramp", "Where", ["@in_ramp", "@ramp", "@g.lin"], {}),
        ("g", "Where", ["@dead", const("zero", 0.0), "@g.ramp"], {}),
        ("fpl", "Mul", ["@sign", "@g"], {}),
    ]


gadgets.SCALAR_ACTS.setdefault("as_fpl", (fpl_scalar, dfpl_scalar))
register(ActivationFn("abbe_sandon_fpl", "float64 parametrisation of Abbe & Sandon Def. 6 / Lemma 2 "
                      "(docs/abbe_sandon.md, 'float64 parametrisation')", __name__, "fpl", "fpl_torch",
                      onnx_steps_fpl))


# ---------------------------------------------------------------- constants
@dataclass(frozen=True)
class Dyadic:
    """The constants for s = 2**-k (module doc).  All are exact powers of two."""

    k: int

    def __post_init__(self) -> None:
        if not 1 <= self.k <= K_MAX:
            raise ValueError(f"k must be in 1..{K_MAX} (s = 2**-k), got {self.k}")

    @staticmethod
    def for_m(m: int) -> "Dyadic":
        """Lemma 3 with this gadget: the smallest k with m' = 2**(6k-1) >= m."""
        k = max(1, math.ceil((math.log2(max(int(m), 1)) + 1) / 6))
        while 2 ** (6 * k - 1) < m:  # guard the float log
            k += 1
        return Dyadic(k)

    @property
    def s(self) -> float:
        return 2.0**-self.k

    @property
    def control(self) -> float:
        """|w(vc, v4)| = |w(vc', v4')| = s**4 (half of v4's input 2 s**4 from v3)."""
        return 2.0 ** (-4 * self.k)

    @property
    def P(self) -> float:
        """One active gadget's input to the output vertex: 2 s**6."""
        return 2.0 ** (1 - 6 * self.k)

    @property
    def m_prime(self) -> int:
        """Gadgets flipped in every step (Lemma 3): 1/P = 2**(6k-1)."""
        return 2 ** (6 * self.k - 1)

    @property
    def gamma(self) -> float:
        """Lemma 2's learning rate: 2 s**2 / (4 P) = 2**(4k-2)."""
        return 2.0 ** (4 * self.k - 2)

    @property
    def read(self) -> float:
        """v1's output |y1| = 2s (Figure 2's s')."""
        return 2.0 * self.s

    def path_values(self) -> dict[str, float]:
        """|z_t| = |y_t| of v1..v5 on an active path (identity piece): 2 s**t."""
        return {f"v{t}": 2.0 ** (1 - t * self.k) for t in range(1, 6)}

    def path_gradient(self, j: int) -> float:
        """|dL/dw_j| for a path edge when the net is wrong: 4 P / s = 2**(3-5k)."""
        return 4.0 * self.P / self.s

    def exponent_range(self) -> tuple[int, int]:
        """(min, max) binary exponent of every nonzero number of a flip (module doc)."""
        return (1 - 6 * self.k, 4 * self.k - 2)


def ms_fpl_gadget(k: int, num=float) -> gadgets.Gadget:
    """Definition 6's M_s with this module's weights (``num`` = float or Fraction):
    the same 12 vertices and 12 edges; path edges ±s, control edges -s**4."""
    d = Dyadic(k)
    s, c = num(d.s), num(d.control)
    w = {e: s for e in gadgets.MS_PATH_PLUS}
    for e in gadgets.MS_PATH_MINUS:
        w[e] = s
    w[("v5'", "v6")] = -s
    w[("vc", "v4")] = -c
    w[("vc'", "v4'")] = -c
    order = ("v0", "v1"), ("v1", "v2"), ("v2", "v3"), ("v3", "v4"), ("v4", "v5"), ("v5", "v6"), \
        ("v2", "v3'"), ("v3'", "v4'"), ("v4'", "v5'"), ("v5'", "v6"), ("vc", "v4"), ("vc'", "v4'")
    w = {e: w[e] for e in order}
    verts = ("v0", "vc", "vc'", "v1", "v2", "v3", "v3'", "v4", "v4'", "v5", "v5'", "v6")
    return gadgets.Gadget("M_s(fpl)", verts, ("v0", "vc", "vc'"), "v6", w, "as_fpl", CITE)


def closed_form_gradients(g: gadgets.Gadget, vc, vcp, delta) -> dict:
    """Lemma 2's proof for p = 1: on the active path (control 0) every vertex is on the
    identity piece, c = ±P is of degree 1 in each path weight, so dL/dw_j = delta c / w_j;
    every other edge gets 0 (inactive path: v4 input 0 in the dead zone; control edges:
    y_vc = 0 or delta_v4 = 0)."""
    zero = 0 * delta
    out = {e: zero for e in g.weights}
    p = gadgets.forward(g, {"v0": 2 + zero, "vc": vc, "vc'": vcp})
    for ctrl, path in ((vc, gadgets.MS_PATH_PLUS), (vcp, gadgets.MS_PATH_MINUS)):
        if ctrl == 0:
            c = g.weights[path[-1]] * p.y[path[-1][0]]
            for e in path:
                out[e] = out[e] + delta * c / g.weights[e]
    return out


# ---------------------------------------------------------------- torch: a memory net
#: Edges of each gadget (Def. 6) and of its slice of the computation component.
PATH_EDGES = ("w01", "w12", "w23", "w34", "w45", "w56", "w23p", "w3p4p", "w4p5p", "w5p6", "wc4", "wcp4p")
OUTSIDE_EDGES = ("read", "not_m", "or_m", "or_n", "or_b",
                 "rc", "and_rc", "and_o", "and_b", "half_c", "one_c",
                 "rcp", "and_rcp", "and_op", "and_bp", "half_cp", "one_cp")


def _outside_init(d: Dyadic) -> dict[str, float]:
    """Lemma 1 / Lemma 5 gate weights (gates.py), Lemma 3's control wiring."""
    return {"read": 1.0 / d.s, "not_m": -1.0, "or_m": 1.0, "or_n": 1.0, "or_b": 2.0,
            "rc": 2.0, "and_rc": 1.0, "and_o": 1.0, "and_b": -2.0, "half_c": 0.5, "one_c": 1.0,
            "rcp": 2.0, "and_rcp": 1.0, "and_op": 1.0, "and_bp": -2.0, "half_cp": 0.5, "one_cp": 1.0}


def memory_net(k: int, n_gadgets: int, dtype=None):
    """A torch module: ``n_gadgets`` copies of this module's M_s sharing v0 (fed by the
    constant vertex through weight 2) and the output vertex v6 (Lemma 3's merge), each
    with a slice of a computation component built from Lemma 1 gates:

        m  = f(read * y_v1)                 memory read (Lemma 5 read, weight 1/s) -> ±2
        n  = NOT m;  o = OR(m, n) = 2      (so the reads are wired into the controls)
        r  = f(2 b),  a = AND(r, o) = r     (b = the control input, ±1)
        vc = f(a/2 + 1) in {0, 2}           (Lemma 3: weight 1/2 and 1 from the constant)

    and the same for vc'.  Every weight is a trainable scalar (one ``Parameter`` of
    shape [n_gadgets] per edge kind, so an edge's gradient is that edge's alone).
    Call it with control inputs ``[n_gadgets, 2]`` (±1: column 0 drives vc, 1 drives
    vc'); it returns the output vertex's activation y (a scalar tensor)."""
    import torch
    from torch import nn

    dtype = dtype or torch.float64
    d = Dyadic(k)

    class MemoryNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.params = d
            self.n = n_gadgets
            init = {e: w for e, w in zip(PATH_EDGES, (d.s,) * 9 + (-d.s, -d.control, -d.control))}
            init.update(_outside_init(d))
            self.const_v0 = nn.Parameter(torch.tensor(2.0, dtype=dtype))
            for e, w in init.items():
                setattr(self, e, nn.Parameter(torch.full((n_gadgets,), w, dtype=dtype)))
            self.last: dict[str, torch.Tensor] = {}

        def forward(self, bits):
            bits = torch.as_tensor(bits, dtype=dtype)
            one = torch.ones((), dtype=dtype)

            def f(*zs):  # one activation call per layer of vertices (speed only)
                return fpl_torch(torch.stack(zs)).unbind(0)

            (v0,) = f(self.const_v0 * one)
            y1, rc, rcp = f(self.w01 * v0, self.rc * bits[:, 0], self.rcp * bits[:, 1])
            y2, m = f(self.w12 * y1, self.read * y1)
            nm, y3, y3p = f(self.not_m * m, self.w23 * y2, self.w23p * y2)
            (o,) = f(self.or_m * m + self.or_n * nm + self.or_b * one)
            a, ap = f(self.and_rc * rc + self.and_o * o + self.and_b * one,
                      self.and_rcp * rcp + self.and_op * o + self.and_bp * one)
            vc, vcp = f(self.half_c * a + self.one_c * one, self.half_cp * ap + self.one_cp * one)
            y4, y4p = f(self.w34 * y3 + self.wc4 * vc, self.w3p4p * y3p + self.wcp4p * vcp)
            y5, y5p = f(self.w45 * y4, self.w4p5p * y4p)
            z = (self.w56 * y5 + self.w5p6 * y5p).sum()
            self.last = {"y1": y1.detach(), "vc": vc.detach(), "vc'": vcp.detach(), "z_out": z.detach()}
            return fpl_torch(z)

        def weights(self) -> dict[str, torch.Tensor]:
            return {n: p.detach().clone() for n, p in self.named_parameters()}

    return MemoryNet()


@dataclass
class Step:
    """One training step of :func:`train`: the net's output, the label, and the grads."""

    output: float
    label: float
    z_out: float
    grads: dict


def train(net, bits_seq: Sequence, labels: Sequence, gamma: float | None = None, keep_grads: bool = False,
          callback=None) -> list[Step]:
    """Plain SGD (``torch.optim.SGD``, lr = gamma = Dyadic(k).gamma, no momentum, no weight
    decay) with L(x) = x**2 on (output - label), one sample per step.  ``callback(t, net)``
    runs after each update."""
    import torch

    lr = net.params.gamma if gamma is None else gamma
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    out = []
    threads.use_torch()  # tiny tensors: threads only add overhead (~5x here; tm2nn.threads)
    _loop(net, opt, bits_seq, labels, keep_grads, callback, out)
    return out


def _loop(net, opt, bits_seq, labels, keep_grads, callback, out) -> None:
    for t, (bits, label) in enumerate(zip(bits_seq, labels)):
        opt.zero_grad()
        y = net(bits)
        loss = (y - float(label)) ** 2
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in net.named_parameters()} if keep_grads else {}
        opt.step()
        out.append(Step(float(y.detach()), float(label), float(net.last["z_out"]), grads))
        if callback is not None:
            callback(t, net)


def plan_step(rng: np.random.Generator, d: Dyadic, n_real: int, n_gadgets: int) -> tuple[int, np.ndarray, np.ndarray]:
    """A random Lemma 3 step: an output o = ±1, a random subset of the first ``n_real``
    gadgets to flip, and m' - |subset| of the others (extraneous), so exactly m' gadgets
    have an active path.  Returns (o, active mask, control inputs [n, 2] ±1): an active
    gadget gets vc = 0 (o = 1) or vc' = 0 (o = -1), i.e. input -1 on that column;
    everything else 2 (input +1) -- Lemma 2 hypotheses 4 and 5."""
    mp = d.m_prime
    if n_gadgets - n_real < mp:
        raise ValueError("need at least m' extraneous gadgets")
    o = 1 if rng.random() < 0.5 else -1
    active = np.zeros(n_gadgets, dtype=bool)
    real = rng.random(n_real) < 0.5
    active[:n_real] = real
    extra = rng.choice(np.arange(n_real, n_gadgets), size=mp - int(real.sum()), replace=False)
    active[extra] = True
    bits = np.ones((n_gadgets, 2))
    bits[active, 0 if o == 1 else 1] = -1.0
    return o, active, bits
