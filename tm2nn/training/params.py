"""A construction's net in its trainable form and back (issue 38): the same ops, shapes and
labels, with its affine maps' entries free parameters.

``mask="all"`` makes every entry of every affine weight (and its bias) a parameter, the
zeros of the sparse construction included: the dense class of the paper's function class
(Wei-Chen-Ma's F_{w,d,α}).  ``mask="wiring"`` trains the construction's stored entries only
(:class:`~tm2nn.nets.Affine` with ``trainable=True`` keeps a sparse weight's pattern).  The
other tensors of a net (attention matrices, an embedding's table, a decoder's initial
input) are packed by their torch modules to their nonzero entries, which is what trains of
them under either mask.  :func:`frozen` writes the trained values back in the
construction's op form, so the net saves and loads as a model of the construction's shape
(:func:`tm2nn.modelfile.schema.net_edit`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tm2nn.nets import Affine, Net, SparseMatrix


def _map(net: Net, fn) -> Net:
    nodes = []
    for op in net.nodes:
        nested = {f.name: _map(getattr(op, f.name), fn) for f in dataclasses.fields(op)
                  if isinstance(getattr(op, f.name), Net)}
        if nested:
            op = dataclasses.replace(op, **nested)
        nodes.append(fn(op))
    return Net(net.name, net.inputs, tuple(nodes), net.outputs, dict(net.metadata))


def _full(dense: np.ndarray) -> SparseMatrix:
    """Every entry stored, zeros included (a trainable weight's free entries)."""
    rows, cols = np.indices(dense.shape).reshape(2, -1)
    return SparseMatrix(dense.shape, rows, cols, dense[rows, cols])


def trainable(net: Net, mask: str) -> Net:
    """Every affine op of ``net`` (nested nets included) made trainable (module doc)."""
    def fn(op):
        if not isinstance(op, Affine):
            return op
        w = op.weight if mask == "wiring" else _full(op.weight.dense())
        return dataclasses.replace(op, weight=w, trainable=True, train_bias=True)
    return _map(net, fn)


def frozen(trained: Net, construction: Net) -> Net:
    """``trained`` (a :func:`trainable` net's ``to_net()``) in ``construction``'s op form:
    every affine op fixed again, its weight stored as its nonzero entries."""
    flags = {}

    def note(op):
        if isinstance(op, Affine):
            flags[op.name] = (op.trainable, op.train_bias)
        return op
    _map(construction, note)

    def fn(op):
        if not isinstance(op, Affine) or op.name not in flags:
            return op
        t, tb = flags[op.name]
        return dataclasses.replace(op, weight=SparseMatrix.from_dense(op.weight.dense()), trainable=t, train_bias=tb)
    return _map(trained, fn)


def outside_wiring(trained: Net, construction: Net) -> int:
    """How many nonzero weight entries of ``trained`` lie where ``construction`` stores none
    (a ``.pt`` holds the construction's stored entries only: docs/learning.md)."""
    pattern = {}

    def note(op):
        if isinstance(op, Affine):
            w = op.weight
            pattern[op.name] = set(zip(w.rows[w.vals != 0].tolist(), w.cols[w.vals != 0].tolist()))
        return op
    _map(construction, note)
    count = [0]

    def look(op):
        if isinstance(op, Affine) and op.name in pattern:
            w = op.weight
            nz = w.vals != 0
            count[0] += sum(1 for rc in zip(w.rows[nz].tolist(), w.cols[nz].tolist()) if rc not in pattern[op.name])
        return op
    _map(trained, look)
    return count[0]
