"""NetIR -> ``torch.nn.Module``: :func:`to_torch`, and running a module on numpy arrays
(:func:`run_torch`, in batches) with progress reports (:func:`loop_progress`).

The module is a :class:`~tm2nn.emit.torch_net.NetModule` (its layout, Parameters, caches
and hooks are described there) with one submodule per op, from the torch emitter's table
(:data:`~tm2nn.emit.torch_net.TORCH_MODULES`), which the op modules imported here fill:
:mod:`tm2nn.emit.torch_ops` (vector ops), :mod:`tm2nn.emit.torch_seq` (attention, embedding,
decoder), :mod:`tm2nn.emit.torch_grid` (grid ops) and :mod:`tm2nn.emit.torch_readout`
(readouts).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn

from tm2nn.emit import torch_grid, torch_readout  # noqa: F401 - their classes fill the table too
from tm2nn.emit.torch_net import NetModule
from tm2nn.emit.torch_ops import LoopModule
from tm2nn.emit.torch_seq import DecodeModule
from tm2nn.nets import Net


def to_torch(net: Net, dtype: torch.dtype = torch.float32, device=None) -> NetModule:
    """Emit ``net`` as a :class:`NetModule` whose weights have ``dtype`` (computed from the
    IR's float64 values, so exact in ``dtype``), on ``device`` (default: the CPU)."""
    module = NetModule(net, dtype)
    return module if device is None else module.to(device)


def _module_dtype(module: nn.Module) -> torch.dtype:
    if isinstance(module, NetModule):
        return module.dtype
    for t in (*module.parameters(), *module.buffers()):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def module_device(module: nn.Module) -> torch.device:
    """The device of a module's tensors (the CPU for a module without any)."""
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


@contextlib.contextmanager
def loop_progress(module: nn.Module, progress):
    """Within the block, every loop and decoder of ``module`` calls ``progress(i, total)``
    about 100 times per run (for progress bars); nothing when ``progress`` is None."""
    loops = ([m for m in module.modules() if isinstance(m, (LoopModule, DecodeModule))]
             if progress and module is not None else [])
    for m in loops:
        m.progress = progress
    try:
        yield
    finally:
        for m in loops:
            m.progress = None


def run_torch(net_or_module: Net | nn.Module, *arrays, batch_size: int = 4096):
    """Run numpy ``[n, width]`` arrays through the module (emitted in float32 if given a
    Net) under ``no_grad``, ``batch_size`` rows at a time, on the module's device (the
    batches are moved there and the outputs back).  Returns a numpy array, or a tuple of
    them when the net has several outputs."""
    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    module = to_torch(net_or_module) if isinstance(net_or_module, Net) else net_or_module
    dtype = _module_dtype(module)
    device = module_device(module)
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    arrs = [np.asarray(a) for a in arrays]
    lengths = {a.shape[0] if a.ndim else -1 for a in arrs}
    if len(lengths) > 1 or -1 in lengths:
        raise ValueError(f"input arrays must be [n, width] with one n, got shapes {[a.shape for a in arrs]}")
    n = lengths.pop() if lengths else 0
    chunks: list[list[np.ndarray]] = []
    with torch.no_grad():
        for s in range(0, max(n, 1), batch_size):
            xs = [torch.from_numpy(np.ascontiguousarray(a[s:s + batch_size], dtype=np_dtype)).to(device)
                  for a in arrs]
            y = module(*xs)
            ys = (y,) if isinstance(y, torch.Tensor) else tuple(y)
            chunks.append([t.detach().cpu().numpy() for t in ys])
    outs = [c[0] if len(chunks) == 1 else np.concatenate(c) for c in zip(*chunks)]
    return outs[0] if len(outs) == 1 else tuple(outs)
