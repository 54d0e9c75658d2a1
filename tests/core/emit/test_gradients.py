"""Gradients to every construction weight (issue 35, point 3).

After a backward pass every parameter tensor that can change the output has a gradient,
except those named in :data:`EXPLAINED`; the gradients agree with finite differences in
float64 (:mod:`tests.core.emit.gradcheck`) on small models of every backend; a softmax
transformer backpropagates through T = 64 steps, checkpointed or not, and a backward pass
that would not fit is refused before it starts.
"""

from __future__ import annotations

import pytest
import torch

import tm2nn
from tests.core.emit.example_modules import (
    as_tuple,
    compiled,
    example_pairs,
    ids,
    one_trip,
    sample_inputs,
)
from tests.core.emit.gradcheck import check_gradients
from tests.core.test_onnx_pins import EXAMPLES
from tm2nn import limits
from tm2nn.emit.torch_emit import to_torch
from tm2nn.emit.torch_net import saved_bytes
from tm2nn.emit.torch_ops import LoopModule
from tm2nn.emit.torch_seq import AttentionModule, DecodeModule
from tm2nn.errors import OptionError

#: (module class, mode, tensor) -> why it gets no gradient.  Nothing else may lack one.
EXPLAINED = {
    (AttentionModule, "hardmax", name): "hard-max attention: the scores (queries, keys, the null key) only "
    "choose the maximum, a step function of them, whose derivative is 0 almost everywhere "
    "(Wei, Chen & Ma, §4.1); autograd gives none"
    for name in ("wq", "bq", "wk", "bk", "null_key")
}


def missing_gradients(module: torch.nn.Module) -> list[str]:
    """The parameter tensors (with entries) whose ``grad`` is None and not explained."""
    out = []
    for path, mod in module.named_modules():
        for name, p in mod.named_parameters(recurse=False):
            if p.numel() and p.grad is None and (type(mod), getattr(mod, "mode", None), name) not in EXPLAINED:
                out.append(f"{path}.{name}")
    return out


def backward(module: torch.nn.Module, xs, seed: int = 0) -> torch.Tensor:
    """Every parameter requires grad; ``Σ r·y`` over the float outputs is backpropagated."""
    for p in module.parameters():
        p.requires_grad_(True)
    gen = torch.Generator().manual_seed(seed)
    ys = [y for y in as_tuple(module(*xs)) if y.is_floating_point()]
    loss = sum((y * torch.randn(y.shape, generator=gen, dtype=y.dtype)).sum() for y in ys)
    loss.backward()
    return loss


@pytest.mark.xdist_group("examples")
@pytest.mark.parametrize(("backend", "path"), example_pairs(), ids=ids())
def test_every_weight_gets_a_gradient(backend, path):
    """(The RCNN's loop runs its one body 35+ times: one trip reaches the same tensors, at a
    thirtieth of the cost; :func:`one_trip`.)"""
    c = compiled(backend, path)
    module = to_torch(one_trip(c.net), torch.float64) if backend == "rcnn" else c.torch(dtype=torch.float64)
    backward(module, sample_inputs(c))
    assert missing_gradients(module) == []


def test_a_cut_gradient_is_found():
    """The mutation: a weight cut off from autograd (its module's output detached) is
    reported, though it still changes the output."""
    c = tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit")
    module = c.torch(dtype=torch.float64)
    first = next(m for m in module.modules() if hasattr(m, "weight") and m.weight.numel())
    fm = first.fm
    first.fm = lambda x: fm(x).detach()
    backward(module, sample_inputs(c))
    assert len(missing_gradients(module)) == 2  # its weight and its bias


def _bb3(**opts):
    return tm2nn.compile(EXAMPLES / "bb3.tm", "transformer", **opts)


def test_softmax_backward_through_64_steps():
    c = _bb3(steps=64, attention="softmax")
    module = c.torch()
    backward(module, sample_inputs(c))
    assert missing_gradients(module) == []
    att = [m for m in module.modules() if isinstance(m, AttentionModule)]
    assert att and all(m.wq.grad is not None and m.wk.grad is not None for m in att if m.wq.numel() and m.wk.numel())


def test_a_checkpointed_decode_gives_the_same_gradients():
    c = _bb3(steps=16, attention="softmax")
    xs = sample_inputs(c)
    grads = []
    for ckpt in (False, True):
        module = c.torch(dtype=torch.float64)
        for m in module.modules():
            if isinstance(m, DecodeModule):
                m.checkpoint = ckpt
        backward(module, xs)
        grads.append({n: p.grad for n, p in module.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0])


