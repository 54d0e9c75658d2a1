"""The elementwise ``Activation`` op (tm2nn.nets.ops.Activation) in the IR, the torch and
the ONNX emitters, against the registry's numpy reference (``np_eval`` of test_emit) and,
for the derivative, against the closed forms of activation.df / dfstar and float64.dfpl."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.emit.test_emit import np_eval
from tm2nn.backends.abbe_sandon import activation as act
from tm2nn.backends.abbe_sandon import float64 as f64
from tm2nn.emit.onnx_model import to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.emit.torch_emit import run_torch, to_torch
from tm2nn.nets import Activation, Affine, Net, NetIRError, Port, Space, SparseMatrix, activations

FNS = sorted(activations.REGISTRY)
DERIV = {"abbe_sandon_f": act.df, "abbe_sandon_fstar": act.dfstar, "abbe_sandon_fpl": f64.dfpl,
         "sqrt": lambda x: 0.5 / np.sqrt(x), "reciprocal": lambda x: -1.0 / x**2}
# Where each function is defined (Welper's sqrt and reciprocal are partial); the rest: everywhere.
DOMAIN = {"sqrt": lambda x: x >= 0, "reciprocal": lambda x: x != 0}
# ... and where its derivative is (sqrt' is unbounded at 0).
DERIV_DOMAIN = {"sqrt": lambda x: x > 0, "reciprocal": lambda x: np.abs(x) > 1e-150}  # -1/x^2 overflows
ONNX_OPS = {"Abs", "Sign", "Clip", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Where",
            "Sub", "Add", "Mul", "Div", "Sigmoid", "Sqrt", "Reciprocal"}


def in_domain(fn: str, x: np.ndarray, table=DOMAIN) -> np.ndarray:
    keep = table.get(fn)
    return x[keep(x)] if keep else x


def act_net(fn: str, n: int, scale: float = 1.0) -> Net:
    x = Space.named("x", range(n))
    nodes = (Affine("pre", ("x",), weight=SparseMatrix.diagonal(np.full(n, scale)), out=Space.named("h", range(n))),
             Activation("act", ("pre",), fn=fn, cite="test"))
    return Net("act", (Port("x", x),), nodes, ("act",))


def sample_points() -> np.ndarray:
    """Every piece of every registered function, its edges, both signs."""
    a = act.A_STAR
    pts = [0.0, 1e-300, 1e-50, a / 2, a, 1.5 * a, 2 * a, 3 * a, 1e-30, 1e-5, 0.1, 0.5, 0.9, 0.999999,
           1.0, 1.0000001, 1.05, 1.1, 1.2, act.C - 1e-9, act.C, 1.3, 1.45, 1.5, 1.6, 2.0, 3.0, 100.0,
           f64.DEAD / 2, f64.DEAD, 1.5 * f64.DEAD, f64.RAMP_END, 2.0**-10, 1.25, 1.26, 1.375, 1.499]
    pts = np.array(pts)
    return np.concatenate([pts, -pts])


def test_op_validates_keeps_labels_and_is_counted():
    net = act_net("abbe_sandon_f", 3)
    assert net.spaces["act"] == net.spaces["pre"]
    assert net.depth()["activation"] == 1 and net.depth()["relu"] == 0
    info = net.info()
    assert info["activations"] == {"abbe_sandon_f": 1}
    assert info["params_nonzero"] == 3  # the activation has no weights
    with pytest.raises(NetIRError, match="unknown function 'tanh'"):
        Activation("a", ("x",), fn="tanh")
    with pytest.raises(NetIRError, match="takes 1 input"):
        Activation("a", ("x", "y"), fn="abbe_sandon_f")
    with pytest.raises(KeyError, match="registered"):
        activations.get("nope")


@pytest.mark.parametrize("fn", FNS)
def test_torch_and_onnx_match_numpy(fn):
    x = in_domain(fn, sample_points())[None, :]
    net = act_net(fn, x.shape[1])
    want = np_eval(net, x)["act"]
    assert np.all(np.isfinite(want))
    got = run_torch(to_torch(net, torch.float64), x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    model = to_onnx(net)
    onnx.checker.check_model(model, full_check=True)
    ops = {n.op_type for n in model.graph.node if n.name.startswith("act/") and n.op_type != "Transpose"}
    assert ops <= ONNX_OPS, ops - ONNX_OPS
    f32 = np.abs(want) < 1e38  # the reciprocal of a tiny float32 overflows
    np.testing.assert_allclose(run_onnx(model, x)[f32], want[f32], rtol=2e-6, atol=1e-6)
    # float32 torch as well
    np.testing.assert_allclose(run_torch(net, x)[f32], want[f32], rtol=2e-6, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(fn=st.sampled_from(FNS), seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1e-40, 1e-3, 0.5, 1.0, 2.0]))
def test_random_inputs_three_implementations_agree(fn, seed, scale):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (5, 7))
    if fn in DOMAIN:
        x = np.where(DOMAIN[fn](x), x, 1.0)
    net = act_net(fn, 7, scale)
    want = np_eval(net, x)["act"]
    np.testing.assert_allclose(run_torch(to_torch(net, torch.float64), x), want, rtol=1e-12, atol=1e-300)
    f32 = np.abs(want) < 1e38
    np.testing.assert_allclose(run_onnx(to_onnx(net), x)[f32], want[f32], rtol=2e-6, atol=1e-6)


def autograd(fn: str, x: np.ndarray) -> np.ndarray:
    module = to_torch(act_net(fn, x.size), torch.float64)
    t = torch.tensor(x[None, :], requires_grad=True)
    module(t).sum().backward()
    return t.grad.numpy()[0]


@pytest.mark.parametrize("fn", FNS)
def test_autograd_is_the_derivative(fn):
    x = in_domain(fn, in_domain(fn, sample_points()), DERIV_DOMAIN)
    x = x[~np.isin(np.abs(x), [act.A_STAR, 2 * act.A_STAR, 1.0, act.C, 1.5, f64.DEAD, f64.RAMP_END, 1.25])]  # kinks
    np.testing.assert_allclose(autograd(fn, x), DERIV[fn](x), rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize("fn", ["abbe_sandon_f", "abbe_sandon_fstar"])
def test_autograd_exact_where_flat_and_on_the_cube(fn):
    rng = np.random.default_rng(1)
    flat = np.concatenate([[0.0, act.C, 1.3, 1.5, 2.0, 2.5, 1e6], -rng.uniform(act.C, 4, 20), rng.uniform(act.C, 4, 20)])
    cube = np.concatenate([rng.uniform(-0.999, 0.999, 50), [0.5, -0.25, 2.0**-20, 1e-3]])
    if fn == "abbe_sandon_fstar":
        flat = np.concatenate([flat, [act.A_STAR, -act.A_STAR, act.A_STAR / 3, 1e-45]])
        cube = cube[np.abs(cube) >= act.B_STAR]
    g = autograd(fn, flat)
    assert np.all(g == 0.0) and np.array_equal(g, DERIV[fn](flat))
    g = autograd(fn, cube)
    assert np.array_equal(g, 3.0 * cube**2) and np.array_equal(g, DERIV[fn](cube))


def test_autograd_fpl_exact():
    rng = np.random.default_rng(2)
    flat = np.array([0.0, f64.DEAD, f64.DEAD / 2, -f64.DEAD, 1.5, 2.0, -2.0, 7.0, -1e9])
    ident = np.concatenate([rng.uniform(-1.25, -2.0**-60, 30), rng.uniform(2.0**-60, 1.25, 30), [1.0, -1.0, 0.5, 2.0**-30]])
    assert np.all(autograd("abbe_sandon_fpl", flat) == 0.0)
    assert np.all(autograd("abbe_sandon_fpl", ident) == 1.0)
    assert np.array_equal(f64.fpl(ident), ident)  # the identity piece is the input itself


def test_fpl_is_exact_on_dyadics_in_float32_onnx_and_torch():
    """fpl is exact on powers of two in every implementation (the float64 gadget relies
    on it; here float32, the ONNX emitter's type)."""
    x = np.array([[2.0**-e for e in range(0, 62)] + [-(2.0**-e) for e in range(0, 62)] + [0.0, 2.0, -4.0, 2.0**-70]])
    net = act_net("abbe_sandon_fpl", x.shape[1])
    want = np_eval(net, x)["act"]
    assert np.array_equal(run_onnx(to_onnx(net), x), want.astype(np.float32))
    assert np.array_equal(run_torch(net, x), want.astype(np.float32))


def test_fpl_shape():
    """Continuous, odd and nondecreasing; the values the lemmas use."""
    x = np.linspace(-3, 3, 200001)
    y = f64.fpl(x)
    assert np.all(np.diff(y) >= 0) and np.array_equal(f64.fpl(-x), -y)
    assert np.max(np.abs(np.diff(y))) <= 3 * (x[1] - x[0]) * (1 + 1e-9)  # Lipschitz 3: continuous
    e = np.array([f64.DEAD, f64.RAMP_END, 1.25, 1.5])
    np.testing.assert_allclose(f64.fpl(e * (1 - 1e-12)), f64.fpl(e * (1 + 1e-12)), atol=1e-11)
    assert f64.fpl(1.0) == 1.0 and f64.dfpl(1.0) == 1.0 and f64.fpl(2.0) == 2.0 and f64.dfpl(2.0) == 0.0
    assert f64.fpl(0.0) == 0.0 and f64.dfpl(0.0) == 0.0


def test_activation_inside_a_loop_body_and_repr():
    sp = Space.named("s", range(2))
    body = Net("body", (Port("s", sp),), (Affine("lin", ("s",), weight=SparseMatrix.diagonal([0.5, 3.0]), out=sp),
                                          Activation("f", ("lin",), fn="abbe_sandon_f")), ("f",))
    from tm2nn.nets import Loop

    net = Net("loop", (Port("x", sp),), (Loop("loop", ("x",), body=body, trips=3),), ("loop",))
    x = np.array([[0.9, -0.4], [0.2, 1.0]])
    want = np_eval(net, x)["loop"]
    module = to_torch(net, torch.float64)
    assert "fn=abbe_sandon_f" in repr(module)
    np.testing.assert_allclose(run_torch(module, x), want, rtol=1e-12)
    f32 = np.abs(want) < 1e38
    np.testing.assert_allclose(run_onnx(to_onnx(net), x)[f32], want[f32], rtol=2e-6, atol=1e-6)
    assert net.depth()["activation"] == 3
