"""``f̄_head`` of Goel et al., B.2, and the 2-layer ReLU net of Definition 5 that computes it.

B.2 wants, as the pixel-wise read-out,

    f̄_head(x) = −1            x ≤ −1/6
               18(x + 1/9)    x ∈ (−1/6, 0)
              −18(x − 1/9)    x ∈ (0, 1/9)
               18(x − 1/9)    x ∈ (1/9, 1/6)
               1              otherwise.

Taken literally, the open intervals leave ``x = 0`` and ``x = 1/9`` to "otherwise" (1).
We take the continuous function the pieces define, ``f̄_head(0) = 2`` and
``f̄_head(1/9) = 0``: B.3 needs ``f̄_head(3^{-2}) = 0`` (every cell but the answer ends at
``3^{-2}`` and is "truncated to 0"), Lemma 4 needs ``f̄_head(−3^{-2}) = 0`` with slope 18,
and a ReLU network is continuous.  It is

    f̄_head(x) = −1 + 18σ(x + 1/6) − 36σ(x) + 36σ(x − 1/9) − 18σ(x − 1/6),

four ReLUs (B.3 allows six).  The bias ``−1`` is the float64 nearest to ``−1`` that makes
``f̄_head`` exactly 0 at the float64 value the network's memory cells hold (``E_STAR``,
:func:`exact_zero_bias`; it is ``−1 − 2⁻⁵²·k`` for a small ``k``), so that Algorithm 1's
``ŷ`` is exactly 0 during memorization and SGD writes Lemma 4's W bit for bit.  Definition 5 writes ``f_head(z) = U1 σ(U2 z)`` with
``U1 ∈ R^{d_head×1}``, ``U2 ∈ R^{1×d_head}``; the shapes only compose the other way round,
so here ``U2`` is ``d_head × 1`` (applied first) and ``U1`` is ``1 × d_head``.

The answer cell at the end of a run holds ``±1/3 + 1/9 + 1/27 + state`` (the head stays on
it): ``≥ 1/6`` for ``+`` and ``≤ −1/6`` for ``−`` whatever the state, so the read-out is
``±1``.  A blank answer (our plain ``halt``) reads ``18(1/27 + state)``, not 0: the paper's
machines always answer ±1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The breakpoints of f̄_head and the slope changes there.
BREAKS = (-1.0 / 6.0, 0.0, 1.0 / 9.0, 1.0 / 6.0)
SLOPES = (18.0, -36.0, 36.0, -18.0)

#: The float64 value every memory-phase cell (B.1.1's −3⁻²) holds once the filter's
#: memory pass-through has seen it: ``fl(fl(2 − 1/9) − 2)``, since ``V1`` adds ``K = 2``
#: and the pass-through returns its input on that grid (docs/rcnn.md "The layers").
E_STAR = float((np.float64(2.0) + np.float64(-1.0 / 9.0)) - np.float64(2.0))


def exact_zero_bias() -> float:
    """``b1``: the float64 ``−1`` up to an ulp that makes ``f_head(E_STAR) = 0`` exactly,
    ``−fl(18·fl(E_STAR + 1/6))``.  Lemma 4 needs ``ŷ = 0`` during memorization, when every
    input cell is ``E_STAR``; with ``b1 = −1`` the float sum is ~10⁻¹⁵ a cell, which SGD
    writes into W (|ΔW| = |ŷ|/3).  The other three units are 0 there."""
    t = np.float64(E_STAR) + np.float64(1.0 / 6.0)
    return -float(np.float64(18.0) * t)


def f_head(x) -> np.ndarray:
    """Goel et al., B.2: the reference ``f̄_head`` (continuous reading; module docstring)."""
    x = np.asarray(x, dtype=np.float64)
    return np.select(
        [x <= -1 / 6, x <= 0, x <= 1 / 9, x <= 1 / 6],
        [np.full_like(x, -1.0), 18 * (x + 1 / 9), -18 * (x - 1 / 9), 18 * (x - 1 / 9)],
        1.0,
    )


def f_head_slope(x) -> np.ndarray:
    """The slope of ``f̄_head`` (0 outside ``(−1/6, 1/6)``; undefined at the breakpoints,
    where this returns the right-hand slope)."""
    x = np.asarray(x, dtype=np.float64)
    return np.select([x < -1 / 6, x < 0, x < 1 / 9, x < 1 / 6], [0.0, 18.0, -18.0, 18.0], 0.0)


@dataclass(frozen=True)
class HeadNet:
    """``f_head(z) = U1 σ(U2 z + b2) + b1`` (Definition 5 with biases, footnote 6)."""

    U2: np.ndarray
    b2: np.ndarray
    U1: np.ndarray
    b1: np.ndarray
    labels: tuple[str, ...]

    @property
    def d_head(self) -> int:
        return self.U2.shape[0]

    def __call__(self, x, dtype=np.float64) -> np.ndarray:
        z = np.asarray(x, dtype=dtype)[..., None]
        h = np.maximum(z @ self.U2.T.astype(dtype) + self.b2.astype(dtype), 0)
        return (h @ self.U1.T.astype(dtype) + self.b1.astype(dtype))[..., 0]


def build_head() -> HeadNet:
    """Goel et al., B.2/B.3: ``f̄_head`` as four ReLUs (module docstring)."""
    U2 = np.ones((4, 1))
    b2 = -np.array(BREAKS)
    U1 = np.array([SLOPES])
    b1 = np.array([exact_zero_bias()])
    labels = ("head:relu(x+1/6)", "head:relu(x)", "head:relu(x-1/9)", "head:relu(x-1/6)")
    return HeadNet(U2, b2, U1, b1, labels)
