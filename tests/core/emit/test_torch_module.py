"""The emitted torch module as a research object (tm2nn.emit.torch_emit): every weight a
named Parameter (frozen unless the construction trains it) whose count is
``Net.info()["params_nonzero"]``, a cached runtime form that sees parameter edits,
forward hooks that fire with batch-major values (inside loop and decoder bodies too),
state dicts that travel, and ``to_net`` writing everything back."""

from __future__ import annotations

import functools
import io
import math

import numpy as np
import pytest
import torch

from tests.conftest import EXAMPLES
from tm2nn.emit.torch_emit import to_torch
from tm2nn.emit.torch_net import NetModule, OpModule
from tm2nn.emit.torch_ops import AffineModule, LoopModule
from tm2nn.emit.torch_seq import AttentionModule, DecodeModule
from tm2nn.nets import Affine, Loop, MemoryGrid, Net, Param, Port, ReLU, Space, SparseMatrix

NETS = ["circuit", "unrolled", "transformer", "rcnn", "gd-trace", "abbe-sandon", "rcnn-learner", "extended"]
B = 3


@functools.lru_cache(maxsize=None)
def case(name: str):
    """``(net, dtype, inputs)`` for one construction (built once per session)."""
    from tm2nn.compiler import compile

    rng = np.random.default_rng(7)
    if name == "circuit":
        net = compile(EXAMPLES / "full_adder.circ", "relu-circuit").net
        return net, torch.float32, (rng.integers(0, 2, (B, len(net.inputs[0].space))).astype(np.float32),)
    if name == "unrolled":
        net = compile(EXAMPLES / "binary_increment.tm", "relu-circuit", steps=10).net
        return net, torch.float32, (rng.integers(0, 2, (B, len(net.inputs[0].space))).astype(np.float32),)
    if name == "transformer":
        net = compile(EXAMPLES / "bb3.tm", "transformer", steps=30).net
        return net, torch.float32, (rng.integers(0, 2, (B, 4)),)
    if name == "rcnn":
        from tm2nn.backends.rcnn.machine_io import start_grids
        from tm2nn.backends.rcnn.machine_mode import machine_form

        c = compile(EXAMPLES / "bb3.tm", "rcnn", steps=25, max_input=2)
        chain, code = machine_form(c.source, c.input_encoding)
        grids = start_grids(chain, code, ["1", "", "11"], tuple(c.input_encoding["window"]))
        return c.net, torch.float32, (np.asarray(grids, dtype=np.float32),)
    if name == "gd-trace":
        net = compile(EXAMPLES / "bb3.tm", "gd-trace", steps=25, max_input=2).net
        return net, torch.float64, (rng.choice([-1.0, 1.0], (B, len(net.inputs[0].space))),)
    if name == "abbe-sandon":
        import tm2nn
        from tm2nn.backends.abbe_sandon.ir_net import build_ir_net

        net = build_ir_net(tm2nn.load(EXAMPLES / "parity8.circ")).net
        return net, torch.float64, (rng.choice([-1.0, 1.0], (B, len(net.inputs[0].space))),)
    if name == "rcnn-learner":
        from tm2nn.backends.rcnn.build import filter_for
        from tm2nn.backends.rcnn.encoding import cell_code
        from tm2nn.backends.rcnn.learner import learner_net
        from tm2nn.backends.rcnn.learner_form import Shape
        from tm2nn.syntax import load

        g = load(EXAMPLES / "learner_match.tm")
        net = learner_net(filter_for(g, cell_code(g)).body, Shape(3, 2, 1), 4, g.name)
        z = np.concatenate([rng.choice([-1.0, 1.0], (B, 2)), np.ones((B, 1))], 1)
        return net, torch.float32, (z,)
    if name == "extended":
        from tm2nn.backends.gd_trace.extended import Extended, sign_sum_layout
        from tm2nn.syntax import load

        net = Extended(load(EXAMPLES / "sign_sum_3x2.tm"), sign_sum_layout(3, 2)).net
        return net, torch.float64, (rng.choice([-1.0, 1.0], (B, len(net.inputs[0].space))),)
    raise KeyError(name)


