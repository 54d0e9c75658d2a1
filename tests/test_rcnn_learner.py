"""Learner mode of the RCNN backend (Goel et al., Algorithm 1, B.1.2 XOR input, B.3):
the learner-form checker, the learners themselves against a plain Python statement of
what they learn, Algorithm 1's memorization (Lemma 4) checked after every example, the
filter's Jacobian in the learner's settings (extending tests/test_rcnn_filter.py), and
the trained network against the interpreter on fresh points; then ``tm2nn learn``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES
from tests.test_rcnn_filter import check_net_on, torch_jacobian
from tm2nn.backends.rcnn import learner as learner_mod
from tm2nn.backends.rcnn.encoding import cell_code, from_value, unpack
from tm2nn.backends.rcnn.filter_net import build_filter
from tm2nn.backends.rcnn.filter_spec import grid_patches, jacobian, machine_table, run_filter
from tm2nn.backends.rcnn.learner import ETA, learn, lemma4_target, run
from tm2nn.backends.rcnn.learner_examples import match_learner
from tm2nn.backends.rcnn.learner_form import Shape, check_learner_form, reference_answer, xor_rows
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


def learner(m: int, d: int):
    return parse_text(match_learner(m, d), "tm")[0]


def data(rng, m, d):
    return rng.choice([-1, 1], (m, d)), rng.choice([-1, 1], m)


def all_points(d: int) -> np.ndarray:
    return np.array([[1 - 2 * ((i >> b) & 1) for b in range(d)] for i in range(2 ** d)])


# ---------------------------------------------------------------------------------------
# the learner machines and the checker
# ---------------------------------------------------------------------------------------
def test_example_is_the_generated_match_learner_and_in_learner_form():
    g = load(EXAMPLE)
    assert EXAMPLE.read_text() == match_learner(3, 2)
    check_learner_form(g)
    X, Y = load_csv(EXAMPLE_CSV)
    assert X.shape == (3, 2) and Y.shape == (3,)
    # as the CSV's comment documents: the first of two equal examples wins
    got = [reference_answer(g, X, Y, np.array(x), Shape(3, 2, 1), 25)[0] for x in [(1, -1), (-1, 1), (1, 1), (-1, -1)]]
    assert got == [-1, -1, 1, 1]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 4), st.integers(1, 4), st.integers(0, 2 ** 31))
def test_match_learner_computes_its_statement(m, d, seed):
    """Run by the interpreter on the XOR layout, the generated learner answers "the label
    of the first training example equal to x, else +1", in 1 + (m+1)(d+1) + m(d+2) steps."""
    g = learner(m, d)
    check_learner_form(g)
    rng = np.random.default_rng(seed)
    X, Y = data(rng, m, d)
    if m:
        X[rng.integers(m)] = X[rng.integers(m)]  # make repeated examples likely
    for x in [*X[:2], *rng.choice([-1, 1], (3, d))]:
        ans, steps = reference_answer(g, X, Y, x, Shape(m, d, 1), 10_000)
        assert ans == spec_match(X, Y, x)
        assert steps == 1 + (m + 1) * (d + 1) + m * (d + 2)


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


def test_a_learner_for_another_shape_is_refused_where_it_leaves_the_grid():
    g = load(EXAMPLE)
    rng = np.random.default_rng(2)
    for m, d in [(2, 2), (3, 1), (0, 2)]:  # smaller: it walks off the top or the left edge
        X, Y = data(rng, m, d)
        with pytest.raises(Tm2nnError, match="leaves the RCNN's grid") as e:
            reference_answer(g, X, Y, np.ones(d, int), Shape(m, d, 1), 1000)
        assert e.value.file == str(EXAMPLE) and e.value.line > 30  # at a rule, not the header
    for m, d in [(4, 2), (3, 3)]:  # bigger: it halts with input cells left over
        X, Y = data(rng, m, d)
        with pytest.raises(Tm2nnError, match="is not blank"):
            reference_answer(g, X, Y, np.ones(d, int), Shape(m, d, 1), 1000)
    X, Y = data(rng, 3, 2)
    with pytest.raises(Tm2nnError, match="did not halt within 10 steps"):
        reference_answer(g, X, Y, X[0], Shape(3, 2, 1), 10)


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
    with learner_mod.one_thread():
        tr = learn(g, X, Y, depth=26, work=1, dtype=dtype)
    assert tr.memorized and tr.w_error == [0.0] * 4 and len(tr.outputs) == 4
    W = next(tr.module.parameters()).detach()
    want = np.array([[*(y * xa / 3), y / 3] for xa, y in zip([*X, np.ones(2)], [*Y, 1])])
    assert torch.equal(W, torch.tensor(want).to(dtype))
    assert max(abs(v) for v in tr.outputs) < (1e-12 if dtype == torch.float64 else 1e-4)
    # the only parameter SGD updated is the memory layer's W
    assert [n for n, p in tr.module.named_parameters() if p.requires_grad] == ["memory.weight"]


def test_oversize_training_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(learner_mod, "MAX_TRAIN_FLOATS", 1000)
    X, Y = data(np.random.default_rng(0), 3, 2)
    with pytest.raises(Tm2nnError, match="refusing to train: 26 filter steps on a 4x4 grid"):
        learn(load(EXAMPLE), X, Y, depth=26, work=1)


