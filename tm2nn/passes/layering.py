"""Layering: put a circuit into the strictly layered form Wei, Chen & Ma §3 assume.

Layer 0 is the inputs.  A gate sits at layer ``1 + max(layer of its inputs)``
(constants, which read nothing, at layer 1).  Every edge that skips layers is
replaced by a chain of identity (BUF) gates, and every output is carried to the
last layer, so each gate of layer i+1 reads only signals of layer i and the
outputs are exactly (a subset of) the last layer.

Carried copies are named ``<signal>@<layer>``; the name cannot clash with a real
signal because the pass checks, and appends more ``@`` if it would.
"""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.ir.circuit import Circuit, Gate


@dataclass(frozen=True)
class LayeredCircuit:
    """``layers[0]`` are the input names; ``layers[k]`` (k >= 1) the gates of layer k,
    each reading only names produced in layer k-1.  ``outputs[j]`` is the name in the
    last layer that carries the circuit's j-th output."""

    source: Circuit
    inputs: tuple[str, ...]
    layers: tuple[tuple[Gate, ...], ...]
    outputs: tuple[str, ...]

    @property
    def depth(self) -> int:
        return len(self.layers)

    @property
    def widths(self) -> list[int]:
        return [len(self.inputs)] + [len(layer) for layer in self.layers]

    @property
    def identity_gates(self) -> int:
        return sum(1 for layer in self.layers for g in layer if g.name not in self.source.driver)

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


def layer_circuit(c: Circuit) -> LayeredCircuit:
    """Strictly layer ``c`` (see module docstring).  Linear in gates plus carried copies.

    Gates that no output depends on are dropped: they cannot change the function.
    """
    live = _live_gates(c)
    level: dict[str, int] = dict.fromkeys(c.inputs, 0)
    get = level.__getitem__
    for g in live:
        level[g.name] = 1 + max(map(get, g.inputs), default=0)
    depth = _depth(c, level)
    need = _need(c, live, level, depth)
    taken = set(level)
    copies: dict[str, list[str]] = {}  # signal -> its carried copies, layers level+1 .. need
    carried: list[list[Gate]] = [[] for _ in range(depth)]
    for s in list(c.inputs) + [g.name for g in live]:  # stable order
        first = level[s] + 1
        names = [f"{s}@{k}" for k in range(first, need[s] + 1)]
        if not names:
            continue
        if taken.isdisjoint(names):  # the usual case: no real signal is called s@k
            taken.update(names)
        else:
            names = [_fresh(n, taken) for n in names]
        copies[s] = names
        prev = s
        for k, n in enumerate(names, first - 1):
            carried[k].append(Gate(n, "BUF", (prev,)))
            prev = n

    def at(s: str, k: int) -> str:
        """The name carrying signal ``s`` in layer ``k``."""
        lv = level[s]
        return s if k == lv else copies[s][k - lv - 1]

    layers: list[list[Gate]] = [[] for _ in range(depth)]
    for g in live:
        k = level[g.name]
        layers[k - 1].append(Gate(g.name, g.op, tuple([at(i, k - 1) for i in g.inputs]), g.loc))
    outputs = tuple(at(o, depth) for o in c.outputs)
    return LayeredCircuit(
        c, tuple(c.inputs), tuple(tuple(a + b) for a, b in zip(layers, carried)), outputs
    )


def layer_widths(c: Circuit) -> list[int]:
    """``[len(layer) for layer in layer_circuit(c).layers]``, counted without building the
    layers: linear in the gates of ``c``, however many carried copies the layering would
    make (a long chain that reads a new input at each gate needs quadratically many)."""
    import numpy as np

    level = c.levels  # a live gate's level only depends on live gates
    depth = _depth(c, level)
    need = _live_need(c, level, depth)
    lv = np.fromiter(map(level.__getitem__, need), dtype=np.int64, count=len(need))
    nd = np.fromiter(need.values(), dtype=np.int64, count=len(need))
    size = depth + 2
    own = np.bincount(lv, minlength=size)  # the gates of each layer (inputs: layer 0)
    carry = nd > lv  # signal s is copied into layers level+1 .. need
    delta = (np.bincount(lv[carry] + 1, minlength=size)
             - np.bincount(nd[carry] + 1, minlength=size))
    widths = own[:size] + np.cumsum(delta)[:size]
    return [int(w) for w in widths[1:depth + 1]]


def _live_need(c: Circuit, level: dict[str, int], depth: int) -> dict[str, int]:
    """:func:`_need` for the signals some output depends on (the live inputs and gates),
    in one backward pass; a signal no output depends on has no entry."""
    need = dict.fromkeys(c.outputs, depth)
    get = need.get
    for g in reversed(c.topo):
        if g.name in need:
            k = level[g.name] - 1
            for i in g.inputs:
                if get(i, -1) < k:
                    need[i] = k
    return need


def _depth(c: Circuit, level: dict[str, int]) -> int:
    """The number of layers: the deepest output, and at least 1 when there is anything."""
    return max([level[o] for o in c.outputs] + [1 if c.gates or c.outputs else 0])


def _need(c: Circuit, live: list[Gate], level: dict[str, int], depth: int) -> dict[str, int]:
    """How far each signal must be carried: to its last consumer's layer - 1, and to the
    last layer for outputs (at least its own level)."""
    need = dict.fromkeys(c.inputs, 0)
    for g in live:
        need[g.name] = level[g.name]
    for g in live:
        k = level[g.name] - 1
        for i in g.inputs:
            if need[i] < k:
                need[i] = k
    for o in c.outputs:
        need[o] = depth
    return need


def _live_gates(c: Circuit) -> list[Gate]:
    """Gates some output depends on, in topological order."""
    seen = set(c.outputs)
    for g in reversed(c.topo):
        if g.name in seen:
            seen.update(g.inputs)
    return [g for g in c.topo if g.name in seen]
