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
