"""The grid ops (PatchMap, MemoryGrid, GridReadout, Loop over grids with scan) in the
torch and ONNX emitters, against a numpy reference that reads the ops' docstrings
directly (explicit loops over cells and patches, float64, no code shared with either
emitter)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.emit.test_emit import np_eval
from tm2nn.emit.onnx_model import to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.emit.torch_emit import to_torch
from tm2nn.nets import (
    Affine,
    GridReadout,
    Loop,
    MemoryGrid,
    Net,
    NetIRError,
    PatchMap,
    Port,
    ReLU,
    Space,
    SparseMatrix,
    patch_space,
)

CELL = Space(("cell:v",))


def mat(rng, n_out, n_in, scale=1.0):
    return SparseMatrix.from_dense(rng.integers(-1, 2, (n_out, n_in)).astype(float) * scale)


def filter_net(rng, hidden: int = 6) -> Net:
    h = Space.named("h", range(hidden))
    return Net("filter", (Port("p", patch_space()),), (
        Affine("a", ("p",), weight=mat(rng, hidden, 9), bias=rng.integers(-1, 2, hidden).astype(float), out=h),
        ReLU("r", ("a",)),
        Affine("b", ("r",), weight=mat(rng, 1, hidden, 0.5), bias=rng.integers(-1, 2, 1) * 0.25, out=CELL),
    ), ("b",))


def head_net() -> Net:
    y = Space(("y",))
    return Net("head", (Port("c", CELL),), (
        Affine("u", ("c",), weight=SparseMatrix.from_dense(np.array([[2.0]])), bias=np.array([-0.5]), out=y),
        ReLU("ur", ("u",)),
    ), ("ur",))


def rcnn_net(rng, d_mem=3, d_in=4, ones=2, trips=3, pad=1 / 6, column=3, frame=0) -> Net:
    step = Net("step", (Port("g", CELL, kind="grid"),), (PatchMap("f", ("g",), body=filter_net(rng), pad=pad),), ("f",))
    left = rng.integers(-1, 2, (d_mem, frame)).astype(float) / 3 if frame else None
    return Net("rcnn", (Port("z", Space.named("z", range(d_in))),), (
        MemoryGrid("mem", ("z",), weight=rng.integers(-1, 2, (d_mem, d_in)).astype(float), ones=ones, out=CELL,
                   left=left),
        Loop("states", ("mem",), body=step, trips=trips, scan=True),
        Loop("last", ("mem",), body=step, trips=trips),
        GridReadout("col", ("last",), body=head_net(), column=column),
        GridReadout("all", ("last",), body=head_net()),
        GridReadout("left", ("last",), body=head_net(), width=2, start=frame),
    ), ("states", "col", "all", "left"))


# -- the reference ------------------------------------------------------------------------
def ref_filter(body: Net, patch: np.ndarray) -> float:
    return float(np_eval(body, patch[None])[body.outputs[0]][0, 0])


def ref_step(op: PatchMap, g: np.ndarray) -> np.ndarray:
    b, h, w = g.shape
    out = np.zeros_like(g)
    for n in range(b):
        for i in range(h):
            for j in range(w):
                patch = [g[n, i + di, j + dj] if 0 <= i + di < h and 0 <= j + dj < w else op.pad
                         for di in (-1, 0, 1) for dj in (-1, 0, 1)]
                out[n, i, j] = ref_filter(op.body, np.array(patch))
    return out


def ref_rcnn(net: Net, z: np.ndarray) -> list[np.ndarray]:
    mem = net.node("mem")
    d_mem, d_in = mem.weight.shape
    f = mem.frame
    g = np.ones((z.shape[0], d_mem, f + d_in + mem.ones))
    for n in range(z.shape[0]):
        for a in range(d_mem):
            for c in range(f):
                g[n, a, c] = mem.left[a, c]
            for b in range(d_in):
                g[n, a, f + b] = mem.weight[a, b] * z[n, b]
    loop = net.node("states")
    states = [g]
    for _ in range(loop.trips):
        states.append(ref_step(loop.body.nodes[0], states[-1]))
    last = states[-1]
    head = net.node("col").body
    col = np.array([[sum(ref_filter(head, np.array([last[n, a, 3]])) for a in range(d_mem))] for n in range(len(z))])
    every = np.array([[sum(ref_filter(head, np.array([v])) for v in last[n].ravel())] for n in range(len(z))])
    left = np.array([[sum(ref_filter(head, np.array([v])) for v in last[n, :, f:f + 2].ravel())] for n in range(len(z))])
    return [np.stack(states, 1), col, every, left]


def run_torch(net, *xs):
    with torch.no_grad():
        ys = to_torch(net)(*[torch.from_numpy(np.asarray(x, np.float32)) for x in xs])
    return [y.numpy() for y in (ys if isinstance(ys, tuple) else (ys,))]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), d_mem=st.integers(1, 4), d_in=st.integers(4, 5), ones=st.integers(0, 3),
       trips=st.integers(0, 3), pad=st.sampled_from([0.0, 1 / 6, -2.0]), frame=st.integers(0, 2))
def test_rcnn_ops_match_numpy_in_torch_and_onnx(seed, d_mem, d_in, ones, trips, pad, frame):
    """The grid ops against a plain numpy reference, in torch and ONNX, with and without
    the learner's frame (MemoryGrid.left) and a readout starting right of it."""
    rng = np.random.default_rng(seed)
    net = rcnn_net(rng, d_mem, d_in, ones, trips, pad, frame=frame)
    z = rng.integers(-1, 2, (3, d_in)).astype(float)
    want = ref_rcnn(net, z)
    model = to_onnx(net)
    onnx.checker.check_model(model, full_check=True)
    for got in (run_torch(net, z), list(run_onnx(model, z))):
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


