"""Abbe & Sandon §4 numeric core: the activations f, f*; Lemma 1/5 gate units; the memory
gadgets M_s (Def. 6, Lemma 2) exactly and in float64, M' (Def. 7, Lemma 4) in mpmath and
why not in float64; gradients: generic backprop == closed form (Lemma 2/4 proofs) == torch."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tm2nn.backends.abbe_sandon import activation as act
from tm2nn.backends.abbe_sandon import gates
from tm2nn.backends.abbe_sandon.constants import GAMMA_42, Sec41, m_prime_bound, remark9_m_prime
from tm2nn.backends.abbe_sandon.gadgets import (
    MP_PATH,
    MS_PATH_MINUS,
    MS_PATH_PLUS,
    backward,
    forward,
    lemma2_gradients,
    lemma4_gradients,
    mprime_gadget,
    ms_bit,
    ms_gadget,
    output_delta,
    sgd_step,
    torch_gradients,
)

SEC41 = Sec41.for_m(8)


# ---------------------------------------------------------------- activations
def test_activation_pieces_monotone_odd_flat():
    x = np.linspace(-2.5, 2.5, 100_001)
    for fn, dfn in ((act.f, act.df), (act.fstar, act.dfstar)):
        y = fn(x)
        assert np.all(np.diff(y) >= 0)
        assert np.array_equal(fn(-x), -y)
        assert np.all(dfn(x[np.abs(x) >= act.C]) == 0) and np.all(y[np.abs(x) >= act.C] == 2 * np.sign(x[np.abs(x) >= act.C]))
        inner = np.abs(x) < 1
        assert np.allclose(y[inner & (np.abs(x) > 1e-3)], x[inner & (np.abs(x) > 1e-3)] ** 3, rtol=0, atol=1e-15)
    assert act.f(1.0) == 1.0 and act.df(1.0) == 3.0 and act.df(0.0) == 0.0
    # numeric derivative of the blend matches df (smooth piece is C^1 at least)
    xb = np.linspace(0.9, 1.4, 50_001)
    assert np.max(np.abs(np.gradient(act.f(xb), xb) - act.df(xb))[1:-1]) < 1e-6
    # f*: dead zone and the x^3 piece
    a = act.A_STAR
    zs = np.linspace(-a, a, 1001)
    assert np.all(act.fstar(zs) == 0) and np.all(act.dfstar(zs) == 0)
    xs = np.linspace(0, 3 * a, 30_001)
    assert np.all(np.diff(act.fstar(xs)) >= 0)
    assert act.fstar(2 * a) == (2 * a) ** 3


@given(st.lists(st.floats(-3, 3), min_size=1, max_size=50))
@settings(max_examples=40, deadline=None)
def test_torch_matches_numpy(xs):
    x = np.array(xs + [1.0, -1.0, 0.0, act.C, 1.1, 2 * act.A_STAR, 1.5 * act.A_STAR])
    for fn, dfn, ft in ((act.f, act.df, act.f_torch), (act.fstar, act.dfstar, act.fstar_torch)):
        xt = torch.tensor(x, requires_grad=True)
        yt = ft(xt)
        yt.sum().backward()
        assert np.allclose(yt.detach().numpy(), fn(x), rtol=1e-13, atol=1e-300)
        d = dfn(x)
        assert np.allclose(xt.grad.numpy(), d, rtol=1e-9, atol=1e-12 * np.max(np.abs(d)) + 1e-300)


# ---------------------------------------------------------------- constants
def test_constants():
    b = m_prime_bound()
    assert b**2 > 2**242 * 3**179 > (b - 1) ** 2  # the ceiling of the irrational bound
    assert b >= 10**79  # Remark 9
    assert SEC41.P * SEC41.m_prime == SEC41.one()  # m' gadgets give exactly 1
    s = SEC41.s
    assert s * 18 * SEC41.num(1, 0, Fraction(1, 2)) < 1  # Lemma 2: s < 1/(18 sqrt3)
    assert math.isclose(SEC41.float_s(), float(s), rel_tol=1e-14)
    assert math.isclose(SEC41.float_gamma(), float(SEC41.gamma), rel_tol=1e-12)
    assert math.isclose(math.log10(remark9_m_prime(3)), math.log10(b), abs_tol=1e-6)
    assert 1e3 < remark9_m_prime(11 / 9) < 1e4  # Remark 9: "on the order of 1000"


# ---------------------------------------------------------------- Lemma 1 / 5 gates
@pytest.mark.parametrize("op,k", [("NOT", 1), ("AND", 2), ("OR", 2), ("AND", 3), ("OR", 4)])
def test_gate_units_saturate(op, k):
    u = gates.gate(op, k)
    xs = gates.all_inputs(u)
    bits = xs > 0
    want = {"NOT": ~bits[:, 0], "AND": bits.all(1), "OR": bits.any(1)}[op]
    assert np.array_equal(u(xs), np.where(want, 2.0, -2.0))
    assert np.all(np.abs(u.pre(xs)) >= 2) and np.all(act.df(u.pre(xs)) == 0)
    if k <= 2:
        assert gates.noise_margin(u, xs) >= 0  # Lemma 5


@given(st.floats(-5, 5), st.floats(0.01, 5))
def test_input_read(y0, gap):
    u = gates.input_read(y0, y0 + gap)
    assert u(np.array([[y0]]))[0] == -2 and u(np.array([[y0 + gap]]))[0] == 2
    assert act.df(u.pre(np.array([[y0 - 1], [y0 + gap + 1]]))).tolist() == [0, 0]


# ---------------------------------------------------------------- Lemma 2, exact
def _ms_step(g, sec, out_sign, vc_active, label, exact=True):
    """One SGD step of the net of Lemma 3 seen from one M_s: the net outputs out_sign,
    the other active gadgets (a multiplicity) fill the output's input up to ±1."""
    num = sec.num if exact else float
    two, zero = num(2), num(0)
    vc, vcp = (zero if vc_active else two, two) if out_sign > 0 else (two, zero if vc_active else two)
    clamp = {"v0": two, "vc": vc, "vc'": vcp}
    P = sec.P if exact else 1.0 / sec.m_prime
    others = (sec.m_prime - (1 if vc_active else 0)) * P * out_sign
    mine = forward(g, clamp).contribution
    y, delta = output_delta(mine + others, label)
    grads = sgd_step(g, clamp, delta, sec.gamma if exact else sec.float_gamma())
    return y, delta, grads, vc, vcp


