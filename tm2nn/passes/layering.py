"""Layering: put a circuit into the strictly layered form Wei, Chen & Ma §3 assume.

Layer 0 is the inputs.  A gate sits at layer ``1 + max(layer of its inputs)``
(constants, which read nothing, at layer 1).  Every edge that skips layers is
replaced by a chain of identity (BUF) gates, and every output is carried to the
last layer, so each gate of layer i+1 reads only signals of layer i and the
outputs are exactly (a subset of) the last layer.

Carried copies are named ``<signal>@<layer>``; the name cannot clash with a real
signal because the pass checks, and appends more ``@`` if it would.

Layer ``k`` lists its own gates first (in the circuit's topological order), then the
copies it carries (in the order of the signals: the inputs, then the gates in
topological order).  Gates that no output depends on are dropped.

**How.**  The pass works on signal numbers (the inputs, then the gates in topological
order).  :func:`tm2nn.ir.levels.layering` finds each signal's level and how far it must
be carried, in one pass over the gates and a few numpy passes, and counts the layers
without building them; :func:`tm2nn.ir.levels.layer_widths` (the memory estimate of the
relu-circuit backend, before anything is built) and :func:`layer_circuit` share it.  A
:class:`LayeredCircuit` keeps each layer as arrays (:class:`Layer`: the unit names,
the op of each unit and the positions it reads in the layer before), which is what
the relu-circuit backend builds its matrices from; :attr:`LayeredCircuit.layers` gives
the same layers as :class:`~tm2nn.ir.circuit.Gate` tuples, built on first use.
Everything is linear in the gates plus the carried copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tm2nn.ir.circuit import Circuit, Gate
from tm2nn.ir.levels import BUF, Layering, csr_rows, layering


@dataclass(frozen=True, eq=False)
class Layer:
    """One layer of a :class:`LayeredCircuit` as arrays.  Unit ``j`` drives signal
    ``names[j]``, computes op ``OPS[ops[j]]`` and reads positions ``cols[ptr[j]:ptr[j + 1]]``
    of the layer before (in order).  The first ``len(gates)`` units are the layer's own
    gates (``gates``: those of the source circuit), the rest are identity (BUF) copies."""

    names: list[str]
    gates: list[Gate]
    ops: np.ndarray  # int8
    ptr: np.ndarray  # int64, len(names) + 1
    cols: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.names)

    @property
    def fan(self) -> np.ndarray:
        return np.diff(self.ptr)

    def to_gates(self, prev: list[str]) -> tuple[Gate, ...]:
        """The units as gates, reading the names ``prev`` of the layer before."""
        ptr, cols = self.ptr.tolist(), self.cols.tolist()
        out = [Gate(g.name, g.op, tuple([prev[c] for c in cols[ptr[j]:ptr[j + 1]]]), g.loc)
               for j, g in enumerate(self.gates)]
        out += [Gate(self.names[j], "BUF", (prev[cols[ptr[j]]],)) for j in range(len(self.gates), len(self.names))]
        return tuple(out)


@dataclass(frozen=True, eq=False)
class LayeredCircuit:
    """``layers[0]`` are the input names; ``layers[k]`` (k >= 1) the gates of layer k,
    each reading only names produced in layer k-1.  ``outputs[j]`` is the name in the
    last layer that carries the circuit's j-th output, at position ``output_units[j]``.
    ``arrays`` holds the layers as :class:`Layer` arrays; ``layers`` the same as gates."""

    source: Circuit
    inputs: tuple[str, ...]
    arrays: tuple[Layer, ...]
    outputs: tuple[str, ...]
    output_units: np.ndarray = field(repr=False)
    identity_gates: int = 0  # the carried copies (the gates the layering adds)

    @cached_property
    def layers(self) -> tuple[tuple[Gate, ...], ...]:
        out, prev = [], list(self.inputs)
        for layer in self.arrays:
            out.append(layer.to_gates(prev))
            prev = layer.names
        return tuple(out)

    @property
    def depth(self) -> int:
        return len(self.arrays)

    @property
    def widths(self) -> list[int]:
        return [len(self.inputs)] + [len(layer) for layer in self.arrays]

    @property
    def size(self) -> int:
        """The gates of the layered circuit, the identity gates included (the paper's s)."""
        return sum(len(layer) for layer in self.arrays)

    def to_circuit(self) -> Circuit:
        """The layered form as an ordinary (equivalent) Circuit."""
        gates = [g for layer in self.layers for g in layer]
        outs = [f"out{j}" for j in range(len(self.outputs))]
        taken = set(self.inputs) | {g.name for g in gates}
        outs = [_fresh(o, taken) for o in outs]
        gates += [Gate(o, "BUF", (s,)) for o, s in zip(outs, self.outputs)]
        return Circuit(self.source.name + "_layered", self.inputs, tuple(outs), tuple(gates))


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "@"
    taken.add(name)
    return name


def layer_circuit(c: Circuit, plan: Layering | None = None) -> LayeredCircuit:
    """Strictly layer ``c`` (see module docstring).  Linear in gates plus carried copies.

    Gates that no output depends on are dropped: they cannot change the function.
    ``plan`` is ``layering(c)`` when the caller has it already.
    """
    p = layering(c) if plan is None else plan
    n_in, depth, names = p.n_inputs, p.depth, p.names
    lv, nd, live = p.level, p.need, p.live
    n = lv.size
    # own gates, layer by layer (topological order within a layer), and their positions
    gate_sig = n_in + np.flatnonzero(live[n_in:])
    order = gate_sig[np.argsort(lv[gate_sig], kind="stable")]
    own_start = _starts(np.bincount(lv[gate_sig], minlength=depth + 1)[:depth + 1])
    pos = np.zeros(n, dtype=np.int64)
    pos[:n_in] = np.arange(n_in)
    pos[order] = np.arange(order.size) - own_start[lv[order]]
    # carried copies: signal s is copied into layers lv+1 .. need; copy id first[s] + j
    # is its copy in layer lv+1+j; per layer, in the order of the signals
    carried = np.flatnonzero(live & (nd > lv))
    count = nd[carried] - lv[carried]
    first = np.zeros(n, dtype=np.int64)
    first[carried] = np.cumsum(count) - count
    csig = np.repeat(carried, count)
    clayer = lv[csig] + 1 + (np.arange(csig.size) - first[csig])
    corder = np.argsort(clayer, kind="stable")
    copy_start = _starts(np.bincount(clayer, minlength=depth + 1)[:depth + 1])
    own_count = np.diff(own_start)
    cpos = np.empty(csig.size, dtype=np.int64)
    cl = clayer[corder]
    cpos[corder] = own_count[cl] + np.arange(corder.size) - copy_start[cl]

    def at(s: np.ndarray, k: np.ndarray) -> np.ndarray:
        """The position of the unit carrying signal ``s`` in layer ``k``."""
        out = pos[s]
        copy = k != lv[s]
        out[copy] = cpos[first[s[copy]] + k[copy] - lv[s[copy]] - 1]
        return out

    # what each own gate and each copy reads, as positions in the layer before
    fan = np.diff(p.ptr)[order - n_in]
    gcols = at(p.ins[csr_rows(p.ptr, order - n_in)], np.repeat(lv[order], fan) - 1)
    gptr = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(fan, out=gptr[1:])
    csig, ccols = csig[corder], at(csig[corder], cl - 1)  # from here on, copies in layer order
    renamed = _renamed_copies(p, carried, count)  # None: every copy is <signal>@<layer>
    if renamed is not None:
        renamed = [renamed[j] for j in corder.tolist()]
    gates = list(map(p.circuit.topo.__getitem__, (order - n_in).tolist()))
    layers = []
    for k in range(1, depth + 1):
        g0, g1 = int(own_start[k]), int(own_start[k + 1])
        c0, c1 = int(copy_start[k]), int(copy_start[k + 1])
        sig = order[g0:g1]
        if renamed is None:
            at_k = f"@{k}"
            carried_names = [s + at_k for s in map(names.__getitem__, csig[c0:c1].tolist())]
        else:
            carried_names = renamed[c0:c1]
        layers.append(Layer(
            names=list(map(names.__getitem__, sig.tolist())) + carried_names,
            gates=gates[g0:g1],
            ops=np.concatenate([p.ops[sig - n_in], np.full(c1 - c0, BUF, dtype=np.int8)]),
            ptr=np.concatenate([gptr[g0:g1 + 1] - gptr[g0], gptr[g1] - gptr[g0] + np.arange(1, c1 - c0 + 1)]),
            cols=np.concatenate([gcols[gptr[g0]:gptr[g1]], ccols[c0:c1]]),
        ))
    outs = at(p.outputs, np.full(p.outputs.size, depth, dtype=np.int64))
    last = layers[-1].names if layers else list(c.inputs)
    identity = int(csig.size)
    if renamed is not None:  # a copy may be named like a dropped gate: that one is not counted
        driver = p.circuit.driver
        identity -= sum(1 for s in renamed if s in driver)
    return LayeredCircuit(c, tuple(c.inputs), tuple(layers), tuple(last[j] for j in outs.tolist()),
                          outs, identity)


def _starts(counts: np.ndarray) -> np.ndarray:
    """``starts[k]`` = ``sum(counts[:k])``, for k = 0 .. len(counts)."""
    out = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _renamed_copies(p: Layering, carried: np.ndarray, count: np.ndarray) -> list[str] | None:
    """None when no signal name has an ``@`` (every copy is then ``<signal>@<layer>``, and
    no copy can clash with a signal or another copy).  Otherwise the copies' names, signal
    by signal, with ``@`` appended to any that clashes with a live signal or an earlier
    copy."""
    if "@" not in "".join(p.names):
        return None
    names, lv = p.names, p.level
    taken = {names[s] for s in np.flatnonzero(p.live).tolist()}
    out: list[str] = []
    for s, m in zip(carried.tolist(), count.tolist()):
        new = [f"{names[s]}@{k}" for k in range(int(lv[s]) + 1, int(lv[s]) + m + 1)]
        if taken.isdisjoint(new):
            taken.update(new)
        else:
            new = [_fresh(x, taken) for x in new]
        out += new
    return out