def test_a_backward_pass_that_does_not_fit_is_refused_after_three_steps():
    """The decode measures steps 2 and 3's saved tensors, extrapolates to T = 64 (O(T²))
    and refuses before the fourth; the estimate is within 2x of what autograd keeps;
    checkpointed, the same limit is enough."""
    c = _bb3(steps=64, attention="softmax")
    module = c.torch()
    dec = next(m for m in module.modules() if isinstance(m, DecodeModule))
    for p in module.parameters():
        p.requires_grad_(True)
    x = sample_inputs(c)[0].expand(8, -1)
    _, kept = saved_bytes(lambda: module(x))
    asked = []
    dec._refuse_backward = lambda i, a, b, batch, f=dec._refuse_backward: (asked.append((a, b)), f(i, a, b, batch))
    limits.set_memory_limit(kept * 2)
    try:
        module(x)
        k2, k3 = asked[0]
        b = k3 - k2
        estimate = 64 * (k2 - 2 * b) + b * 64 * 65 // 2
        assert kept / 2 < estimate < kept * 2
        limits.set_memory_limit(kept // 4)
        steps = []
        dec.progress = lambda i, n: steps.append(i)
        with pytest.raises(OptionError, match="backward pass through 64 decoder steps of 8 input"):
            module(x)
        assert steps == [1, 2]  # refused within the third of 64 steps
        assert dec.checkpointed_bytes(8) < kept // 4
        dec.checkpoint = True
        module(x).sum().backward()
        with torch.no_grad():  # no gradient: no refusal
            module(x)
    finally:
        limits.set_memory_limit(None)


# -- finite differences, one small model per backend ---------------------------------------
#: name -> (example, backend, options, check_gradients' settings).  The RCNN runs one trip
#: (:func:`one_trip`): over the full loop the weights' perturbation grows through 35 trips to
#: values whose finite differences float64 cannot resolve.  The RCNN's filter has
#: weights in the hundreds: a smaller move (1e-4) and step keep its values where float64's
#: differences resolve them, yet far enough from every kink.
FD_CASES = {
    "relu-circuit:full_adder": (EXAMPLES / "full_adder.circ", "relu-circuit", {}, {}),
    "relu-circuit:bb3": (EXAMPLES / "bb3.tm", "relu-circuit", {"steps": 4}, {}),
    "transformer:hardmax": (EXAMPLES / "bb3.tm", "transformer", {"steps": 6}, {}),
    "transformer:softmax": (EXAMPLES / "bb3.tm", "transformer", {"steps": 6, "attention": "softmax"}, {}),
    "rcnn:bb3 one trip": (EXAMPLES / "bb3.tm", "rcnn", {"steps": 4}, {"noise": 1e-4, "eps": 1e-7}),
    "abbe-sandon:majority7": (EXAMPLES / "majority7.circ", "abbe-sandon", {"engine": "float64"}, {}),
    "gd-trace:bb3": (EXAMPLES / "bb3.tm", "gd-trace", {"steps": 4}, {}),
}


@pytest.mark.parametrize("case", list(FD_CASES))
def test_gradients_match_finite_differences(case):
    path, backend, opts, settings = FD_CASES[case]
    c = tm2nn.compile(path, backend, **opts)
    module = to_torch(one_trip(c.net), torch.float64) if backend == "rcnn" else c.torch(dtype=torch.float64)
    rep = check_gradients(module, sample_inputs(c), **settings)
    assert rep["checked"] > len(list(module.parameters())) // 2


def test_a_wrong_gradient_fails_the_check():
    """The mutation: a backward hook doubles one weight's gradient (the output layer's)."""
    c = tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit")
    module = c.torch(dtype=torch.float64)
    p = [p for p in module.parameters() if p.numel()][-2]
    p.requires_grad_(True)
    p.register_hook(lambda g: 2 * g)
    with pytest.raises(AssertionError, match="finite difference"):
        check_gradients(module, sample_inputs(c))


def test_a_loop_backward_that_does_not_fit_is_refused_after_one_trip():
    """A loop whose every trip autograd keeps measures the first trip's saved tensors and
    refuses the whole before the second; within the limit, it runs."""
    c = tm2nn.compile(EXAMPLES / "bb3.tm", "rcnn", steps=4)
    module = c.torch(dtype=torch.float64)
    for p in module.parameters():
        p.requires_grad_(True)
    loop = next(m for m in module.modules() if isinstance(m, LoopModule))
    seen = []
    loop.progress = lambda i, n: seen.append(i)
    limits.set_memory_limit(64 << 10)
    try:
        with pytest.raises(OptionError, match=f"backward pass through {loop.trips} trips of loop 'states'"):
            module(*sample_inputs(c))
        assert seen == []  # refused within the first trip
    finally:
        limits.set_memory_limit(None)
    module(*sample_inputs(c)).sum().backward()
    assert seen[-1] == loop.trips
