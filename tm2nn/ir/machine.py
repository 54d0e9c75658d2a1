"""Machine (1D line tape) and GridMachine (2D tape) — the IR every machine format lowers to.

Conventions (ARCHITECTURE.md, "IR conventions"):

* One tape, infinite in both directions (a plane for GridMachine), a declared blank.
* Symbols are single characters, so a tape prints as a string.
* A missing transition means "halt".  Whether the step that finds no rule counts
  is ``missing_rule_counts_step`` (False: bbchallenge / turingmachine.io; True: morphett).
* Steps count transitions taken, including the transition into a halting state.
* Halting states carry an outcome: ``accept``, ``reject`` or ``halt``; they have no rules.

Validation lives in :func:`validate_machine`, called from ``__post_init__``, and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

from tm2nn.errors import Loc, Tm2nnError
from tm2nn.source import error_at

OUTCOMES = ("accept", "reject", "halt")
LINE_MOVES = ("L", "R", "S")
GRID_MOVES = ("L", "R", "U", "D", "S")
# (d_row, d_col) per move; a line machine uses the column only.
MOVE_DELTA = {"L": (0, -1), "R": (0, 1), "U": (-1, 0), "D": (1, 0), "S": (0, 0)}


@dataclass(frozen=True)
class Rule:
    """``state read -> write move next``.  ``loc`` points at the rule in its source file."""

    state: str
    read: str
    write: str
    move: str
    next: str
    loc: Loc | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class Machine:
    """A deterministic single-tape Turing machine on a two-way infinite line."""

    name: str
    alphabet: tuple[str, ...]
    blank: str
    states: tuple[str, ...]
    start: str
    halting: dict[str, str]
    rules: tuple[Rule, ...]
    missing_rule_counts_step: bool = False
    loc: Loc | None = field(default=None, compare=False, repr=False)
    # Where a parser found parts of the machine, for diagnostics (tm2nn.lint); not part of
    # the machine's identity (no equality, repr or validation), not kept by ``replace``.
    # Keys: "start" (the start-state declaration), "states" (an explicit state list),
    # ("next", state, read) (the NEXT of the rule for (state, read)).
    locations: dict | None = field(default=None, compare=False, repr=False)

    tape_kind: ClassVar[str] = "line"
    moves: ClassVar[tuple[str, ...]] = LINE_MOVES

    def __post_init__(self) -> None:
        object.__setattr__(self, "alphabet", tuple(self.alphabet))
        object.__setattr__(self, "states", tuple(self.states))
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "halting", dict(self.halting))
        validate_machine(self)

    # -- derived views (computed once) ------------------------------------------------------
    @cached_property
    def delta(self) -> dict[tuple[str, str], Rule]:
        return {(r.state, r.read): r for r in self.rules}

    @cached_property
    def state_index(self) -> dict[str, int]:
        return {q: i for i, q in enumerate(self.states)}

    @cached_property
    def symbol_index(self) -> dict[str, int]:
        return {a: i for i, a in enumerate(self.alphabet)}

    @property
    def convention(self) -> str:
        """Which step-count convention this machine came with (see module docstring)."""
        return "morphett" if self.missing_rule_counts_step else "bbchallenge"

    def outcome_of(self, state: str) -> str | None:
        return self.halting.get(state)

    def summary(self) -> dict:
        return {
            "kind": "grid machine" if self.tape_kind == "grid" else "machine",
            "name": self.name,
            "states": len(self.states),
            "halting_states": len(self.halting),
            "symbols": len(self.alphabet),
            "transitions": len(self.rules),
            "blank": self.blank,
            "start": self.start,
            "tape": self.tape_kind,
            "convention": self.convention,
        }

    def replace(self, **changes) -> "Machine":
        """A copy with some fields changed (validated again)."""
        kw = {
            f: getattr(self, f)
            for f in (
                "name", "alphabet", "blank", "states", "start", "halting", "rules",
                "missing_rule_counts_step", "loc",
            )
        }
        kw.update(changes)
        return type(self)(**kw)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Machine) or type(self) is not type(other):
            return NotImplemented
        return (
            self.name == other.name
            and self.alphabet == other.alphabet
            and self.blank == other.blank
            and self.states == other.states
            and self.start == other.start
            and self.halting == other.halting
            and set(self.rules) == set(other.rules)
            and self.missing_rule_counts_step == other.missing_rule_counts_step
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class GridMachine(Machine):
    """A Turing machine on a two-way infinite plane, moves U/D/L/R/S (Goel et al. B.1.2)."""

    tape_kind: ClassVar[str] = "grid"
    moves: ClassVar[tuple[str, ...]] = GRID_MOVES


def validate_machine(m: Machine) -> None:
    """All structural checks for machines, in one place.  Raises :class:`Tm2nnError`."""
    where = m.loc
    if not m.name:
        raise error_at(where, "machine has an empty name")
    if not m.alphabet:
        raise error_at(where, f"machine {m.name!r}: empty alphabet")
    seen: set[str] = set()
    for a in m.alphabet:
        if not isinstance(a, str) or len(a) != 1:
            raise error_at(where, f"machine {m.name!r}: symbol {a!r} is not a single character")
        if a in seen:
            raise error_at(where, f"machine {m.name!r}: symbol {a!r} declared twice")
        seen.add(a)
    if m.blank not in seen:
        raise error_at(where, f"machine {m.name!r}: blank {m.blank!r} is not in the alphabet")
    if not m.states:
        raise error_at(where, f"machine {m.name!r}: no states")
    if len(set(m.states)) != len(m.states):
        dup = next(q for q in m.states if m.states.count(q) > 1)
        raise error_at(where, f"machine {m.name!r}: state {dup!r} declared twice")
    states = set(m.states)
    if m.start not in states:
        raise error_at(where, f"machine {m.name!r}: start state {m.start!r} is not a state")
    for q, outcome in m.halting.items():
        if q not in states:
            raise error_at(where, f"machine {m.name!r}: halting state {q!r} is not a state")
        if outcome not in OUTCOMES:
            raise error_at(where, f"machine {m.name!r}: outcome {outcome!r} of {q!r} is not one of {', '.join(OUTCOMES)}")
    first: dict[tuple[str, str], Rule] = {}
    for r in m.rules:
        if r.state not in states:
            raise error_at(r.loc or where, f"unknown state {r.state!r}")
        if r.next not in states:
            raise error_at(r.loc or where, f"unknown state {r.next!r}")
        for sym in (r.read, r.write):
            if sym not in seen:
                raise error_at(r.loc or where, f"symbol {sym!r} is not in the alphabet")
        if r.move not in m.moves:
            kind = "grid" if m.tape_kind == "grid" else "line"
            raise error_at(r.loc or where, f"move {r.move!r} is not allowed on a {kind} tape (allowed: {' '.join(m.moves)})")
        if r.state in m.halting:
            raise error_at(r.loc or where, f"halting state {r.state!r} cannot have transitions")
        key = (r.state, r.read)
        if key in first:
            prev = first[key]
            note = f"{prev.loc}: note: first rule for ({r.state}, {r.read}) is here" if prev.loc else ""
            raise error_at(
                r.loc or where,
                f"nondeterministic: two rules for state {r.state!r} reading {r.read!r}",
                notes=(note,) if note else (),
            )
        first[key] = r


def check_input(m: Machine, text: str, what: str = "input") -> None:
    """An input string must consist of the machine's symbols."""
    for i, ch in enumerate(text):
        if ch not in m.symbol_index:
            raise Tm2nnError(
                f"{what}: symbol {ch!r} is not in the alphabet of {m.name!r} "
                f"({' '.join(repr(a) for a in m.alphabet)})",
                file=what,
                line=1,
                col=i + 1,
                snippet=text,
            )
