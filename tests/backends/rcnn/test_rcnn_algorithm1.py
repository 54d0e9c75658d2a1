"""Algorithm 1 as Goel et al. state it: Θ_rc and Θ_head drawn from U_s, SGD on the memory
layer, random restarts selected on a validation set (Corollary 2), and the report's
Theorem 1 / Corollary 2 numbers."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from tm2nn.backends.rcnn import algorithm1 as a1
from tm2nn.backends.rcnn.bounds import def5_filter_params, def5_head_params
from tm2nn.backends.rcnn.build import filter_body, filter_for
from tm2nn.backends.rcnn.encoding import cell_code
from tm2nn.backends.rcnn.filter_net import MAX_DIGITS_FLOAT32, build_filter, bump_grid
from tm2nn.backends.rcnn.filter_spec import machine_table
from tm2nn.backends.rcnn.head import build_head
from tm2nn.backends.rcnn.learner import step_bound
from tm2nn.backends.rcnn.learner_examples import match_learner
from tm2nn.backends.rcnn.learner_form import Shape, reference_answer
from tm2nn.backends.rcnn.u_set import u_set
from tm2nn.syntax import parse_text


def learner():
    return parse_text(match_learner(), "tm")[0]


def dataset(g, m, n_valid, seed):
    """A training set of ``m`` examples (d = 1) and a validation set labelled with the
    learner's own answers A(S)[x] (so the planted filter has validation error 0)."""
    rng = np.random.default_rng(seed)
    X, Y = rng.choice([-1, 1], (m, 1)), rng.choice([-1, 1], m)
    Xv = rng.choice([-1, 1], (n_valid, 1))
    t = step_bound(g, X, Y, Shape(m, 1, 0))
    Yv = np.array([reference_answer(g, X, Y, x, Shape(m, 1, 1), t)[0] for x in Xv])
    return X, Y, Xv, Yv


def jsonable(rep):
    return json.loads(json.dumps({k: v for k, v in rep.items() if not k.startswith("_")}))


@pytest.fixture(scope="module")
def g():
    return learner()


# ---------------------------------------------------------------------------------------
# (a) with the planted filter offered, selection picks it
# ---------------------------------------------------------------------------------------
def test_planted_candidate_is_selected_with_validation_error_zero(g):
    X, Y, Xv, Yv = dataset(g, 1, 24, seed=2)
    assert set(Yv.tolist()) == {-1, 1}  # no constant classifier scores 0 here
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # random draws blow up: no warning spam, no crash
        rep = a1.algorithm1(g, X, Y, Xv, Yv, restarts=3, seed=5, offer_planted=True)
    labels = [c["label"] for c in rep["candidates"]]
    assert labels == ["draw 0", "draw 1", "draw 2", "planted"]
    planted = rep["candidates"][-1]
    assert planted["validation_error"] == 0.0 and planted["memorized"]
    assert rep["chosen"]["label"] == "planted" and rep["chosen"]["validation_error"] == 0.0
    assert rep["_trained"].memorized
    assert rep["u_set"]["planted_in_u_set"]
    j = jsonable(rep)
    assert j["chosen"]["label"] == "planted"
    lines = a1.format_report(rep)
    assert any("chosen: planted (validation error 0.000)" in ln for ln in lines)


def test_planted_is_never_mixed_in_by_default(g):
    X, Y, Xv, Yv = dataset(g, 1, 8, seed=1)
    rep = a1.algorithm1(g, X, Y, Xv, Yv, restarts=2, seed=0)
    assert [c["label"] for c in rep["candidates"]] == ["draw 0", "draw 1"]
    assert not rep["planted_offered"]


