"""Learner mode at useful size (issue 17): the exact memory-light backward of the filter
loop (the fixed-point tail and checkpointed segments, tm2nn/emit/torch_loop_grad.py) and
the memoised filter engine for predictions (tm2nn/backends/rcnn/lookup_engine.py), each
against the plain unrolled computation, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import EXAMPLES
from tm2nn.backends.rcnn import learner as learner_mod
from tm2nn.backends.rcnn.encoding import cell_code
from tm2nn.backends.rcnn.learner import learn, learner_net, lemma4_target
from tm2nn.backends.rcnn.learner_form import Shape
from tm2nn.backends.rcnn.lookup_engine import Degenerate, LookupEngine
from tm2nn.emit import to_torch
from tm2nn.emit.torch_loop_grad import segment_length
from tm2nn.nets import Affine, Loop, Net, Port, Space, SparseMatrix
from tm2nn.syntax import load

EXAMPLE = EXAMPLES / "learner_match.tm"


def data(rng, m, d):
    return rng.choice([-1, 1], (m, d)), rng.choice([-1, 1], m)


def _grad(module, W_value, z, y, *, checkpoint: bool, until_fixed: bool):
    """∂½(y − ŷ)²/∂W of the learner module at W = W_value."""
    loop = module.op("grid")
    loop.checkpoint, loop.until_fixed = checkpoint, until_fixed
    W = next(module.parameters())
    with torch.no_grad():
        W.copy_(torch.as_tensor(W_value))
    W.grad = None
    yh, _ = module(z)
    (0.5 * (y - yh[0, 0]) ** 2).backward()
    return yh.detach().clone(), W.grad.clone()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_checkpointed_tail_gradient_is_the_unrolled_gradient_bit_for_bit(dtype):
    """At every memorization step τ of Algorithm 1 (and at a W that is not Lemma 4's),
    the gradient through checkpointed segments plus the fixed-point tail equals the
    gradient through all L unrolled filter steps, bit for bit."""
    g = load(EXAMPLE)
    rng = np.random.default_rng(11)
    m, d = 3, 2
    X, Y = data(rng, m, d)
    filt = learner_mod.filter_for(g, cell_code(g))
    mod = to_torch(learner_net(filt.body, Shape(m, d, 1), 42), dtype=dtype)
    Xd, Yd = np.concatenate([X, np.ones((1, d), int)]), np.append(Y, 1)
    with learner_mod.step_threads():
        for tau in range(m + 1):
            z = torch.tensor(np.append(Xd[tau], 1)[None, :], dtype=dtype)
            W0 = lemma4_target(X, Y, tau)
            a = _grad(mod, W0, z, float(Yd[tau]), checkpoint=True, until_fixed=True)
            b = _grad(mod, W0, z, float(Yd[tau]), checkpoint=False, until_fixed=False)
            c = _grad(mod, W0, z, float(Yd[tau]), checkpoint=False, until_fixed=True)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and torch.equal(c[1], b[1])
            assert a[1].abs().sum() > 0


def _toy_loop(A: np.ndarray, trips: int):
    """x ↦ A x, a loop whose fixed point 0 has the non-idempotent Jacobian A."""
    sp = Space(tuple(f"v{i}" for i in range(len(A))))
    body = Net("lin", (Port("x", sp),), (Affine("A", ("x",), weight=SparseMatrix.from_dense(A), out=sp),), ("A",))
    net = Net("toy", (Port("x", sp),), (Loop("loop", ("x",), body=body, trips=trips, until_fixed=True),), ("loop",))
    return to_torch(net, dtype=torch.float64)


@pytest.mark.parametrize("trips", [1, 2, 7, 30])
def test_the_tail_applies_the_jacobian_once_per_remaining_trip(trips):
    """The tail is exact for any Jacobian, not only B.2's 0/1 diagonal: at the fixed
    point 0 of x ↦ A x, the input gradient of L trips is (Aᵀ)^L v, as unrolled."""
    A = np.array([[0.5, 0.25, 0.0], [0.0, 1.0, 0.5], [0.125, 0.0, 0.75]])
    mod = _toy_loop(A, trips)
    v = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    for checkpoint in (False, True):
        mod.op("loop").checkpoint = checkpoint
        x = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
        (mod(x) * v).sum().backward()
        want = v.numpy()[0]
        for _ in range(trips):
            want = A.T @ want
        assert np.allclose(x.grad.numpy()[0], want, rtol=0, atol=1e-15)
        mod.op("loop").until_fixed = False
        x2 = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
        (mod(x2) * v).sum().backward()
        assert torch.equal(x.grad, x2.grad)
        mod.op("loop").until_fixed = True


def test_a_broken_tail_is_caught():
    """Mutation: a tail that applies the Jacobian one time too few gives another
    gradient (so the tests above can fail)."""
    from tm2nn.emit import torch_loop_grad as tlg

    A = np.array([[0.5, 0.25], [0.0, 0.75]])
    mod = _toy_loop(A, 5)
    orig = tlg.FixedPointTail.backward

    def short(ctx, v):
        ctx.remaining -= 1
        return orig(ctx, v)
    x = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    (mod(x) * torch.tensor([[1.0, 1.0]], dtype=torch.float64)).sum().backward()
    good = x.grad.clone()
    tlg.FixedPointTail.backward = staticmethod(short)
    try:
        x = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
        (mod(x) * torch.tensor([[1.0, 1.0]], dtype=torch.float64)).sum().backward()
    finally:
        tlg.FixedPointTail.backward = staticmethod(orig)
    assert not torch.equal(x.grad, good)


def test_segments_are_about_sqrt_trips():
    assert [segment_length(n) for n in (1, 2, 4, 5, 100, 101, 10_000)] == [1, 2, 2, 3, 10, 11, 100]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_lookup_engine_is_the_module_bit_for_bit(dtype):
    """The memoised filter loop gives the module's last grid and prediction exactly, on
    random training sets and every test point, including shapes the example was not
    written for; it evaluates far fewer patches than cells × trips."""
    g = load(EXAMPLE)
    rng = np.random.default_rng(12)
    for m, d in [(3, 2), (5, 3), (2, 4)]:
        X, Y = data(rng, m, d)
        steps = learner_mod.step_bound(g, X, Y, Shape(m, d, 0))
        with learner_mod.step_threads():
            tr = learn(g, X, Y, depth=steps + 1, work=1, dtype=dtype)
            xs = rng.choice([-1, 1], (24, d))
            z = torch.tensor(np.concatenate([xs, np.ones((24, 1))], 1), dtype=dtype)
            with torch.no_grad():
                y_mod, grid_mod = tr.module(z)
                first = tr.module.op("memory")(z).to(torch.float64).numpy()
            eng = LookupEngine(tr.module.op("grid").body.op("filter"), tr.depth, dtype)
            last, trips = eng.run(first)
        assert np.array_equal(last, grid_mod.to(torch.float64).numpy())
        assert trips <= tr.depth
        assert np.array_equal(tr.predict(xs), y_mod[:, 0].to(torch.float64).numpy())
        assert eng.evaluated < 0.05 * xs.shape[0] * tr.shape.rows * tr.shape.cols * trips
        assert eng.read == [1, 3, 4, 5, 7]  # V1 reads the centre and its 4 neighbours


def test_lookup_engine_refuses_what_is_not_a_cell_code():
    """A grid of many distinct values (a random filter's) raises Degenerate, and
    ``predict`` falls back to the module with the same answers."""
    g = load(EXAMPLE)
    rng = np.random.default_rng(13)
    X, Y = data(rng, 3, 2)
    with learner_mod.step_threads():
        tr = learn(g, X, Y, depth=42, work=1)
        eng = LookupEngine(tr.module.op("grid").body.op("filter"), 3, torch.float64)
        with pytest.raises(Degenerate, match="distinct cell values"):
            eng.run(rng.normal(size=(2, 70, 70)))
        with pytest.raises(Degenerate, match="non-finite"):
            LookupEngine(tr.module.op("grid").body.op("filter"), 3, torch.float64).run(np.full((1, 2, 2), np.nan))
        xs = rng.choice([-1, 1], (5, 2))
        assert np.array_equal(tr.predict(xs), tr.predict(xs, engine="module"))
