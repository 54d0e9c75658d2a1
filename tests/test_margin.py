"""All-layer margin (Wei, Chen & Ma eq. 2.1, Theorem D.6): certified radius vs attacks."""

import math

import numpy as np
import pytest

from tests.conftest import CORPUS, EXAMPLES
from tm2nn.backends.relu_circuit import compile as relu_compile
from tm2nn.emit.torch_emit import run_torch
from tm2nn.interp import eval_circuit, exhaustive_inputs
from tm2nn.ir import Circuit, Gate
from tm2nn.syntax import load
from tm2nn.verify.margin import certified_radius, empirical_margin, perturbed_outputs


def full_adder():
    return load(EXAMPLES / "full_adder.circ")


def c17():
    path = CORPUS / "circuits" / "iscas85" / "c17.bench"
    if path.exists():
        return load(path)
    # the same netlist, for when the corpus is absent
    nand = [("G10", "G1", "G3"), ("G11", "G3", "G6"), ("G16", "G2", "G11"),
            ("G19", "G11", "G7"), ("G22", "G10", "G16"), ("G23", "G16", "G19")]
    return Circuit("c17", ("G1", "G2", "G3", "G6", "G7"), ("G22", "G23"),
                   tuple(Gate(o, "NAND", (a, b)) for o, a, b in nand))


def not_chain(n=20):
    gates = [Gate(f"n{i}", "NOT", (f"n{i - 1}" if i else "a",)) for i in range(n)]
    return Circuit("chain", ("a",), (f"n{n - 1}",), tuple(gates))


SMALL = [full_adder, c17]


def _flips(comp, x, y):
    thr = comp.output_encoding["threshold"]
    return int(((y > thr) != eval_circuit(comp.source, x)).any(1).sum())


def test_certified_radius_by_hand_for_one_buffer():
    """One BUF, no correction: output 1 - ... must stay above 1/2.  Per coordinate the error
    is ≤ ε1·X1 + ε2·X2 with X1 = sqrt(‖h‖²+1) = sqrt(2), X2 = sqrt((1 + ε X1)² + 1), so
    the radius solves ε·sqrt(X1² + X2²) = 1/2."""
    c = Circuit("buf", ("a",), ("o",), (Gate("o", "BUF", ("a",)),))
    cert = certified_radius(relu_compile(c))
    e = cert["radius"]
    x1 = math.sqrt(2.0)
    x2 = math.hypot(1 + e * x1, 1.0)
    assert e * math.hypot(x1, x2) == pytest.approx(0.5, rel=1e-6)
    # and the attack finds something close (the bound is nearly tight here)
    emp = empirical_margin(relu_compile(c), exhaustive_inputs(1), method="gradient", trials=2, steps=80)
    assert e <= emp["eps"] <= 1.6 * e


@pytest.mark.parametrize("make", SMALL, ids=lambda f: f.__name__)
@pytest.mark.parametrize("corrections", [True, False])
@pytest.mark.parametrize("pm1", [False, True])
def test_certified_is_below_the_attacks(make, corrections, pm1):
    c = make()
    comp = relu_compile(c, corrections=corrections, pm_one_output=pm1)
    x = exhaustive_inputs(len(c.inputs))
    cert = certified_radius(comp)
    assert 0 < cert["radius"] < math.inf
    assert cert["radius"] >= cert["radius_chain"]
    if corrections:
        assert cert["radius"] >= cert["radius_local"] > 0
        assert all(r["eps_f"] >= cert["radius_local"] for r in cert["per_group"])
    rnd = empirical_margin(comp, x, seed=1, trials=4, method="random")
    grd = empirical_margin(comp, x, seed=1, trials=2, method="gradient", steps=60)
    assert cert["radius"] <= grd["eps"] <= rnd["eps"] * 1.5
    assert cert["radius"] <= rnd["eps"] < math.inf


@pytest.mark.parametrize("make", SMALL, ids=lambda f: f.__name__)
@pytest.mark.parametrize("corrections", [True, False])
def test_perturbing_by_just_under_the_radius_changes_nothing(make, corrections):
    c = make()
    for pm1 in (False, True):
        comp = relu_compile(c, corrections=corrections, pm_one_output=pm1)
        x = exhaustive_inputs(len(c.inputs))
        r = certified_radius(comp)["radius"]
        for seed in range(5):
            for kind in ("aligned", "dense"):
                y = perturbed_outputs(comp, x, 0.99 * r, seed=seed, kind=kind)
                assert _flips(comp, x, y) == 0, (seed, kind)
        # the gradient attack confined to ε ≤ 0.99·radius finds nothing either
        att = empirical_margin(comp, x, seed=3, trials=2, method="gradient", steps=40,
                               max_eps=0.99 * r, eps0=0.99 * r)
        assert att["eps"] == math.inf


def test_a_perturbation_of_some_size_does_flip():
    comp = relu_compile(full_adder())
    x = exhaustive_inputs(3)
    emp = empirical_margin(comp, x, seed=0, trials=4, method="random")
    y = perturbed_outputs(comp, x, 4 * emp["eps"], seed=0, kind="aligned")
    assert np.isfinite(y).all()
    assert emp["input"] is not None and len(emp["input"]) == 3


@pytest.mark.parametrize("make", [not_chain, lambda: load(EXAMPLES / "ripple_adder4.circ")],
                         ids=["not_chain20", "ripple_adder4"])
def test_corrections_certify_a_larger_radius_on_deep_circuits(make):
    c = make()
    with_c = certified_radius(relu_compile(c, corrections=True))
    without = certified_radius(relu_compile(c, corrections=False))
    assert with_c["radius"] > 1.5 * without["radius"]
    # the recompiling form gives the same numbers
    again = certified_radius(relu_compile(c, corrections=True), corrections=False)
    assert again["radius"] == without["radius"] and again["corrections"] is False


def test_without_corrections_the_radius_shrinks_with_depth():
    radii = [certified_radius(relu_compile(not_chain(n), corrections=False))["radius"] for n in (5, 10, 20, 40)]
    assert all(a > b for a, b in zip(radii, radii[1:]))
    with_c = [certified_radius(relu_compile(not_chain(n), corrections=True))["radius"] for n in (10, 20, 40)]
    assert max(with_c) / min(with_c) < 1.01  # corrections: independent of depth


def test_attacks_do_not_touch_the_compiled_net():
    comp = relu_compile(full_adder())
    before = [(op.weight.vals.copy(), op.bias.copy()) for op in comp.net.affine_layers()]
    x = exhaustive_inputs(3)
    empirical_margin(comp, x, method="gradient", trials=1, steps=5)
    perturbed_outputs(comp, x, 0.5, kind="dense")
    for (w, b), op in zip(before, comp.net.affine_layers()):
        assert np.array_equal(w, op.weight.vals) and np.array_equal(b, op.bias)
    y = run_torch(comp.net, x.astype(np.float32))
    assert np.array_equal(y > 0.5, eval_circuit(comp.source, x))
