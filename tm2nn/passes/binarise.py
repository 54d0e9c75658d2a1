"""Binarisation: any machine -> a machine over the cell symbols of Goel et al., B.1.1.

B.1.1 gives a tape cell one base-3 digit for its content: blank 0, or ±1.  A machine
over a larger alphabet is lowered here to one over ``'_'`` (blank, digit 0), ``'-'``
(−1) and ``'+'`` (+1), each source cell a block of ``w`` lowered cells.

**The block code.**  ``w = max(1, ceil(log2 k))`` for ``k`` source symbols.  Every
source symbol, the blank included, gets a word of ``w`` signs: symbol number ``i`` in
the order blank first, then the other symbols as the alphabet lists them, is ``i`` in
binary, most significant digit first, with 0 -> ``-`` and 1 -> ``+``.  So
``{0, 1}`` with blank ``0`` is ``0 -> -``, ``1 -> +`` (``w = 1``), and
``{0, 1, 2}`` with blank ``0`` is ``0 -> --``, ``1 -> -+``, ``2 -> +-`` (``w = 2``).
A block of blanks ``__…_`` is a cell the machine has never visited; it also reads as
the source blank.  (A ``code=`` argument can give another table of equal-width sign
words.)  Because every code word is made of signs, **the lowered machine never writes
the blank** and an encoded input holds no blank: the non-blank cells are exactly the
input and the cells the head has left.  The normal-form pass
(:mod:`tm2nn.passes.grid_normal_form`) relies on this to find the region to clear.

**One source step** (the head at the first cell of a block, in source state ``q``):

* *read* ``w`` cells left to right, keeping the prefix read in the state
  (``q~<prefix>``).  A ``'_'`` at offset ``j`` reads, and is rewritten, as the blank's
  code letter ``j`` (a ``'_'`` cell only occurs in a block never visited).  At the last
  cell the symbol ``a`` is known; the rule ``δ(q, a) = (b, move, q')`` applies:
* *write* ``code(b)`` right to left (states ``q'~<move><letters left>``), then at the
  first cell of the block make the move: ``S`` (or ``U``/``D`` on a grid) is one step;
  ``L``/``R`` walk ``w`` cells to the next block's first cell (states ``q'~L<n>``,
  ``q'~R<n>``; a never-visited cell walked over gets the blank's code).
* With ``w = 1`` all of this is one step: the rules are the source rules, renamed.

Steps per source step: ``w`` to read, ``w - 1`` to write, ``w - 1`` to walk, at most
``3w - 2``.  A pair ``(q, a)`` without a rule makes the lowered machine walk back to the
block's first cell (``w - 1`` steps) into ``q~x``, which has no rules: it halts there by
a missing rule, under the source's step-count convention.  Halting states, their
outcomes and names, the start state and both two-way tapes (line, or grid with blocks
along the rows) are kept; source states keep their names and indices, so a lowered
configuration in a source state *is* a source configuration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import RunResult
from tm2nn.ir.machine import GridMachine, Machine, Rule, check_input
from tm2nn.passes.lowering import Lowering, Mapped, fresh_namer

BLANK, MINUS, PLUS = "_", "-", "+"
ALPHABET = (BLANK, MINUS, PLUS)


def block_code(m: Machine) -> dict[str, str]:
    """The default code of ``m``'s symbols (module docstring; Goel et al., B.1.1 digit 1)."""
    k = len(m.alphabet)
    w = max(1, math.ceil(math.log2(k)))
    order = [m.blank] + [a for a in m.alphabet if a != m.blank]
    return {a: format(i, f"0{w}b").replace("0", MINUS).replace("1", PLUS)
            for i, a in enumerate(order)}


def _check_code(m: Machine, code: dict[str, str]) -> int:
    widths = {len(c) for c in code.values()}
    bad = next((a for a in m.alphabet if a not in code), None)
    if bad is not None:
        raise Tm2nnError(f"binarise: the code has no word for symbol {bad!r} of {m.name!r}")
    extra = next((a for a in code if a not in m.symbol_index), None)
    if extra is not None:
        raise Tm2nnError(f"binarise: the code has a word for {extra!r}, which is not a symbol of {m.name!r}")
    if len(widths) != 1 or 0 in widths:
        raise Tm2nnError(f"binarise: code words must be non-empty and of one width, got widths {sorted(widths)}")
    for a, c in code.items():
        if set(c) - {MINUS, PLUS}:
            raise Tm2nnError(f"binarise: code word {c!r} of {a!r} must consist of '-' and '+'")
    if len(set(code.values())) != len(code):
        raise Tm2nnError("binarise: two symbols have the same code word")
    return widths.pop()


