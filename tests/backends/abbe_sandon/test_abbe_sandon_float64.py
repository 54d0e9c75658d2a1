"""The float64 parametrisation of Abbe & Sandon's M_s (Def. 6) and Lemma 2's flip property
under plain torch.optim.SGD (tm2nn/backends/abbe_sandon/float64.py; derivation in
docs/abbe_sandon.md, "float64 parametrisation")."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tm2nn.backends.abbe_sandon import float64 as f64
from tm2nn.backends.abbe_sandon import gadgets
from tm2nn.backends.abbe_sandon.constants import Sec41


def is_pow2(x) -> bool:
    m, _ = math.frexp(abs(float(x)))
    return x != 0 and m == 0.5 and Fraction(x) == Fraction(float(x))


# ---------------------------------------------------------------- constants
@pytest.mark.parametrize("k", range(1, f64.K_MAX + 1))
def test_constants_are_powers_of_two_and_flip(k):
    d = f64.Dyadic(k)
    for v in (d.s, d.control, d.P, d.gamma, d.read, d.m_prime, d.path_gradient(1)):
        assert is_pow2(v)
    assert d.m_prime * d.P == 1.0 and d.m_prime == 2 ** (6 * k - 1)
    assert d.gamma * d.path_gradient(3) == 2 * d.s  # gamma * dL/dw_j = 2 w_j: w_j -> -w_j
    assert 2 * d.control == d.s * d.path_values()["v3"]  # vc = 2 cancels v3's input to v4
    z = d.path_values()
    assert f64.RAMP_END <= min(z.values()) and max(z.values()) <= 1.0 < f64.LIN_END  # identity piece
    lo, hi = d.exponent_range()
    assert -126 < lo and hi < 127  # inside float32's normal range, a fortiori float64's
    assert d.m_prime <= 2**53  # the output's sum of m' contributions is exact


def test_for_m_and_bounds():
    assert f64.Dyadic.for_m(1).k == 1 and f64.Dyadic.for_m(32).k == 1 and f64.Dyadic.for_m(33).k == 2
    assert f64.Dyadic.for_m(2**11).k == 2 and f64.Dyadic.for_m(2**11 + 1).k == 3
    with pytest.raises(ValueError):
        f64.Dyadic(0)
    with pytest.raises(ValueError):
        f64.Dyadic.for_m(2**53 + 1)


def test_paper_weights_admit_no_exact_float_flip():
    """Lemma 2 with x**3 forces (w_j / w_{j+1})**2 = 3 (docs): no two floats satisfy it,
    so the paper's float64 weights w(v0,v1) = 9 sqrt3 s, w(v1,v2) = 9 s cannot both take
    part in an exact flip."""
    c = Sec41.for_m(1)
    w = gadgets.ms_gadget(c.float_s()).weights
    for a, b in zip(gadgets.MS_PATH_PLUS, gadgets.MS_PATH_PLUS[1:]):
        assert Fraction(w[a]) ** 2 != 3 * Fraction(w[b]) ** 2
    # and for any float b, no float a has a**2 == 3 b**2 (sqrt 3 is irrational):
    rng = np.random.default_rng(0)
    for b in rng.uniform(0.01, 10, 200):
        a = float(math.sqrt(3) * b)
        assert Fraction(a) ** 2 != 3 * Fraction(b) ** 2


# ---------------------------------------------------------------- one gadget, generic code
def run_gadget(g: gadgets.Gadget, d: f64.Dyadic, num, steps) -> list[dict]:
    """Lemma 3 from one gadget's view: the other m' - active gadgets supply o P each."""
    lr = num(d.gamma)
    P = num(d.P)
    hist = []
    for o, active, label in steps:
        vc, vcp = (num(0), num(2)) if (active and o == 1) else ((num(2), num(0)) if active else (num(2), num(2)))
        clamp = {"v0": num(2), "vc": vc, "vc'": vcp}
        p = gadgets.forward(g, clamp)
        z = p.contribution + (d.m_prime - (1 if active else 0)) * o * P
        y, delta = gadgets.output_delta(z, num(label), "as_fpl")
        assert y == o
        want = f64.closed_form_gradients(g, vc, vcp, delta)
        grads = gadgets.sgd_step(g, clamp, delta, lr)
        assert grads == want
        hist.append(dict(g.weights))
    return hist


@settings(max_examples=10, deadline=None)
@given(k=st.integers(1, f64.K_MAX), seed=st.integers(0, 2**32 - 1))
def test_float64_equals_exact_rationals(k, seed):
    """The same steps in Fractions and in float64 give identical weights at every step."""
    d = f64.Dyadic(k)
    rng = np.random.default_rng(seed)
    steps = [(int(rng.choice([-1, 1])), bool(rng.random() < 0.6), int(rng.choice([-1, 1]))) for _ in range(300)]
    exact = run_gadget(f64.ms_fpl_gadget(k, Fraction), d, Fraction, steps)
    flt = run_gadget(f64.ms_fpl_gadget(k, float), d, float, steps)
    for a, b in zip(exact, flt):
        assert all(Fraction(b[e]) == a[e] for e in a)
    bit = 0
    for (o, active, label), w in zip(steps, exact):
        bit ^= int(active and o != label)
        assert (w[("v0", "v1")] < 0) == bool(bit)


# ---------------------------------------------------------------- the torch net under SGD
def check_run(k: int, n_real: int, seed: int, steps: int, dtype=torch.float64) -> int:
    """Train the memory net with torch.optim.SGD on random Lemma 3 steps and check,
    after every step, Lemma 2's claims exactly.  Returns the number of real flips."""
    d = f64.Dyadic(k)
    n = n_real + d.m_prime
    net = f64.memory_net(k, n, dtype)
    init = net.weights()
    rng = np.random.default_rng(seed)
    plans = [f64.plan_step(rng, d, n_real, n) for _ in range(steps)]
    labels = rng.choice([-1.0, 1.0], steps)
    shared = np.ones(n)  # sign of (w01, w12)
    plus = np.ones(n)    # sign of (w23, w34, w45, w56)
    minus = np.ones(n)   # sign of (w23', w3'4', w4'5', w5'6)
    flips = 0
    path_plus = ("w23", "w34", "w45", "w56")
    path_minus = ("w23p", "w3p4p", "w4p5p", "w5p6")
    outside = f64.OUTSIDE_EDGES + ("wc4", "wcp4p", "const_v0")

    def check(t, net):
        nonlocal flips
        o, active, _ = plans[t]
        wrong = o != labels[t]
        if wrong:
            (plus if o == 1 else minus)[active] *= -1
            shared[active] *= -1
            flips += int(active[:n_real].sum())
        w = net.weights()
        sg = {"w01": shared, "w12": shared, **{e: plus for e in path_plus}, **{e: minus for e in path_minus}}
        for e, sign in sg.items():
            assert torch.equal(w[e], init[e] * torch.tensor(sign, dtype=dtype)), (t, e)
        for e in outside:
            assert torch.equal(w[e], init[e]), (t, e)

    rec = f64.train(net, [p[2] for p in plans], labels, keep_grads=True, callback=check)
    P = d.P
    for t, (r, (o, active, _)) in enumerate(zip(rec, plans)):
        assert r.output == o and r.z_out == o  # hypothesis 2 holds exactly
        delta = 2.0 * (o - labels[t])  # f'(±1) = 1
        for e in f64.PATH_EDGES[:10]:
            on = active & ((np.ones(n, bool) if e in ("w01", "w12") else
                           (np.full(n, o == 1) if e in path_plus else np.full(n, o == -1))))
            # dL/dw = delta * c / w (Lemma 2's proof with p = 1), c = o P; 0 off the active path
            want = np.where(on, delta * o * P / np.abs(init[e].numpy()), 0.0)
            assert np.array_equal(np.abs(r.grads[e].numpy()), np.abs(want)), (t, e)
        for e in outside:
            assert not torch.any(r.grads[e]), (t, e)
    return flips


