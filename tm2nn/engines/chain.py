"""A network read as one chain of layers, for the fused engines: one vector input, then
affine maps each reading the one before, each optionally followed by a ReLU, then
optionally a slice of the last (the outputs).  relu-circuit's layered ReLU nets are such
chains (Wei, Chen & Ma, Lemma 3.2 / B.1 with the Prop. 3.4 corrections; its engine,
:mod:`tm2nn.backends.relu_circuit.layered_engine`), and so is the RCNN filter (five affine
maps; rcnn's grid engine).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.engines import EngineRefused
from tm2nn.nets import Affine, Net, ReLU, Slice


@dataclass(frozen=True)
class Layer:
    """One affine map ``W x + b`` (CSR rows, entries by increasing column), then the ReLU
    when ``relu``."""

    ptr: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    bias: np.ndarray
    relu: bool
    name: str

    @property
    def n_out(self) -> int:
        return self.bias.size


def layer_of(w, bias, relu: bool, name: str) -> Layer:
    """A sparse matrix ``w`` (``rows``, ``cols``, ``vals``, ``shape``) and its bias as a
    :class:`Layer` (CSR rows, entries by increasing column)."""
    order = np.lexsort((w.cols, w.rows))
    rows, cols, vals = w.rows[order], w.cols[order], w.vals[order]
    ptr = np.zeros(w.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=w.shape[0]), out=ptr[1:])
    return Layer(ptr, cols.astype(np.int64), vals.astype(np.float64), np.asarray(bias, dtype=np.float64), relu, name)


def layers(net: Net) -> tuple[int, list[Layer], np.ndarray]:
    """``(input width, layers, output indices)`` of a chain of layers (module doc); any
    other net is an :class:`EngineRefused`."""
    if len(net.inputs) != 1 or len(net.outputs) != 1 or net.inputs[0].kind != "vector":
        raise EngineRefused(f"net {net.name!r}: the fused engine runs nets of one vector input and output")
    cur, width = net.inputs[0].name, len(net.inputs[0].space)
    out: list[Layer] = []
    indices = None
    for op in net.nodes:
        if indices is not None or op.inputs != (cur,):
            raise EngineRefused(f"net {net.name!r}: {op.kind} {op.name!r} does not extend one chain of layers")
        if isinstance(op, Affine):
            out.append(layer_of(op.weight, op.bias, False, op.name))
            width = op.weight.shape[0]
        elif isinstance(op, ReLU) and out and not out[-1].relu and cur == out[-1].name:
            last = out[-1]
            out[-1] = Layer(last.ptr, last.cols, last.vals, last.bias, True, last.name)
        elif isinstance(op, Slice):
            indices = np.asarray(op.indices, dtype=np.int64)
        else:
            raise EngineRefused(f"net {net.name!r}: the fused engine runs affine maps, ReLUs and a final "
                                f"slice, not {op.kind} {op.name!r}")
        cur = op.name
    if indices is None:
        indices = np.arange(width, dtype=np.int64)
    if net.outputs[0] != cur:
        raise EngineRefused(f"net {net.name!r}: its output is not the last op")
    return len(net.inputs[0].space), out, indices
