"""The machine form of Welper §4.1: ``d`` tapes over the two symbols ``{-1, 1}``.

* ``Gamma = {-1, 1}``, the blank is ``-1``.
* ``delta: Q x Gamma^d -> Q x Gamma^d x {-1, 1}^d`` — every head moves one cell left
  (``-1``) or right (``+1``) at every step; there is no stay move.
* A subset ``read_only`` of the tapes is read-only: a rule writes back what it read there.
* ``halting`` is Welper's ``F``.  A pair ``(q, t)`` without a rule also halts (as in the
  tm2nn machine IR); the step that finds no rule does not count.

Tapes are numbered ``0 .. d-1``; a tape's content is the set of cells holding ``+1``
(every other cell holds the blank ``-1``).  Validation lives in ``__post_init__``, once.
Ordinary machines are lowered to this form by :mod:`tm2nn.passes.welper_form`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tm2nn.errors import Tm2nnError

SYMBOLS = (-1, 1)
BLANK = -1


@dataclass(frozen=True)
class MRule:
    """``(state, read) -> (next, write, move)``; ``read``, ``write``, ``move`` have one
    entry per tape (symbols and moves in ``{-1, 1}``)."""

    state: str
    read: tuple[int, ...]
    next: str
    write: tuple[int, ...]
    move: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class MultiTapeMachine:
    name: str
    tapes: int
    read_only: frozenset[int]
    states: tuple[str, ...]
    start: str
    halting: frozenset[str]
    rules: tuple[MRule, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "states", tuple(self.states))
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "read_only", frozenset(self.read_only))
        object.__setattr__(self, "halting", frozenset(self.halting))
        d = self.tapes
        where = f"multi-tape machine {self.name!r}"
        if d < 1:
            raise Tm2nnError(f"{where}: needs at least one tape")
        if not self.read_only <= set(range(d)):
            raise Tm2nnError(f"{where}: read-only tapes {sorted(self.read_only)} not in 0..{d - 1}")
        if len(set(self.states)) != len(self.states):
            raise Tm2nnError(f"{where}: a state is listed twice")
        known = set(self.states)
        if self.start not in known or not self.halting <= known:
            raise Tm2nnError(f"{where}: start or halting state not among the states")
        seen = set()
        for r in self.rules:
            rd = f"{where}: rule ({r.state}, {r.read})"
            if r.state not in known or r.next not in known:
                raise Tm2nnError(f"{rd}: unknown state")
            if r.state in self.halting:
                raise Tm2nnError(f"{rd}: a halting state has no rules")
            for what, v in (("read", r.read), ("write", r.write), ("move", r.move)):
                if len(v) != d or any(s not in SYMBOLS for s in v):
                    raise Tm2nnError(f"{rd}: {what} must be {d} values in {{-1, 1}}, got {v}")
            for j in self.read_only:
                if r.write[j] != r.read[j]:
                    raise Tm2nnError(f"{rd}: writes {r.write[j]} on read-only tape {j}")
            if (r.state, r.read) in seen:
                raise Tm2nnError(f"{rd}: two rules for the same state and symbols")
            seen.add((r.state, r.read))

    @cached_property
    def delta(self) -> dict[tuple[str, tuple[int, ...]], MRule]:
        return {(r.state, r.read): r for r in self.rules}

    @property
    def writable(self) -> tuple[int, ...]:
        return tuple(j for j in range(self.tapes) if j not in self.read_only)


@dataclass(frozen=True)
class MConfig:
    """A configuration: state, one head per tape, and per tape the cells holding ``+1``."""

    state: str
    heads: tuple[int, ...]
    tapes: tuple[frozenset[int], ...]

    def read(self) -> tuple[int, ...]:
        return tuple(1 if h in t else -1 for h, t in zip(self.heads, self.tapes))
