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
order).  :func:`layering` finds each signal's level and how far it must be carried,
in one pass over the gates and a few numpy passes, and counts the layers without
building them; :func:`layer_widths` (the memory estimate of the relu-circuit backend,
before anything is built) and :func:`layer_circuit` share it.  A
:class:`LayeredCircuit` keeps each layer as arrays (:class:`Layer`: the unit names,
the op of each unit and the positions it reads in the layer before), which is what
the relu-circuit backend builds its matrices from; :attr:`LayeredCircuit.layers` gives
the same layers as :class:`~tm2nn.ir.circuit.Gate` tuples, built on first use.
Everything is linear in the gates plus the carried copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain

import numpy as np

from tm2nn.ir.circuit import OPS, Circuit, Gate

#: op name -> code (the index in :data:`tm2nn.ir.circuit.OPS`), and the code of BUF
OP_CODE = {op: i for i, op in enumerate(OPS)}
BUF = OP_CODE["BUF"]

#: rounds of the vectorised dead-gate removal before the exact sequential pass
_PEEL_ROUNDS = 100


@dataclass(frozen=True, eq=False)
class Layering:
    """A circuit's layering, counted but not built (:func:`layering`).  Signal ``i`` is
    input ``i`` for ``i < len(circuit.inputs)``, else gate ``i - len(inputs)`` of
    ``circuit.topo``; gate ``j`` reads signals ``ins[ptr[j]:ptr[j + 1]]``."""

    circuit: Circuit
    names: list[str]
    ops: np.ndarray  # int8 per gate: OP_CODE[op]
    ptr: np.ndarray  # int64, len(gates) + 1
    ins: np.ndarray  # int64 signal numbers
    level: np.ndarray  # int64 per signal: 0 for the inputs, 1 + the deepest input for a gate
    live: np.ndarray  # bool per signal: some output depends on it (every input counts)
    need: np.ndarray  # int64 per signal: the last layer a live signal is carried to
    depth: int
    outputs: np.ndarray  # int64: the signal of each output

    @property
    def n_inputs(self) -> int:
        return len(self.circuit.inputs)

    @cached_property
    def widths(self) -> list[int]:
        """The width of each layer 1 .. depth: its own gates plus the signals carried
        across it (signal s is copied into layers level+1 .. need)."""
        n_in, size = self.n_inputs, self.depth + 2
        lv, nd = self.level, self.need
        own = np.bincount(lv[n_in:][self.live[n_in:]], minlength=size)
        carry = self.live & (nd > lv)
        delta = np.bincount(lv[carry] + 1, minlength=size) - np.bincount(nd[carry] + 1, minlength=size)
        widths = own[:size] + np.cumsum(delta)[:size]
        return [int(w) for w in widths[1:self.depth + 1]]


def layering(c: Circuit) -> Layering:
    """Number the signals of ``c``, and find each one's level, whether an output depends
    on it and the last layer it is carried to (see :class:`Layering`)."""
    topo = c.topo
    n_in, n_gates = len(c.inputs), len(topo)
    n = n_in + n_gates
    names = [*c.inputs, *[g.name for g in topo]]
    index = dict(zip(names, range(n)))
    reads = [g.inputs for g in topo]
    fan = np.fromiter(map(len, reads), dtype=np.int64, count=n_gates)
    ptr = np.zeros(n_gates + 1, dtype=np.int64)
    np.cumsum(fan, out=ptr[1:])
    ins = np.fromiter(map(index.__getitem__, chain.from_iterable(reads)), dtype=np.int64, count=int(ptr[-1]))
    level = _levels(n_in, ptr, ins)
    ops = np.fromiter(map(OP_CODE.__getitem__, [g.op for g in topo]), dtype=np.int8, count=n_gates)
    outs = np.array([index[o] for o in c.outputs], dtype=np.int64)
    live = _live(n_in, n, ptr, ins, outs)
    depth = max(level[outs].tolist() + [1 if c.gates or c.outputs else 0])
    # need: a live signal is carried to its last live reader's layer - 1, an output to the
    # last layer, and never below its own level
    need = level.copy()
    reader = np.repeat(np.arange(n_in, n, dtype=np.int64), fan)
    read = live[reader]
    np.maximum.at(need, ins[read], level[reader[read]] - 1)
    need[outs] = depth
    return Layering(c, names, ops, ptr, ins, level, live, need, depth, outs)


