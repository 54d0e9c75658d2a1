"""The level plan of a circuit: every signal's level (layer 0 the inputs, a gate at
``1 + max(level of its inputs)``), whether an output depends on it, and the last layer it
must be carried to.  A property of the DAG (:meth:`Circuit.summary` reports its widest
layer); :mod:`tm2nn.passes.layering` builds Wei, Chen & Ma §3's layered circuit from it.
Linear in the gates plus the carried copies, and counted without building any layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from tm2nn.ir.ops import OPS

if TYPE_CHECKING:
    from tm2nn.ir.circuit import Circuit

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


def layer_widths(c: Circuit) -> list[int]:
    """``[len(layer) for layer in layer_circuit(c).layers]``, counted without building the
    layers: linear in the gates of ``c``, however many carried copies the layering would
    make (a long chain that reads a new input at each gate needs quadratically many)."""
    return layering(c).widths


def csr_rows(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The indices of the entries of rows ``rows`` (in that order) of a CSR array with row
    pointers ``ptr``: row ``j`` is ``ptr[j]:ptr[j + 1]``."""
    lens = ptr[rows + 1] - ptr[rows]
    offsets = np.cumsum(lens) - lens
    return np.repeat(ptr[rows] - offsets, lens) + np.arange(int(lens.sum()), dtype=np.int64)
