"""The level engine (:mod:`tm2nn.backends.abbe_sandon.levels`) computes exactly what the
reference engine (:class:`tm2nn.backends.abbe_sandon.train.Engine`) computes on Abbe &
Sandon's G_n (§4.1, Lemma 3): the same output, vertex values, gradients and weights at
every SGD step, on parity, majority and random learners, and on random rational nets where
every vertex may carry a delta (the generic rule, beyond Lemma 1/2's zeros).  Mutation
tests break the level engine on purpose and the comparison (or the per-step check) fails."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tm2nn.backends.abbe_sandon.gadgets import MS_PATH_PLUS
from tm2nn.backends.abbe_sandon.levels import LevelEngine
from tm2nn.backends.abbe_sandon.net import Net, build_net
from tm2nn.backends.abbe_sandon.train import Engine, net_inputs, train
from tm2nn.learners.examples import majority_learner, parity_learner
from tm2nn.learners.targets import parity_target, samples

from .test_abbe_sandon_net import learners


def _stream(lr, T, seed):
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 2, (T, lr.n)).astype(bool)
    rs = rng.integers(0, 2, (T, len(lr.random))).astype(bool)
    r2s = rng.integers(0, 2, (T, len(lr.coin))).astype(bool)
    return net_inputs(xs, rs, r2s), [1 if b else -1 for b in rng.integers(0, 2, T)]


_ERROR = "error"


def _steps(eng, Z, labels):
    for z, label in zip(Z, labels):
        yield eng.step(z, label)[0]


def _first_difference(ref: Engine, lvl: LevelEngine, Z, labels, errors: bool = False,
                      stream: bool = True) -> str | None:
    """Run both engines in lockstep (their training ``stream``, or ``step`` by step); the
    first step and quantity where they differ, or None.  With ``errors``, an exception
    (f's blend is not exact, unlike monomials) ends the run if both engines raise one at
    the same step (they visit the vertices in different orders, so which inexact vertex
    is reported first may differ)."""
    E = len(ref.net.src)
    runs = [eng.stream(Z, labels) if stream else _steps(eng, Z, labels) for eng in (ref, lvl)]
    for t in range(len(Z)):
        outs = []
        for run in runs:
            try:
                outs.append(next(run))
            except (ArithmeticError, ValueError):  # ValueError: f's error message on a huge Fraction
                if not errors:
                    raise
                outs.append(_ERROR)
        if _ERROR in outs:
            return None if outs[0] is outs[1] else f"step {t}: {outs[0]} vs {outs[1]}"
        if outs[0] != outs[1]:
            return f"step {t}: output {outs[0]} vs {outs[1]}"
        if ref.z != lvl.z or ref.y != lvl.y:
            return f"step {t}: vertex values"
        if ref.last_grads() != lvl.last_grads():
            return f"step {t}: gradients"
        if not np.array_equal(lvl.vals.ids(ref.net.w), lvl.W[:E]):
            return f"step {t}: weights"
        if lvl.memory_bits() != ref.net.memory_bits():
            return f"step {t}: memory"
    return None


def _pair(make):
    a, b = make(), make()
    return Engine(a), LevelEngine(b)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(learners(), st.integers(0, 2**31 - 1))
def test_random_learners_step_for_step(lr, seed):
    ref, lvl = _pair(lambda: build_net(lr))
    Z, labels = _stream(lr, 60, seed)
    assert _first_difference(ref, lvl, Z, labels) is None
    lvl.sync()
    assert lvl.net.w == ref.net.w


@pytest.mark.parametrize("make, T", [(lambda: parity_learner(4), 40), (lambda: parity_learner(5, strict=True), 30),
                                     (lambda: majority_learner(5), 30)])
def test_examples_step_for_step_and_batched_prediction(make, T):
    lr = make()
    ref, lvl = _pair(lambda: build_net(lr))
    Z, labels = _stream(lr, T, 1)
    assert _first_difference(ref, lvl, Z, labels) is None
    ref, lvl = _pair(lambda: build_net(lr))
    assert _first_difference(ref, lvl, Z, labels, stream=False) is None
    assert lvl.batches == 0 and max(len(p[0]) for p in lvl.plan) > 1
    probe = Z[:16]
    assert list(lvl.predict_rows(probe)) == [ref.predict(z) for z in probe]


def test_train_reports_equal():
    """train() with either engine: the same report, and the same weights afterwards."""
    lr = parity_learner(4)
    S = samples(parity_target("1011"), 40, seed=3)
    a, b = build_net(lr), build_net(lr)
    ra = train(a, S.xs, S.ys, None, S.r2s, engine=Engine(a))
    rb = train(b, S.xs, S.ys, None, S.r2s)
    assert ra.mismatch is None and rb.mismatch is None
    assert (ra.outputs, ra.memory_changes, ra.correct) == (rb.outputs, rb.memory_changes, rb.correct)
    assert a.w == b.w and rb.samples_used > 0


# ---------------------------------------------------------------- the generic rule
@st.composite
def rational_nets(draw):
    """A random DAG in G_n's format with small rational weights, so vertices sit in f's
    cube region (f' != 0) or beyond C (f' = 0) at random, deltas flow through any vertex,
    and some vertices are blocks of K identical copies (multiplicities both ways) or have
    more in-edges than the level engine's narrow path takes."""
    n_in = draw(st.integers(1, 3))
    V = draw(st.integers(n_in + 3, n_in + 8))
    K = draw(st.sampled_from([2, 3]))
    net = Net(None, None)
    net.const = net.add_vertex("const", "const")
    net.inputs = [net.add_vertex(f"in{i}", "input") for i in range(n_in)]
    weights = st.sampled_from([Fraction(p, q) for p in (-3, -1, 1, 2, 3) for q in (2, 4, 8)] + [3, -3])
    for v in range(n_in + 1, V):
        block = v < V - 1 and draw(st.integers(0, 4)) == 0
        net.add_vertex(f"v{v}", "gate", K if block else 1)
        preds = draw(st.lists(st.integers(0, v - 1), min_size=1, max_size=min(v, 11), unique=True))
        for u in preds:
            net.add_edge(u, v, draw(weights), "gate")
    net.out = V - 1
    net.names[-1], net.kind[-1] = "out", "out"
    return net


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rational_nets(), st.integers(0, 2**31 - 1))
def test_random_rational_nets_generic_rule(net, seed):
    """Where f'(z) != 0 anywhere (not only in active M_s copies), deltas, gradients and
    updates still agree with the reference: zero-ness is decided from z, not assumed."""
    import copy

    gamma = Fraction(1, 4)
    ref, lvl = Engine(copy.deepcopy(net), gamma), LevelEngine(copy.deepcopy(net), gamma)
    rng = np.random.default_rng(seed)
    Z = 2 * rng.integers(0, 2, (2, len(net.inputs))) - 1
    assert _first_difference(ref, lvl, Z, [1, -1], errors=True) is None