steps = st.lists(st.tuples(st.sampled_from([1, -1]), st.booleans(), st.sampled_from([1, -1])),
                 min_size=1, max_size=10)


@given(steps)
@settings(max_examples=15, deadline=None)
def test_lemma2_exact(seq):
    sec = SEC41
    g = ms_gadget(sec.s)
    bit = 0
    for out_sign, active, label in seq:
        before = dict(g.weights)
        _, delta, grads, vc, vcp = _ms_step(g, sec, out_sign, active, label)
        wrong = out_sign != label
        flip = wrong and active  # controls not both 2
        bit ^= flip
        assert ms_bit(g) == bit
        # closed form of Lemma 2's proof == generic backprop, exactly
        g_before = g.copy()
        g_before.weights = before
        assert grads == lemma2_gradients(g_before, vc, vcp, delta)
        path = MS_PATH_PLUS if out_sign > 0 else MS_PATH_MINUS
        for e, w in g.weights.items():
            assert w == (-before[e] if flip and e in path else before[e])  # exact sign flips only
        for e in (("vc", "v4"), ("vc'", "v4'")):
            assert g.weights[e] == g.initial[e]
    # each sub-path has all-original or all-negated weights (Lemma 2's induction claim)
    for sub in (MS_PATH_PLUS[:2], MS_PATH_PLUS[2:], MS_PATH_MINUS[2:]):
        assert len({g.weights[e] == g.initial[e] for e in sub}) == 1


@given(steps)
@settings(max_examples=30, deadline=None)
def test_lemma2_float64_few_flips(seq):
    """The paper's §4.1 constants in float64 (s computed in log space): while a gadget has
    flipped at most 3 times, signs flip exactly as Lemma 2 says, magnitudes stay within 1e-6,
    controls never move.  (More flips: see test_lemma2_flip_is_unstable.)"""
    sec = SEC41
    g = ms_gadget(sec.float_s())
    bit = 0
    flips = 0
    for out_sign, active, label in seq * 3:
        if out_sign != label and active:
            if flips == 3:
                continue
            flips += 1
        before = dict(g.weights)
        _ms_step(g, sec, out_sign, active, label, exact=False)
        flip = out_sign != label and active
        bit ^= flip
        assert ms_bit(g) == bit
        path = MS_PATH_PLUS if out_sign > 0 else MS_PATH_MINUS
        for e, w in g.weights.items():
            assert (w > 0) == ((before[e] > 0) != (flip and e in path))
            assert abs(abs(w) / abs(g.initial[e]) - 1) < 1e-6
        assert g.weights[("vc", "v4")] == g.initial[("vc", "v4")]
        assert g.weights[("vc'", "v4'")] == g.initial[("vc'", "v4'")]