def run(module: torch.nn.Module, inputs, grad: bool = False) -> tuple[torch.Tensor, ...]:
    xs = [torch.from_numpy(np.asarray(a)) for a in inputs]
    xs = [x if not x.is_floating_point() else x.to(module.dtype) for x in xs]
    with torch.set_grad_enabled(grad):
        y = module(*xs)
    return (y,) if isinstance(y, torch.Tensor) else tuple(y)


def same(a, b) -> bool:
    """Bitwise equal (NaN where NaN: a perturbed filter may overflow over many trips)."""
    return all(x.shape == y.shape and torch.allclose(x, y, rtol=0.0, atol=0.0, equal_nan=True)
               for x, y in zip(a, b))


def trainable(op, name: str) -> bool:
    if isinstance(op, Affine):
        return op.trainable and (name == "weight" or op.train_bias)
    return isinstance(op, Param) or (isinstance(op, MemoryGrid) and op.trainable and name == "weight")


def op_modules(module: NetModule):
    """``(qualified name, module)`` of every op submodule, nested nets included."""
    return [(n, m) for n, m in module.named_modules() if isinstance(m, OpModule)]


def deepest_affine(module: NetModule) -> tuple[str, AffineModule]:
    affs = [(n, m) for n, m in op_modules(module) if isinstance(m, AffineModule) and m.nnz]
    return max(affs, key=lambda nm: nm[0].count("."))


def output_affine(module: NetModule) -> tuple[str, AffineModule]:
    """The last top-level affine (its output reaches the net's), else the deepest one."""
    top = [(n, m) for n, m in module.named_children() if isinstance(m, AffineModule) and m.nnz]
    return top[-1] if top else deepest_affine(module)


# ----------------------------------------------------------------------------- the layout
@pytest.mark.parametrize("name", NETS)
def test_parameters_are_the_info_count_and_named_by_op_and_tensor(name):
    net, dtype, _ = case(name)
    module = to_torch(net, dtype)
    assert sum(p.numel() for p in module.parameters()) == net.info()["params_nonzero"]
    params = dict(module.named_parameters())
    assert set(module.state_dict()) == set(params)  # buffers are structure, not saved
    for qual, mod in op_modules(module):
        for tname in mod.ir_op.tensors():
            p = params[f"{qual}.{tname}" if qual else tname]
            assert p.requires_grad == trainable(mod.ir_op, tname), (qual, tname)
            assert p.dtype == dtype


def test_info_counts_trainable_tensors_in_full():
    net, _, _ = case("rcnn-learner")  # W = 0, trainable: 4 x 3 free parameters
    mem = net.nodes[0]
    assert isinstance(mem, MemoryGrid) and not mem.weight.any()
    sub = Net("m", net.inputs, (mem,), (mem.name,))
    # W's 4 x 3 free entries, plus the frame's 4 x 2 fixed constants (all nonzero)
    assert sub.info()["params_nonzero"] == mem.weight.size + mem.left.size == 12 + 8
    # a trainable sparse weight counts its stored entries, a trainable bias every entry
    w = SparseMatrix.from_entries((3, 4), [(0, 0, 0.5), (2, 1, 2.0)])
    for train_bias, want in ((False, 2 + 1), (True, 2 + 3)):
        op = Affine("a", ("x",), weight=w, bias=np.array([0.0, 1.0, 0.0]), out=Space.named("y", range(3)),
                    trainable=True, train_bias=train_bias)
        n = Net("n", (Port("x", Space.named("x", range(4))),), (op,), ("a",))
        assert n.info()["params_nonzero"] == want
        assert sum(p.numel() for p in to_torch(n).parameters()) == want


