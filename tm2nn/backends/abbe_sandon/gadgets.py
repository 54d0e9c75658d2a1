"""The memory gadgets of Abbe & Sandon §4: M_s (Definition 6, §4.1) and M' (Definition 7,
§4.2), as small weighted DAGs with labelled vertices, with forward, backward and one SGD
step in *any* number type (float, :class:`.exact.Mono`, mpmath), the closed-form gradients
of Lemma 2 / Lemma 4 (one formula per edge), and a torch-autograd cross-check.

A :class:`Gadget` is a subgraph of the net: its *clamped* vertices (M_s: v0, vc, vc';
M': v0, vc, vc') get their outputs from outside (constant vertex, control vertices); its
``out`` vertex (M_s: v6, M': v5) is the net's output vertex, *shared* by all gadgets and not
evaluated here: a gadget reports its **contribution** ``sum_u w(u,out) y_u`` to the output's
input, and SGD receives ``delta = dL/dz_out`` back.  Edges leaving the gadget to the
computation component (the memory read from v1 in M_s, from v2 and vr in M') carry zero
gradient by Lemma 1 / Lemma 5 (those gates sit where f' = 0) -- Lemma 2 hypothesis 6,
Lemma 4 hypothesis 7 -- so ``dL/dy`` of a vertex counts only edges inside the gadget.

Backprop (for every number type, :func:`backward`), L(x) = x**2 on (output - label):

    delta_v = f'(z_v) * sum_{(v,w) in E} w(v,w) delta_w,        dL/dw(u,v) = y_u delta_v.

Closed forms (:func:`lemma2_gradients`, :func:`lemma4_gradients`): along a path
u_0 -> u_1 -> ... -> u_L = out whose inner vertices cube (f = x**3), the contribution
``c = w_L f(w_{L-1} f(... f(w_1 y_{u_0})))`` is a monomial of degree ``3**(L-j)`` in ``w_j``
(the edge into u_j), so ``dc/dw_j = 3**(L-j) c / w_j`` and ``dL/dw_j = delta 3**(L-j) c / w_j``.
Lemma 2's proof: with delta = 12 (output ±1, wrong label: 2*2*f'(1) = 4*3) and
gamma = 2**-244 3**-1643/2 s**-362, gamma * dL/dw_j = 2 w_j for every j: each active-path
weight becomes -w_j.  Lemma 4's proof: with delta = f*'(z) 2(1/2 - y), gamma = 2**(716/3) 3**24,
the path weights double (label 1) or become -2x (label -1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from . import activation as act
from .exact import Mono

Edge = tuple[str, str]
Number = Any


def _scalar_fstar_piece(blend, outer):
    """f* (or f*') on single numbers (§4.2): 0 in the dead zone |x| <= A, the float
    ``blend`` in between, ``outer`` (f's scalar piece, or f''s) from B on."""
    def g(x):
        a = abs(x)
        if a <= act.A_STAR:
            return 0 * x
        if isinstance(x, float):
            return float(blend(x))
        if a >= act.B_STAR:
            return outer(x)
        raise ArithmeticError("f*'s lower blend is only defined in float")
    return g


_scalar_fstar = _scalar_fstar_piece(act.fstar, act.f_scalar)
_scalar_dfstar = _scalar_fstar_piece(act.dfstar, act.df_scalar)


#: name -> (f, f') on single numbers.
SCALAR_ACTS: dict[str, tuple[Callable, Callable]] = {
    "as_f": (act.f_scalar, act.df_scalar),
    "as_fstar": (_scalar_fstar, _scalar_dfstar),
}


@dataclass
class Gadget:
    """A memory gadget: labelled vertices in topological order, weighted edges.

    ``weights`` is the only mutable state (SGD changes it); ``initial`` keeps the
    construction's weights for reading the stored bit.  ``multiplicity`` is how many
    identical copies this object stands for (see docs: the m' extraneous gadgets of
    Lemma 3 all receive the same kind of controls, and a copy's contribution does not
    depend on its stored signs, so k copies flipped together are one object times k)."""

    kind: str
    vertices: tuple[str, ...]
    clamped: tuple[str, ...]
    out: str
    weights: dict[Edge, Number]
    activation: str
    cite: str
    multiplicity: int = 1
    initial: dict[Edge, Number] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.initial:
            self.initial = dict(self.weights)

    @property
    def edges(self) -> list[Edge]:
        return list(self.weights)

    def copy(self) -> Gadget:
        return Gadget(self.kind, self.vertices, self.clamped, self.out, dict(self.weights),
                      self.activation, self.cite, self.multiplicity, dict(self.initial))


# ---------------------------------------------------------------- Definition 6
def ms_gadget(s: Number, sqrt3: Number | None = None) -> Gadget:
    """M_s (Abbe & Sandon, Definition 6): 12 vertices v0..v5, vc, v3', v4', v5', vc', v6.

    Edges (weights in units of s; ``3**(3 - t/2) s`` for t = 1..6 is 9 sqrt3 s, 9 s,
    3 sqrt3 s, 3 s, sqrt3 s, s):

    1. v_{t-1} -> v_t, weight 3**(3-t/2) s, 0 < t <= 6;
    2. v2 -> v3', weight 3 sqrt3 s;
    3. v'_{t-1} -> v'_t, weight 3**(3-t/2) s, 3 < t < 6  (v3'->v4': 3s, v4'->v5': sqrt3 s);
    4. v5' -> v6, weight -s;
    5. vc -> v4 and 6. vc' -> v4', weight -2**26 3**91 s**40.

    ``s`` may be a float or an exact :class:`.exact.Mono` (then sqrt3 is formed exactly);
    Lemma 2 needs 0 < s < 1/(18 sqrt3).  The stored bit is the sign of w(v0, v1):
    +9 sqrt3 s encodes 0, -9 sqrt3 s encodes 1.  The read vertex is v1 (outputs ±s' with
    s' = (18 sqrt3 s)**3, Figure 2)."""
    if sqrt3 is None:
        sqrt3 = _sqrt3_like(s)
    w = {
        ("v0", "v1"): 9 * sqrt3 * s,
        ("v1", "v2"): 9 * s,
        ("v2", "v3"): 3 * sqrt3 * s,
        ("v3", "v4"): 3 * s,
        ("v4", "v5"): sqrt3 * s,
        ("v5", "v6"): s,
        ("v2", "v3'"): 3 * sqrt3 * s,
        ("v3'", "v4'"): 3 * s,
        ("v4'", "v5'"): sqrt3 * s,
        ("v5'", "v6"): -s,
        ("vc", "v4"): -(2**26) * 3**91 * s**40,
        ("vc'", "v4'"): -(2**26) * 3**91 * s**40,
    }
    verts = ("v0", "vc", "vc'", "v1", "v2", "v3", "v3'", "v4", "v4'", "v5", "v5'", "v6")
    return Gadget("M_s", verts, ("v0", "vc", "vc'"), "v6", w, "as_f", "Abbe & Sandon §4.1, Def. 6")


def _sqrt3_like(s):
    if isinstance(s, Mono):
        return Mono.make(1, 0, Fraction(1, 2), 0, s.rel)
    if isinstance(s, float):
        return 3.0**0.5
    import mpmath

    return mpmath.sqrt(3)


#: Lemma 2's two signed paths from v0 to v6 (the one through v4 adds +P, through v4' -P).
MS_PATH_PLUS = (("v0", "v1"), ("v1", "v2"), ("v2", "v3"), ("v3", "v4"), ("v4", "v5"), ("v5", "v6"))
MS_PATH_MINUS = (("v0", "v1"), ("v1", "v2"), ("v2", "v3'"), ("v3'", "v4'"), ("v4'", "v5'"), ("v5'", "v6"))


def ms_bit(g: Gadget) -> int:
    """The bit M_s stores: 0 if w(v0,v1) has its initial sign (+9 sqrt3 s), else 1."""
    w, w0 = g.weights[("v0", "v1")], g.initial[("v0", "v1")]
    return 0 if (w > 0) == (w0 > 0) else 1


# ---------------------------------------------------------------- Definition 7
def mprime_gadget(num: Callable[[Fraction, Fraction, Fraction], Number] | None = None) -> Gadget:
    """M' (Abbe & Sandon, Definition 7): 9 vertices v0..v5, vc, vc', vr.

    1. v_t -> v_{t+1}, weight 3**(-t/2)/4 for t = 0..4 (the paper's "for each t");
    2. v1 -> vr, weight 128;
    3. vc -> v4, weight -2**-81 3**-9;   4. vc' -> v4, weight -2**-41 3**-9.

    v0 is the net's constant vertex (outputs 1); v5 is the output vertex.  ``num(c, a, b)``
    builds ``c 2**a 3**b`` in the wanted number type (default float64)."""
    if num is None:
        def num(c, a, b):
            return float(c) * 2.0 ** float(a) * 3.0 ** float(b)
    h = Fraction(1, 2)
    w = {("v0", "v1"): num(1, -2, 0)}
    for t in range(1, 5):
        w[(f"v{t}", f"v{t + 1}")] = num(1, -2, -t * h)
    w[("v1", "vr")] = num(128, 0, 0)
    w[("vc", "v4")] = num(-1, -81, -9)
    w[("vc'", "v4")] = num(-1, -41, -9)
    verts = ("v0", "vc", "vc'", "v1", "vr", "v2", "v3", "v4", "v5")
    return Gadget("M'", verts, ("v0", "vc", "vc'"), "v5", w, "as_fstar", "Abbe & Sandon §4.2, Def. 7")


MP_PATH = tuple((f"v{t}", f"v{t + 1}") for t in range(5))


# ---------------------------------------------------------------- forward / backward
@dataclass
class Pass:
    z: dict[str, Number]
    y: dict[str, Number]
    contribution: Number


def forward(g: Gadget, clamp: Mapping[str, Number]) -> Pass:
    """Outputs of the gadget's vertices given the clamped outputs; and its contribution
    (one copy's) to the output vertex's input."""
    f, _ = SCALAR_ACTS[g.activation]
    y: dict[str, Number] = {v: clamp[v] for v in g.clamped}
    z: dict[str, Number] = {}
    preds: dict[str, list[str]] = {}
    for (u, v) in g.weights:
        preds.setdefault(v, []).append(u)
    for v in g.vertices:
        if v in g.clamped or v == g.out:
            continue
        acc = None
        for u in preds.get(v, []):
            term = g.weights[(u, v)] * y[u]
            acc = term if acc is None else acc + term
        z[v] = acc
        y[v] = f(acc)
    contrib = None
    for u in preds.get(g.out, []):
        term = g.weights[(u, g.out)] * y[u]
        contrib = term if contrib is None else contrib + term
    return Pass(z, y, contrib)


def backward(g: Gadget, p: Pass, delta_out: Number) -> dict[Edge, Number]:
    """dL/dw for every edge of the gadget, given delta_out = dL/dz_out (generic backprop)."""
    _, df = SCALAR_ACTS[g.activation]
    succ: dict[str, list[str]] = {}
    for (u, v) in g.weights:
        succ.setdefault(u, []).append(v)
    delta: dict[str, Number] = {g.out: delta_out}
    for v in reversed(g.vertices):
        if v in g.clamped or v == g.out:
            continue
        dy = 0 * delta_out
        for w in succ.get(v, []):
            dy = dy + g.weights[(v, w)] * delta[w]
        delta[v] = df(p.z[v]) * dy
    return {(u, v): p.y[u] * delta[v] for (u, v) in g.weights}


def sgd_step(g: Gadget, clamp: Mapping[str, Number], delta_out: Number, lr: Number,
             noise: Mapping[Edge, Number] | None = None) -> dict[Edge, Number]:
    """One (noisy) SGD step on the gadget: w <- w - lr dL/dw (+ noise).  Returns the grads.

    For a gadget standing for k identical copies each copy gets the same update; the
    output-vertex input uses k times the contribution (see :func:`output_delta`)."""
    grads = backward(g, forward(g, clamp), delta_out)
    for e, gr in grads.items():
        new = g.weights[e] - lr * gr
        if noise is not None and e in noise:
            new = new + noise[e]
        g.weights[e] = new
    return grads


def output_delta(z_out: Number, label: Number, activation: str = "as_f") -> tuple[Number, Number]:
    """The output vertex: y = f(z), and delta = dL/dz = f'(z) * 2 (y - label) for L(x) = x**2."""
    f, df = SCALAR_ACTS[activation]
    y = f(z_out)
    return y, df(z_out) * 2 * (y - label)


# ---------------------------------------------------------------- closed forms
def path_gradients(g: Gadget, path: tuple[Edge, ...], contribution: Number, delta: Number) -> dict[Edge, Number]:
    """dL/dw_j = delta * 3**(L-j) * c / w_j along a path of cubing vertices (module doc)."""
    L = len(path)
    return {e: delta * 3 ** (L - 1 - j) * contribution / g.weights[e] for j, e in enumerate(path)}


def lemma2_gradients(g: Gadget, vc: Number, vcp: Number, delta: Number) -> dict[Edge, Number]:
    """Lemma 2's proof, per edge, for M_s with v0 = 2 and controls in {0, 2}:

    * vc = 0: the path v0-v1-v2-v3-v4-v5-v6 carries +P (P = 2**243 3**1641/2 s**364 exactly,
      whatever the signs, since the edges of each sub-path flip together); its edges get
      delta 3**(6-t) P / w_t; otherwise v4 gets input 0 (the vc edge cancels v3's), f'(0) = 0.
    * vc' = 0: the same for v0-v1-v2-v3'-v4'-v5'-v6, which carries -P.
    * Control edges: y_vc = 0 when its path is active, delta_v4 = 0 when not: gradient 0.

    Needs at most one of vc, vc' to be 0 (Lemma 2 hypothesis 5 when the output is ±1)."""
    zero = 0 * delta
    out = {e: zero for e in g.weights}
    p = forward(g, {"v0": 2 * (delta ** 0), "vc": vc, "vc'": vcp})
    for ctrl, path in (("vc", MS_PATH_PLUS), ("vc'", MS_PATH_MINUS)):
        if {"vc": vc, "vc'": vcp}[ctrl] == 0:
            c = g.weights[path[-1]] * p.y[path[-1][0]]
            for e, gr in path_gradients(g, path, c, delta).items():
                out[e] = out[e] + gr
    return out


def lemma4_gradients(g: Gadget, vc: Number, vcp: Number, delta: Number) -> dict[Edge, Number]:
    """Lemma 4's proof, per edge, for M' (v0 = 1): when vc = vc' = 0 (step t0) the path
    v0..v5 carries c = w45 y4 and dL/dw_i = delta 3**(4-i) c / w_i (the paper's
    2**-240 3**-29 3**(4-i/2) d'_{v5} at the initial weights); the edge v1 -> vr and the
    control edges get 0 (vr's input is ±2 or ±16, f*' = 0; y_vc = y_vc' = 0).  On every other
    step v4's input is within f*'s dead zone and every gradient is 0."""
    zero = 0 * delta
    out = {e: zero for e in g.weights}
    if vc == 0 and vcp == 0:
        p = forward(g, {"v0": 1.0, "vc": vc, "vc'": vcp})
        out.update(path_gradients(g, MP_PATH, p.contribution, delta))
    return out


def torch_gradients(g: Gadget, clamp: Mapping[str, float], delta_out: float) -> dict[Edge, float]:
    """Cross-check: the same graph in torch float64 with ``activation.f_torch`` /
    ``fstar_torch``, dL/dw by autograd of ``delta_out * contribution``."""
    import torch

    fn = {"as_f": act.f_torch, "as_fstar": act.fstar_torch}[g.activation]
    params = {e: torch.tensor(float(w), dtype=torch.float64, requires_grad=True) for e, w in g.weights.items()}
    y = {v: torch.tensor(float(clamp[v]), dtype=torch.float64) for v in g.clamped}
    preds: dict[str, list[str]] = {}
    for (u, v) in g.weights:
        preds.setdefault(v, []).append(u)
    for v in g.vertices:
        if v in g.clamped or v == g.out:
            continue
        y[v] = fn(sum(params[(u, v)] * y[u] for u in preds[v]))
    contrib = sum(params[(u, g.out)] * y[u] for u in preds[g.out])
    (delta_out * contrib).backward()
    return {e: float(p.grad) if p.grad is not None else 0.0 for e, p in params.items()}
