"""The emitters (NetIR -> torch, NetIR -> ONNX) against an independent numpy evaluation.

``np_eval`` below is the reference: it reads only ``weight.dense()``, the bias and the op
definitions, and shares no code with either emitter.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, external_data_helper

from tm2nn import __version__
from tm2nn.emit import (
    BULK_BATCH,
    DENSE_WORK,
    ELL_MAX_DENSITY,
    ELL_MAX_K,
    SCATTER_MAX_DENSITY,
    STEP_BATCH,
    affine_form,
)
from tm2nn.emit import onnx_model as onnx_emit_mod
from tm2nn.emit.onnx_model import onnx_metadata, save_onnx, to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.emit.torch_emit import run_torch, to_torch
from tm2nn.emit.torch_net import NetModule
from tm2nn.errors import Tm2nnError
from tm2nn.nets import (
    Activation,
    Affine,
    Concat,
    Loop,
    Net,
    NetIRError,
    Port,
    ReLU,
    Slice,
    Space,
    SparseMatrix,
    activations,
)

ROOT = Path(__file__).resolve().parents[3]


# -- the reference ------------------------------------------------------------------------
def np_vector_op(op, xs: list[np.ndarray]) -> np.ndarray | None:
    """Reference value of an affine, ReLU, activation, concat, slice or loop op on batch-major
    inputs; None for any other kind (test_emit_seq adds the sequence ops)."""
    if isinstance(op, Affine):
        return xs[0] @ op.weight.dense().T + op.bias
    if isinstance(op, ReLU):
        return np.maximum(xs[0], 0.0)
    if isinstance(op, Activation):  # the registry's numpy reference (emitters use torch / ONNX code)
        return activations.get(op.fn).numpy(xs[0])
    if isinstance(op, Concat):
        return np.concatenate(xs, axis=1)
    if isinstance(op, Slice):
        return xs[0][:, list(op.indices)]
    if isinstance(op, Loop):
        y = xs[0]
        for _ in range(op.trips):
            y = np_eval(op.body, y)[op.body.outputs[0]]
        return y
    return None


def np_eval(net: Net, *arrays) -> dict[str, np.ndarray]:
    """Every value of ``net`` (float64), by name."""
    env = {p.name: np.asarray(a, dtype=np.float64) for p, a in zip(net.inputs, arrays)}
    for op in net.nodes:
        y = np_vector_op(op, [env[i] for i in op.inputs])
        if y is None:  # pragma: no cover
            raise AssertionError(op)
        env[op.name] = y
    return env


def np_outputs(net: Net, *arrays) -> list[np.ndarray]:
    env = np_eval(net, *arrays)
    return [env[o] for o in net.outputs]


def as_list(y) -> list:
    return [y] if isinstance(y, (np.ndarray, torch.Tensor)) else list(y)


def assert_close(got, want, rtol, scale):
    got, want = as_list(got), as_list(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.detach().numpy() if isinstance(g, torch.Tensor) else g
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale)


# -- random nets --------------------------------------------------------------------------
VALUES = np.array([1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1 / 3, -1 / 3, 0.25, -0.75, 1.5])
SMALL = np.array([0.5, -0.5, 1 / 3, -1 / 3, 0.25, -0.25])


def make_weight(rng, kind: str, n_out: int, n_in: int, values=VALUES, k: int = 2) -> SparseMatrix:
    if kind == "diagonal":
        return SparseMatrix.diagonal(rng.choice(values, n_out))
    if kind == "sparse":
        entries = []
        for r in range(n_out):
            for c in rng.choice(n_in, size=min(n_in, int(rng.integers(0, k + 1))), replace=False):
                entries.append((r, int(c), float(rng.choice(values))))
        return SparseMatrix.from_entries((n_out, n_in), entries)
    dense = rng.choice(values, (n_out, n_in)) * (rng.random((n_out, n_in)) < 0.7)
    return SparseMatrix.from_dense(dense / max(1, n_in // 3))


NAME_STYLES = ["op{}", "layer{}:and", "{}x", "n.{}/a b", "forward{}"]


@st.composite
def body_nets(draw, rng, space: Space) -> Net:
    """A loop body over ``space``: 0-2 affine(+ReLU) steps back into ``space``."""
    port = Port("s", space)
    nodes, cur, width = [], "s", len(space)
    steps = draw(st.integers(0, 2))
    for j in range(steps):
        out = space if j == steps - 1 else Space.named(f"b{j}", range(draw(st.integers(1, 6))))
        kinds = ["sparse", "dense"] + (["diagonal"] if len(out) == width else [])
        w = make_weight(rng, draw(st.sampled_from(kinds)), len(out), width, values=SMALL, k=1)
        nodes.append(Affine(f"b{j}", (cur,), weight=w, bias=rng.choice(SMALL, len(out)), out=out))
        cur, width = f"b{j}", len(out)
        if draw(st.booleans()):
            nodes.append(ReLU(f"b{j}r", (cur,)))
            cur = f"b{j}r"
    return Net("body", (port,), tuple(nodes), (cur,))


@st.composite
def nets(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ports = [Port(f"in{i}", Space.named(f"in{i}", range(draw(st.integers(1, 12)))))
             for i in range(draw(st.integers(1, 2)))]
    spaces: dict[str, Space] = {p.name: p.space for p in ports}
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        name = draw(st.sampled_from(NAME_STYLES)).format(i)
        kind = draw(st.sampled_from(["affine", "affine", "affine", "relu", "concat", "slice", "loop"]))
        src = draw(st.sampled_from(list(spaces)))
        n_in = len(spaces[src])
        if kind == "affine":
            wkind = draw(st.sampled_from(["sparse", "sparse", "dense", "diagonal"]))
            n_out = n_in if wkind == "diagonal" else draw(st.integers(1, 12))
            w = make_weight(rng, wkind, n_out, n_in, k=draw(st.integers(1, 3)))
            bias = rng.choice(VALUES, n_out) if draw(st.booleans()) else None
            op = Affine(name, (src,), weight=w, bias=bias, out=Space.named(f"v{i}", range(n_out)),
                        trainable=draw(st.integers(0, 5)) == 0)
        elif kind == "relu":
            op = ReLU(name, (src,))
        elif kind == "concat":
            picks = draw(st.lists(st.sampled_from(list(spaces)), min_size=1, max_size=3))
            chosen, labels = [], set()
            for p in picks:  # Concat needs disjoint labels
                if labels.isdisjoint(spaces[p].labels):
                    chosen.append(p)
                    labels |= set(spaces[p].labels)
            op = Concat(name, tuple(chosen))
        elif kind == "slice":
            perm = draw(st.permutations(range(n_in)))
            op = Slice(name, (src,), indices=tuple(perm[: draw(st.integers(1, n_in))]))
        else:
            op = Loop(name, (src,), body=draw(body_nets(rng, spaces[src])), trips=draw(st.integers(0, 5)))
        nodes.append(op)
        spaces[op.name] = Net("probe", tuple(ports), tuple(nodes), (op.name,)).spaces[op.name]
    values = list(spaces)
    extra = draw(st.lists(st.sampled_from(values), max_size=2, unique=True))
    outputs = tuple(dict.fromkeys([nodes[-1].name, *extra]))
    net = Net("random", tuple(ports), tuple(nodes), outputs)
    batch = draw(st.integers(1, 7))
    arrays = [rng.uniform(-2, 2, (batch, len(p.space))) for p in ports]
    return net, arrays


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=nets())
def test_random_nets_match_numpy(case):
    net, arrays = case
    env = np_eval(net, *arrays)
    want = [env[o] for o in net.outputs]
    scale = max(1.0, max(float(np.abs(v).max(initial=0)) for v in env.values()))

    module = to_torch(net, torch.float64)
    assert_close(run_torch(module, *arrays, batch_size=3), want, 1e-9, scale)
    # every intermediate value, and every op submodule called on its own (batch-major)
    tensors = [torch.from_numpy(a) for a in arrays]
    with torch.no_grad():
        trace = module.trace(*tensors)
        for name, value in env.items():
            assert_close(trace[name], value, 1e-9, scale)
        for op in net.nodes:
            alone = module.op(op.name)(*[trace[i] for i in op.inputs])
            assert_close(alone, env[op.name], 1e-9, scale)

    model = to_onnx(net)
    onnx.checker.check_model(model, full_check=True)
    assert_close(run_onnx(model, *arrays, batch_size=3), want, 1e-4, scale)


# -- fixed nets ---------------------------------------------------------------------------
def sp(name: str, n: int) -> Space:
    return Space.named(name, range(n))


def ring(n: int, k: int, vals=(1 / 3, -1.0, 0.5)) -> SparseMatrix:
    """n x n with k nonzeros per row, at columns i, i+1, ... (mod n)."""
    return SparseMatrix.from_entries((n, n), [(i, (i + j) % n, vals[j % len(vals)])
                                              for i in range(n) for j in range(k)])


def mixed_net(trips: int = 3) -> Net:
    """All three affine forms, a trainable affine, a loop, a slice and a concat."""
    n = 200
    body = Net("body", (Port("s", sp("t", 4)),),
               (Affine("step", ("s",), weight=SparseMatrix.diagonal([0.5, -1 / 3, 1, 0.25]),
                       bias=np.array([1.0, 0, -0.5, 0.25]), out=sp("t", 4)),
                ReLU("step_relu", ("step",))),
               ("step_relu",))
    nodes = (
        Affine("layer3:and", ("x",), weight=ring(n, 2), bias=np.full(n, -0.5), out=sp("h", n)),
        ReLU("r", ("layer3:and",)),
        Affine("diag", ("r",), weight=SparseMatrix.diagonal(np.linspace(-1, 2, n)), out=sp("d", n)),
        Affine("mix", ("diag",), weight=SparseMatrix.from_dense(np.arange(4 * n).reshape(4, n) % 7 / 3 - 1),
               bias=np.array([0.5, -1, 0, 2]), out=sp("t", 4)),
        Loop("loop", ("mix",), body=body, trips=trips),
        Slice("pick", ("loop",), indices=(3, 0)),
        Affine("head", ("pick",), weight=SparseMatrix.from_dense([[1.0, -2.0], [0.5, 1 / 3]]),
               bias=np.array([0.1, -0.2]), out=sp("o", 2), trainable=True),
        Concat("both", ("head", "r")),
    )
    return Net("mixed", (Port("x", sp("x", n)),), nodes, ("both", "loop"))


def rand_inputs(net: Net, batch: int = 9, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, (batch, len(p.space))) for p in net.inputs]


def test_mixed_net_torch_and_onnx_match_numpy():
    net = mixed_net()
    arrays = rand_inputs(net, batch=50)
    want = np_outputs(net, *arrays)
    got = run_torch(to_torch(net, torch.float64), *arrays, batch_size=16)
    assert isinstance(got, tuple) and len(got) == 2
    assert_close(got, want, 1e-12, 10)
    assert_close(run_onnx(to_onnx(net), *arrays, batch_size=16), want, 1e-5, 10)
    assert_close(run_torch(net, *arrays), want, 1e-5, 10)  # a Net: emitted in float32


def one_affine(w: SparseMatrix, trainable=False) -> Net:
    op = Affine("a", ("x",), weight=w, bias=np.linspace(-1, 1, w.shape[0]), out=sp("y", w.shape[0]),
                trainable=trainable)
    return Net("one", (Port("x", sp("x", w.shape[1])),), (op,), ("a",))


@pytest.mark.parametrize("w, trainable, form, onnx_ops", [
    (SparseMatrix.diagonal([1 / 3, -2, 0.5, 0, 4]), False, "diagonal", {"Mul", "Add"}),
    (ring(200, 2), False, "ell", {"Gather", "Mul", "Add"}),
    (ring(40, 2), False, "ell", {"Gather", "Mul", "Add"}),  # small, but at a bulk batch gathers win
    (ring(200, ELL_MAX_K), False, "ell", {"Gather", "Mul", "Add"}),
    (SparseMatrix.from_dense([[1, -1 / 3, 0], [0.5, 2, -1]]), False, "dense", {"MatMul", "Add"}),
    (ring(200, ELL_MAX_K + 1), False, "dense", {"MatMul", "Add"}),  # too many per row, too dense
    (ring(400, ELL_MAX_K + 4), False, "scatter", {"Shape", "Concat", "Expand", "Gather", "Mul", "ScatterND"}),
    (SparseMatrix.from_entries((300, 300), [(0, j, 1.0 / (j + 1)) for j in range(300)] + [(i, i, -2.0) for i in range(1, 300)]),
     False, "scatter", {"Shape", "Concat", "Expand", "Gather", "Mul", "ScatterND"}),  # one heavy row
    (SparseMatrix.from_entries((1000, 40), [(i, (i + j) % 40, 1.0) for i in range(1000) for j in range(10)]),
     False, "dense", {"MatMul", "Add"}),  # k / n_in = 0.25: too dense
    # trainable and sparse: the parameter is the [nnz] vector of existing edges (absent
    # edges must not train: Abbe & Sandon's G_n), whatever the size
    (ring(40, 2), True, "scatter", {"Shape", "Concat", "Expand", "Gather", "Mul", "ScatterND"}),
    (SparseMatrix.diagonal([1.0, 2.0]), True, "scatter", {"Shape", "Concat", "Expand", "Gather", "Mul", "ScatterND"}),
    # trainable with every entry stored: a dense parameter
    (SparseMatrix.from_dense([[1, -1 / 3], [0.5, 2]]), True, "dense", {"MatMul", "Add"}),
])
def test_affine_forms(w, trainable, form, onnx_ops):
    assert 10 / 40 >= ELL_MAX_DENSITY  # the "too dense" case above relies on this
    assert 17 / 200 > SCATTER_MAX_DENSITY >= 20 / 400
    net = one_affine(w, trainable)
    op = net.nodes[0]
    assert affine_form(op) == form
    module = to_torch(net, torch.float64)
    assert module.a.form == form
    assert f"form={form}" in repr(module)
    model = to_onnx(net)
    assert {n.op_type for n in model.graph.node if n.name.split("/")[0] == "a" and n.op_type != "Transpose"} == onnx_ops
    arrays = rand_inputs(net)
    want = np_outputs(net, *arrays)
    assert_close(run_torch(module, *arrays), want, 1e-12, 10)
    assert_close(run_onnx(model, *arrays), want, 1e-5, 10)


def test_affine_form_reads_the_batch():
    """Small matrices are one matmul only where the batch is small: a decoder's per-step
    layers.  At a bulk batch the dense work n_out * n_in * batch decides (issue 20: c6288's
    two-input layers had become 337 dense matmuls)."""
    op = one_affine(ring(40, 2)).nodes[0]
    assert affine_form(op, STEP_BATCH) == "dense" and affine_form(op, BULK_BATCH) == "ell"
    assert affine_form(op) == "ell"  # the default is the bulk batch
    assert 40 * 40 * STEP_BATCH <= DENSE_WORK < 40 * 40 * BULK_BATCH
    tiny = one_affine(SparseMatrix.from_dense([[1, -1 / 3, 0], [0.5, 2, -1]])).nodes[0]
    assert affine_form(tiny, BULK_BATCH) == "dense"  # 6 entries: one matmul still wins


def test_decoder_layers_take_the_step_batch():
    """Inside a Decode (torch and ONNX alike) the forms are chosen at STEP_BATCH."""
    from tm2nn.compiler import compile as tm2nn_compile
    from tm2nn.nets import Decode
    from tm2nn.syntax import load

    net = tm2nn_compile(load(ROOT / "examples" / "even_ones.tm"), "transformer", steps=8).net
    dec = next(op for op in net.nodes if isinstance(op, Decode))
    affines = [op for op in dec.body.nodes if isinstance(op, Affine)]
    want = [affine_form(op, STEP_BATCH) for op in affines]
    assert "dense" in want and want != [affine_form(op) for op in affines]
    body = to_torch(net).op(dec.name).body
    assert [getattr(body, body.op_attrs[op.name]).form for op in affines] == want
    loops = [n for n in to_onnx(net).graph.node if n.op_type == "Loop"]
    assert any(m.op_type == "MatMul" for n in loops for m in n.attribute[0].g.node)


# -- torch --------------------------------------------------------------------------------
def test_module_names_and_state_dict_keys():
    net = mixed_net()
    module = to_torch(net)
    keys = set(module.state_dict())
    # parameters only: index buffers (ELL columns, packed positions) are not saved
    assert {"layer3_and.weight", "layer3_and.bias", "diag.weight", "diag.bias",
            "mix.weight", "mix.bias", "loop.body.step.weight", "loop.body.step.bias",
            "head.weight", "head.bias"} == keys
    assert module.op("layer3:and") is module.layer3_and
    assert "(layer3_and): AffineModule(200 -> 200, form=ell" in repr(module)


def test_awkward_op_names_are_sanitised_deterministically():
    names = ["3x", "a b", "a_b", "forward", "class", "a.b", "training", ""]
    nodes, cur = [], "x"
    for i, name in enumerate(names):
        nodes.append(Affine(name, (cur,), weight=SparseMatrix.diagonal([1.0, 2.0]), out=sp(f"l{i}", 2)))
        cur = name
    net = Net("awk", (Port("x", sp("x", 2)),), tuple(nodes), (cur,))
    m1, m2 = to_torch(net), to_torch(net)
    attrs = [m1.op_attrs[n] for n in names]
    assert attrs == [m2.op_attrs[n] for n in names]
    assert len(set(attrs)) == len(attrs)
    assert all(a.isidentifier() for a in attrs)
    assert attrs[:5] == ["_3x", "a_b", "a_b_2", "forward_op", "class_"]
    x = torch.tensor([[1.0, -1.0]])
    assert torch.equal(m1(x), torch.tensor([[1.0, -(2.0**8)]]))


def test_state_dict_round_trip():
    net = mixed_net()
    x = torch.from_numpy(rand_inputs(net)[0]).float()
    m1 = to_torch(net)
    with torch.no_grad():
        for t in (*m1.parameters(), *m1.buffers()):
            if t.is_floating_point():
                t.add_(torch.linspace(0.1, 0.7, t.numel()).reshape(t.shape))
    buf = io.BytesIO()
    torch.save(m1.state_dict(), buf)
    m2 = to_torch(net)
    assert not torch.equal(m2(x)[0], m1(x)[0])  # the perturbation matters
    buf.seek(0)
    m2.load_state_dict(torch.load(buf))
    for a, b in zip(m1(x), m2(x)):
        assert torch.equal(a, b)


def test_trainable_affines_require_grad_and_others_are_frozen_parameters():
    module = to_torch(mixed_net())
    assert {n for n, p in module.named_parameters() if p.requires_grad} == {"head.weight", "head.bias"}
    assert isinstance(module.head.weight, torch.nn.Parameter)
    assert module.head.weight.shape == (2, 2)  # the dense W
    frozen = {n for n, p in module.named_parameters() if not p.requires_grad}
    assert {"layer3_and.weight", "diag.weight", "mix.weight", "loop.body.step.weight"} <= frozen
    assert set(module.state_dict()) == {n for n, _ in module.named_parameters()}  # buffers are structure


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtypes(dtype):
    net = mixed_net()
    module = to_torch(net, dtype)
    assert all(t.dtype == dtype for t in module.state_dict().values() if t.is_floating_point())
    x = torch.from_numpy(rand_inputs(net)[0]).to(dtype)
    assert all(y.dtype == dtype for y in module(x))
    assert run_torch(module, x.numpy())[0].dtype == (np.float32 if dtype == torch.float32 else np.float64)
    with pytest.raises(TypeError):
        to_torch(net, torch.int64)


def test_no_grad_matches_grad_mode_and_leaves_inputs_alone():
    # the input feeds a ReLU directly, and "a" is both an output and a ReLU's input:
    # neither may be overwritten by the in-place ReLU of the no_grad path
    nodes = (ReLU("r0", ("x",)),
             Affine("a", ("r0",), weight=ring(12, 2), bias=np.full(12, -0.5), out=sp("a", 12)),
             ReLU("r1", ("a",)),
             Affine("b", ("r1",), weight=ring(12, 1, (-1.0,)), out=sp("b", 12)),
             ReLU("r2", ("b",)))
    net = Net("inplace", (Port("x", sp("x", 12)),), nodes, ("r2", "a"))
    x = torch.from_numpy(rand_inputs(net, batch=5)[0])
    x0 = x.clone()
    module = to_torch(net, torch.float64)
    want = np_outputs(net, x0.numpy())
    with torch.no_grad():
        got = module(x)
    assert not any(y.requires_grad for y in got)
    assert torch.equal(x, x0)
    assert_close(got, want, 1e-12, 10)
    xg = x.clone().requires_grad_(True)
    got_grad = module(xg)
    assert all(y.requires_grad for y in got_grad)
    for a, b in zip(got, got_grad):
        assert torch.equal(a, b.detach())


def test_no_grad_zero_trip_loop_output_is_not_overwritten():
    # a loop with 0 trips returns its input; a ReLU of it must not write into that input
    body = Net("body", (Port("s", sp("h", 4)),), (ReLU("br", ("s",)),), ("br",))
    nodes = (Loop("l0", ("x",), body=body, trips=0), ReLU("r0", ("l0",)),
             Affine("a", ("x",), weight=SparseMatrix.diagonal([1.0, -1.0, 2.0, 0.5]), out=sp("a", 4)),
             Loop("l1", ("a",), body=Net("b2", (Port("s", sp("a", 4)),), (), ("s",)), trips=0),
             ReLU("r1", ("l1",)), Concat("both", ("r0", "r1")))
    net = Net("alias", (Port("x", sp("h", 4)),), nodes, ("both", "a"))
    x = torch.tensor([[-1.0, 2.0, -3.0, 4.0]], dtype=torch.float64)
    x0 = x.clone()
    with torch.no_grad():
        got = to_torch(net, torch.float64)(x)
    assert torch.equal(x, x0)
    assert_close(got, np_outputs(net, x0.numpy()), 1e-12, 10)


def test_gradient_wrt_input():
    net = mixed_net()
    module = to_torch(net, torch.float64)
    x = torch.from_numpy(rand_inputs(net, batch=3, seed=4)[0]).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: module(t), (x,), eps=1e-6, atol=1e-6)
    # and analytically on a tiny net: y = sum(relu(W x + b)) has dy/dx = W^T [W x + b > 0]
    w = SparseMatrix.from_dense([[1.0, -2.0, 0.0], [1 / 3, 0.0, 0.5]])
    net = Net("tiny", (Port("x", sp("x", 3)),),
              (Affine("a", ("x",), weight=w, bias=np.array([0.5, -1.0]), out=sp("y", 2)), ReLU("r", ("a",))),
              ("r",))
    x = torch.tensor([[1.0, 1.0, 1.0], [3.0, 0.0, 3.0]], dtype=torch.float64, requires_grad=True)
    to_torch(net, torch.float64)(x).sum().backward()
    pre = x.detach().numpy() @ w.dense().T + np.array([0.5, -1.0])
    np.testing.assert_allclose(x.grad.numpy(), (pre > 0) @ w.dense())


def test_gradient_wrt_trainable_weights():
    net = mixed_net()
    module = to_torch(net, torch.float64)
    x = torch.from_numpy(rand_inputs(net, batch=6)[0])
    module(x)[0][:, :2].sum().backward()  # the "head" part of the concat
    pick = np_eval(net, x.numpy())["pick"]
    # d sum(W p + b) / dW[i, j] = sum_batch p[:, j], for every weight (zero ones included)
    np.testing.assert_allclose(module.head.weight.grad.numpy(), np.tile(pick.sum(0), (2, 1)))
    np.testing.assert_allclose(module.head.bias.grad.numpy(), [6.0, 6.0])


def test_forward_checks_inputs():
    module = to_torch(mixed_net())
    with pytest.raises(TypeError):
        module()
    with pytest.raises(ValueError, match="expected shape"):
        module(torch.zeros(3, 199))
    y = module(torch.zeros(3, 200, dtype=torch.int64))  # integers are cast
    assert y[0].dtype == torch.float32


def test_single_output_is_a_tensor_and_outputs_can_be_inputs():
    net = Net("id", (Port("x", sp("x", 3)), Port("z", sp("z", 2))), (ReLU("r", ("x",)),), ("r",))
    m = to_torch(net)
    y = m(torch.tensor([[-1.0, 0.0, 2.0]]), torch.zeros(1, 2))
    assert isinstance(y, torch.Tensor) and y.tolist() == [[0.0, 0.0, 2.0]]
    net = Net("pass", (Port("x", sp("x", 3)),), (ReLU("r", ("x",)),), ("x", "r"))
    x = np.array([[-1.0, 0.0, 2.0]], dtype=np.float32)
    for got in (run_torch(net, x), run_onnx(to_onnx(net), x)):
        assert np.array_equal(got[0], x) and np.array_equal(got[1], np.maximum(x, 0))


def test_run_torch_and_run_onnx_batch_and_accept_empty_batches():
    net = mixed_net()
    arrays = rand_inputs(net, batch=23)
    want = np_outputs(net, *arrays)
    for bs in (1, 5, 23, 4096):
        assert_close(run_torch(net, *arrays, batch_size=bs), want, 1e-5, 10)
        assert_close(run_onnx(to_onnx(net), *arrays, batch_size=bs), want, 1e-5, 10)
    empty = np.zeros((0, 200))
    assert [y.shape for y in run_torch(net, empty)] == [(0, 202), (0, 4)]
    assert [y.shape for y in run_onnx(to_onnx(net), empty)] == [(0, 202), (0, 4)]


# -- ONNX ---------------------------------------------------------------------------------
def all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attr.g)


def test_onnx_structure_and_names():
    net = mixed_net()
    model = to_onnx(net)
    onnx.checker.check_model(model, full_check=True)
    g = model.graph
    assert [i.name for i in g.input] == ["x"] and [o.name for o in g.output] == ["both", "loop"]
    for vi in (*g.input, *g.output):
        dims = vi.type.tensor_type.shape.dim
        assert vi.type.tensor_type.elem_type == TensorProto.FLOAT
        assert dims[0].dim_param == "batch" and dims[1].dim_value > 0
    ops = {op.name for op in net.nodes} | {f"loop/{op.name}" for op in net.node("loop").body.nodes}
    edges = {"x/transpose", "both/transpose", "loop/transpose"}
    for node in all_nodes(g):
        owner = node.name if node.name in ops | edges else node.name.rsplit("/", 1)[0]
        assert owner in ops | edges | {"loop/cond"}, node.name
    names = {node.name for node in all_nodes(g)}
    assert {"r", "diag", "mix/matmul", "mix/bias", "loop", "pick", "head/matmul", "both",
            "layer3:and/gather.0", "layer3:and/gather.1", "loop/step/mul", "loop/step_relu"} <= names
    inits = {t.name for t in g.initializer}
    assert {"layer3:and.cols.0", "layer3:and.cols.1", "layer3:and.weight.0", "layer3:and.weight.1",
            "layer3:and.bias", "diag.weight", "mix.weight", "head.bias",
            "mix.bias", "head.weight", "loop.trips", "loop/step.weight", "loop/step.bias",
            "pick.indices"} == inits  # "diag" has no bias, so no "diag.bias"
    loop = next(n for n in g.node if n.op_type == "Loop")
    assert loop.name == "loop"
    assert model.producer_name == "tm2nn" and model.producer_version == __version__
    assert model.doc_string == "mixed"


def test_onnx_is_self_contained(tmp_path):
    model = to_onnx(mixed_net())
    for t in model.graph.initializer:
        assert t.data_location != TensorProto.EXTERNAL and not external_data_helper.uses_external_data(t)
    path = save_onnx(model, tmp_path / "m.onnx")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
    loaded = onnx.load(str(path), load_external_data=False)
    assert not any(external_data_helper.uses_external_data(t) for t in loaded.graph.initializer)
    arrays = rand_inputs(mixed_net())
    assert_close(run_onnx(path, *arrays), np_outputs(mixed_net(), *arrays), 1e-5, 10)
    assert_close(run_onnx(path.read_bytes(), *arrays), np_outputs(mixed_net(), *arrays), 1e-5, 10)


def test_metadata_round_trip(tmp_path):
    meta = {"tm2nn.backend": "relu_circuit", "b": "2", "a": "1", "tm2nn.ports": {"x": [1, 2]}}
    model = to_onnx(mixed_net(), metadata=meta)
    keys = [p.key for p in model.metadata_props]
    assert keys == sorted(keys)
    want = {"tm2nn.backend": "relu_circuit", "b": "2", "a": "1", "tm2nn.ports": '{"x": [1, 2]}',
            "tm2nn.version": __version__}
    assert onnx_metadata(model) == want
    path = save_onnx(model, tmp_path / "m.onnx")
    assert onnx_metadata(path) == want
    assert onnx_metadata(str(path)) == want
    assert onnx_metadata(model.SerializeToString()) == want


def test_emission_is_deterministic():
    a = to_onnx(mixed_net(), {"z": "1", "a": "2"}).SerializeToString()
    b = to_onnx(mixed_net(), {"a": "2", "z": "1"}).SerializeToString()
    assert a == b
    assert to_onnx(mixed_net(), {"a": "3", "z": "1"}).SerializeToString() != a


def counter_net(trips: int) -> Net:
    body = Net("body", (Port("s", sp("c", 3)),),
               (Affine("inc", ("s",), weight=SparseMatrix.diagonal([1.0, 1.0, 0.5]),
                       bias=np.array([1.0, -1.0, 1.0]), out=sp("c", 3)),), ("inc",))
    return Net("counter", (Port("x", sp("c", 3)),), (Loop("loop", ("x",), body=body, trips=trips),), ("loop",))


def test_loop_size_does_not_grow_with_trips():
    small, big = to_onnx(counter_net(10)), to_onnx(counter_net(1000))
    onnx.checker.check_model(big, full_check=True)
    assert len(small.SerializeToString()) == len(big.SerializeToString())
    assert sum(n.op_type == "Loop" for n in big.graph.node) == 1
    x = np.array([[0.0, 5.0, 8.0], [-3.0, 1000.0, 0.0]])
    want = x + [1000.0, -1000.0, 0.0]
    want[:, 2] = 2 + (x[:, 2] - 2) * 0.5**1000  # x -> x/2 + 1 converges to 2
    np.testing.assert_allclose(run_onnx(big, x), want, rtol=1e-6)
    np.testing.assert_allclose(run_torch(counter_net(1000), x), want, rtol=1e-6)
    assert np.array_equal(run_onnx(to_onnx(counter_net(0)), x), x)


def test_onnx_rejects_bad_requests():
    net = mixed_net()
    with pytest.raises(ValueError):
        to_onnx(net, opset=11)
    dup = Net("dup", (Port("x", sp("x", 2)),), (ReLU("r", ("x",)),), ("r", "r"))
    with pytest.raises(NetIRError, match="distinct"):
        to_onnx(dup)
    model = to_onnx(net)
    with pytest.raises(TypeError):
        run_onnx(model)


def test_save_onnx_leaves_no_partial_file(tmp_path, monkeypatch):
    model = to_onnx(mixed_net())
    target = tmp_path / "out.onnx"

    def boom(_model):
        raise RuntimeError("serialization failed")

    with monkeypatch.context() as mp:
        mp.setattr(onnx_emit_mod, "serialize", boom)
        with pytest.raises(RuntimeError, match="serialization failed"):
            save_onnx(model, target)
    assert not target.exists()
    assert os.listdir(tmp_path) == []

    def bad_replace(src, dst):
        raise OSError("disk full")

    with monkeypatch.context() as mp:
        mp.setattr(onnx_emit_mod.os, "replace", bad_replace)  # os is shared: write_atomic sees it
        with pytest.raises(Tm2nnError, match="cannot write .*out.onnx: disk full"):
            save_onnx(model, target)
    assert not target.exists()
    assert os.listdir(tmp_path) == []

    # an existing file survives a failed save untouched
    target.write_bytes(b"old")
    with monkeypatch.context() as mp:
        mp.setattr(onnx_emit_mod, "serialize", boom)
        with pytest.raises(RuntimeError):
            save_onnx(model, target)
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.onnx"]
    save_onnx(model, target)
    assert onnx.load(str(target)).SerializeToString() == model.SerializeToString()


def test_netmodule_is_a_plain_module():
    module = to_torch(mixed_net())
    assert isinstance(module, NetModule) and isinstance(module, torch.nn.Module)
    assert module.dtype == torch.float32
    assert module.double().dtype == torch.float64
