"""Abbe & Sandon §4.2: Lemma 6's G_n under perturbed SGD (tm2nn.backends.abbe_sandon.noisy) and
the learner form h_n (noisy_learner), trained by perturbed SGD in mpmath."""

from __future__ import annotations

import itertools
import random

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.backends.abbe_sandon.test_abbe_sandon_gadgets import _mp_num, _run_mprime
from tm2nn.backends.abbe_sandon import noisy
from tm2nn.backends.abbe_sandon.gadgets import MP_PATH
from tm2nn.backends.abbe_sandon.noisy import (
    DPS,
    NoisyEngine,
    build_noisy_net,
    decode,
    eps42,
    eps_prime42,
    gamma42,
    lemma6_bound,
    lemma6_center,
    noise_bound,
    train_noisy,
)
from tm2nn.errors import Tm2nnError
from tm2nn.ir.noisy_learner import NoisyLearner, ports
from tm2nn.learners.noisy import majority_learner, parity_learner, random_learner


def _stream(n, t, seed):
    rng = random.Random(seed)
    xs = [[rng.randint(0, 1) for _ in range(n)] for _ in range(t)]
    ys = [rng.randint(0, 1) for _ in range(t)]
    return xs, ys, [rng.randint(0, 1) for _ in range(n)]


# ---------------------------------------------------------------- the learner form
def test_ports_and_validation():
    assert ports(2, 2) == ("x0[0]", "x0[1]", "y0", "x1[0]", "x1[1]", "y1", "x[0]", "x[1]")
    lr = majority_learner(2, 3)
    with pytest.raises(Tm2nnError, match="must read"):
        NoisyLearner("bad", 2, 2, lr.h)


def test_majority_reference():
    lr = majority_learner(1, 3)
    for ys in itertools.product((0, 1), repeat=3):
        assert lr([[0]] * 3, ys, [0]) == int(sum(ys) >= 2)


def test_parity_gauss_reference():
    """Gaussian elimination recovers the secret parity whenever the samples span GF(2)^n."""
    rng = random.Random(0)
    n, t = 3, 4
    lr = parity_learner(n, t)
    hits = 0
    for _ in range(200):
        s = [rng.randint(0, 1) for _ in range(n)]
        xs, _, x = _stream(n, t, rng.random())
        ys = [sum(a & b for a, b in zip(xk, s)) % 2 for xk in xs]
        rank = _rank(xs)
        if rank == n:
            hits += 1
            assert lr(xs, ys, x) == sum(a & b for a, b in zip(x, s)) % 2
    assert hits > 20


def _rank(rows):
    rows = [int("".join(map(str, r)), 2) for r in rows]
    r = 0
    for bit in reversed(range(8)):
        piv = next((i for i in range(r, len(rows)) if rows[i] >> bit & 1), None)
        if piv is None:
            continue
        rows[r], rows[piv] = rows[piv], rows[r]
        for i in range(len(rows)):
            if i != r and rows[i] >> bit & 1:
                rows[i] ^= rows[r]
        r += 1
    return r


# ---------------------------------------------------------------- G_n structure
def test_net_sizes_and_weights():
    """Lemma 6's G_n: 2 n t copies of M' (Def. 7 weights), t + 1 output control vertices,
    oc[t0] -> out = cbrt(4)/4 - 2^-243 3^-29 n, oc[t] -> out = 49/100; mpf at DPS digits."""
    lr = majority_learner(2, 3)
    net = build_noisy_net(lr)
    sz = net.sizes()
    assert sz["copies"] == 2 * 2 * 3 and sz["edges_mprime"] == 8 * 12 and sz["edges_oc_out"] == 4
    assert all(isinstance(w, mpmath.mpf) for w in net.w)
    with mpmath.workdps(DPS):
        want = mpmath.cbrt(4) / 4 - 2 * mpmath.mpf(2) ** -243 * mpmath.mpf(3) ** -29
        assert abs(net.w[net.oc_out[0]] - want) < mpmath.mpf(10) ** (-DPS + 2)
        assert net.w[net.oc_out[3]] == mpmath.mpf(49) / 100
        e = net.copy_edges[(0, 0, 0)]
        assert abs(net.w[e[("v1", "vr")]] - 128) == 0
        assert abs(net.w[e[("vc'", "v4")]] + mpmath.mpf(2) ** -41 * mpmath.mpf(3) ** -9) < mpmath.mpf(10) ** -60


def test_noise_bounds():
    """Departure 2: for every n we can run, Lemma 4's eps/t is far below Lemma 6's 1/(n^2 t)."""
    for n, t in ((1, 1), (3, 4), (100, 50)):
        assert noise_bound(n, t) == eps42() / t < lemma6_bound(n, t)


# ---------------------------------------------------------------- Lemma 6
@given(n=st.integers(1, 2), t=st.integers(1, 3), gates=st.integers(1, 12), seed=st.integers(0, 10**6),
       noise=st.sampled_from([0.0, 0.5, 1.0]), mode=st.sampled_from(["uniform", "max"]))
