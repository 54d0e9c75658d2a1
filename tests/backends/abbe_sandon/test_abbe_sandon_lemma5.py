"""Abbe & Sandon §4.2, Lemma 5's noise margin inside Lemma 6's net
(tm2nn/backends/abbe_sandon/lemma5.py; docs/abbe_sandon.md "Lemma 5 in the net").

Lemma 5: if the noise on every edge into the computation component sums, in absolute value
over training, to less than 1/12 (per edge, in total), the component's vertices stay
saturated (derivatives 0) and compute h.  The adversary spends that budget on every such edge
against the final pass; G_n's constant vertex outputs 1, so AND / OR vertices lose 5x the
budget: |z| >= 3/2 holds up to 1/10, and our f* (saturated from cbrt 2) up to (2 - cbrt 2)/5."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest

from tm2nn.backends.abbe_sandon.lemma5 import (
    PARTS,
    adversarial_drift,
    budgets,
    example_stream,
    run_at,
)
from tm2nn.backends.abbe_sandon.noisy import DPS, build_noisy_net
from tm2nn.learners.noisy import majority_learner, parity_learner

EPS = Fraction(1, 2**10)


@pytest.fixture(scope="module")
def majority():
    lr = majority_learner(2, 3)
    return (lr, *example_stream(lr.n, lr.t))


def test_drift_spends_exactly_the_budget_on_the_component(majority):
    """Every edge into a read or gate vertex drifts by total/t per step (sum of |noise| = the
    budget, Lemma 5's "in total"); no other edge drifts."""
    lr, xs, ys, x = majority
    total = Fraction(1, 12) * (1 - EPS)
    drift = adversarial_drift(lr, xs, ys, x, total)
    net = build_noisy_net(lr)
    assert set(drift) == {e for e, p in enumerate(net.part) if p in PARTS}
    with mpmath.workdps(DPS):
        per = mpmath.mpf(total.numerator) / total.denominator / lr.t
        assert all(abs(abs(d) - per) < mpmath.mpf(10) ** -90 for d in drift.values())
    assert {net.part[e] for e in drift} == set(PARTS)


@pytest.mark.parametrize("learner", ["majority", "parity"])
def test_just_under_one_twelfth_the_net_emulates_exactly(majority, learner):
    """Budget 1/12 (1 - 2^-10) per edge, adversarial, plus Lemma 4's maximal noise on every
    edge: every check holds (memory = stream, outputs within eps' of 1/2, gradient 0 outside
    M', every component vertex saturated on every pass), h is right, and the final pass's
    smallest component input is exactly the predicted 2 - 5 x budget (an AND / OR vertex)."""
    if learner == "majority":
        lr, xs, ys, x = majority
    else:
        lr = parity_learner(3, 4)
        xs, ys, x = example_stream(3, 4)
    total = Fraction(1, 12) * (1 - EPS)
    r = run_at(lr, xs, ys, x, total)
    assert r.ok and r.report.violations == [], r.first
    with mpmath.workdps(DPS):
        want = mpmath.mpf(1) / 2 - 5 * mpmath.mpf(total.numerator) / total.denominator
        assert abs(r.slack - want) < mpmath.mpf(10) ** -40  # the adversary reached the worst case
        assert all(s >= 0 for s, _ in r.report.slack)  # Lemma 5's |z| >= 3/2 on every pass
    assert r.vertex.startswith("gate:")


def test_past_one_tenth_an_input_enters_the_paper_band(majority):
    """Contrast: at 1/10 (1 + 2^-10) some gate's input is inside (-3/2, 3/2), where the
    paper's f* is unconstrained (Lemma 5's hypothesis fails there; the test names the vertex).
    Our f* saturates from cbrt 2, so the run still emulates; 1/10 (1 - 2^-10) is still outside."""
    lr, xs, ys, x = majority
    under = run_at(lr, xs, ys, x, Fraction(1, 10) * (1 - EPS))
    over = run_at(lr, xs, ys, x, Fraction(1, 10) * (1 + EPS))
    assert under.slack > 0 and under.ok
    assert over.slack < 0 and over.vertex.startswith("gate:")
    assert over.ok


def test_past_our_saturation_a_gate_breaks(majority):
    """Mutation: at (2 - cbrt 2)/5 (1 + 2^-10) a gate's input drops below cbrt 2 (f* no longer
    ±2, f*' != 0): the saturation check names it; (1 - 2^-10) is still fine.  Further out the
    emulation itself fails: at 3/20 h comes out wrong, at 1/4 gradients reach the gates'
    in-edges (Lemma 5's claim 1)."""
    lr, xs, ys, x = majority
    (_, lo), (_, hi) = budgets()[3:5]
    assert run_at(lr, xs, ys, x, lo).ok
    r = run_at(lr, xs, ys, x, hi)
    assert not r.ok
    bad = [v.what for v in r.report.violations]
    assert bad and all(w.startswith("Lemma 5: gate:") and "not saturated" in w for w in bad), bad[:3]
    wrong = run_at(lr, xs, ys, x, Fraction(3, 20)).report
    assert (wrong.final > 0) != bool(wrong.expected)  # h computed wrong
    leak = run_at(lr, xs, ys, x, Fraction(1, 4)).report
    assert any("(gate) has gradient" in v.what for v in leak.violations)