def test_lemma2_flip_is_unstable():
    """Lemma 2's flip is exact but unstable: a relative error eta in the weights becomes
    ~(2D - 3) eta after one flip, D = 364 the degree of P in s (docs/abbe_sandon.md).
    Measured in float64: the error ratio between consecutive flips is ~725."""
    sec = SEC41
    g = ms_gadget(sec.float_s())
    errs = []
    for k in range(4):
        o = 1 if k % 2 else -1
        _ms_step(g, sec, o, True, -o, exact=False)
        errs.append(max(abs(abs(w) / abs(g.initial[e]) - 1) for e, w in g.weights.items()))
    assert 600 < errs[3] / errs[2] < 850 and 600 < errs[2] / errs[1] < 850


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.sampled_from([1.0, -1.0])), min_size=1, max_size=8))
@settings(max_examples=20, deadline=None)
def test_no_weight_outside_gadget_changes(seq):
    """A whole small net in torch float64 (autograd): two ±1 input bits -> Lemma 1 gate units
    (reads, AND, NOT) -> control vertices (f(1 + g/2) in {0, 2}) -> M_s -> output.  The
    gates' and controls' weights get gradient exactly 0; only M_s edges may move."""
    sec = SEC41
    g = ms_gadget(sec.float_s())
    w = {e: torch.tensor(v, dtype=torch.float64, requires_grad=True) for e, v in g.weights.items()}
    rd = gates.input_read(-1.0, 1.0)
    gate_w = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True)
              for n, v in (("rw", rd.weights[0]), ("rb", rd.bias), ("and_b", -2.0), ("not_w", -1.0),
                           ("c_w", 0.5), ("c_b", 1.0))}
    f = act.f_torch
    P = 1.0 / sec.m_prime
    for b1, b2, label in seq:
        x1, x2 = (torch.tensor(1.0 if b else -1.0, dtype=torch.float64) for b in (b1, b2))
        r1, r2 = f(gate_w["rw"] * x1 + gate_w["rb"]), f(gate_w["rw"] * x2 + gate_w["rb"])
        a = f(r1 + r2 + gate_w["and_b"])          # AND(b1, b2)
        na = f(gate_w["not_w"] * a)               # NOT
        out_pos = b1                              # the net outputs +1 iff b1
        # vc = 0 iff (out +1 and not AND) ; vc' = 2 when out +1, else vc' = 0 iff AND
        keep = torch.tensor(-2.0, dtype=torch.float64)  # -> control vertex outputs 2
        gc = na if out_pos else keep
        gcp = keep if out_pos else a
        vc = f(gate_w["c_w"] * (-gc) + gate_w["c_b"])   # -2 -> 2 (keep), 2 -> 0 (active)
        vcp = f(gate_w["c_w"] * (-gcp) + gate_w["c_b"])
        y = {"v0": torch.tensor(2.0, dtype=torch.float64), "vc": vc, "vc'": vcp}
        for v in g.vertices[3:-1]:
            y[v] = f(sum(w[(u, vv)] * y[u] for (u, vv) in g.weights if vv == v))
        mine = w[("v5", "v6")] * y["v5"] + w[("v5'", "v6")] * y["v5'"]
        active = bool((vc == 0) or (vcp == 0))
        sign = 1.0 if out_pos else -1.0
        z = mine + (sec.m_prime - active) * P * sign
        loss = (f(z) - label) ** 2
        for p in list(w.values()) + list(gate_w.values()):
            p.grad = None
        loss.backward()
        for n, p in gate_w.items():
            assert p.grad is None or p.grad.item() == 0.0, n
        with torch.no_grad():
            for p in w.values():
                p -= sec.float_gamma() * p.grad
        # The M_s control edges (vc -> v4, vc' -> v4') are inside the gadget.  In exact
        # arithmetic they never move (test_lemma2_exact); in float64 the
        # paper's flips amplify rounding (Finding 1), v4's input drifts off 0 and they can
        # move by ~1e-17 after a few flips, so this float64 test asserts only what lies
        # outside the gadget: the gate units (Lemma 1), below.
    for n, v in (("rw", rd.weights[0]), ("rb", rd.bias), ("and_b", -2.0), ("not_w", -1.0)):
        assert gate_w[n].item() == v


def test_gradients_three_ways():
    sec = SEC41
    g = ms_gadget(sec.float_s())
    for vc, vcp, delta in ((0.0, 2.0, 12.0), (2.0, 0.0, -12.0), (2.0, 2.0, 12.0)):
        clamp = {"v0": 2.0, "vc": vc, "vc'": vcp}
        b = backward(g, forward(g, clamp), delta)
        t = torch_gradients(g, clamp, delta)
        c = lemma2_gradients(g, vc, vcp, delta)
        for e in g.weights:
            scale = max(abs(c[e]) for c in (b,)) or 1.0
            assert abs(b[e] - t[e]) <= 1e-12 * max(abs(x) for x in b.values() if x) if any(b.values()) else t[e] == 0
            assert abs(b[e] - c[e]) <= 1e-12 * scale + 1e-150, e
    gp = mprime_gadget()
    clamp = {"v0": 1.0, "vc": 0.0, "vc'": 0.0}
    d = 1.5 * 2 ** (1 / 3) * 2 * (0.5 - 1.0)
    b = backward(gp, forward(gp, clamp), d)
    t = torch_gradients(gp, clamp, d)
    c = lemma4_gradients(gp, 0.0, 0.0, d)
    for e in gp.weights:
        assert math.isclose(b[e], t[e], rel_tol=1e-12, abs_tol=1e-300)
        assert math.isclose(b[e], c[e], rel_tol=1e-12, abs_tol=1e-300)
    # the paper's value at the initial weights: dL/dw_i = 2^-240 3^-29 3^(4 - i/2) d'
    for i, e in enumerate(MP_PATH):
        assert math.isclose(b[e], 2.0**-240 * 3.0**-29 * 3.0 ** (4 - i / 2) * d, rel_tol=1e-12)


