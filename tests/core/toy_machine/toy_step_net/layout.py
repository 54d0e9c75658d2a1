"""The configuration vector of the toy step net: a line machine's configuration on a window
of ``2T + 1`` cells, one-hot in three groups, every dimension labelled.

* ``head:p<i>`` (``i = 0..2T``): the head is on window cell ``i``; the start cell is
  ``i = T`` (the origin), so a head position relative to the start is ``i - T``;
* ``st:<q>``: the machine is in state ``q`` (every state, halting ones included);
* ``cell<i>:<a>``: window cell ``i`` holds symbol ``a`` (every symbol, the blank included).

In ``T`` steps the head moves at most ``T`` cells, and it moves only on a step from a
configuration ``k < T``, where it is within ``k <= T - 1`` cells of the origin: so a valid
run never needs a cell outside the window, and no move ever leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tm2nn.ir import Machine
from tm2nn.nets import Space


@dataclass(frozen=True, eq=False)
class Layout:
    """Where each part of a configuration lives in the vector (see the module doc)."""

    machine: Machine
    steps: int

    @property
    def cells(self) -> int:
        return 2 * self.steps + 1

    @property
    def origin(self) -> int:
        return self.steps

    @property
    def n_states(self) -> int:
        return len(self.machine.states)

    @property
    def n_symbols(self) -> int:
        return len(self.machine.alphabet)

    @property
    def width(self) -> int:
        return self.cells + self.n_states + self.cells * self.n_symbols

    def head(self, i: int) -> int:
        return i

    def state(self, q: int) -> int:
        return self.cells + q

    def cell(self, i: int, a: int) -> int:
        return self.cells + self.n_states + i * self.n_symbols + a

    @cached_property
    def space(self) -> Space:
        m = self.machine
        return Space((*(f"head:p{i}" for i in range(self.cells)), *(f"st:{q}" for q in m.states),
                      *(f"cell{i}:{a}" for i in range(self.cells) for a in m.alphabet)))

    # -- indicators: one per (window cell, state, symbol) --------------------------------------------
    @property
    def n_indicators(self) -> int:
        return self.cells * self.n_states * self.n_symbols

    def indicator(self, i: int, q: int, a: int) -> int:
        return (i * self.n_states + q) * self.n_symbols + a

    @cached_property
    def indicator_space(self) -> Space:
        m = self.machine
        return Space(f"ind:p{i}|{q}|{a}" for i in range(self.cells) for q in m.states for a in m.alphabet)

    def to_json(self) -> dict:
        """What the encodings record: enough to read the vector without the source."""
        m = self.machine
        return {"steps": self.steps, "cells": self.cells, "origin": self.origin, "width": self.width,
                "states": list(m.states), "alphabet": list(m.alphabet), "blank": m.blank}