@settings(max_examples=30, deadline=None)
def test_lemma6_random_h(n, t, gates, seed, noise, mode):
    """Lemma 6's conclusion for a random h and a random stream, noise within the bound:
    the final output is within 1/2 of 2h - 1, and every per-step check holds (decoded memory
    = stream so far; output within eps' of 1/2 while learning; gradient exactly 0 outside
    the copies of M' and the current oc[k] -> out)."""
    lr = random_learner(n, t, gates, seed)
    xs, ys, x = _stream(n, t, seed + 1)
    rep = train_noisy(lr, xs, ys, x, noise=noise, seed=seed, mode=mode)
    assert rep.violations == []
    assert rep.ok
    assert abs(rep.final - (2 * rep.expected - 1)) < 0.1  # in fact f*(0.98) = 0.941...


@pytest.mark.parametrize("mode,noise", [("uniform", 0), ("max", 1)])
def test_parity_gauss_net(mode, noise):
    """The example: parity by Gaussian elimination, n = 3, t = 4, zero and maximal noise."""
    n, t = 3, 4
    lr = parity_learner(n, t)
    rng = random.Random(5)
    for trial in range(3):
        s = [rng.randint(0, 1) for _ in range(n)]
        while True:
            xs, _, x = _stream(n, t, rng.random())
            if _rank(xs) == n:
                break
        ys = [sum(a & b for a, b in zip(xk, s)) % 2 for xk in xs]
        rep = train_noisy(lr, xs, ys, x, noise=noise, mode=mode, seed=trial)
        assert rep.ok, rep.violations[:3]
        assert (rep.final > 0) == bool(sum(a & b for a, b in zip(x, s)) % 2)
        if noise:
            with mpmath.workdps(DPS):
                assert rep.noise_max == noise_bound(n, t)


def test_outputs_half_and_untouched_weights_zero_noise():
    """Without noise: output exactly-ish 1/2 on every learning step (Lemma 6 claim 3), and
    every weight outside the copies of M' and the used oc[k] -> out edges is unchanged."""
    lr = majority_learner(2, 3)
    xs, ys, x = _stream(2, 3, 7)
    net = build_noisy_net(lr)
    w0 = list(net.w)
    rep = train_noisy(lr, xs, ys, x, noise=0, net=net)
    assert rep.ok
    for y in rep.outputs:
        assert abs(y - mpmath.mpf(1) / 2) < mpmath.mpf(10) ** -30
    moved = {net.oc_out[k] for k in range(3)}
    for e, (a, b) in enumerate(zip(w0, net.w)):
        if net.part[e] != "mprime" and e not in moved:
            assert a == b, net.part[e]
    # copies set at step k: path weights doubled (label 1) or times -2 (label -1)
    with mpmath.workdps(DPS):
        for k in range(3):
            for i in range(2):
                ed = net.copy_edges[(k, i, xs[k][i])]
                f = 2 if ys[k] else -2
                for e in MP_PATH:
                    assert abs(net.w[ed[e]] / w0[ed[e]] - f) < mpmath.mpf(10) ** -20


def test_decoded_memory_checks_can_fail():
    """The per-step memory check is not vacuous: un-setting a stored copy is reported."""
    lr = majority_learner(1, 2)
    xs, ys, x = [[1], [0]], [1, 0], [1]
    net = build_noisy_net(lr)
    rep = train_noisy(lr, xs, ys, x, net=net)
    assert rep.ok
    eng = NoisyEngine(net)
    with mpmath.workdps(DPS):
        eng.forward(x)
        mem, errs = decode(eng)
        assert errs == [] and mem[(0, 0, 1)] == (1, 1) and mem[(1, 0, 0)] == (1, 0) and mem[(0, 0, 0)][0] == 0
        ed = net.copy_edges[(0, 0, 1)]
        for e in MP_PATH:  # back to the initial (unset) weights
            net.w[ed[e]] /= 2
        eng.forward(x)
        mem, _ = decode(eng)
        assert mem[(0, 0, 1)][0] == 0


@pytest.mark.parametrize("factor", [10**6, 10**30])
def test_noise_beyond_bound_breaks(factor):
    """Noise far beyond the bound (x 10^6: still only ~1e-46 per step, but f*'s dead zone is
    2^-121 3^-9 ~ 2e-41) breaks Lemma 4, and the checks report it."""
    lr = majority_learner(2, 3)
    xs, ys, x = _stream(2, 3, 11)
    rep = train_noisy(lr, xs, ys, x, noise=factor, mode="max", seed=1)
    assert not rep.ok
    assert rep.violations


# ---------------------------------------------------------------- Lemma 4 with noise
@given(st.lists(st.sampled_from([1, -1]), min_size=2, max_size=6), st.integers(0, 5),
       st.sampled_from([1, -1]))