# ---------------------------------------------------------------- Lemma 4
def _mp_num(c, a, b):
    return mpmath.mpf(c) * mpmath.power(2, mpmath.mpf(a.numerator) / a.denominator) * mpmath.power(
        3, mpmath.mpf(b.numerator) / b.denominator)


def _run_mprime(labels, t0, num=None, gamma=GAMMA_42, z_other=None, noise=None):
    g = mprime_gadget(num)
    z_other = 2 ** (-1 / 3) if z_other is None else z_other
    seen = []
    for t, label in enumerate(labels):
        vc, vcp = (2, 0) if t < t0 else ((0, 0) if t == t0 else (0, 2))
        one = g.weights[("v0", "v1")] ** 0
        clamp = {"v0": one, "vc": vc * one, "vc'": vcp * one}
        p = forward(g, clamp)
        seen.append((p.y["v2"], p.y["vr"], p.contribution, p.z["v4"]))
        _, delta = output_delta(z_other + p.contribution, label * one, "as_fstar")
        sgd_step(g, clamp, delta, gamma, noise)
    return g, seen


@given(st.lists(st.sampled_from([1, -1]), min_size=2, max_size=8), st.integers(0, 6))
@settings(max_examples=15, deadline=None)
def test_lemma4_mpmath(labels, t0):
    """Lemma 4 with 40-digit mpmath: v2 in [2^-25, 2^-23] 3^-3/2 up to t0 and
    [2^-13, 2^-11] 3^-3/2 after; vr = -2 after t0 iff the t0 label was -1; v4 feeds the
    output only on step t0, with 2^-242 3^-29 (up to the lemma's slack)."""
    with mpmath.workdps(40):
        g, seen = _run_mprime(labels, t0, _mp_num, mpmath.power(2, mpmath.mpf(716) / 3) * mpmath.mpf(3) ** 24,
                              mpmath.cbrt(mpmath.mpf(1) / 2))
        r = mpmath.mpf(3) ** -1.5
        for t, (y2, yr, contrib, _) in enumerate(seen):
            lo, hi = (2.0**-25, 2.0**-23) if t <= t0 else (2.0**-13, 2.0**-11)
            assert lo * r <= y2 <= hi * r
            assert yr == (-2 if t > t0 and labels[t0] == -1 else 2)
            if t == t0:
                assert abs(contrib - mpmath.mpf(2) ** -242 * mpmath.mpf(3) ** -29) <= mpmath.mpf(2) ** -201 * mpmath.mpf(3) ** -27
            else:
                assert contrib == 0
        for e in (("vc", "v4"), ("vc'", "v4"), ("v1", "vr")):
            assert g.weights[e] == g.initial[e]


def test_lemma4_float64_breaks():
    """Why §4.2 is not run in float64 although every constant fits: after the step-t0
    update the path weights are 2w (or -2w) only up to ~1e-14 relative, so v4's input
    on later steps is ~1e-30, far outside f*'s dead zone A = 2^-121 3^-9 ~ 1.9e-41;
    v4 then leaks and gamma ~ 1.9e83 amplifies the leak.  (docs/abbe_sandon.md)"""
    labels = [1, -1, 1, 1, -1, 1, -1, -1] * 8
    g, seen = _run_mprime(labels, 2)
    assert all(abs(z) <= act.A_STAR for (_, _, _, z) in seen[:2])  # before t0: fine
    assert abs(seen[3][3]) > 1e6 * act.A_STAR  # after t0: outside the dead zone
    assert max(abs(g.weights[e] / g.initial[e]) for e in MP_PATH) > 10  # and the weights ran away


def test_lemma4_noise_below_float64_resolution():
    """Lemma 4's noise budget eps = 2^-134 3^-11 is below half an ulp of every M' weight,
    so float64 noisy SGD within the budget is bitwise noiseless SGD."""
    g = mprime_gadget()
    eps = math.ldexp(3.0**-11, -134)
    for w in g.weights.values():
        assert w + eps == w and w - eps == w
