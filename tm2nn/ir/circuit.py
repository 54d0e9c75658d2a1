"""Circuit — a combinational boolean DAG, the IR every circuit format lowers to.

Gates: AND OR NOT XOR NAND NOR XNOR BUF CONST0 CONST1, any fan-in where it makes
sense (NOT/BUF take one input, constants none).  Inputs and outputs are named
signals; output order is declaration order.  Cycles, undefined signals and
redefinitions are errors, reported at the gate that causes them.

Validation lives in :func:`validate_circuit`, called from ``__post_init__``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from tm2nn.errors import Loc, error_at

OPS = ("AND", "OR", "NOT", "XOR", "NAND", "NOR", "XNOR", "BUF", "CONST0", "CONST1")
UNARY = ("NOT", "BUF")
NULLARY = ("CONST0", "CONST1")


@dataclass(frozen=True)
class Gate:
    """``name = op(inputs...)``; ``name`` is the signal the gate drives."""

    name: str
    op: str
    inputs: tuple[str, ...]
    loc: Loc | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))


@dataclass(frozen=True, eq=False)
class Circuit:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    gates: tuple[Gate, ...]
    loc: Loc | None = field(default=None, compare=False, repr=False)
    # Where each input/output was declared (for error messages); optional.
    port_locs: dict[str, Loc] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "gates", tuple(self.gates))
        order = validate_circuit(self)
        object.__setattr__(self, "_topo", order)

    @property
    def topo(self) -> tuple[Gate, ...]:
        """Gates in a topological order (inputs of a gate come before it)."""
        return self._topo  # type: ignore[attr-defined]

    @cached_property
    def driver(self) -> dict[str, Gate]:
        return {g.name: g for g in self.gates}

    @cached_property
    def depth(self) -> int:
        """Longest input-to-output path, counted in gates (constants have depth 1)."""
        d: dict[str, int] = {x: 0 for x in self.inputs}
        for g in self.topo:
            d[g.name] = 1 + max((d[i] for i in g.inputs), default=0)
        return max((d[o] for o in self.outputs), default=0)

    def summary(self) -> dict:
        from collections import Counter

        ops = Counter(g.op for g in self.gates)
        from tm2nn.passes.layering import layer_circuit

        layered = layer_circuit(self)
        return {
            "kind": "circuit",
            "name": self.name,
            "inputs": len(self.inputs),
            "outputs": len(self.outputs),
            "gates": len(self.gates),
            "depth": self.depth,
            "width": max((len(layer) for layer in layered.layers), default=0),
            "ops": dict(sorted(ops.items())),
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Circuit):
            return NotImplemented
        return (
            self.name == other.name
            and self.inputs == other.inputs
            and self.outputs == other.outputs
            and set(self.gates) == set(other.gates)
        )

    __hash__ = None  # type: ignore[assignment]


def validate_circuit(c: Circuit) -> tuple[Gate, ...]:
    """All structural checks for circuits; returns the gates in topological order."""
    where = c.loc
    if not c.name:
        raise error_at(where, "circuit has an empty name")
    defined: dict[str, Loc | None] = {}
    for x in c.inputs:
        if x in defined:
            raise error_at(c.port_locs.get(x, where), f"input {x!r} declared twice")
        defined[x] = c.port_locs.get(x)
    drivers: dict[str, Gate] = {}
    for g in c.gates:
        if g.op not in OPS:
            raise error_at(g.loc or where, f"unknown gate type {g.op!r}")
        n = len(g.inputs)
        if g.op in NULLARY and n != 0:
            raise error_at(g.loc or where, f"{g.op} takes no inputs, got {n}")
        if g.op in UNARY and n != 1:
            raise error_at(g.loc or where, f"{g.op} takes exactly one input, got {n}")
        if g.op not in NULLARY and n == 0:
            raise error_at(g.loc or where, f"{g.op} needs at least one input")
        if g.name in defined:
            prev = defined[g.name]
            what = "an input" if g.name in c.inputs else "defined twice"
            note = (f"{prev}: note: first definition is here",) if prev else ()
            raise error_at(g.loc or where, f"signal {g.name!r} is {what}", notes=note)
        defined[g.name] = g.loc
        drivers[g.name] = g
    for g in c.gates:
        for i in g.inputs:
            if i not in defined:
                raise error_at(g.loc or where, f"undefined signal {i!r} (used by {g.name!r})")
    for o in c.outputs:
        if o not in defined:
            raise error_at(c.port_locs.get("output:" + o, where), f"output {o!r} is never defined")

    # Iterative DFS topological sort; a back edge is a cycle, reported along its path.
    order: list[Gate] = []
    state: dict[str, int] = {}  # 1 = on stack, 2 = done
    for root in c.gates:
        if state.get(root.name):
            continue
        stack = [(root, 0)]
        state[root.name] = 1
        while stack:
            g, i = stack[-1]
            if i < len(g.inputs):
                stack[-1] = (g, i + 1)
                s = g.inputs[i]
                h = drivers.get(s)
                if h is None:
                    continue
                st = state.get(s)
                if st == 1:
                    path = [x.name for x, _ in stack]
                    cyc = path[path.index(s):] + [s]
                    raise error_at(h.loc or where, f"combinational cycle: {' -> '.join(reversed(cyc))}")
                if st is None:
                    state[s] = 1
                    stack.append((h, 0))
            else:
                stack.pop()
                state[g.name] = 2
                order.append(g)
    return tuple(order)
