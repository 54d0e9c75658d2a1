"""Learner mode of the RCNN backend (Goel et al., Algorithm 1, B.1.2 XOR input, B.3):
the learner-form checker, the learners themselves against a plain Python statement of
what they learn, Algorithm 1's memorization (Lemma 4) checked after every example, the
filter's Jacobian in the learner's settings (extending tests/backends/rcnn/test_rcnn_filter.py), and
the trained network against the interpreter on fresh points; then ``tm2nn learn``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.backends.rcnn.test_rcnn_filter import check_net_on, torch_jacobian
from tests.conftest import EXAMPLES
from tm2nn.backends.rcnn import learner as learner_mod
from tm2nn.backends.rcnn.encoding import cell_code, from_value, unpack
from tm2nn.backends.rcnn.filter_net import build_filter
from tm2nn.backends.rcnn.filter_spec import grid_patches, jacobian, machine_table, run_filter
from tm2nn.backends.rcnn.learner import ETA, learn, lemma4_target, run
from tm2nn.backends.rcnn.learner_examples import match_learner
from tm2nn.backends.rcnn.learner_form import (
    FRAME,
    Shape,
    check_learner_form,
    frame_values,
    reference_answer,
    xor_rows,
)
from tm2nn.backends.rcnn.reachable import in_domain, sample_patches
from tm2nn.datasets import load_csv
from tm2nn.errors import Tm2nnError
from tm2nn.syntax import load, parse_text

EXAMPLE = EXAMPLES / "learner_match.tm"
EXAMPLE_CSV = EXAMPLES / "learner_match.csv"


def spec_match(X, Y, x) -> int:
    """What the match learner learns: the label of the first example equal to x, else +1."""
    for xa, ya in zip(X, Y):
        if np.array_equal(xa, x):
            return int(ya)
    return 1


def learner():
    return parse_text(match_learner(), "tm")[0]


def match_steps(m: int, d: int) -> int:
    return m * (2 * d + 7) + d + 6


def data(rng, m, d):
    return rng.choice([-1, 1], (m, d)), rng.choice([-1, 1], m)


def all_points(d: int) -> np.ndarray:
    return np.array([[1 - 2 * ((i >> b) & 1) for b in range(d)] for i in range(2 ** d)])


# ---------------------------------------------------------------------------------------
# the learner machines and the checker
# ---------------------------------------------------------------------------------------
def test_example_is_the_generated_match_learner_and_in_learner_form():
    g = load(EXAMPLE)
    assert EXAMPLE.read_text() == match_learner()
    check_learner_form(g)
    X, Y = load_csv(EXAMPLE_CSV)
    assert X.shape == (3, 2) and Y.shape == (3,)
    # as the CSV's comment documents: the first of two equal examples wins
    got = [reference_answer(g, X, Y, np.array(x), Shape(3, 2, 1), 41)[0] for x in [(1, -1), (-1, 1), (1, 1), (-1, -1)]]
    assert got == [-1, -1, 1, 1]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 2 ** 31))
def test_match_learner_computes_its_statement(m, d, seed):
    """Run by the interpreter on the XOR layout, the one generated learner answers "the
    label of the first training example equal to x, else +1" for every shape, in
    m(2d+7) + d + 6 steps, with the same 23 states."""
    g = learner()
    assert len(g.states) == 23
    check_learner_form(g)
    rng = np.random.default_rng(seed)
    X, Y = data(rng, m, d)
    if m:
        X[rng.integers(m)] = X[rng.integers(m)]  # make repeated examples likely
    for x in [*X[:2], *rng.choice([-1, 1], (3, d))]:
        ans, steps = reference_answer(g, X, Y, x, Shape(m, d, 1), 10_000)
        assert ans == spec_match(X, Y, x)
        assert steps == match_steps(m, d)


def test_xor_layout_is_lemma4s_memory_times_3():
    """B.1.2's XOR input as the memory layer writes it: cell (a, b) = 3·W_ab·z_b."""
    rng = np.random.default_rng(1)
    X, Y = data(rng, 4, 3)
    x = rng.choice([-1, 1], 3)
    W = lemma4_target(X, Y, 5)
    assert np.array_equal(xor_rows(X, Y, x), np.rint(3 * W * np.append(x, 1)[None, :]).astype(int))
    assert np.array_equal(xor_rows(X, Y, x)[-1], np.append(x, 1))


