"""The hidden layout of the transformer (Wei, Chen & Ma, App. C.1) and its JSON form.

Every decoder vector ``h ∈ R^w`` is split into labelled groups, as in the paper:

* ``st:<q>`` (|Z|), the state one-hot; ``sym1:<a>``, ``sym2:<a>`` (|A| each), symbols;
* ``pos1:b<k>``, ``pos2:b<k>``, ``pos3:b<k>`` (w_pos each): Bin(time), Bin(l_{i-1}),
  Bin(l_i), bit ``k`` is the 2^k digit;
* scratch: ``scr1:<a>``, ``scr2:<a>`` (|A| each), ``scr3:b<k>`` (w_pos), ``scr4:1..3``,
  and ``mv:L``, ``mv:R`` — the movement bits v1, v2 of Lemma C.2's proof.

So ``w = |Z| + 2|A| + 3·w_pos + w_scr`` with ``w_scr = 2|A| + w_pos + 5``.

Two-way tapes (our extension; the paper's tape is one-way): cell ``c`` (relative to the
start cell) is stored at location ``c + offset`` with ``offset = T``, so every cell a
run of ``T`` steps can reach has a location in ``[0, 2T]`` and
``w_pos = bitlen(2T)`` bits hold both locations and times ``1..T``.  The offset is in
the model's metadata (``to_json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tm2nn.nets import Space


def symbol_label(a: str) -> str:
    """A readable label item for a symbol (printable characters as themselves)."""
    return a if a.isprintable() and not a.isspace() and a != ":" else f"#{ord(a)}"


@dataclass(frozen=True)
class Layout:
    states: tuple[str, ...]      # the lowered machine's states (stays removed)
    alphabet: tuple[str, ...]
    blank: str
    steps: int                   # T: decoder steps (lowered machine steps)
    w_pos: int
    offset: int

    @classmethod
    def for_machine(cls, states, alphabet, blank, steps: int) -> "Layout":
        offset = steps
        w_pos = max(1, int(2 * steps).bit_length())
        return cls(tuple(states), tuple(alphabet), blank, steps, w_pos, offset)

    # -- groups -------------------------------------------------------------------------
    @cached_property
    def space(self) -> Space:
        syms = [symbol_label(a) for a in self.alphabet]
        bits = [f"b{k}" for k in self.bits_msb_first]
        labels = ([f"st:{q}" for q in self.states] + [f"sym1:{a}" for a in syms]
                  + [f"sym2:{a}" for a in syms]
                  + [f"pos1:{b}" for b in bits] + [f"pos2:{b}" for b in bits] + [f"pos3:{b}" for b in bits]
                  + [f"scr1:{a}" for a in syms] + [f"scr2:{a}" for a in syms]
                  + [f"scr3:{b}" for b in bits] + ["scr4:1", "scr4:2", "scr4:3", "mv:L", "mv:R"])
        return Space(tuple(labels))

    @property
    def width(self) -> int:
        return len(self.space)

    @property
    def bits_msb_first(self) -> list[int]:
        return list(range(self.w_pos - 1, -1, -1))

    def idx(self, group: str) -> np.ndarray:
        """Indices of a group (``st``, ``sym1``, ``pos2``, ...) in ``space`` order
        (symbols in alphabet order, bits most significant first)."""
        return np.array(self.space.groups[group], dtype=np.int64)

    def bin(self, n: int) -> np.ndarray:
        """Bin(n), most significant bit first (w_pos bits)."""
        if not 0 <= n < (1 << self.w_pos):
            raise ValueError(f"{n} does not fit in {self.w_pos} bits")
        return np.array([(n >> k) & 1 for k in self.bits_msb_first], dtype=np.float64)

    def vector(self, **groups) -> np.ndarray:
        """A vector of ``space`` with the given groups set (others 0)."""
        v = np.zeros(self.width)
        for g, vals in groups.items():
            v[self.idx(g)] = vals
        return v

    def one_hot(self, group: str, item: str) -> np.ndarray:
        table = self.states if group == "st" else self.alphabet
        v = np.zeros(len(table))
        v[table.index(item)] = 1.0
        return v

    # -- the tap: what each decoder step reports --------------------------------------------
    @cached_property
    def tap_groups(self) -> tuple[str, ...]:
        return ("st", "sym1", "pos2", "sym2")

    @cached_property
    def tap_indices(self) -> dict[str, slice]:
        """Slices of each tap group in the tap vector."""
        out, at = {}, 0
        for g in self.tap_groups:
            n = len(self.idx(g))
            out[g] = slice(at, at + n)
            at += n
        return out

    def to_json(self) -> dict:
        return {"states": list(self.states), "alphabet": list(self.alphabet), "blank": self.blank,
                "steps": self.steps, "w_pos": self.w_pos, "offset": self.offset}

    @classmethod
    def from_json(cls, d: dict) -> "Layout":
        return cls(tuple(d["states"]), tuple(d["alphabet"]), d["blank"], int(d["steps"]),
                   int(d["w_pos"]), int(d["offset"]))
