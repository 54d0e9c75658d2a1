"""Circuit — a combinational boolean DAG, the IR every circuit format lowers to.

Gates: AND OR NOT XOR NAND NOR XNOR BUF CONST0 CONST1, any fan-in where it makes
sense (NOT/BUF take one input, constants none).  Inputs and outputs are named
signals; output order is declaration order.  Cycles, undefined signals and
redefinitions are errors, reported at the gate that causes them.

Validation lives in :func:`validate_circuit`, called from ``__post_init__``.  It is
linear in the size of the circuit and never recurses (a 10^6-deep chain is fine): set
operations check names, fan-ins and definitions at once, and an iterative depth-first
sort orders the gates (one set test per gate when they are already in order); when
any check fails, the gate-by-gate check runs instead and reports the first problem at
its gate.  A pass that builds a circuit from a valid one, and knows the result is valid,
can skip the checks with :meth:`Circuit.trusted` (``to_basis`` does: its output is twice
the size of its input, and validating it again took seconds at 10^6 gates).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from tm2nn.errors import Loc
from tm2nn.ir.levels import layer_widths
from tm2nn.ir.ops import OPS
from tm2nn.source import error_at

UNARY = ("NOT", "BUF")
NULLARY = ("CONST0", "CONST1")


@dataclass(frozen=True, slots=True)
class Gate:
    """``name = op(inputs...)``; ``name`` is the signal the gate drives.  Slotted: a
    10^6-gate circuit holds millions of them (half the memory, and half the objects the
    garbage collector walks)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    loc: Loc | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if type(self.inputs) is not tuple:
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

    @classmethod
    def trusted(cls, name: str, inputs, outputs, gates, loc: Loc | None = None,
                port_locs: dict[str, Loc] | None = None, topo=None) -> "Circuit":
        """A circuit that a pass builds from a valid one and knows is valid (each signal
        defined once, fan-ins right, every signal read is defined, no cycle), without
        :func:`validate_circuit`'s checks: a 10^6-gate circuit's take seconds.  ``topo``
        is the gates in the order :func:`_topo_sort` gives them, when the pass knows it;
        else they are sorted here (one set test per gate when they are in order already).
        Only for circuits built by the code that calls it, never for input."""
        c = object.__new__(cls)
        for key, value in (("name", name), ("inputs", tuple(inputs)), ("outputs", tuple(outputs)),
                           ("gates", tuple(gates)), ("loc", loc),
                           ("port_locs", {} if port_locs is None else port_locs)):
            object.__setattr__(c, key, value)
        object.__setattr__(c, "_topo", _topo_sort(c, None) if topo is None else tuple(topo))
        return c

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
        d = self.levels
        return max((d[o] for o in self.outputs), default=0)

    @cached_property
    def levels(self) -> dict[str, int]:
        """Each signal's level: 0 for inputs, 1 + the deepest input's level for a gate."""
        d: dict[str, int] = dict.fromkeys(self.inputs, 0)
        get = d.__getitem__
        for g in self.topo:
            d[g.name] = 1 + max(map(get, g.inputs), default=0)
        return d

    def summary(self) -> dict:
        from collections import Counter

        ops = Counter(g.op for g in self.gates)
        return {
            "kind": "circuit",
            "name": self.name,
            "inputs": len(self.inputs),
            "outputs": len(self.outputs),
            "gates": len(self.gates),
            "depth": self.depth,
            "width": max(layer_widths(self), default=0),
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
    drivers = _checked_drivers(c)
    if drivers is None:
        return _validate_full(c)  # reports the first problem where it is
    return _topo_sort(c, drivers)


#: (op, fan-in capped at 2) -> whether the fan-in is right for the op
_FANIN_OK = {(op, n): (n == 0 if op in NULLARY else n == 1 if op in UNARY else n >= 1)
             for op in OPS for n in (0, 1, 2)}


def _checked_drivers(c: Circuit) -> dict[str, Gate] | None:
    """``{signal: gate driving it}`` when every check but acyclicity passes, done with
    set operations; None when any fails (:func:`_validate_full` then finds which)."""
    gates = c.gates
    if not c.name or len(set(c.inputs)) != len(c.inputs):
        return None
    ok = _FANIN_OK.get
    if not all([ok((g.op, min(len(g.inputs), 2)), False) for g in gates]):
        return None
    drivers = {g.name: g for g in gates}
    if len(drivers) != len(gates) or not drivers.keys().isdisjoint(c.inputs):
        return None
    defined = drivers.keys() | set(c.inputs)
    covers = defined.issuperset
    if not all([covers(g.inputs) for g in gates]) or not covers(c.outputs):
        return None
    return drivers


def _topo_sort(c: Circuit, drivers: dict[str, Gate] | None) -> tuple[Gate, ...]:
    """The gates in depth-first post-order from each gate in turn (inputs first, in
    order): iterative, so any depth is fine.  A gate whose inputs are all placed is
    placed at once, which is what the search would do, so gates already in topological
    order cost one set test each.  A back edge is a cycle, reported along its path.
    ``drivers`` (signal -> gate) is made here when None and the search needs it."""
    where = c.loc
    order: list[Gate] = []
    place = order.append
    done = set(c.inputs)  # the inputs and the placed gates
    mark, ready = done.add, done.issuperset
    active: set[str] = set()  # the gates on the search stack
    for root in c.gates:
        if root.name in done:
            continue
        if ready(root.inputs):
            place(root)
            mark(root.name)
            continue
        if drivers is None:
            drivers = {g.name: g for g in c.gates}
        stack = [(root, 0)]
        active.add(root.name)
        while stack:
            g, i = stack[-1]
            if i < len(g.inputs):
                stack[-1] = (g, i + 1)
                s = g.inputs[i]
                if s in done:
                    continue
                h = drivers[s]
                if s in active:
                    path = [x.name for x, _ in stack]
                    cyc = path[path.index(s):] + [s]
                    raise error_at(h.loc or where, f"combinational cycle: {' -> '.join(reversed(cyc))}")
                if ready(h.inputs):
                    place(h)
                    mark(s)
                else:
                    active.add(s)
                    stack.append((h, 0))
            else:
                stack.pop()
                active.discard(g.name)
                mark(g.name)
                place(g)
    return tuple(order)


def _validate_full(c: Circuit) -> tuple[Gate, ...]:
    """Every check, each error at the gate that causes it; the gates in a depth-first
    topological order (iterative: no recursion)."""
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

    return _topo_sort(c, drivers)