@dataclass(frozen=True)
class BinaryLowering(Lowering):
    """``machine`` simulates ``source`` over ``'_' '-' '+'`` with the block code ``code``
    (symbol -> word of ``width`` signs).  ``kind[name]`` says what a lowered state does:
    ``("src", q)``, ``("read", q, prefix)``, ``("write", q', move, letters)``,
    ``("walk", q', dir, n)``, ``("stop", q)`` (halted by a missing rule) or
    ``("stopwalk", q, j)``."""

    source: Machine
    machine: Machine
    code: dict[str, str]
    width: int
    kind: dict[str, tuple] = field(repr=False)

    def to_json(self) -> dict:
        return {"pass": "binarise", "code": dict(self.code)}

    # -- inputs ---------------------------------------------------------------------------------
    def _rows(self, m: Machine, text: str) -> list[str]:
        if isinstance(m, GridMachine) and "/" not in m.symbol_index:
            return text.split("/")
        return [text]

    def lower_input(self, text: str) -> str:
        rows = self._rows(self.source, text)
        for r, row in enumerate(rows):
            check_input(self.source, row, what="input" if len(rows) == 1 else f"input row {r}")
        return "/".join("".join(self.code[a] for a in row) for row in rows)

    def source_input(self, text: str) -> str:
        w = self.width
        out = []
        for row in self._rows(self.machine, text):
            if len(row) % w:
                raise ValueError(f"lowered input row {row!r} is not a whole number of blocks")
            out.append("".join(self.source.alphabet[self._decode(row[i:i + w])]
                               for i in range(0, len(row), w)))
        return "/".join(out)

    def lowered_input_len(self, input_len: int) -> int:
        return input_len * self.width

    def lowered_steps(self, source_steps: int, input_len: int = 0) -> int:
        """``3w - 2`` per source step.  A halt on a missing rule after ``N' < N`` steps
        takes ``N'(3w - 2) + 2w - 2`` (+1 if counted), which is no more."""
        return source_steps * (3 * self.width - 2)

    def lowered_columns(self, lo: int, hi: int) -> tuple[int, int]:
        """Source column ``c`` is the block ``[c·w, c·w + w − 1]``; the head reads, writes
        and walks only inside the blocks of source cells it visits (module docstring)."""
        return lo * self.width, hi * self.width + self.width - 1

    # -- blocks ---------------------------------------------------------------------------------
    def _decode(self, word: str) -> int:
        """A block's letters -> source symbol index (Goel et al., B.1.1: a cell is 0 or ±1)."""
        a = self._words.get(word)
        if a is not None:
            return a
        blank = self.code[self.source.blank]
        if all(c == BLANK or c == blank[i] for i, c in enumerate(word)):
            return self.source.symbol_index[self.source.blank]
        raise ValueError(f"block {word!r} is not a word of the block code")

    @cached_property
    def _words(self) -> dict[str, int]:
        return {c: self.source.symbol_index[a] for a, c in self.code.items()}

    def _block(self, cells: dict, head, grid: bool) -> int:
        w = self.width
        if grid:
            r, c = head
            word = "".join(cells.get((r, c + i), BLANK) for i in range(w))
        else:
            word = "".join(cells.get(head + i, BLANK) for i in range(w))
        return self._decode(word)

    def _up(self, head, grid: bool):
        """Lowered head at a block's first cell -> source head."""
        col = head[1] if grid else head
        if col % self.width:
            raise ValueError(f"head {head} is not at the first cell of a block")
        return (head[0], col // self.width) if grid else col // self.width

    # -- mapping back -----------------------------------------------------------------------------
    def source_config(self, state: str, head, cells: dict):
        """A lowered configuration in a source state (or halted in ``q~x``) -> the source one."""
        kind = self.kind[state]
        if kind[0] not in ("src", "stop"):
            return None
        grid = isinstance(self.machine, GridMachine)
        w = self.width
        words: dict = {}
        for p, ch in cells.items():
            r, c = p if grid else (0, p)
            key = (r, c // w)
            word = words.setdefault(key, [BLANK] * w)
            word[c % w] = ch
        up = {}
        for (r, b), word in words.items():
            a = self.source.alphabet[self._decode("".join(word))]
            if a != self.source.blank:
                up[(r, b) if grid else b] = a
        return kind[1], self._up(head, grid), up

    def _map(self, lowered: RunResult) -> Mapped:
        """Goel et al., B.1.1 (tape digit ∈ {0, ±1}): read the source run off the blocks."""
        tr = lowered.trace
        m, src = self.machine, self.source
        grid = isinstance(m, GridMachine)
        n_src = len(src.states)
        cells: dict = {}
        for r, row in enumerate(self._rows(m, lowered.input)):
            for c, ch in enumerate(row):
                if ch != BLANK:
                    cells[(r, c) if grid else c] = ch
        kind = self.kind[lowered.state]
        missing = lowered.halted and lowered.state not in m.halting
        if missing and kind[0] not in ("src", "stop"):
            raise ValueError(f"lowered run halted in {lowered.state!r}, which is mid-step")
        end = len(tr) - (1 if missing and m.missing_rule_counts_step else 0)
        head = (0, 0) if grid else 0
        under = self._block(cells, head, grid)
        out = Mapped(marks=[0])
        for j in range(end):
            p = (tr.pos_row[j], tr.pos[j]) if grid else tr.pos[j]
            ch = m.alphabet[tr.write[j]]
            if ch == BLANK:
                cells.pop(p, None)
            else:
                cells[p] = ch
            q = tr.state[j]
            if q < n_src:  # a source state: one source step is complete
                new = (tr.head_row[j], tr.head[j]) if grid else tr.head[j]
                out.add(self._up(head, grid), under, self._block(cells, head, grid), q,
                        self._up(new, grid), j + 1)
                head, under = new, self._block(cells, new, grid)
        if missing and src.missing_rule_counts_step:  # the counted step that found no rule
            q = src.state_index[kind[1]]
            out.add(self._up(head, grid), under, under, q, self._up(head, grid), len(tr))
        out.halted = lowered.halted
        return out


def binarise(m: Machine, code: dict[str, str] | None = None) -> BinaryLowering:
    """Goel et al., B.1.1: lower ``m`` to the symbols ``_ - +`` with a block code (module
    docstring).  Works for line and grid machines; ``code`` overrides :func:`block_code`."""
    code = dict(block_code(m) if code is None else code)
    w = _check_code(m, code)
    words = {c: a for a, c in code.items()}
    prefixes = {c[:j] for c in code.values() for j in range(w)}
    blank_word = code[m.blank]
    name = fresh_namer(m.states)
    kind: dict[str, tuple] = {q: ("src", q) for q in m.states}
    names: dict[tuple, str] = {}
    new_states: list[str] = []
    rules: list[Rule] = []
    pending: list[tuple] = [("read", q, "") for q in m.states if q not in m.halting]

    def state(key: tuple) -> str:
        """The lowered state for ``key``, made on first use."""
        if key[0] == "read" and key[2] == "":
            return key[1]
        if key[0] == "stopwalk" and key[2] == 0:
            key = ("stop", key[1])
        if key not in names:
            tag, q, rest = key[0], key[1], "".join(str(x) for x in key[2:])
            base = f"{q}~x{rest}" if tag in ("stop", "stopwalk") else f"{q}~{rest}"
            names[key] = nm = name(base)
            kind[nm] = key
            new_states.append(nm)
            pending.append(key)
        return names[key]

    def keep(c: str, j: int) -> str:
        """What a pass over offset ``j`` writes: the letter read, or the blank's letter."""
        return c if c != BLANK else blank_word[j]

    while pending:  # build each state's rules, making the states they lead to
        key = pending.pop(0)
        tag = key[0]
        here = state(key)
        if tag == "read":
            _, q, p = key
            j = len(p)
            for c in ALPHABET:
                e = keep(c, j)
                word = p + e
                if j < w - 1:
                    if word in prefixes:
                        rules.append(Rule(here, c, e, "R", state(("read", q, word))))
                    continue
                a = words.get(word)
                if a is None:
                    continue  # not a code word: unreachable
                r = m.delta.get((q, a))
                if r is None:
                    if w > 1:
                        rules.append(Rule(here, c, e, "L", state(("stopwalk", q, w - 2))))
                    continue
                b = code[r.write]
                if w == 1:
                    rules.append(Rule(here, c, b, r.move, r.next, r.loc))
                else:
                    rules.append(Rule(here, c, b[-1], "L", state(("write", r.next, r.move, b[:-1])),
                                      r.loc))
        elif tag == "write":
            _, q2, move, letters = key
            j = len(letters) - 1
            for c in ALPHABET:
                if j > 0:
                    rules.append(Rule(here, c, letters[-1], "L", state(("write", q2, move, letters[:-1]))))
                elif move in ("L", "R"):
                    rules.append(Rule(here, c, letters[-1], move, state(("walk", q2, move, w - 1))))
                else:
                    rules.append(Rule(here, c, letters[-1], move, q2))
        elif tag == "walk":
            _, q2, d, left = key
            off = left if d == "L" else w - left
            nxt = state(("walk", q2, d, left - 1)) if left > 1 else q2
            for c in ALPHABET:
                rules.append(Rule(here, c, keep(c, off), d, nxt))
        elif tag == "stopwalk":
            _, q, j = key
            nxt = state(("stopwalk", q, j - 1))
            for c in ALPHABET:
                rules.append(Rule(here, c, keep(c, j), "L", nxt))
        # "stop" states have no rules: the machine halts there.

    lowered = type(m)(
        name=m.name, alphabet=ALPHABET, blank=BLANK, states=m.states + tuple(new_states),
        start=m.start, halting=m.halting, rules=tuple(rules),
        missing_rule_counts_step=m.missing_rule_counts_step, loc=m.loc,
    )
    return BinaryLowering(m, lowered, code, w, kind)