def test_a_grid_input_and_the_model_does_not_grow_with_trips():
    rng = np.random.default_rng(3)
    body = filter_net(rng)

    def net(trips):
        step = Net("step", (Port("g", CELL, kind="grid"),), (PatchMap("f", ("g",), body=body, pad=0.5),), ("f",))
        return Net("n", (Port("grid", CELL, kind="grid"),), (Loop("run", ("grid",), body=step, trips=trips),), ("run",))
    small, big = to_onnx(net(2)), to_onnx(net(500))
    assert abs(len(small.SerializeToString()) - len(big.SerializeToString())) <= 2
    g = rng.integers(-1, 2, (2, 4, 7)).astype(float)
    want = g
    for _ in range(2):
        want = ref_step(net(2).node("run").body.nodes[0], want)
    np.testing.assert_allclose(run_onnx(small, g), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run_torch(net(2), g)[0], want, rtol=1e-5, atol=1e-5)


def test_the_memory_layer_is_trainable():
    rng = np.random.default_rng(5)
    net = rcnn_net(rng, trips=1)
    mod = to_torch(net)
    params = {n: p for n, p in mod.named_parameters() if p.requires_grad}
    assert list(params) == ["mem.weight"]
    z = torch.ones(1, 4)
    _states, col, _all, _left = mod(z)
    col.sum().backward()
    assert params["mem.weight"].grad is not None and params["mem.weight"].grad.shape == (3, 4)
    assert not any(b.requires_grad for b in mod.buffers())


def test_zero_trip_loop_output_is_not_overwritten_in_place():
    """A loop of 0 trips returns its input; a later in-place ReLU of that input must not
    change the loop's value."""
    w = Space.named("w", range(2))
    ident = Net("id", (Port("x", w),), (Affine("a", ("x",), weight=SparseMatrix.diagonal([1.0, 1.0]), bias=np.zeros(2), out=w),), ("a",))
    net = Net("n", (Port("x", w),), (
        Affine("pre", ("x",), weight=SparseMatrix.diagonal([1.0, 1.0]), bias=np.zeros(2), out=w),
        Loop("loop", ("pre",), body=ident, trips=0),
        ReLU("r", ("pre",)),
        Affine("sum", ("loop", ), weight=SparseMatrix.diagonal([1.0, 1.0]), bias=np.zeros(2), out=w),
    ), ("sum", "r"))
    x = np.array([[-1.0, 2.0]])
    got = run_torch(net, x)
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], [[0.0, 2.0]])


def test_malformed_grid_ops_are_refused():
    rng = np.random.default_rng(0)
    wide = Space(("a", "b"))
    with pytest.raises(NetIRError, match="one number per cell"):
        Net("n", (Port("g", wide, kind="grid"),), (PatchMap("f", ("g",), body=filter_net(rng)),), ("f",))
    with pytest.raises(NetIRError, match="expects"):
        Net("n", (Port("g", CELL),), (PatchMap("f", ("g",), body=filter_net(rng)),), ("f",))
    with pytest.raises(NetIRError, match="not both"):
        Net("n", (Port("g", CELL, kind="grid"),), (GridReadout("r", ("g",), body=head_net(), column=0, width=1),), ("r",))
    with pytest.raises(NetIRError, match="W must be"):
        Net("n", (Port("z", Space.named("z", range(3))),),
            (MemoryGrid("m", ("z",), weight=np.zeros((2, 4)), out=CELL),), ("m",))


@pytest.mark.parametrize("scan", [True, False])
def test_loop_until_fixed_gives_the_same_value_with_fewer_trips(scan, monkeypatch):
    """``Loop.until_fixed``: the same value as running every trip (the scan completed
    with copies of the fixed point), in torch and ONNX; torch stops early."""
    # y = relu(centre - 1): every cell reaches 0 after at most max(x) trips, then stays.
    body = Net("dec", (Port("p", patch_space()),), (
        Affine("a", ("p",), weight=SparseMatrix.from_entries((1, 9), [(0, 4, 1.0)]), bias=np.array([-1.0]),
               out=CELL),
        ReLU("r", ("a",)),
    ), ("r",))
    step = Net("step", (Port("g", CELL, kind="grid"),), (PatchMap("f", ("g",), body=body, pad=0.0),), ("f",))

    def net(until):
        return Net("n", (Port("grid", CELL, kind="grid"),),
                   (Loop("run", ("grid",), body=step, trips=30, scan=scan, until_fixed=until),), ("run",))
    g = np.array([[[3, 0, 1], [2, 5, 0]], [[1, 1, 0], [0, 0, 2]]], dtype=float)
    want = run_torch(net(False), g)[0]
    module = to_torch(net(True))
    calls = []
    inner = module.run.body
    orig = inner._run_fm
    monkeypatch.setattr(inner, "_run_fm", lambda xs: calls.append(1) or orig(xs))
    with torch.no_grad():
        got = module(torch.from_numpy(g.astype(np.float32))).numpy()
    np.testing.assert_array_equal(got, want)
    assert len(calls) == 6  # 5 trips to reach 0 everywhere, 1 to see it is fixed
    np.testing.assert_array_equal(run_onnx(to_onnx(net(True)), g), want)
    assert want.shape == ((2, 31, 2, 3) if scan else (2, 2, 3))
    if scan:
        np.testing.assert_array_equal(want[:, 5], np.zeros((2, 2, 3)))
        np.testing.assert_array_equal(want[:, 4], (g == 5).astype(float)[:, :, :])
