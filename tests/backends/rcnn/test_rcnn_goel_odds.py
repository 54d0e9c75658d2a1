"""Issue 38, rcnn (Goel, Kakade, Kalai & Zhang): SGD on the filter and the head as well as
the memory layer (``--sgd-on``), a partial random filter (``--random-fraction``: a chosen
share of ``Θ_rc, Θ_head`` drawn from U_s, the rest planted), and the incremental lookup
engine that makes the parity learner's test phase fast.  Each with its mutation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import EXAMPLES
from tm2nn.backends.rcnn import algorithm1 as a1
from tm2nn.backends.rcnn import learner as learner_mod
from tm2nn.backends.rcnn import lookup_grad
from tm2nn.backends.rcnn.backend import LearnOptions
from tm2nn.backends.rcnn.build import filter_body
from tm2nn.backends.rcnn.filter_net import build_filter, bump_grid
from tm2nn.backends.rcnn.filter_spec import machine_table
from tm2nn.backends.rcnn.head import build_head
from tm2nn.backends.rcnn.learner import learn, learner_net, trainable_parts
from tm2nn.backends.rcnn.learner_examples import match_learner
from tm2nn.backends.rcnn.learner_form import Shape, parse_parts
from tm2nn.backends.rcnn.lookup_engine import LookupEngine
from tm2nn.backends.rcnn.lookup_grad import LookupGrad
from tm2nn.backends.rcnn.u_set import u_set
from tm2nn.emit import to_torch
from tm2nn.errors import Tm2nnError
from tm2nn.syntax import load, parse_text


@pytest.fixture(scope="module")
def g():
    return parse_text(match_learner(), "tm")[0]


@pytest.fixture(scope="module")
def planted(g):
    f, h = build_filter(machine_table(g)), build_head()
    return f, h, a1.support_of(f, h), u_set(f.n_states)


# -- the partial draw --------------------------------------------------------------------
def _flat(layers, head):
    return np.concatenate([a.ravel() for a in a1._entries(layers, head)])


def partial_problems(layers, head, planted, k: int, U) -> list[str]:
    """What is wrong with a draw that claims ``k`` randomised entries: it must keep the
    planted value off its chosen entries and outside the support, draw from U_s, and
    differ from the planted value on about ``k`` entries (a draw hits the planted value
    with chance 1/|U_s|)."""
    f, h, sup, _ = planted
    want = _flat(zip(f.weights, f.biases), h)
    got = _flat(layers, head)
    support = np.concatenate([m.ravel() for m in [x for w, b in sup.filter_masks for x in (w, b)]
                              + list(sup.head_masks)])
    out = []
    if np.any(got[~support] != 0):
        out.append("an entry outside the support is not 0")
    if not np.isin(got[support], U).all():
        out.append("a drawn value is not in U_s")
    differ = int((got != want).sum())
    if not (k - max(3, k // 20) <= differ <= k):
        out.append(f"{differ} entries differ from the planted filter, {k} were to be drawn")
    return out


@pytest.mark.parametrize("fraction", [0.0, 0.002, 0.05, 1.0])
def test_partial_draw_randomises_exactly_its_fraction(planted, fraction):
    f, h, sup, U = planted
    layers, head, k, changed = a1.partial_draw(sup, U, f, h, fraction, seed=3, r=1)
    assert k == round(fraction * sup.n_params)
    assert partial_problems(layers, head, planted, k, U) == []
    assert changed == int((_flat(layers, head) != _flat(zip(f.weights, f.biases), h)).sum())


def test_partial_draw_mutations_are_caught(planted):
    """Mutation: a "partial" draw that randomises nothing, or everything, fails the check."""
    f, h, sup, U = planted
    k = round(0.05 * sup.n_params)
    nothing = (list(zip(f.weights, f.biases)), h)
    everything = a1.draw(sup, U, np.random.default_rng((3, 1)))
    assert "differ from the planted filter" in " ".join(partial_problems(*nothing, planted, k, U))
    assert "differ from the planted filter" in " ".join(partial_problems(*everything, planted, k, U))


def test_partial_draws_are_nested_and_fraction_one_is_algorithm_1(planted):
    """For one (seed, r), a smaller fraction's drawn entries are a subset of a larger one's,
    with the same values; fraction 1 is :func:`draw` exactly."""
    f, h, sup, U = planted
    want = _flat(zip(f.weights, f.biases), h)
    small = _flat(*a1.partial_draw(sup, U, f, h, 0.01, 5, 2)[:2])
    large = _flat(*a1.partial_draw(sup, U, f, h, 0.2, 5, 2)[:2])
    moved = small != want
    assert moved.any() and np.array_equal(small[moved], large[moved])
    full = _flat(*a1.partial_draw(sup, U, f, h, 1.0, 5, 2)[:2])
    assert np.array_equal(full, _flat(*a1.draw(sup, U, np.random.default_rng((5, 2)))))
    with pytest.raises(ValueError, match="fraction"):
        a1.partial_draw(sup, U, f, h, 1.5, 0, 0)


def test_restarts_report_the_fraction_and_its_odds(g):
    X, Y = np.array([[1]]), np.array([-1])
    Xv, Yv = np.array([[1], [-1]]), np.array([-1, 1])
    rep = a1.algorithm1(g, X, Y, Xv, Yv, restarts=1, seed=0, fraction=0.0)
    c = rep["candidates"][0]
    assert rep["randomised"] == 0 and c["changed"] == 0 and c["validation_error"] == 0.0 and c["memorized"]
    assert rep["theorem1"]["log10_success_fraction"] == 0.0
    assert any(line.startswith("partial draw: fraction 0 = 0 of") for line in a1.format_report(rep))


# -- SGD on the filter and the head ------------------------------------------------------
def test_sgd_on_parses_and_refuses():
    assert parse_parts("head, memory,filter") == ("memory", "filter", "head")
    with pytest.raises(Tm2nnError, match="'bogus' is not one"):
        LearnOptions(train="x.csv", sgd_on="memory,bogus")
    with pytest.raises(Tm2nnError, match="must include memory"):
        LearnOptions(train="x.csv", sgd_on="filter")
    with pytest.raises(Tm2nnError):
        LearnOptions(train="x.csv", random_fraction=1.5)


def test_filter_and_head_training_gets_the_unrolled_gradient(g):
    """``parts=memory,filter,head``: the gradients reach the filter and the head, equal at
    the first step to the plain unrolled backward (no checkpoint, every trip stored), and
    SGD moves them.  Mutation: with the filter left frozen (or left out of the optimiser)
    its gradient or its move is 0 and this fails."""
    X, Y = np.array([[1]]), np.array([-1])
    depth = learner_mod.depth_for(learner_mod.step_bound(g, X, Y, Shape(1, 1, 0)), 1)
    with learner_mod.step_threads():
        tr = learn(g, X, Y, depth=depth, work=1, dtype=torch.float64, parts=("memory", "filter", "head"))
        ref = to_torch(learner_net(learner_mod.filter_for(g, learner_mod.cell_code(g)).body, Shape(1, 1, 1),
                                   depth), dtype=torch.float64)
        opened = trainable_parts(ref, ("memory", "filter", "head"))
        y, _ = ref(torch.tensor([[1.0, 1.0]], dtype=torch.float64))
        (0.5 * (-1.0 - y[0, 0]) ** 2).backward()
    for part in ("filter", "head"):
        want = max(float(q.grad.abs().max()) for q in opened[part] if q.grad is not None and q.numel())
        assert tr.grad_max[part][0] == want > 0
        assert max(tr.moved[part]) > 0
    assert tr.parts == ("memory", "filter", "head")
    assert not tr.memorized  # the filter moved: Lemma 4's exact checks say so


def test_memory_only_training_leaves_the_filter_frozen(g):
    X, Y = np.array([[1]]), np.array([1])
    with learner_mod.step_threads():
        tr = learn(g, X, Y, depth=learner_mod.depth_for(learner_mod.step_bound(g, X, Y, Shape(1, 1, 0)), 1),
                   work=1, dtype=torch.float64)
    assert tr.memorized and tr.grad_max == {} and tr.parts == ("memory",)
    assert [n for n, p in tr.module.named_parameters() if p.requires_grad] == ["memory.weight"]


# -- the incremental lookup engine ---------------------------------------------------------
def test_incremental_engine_is_the_full_step_engine_on_the_parity_learner():
    """The test phase's engine (only cells next to a change are looked up) gives the
    full-step engine's last grids and trip count bit for bit, on a batch of test points of
    the parity learner; ``predict`` answers as the interpreter does.  Mutation: looking up
    only the changed cells themselves (not their neighbours) gives other grids."""
    gp = load(EXAMPLES / "learner_parity.tm")
    rng = np.random.default_rng(7)
    m, d = 4, 3
    X = rng.choice([-1, 1], (m, d))
    Y = np.prod(X[:, [0, 2]], axis=1)
    with learner_mod.step_threads():
        rep = learner_mod.run(gp, X, Y, test=16, seed=1)
        tr = rep["_trained"]
        xs = rng.choice([-1, 1], (16, d))
        z = torch.tensor(np.concatenate([xs, np.ones((16, 1))], 1), dtype=tr.dtype)
        with torch.no_grad():
            first = tr.module.op("memory")(z).to(torch.float64).numpy()
        filt = tr.module.op("grid").body.op("filter")
        fast, n_fast = LookupEngine(filt, tr.depth, tr.dtype).run(first)
        full, n_full = LookupEngine(filt, tr.depth, tr.dtype).run(first, incremental=False)
    assert rep["memorized"] and rep["test_agreement"] == 1.0
    assert n_fast == n_full and np.array_equal(fast, full)
    wrong = _incremental_without_neighbours(filt, tr, first)
    assert not np.array_equal(wrong, full)


def _incremental_without_neighbours(filt, tr, first):
    """The mutation of :meth:`LookupEngine._run_incremental`: the next trip looks up only
    the cells that changed, not the cells that read them."""
    eng = LookupEngine(filt, tr.depth, tr.dtype)
    ids = eng.encode(first)
    cur = ids.copy()
    changed = np.ones(ids.shape, dtype=bool)
    for _ in range(tr.depth):
        nxt = cur.copy()
        full = eng.step(cur)
        nxt[changed] = full[changed]
        changed = nxt != cur
        cur = nxt
        if not changed.any():
            break
    return eng.decode(cur)


# -- Algorithm 1's SGD step through the memoised filter and Jacobian ---------------------
def _module_grad(mod, z, y):
    W = mod.op("memory").weight
    W.grad = None
    y_hat, _ = mod(z)
    (0.5 * (y - y_hat[0, 0]) ** 2).backward()
    return y_hat.detach(), W.grad.clone()


def _fast_grad(mod, depth, z, y):
    W = mod.op("memory").weight
    W.grad = None
    y_hat = LookupGrad(mod, depth, torch.float64).step(z, y)
    return y_hat, W.grad.clone()


@pytest.mark.parametrize("name, m, d", [("learner_match", 3, 2), ("learner_parity", 4, 2)])
def test_lookup_grad_is_the_module_backward_on_the_planted_learner(name, m, d):
    """Algorithm 1's step through :class:`LookupGrad` gives the module's ``ŷ`` and ``W.grad``
    bit for bit, at Lemma 4's W (the fixed point and its tail included) and at a W moved
    by a few bump widths (gradients that are not Lemma 4's)."""
    gl = load(EXAMPLES / f"{name}.tm")
    rng = np.random.default_rng(4)
    X, Y = rng.choice([-1, 1], (m, d)), rng.choice([-1, 1], m)
    depth = learner_mod.depth_for(learner_mod.step_bound(gl, X, Y, Shape(m, d, 0)), m)
    mod = to_torch(learner_net(learner_mod.filter_for(gl, learner_mod.cell_code(gl)).body, Shape(m, d, 1), depth),
                   dtype=torch.float64)
    mod.op("grid").checkpoint = True
    W = mod.op("memory").weight
    g_step = bump_grid(build_filter(machine_table(gl)).n_digits)
    Xd, Yd = np.concatenate([X, np.ones((1, d), dtype=np.int64)]), np.append(Y, 1)
    seen_nonlemma = False
    with learner_mod.step_threads():
        for seen in range(m + 1):
            for noise in (0.0, 3 * g_step):
                with torch.no_grad():
                    W.copy_(torch.as_tensor(learner_mod.lemma4_target(X, Y, seen) + noise * rng.normal(size=W.shape)))
                z = torch.tensor(np.append(Xd[seen], 1)[None], dtype=torch.float64)
                ya, ga = _module_grad(mod, z, float(Yd[seen]))
                yb, gb = _fast_grad(mod, depth, z, float(Yd[seen]))
                assert torch.equal(ya, yb) and torch.equal(ga, gb)
                seen_nonlemma |= noise > 0 and 0 < float(ga.abs().max()) != 18.0
    assert seen_nonlemma


def test_lookup_grad_is_the_chain_rule_on_a_generic_filter(monkeypatch):
    """On a random 5-layer filter (every read cell matters, no fixed point) the memoised
    backward agrees with the module's to rounding.  Mutations: reading the patch offsets
    the wrong way round, or not chaining through the trips, is caught."""
    rng = np.random.default_rng(0)
    V1 = np.zeros((5, 9))
    V1[np.arange(5), [1, 3, 4, 5, 7]] = 1.0
    layers = [(V1, np.zeros(5)), (rng.normal(0, 0.6, (4, 5)), rng.normal(0, 0.05, 4)),
              (rng.normal(0, 0.6, (4, 4)), rng.normal(0, 0.05, 4)), (rng.normal(0, 0.6, (4, 4)), np.full(4, 0.05)),
              (rng.normal(0, 0.3, (1, 4)), np.zeros(1))]
    body = filter_body(layers, [[f"h{i}:{j}" for j in range(n)] for i, n in enumerate((5, 4, 4, 4))])
    depth = 5
    mod = to_torch(learner_net(body, Shape(2, 1, 1), depth), dtype=torch.float64)
    mod.op("grid").checkpoint = True
    with torch.no_grad():
        mod.op("memory").weight.copy_(torch.as_tensor(rng.normal(0, 0.05, (3, 2))))
    z = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    ya, ga = _module_grad(mod, z, -1.0)

    def agrees():
        yb, gb = _fast_grad(mod, depth, z, -1.0)
        return torch.equal(ya, yb) and torch.allclose(ga, gb, rtol=1e-12, atol=1e-15)

    assert float(ga.abs().max()) > 1e-3 and agrees()
    with monkeypatch.context() as mp:
        mp.setattr(lookup_grad, "PATCH_OFFSETS", tuple((-di, -dj) for di, dj in lookup_grad.PATCH_OFFSETS))
        assert not agrees()
    with monkeypatch.context() as mp:
        mp.setattr(LookupGrad, "_vjp", lambda self, ids, v: v)
        assert not agrees()


def test_learn_trains_on_the_lookup_path_as_on_the_module(g):
    """``learn``'s default engine and ``engine="module"`` give the same W, outputs and
    Lemma 4 checks."""
    rng = np.random.default_rng(9)
    X, Y = rng.choice([-1, 1], (3, 2)), rng.choice([-1, 1], 3)
    depth = learner_mod.depth_for(learner_mod.step_bound(g, X, Y, Shape(3, 2, 0)), 3)
    with learner_mod.step_threads():
        a = learn(g, X, Y, depth=depth, work=1, dtype=torch.float64)
        b = learn(g, X, Y, depth=depth, work=1, dtype=torch.float64, engine="module")
    assert a.memorized and b.memorized
    assert torch.equal(a.module.op("memory").weight, b.module.op("memory").weight)
    assert a.outputs == b.outputs and a.grad_exact == b.grad_exact == [True] * 4
