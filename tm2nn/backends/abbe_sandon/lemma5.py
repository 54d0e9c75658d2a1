"""Abbe & Sandon §4.2, Lemma 5 inside Lemma 6's net: the computation component still emulates
exactly when the weights into its vertices drift by just under 1/12 each, adversarially.

Lemma 5 (paper): if "for every edge leading to one of the new vertices, the sum of the
absolute values of the noise terms applied to that edge over the course of the training
process is less than 1/12", then (1) the derivative of the loss with respect to every such
edge is 0 and no path through the new vertices contributes to any other derivative, and
(2) the new vertices compute h (±2 for 1/0).  The budget is **per edge, in total** over
training.  Proof: no vertex outputs more than 2 in size, so the noise moves the input of a
vertex of in-degree d by less than d/6; each vertex's noise-free input has size at least
3/2 + d/6, so the noisy one stays outside (-3/2, 3/2), where f* = ±2 and f*' = 0.

:func:`adversarial_drift` spends that budget against the net.  A noise-free run gives, on its
final pass (the evaluation of h: every gate of the schedule and of h is live), each read /
gate vertex's input z_v and each source's output y_u.  Every edge u -> v into the component
then drifts by -sign(z_v) sign(y_u) total/t at each of the t steps (:func:`.noisy.train_noisy`'s
``drift``), so on the final pass all of them have moved by exactly ``total`` towards making
their vertex's input smaller, and the sum of |noise| on each is ``total``.

What this shows in G_n (:func:`margin_rows`, docs/abbe_sandon.md "Lemma 5 in the net"): the
constant vertex outputs 1 (Lemma 4's v0), not 2, so an AND / OR vertex (two ±2 operands and a
bias edge, |z| = 2 when the operands differ) loses at most 2 + 2 + 1 = 5 times the budget,
not 6: its input enters (-3/2, 3/2) only beyond a budget of 1/10 (Lemma 5's 1/12 is safe, not
tight, here), and it leaves our f*'s saturation (from cbrt 2, below the paper's 3/2) only
beyond (2 - cbrt 2)/5 ~ 0.148, where the emulation breaks (a violation names the vertex).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

import mpmath

from tm2nn.ir.noisy_learner import NoisyLearner
from tm2nn.learners.noisy import majority_learner, parity_learner

from .noisy import (
    DPS,
    NoisyEngine,
    NoisyReport,
    build_noisy_net,
    check_dps,
    saturation,
    train_noisy,
)

#: Edge parts leading to Lemma 5's new vertices (the reads and the gates).
PARTS = ("read", "gate")


def adversarial_drift(lr: NoisyLearner, xs, ys, x_test, total, dps: int = DPS) -> dict[int, mpmath.mpf]:
    """Edge -> per-step drift: Lemma 5's budget ``total`` per edge into the computation
    component, spent against the final pass of a noise-free run (module doc)."""
    net = build_noisy_net(lr, check_dps(dps))
    rep = train_noisy(lr, xs, ys, x_test, noise=0, net=net)
    if not rep.ok:  # pragma: no cover - the construction
        raise RuntimeError(f"the noise-free run failed: {rep.violations[:1]}")
    eng = NoisyEngine(net)
    eng.forward(x_test)
    with mpmath.workdps(dps):
        per = mpmath.mpf(Fraction(total).numerator) / Fraction(total).denominator / lr.t
        return {e: -mpmath.sign(eng.z[net.dst[e]]) * mpmath.sign(eng.y[net.src[e]]) * per
                for e in range(len(net.w)) if net.part[e] in PARTS}


@dataclass
class MarginRow:
    """One run at one budget: the smallest |input| - 3/2 over the component on the final
    pass and where, whether every check held, and the first violation."""

    total: Fraction
    slack: mpmath.mpf
    vertex: str
    ok: bool
    first: str
    report: NoisyReport


def run_at(lr: NoisyLearner, xs, ys, x_test, total, *, noise: float = 1.0, seed: int = 0,
           dps: int = DPS) -> MarginRow:
    """A §4.2 run with Lemma 4's noise (``noise`` times :func:`.noisy.noise_bound`, maximal)
    on every edge plus Lemma 5's adversary at ``total`` (:func:`adversarial_drift`)."""
    drift = adversarial_drift(lr, xs, ys, x_test, total, dps)
    rep = train_noisy(lr, xs, ys, x_test, noise=noise, mode="max", seed=seed, drift=drift, dps=dps)
    slack, vertex = rep.slack[-1]
    first = f"step {rep.violations[0].step}: {rep.violations[0].what}" if rep.violations else ""
    return MarginRow(Fraction(total), slack, vertex, rep.ok, first, rep)


def budgets() -> list[tuple[str, Fraction]]:
    """The budgets of the table: just under / over 1/12, 1/10 and (2 - cbrt 2)/5."""
    eps = Fraction(1, 2**10)
    with mpmath.workdps(30):
        brk = Fraction(str(mpmath.nstr((2 - saturation()) / 5, 25)))
    return [("1/12 (1 - 2^-10)", Fraction(1, 12) * (1 - eps)), ("1/10 (1 - 2^-10)", Fraction(1, 10) * (1 - eps)),
            ("1/10 (1 + 2^-10)", Fraction(1, 10) * (1 + eps)),
            ("(2 - cbrt 2)/5 (1 - 2^-10)", brk * (1 - eps)), ("(2 - cbrt 2)/5 (1 + 2^-10)", brk * (1 + eps))]


def example_stream(n: int, t: int, seed: int = 3):
    """A random stream (x(0..t-1), y(0..t-1), x) for the table."""
    rng = random.Random(seed)
    return ([[rng.randint(0, 1) for _ in range(n)] for _ in range(t)], [rng.randint(0, 1) for _ in range(t)],
            [rng.randint(0, 1) for _ in range(n)])


def main() -> None:  # pragma: no cover - prints the docs table
    for lr in (majority_learner(2, 3), parity_learner(3, 4)):
        xs, ys, x = example_stream(lr.n, lr.t)
        print(f"{lr.name}: budget per edge | min |z| - 3/2 on the final pass (vertex) | ok | first violation")
        for label, total in budgets():
            r = run_at(lr, xs, ys, x, total)
            print(f"  {label:28s} = {float(total):.6f} | {mpmath.nstr(r.slack, 6):>10s} ({r.vertex}) | {r.ok} | "
                  f"{r.first[:90]}")


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["PARTS", "MarginRow", "adversarial_drift", "budgets", "example_stream", "run_at"]