def _levels(n_in: int, ptr: np.ndarray, ins: np.ndarray) -> np.ndarray:
    """Each signal's level (gates in topological order; gate j reads ``ins[ptr[j]:ptr[j+1]]``):
    one pass in Python, since a gate's level needs its inputs'."""
    n_gates = ptr.size - 1
    n = n_in + n_gates
    fan = np.diff(ptr)
    level = [0] * (n + 1)  # level[n] = 0: what a constant "reads"
    if n_gates and fan.max() <= 2:  # the basis: each gate reads x and y (x = y for one input)
        first = np.full(n_gates, n, dtype=np.int64)
        first[fan > 0] = ins[ptr[:-1][fan > 0]]
        second = first.copy()
        second[fan == 2] = ins[ptr[:-1][fan == 2] + 1]
        for i, x, y in zip(range(n_in, n), first.tolist(), second.tolist()):
            u, v = level[x], level[y]
            level[i] = (u if u > v else v) + 1
    else:
        get = level.__getitem__
        bounds, xs = ptr.tolist(), ins.tolist()
        for j in range(n_gates):
            level[n_in + j] = 1 + max(map(get, xs[bounds[j]:bounds[j + 1]]), default=0)
    return np.array(level[:n], dtype=np.int64)


def _live(n_in: int, n: int, ptr: np.ndarray, ins: np.ndarray, outs: np.ndarray) -> np.ndarray:
    """Which signals some output depends on (every input counts as live).

    A gate that is no output and that no live gate reads is dead.  Dead gates are removed
    round by round (vectorised): a round removes the gates whose last readers the round
    before removed, and costs what those readers read.  A long dead chain takes as many
    rounds as it is long, so after :data:`_PEEL_ROUNDS` rounds one exact backward pass
    (in Python) finishes instead."""
    keep = np.zeros(n, dtype=bool)
    keep[outs] = True
    keep[:n_in] = True
    readers = np.bincount(ins, minlength=n)  # live readers of each signal (all, to start)
    alive = np.ones(n, dtype=bool)
    dead = np.flatnonzero((readers == 0) & ~keep)
    for _ in range(_PEEL_ROUNDS):
        if not dead.size:
            return alive
        alive[dead] = False
        read = ins[csr_rows(ptr, dead - n_in)]
        np.subtract.at(readers, read, 1)
        read = np.unique(read)
        dead = read[(readers[read] == 0) & alive[read] & ~keep[read]]
    if not dead.size:
        return alive
    live = bytearray(keep.view(np.uint8).tobytes())
    bounds, xs = ptr.tolist(), ins.tolist()
    for j in range(n - n_in - 1, -1, -1):
        if live[n_in + j]:
            for x in xs[bounds[j]:bounds[j + 1]]:
                live[x] = 1
    return np.frombuffer(bytes(live), dtype=bool).copy()


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


def csr_rows(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The indices of the entries of rows ``rows`` (in that order) of a CSR array with row
    pointers ``ptr``: row ``j`` is ``ptr[j]:ptr[j + 1]``."""
    lens = ptr[rows + 1] - ptr[rows]
    offsets = np.cumsum(lens) - lens
    return np.repeat(ptr[rows] - offsets, lens) + np.arange(int(lens.sum()), dtype=np.int64)


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


def layer_widths(c: Circuit) -> list[int]:
    """``[len(layer) for layer in layer_circuit(c).layers]``, counted without building the
    layers: linear in the gates of ``c``, however many carried copies the layering would
    make (a long chain that reads a new input at each gate needs quadratically many)."""
    return layering(c).widths