def test_the_lemma4_check_can_fail(monkeypatch):
    """With another learning rate the rows are not y·z/3: ``memorized`` is False."""
    monkeypatch.setattr(learner_mod, "ETA", 1 / 50)
    g = load(EXAMPLE)
    X, Y = data(np.random.default_rng(4), 3, 2)
    with learner_mod.one_thread():
        tr = learn(g, X, Y, depth=26, work=1)
    assert not tr.memorized and min(tr.w_error) > 1e-3
    assert ETA == 1 / 54


def test_memorization_outputs_zero_and_sgd_gradient_is_lemma4s():
    """During step τ: ŷ = 0 and ∂ℓ/∂W = −18·y·1[a = τ]·z (so η = 1/54 writes y·z/3)."""
    g = load(EXAMPLE)
    rng = np.random.default_rng(5)
    X, Y = data(rng, 3, 2)
    filt = learner_mod.filter_for(g, cell_code(g))
    from tm2nn.emit import to_torch

    mod = to_torch(learner_mod.learner_net(filt.body, Shape(3, 2, 1), 26), dtype=torch.float64)
    W = next(mod.parameters())
    Xd, Yd = np.concatenate([X, np.ones((1, 2), int)]), np.append(Y, 1)
    with learner_mod.one_thread():
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
            # Lemma 3: every input cell ends at −3⁻², the working column stays 1
            assert np.abs(grid[0, :, :3].detach().numpy() + 1 / 9).max() < 1e-15
            assert np.all(grid[0, :, 3].detach().numpy() == 1)


# ---------------------------------------------------------------------------------------
# the filter in the learner's settings (extends tests/test_rcnn_filter.py)
# ---------------------------------------------------------------------------------------
def memorized_grid(X, Y, x, D, work):
    """The packed grid at test time: f_mem of the trained W (Lemma 4) on z = [x, 1]."""
    rows = xor_rows(X, Y, x)
    g = np.full((1, rows.shape[0], rows.shape[1] + work), 3 ** (D - 1), dtype=np.int64)
    g[0, :, :rows.shape[1]] = rows * 3 ** (D - 2)
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
        g0 = np.zeros((1, 4, 4), dtype=np.int64)
        g0[0, :, 3] = 3 ** (D - 1)
        g0[0, :tau - 1, :3] = xor_rows(X, Y, np.ones(2, int))[:tau - 1] * 3 ** (D - 2)
        mem.append(grid_patches(run_filter(g0, table, 26)[:, 0]).reshape(-1, 3, 3))
    for x in all_points(2):
        hand.append(grid_patches(run_filter(memorized_grid(X, Y, x, D, 1), table, 26)[:, 0]).reshape(-1, 3, 3))
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
        assert rep["memorized"] and rep["filter_steps"] == 26
        tr = rep["_trained"]
        want = [reference_answer(g, X, Y, x, tr.shape, rep["steps"])[0] for x in xs]
        assert want == [spec_match(X, Y, x) for x in xs]
        z = torch.tensor(np.concatenate([xs, np.ones((4, 1))], 1), dtype=torch.float64)
        with torch.no_grad(), learner_mod.one_thread():
            y, grid = tr.module(z)
        assert np.abs(y[:, 0].numpy() - want).max() < 1e-9
        assert np.mean(np.where(y[:, 0].numpy() >= 0, 1, -1) == want) == 1.0  # the agreement
        for i, x in enumerate(xs):
            ref = run_filter(memorized_grid(X, Y, x, D, 1), table, 26)[-1, 0]
            assert np.array_equal(from_value(grid[i].numpy(), D, tol=0.01), ref)
            assert unpack(ref, D)[0, 0, 1] == want[i]  # the answer cell


def test_run_on_fresh_points_and_definition5_working_columns():
    """``run`` on random fresh points agrees; Definition 5's L working columns give the
    same predictions as the one column the learner uses."""
    g = load(EXAMPLE)
    X, Y = load_csv(EXAMPLE_CSV)
    a = run(g, X, Y, test=12, seed=3)
    b = run(g, X, Y, test=12, seed=3, work=26)
    assert a["test_agreement"] == b["test_agreement"] == 1.0
    assert a["working_columns"] == 1 and b["working_columns"] == 26
    assert np.array_equal(a["_want"], b["_want"])
    assert np.abs(a["_got"] - b["_got"]).max() < 1e-9


@settings(max_examples=4, deadline=None)
@given(st.sampled_from([(1, 1), (2, 1), (1, 3), (2, 2)]), st.integers(0, 2 ** 31))
def test_other_shapes_agree(shape, seed):
    m, d = shape
    g = learner(m, d)
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
    wide = tmp_path / "wide.csv"
    wide.write_text("1,1,1,1\n")
    r = run_cli("learn", str(EXAMPLE), "--train", str(wide), "--json")
    code, err = r.code, r.err
    assert code == 2 and f"{EXAMPLE}:" in err and "leaves the RCNN's grid" in err
    r = run_cli("learn", str(EXAMPLE), "--train", str(EXAMPLE_CSV), "--backend", "nope")
    code, err = r.code, r.err
    assert code == 2 and "invalid choice" in err and "rcnn" in err
