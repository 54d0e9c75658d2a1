"""The parity learner (Goel et al., B.1.2 form with XOR input; Gaussian elimination over
GF(2) as in Abbe & Sandon's Example 1): one machine for every shape, against its plain
Python statement, the true parity, and its exact, data-independent step count, by the
interpreter (``reference_answer``)."""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES
from tm2nn.backends.rcnn.learner_form import Shape, check_learner_form, reference_answer
from tm2nn.backends.rcnn.parity_learner import (
    gf2_rank,
    parity_learner,
    parity_learner_spec,
    parity_learner_steps,
)
from tm2nn.datasets import load_csv
from tm2nn.errors import Tm2nnError
from tm2nn.syntax import load, parse_text

EXAMPLE = EXAMPLES / "learner_parity.tm"
EXAMPLE_CSV = EXAMPLES / "learner_parity_n4.csv"
STATES = 84  # plus and minus included


def machine():
    return parse_text(parity_learner(), "tm")[0]


G = machine()


def bits(v) -> np.ndarray:
    return (np.asarray(v) < 0).astype(np.uint8)


def combinations_giving(X, Y, x) -> set[int]:
    """Every ``∏_{a∈T} y⁽ᵃ⁾`` over the sets ``T`` with ``⊕_{a∈T} x⁽ᵃ⁾ = x`` (bits), by brute
    force: empty when ``x`` is outside the span of the rows of ``X``."""
    B, q = bits(X), bits(x)
    out = set()
    for T in itertools.product([0, 1], repeat=len(B)):
        t = np.array(T, dtype=bool)
        if np.array_equal(B[t].sum(0) % 2 if t.any() else np.zeros_like(q), q):
            out.add(int(np.prod(np.asarray(Y)[t])) if t.any() else 1)
    return out


def run(X, Y, x, steps=None):
    m, d = np.shape(X)[0], len(x)
    return reference_answer(G, np.asarray(X).reshape(m, d), np.asarray(Y), np.asarray(x), Shape(m, d, 1),
                            parity_learner_steps(m, d) if steps is None else steps)


def parity(S, x) -> int:
    return int(np.prod([x[j] for j in S])) if S else 1


# ---------------------------------------------------------------------------------------
# the machine


def test_example_is_the_generated_parity_learner_in_learner_form():
    assert EXAMPLE.read_text() == parity_learner()
    g = load(EXAMPLE)
    check_learner_form(g)
    assert len(g.states) == STATES


def test_example_training_set_is_a_spanning_parity_and_is_learned():
    X, Y = load_csv(EXAMPLE_CSV)
    assert X.shape == (12, 4)
    assert gf2_rank(X) == 4
    assert np.array_equal(Y, X[:, 0] * X[:, 2] * X[:, 3])
    g = load(EXAMPLE)
    for x in itertools.product([-1, 1], repeat=4):
        ans, steps = reference_answer(g, X, Y, np.array(x), Shape(12, 4, 1), parity_learner_steps(12, 4))
        assert ans == x[0] * x[2] * x[3]
        assert steps == parity_learner_steps(12, 4) == 1366


def test_one_machine_for_every_shape():
    """Theorem 1's constant s: the generator takes no shape, and the same machine (the
    same states) runs on grids of every shape, finding the edges by reading."""
    assert not inspect.signature(parity_learner).parameters
    assert parity_learner() == parity_learner()
    rng = np.random.default_rng(0)
    for m, d in [(2, 1), (8, 4), (13, 6), (0, 3), (1, 1)]:
        g = machine()
        assert len(g.states) == STATES
        X, Y, x = rng.choice([-1, 1], (m, d)), rng.choice([-1, 1], m), rng.choice([-1, 1], d)
        ans, steps = reference_answer(g, X, Y, x, Shape(m, d, 1), parity_learner_steps(m, d))
        assert ans == parity_learner_spec(X, Y, x)
        assert steps == parity_learner_steps(m, d)


def test_step_counts_reported():
    assert [parity_learner_steps(m, d) for m, d in [(8, 4), (12, 6), (18, 6), (24, 8)]] == [930, 2262, 3348, 6586]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10), st.integers(1, 6), st.integers(0, 2**32 - 1), st.booleans())