@settings(max_examples=10, deadline=None)
def test_lemma4_mpmath_noisy(labels, t0, sign):
    """Extends tests/backends/abbe_sandon/test_abbe_sandon_gadgets.py::test_lemma4_mpmath: the same run with noise
    of total eps = 2^-134 3^-11 per edge (hypothesis 6 at its limit, same sign every step)
    still keeps v2 in Lemma 4's intervals and vr = ±2 as stated."""
    T = len(labels)
    with mpmath.workdps(40):
        per = sign * eps42() / T
        edges = [("v0", "v1"), ("v1", "v2"), ("v2", "v3"), ("v3", "v4"), ("v4", "v5"),
                 ("v1", "vr"), ("vc", "v4"), ("vc'", "v4")]
        _, seen = _run_mprime(labels, t0, _mp_num, gamma42(), mpmath.cbrt(mpmath.mpf(1) / 2),
                              noise={e: per for e in edges})
        r = mpmath.mpf(3) ** -1.5
        for t, (y2, yr, contrib, _) in enumerate(seen):
            lo, hi = (2.0**-25, 2.0**-23) if t <= t0 else (2.0**-13, 2.0**-11)
            assert lo * r <= y2 <= hi * r
            assert yr == (-2 if t > t0 and labels[t0] == -1 else 2)
            if t != t0:
                assert contrib == 0


# ---------------------------------------------------------------- Lemma 6's correction
HIGH = 150  # digits: the correction n 2^-243 3^-29 ~ 1e-87 n is far above 10^-HIGH


def _centre_run(n=2, t=3, seed=7, **kw):
    """A §4.2 run at HIGH digits and the largest |z_out - cbrt(4)/2| over its learning steps."""
    lr = majority_learner(n, t)
    xs, ys, x = _stream(n, t, seed)
    rep = train_noisy(lr, xs, ys, x, dps=HIGH, **kw)
    with mpmath.workdps(HIGH):
        return rep, max(abs(z - lemma6_center()) for z in rep.z_out), max(abs(y - mpmath.mpf(1) / 2)
                                                                           for y in rep.outputs)


TINY = [{"noise": 0}, {"noise": 1, "mode": "max", "bound": mpmath.mpf(2) ** -400}]


@pytest.mark.parametrize("kw", TINY, ids=["no-noise", "noise-2^-400"])
def test_lemma6_correction_centres_the_output(kw):
    """Lemma 6: oc[t0] -> out = cbrt(4)/4 - 2^-243 3^-29 n.  On learning step t0, oc[t0] = 2 and
    the n copies being set add 2^-242 3^-29 each (Lemma 4), so the output vertex's input is
    cbrt(4)/2 and its output 1/2, exactly: at 150 digits within 1e-115 on every step, without
    noise and with noise 2^-400 per weight per step (~4e-121, below the correction)."""
    rep, dz, dy = _centre_run(**kw)
    assert rep.ok and rep.violations == [] and len(rep.z_out) == 3
    assert dz < mpmath.mpf(10) ** -115 and dy < mpmath.mpf(10) ** -115


@pytest.mark.parametrize("kw", TINY, ids=["no-noise", "noise-2^-400"])
def test_without_lemma6_correction_the_centre_check_fails(monkeypatch, kw):
    """Mutation: oc[t0] -> out = cbrt(4)/4 without the correction.  Lemma 6's eps' check still
    passes (the error is ~1e-87, eps' ~ 5e-43), but the output vertex's input is off by the
    copies' uncancelled n 2^-242 3^-29 (n = 2) on every step, which the check above sees."""
    monkeypatch.setattr(noisy, "oc_out_weight", lambda n: mpmath.cbrt(4) / 4)
    rep, dz, dy = _centre_run(**kw)
    assert rep.ok  # invisible to every per-step check of Lemma 6's statement
    with mpmath.workdps(HIGH):
        want = 2 * mpmath.mpf(2) ** -242 * mpmath.mpf(3) ** -29
        assert abs(dz - want) < mpmath.mpf(10) ** -115
        assert dy > mpmath.mpf(10) ** -100 and dz < eps_prime42()


def test_default_precision_holds_the_correction():
    """At DPS (100) digits the built weight differs from cbrt(4)/4 by the correction; at 50
    digits (the old default) it was rounded away."""
    lr = majority_learner(3, 2)
    for dps, kept in ((DPS, True), (50, False)):
        net = build_noisy_net(lr, dps)
        with mpmath.workdps(dps):
            diff = mpmath.cbrt(4) / 4 - net.w[net.oc_out[0]]
            assert (diff != 0) == kept
            if kept:
                assert abs(diff / (3 * mpmath.mpf(2) ** -243 * mpmath.mpf(3) ** -29) - 1) < mpmath.mpf(10) ** -10


@pytest.mark.parametrize("dps", [20, 39, 1001, 100.0, "100", True])
def test_bad_precision_is_a_clear_error(dps):
    lr = majority_learner(1, 1)
    with pytest.raises(Tm2nnError, match="decimal digits in 40..1000"):
        build_noisy_net(lr, dps)
    with pytest.raises(Tm2nnError, match="decimal digits"):
        train_noisy(lr, [[0]], [1], [0], dps=dps)


def test_precision_of_a_given_net_must_match():
    lr = majority_learner(1, 1)
    net = build_noisy_net(lr, 60)
    with pytest.raises(Tm2nnError, match="built at 60 digits"):
        train_noisy(lr, [[0]], [1], [0], net=net, dps=80)
    assert train_noisy(lr, [[0]], [1], [0], net=net).ok
