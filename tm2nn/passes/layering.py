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
    level: dict[str, int] = {x: 0 for x in c.inputs}
    for g in live:
        level[g.name] = 1 + max((level[i] for i in g.inputs), default=0)
    depth = max([level[o] for o in c.outputs] + [1 if c.gates or c.outputs else 0])
    # How far each signal must be carried: to the last consumer's layer - 1,
    # and to the last layer for outputs.
    need: dict[str, int] = {s: level[s] for s in level}
    for g in live:
        for i in g.inputs:
            need[i] = max(need[i], level[g.name] - 1)
    for o in c.outputs:
        need[o] = depth
    taken = set(level)
    at: dict[tuple[str, int], str] = {}  # (signal, layer) -> name carrying it there
    for s in level:
        at[(s, level[s])] = s
    carried: list[list[Gate]] = [[] for _ in range(depth)]
    for s in list(c.inputs) + [g.name for g in live]:  # stable order
        for k in range(level[s] + 1, need[s] + 1):
            at[(s, k)] = _fresh(f"{s}@{k}", taken)
            carried[k - 1].append(Gate(at[(s, k)], "BUF", (at[(s, k - 1)],)))
    layers: list[list[Gate]] = [[] for _ in range(depth)]
    for g in live:
        k = level[g.name]
        layers[k - 1].append(Gate(g.name, g.op, tuple(at[(i, k - 1)] for i in g.inputs), g.loc))
    outputs = tuple(at[(o, depth)] for o in c.outputs)
    return LayeredCircuit(
        c, tuple(c.inputs), tuple(tuple(a + b) for a, b in zip(layers, carried)), outputs
    )


def _live_gates(c: Circuit) -> list[Gate]:
    """Gates some output depends on, in topological order."""
    seen = set(c.outputs)
    for g in reversed(c.topo):
        if g.name in seen:
            seen.update(g.inputs)
    return [g for g in c.topo if g.name in seen]
