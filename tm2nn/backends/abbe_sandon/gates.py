"""Boolean gates as saturating units (Abbe & Sandon §4.1 Lemma 1, §4.2 Lemma 5).

A gate is one vertex with activation f (or f*) whose input is always outside
[-3/2, 3/2] -- in fact |z| >= 2 -- so it outputs ±2 (1 -> 2, 0 -> -2) and f'(z) = 0
exactly: SGD never changes the weights into it and nothing backpropagates through it.

Weights (Lemma 1's proof, fan-in 2; our n-ary generalisation keeps |z| = 2 exactly):

* NOT:  weight -1 from the operand, no bias:                z = -x
* AND:  weight 1 from each of the k operands, bias -2(k-1):  z = sum x_i - 2(k-1)
* OR:   weight 1 from each of the k operands, bias +2(k-1):  z = sum x_i + 2(k-1)
* input read (Lemma 5's proof): an input v' encoding 0/1 as <= y0 / >= y1 gets a vertex
  with weight 4/(y1 - y0) and bias -2(y1 + y0)/(y1 - y0): z <= -2 or z >= 2.

The bias is an edge from the constant vertex.  Other gate types (XOR, NAND, ...) are
lowered to these by the net builder (not here).  Lemma 5's noise tolerance: a vertex of
in-degree d (bias edge included) still saturates if every incoming weight moves by less
than 1/12 in total, since its input moves by at most 2 d/12 and |z| >= 3/2 + d/6 holds
for NOT (d = 1), AND/OR with k = 2 (d = 3) and input reads (d = 2);
:func:`noise_margin` reports the slack.  Inside Lemma 6's net the constant vertex outputs 1,
so a bias edge moves z by at most the noise itself: the budget is safe up to 1/10 there
(:mod:`.lemma5` spends it adversarially in the net).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import activation as act


@dataclass(frozen=True)
class GateUnit:
    """One saturating vertex: z = weights . x + bias, output f(z) in {-2, 2}."""

    op: str
    weights: tuple[float, ...]
    bias: float

    def pre(self, xs) -> np.ndarray:
        return np.asarray(xs, dtype=np.float64) @ np.asarray(self.weights) + self.bias

    def __call__(self, xs) -> np.ndarray:
        return act.f(self.pre(xs))

    @property
    def in_degree(self) -> int:
        return len(self.weights) + (1 if self.bias != 0 else 0)


def gate(op: str, k: int = 2) -> GateUnit:
    """NOT, AND or OR on k operands encoded ±2 (Lemma 1's proof; k > 2 is our generalisation)."""
    op = op.upper()
    if op == "NOT":
        return GateUnit("NOT", (-1.0,), 0.0)
    if op in ("AND", "OR") and k >= 1:
        return GateUnit(op, (1.0,) * k, (-2.0 if op == "AND" else 2.0) * (k - 1))
    raise ValueError(f"no saturating unit for {op}/{k} (lower it to AND/OR/NOT first)")


def input_read(y0: float, y1: float) -> GateUnit:
    """Lemma 5: read an input that encodes 0 as <= y0 and 1 as >= y1 (y0 < y1) into ±2."""
    if not y0 < y1:
        raise ValueError("need y0 < y1")
    return GateUnit("READ", (4.0 / (y1 - y0),), -2.0 * (y1 + y0) / (y1 - y0))


def all_inputs(unit: GateUnit) -> np.ndarray:
    """Every ±2-encoded operand vector the gate can see (rows), for exhaustive checks."""
    k = len(unit.weights)
    bits = (np.arange(2**k)[:, None] >> np.arange(k)) & 1
    return 4.0 * bits - 2.0


def noise_margin(unit: GateUnit, xs) -> float:
    """min |z| - (3/2 + in_degree/6) over the given operand rows (>= 0: Lemma 5 holds)."""
    return float(np.min(np.abs(unit.pre(xs))) - (1.5 + unit.in_degree / 6))