BAD = {
    "line": ("machine b {\n  alphabet: _ - +\n  blank: _\n  start: s\n  halt: h\n  s + -> + S h\n}\n",
             "2D tape", 1),
    "symbols": ("machine b {\n  tape: grid\n  alphabet: _ 0 1\n  blank: _\n  start: s\n  halt: h\n"
                "  s 1 -> 1 S h\n}\n", "symbols must be _ - +", 1),
    "moves": ("machine b {\n  tape: grid\n  alphabet: _ - +\n  blank: _\n  start: s\n  halt: h\n"
              "  s + -> + S a\n  s - -> - U a\n  a * -> * S h\n}\n", "neither move nor write", 8),
    "writes": ("machine b {\n  tape: grid\n  alphabet: _ - +\n  blank: _\n  start: s\n  halt: h\n"
               "  s + -> - S a\n  a * -> * S h\n}\n", "neither move nor write", 7),
    "no plus": ("machine b {\n  tape: grid\n  alphabet: _ - +\n  blank: _\n  start: s\n  halt: h\n"
                "  s - -> - S a\n  a * -> * S h\n}\n", r"no rule for '\+'", 1),
    "back to start": ("machine b {\n  tape: grid\n  alphabet: _ - +\n  blank: _\n  start: s\n  halt: h\n"
                      "  s + -> + S a\n  a + -> + L s\n  a - -> - S h\n}\n", "back to the start", 8),
    "halting start": ("machine b {\n  tape: grid\n  alphabet: _ - +\n  blank: _\n  start: s\n  halt: s\n}\n",
                      "halts", 1),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_checker_points_at_the_violation(case, tmp_path):
    text, msg, line = BAD[case]
    path = tmp_path / "bad.tm"
    path.write_text(text)
    with pytest.raises(Tm2nnError, match=msg) as e:
        check_learner_form(load(path))
    assert e.value.file == str(path) and e.value.line == line and e.value.col >= 1
    assert f"{path}:{line}:" in e.value.render()


WALK_OFF = """machine w {
  tape: grid
  alphabet: _ - +
  blank: _
  start: s
  accept: a
  s + -> + S up
  up * -> * U up
}
"""


def test_runs_that_leave_the_grid_or_do_not_finish_are_refused(tmp_path):
    """A learner that walks off the top edge is refused at the rule that moved it; one
    that stops too early or leaves input cells behind is refused too."""
    path = tmp_path / "w.tm"
    path.write_text(WALK_OFF)
    rng = np.random.default_rng(2)
    X, Y = data(rng, 2, 2)
    with pytest.raises(Tm2nnError, match="leaves the RCNN's grid") as e:
        reference_answer(load(path), X, Y, np.ones(2, int), Shape(2, 2, 1), 1000)
    assert e.value.file == str(path) and e.value.line == 8  # at the rule, not the header
    g = load(EXAMPLE)
    with pytest.raises(Tm2nnError, match="did not halt within 10 steps"):
        reference_answer(g, X, Y, X[0], Shape(2, 2, 1), 10)


def test_the_frame_marks_the_edges():
    """The frame left of the input region (docs/rcnn.md "The frame"): '+' at the top of
    the outer column, blank elsewhere; the memory layer writes 1/3 and 1 there."""
    assert FRAME == 2
    f = frame_values(4)
    assert f[0, 0] == 1 / 3 and (f[1:, 0] == 1).all() and (f[:, 1] == 1).all()
    from tm2nn.backends.rcnn.learner_form import layout_text

    rows = xor_rows(np.array([[1, -1]]), np.array([-1]), np.array([1, 1]))
    assert layout_text(rows) == "+_-+-/__+++"  # y(x∘x⁽ᵃ⁾), y; then the query x, +


# ---------------------------------------------------------------------------------------
# Algorithm 1 and Lemma 4
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_algorithm1_memorizes_every_example(dtype):
    """Lemma 4 after every SGD step (checked inside ``learn``: W is bit for bit the
    nearest float to Lemma 4's W, ŷ is 0 to rounding), and independently here: the final
    W is y⁽ᵃ⁾[x⁽ᵃ⁾, 1]/3 row by row with the dummy (1_d, 1) last."""
    g = load(EXAMPLE)
    rng = np.random.default_rng(3)
    X, Y = data(rng, 3, 2)
    with learner_mod.step_threads():
        tr = learn(g, X, Y, depth=42, work=1, dtype=dtype)
    assert tr.memorized and len(tr.outputs) == 4
    assert tr.grad_exact == [True] * 4 and tr.step_exact == [True] * 4  # Lemma 4's gradient, bit for bit
    W = next(tr.module.parameters()).detach()
    want = np.array([[*(y * xa / 3), y / 3] for xa, y in zip([*X, np.ones(2)], [*Y, 1])])
    yhat = max(abs(v) for v in tr.outputs)
    assert yhat < (1e-12 if dtype == torch.float64 else 1e-4)
    if dtype == torch.float64:  # ŷ = 0 and W is the nearest float to Lemma 4's, bit for bit
        assert yhat == 0.0 and tr.w_error == [0.0] * 4
        assert torch.equal(W, torch.tensor(want, dtype=torch.float64))
    # W is Lemma 4's up to ŷ's rounding: η·18·|ŷ| = |ŷ|/3, plus an ulp
    assert np.abs(W.to(torch.float64).numpy() - want).max() <= yhat / 3 + 2 * torch.finfo(dtype).eps
    assert max(tr.w_error) <= yhat / 3 + 2 * torch.finfo(dtype).eps
    # the only parameter SGD updated is the memory layer's W
    assert [n for n, p in tr.module.named_parameters() if p.requires_grad] == ["memory.weight"]


def test_oversize_training_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(learner_mod, "MAX_TRAIN_FLOATS", 1000)
    X, Y = data(np.random.default_rng(0), 3, 2)
    with pytest.raises(Tm2nnError, match="refusing to train: 42 filter steps on a 4x6 grid"):
        learn(load(EXAMPLE), X, Y, depth=42, work=1)


def test_the_lemma4_gradient_check_can_fail():
    """Mutation: a filter whose memory pass-through has slope 1 + 2⁻³⁰ (one ramp weight
    off) gives a gradient that is not Lemma 4's: ``memorized`` is False."""
    import dataclasses

    from tm2nn.nets import SparseMatrix

    g = load(EXAMPLE)
    X, Y = data(np.random.default_rng(8), 3, 2)
    body = learner_mod.filter_for(g, cell_code(g)).body
    ops = list(body.nodes)
    k = next(i for i, op in enumerate(ops) if op.name == "V2")
    w = ops[k].weight.dense()
    ramp = [i for i, lab in enumerate(body.spaces["V2"].labels) if lab.startswith("relu:ramp:")]
    assert ramp
    w[ramp, :] *= 1 + 2.0 ** -30
    ops[k] = dataclasses.replace(ops[k], weight=SparseMatrix.from_dense(w))
    bad = dataclasses.replace(body, nodes=tuple(ops))
    with learner_mod.step_threads():
        tr = learn(g, X, Y, depth=42, work=1, dtype=torch.float64, filter_body=bad)
    assert not tr.memorized and not all(tr.grad_exact)


def test_f_head_bias_minus_one_breaks_exactness(monkeypatch):
    """Mutation: f̄_head with the paper's bias −1 instead of the exact-zero float makes ŷ
    a few 10⁻¹⁵ instead of 0, and W misses Lemma 4's: ``memorized`` is False in float64.
    With the construction's bias every memory cell ends exactly on ``head.E_STAR``."""
    from tm2nn.backends.rcnn import head as head_mod

    g = load(EXAMPLE)
    X, Y = data(np.random.default_rng(9), 3, 2)
    with learner_mod.step_threads():
        good = learn(g, X, Y, depth=42, work=1, dtype=torch.float64)
        z = torch.tensor(np.append(X[0], 1)[None, :], dtype=torch.float64)
        with torch.no_grad():
            mem = good.module.op("memory")(z)
            mem[0, 1:, FRAME:FRAME + 3] = 0  # as during step 1: only row 0 memorized
            grid = good.module.op("grid")(mem)
    assert good.memorized and good.outputs == [0.0] * 4
    assert (grid[0, :, FRAME:FRAME + 3] == head_mod.E_STAR).all()
    monkeypatch.setattr(head_mod, "exact_zero_bias", lambda: -1.0)
    with learner_mod.step_threads():
        bad = learn(g, X, Y, depth=42, work=1, dtype=torch.float64)
    assert not bad.memorized and max(abs(v) for v in bad.outputs) > 0
    assert all(bad.grad_exact)  # the gradient is still Lemma 4's at that ŷ


def test_the_lemma4_check_can_fail(monkeypatch):
    """With another learning rate the rows are not y·z/3: ``memorized`` is False."""
    monkeypatch.setattr(learner_mod, "ETA", 1 / 50)
    g = load(EXAMPLE)
    X, Y = data(np.random.default_rng(4), 3, 2)
    with learner_mod.step_threads():
        tr = learn(g, X, Y, depth=42, work=1)
    assert not tr.memorized and min(tr.w_error) > 1e-3
    assert ETA == 1 / 54


def test_memorization_outputs_zero_and_sgd_gradient_is_lemma4s():
    """During step τ: ŷ = 0 and ∂ℓ/∂W = −18·y·1[a = τ]·z (so η = 1/54 writes y·z/3)."""
    g = load(EXAMPLE)
    rng = np.random.default_rng(5)
    X, Y = data(rng, 3, 2)
    filt = learner_mod.filter_for(g, cell_code(g))
    from tm2nn.emit import to_torch

    mod = to_torch(learner_mod.learner_net(filt.body, Shape(3, 2, 1), 42), dtype=torch.float64)
    W = next(mod.parameters())
    Xd, Yd = np.concatenate([X, np.ones((1, 2), int)]), np.append(Y, 1)
    with learner_mod.step_threads():
        for tau in range(4):
            with torch.no_grad():
                W.copy_(torch.tensor(lemma4_target(X, Y, tau)))
            z = np.append(Xd[tau], 1)
            W.grad = None
            y, grid = mod(torch.tensor(z[None, :], dtype=torch.float64))
            (0.5 * (Yd[tau] - y[0, 0]) ** 2).backward()
            assert abs(y.item()) < 1e-12
            want = np.zeros((4, 3))
            want[tau] = -18 * Yd[tau] * z
            assert np.abs(W.grad.numpy() - want).max() < 1e-12
            # Lemma 3: every input cell ends at −3⁻², the frame and the working column stay
            assert np.abs(grid[0, :, FRAME:FRAME + 3].detach().numpy() + 1 / 9).max() < 1e-15
            assert np.all(grid[0, :, FRAME + 3].detach().numpy() == 1)
            assert np.array_equal(grid[0, :, :FRAME].detach().numpy(), frame_values(4))


# ---------------------------------------------------------------------------------------
# the filter in the learner's settings (extends tests/backends/rcnn/test_rcnn_filter.py)
# ---------------------------------------------------------------------------------------
def memorized_grid(X, Y, x, D, work):
    """The packed grid at test time: f_mem of the trained W (Lemma 4) on z = [x, 1],
    with the frame on the left."""
    rows = xor_rows(X, Y, x)
    g = np.full((1, rows.shape[0], FRAME + rows.shape[1] + work), 3 ** (D - 1), dtype=np.int64)
    g[0, :, FRAME:FRAME + rows.shape[1]] = rows * 3 ** (D - 2)
    g[0, 0, 0] = 3 ** (D - 2)  # the frame's top mark, +1/3
    return g


def test_filter_jacobian_in_the_learners_settings():
    """B.2's Jacobian (``jacobian``) equals torch autograd through the learner's filter
    network on sampled patches of the memorize and handover settings, and on every patch
    the learner's real runs meet (memorization and the handover into the computation),
    which all lie in the handover domain; the network's values there match f̄_Conv2D."""
    g = load(EXAMPLE)
    table = machine_table(g)
    D = table.n_digits
    net = build_filter(table)
    rng = np.random.default_rng(6)
    pts = np.concatenate([sample_patches(table, s, 1500, rng) for s in ("memorize", "handover")])
    J = torch_jacobian(net, pts, D)
    want = jacobian(pts, D)
    assert (want[:, 4] == 1).any() and (want[:, 4] == 0).any()
    assert np.array_equal(J, want)
    X, Y = data(rng, 3, 2)
    mem, hand = [], []
    for tau in range(1, 5):  # Lemma 3's grids during Algorithm 1's step τ
        g0 = memorized_grid(X, Y, np.ones(2, int), D, 1)
        g0[0, tau - 1:, FRAME:FRAME + 3] = 0
        mem.append(grid_patches(run_filter(g0, table, 42)[:, 0]).reshape(-1, 3, 3))
    for x in all_points(2):
        hand.append(grid_patches(run_filter(memorized_grid(X, Y, x, D, 1), table, 42)[:, 0]).reshape(-1, 3, 3))
    mem, hand = (np.unique(np.concatenate(a), axis=0) for a in (mem, hand))
    assert in_domain(mem, table, "memorize").all() and in_domain(hand, table, "handover").all()
    seen = np.concatenate([mem, hand])
    J = torch_jacobian(net, seen, D)
    assert np.array_equal(J, jacobian(seen, D)) and (J[:, 4] == 1).sum() >= 1
    check_net_on(net, table, seen)


# ---------------------------------------------------------------------------------------
# the trained network against the interpreter
# ---------------------------------------------------------------------------------------
def test_trained_net_agrees_with_the_interpreter_on_20_datasets():
    """Algorithm 1 on 20 random training sets of the example's shape; on every x ∈ {±1}²
    the trained net's B.3 read-out is the interpreter's A(S)[x] (±1 to 1e-9), and its
    last grid is f̄_Conv2D^(L) of the memorized grid, digit for digit."""
    g = load(EXAMPLE)
    table = machine_table(g)
    D = table.n_digits
    xs = all_points(2)
    rng = np.random.default_rng(7)
    for _ in range(20):
        X, Y = data(rng, 3, 2)
        if rng.random() < 0.5:
            X[1] = X[0]
        rep = run(g, X, Y, test=0)
        assert rep["memorized"] and rep["filter_steps"] == 42
        tr = rep["_trained"]
        want = [reference_answer(g, X, Y, x, tr.shape, rep["steps"])[0] for x in xs]
        assert want == [spec_match(X, Y, x) for x in xs]
        z = torch.tensor(np.concatenate([xs, np.ones((4, 1))], 1), dtype=torch.float64)
        with torch.no_grad(), learner_mod.step_threads():
            y, grid = tr.module(z)
        assert np.abs(y[:, 0].numpy() - want).max() < 1e-9
        assert np.mean(np.where(y[:, 0].numpy() >= 0, 1, -1) == want) == 1.0  # the agreement
        for i, x in enumerate(xs):
            ref = run_filter(memorized_grid(X, Y, x, D, 1), table, 42)[-1, 0]
            assert np.array_equal(from_value(grid[i].numpy(), D, tol=0.01), ref)
            assert unpack(ref, D)[0, FRAME, 1] == want[i]  # the answer cell


def test_run_on_fresh_points_and_definition5_working_columns():
    """``run`` on random fresh points agrees; Definition 5's L working columns give the
    same predictions as the one column the learner uses."""
    g = load(EXAMPLE)
    X, Y = load_csv(EXAMPLE_CSV)
    a = run(g, X, Y, test=12, seed=3)
    b = run(g, X, Y, test=12, seed=3, work=42)
    assert a["test_agreement"] == b["test_agreement"] == 1.0
    assert a["working_columns"] == 1 and b["working_columns"] == 42
    assert np.array_equal(a["_want"], b["_want"])
    assert np.abs(a["_got"] - b["_got"]).max() < 1e-9


@settings(max_examples=4, deadline=None)
@given(st.sampled_from([(1, 1), (2, 1), (1, 3), (2, 2), (5, 3)]), st.integers(0, 2 ** 31))
def test_other_shapes_agree(shape, seed):
    """The same machine, trained on data of other shapes (one learner for every shape)."""
    m, d = shape
    g = load(EXAMPLE)
    X, Y = data(np.random.default_rng(seed), m, d)
    rep = run(g, X, Y, test=6, seed=seed)
    assert rep["memorized"] and rep["test_agreement"] == 1.0
    assert rep["max_prediction_error"] < 1e-9


# ---------------------------------------------------------------------------------------
# training sets and the CLI
# ---------------------------------------------------------------------------------------
def test_csv_header_comments_and_signs(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("x1, x2 ,y\n# a comment\n\n1,-1,+1\n -1 , -1, -1\n")
    X, Y = load_csv(p)
    assert X.tolist() == [[1, -1], [-1, -1]] and Y.tolist() == [1, -1]


@pytest.mark.parametrize("text, line, col, msg", [
    ("1,-1,1\n1,0,1\n", 2, 3, r"'0' is not \+1 or -1"),
    ("1,-1,1\n1,-1\n", 2, 5, "2 fields, the first one has 3"),
    ("1,-1,1\n1,-1,1,1\n", 2, 8, "4 fields"),
    ("x,y\n1,,1\n", 2, 3, "empty field"),
    ("x,y\n1\n", 2, 1, "at least one feature"),
    ("x,y\n", 1, 1, "no examples"),
])
def test_bad_csv(tmp_path, text, line, col, msg):
    p = tmp_path / "d.csv"
    p.write_text(text)
    with pytest.raises(Tm2nnError, match=msg) as e:
        load_csv(p)
    assert (e.value.file, e.value.line, e.value.col) == (str(p), line, col)


def test_cli_learn_json(run_cli):
    r = run_cli("learn", str(EXAMPLE), "--train", str(EXAMPLE_CSV), "--test", "8", "--json")
    code, out, err = r.code, r.out, r.err
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"examples": 3, "memorized": True, "test_agreement": 1.0}


def test_cli_learn_bad_input(run_cli, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("x1,x2,y\n1,1,1\n1,2,-1\n")
    before = sorted(tmp_path.iterdir())
    r = run_cli("learn", str(EXAMPLE), "--train", str(bad), "--json")
    code, out, err = r.code, r.out, r.err
    assert code == 2 and f"{bad}:3:3: error:" in err and "Traceback" not in err and out == ""
    assert sorted(tmp_path.iterdir()) == before  # nothing written
    r = run_cli("learn", str(EXAMPLE), "--train", str(tmp_path / "missing.csv"))
    code, err = r.code, r.err
    assert code == 2 and "no such file" in err
    short = tmp_path / "short.csv"
    short.write_text("1,1,1,1\n")
    r = run_cli("learn", str(EXAMPLE), "--train", str(short), "--steps", "5", "--json")
    code, err = r.code, r.err
    assert code == 2 and f"{EXAMPLE}:" in err and "did not halt within 5 steps" in err
    r = run_cli("learn", str(EXAMPLE), "--train", str(EXAMPLE_CSV), "--backend", "nope")
    code, err = r.code, r.err
    assert code == 2 and "invalid choice" in err and "rcnn" in err


def test_cli_learn_target_and_restarts(run_cli):
    """``--target`` reports the error against a parity; ``--restarts`` runs Corollary 2's
    selection (the planted filter offered and chosen) and prints Theorem 1's success
    probability; ``--restarts`` without ``--validation`` is a usage error."""
    r = run_cli("learn", str(EXAMPLE), "--train", str(EXAMPLE_CSV), "--test", "8", "--target", "parity:0,1", "--json")
    assert r.code == 0, r.err
    last = json.loads(r.out.strip().splitlines()[-1])
    assert last["test_agreement"] == 1.0 and 0.0 <= last["test_error"] <= 1.0
    valid = EXAMPLES / "learner_match_valid.csv"
    r = run_cli("learn", str(EXAMPLE), "--train", str(EXAMPLE_CSV), "--restarts", "2", "--validation", str(valid),
                "--offer-planted")
    assert r.code == 0, r.err
    assert "chosen: planted (validation error 0.000)" in r.out and "success probability" in r.out
    assert "draw 0: validation error" in r.out and "draw 1: validation error" in r.out
    r = run_cli("learn", str(EXAMPLE), "--train", str(EXAMPLE_CSV), "--restarts", "2")
    assert r.code == 2 and "--validation" in r.err and "Traceback" not in r.err


def test_cli_learn_uses_the_training_sets_declared_target(run_cli, tmp_path):
    """The parity training set declares '# target: parity:0,2,3': ``tm2nn learn`` without
    ``--target`` reports the error against it (zero for the parity learner); a declared
    target that does not label the examples is an error at its line, exit 2."""
    parity = EXAMPLES / "learner_parity.tm"
    data_csv = EXAMPLES / "learner_parity_n4.csv"
    r = run_cli("learn", str(parity), "--train", str(data_csv), "--test", "40", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out.strip().splitlines()[-1]) == {"examples": 12, "memorized": True,
                                                           "test_agreement": 1.0, "test_error": 0.0}
    text = data_csv.read_text()
    assert "# target: parity:0,2,3" in text
    bad = tmp_path / "bad.csv"
    bad.write_text(text.replace("# target: parity:0,2,3", "# target: parity:0,1"))
    r = run_cli("learn", str(parity), "--train", str(bad), "--test", "4", "--json")
    line = 1 + text.splitlines().index(next(ln for ln in text.splitlines() if ln.startswith("# target:")))
    assert r.code == 2 and f"{bad}:{line}:11: error:" in r.err and "is not labelled by it" in r.err
    assert "Traceback" not in r.err and r.out == ""


def test_cli_info_on_a_learner(run_cli):
    """``info`` on a learner gives its learner-mode filter (machine mode cannot lower a
    machine that moves up and down): the state count for every shape, d_rc, U_s."""
    r = run_cli("info", str(EXAMPLES / "learner_parity.tm"), "--backend", "rcnn", "--steps", "1366", "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)["info"]
    assert info["learner (B.1.2 form, XOR input)"].startswith("84 states, 11 base-3 digits")
    assert info["d_rc (Def. 5 width)"] == "6,850" and info["filter steps L"].startswith("1367 ")
    assert info["every weight and bias in U_s (Lemma 6, Cor. 3)"].startswith("all in U_s: yes")


def test_learn_on_the_cpu_device_equals_the_default():
    """``tm2nn learn --device cpu`` (issue 35): Algorithm 1 and its checks are the same."""
    from tm2nn import learn as learn_api

    kw = {"train": str(EXAMPLES / "learner_match.csv"), "test": 4}
    a = learn_api(EXAMPLES / "learner_match.tm", "rcnn", device="cpu", **kw)
    b = learn_api(EXAMPLES / "learner_match.tm", "rcnn", **kw)
    assert a.summary == b.summary and a.ok