# ---------------------------------------------------------------------------------------
# (b) random draws only: a real run, selected by validation error
# ---------------------------------------------------------------------------------------
def test_random_draws_are_trained_validated_and_selected(g):
    X, Y, Xv, Yv = dataset(g, 2, 16, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = a1.algorithm1(g, X, Y, Xv, Yv, restarts=3, seed=11)
    errs = [c["validation_error"] for c in rep["candidates"]]
    assert len(errs) == 3 and all(0.0 <= e <= 1.0 for e in errs)
    assert rep["chosen"]["validation_error"] == min(errs)
    assert rep["chosen"]["index"] == int(np.argmin(errs))
    assert all(c["seconds"] > 0 for c in rep["candidates"])
    # the chosen model was trained with the drawn Θ_rc and Θ_head, not the planted ones
    idx = rep["chosen"]["index"]
    planted, head = build_filter(machine_table(g)), build_head()
    sup = a1.support_of(planted, head)
    layers, drawn_head = a1.draw(sup, u_set(planted.n_states), np.random.default_rng((11, idx)))
    mod = rep["_trained"].module
    assert np.array_equal(mod.prediction.body.U1.weight.detach().numpy(), drawn_head.U1)
    assert not np.array_equal(drawn_head.U1, head.U1)
    lines = a1.format_report(rep)
    text = "\n".join(lines)
    assert "Theorem 1: success probability s^(-c2 s^2) = 10^-" in text
    assert f"chosen: draw {idx} (validation error {min(errs):.3f})" in text


def test_selection_is_by_validation_error_on_controlled_candidates(g):
    """The seam: candidates whose errors we know — the planted filter (0), a filter whose
    output is 0 everywhere (f̄_head(0) = 2 > 0: always +1, error = share of −1 labels), and
    one whose output is −1 everywhere (f̄_head(−1) = −1: always −1, error = share of +1)."""
    X, Y, Xv, Yv = dataset(g, 1, 12, seed=3)
    Yv = np.array([1] * 9 + [-1] * 3)  # any labels: the errors are then 3/12, 9/12 and A's
    planted = build_filter(machine_table(g))
    labels = [list(lab) for lab in planted.labels[:4]]

    def constant(c):
        layers = [(np.zeros_like(W), np.zeros_like(b)) for W, b in zip(planted.weights, planted.biases)]
        layers[4] = (layers[4][0], np.array([c]))
        return filter_body(layers, labels)

    t = step_bound(g, X, Y, Shape(1, 1, 0))
    want_planted = np.array([reference_answer(g, X, Y, x, Shape(1, 1, 1), t)[0] for x in Xv])
    e_planted = float(np.mean(want_planted != Yv))
    cands = [a1.Candidate("zero", constant(0.0)), a1.Candidate("minus", constant(-1.0)),
             a1.Candidate("planted", filter_for(g, cell_code(g)).body)]
    res = a1.train_and_score(g, X, Y, Xv, Yv, cands, depth=max(t + 1, 2), work=1)
    errs = [r["validation_error"] for r in res]
    assert errs == [3 / 12, 9 / 12, e_planted]
    assert res[2]["memorized"] and not res[0]["memorized"]
    assert a1.select(res) == int(np.argmin(errs))
    # reorder: selection follows the errors, not the position
    res2 = [res[1], res[0]]
    assert a1.select(res2) == 1
    assert a1.select([{"validation_error": 0.5}, {"validation_error": 0.5}]) == 0  # first of equals


def test_zero_one_error_counts_inf_and_nan_as_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert a1.zero_one_error([np.nan, np.inf, -np.inf, 0.3, -0.2], [1, 1, -1, 1, 1]) == 4 / 5
    assert a1.zero_one_error([0.0], [1]) == 0.0  # ŷ ≥ 0 reads +1, as learner.run
    assert a1.zero_one_error([], []) == 0.0


# ---------------------------------------------------------------------------------------
# the draw
# ---------------------------------------------------------------------------------------
def test_draws_are_uniform_from_u_set_at_the_planted_support(g):
    planted, head = build_filter(machine_table(g)), build_head()
    U = u_set(planted.n_states)
    sup = a1.support_of(planted, head)
    c0 = a1.draw_candidate(sup, U, 7, 0)
    again = a1.draw_candidate(sup, U, 7, 0)
    c1 = a1.draw_candidate(sup, U, 7, 1)
    (l0, h0) = a1.draw(sup, U, np.random.default_rng((7, 0)))
    for (W, b), (mw, mb), (PW, Pb) in zip(l0, sup.filter_masks, zip(planted.weights, planted.biases)):
        assert W.shape == PW.shape and b.shape == Pb.shape
        assert np.all(W[~mw] == 0) and np.all(b[~mb] == 0)
        assert np.isin(W[mw], U).all() and np.isin(b[mb], U).all()
    assert sup.n_filter == sum(int(np.count_nonzero(W)) + int(np.count_nonzero(b))
                               for W, b in zip(planted.weights, planted.biases))
    assert sup.n_head == 12  # U2: 4, b2: 3 (relu(x) has bias 0), U1: 4, b1: 1
    # the filter net carries the planted labels and the drawn values
    assert [op.out.labels for op in c0.body.nodes if hasattr(op, "out") and op.out is not None][:4] == \
        [tuple(lab) for lab in planted.labels[:4]]
    V2 = next(op for op in c0.body.nodes if op.name == "V2").weight.dense()
    assert np.array_equal(V2, l0[1][0])
    assert np.array_equal(next(op for op in again.body.nodes if op.name == "V2").weight.dense(), V2)
    assert not np.array_equal(next(op for op in c1.body.nodes if op.name == "V2").weight.dense(), V2)
    # uniform: every value of U_s turns up, in roughly equal shares (chi-square-ish)
    vals = np.concatenate([W[m] for (W, _), (m, _) in zip(l0, sup.filter_masks)])
    counts = np.array([np.sum(vals == u) for u in U])
    assert counts.min() > 0 and counts.max() < 4 * vals.size / U.size


# ---------------------------------------------------------------------------------------
# (c) the report's numbers
# ---------------------------------------------------------------------------------------
def test_report_numbers_are_consistent(g):
    X, Y, Xv, Yv = dataset(g, 1, 4, seed=4)
    rep = a1.algorithm1(g, X, Y, Xv, Yv, restarts=1, seed=0, eps=0.05, delta=0.01)
    planted = build_filter(machine_table(g))
    s, D = planted.n_states, planted.n_digits
    U = u_set(s)
    P = sum(int(np.count_nonzero(W)) + int(np.count_nonzero(b)) for W, b in zip(planted.weights, planted.biases))
    P += sum(int(np.count_nonzero(v)) for v in (build_head().U2, build_head().b2, build_head().U1, build_head().b1))
    dr, th, c2 = rep["draw"], rep["theorem1"], rep["corollary2"]
    assert rep["states"] == s and rep["digits"] == D and rep["u_set"]["size"] == U.size
    assert dr["params_support"] == P
    assert dr["log10_odds_support"] == pytest.approx(-P * math.log10(U.size))
    d_rc = max(100 * s, planted.d_rc)
    assert dr["params_dense"] == def5_filter_params(d_rc) + def5_head_params(100) == \
        3 * d_rc ** 2 + 14 * d_rc + 1 + 301
    assert dr["log10_odds_dense"] == pytest.approx(-dr["params_dense"] * math.log10(U.size))
    # Theorem 1: s^(-c2 s^2) is the draw's success probability
    assert th["log10_success_support"] == dr["log10_odds_support"]
    assert -th["c2_support"] * s * s * math.log10(s) == pytest.approx(th["log10_success_support"])
    assert -th["c2_dense"] * s * s * math.log10(s) == pytest.approx(th["log10_success_dense"])
    # precision: D base-3 digits; 2 + log2(1/g) significand bits
    assert th["precision_digits"] == D and th["c3_digits"] == D - math.ceil(math.log2(s)) <= 4
    assert th["precision_bits"] == 2 + math.ceil(4 + (D - 1) * math.log2(3))
    assert 2.0 ** (2 - th["precision_bits"]) == bump_grid(D)
    # Corollary 2 from B.5: (1 - p)^M <= delta/2, 2 sqrt(ln(2M/delta)/(2N)) <= eps
    ln_p = th["log10_success_support"] * math.log(10)
    ln_M = c2["log10_restarts"] * math.log(10)
    assert ln_M == pytest.approx(math.log(math.log(2 / 0.01)) - ln_p)
    assert -math.exp(ln_p + ln_M) <= math.log(0.01 / 2) + 1e-9  # e^{-pM} = delta/2
    N = c2["validation_size"]
    assert 2 * math.sqrt((math.log(2) + ln_M + math.log(1 / 0.01)) / (2 * N)) <= 0.05
    assert 2 * math.sqrt((math.log(2) + ln_M + math.log(1 / 0.01)) / (2 * (N - 1))) > 0.05
    assert s ** (c2["c1"] * s) == pytest.approx(math.exp(-ln_p), rel=1e-6) if -ln_p < 700 else \
        c2["c1"] * s * math.log(s) == pytest.approx(-ln_p)
    assert N <= c2["c2_prime"] * s * math.log(s) * math.log(1 / 0.01) / 0.05 ** 2 + 1
    assert N <= c2["validation_size_paper_form"]
    assert rep["seconds"] > 0 and rep["seconds_per_draw"] > 0


@pytest.mark.parametrize("D", range(5, 31))
def test_precision_bits_match_the_float_limits(D):
    """float32 (24 significand bits) carries the bumps exactly to D = 12, float64 (53) to
    D = 30: the limits filter_net states."""
    bits = a1.precision_bits(D)
    assert (bits <= 24) == (D <= MAX_DIGITS_FLOAT32)
    assert bits <= 53
    assert bits == 2 + math.ceil(4 + (D - 1) * math.log2(3))


def test_cor2_numbers_small_case():
    """A case by hand: p = 1/2, s = 2, eps = 0.5, delta = 0.5."""
    c = a1.corollary2_numbers(2, math.log10(0.5), 0.5, 0.5)
    M = math.log(4) / 0.5
    assert 10 ** c["log10_restarts"] == pytest.approx(M)
    assert c["validation_size"] == math.ceil(2 * math.log(2 * M / 0.5) / 0.25)
    assert c["c1"] == pytest.approx(math.log(2) / (2 * math.log(2)))


def test_dtype_float32_runs_too(g):
    X, Y, Xv, Yv = dataset(g, 1, 4, seed=6)
    rep = a1.algorithm1(g, X, Y, Xv, Yv, restarts=1, seed=0, offer_planted=True, dtype=torch.float32)
    assert rep["candidates"][-1]["validation_error"] == 0.0