@settings(max_examples=2, deadline=None)
@given(k=st.integers(1, 2), n_real=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_sgd_flips_exactly_for_1000_steps(k, n_real, seed):
    flips = check_run(k, n_real, seed, 1000)
    assert flips > 100  # many flips of the real bits happened


def test_float32_is_exact_too():
    check_run(1, 3, 7, 300, torch.float32)


def flip_run(g: gadgets.Gadget, d: f64.Dyadic, steps: int) -> list[float]:
    """Flip g (+ path, always wrong) ``steps`` times; the worst | |w|/|w0| - 1 | after each."""
    errs = []
    for _ in range(steps):
        clamp = {"v0": 2.0, "vc": 0.0, "vc'": 2.0}
        z = gadgets.forward(g, clamp).contribution + (d.m_prime - 1) * d.P
        _, delta = gadgets.output_delta(z, -1.0, "as_fpl")
        gadgets.sgd_step(g, clamp, delta, d.gamma)
        errs.append(max(abs(abs(w) / abs(g.initial[e]) - 1) for e, w in g.weights.items()))
    return errs


def test_exactness_is_essential():
    """Measured: exact dyadic weights stay exact for ever; a relative error of 1e-13 in one
    weight breaks the gadget at the second flip (the inactive gate v4' gets a residual
    ~5e-14 > the dead zone 2**-48, so its control edge gets gradient)."""
    d = f64.Dyadic(1)
    assert flip_run(f64.ms_fpl_gadget(1, float), d, 200) == [0.0] * 200
    g = f64.ms_fpl_gadget(1, float)
    g.weights[("v3", "v4")] *= 1 + 1e-13
    errs = flip_run(g, d, 3)
    assert errs[0] < 1e-12 and errs[2] > 0.1, errs  # measured: 2.0e-13, 126, 126


def test_read_vertex_and_bit():
    d = f64.Dyadic(1)
    net = f64.memory_net(1, d.m_prime + 1)
    _, active, bits = f64.plan_step(np.random.default_rng(0), d, 1, d.m_prime + 1)
    net(bits)
    assert torch.all(net.last["y1"] == d.read)
    assert set(net.last["vc"].tolist()) <= {0.0, 2.0} and set(net.last["vc'"].tolist()) <= {0.0, 2.0}