def test_answers_its_statement_in_a_data_independent_number_of_steps(m, d, seed, parity_labels):
    rng = np.random.default_rng(seed)
    X, x = rng.choice([-1, 1], (m, d)), rng.choice([-1, 1], d)
    if parity_labels:
        S = [j for j in range(d) if rng.random() < 0.5]
        Y = np.array([parity(S, r) for r in X], dtype=np.int64)
    else:
        Y = rng.choice([-1, 1], m)
    ans, steps = run(X, Y, x)
    assert ans == parity_learner_spec(X, Y, x)
    assert steps == parity_learner_steps(m, d)
    if m:
        with pytest.raises(Tm2nnError, match="did not halt"):
            run(X, Y, x, steps - 1)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_learns_the_parity_when_the_training_inputs_span(d, extra, seed):
    rng = np.random.default_rng(seed)
    S = [j for j in range(d) if rng.random() < 0.5]
    while True:
        X = rng.choice([-1, 1], (d + extra, d))
        if gf2_rank(X) == d:
            break
    Y = np.array([parity(S, r) for r in X], dtype=np.int64)
    for x in rng.choice([-1, 1], (4, d)):
        assert parity_learner_spec(X, Y, x) == parity(S, x)
        assert run(X, Y, x)[0] == parity(S, x)


# ---------------------------------------------------------------------------------------
# the statement: outside the span, inconsistent labels


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_spec_is_a_label_combination_in_the_span_and_plus_outside(m, d, seed):
    rng = np.random.default_rng(seed)
    X, Y, x = rng.choice([-1, 1], (m, d)), rng.choice([-1, 1], m), rng.choice([-1, 1], d)
    combos = combinations_giving(X, Y, x)
    ans = parity_learner_spec(X, Y, x)
    assert ans in combos if combos else ans == 1


def test_query_outside_the_span_answers_plus():
    # every example has x2 = +1 (bit 0): a query with x2 = -1 is outside the span
    X = np.array([[-1, 1], [1, 1], [-1, 1]])
    Y = np.array([-1, -1, -1])  # not a parity (x = (+1, +1) is labelled -1): inconsistent too
    for x in ([-1, -1], [1, -1]):
        assert not combinations_giving(X, Y, x)
        assert parity_learner_spec(X, Y, x) == 1 == run(X, Y, x)[0]
    # inside the span the label combination comes out: x = (-1, +1) is example 0 (or 2)
    assert parity_learner_spec(X, Y, [-1, 1]) == -1 == run(X, Y, [-1, 1])[0]


def test_inconsistent_labels_follow_the_elimination_order():
    """Labels no parity fits: the answer is the label combination of the pivots, and the
    pivot for a column is the bottom-most (largest index) unused example with a 1 there."""
    X = np.array([[-1], [-1]])
    assert parity_learner_spec(X, [1, -1], [-1]) == -1 == run(X, [1, -1], [-1])[0]
    assert parity_learner_spec(X, [-1, 1], [-1]) == 1 == run(X, [-1, 1], [-1])[0]
    # the zero vector labelled -1 (no parity does that) is never a pivot: x = 1_d gets +
    X = np.array([[1, 1], [-1, 1], [1, -1]])
    Y = np.array([-1, 1, 1])
    assert parity_learner_spec(X, Y, [1, 1]) == 1 == run(X, Y, [1, 1])[0]
    # inputs e1, e1 + e2, e2 (bits), all labelled 1: the first two say e2 has label 0
    X = np.array([[-1, 1], [-1, -1], [1, -1]])
    Y = np.array([-1, -1, -1])
    for x in itertools.product([-1, 1], repeat=2):
        assert run(X, Y, np.array(x))[0] == parity_learner_spec(X, Y, x)


def test_m_zero_answers_plus():
    for d in (1, 3):
        for x in itertools.product([-1, 1], repeat=d):
            assert run(np.zeros((0, d), int), np.zeros(0, int), np.array(x)) == (1, parity_learner_steps(0, d))
