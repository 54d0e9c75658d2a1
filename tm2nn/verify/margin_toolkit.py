"""A margin toolkit: the generic pieces of the all-layer margin bounds (Wei, Chen & Ma,
App. D), shared by the constructions' certified margins (relu-circuit's
:mod:`tm2nn.backends.relu_circuit.margin`, the transformer's).

* :class:`AffineBounds`, :func:`affine_bounds` — the constants of one affine layer
  ``z = W h + b`` that error bounds read: ``|W|`` (for per-coordinate bounds), the ℓ2 norm
  of each row, and ``‖W‖_op`` by Schur's bound ``sqrt(max row ℓ1 · max column ℓ1)``.
* :func:`hypercube_norm` — ``max ‖φ(W h + b)‖₂`` over binary ``h`` (Condition D.4's λ).
* :func:`sup_log`, :func:`sup_below`, :func:`fixed_point` — bisections: the largest ε a
  monotone check passes at (on log ε), the largest ε an increasing error stays under a
  limit at, and the best free constant of a bound ``min(σ, terms decreasing in σ)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tm2nn.nets import Affine


@dataclass
class AffineBounds:
    """Constants of one affine layer ``z = W h + b`` for the error bounds."""

    name: str
    n_out: int
    rows: np.ndarray
    cols: np.ndarray
    absv: np.ndarray
    r2: np.ndarray  # ℓ2 norm of each row of W
    omega: float  # ‖W‖_op ≤ sqrt(max row ℓ1 · max column ℓ1) (Schur)
    lam: float  # bound on ‖h‖₂ for the unperturbed input (binary-input runs)

    def absmul(self, v: np.ndarray) -> np.ndarray:
        """|W| v for v of shape (n_in,) or (n_in, T)."""
        if v.ndim == 1:
            return np.bincount(self.rows, weights=self.absv * v[self.cols], minlength=self.n_out)
        return np.stack([self.absmul(v[:, t]) for t in range(v.shape[1])], 1) if v.shape[1] \
            else np.zeros((self.n_out, 0))


def hypercube_norm(op: Affine) -> float:
    """max over binary h of ‖φ(W h + b)‖₂ ≤ sqrt(Σ_j φ(b_j + Σ_k max(W_jk, 0))²)."""
    w = op.weight
    pos = np.bincount(w.rows, weights=np.maximum(w.vals, 0.0), minlength=w.shape[0])
    return float(np.sqrt(np.sum(np.maximum(op.bias + pos, 0.0) ** 2)))


def affine_bounds(op: Affine, lam: float) -> AffineBounds:
    """The :class:`AffineBounds` of affine op ``op`` (anything with a sparse ``weight`` and a
    ``name``) whose unperturbed input has ‖h‖₂ ≤ ``lam``."""
    w = op.weight
    n_out, n_in = w.shape
    absv = np.abs(w.vals)
    row1 = np.bincount(w.rows, weights=absv, minlength=n_out)
    col1 = np.bincount(w.cols, weights=absv, minlength=n_in)
    r2 = np.sqrt(np.bincount(w.rows, weights=absv ** 2, minlength=n_out))
    omega = float(np.sqrt(row1.max(initial=0.0) * col1.max(initial=0.0)))
    return AffineBounds(op.name, n_out, w.rows, w.cols, absv, r2, omega, lam)


def sup_log(passes, lo_log: float = math.log(1e-300), hi_log: float = math.log(16.0),
            iters: int = 60) -> float:
    """sup{ε : passes(ε)} for a monotone predicate, by bisection on log ε."""
    if not passes(math.exp(lo_log)):
        return 0.0
    if passes(math.exp(hi_log)):
        return math.exp(hi_log)
    for _ in range(iters):
        mid = 0.5 * (lo_log + hi_log)
        if passes(math.exp(mid)):
            lo_log = mid
        else:
            hi_log = mid
        if hi_log - lo_log < 1e-7:
            break
    return math.exp(lo_log)


def sup_below(f, limit: float, slope0: float) -> float:
    """sup{ε ≥ 0 : f(ε) ≤ limit} for increasing f with f(ε) ≥ slope0·ε."""
    if limit <= 0:
        return 0.0
    lo, hi = 0.0, limit / slope0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) <= limit else (lo, mid)
    return lo


def fixed_point(f, iters: int = 80) -> float:
    """sup{s ≥ 0 : s ≤ f(s)} for a non-increasing f (the best free constant σ when a bound
    is min(σ, terms decreasing in σ))."""
    hi = f(0.0)
    if not math.isfinite(hi):
        return math.inf
    lo = 0.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid <= f(mid) else (lo, mid)
    return lo


__all__ = ["AffineBounds", "affine_bounds", "fixed_point", "hypercube_norm", "sup_below", "sup_log"]


# ---------------------------------------------------------------------------------------------
# Certificates for any weights of a construction's shape (issue 38, Deliver 2)
# ---------------------------------------------------------------------------------------------
def spectral_norm(W) -> float:
    """‖W‖_op of a sparse matrix: Schur's bound ``sqrt(max row ℓ1 · max column ℓ1)``, or the
    exact spectral norm (a hair up, for the SVD's rounding) when it is small enough to
    densify (at most 2^20 entries)."""
    absv = np.abs(W.vals)
    row1 = np.bincount(W.rows, weights=absv, minlength=W.shape[0])
    col1 = np.bincount(W.cols, weights=absv, minlength=W.shape[1])
    schur = float(np.sqrt(row1.max(initial=0.0) * col1.max(initial=0.0)))
    if not np.any(W.vals) or W.shape[0] * W.shape[1] > (1 << 20):
        return schur
    return min(schur, float(np.linalg.norm(W.dense(), 2)) * (1 + 1e-12))


def sparse_apply(W, b: np.ndarray, H: np.ndarray) -> np.ndarray:
    """``H Wᵀ + b`` for a batch ``H`` [n, n_in] (dense when W is small, else by entries)."""
    n_out, n_in = W.shape
    if n_out * n_in <= (1 << 22):
        return H @ W.dense().T + b
    out = np.zeros((H.shape[0], n_out))
    np.add.at(out.T, W.rows, (H[:, W.cols] * W.vals).T)
    return out + b


def same_parameters(net, built) -> bool:
    """Whether two networks of one shape hold the same parameters, exactly (every array
    attribute of every op, nested nets included): the weights are the construction's."""
    if type(net) is not type(built):
        return False
    if hasattr(net, "nodes"):
        return len(net.nodes) == len(built.nodes) and all(
            same_parameters(a, b) for a, b in zip(net.nodes, built.nodes))
    for k, v in vars(net).items():
        w = getattr(built, k, None)
        if hasattr(v, "nodes") or hasattr(v, "vals"):
            if not same_parameters(v, w):
                return False
        elif isinstance(v, np.ndarray) or isinstance(w, np.ndarray):
            a, b = np.asarray(v), np.asarray(w)
            if a.shape != b.shape or not np.array_equal(a, b):
                return False
    return True


def not_certified(wrong: int, n: int, space: str, **extra) -> dict:
    """The certificate's answer for a net that does not compute its source on the input
    space: no radius (a margin is only defined where the net is right)."""
    return {"certified": False, "radius": 0.0, "wrong": int(wrong), "n": int(n), "space": space,
            "message": f"not certified: wrong on {wrong} of {n} inputs", **extra}


class Coordinatewise:
    """A two-layer block ``ζ(z) = φ(B φ(A z + c) + d)`` that acts coordinatewise:
    ``ζ_j(z) = φ(u_j(z_j))``, ``u_j(t) = d_j + Σ_k w_jk φ(a_jk t + c_jk)`` (every hidden
    unit reads at most one coordinate, every output only its own coordinate's units; a unit
    that reads nothing is a constant folded into ``d``).  Prop. 3.4's round has this form,
    with its construction weights and with any weights of its sparsity (trained, perturbed).

    :meth:`oscillation` bounds how far the *unperturbed* block's output can move when its
    input moves by at most ``s`` per coordinate around a reference ``g``: each ``u_j`` is
    piecewise linear, so its extremes over ``[g_j − s, g_j + s]`` are at the ends or at a
    kink ``−c_k/a_k`` inside, and φ is monotone.  For the construction's round around a bit
    with ``s ≤ 1/3`` it is exactly 0 (Definition D.1's correction)."""

    def __init__(self, d, a, c, w):
        self.d, self.a, self.c, self.w = d, a, c, w  # [n], [n, M] x3

    @classmethod
    def of(cls, A_weight, A_bias, B_weight, B_bias) -> "Coordinatewise | None":
        """The block's coordinatewise form, or None when it does not act coordinatewise."""
        n_h, n = A_weight.shape
        if B_weight.shape != (n, n_h):
            return None
        nz = A_weight.vals != 0
        if np.any(np.bincount(A_weight.rows[nz], minlength=n_h) > 1):
            return None
        a, src = np.zeros(n_h), np.full(n_h, -1, dtype=np.int64)
        a[A_weight.rows[nz]], src[A_weight.rows[nz]] = A_weight.vals[nz], A_weight.cols[nz]
        c = np.asarray(A_bias, dtype=np.float64)
        bnz = B_weight.vals != 0
        rows, cols, vals = B_weight.rows[bnz], B_weight.cols[bnz], B_weight.vals[bnz]
        if np.any((src[cols] >= 0) & (src[cols] != rows)):
            return None
        d = np.asarray(B_bias, dtype=np.float64).copy()
        const = src[cols] < 0
        np.add.at(d, rows[const], vals[const] * np.maximum(c[cols[const]], 0.0))
        rows, cols, vals = rows[~const], cols[~const], vals[~const]
        cnt = np.bincount(rows, minlength=n)
        M = int(cnt.max(initial=0))
        slot = np.zeros(rows.size, dtype=np.int64)
        order = np.lexsort((cols, rows))
        rows, cols, vals = rows[order], cols[order], vals[order]
        start = np.concatenate([[0], np.cumsum(cnt)])
        slot = np.arange(rows.size) - start[rows]
        A2, C2, W2 = np.zeros((n, M)), np.zeros((n, M)), np.zeros((n, M))
        A2[rows, slot], C2[rows, slot], W2[rows, slot] = a[cols], c[cols], vals
        return cls(d, A2, C2, W2)

    def u(self, t: np.ndarray) -> np.ndarray:
        """``u_j(t_j)`` for ``t`` [..., n] (before the last φ)."""
        out = np.broadcast_to(self.d, t.shape).copy()
        for k in range(self.a.shape[1]):
            out += self.w[:, k] * np.maximum(self.a[:, k] * t + self.c[:, k], 0.0)
        return out

    def oscillation(self, g: np.ndarray, s: np.ndarray, ref: np.ndarray | None = None) -> np.ndarray:
        """``sup_{|z_j − g_j| ≤ s} |φ(u_j(z_j)) − φ(u_j(g_j))|`` per row and coordinate
        (``g`` [R, n], ``s`` [R]; ``ref`` = φ(u(g)) when known): evaluated at the interval's
        ends and the kinks inside."""
        s = np.asarray(s, dtype=np.float64)[:, None]
        lo, hi = g - s, g + s
        ref = np.maximum(self.u(g), 0.0) if ref is None else ref
        worst = np.maximum(np.abs(np.maximum(self.u(lo), 0.0) - ref), np.abs(np.maximum(self.u(hi), 0.0) - ref))
        for k in range(self.a.shape[1]):
            a = self.a[:, k]
            if not np.any(a):
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                kink = np.where(a != 0, -self.c[:, k] / np.where(a != 0, a, 1.0), 0.0)
            p = np.where(a != 0, np.clip(kink, lo, hi), g)
            np.maximum(worst, np.abs(np.maximum(self.u(p), 0.0) - ref), out=worst)
        return worst


def sup_log_decades(passes, top: float = 16.0, floor: float = 1e-300, rel: float = 1e-3) -> float:
    """sup{ε : passes(ε)} for a monotone predicate: down from ``top`` by decades to the
    first passing ε, then bisection on log ε inside that decade to ``rel`` (fewer calls
    than :func:`sup_log` when each is costly)."""
    hi = top
    if passes(hi):
        return hi
    lo = hi / 10
    while not passes(lo):
        hi, lo = lo, lo / 10
        if lo < floor:
            return 0.0
    lo_log, hi_log = math.log(lo), math.log(hi)
    while hi_log - lo_log > rel:
        mid = 0.5 * (lo_log + hi_log)
        if passes(math.exp(mid)):
            lo_log = mid
        else:
            hi_log = mid
    return math.exp(lo_log)
