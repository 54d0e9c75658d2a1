"""Every module moves whole (issue 35, point 2): no tensor outside the Parameters and
buffers, and every example runs after ``.to(torch.float64)`` (exactly as a module built
in float64) and after a move to the ``meta`` device (shapes), so a mix of devices or
dtypes fails here, on the CPU, before it fails on a GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.core.emit.example_modules import (
    as_tuple,
    compiled,
    example_pairs,
    ids,
    one_trip,
    sample_inputs,
)
from tests.core.test_onnx_pins import EXAMPLES
from tm2nn.emit.torch_emit import module_device, run_torch, to_torch
from tm2nn.emit.torch_net import hidden_tensors
from tm2nn.nets import Affine, Net, Port, ReLU, Space, SparseMatrix


@pytest.mark.xdist_group("examples")
@pytest.mark.parametrize(("backend", "path"), example_pairs(), ids=ids())
def test_every_tensor_moves(backend, path):
    """(The RCNN's loop runs its one body 35+ times: the modules run here take one trip,
    the same modules and tensors at a thirtieth of the cost; :func:`one_trip`.)"""
    compiled = _compiled(backend, path)
    module = compiled.torch()
    assert hidden_tensors(module) == []
    if backend == "rcnn":
        compiled = dataclasses.replace(compiled, net=one_trip(compiled.net))
        module = compiled.torch()
    xs = sample_inputs(compiled)
    y32 = as_tuple(module(*xs))

    # .double() on a float32 module gives the float64 module's weights and outputs exactly
    doubled = compiled.torch().double()
    built = compiled.torch(dtype=torch.float64)
    for (n, p), (m, q) in zip(doubled.named_parameters(), built.named_parameters()):
        assert n == m and p.dtype == torch.float64 and torch.equal(p, q), n
    for y, z in zip(as_tuple(doubled(*xs)), as_tuple(built(*xs))):
        assert torch.equal(y, z)

    # meta: every tensor moves, and the forward pass runs on shapes alone
    meta = compiled.torch().to("meta")
    assert all(t.is_meta for t in (*meta.parameters(), *meta.buffers()))
    ym = as_tuple(meta(*(x.to("meta") for x in xs)))
    assert [y.shape for y in ym] == [y.shape for y in y32]
    assert all(y.is_meta for y in ym)


def _compiled(backend, path):
    c = compiled(backend, path)
    if c is None:
        pytest.fail(f"{backend} compiled {path.name} when the pins were made, and refuses it now")
    return c


def _planted(module: torch.nn.Module) -> None:
    """A mutation: an op module keeps a plain tensor attribute (as the decoder's history
    columns once were), which ``.to()`` leaves behind."""
    op = next(m for m in module.modules() if hasattr(m, "ir_op"))
    op.lookup = torch.arange(3)


def test_the_walk_finds_a_planted_tensor():
    compiled = _compiled(*example_pairs()[0])
    module = compiled.torch()
    _planted(module)
    found = hidden_tensors(module)
    assert len(found) == 1 and found[0].endswith(".lookup")
    module = compiled.torch()
    next(m for m in module.modules() if hasattr(m, "ir_op")).tables = {"cols": [torch.zeros(2)]}
    assert [f.rsplit(".", 1)[1] for f in hidden_tensors(module)] == ["tables['cols'][0]"]


def _net() -> Net:
    w = SparseMatrix.from_dense([[0.1, 0.0, 1 / 3], [0.0, 2.0, 0.0]])
    a = Affine("a", ("x",), weight=w, bias=np.array([0.7, -1 / 7]), out=Space.named("y", range(2)))
    return Net("n", (Port("x", Space.named("x", range(3))),), (a, ReLU("r", ("a",))), ("r",))


def test_double_and_half_round_the_construction_once():
    """``.double()`` restores the float64 values (not float32-rounded ones); a trained
    or edited entry keeps its cast value; ``.half()`` rounds the float64 value."""
    m = to_torch(_net())
    with torch.no_grad():
        m.op("a").bias[1] = 0.25  # an edit
    m = m.double()
    w = m.op("a").weight
    assert w.dtype == torch.float64 and w[0].item() == 0.1 and w[1].item() == 1 / 3
    assert m.op("a").bias.tolist() == [0.7, 0.25]
    h = to_torch(_net(), torch.float64).half()
    assert h.op("a").weight[1].item() == torch.tensor(1 / 3, dtype=torch.float16).item()
    assert h.dtype == torch.float16


def test_a_move_rebuilds_the_cached_form():
    m = to_torch(_net())
    x = torch.tensor([[1.0, 2.0, 3.0]])
    y = m(x)
    m = m.to(torch.float64)
    assert m(x).dtype == torch.float64
    assert torch.allclose(m(x).float(), y)
    m = m.to("meta")
    assert m(x.to("meta")).is_meta


def test_inputs_come_to_the_module():
    """numpy arrays and CPU tensors are moved to the module's device and dtype."""
    m = to_torch(_net(), torch.float64)
    y = m(torch.tensor([[1, 0, 1]], dtype=torch.float32))
    assert y.dtype == torch.float64
    assert module_device(to_torch(_net()).to("meta")).type == "meta"
    assert run_torch(m, np.array([[1.0, 0.0, 1.0]])).tolist() == [[0.1 + 1 / 3 + 0.7, 0.0]]


def test_to_torch_builds_on_the_device():
    m = to_torch(_net(), torch.float64, device="meta")
    assert all(t.is_meta for t in (*m.parameters(), *m.buffers()))


@pytest.mark.parametrize("grad", [False, True])
def test_the_batched_ell_gather_computes_the_same_function(grad):
    """The GPU's gather (one gather of every ELL slot) against the CPU's loop, forced on
    the CPU: the same products (sums in another order), the same decoded outputs, and the
    same gradients."""
    c = compiled("relu-circuit", EXAMPLES / "ripple_adder4.circ")
    thr = c.output_encoding.get("threshold", 0.5)
    x = torch.from_numpy(np.random.default_rng(0).integers(0, 2, (64, len(c.input_encoding["names"])))).float()
    outs, grads = [], []
    for gather in ("loop", "batched"):
        m = c.torch(dtype=torch.float64)
        ell = [mod for mod in m.modules() if getattr(mod, "form", None) == "ell" and mod.k > 1]
        assert ell, "the example has no ELL weight with several slots"
        for mod in ell:
            mod.gather = gather
        for p in m.parameters():
            p.requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            y = m(x)
        if grad:
            y.sum().backward()
            grads.append([p.grad for p in m.parameters()])
        outs.append(y.detach())
    assert torch.allclose(outs[0], outs[1], atol=1e-12)
    assert torch.equal(outs[0] > thr, outs[1] > thr)
    for g, h in zip(*grads):
        assert (g is None) == (h is None) and (g is None or torch.allclose(g, h, atol=1e-12))


def test_a_dtype_in_the_device_place_is_a_clear_error():
    compiled = _compiled(*example_pairs()[0])
    with pytest.raises(TypeError, match="pass dtype=torch.float64"):
        compiled.torch(torch.float64)