def test_packed_layout_and_dense_weight():
    w = SparseMatrix.from_entries((4, 5), [(0, 1, 2.0), (1, 0, -1.0), (1, 4, 0.5), (3, 3, 3.0)])
    op = Affine("lin", ("x",), weight=w, bias=np.array([0.0, 1.5, 0.0, 0.0]), out=Space.named("y", range(4)),
                cite="Lemma 0")
    m = to_torch(Net("n", (Port("x", Space.named("x", range(5))),), (op,), ("lin",)), torch.float64)
    lin = m.op("lin")
    assert lin.weight.tolist() == [2.0, -1.0, 0.5, 3.0] and not lin.weight.requires_grad  # IR order
    assert lin.weight_index.tolist() == [1, 5, 9, 18]  # row * n_in + col
    assert lin.bias.tolist() == [1.5] and lin.bias_index.tolist() == [1]
    assert torch.equal(lin.dense_weight(), torch.from_numpy(w.dense()))
    assert torch.equal(lin.dense_bias(), torch.tensor([0.0, 1.5, 0.0, 0.0], dtype=torch.float64))
    assert "cite='Lemma 0'" in repr(m) and "(lin): AffineModule(5 -> 4, form=dense, nnz=4" in repr(m)


@pytest.mark.parametrize("name", ["unrolled", "rcnn", "transformer"])
def test_dense_weight_of_every_form(name):
    net, dtype, _ = case(name)
    module = to_torch(net, dtype)
    forms = set()
    for _, mod in op_modules(module):
        if isinstance(mod, AffineModule):
            forms.add(mod.form)
            want = torch.from_numpy(mod.ir_op.weight.dense()).to(dtype)
            assert torch.equal(mod.dense_weight(), want), mod.op_name
    assert len(forms) >= 2


def test_print_is_readable_and_cites_the_paper():
    net, dtype, _ = case("transformer")
    module = to_torch(net, dtype)
    text = repr(module)
    assert "Wei, Chen & Ma" in text
    for qual, mod in op_modules(module):
        if mod.cite:
            assert repr(mod.cite) in mod.extra_repr(), qual
    assert max(len(line) for line in text.splitlines()) < 250


# ------------------------------------------------------------------------------ running
@pytest.mark.parametrize("name", NETS)
def test_outputs_match_the_onnx_emitter(name):
    from tm2nn.emit.onnx_model import to_onnx
    from tm2nn.emit.onnx_runtime import run_onnx

    net, _, inputs = case(name)
    got = run(to_torch(net, torch.float32), inputs)  # ONNX runs float32
    want = run_onnx(to_onnx(net), *[np.asarray(a) if np.asarray(a).dtype.kind == "i" else np.asarray(a, np.float32)
                                    for a in inputs])
    want = (want,) if isinstance(want, np.ndarray) else tuple(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-4)


def perturb(module: NetModule) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(1.5).add_(0.125)


@pytest.mark.parametrize("name", NETS)
def test_parameter_edits_are_seen(name):
    """In-place edits, ``.data`` replacement and ``load_state_dict`` all reach the cached
    runtime forms (loop and decoder bodies included)."""
    net, dtype, inputs = case(name)
    module = to_torch(net, dtype)
    y0 = run(module, inputs)
    saved = {n: p.detach().clone() for n, p in module.named_parameters()}
    perturb(module)  # p.mul_ under no_grad
    y1 = run(module, inputs)
    assert not same(y0, y1)
    for n, p in module.named_parameters():  # replace .data
        p.data = saved[n].clone()
    assert same(run(module, inputs), y0)
    other = to_torch(net, dtype)
    perturb(other)
    module.load_state_dict(other.state_dict(), strict=True)
    assert same(run(module, inputs), y1)