def test_generic_rule_reaches_edges_outside_gadgets():
    """The rational-net check is not vacuous: a fixed net whose every vertex is live gets
    nonzero gradients on every edge, the block's backward multiplicity included."""
    net = Net(None, None)
    net.const = net.add_vertex("const", "const")
    net.inputs = [net.add_vertex("in0", "input")]
    a = net.add_vertex("a", "gate")
    b = net.add_vertex("b", "gate", 3)
    net.out = net.add_vertex("out", "out")
    for u, v, w in [(1, a, Fraction(1, 2)), (0, a, Fraction(1, 4)), (a, b, 2), (b, net.out, Fraction(1, 3))]:
        net.add_edge(u, v, w, "gate")
    import copy

    ref, lvl = Engine(copy.deepcopy(net), Fraction(1, 2)), LevelEngine(copy.deepcopy(net), Fraction(1, 2))
    _, grads = lvl.step([1], -1)
    assert sorted(grads) == [0, 1, 2, 3]
    _, want = ref.step([1], -1)
    assert grads == want


# ---------------------------------------------------------------- mutations
def test_mutation_skipped_level_is_caught():
    """Drop the level holding the copies' control vertices: the comparison fails."""
    lr = parity_learner(3)
    ref, lvl = _pair(lambda: build_net(lr))
    vc = lvl.net.copies[0].vertex["vc"]
    lvl.plan = [p for p in lvl.plan if vc not in p[0]]
    lvl.plan_ahead = [p for p in lvl.plan_ahead if vc not in p[0]]
    Z, labels = _stream(lr, 10, 0)
    for stream in (True, False):
        assert _first_difference(ref, lvl, Z, labels, errors=True, stream=stream) is not None


def test_mutation_stale_batch_is_caught():
    """Keep using the batch computed ahead after a memory bit flipped: the comparison fails."""
    lr = parity_learner(3)
    ref, lvl = _pair(lambda: build_net(lr))
    lvl.feeds_ahead[:] = False
    Z, labels = _stream(lr, 30, 0)
    assert _first_difference(ref, lvl, Z, labels, errors=True) is not None


def test_mutation_perturbed_gate_weight_is_caught():
    """One gate weight changed in the level engine only (1 -> 3/2): the comparison fails."""
    lr = parity_learner(3)
    ref, lvl = _pair(lambda: build_net(lr))
    e = next(e for e in range(len(lvl.net.src)) if lvl.net.part[e] == "gate" and lvl.net.w[e] == 1)
    lvl.W[e] = lvl.vals.id(Fraction(3, 2))
    Z, labels = _stream(lr, 10, 0)
    assert _first_difference(ref, lvl, Z, labels, errors=True) is not None


def test_vectorised_checks_can_fail():
    """The level engine's per-step checks: a changed weight outside the copies of M_s and
    a flipped memory weight are each reported at step 1."""
    lr = parity_learner(3)
    S = samples(parity_target("110"), 5, seed=0)
    net = build_net(lr)
    eng = LevelEngine(net)
    # a NOT unit's weight -1 -> -2: the unit still outputs ±2, so only the weight check sees it
    e = next(e for e in range(len(net.src)) if net.part[e] == "gate" and net.w[e] == -1)
    eng.W[e] = eng.vals.id(-2)
    rep = train(net, S.xs, S.ys, None, S.r2s, engine=eng)
    assert rep.mismatch is not None and rep.mismatch.step == 1 and rep.mismatch.what == "weights"
    net = build_net(lr)
    eng = LevelEngine(net)
    for edge in MS_PATH_PLUS:  # mem[0] set to 1 behind the learner's back (net departure 4's state)
        i = net.copies[0].edge[edge]
        eng.W[i] = eng.vals.id(-eng.weight(i))
    rep = train(net, S.xs, S.ys, None, S.r2s, engine=eng)
    assert rep.mismatch is not None and rep.mismatch.step == 1 and rep.mismatch.what in ("memory", "output")