@pytest.mark.parametrize("name", NETS)
def test_state_dict_travels_through_torch_load_weights_only(name):
    net, dtype, inputs = case(name)
    m1 = to_torch(net, dtype)
    perturb(m1)
    buf = io.BytesIO()
    torch.save(m1.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    m2 = to_torch(net, dtype)
    m2.load_state_dict(state, strict=True)
    assert same(run(m2, inputs), run(m1, inputs))


@pytest.mark.parametrize("name", NETS)
def test_to_net_writes_every_parameter_back(name):
    net, dtype, inputs = case(name)
    module = to_torch(net, dtype)
    back = module.to_net()
    assert back.info() == net.info()  # unedited: the IR's values (float64) come back
    perturb(module)
    edited = module.to_net()
    assert same(run(to_torch(edited, dtype), inputs), run(module, inputs))
    for o, e in zip(net.all_ops(), edited.all_ops()):  # nested ones too
        assert o.name == e.name
        if any(np.asarray(t.vals if isinstance(t, SparseMatrix) else t).size for t in o.tensors().values()):
            assert e is not o, o.name


def test_edited_module_exports_to_onnx():
    from tm2nn.emit.onnx_model import to_onnx
    from tm2nn.emit.onnx_runtime import run_onnx

    net, dtype, inputs = case("circuit")
    module = to_torch(net, dtype)
    last = [op for op in net.nodes if isinstance(op, Affine)][-1]
    with torch.no_grad():
        module.op(last.name).bias.add_(0.25)
    got = run_onnx(to_onnx(module.to_net()), *inputs)
    np.testing.assert_allclose(got, run(module, inputs)[0].numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", NETS)
def test_gradient_reaches_a_packed_parameter(name):
    net, dtype, inputs = case(name)
    module = to_torch(net, dtype)
    run(module, inputs)  # a cached, non-differentiable form first
    qual, aff = deepest_affine(module)
    p = aff.weight
    p.requires_grad_(True)
    ys = run(module, inputs, grad=True)
    sum(y.sum() for y in ys if y.is_floating_point()).backward()
    assert p.grad is not None and p.grad.shape == p.shape, qual
    # and with grad disabled again the cache serves (values unchanged)
    assert same(run(module, inputs), run(to_torch(net, dtype), inputs))


def test_gradient_of_packed_values_is_exact():
    """y = W x + b summed: d/dW_e = sum_batch x[:, col_e], d/db_e = batch, on packed entries."""
    entries = [(0, 1, 2.0), (1, 0, -1.0), (2, 299, 0.5), (2, 7, 1.0), (150, 3, 1.0)]
    w = SparseMatrix.from_entries((200, 300), entries)
    bias = np.zeros(200)
    bias[1] = 2.0
    op = Affine("lin", ("x",), weight=w, bias=bias, out=Space.named("y", range(200)))
    m = to_torch(Net("n", (Port("x", Space.named("x", range(300))),), (op,), ("lin",)), torch.float64)
    lin = m.op("lin")
    assert lin.form == "ell"
    lin.weight.requires_grad_(True)
    lin.bias.requires_grad_(True)
    x = torch.randn(5, 300, dtype=torch.float64)
    m(x).sum().backward()
    cols = torch.from_numpy(w.cols)
    assert torch.allclose(lin.weight.grad, x[:, cols].sum(0))
    assert lin.bias.grad.tolist() == [5.0]
    assert torch.allclose(lin.dense_weight().detach(), torch.from_numpy(w.dense()))


# -------------------------------------------------------------------------------- hooks
@pytest.mark.parametrize("name", NETS)
def test_forward_hook_sees_batch_major_values_and_replaces_the_output(name):
    net, dtype, inputs = case(name)
    module = to_torch(net, dtype)
    y0 = run(module, inputs)
    qual, aff = output_affine(module)
    seen = []
    shift = [1000.0]

    def hook(mod, args, out):
        seen.append((tuple(args[0].shape), tuple(out.shape)))
        return out + shift[0]

    h = aff.register_forward_hook(hook)
    y1 = run(module, inputs)
    shift[0] = -1000.0
    y2 = run(module, inputs)
    h.remove()
    assert seen, qual
    for shape_in, shape_out in seen:
        assert shape_in[1] == aff.n_in and shape_out[1] == aff.n_out  # [batch, width]
    if "." not in qual:  # a top-level op sees the batch itself
        assert seen[0][1][0] == B
    assert not same(y0, y1) or not same(y0, y2)  # the hook's value replaced the output
    assert same(run(module, inputs), y0)  # the fast path is back


def test_hooks_fire_once_per_trip_and_per_decoder_step():
    net, dtype, inputs = case("rcnn")
    module = to_torch(net, dtype)
    loop = next(m for _, m in op_modules(module) if isinstance(m, LoopModule))
    qual, aff = deepest_affine(module)
    trips, calls = [], []
    h1 = loop.body.register_forward_hook(lambda m, a, o: trips.append(o.shape))
    h2 = aff.register_forward_pre_hook(lambda m, a: calls.append(a[0].shape))
    y = run(module, inputs)
    h1.remove()
    h2.remove()
    assert same(y, run(module, inputs))  # observing changes nothing
    assert 1 <= len(trips) <= loop.trips and len(calls) == len(trips)
    assert trips[0] == inputs[0].shape  # the body maps grids [batch, height, width]

    net, dtype, inputs = case("transformer")
    module = to_torch(net, dtype)
    decode = next(m for _, m in op_modules(module) if isinstance(m, DecodeModule))
    att = next(m for _, m in decode.body.named_modules() if isinstance(m, AttentionModule) and m.is_self)
    shapes = []
    h = att.register_forward_hook(lambda m, a, o: shapes.append(o.shape))
    run(module, inputs)
    h.remove()
    assert len(shapes) == decode.steps and shapes[0][0] == B


def test_global_hooks_and_instance_forwards_are_honoured():
    from torch.nn.modules.module import register_module_forward_hook

    net, dtype, inputs = case("unrolled")
    module = to_torch(net, dtype)
    y0 = run(module, inputs)
    names = []
    h = register_module_forward_hook(lambda m, a, o: names.append(getattr(m, "op_name", None)))
    try:
        assert same(run(module, inputs), y0)
    finally:
        h.remove()
    assert set(names) >= {op.name for op in net.nodes}
    first = module.op(net.nodes[0].name)
    orig = first.forward
    first.forward = lambda x: orig(x) * 0.0  # an instance forward, as tools install
    assert not same(run(module, inputs), y0)
    del first.forward
    assert same(run(module, inputs), y0)


def test_hooks_cannot_see_in_place_overwrites():
    """A value a hook kept is never overwritten by the in-place ReLU of the fast path."""
    w = Space.named("w", range(2))
    net = Net("n", (Port("x", w),), (
        Affine("a", ("x",), weight=SparseMatrix.diagonal([1.0, 1.0]), bias=np.zeros(2), out=w),
        ReLU("r", ("a",)),
    ), ("r",))
    module = to_torch(net)
    kept = []
    module.a.register_forward_hook(lambda m, a, o: kept.append(o))
    with torch.no_grad():
        module(torch.tensor([[-1.0, 2.0]]))
    assert kept[0].tolist() == [[-1.0, 2.0]]


# ------------------------------------------------------------------------------ nnsight
def test_nnsight_reads_and_sets_a_submodule_output():
    nnsight = pytest.importorskip("nnsight")
    net, dtype, inputs = case("unrolled")
    module = to_torch(net, dtype)
    x = torch.from_numpy(inputs[0])
    with torch.no_grad():
        y0 = module(x)
        h0 = module.trace(x)
    name = module.op_attrs[net.nodes[2].name]
    model = nnsight.NNsight(module)
    with torch.no_grad():
        with model.trace(x):
            got = getattr(model, name).output.save()
            y = model.output.save()
    assert torch.equal(got, h0[net.nodes[2].name]) and torch.equal(y, y0)
    with torch.no_grad():
        with model.trace(x):
            getattr(model, name).output[:] = 0.0
            y2 = model.output.save()
    assert not torch.equal(y2, y0)
    # inside a loop body: the first trip's value
    w = Space.named("h", range(2))
    body = Net("b", (Port("h", w),), (Affine("step", ("h",), weight=SparseMatrix.diagonal([2.0, 1.0]),
                                              bias=np.array([0.0, 1.0]), out=w),), ("step",))
    lm = to_torch(Net("n", (Port("x", w),), (Loop("loop", ("x",), body=body, trips=3),), ("loop",)))
    model = nnsight.NNsight(lm)
    with torch.no_grad():
        with model.trace(torch.tensor([[1.0, 0.0]])):
            first = model.loop.body.step.output.save()
            out = model.output.save()
    assert first.tolist() == [[2.0, 1.0]] and out.tolist() == [[8.0, 3.0]]


def test_module_count_is_small_for_a_deep_net():
    """Nested nets count their parameters once (shared between trips)."""
    net, dtype, _ = case("rcnn")
    loop = net.nodes[0]
    assert isinstance(loop, Loop) and loop.trips > 1
    body_params = sum(math.prod(p.shape) for p in to_torch(loop.body, dtype).parameters())
    assert body_params == loop.body.info()["params_nonzero"] == net.info()["params_nonzero"]
