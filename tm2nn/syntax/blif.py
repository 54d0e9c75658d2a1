"""Combinational BLIF importer (``.model/.inputs/.outputs/.names/.end``).

Supported: ``#`` comments, ``\\`` line continuation, ``.names`` covers with any
number of inputs, on-set covers (output column ``1``) and off-set covers (output
column ``0``: the function is the complement), 0-row covers (constant 0) and the
constant-1 cover (``.names y`` followed by ``1``).  Timing directives (``.area``,
``.delay``, ``.input_arrival`` ...) are ignored.  Sequential (``.latch``,
``.mlatch``, ``.clock``, ``.start_kiss``), hierarchical (``.subckt``, ``.search``)
and mapped (``.gate``) netlists, and ``.exdc`` don't-care networks, are errors.

Several models: the first ``.model`` is the circuit; reading stops at its
``.end`` (or at the next ``.model``).  Later models could only be reached through
``.subckt``, which is rejected anyway.  The circuit is named after the file stem.

Lowering of one cover ``.names a b ... y``:

* one row with one literal: ``y = BUF(a)`` or ``y = NOT(a)``;
* one row with several literals: ``y = AND(...)``, ``NOR(...)`` if all literals are
  negative, with shared ``NOT`` gates for the negative literals of a mixed row;
* several rows: one term per row (a literal, or a gate named ``y~<k>``), ``y = OR(terms)``;
* an off-set cover complements: ``AND -> NAND``, ``NOR -> OR``, ``OR -> NOR``, ``BUF <-> NOT``;
* a row of only ``-`` makes the cover constant; no rows make it ``CONST0``.

Internal gates are named with ``~`` (``y~0``, ``a~n`` for NOT a); a name that
clashes with a real signal gets more ``~`` until it is unique.

Speed: a file without comments and continuations is read by a plain line loop
(:func:`_parse_plain`), and the rows of a cover are checked and lowered once per
distinct cover (most covers of a large netlist repeat a few shapes).  It gives exactly
what the general reader gives; on anything else, and on any error, the general reader
reads the file and reports the error where it always has.
"""

from __future__ import annotations

import re

from tm2nn.errors import Loc
from tm2nn.gc_pause import gc_paused
from tm2nn.ir.circuit import Circuit, Gate
from tm2nn.source import SourceText
from tm2nn.syntax.aiger import circuit_name

KIND = "circuit"

_TOKEN = re.compile(r"\S+")

_IGNORED = frozenset({
    ".area", ".delay", ".wire_load_slope", ".wire", ".input_arrival", ".output_required",
    ".default_input_arrival", ".default_output_required", ".input_drive", ".output_load",
    ".default_input_drive", ".default_output_load", ".max_input_load",
    ".default_max_input_load", ".cname", ".attrib", ".param",
})
_SEQUENTIAL = frozenset({".latch", ".mlatch", ".clock", ".start_kiss", ".end_kiss",
                         ".latch_order", ".code", ".cycle", ".clock_event"})
_HIERARCHICAL = frozenset({".subckt", ".search", ".gate"})


class _Lines:
    """Logical lines: comments stripped, ``\\`` continuations joined, tokens split."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        self._pos: dict[int, list[tuple[int, int]]] = {}
        self.items: list[tuple[int, list[str], int]] = []  # (first index, tokens, last index)
        items = self.items
        toks: list[str] = []
        start = -1
        for i, raw in enumerate(lines):
            if start < 0 and "#" not in raw and "\\" not in raw:  # the common, simple line
                t = raw.split()
                if t:
                    items.append((i, t, i))
                continue
            s = raw
            h = s.find("#")
            if h >= 0:
                s = s[:h]
            s = s.rstrip()
            cont = s.endswith("\\")
            if cont:
                s = s[:-1]
            if start < 0:
                t = s.split()
                if not t and not cont:
                    continue
                start = i
                toks = t
            else:
                toks.extend(s.split())
            if not cont:
                if toks:
                    self.items.append((start, toks, i))
                start = -1
        #: (line, col) of a ``\\`` that continues the last line into the end of the file
        self.dangling: tuple[int, int] | None = None
        if start >= 0:
            last = lines[-1]
            h = last.find("#")
            self.dangling = (len(lines), (last[:h] if h >= 0 else last).rstrip().rfind("\\") + 1)
            if toks:
                self.items.append((start, toks, len(lines) - 1))

    def positions(self, item: int) -> list[tuple[int, int]]:
        """(line, col), 1-based, of every token of logical line ``item``, then the
        position just past the last token."""
        cached = self._pos.get(item)
        if cached is not None:
            return cached
        first, _, last = self.items[item]
        out: list[tuple[int, int]] = []
        end = (first + 1, 1)
        for i in range(first, last + 1):
            s = self.lines[i]
            h = s.find("#")
            if h >= 0:
                s = s[:h]
            s = s.rstrip()
            if s.endswith("\\"):
                s = s[:-1]
            for m in _TOKEN.finditer(s):
                out.append((i + 1, m.start() + 1))
                end = (i + 1, m.end() + 1)
        out.append(end)
        self._pos[item] = out
        return out

    def locate(self, item: int, k: int) -> tuple[int, int]:
        """(line, col) of token ``k`` of logical line ``item`` (past the end if k is too big)."""
        pos = self.positions(item)
        return pos[min(k, len(pos) - 1)]


class _Cover:
    __slots__ = ("item", "signals", "rows")

    def __init__(self, item: int, signals: list[str]):
        self.item = item  # logical line of the .names
        self.signals = signals  # inputs..., output
        self.rows: list[tuple[int, list[str]]] = []  # (logical line, tokens)


def parse(src: SourceText) -> list[Circuit]:
    with gc_paused():
        return [_parse_plain(src) or _parse(src)]


def _parse(src: SourceText) -> Circuit:
    text = src.text
    L = _Lines(text.splitlines())
    items = L.items
    if L.dangling is not None:
        raise src.error("the file ends inside a continued line: a '\\' continues this line, but nothing follows",
                        *L.dangling)

    def err_tok(message: str, item: int, k: int):
        line, col = L.locate(item, k)
        return src.error(message, line, col)

    def fail(message: str, item: int, k: int, shift: int = 0):
        line, col = L.locate(item, k)
        raise src.error(message, line, col + shift)

    inputs: list[tuple[str, int, int]] = []  # (name, item, token index)
    outputs: list[tuple[str, int, int]] = []
    covers: list[_Cover] = []
    cover: _Cover | None = None
    started = False
    for idx, (_, toks, _) in enumerate(items):
        t0 = toks[0]
        if t0[0] != ".":
            if cover is None:
                raise err_tok(f"expected a BLIF directive (.model, .inputs, .outputs, .names, "
                              f".end), found {_short(t0)!r}; cover rows must follow a .names",
                              idx, 0)
            cover.rows.append((idx, toks))
            continue
        cover = None
        if t0 == ".model":
            if started:
                break  # a second model: the circuit is the first one
            started = True
        elif t0 == ".inputs":
            started = True
            inputs.extend((t, idx, k) for k, t in enumerate(toks[1:], 1))
        elif t0 == ".outputs":
            started = True
            outputs.extend((t, idx, k) for k, t in enumerate(toks[1:], 1))
        elif t0 == ".names":
            started = True
            if len(toks) < 2:
                raise err_tok(".names needs at least an output signal", idx, 0)
            cover = _Cover(idx, toks[1:])
            covers.append(cover)
        elif t0 == ".end":
            break
        elif t0 in _IGNORED:
            continue
        elif t0 in _SEQUENTIAL:
            raise err_tok(f"sequential element {t0} is not supported: tm2nn handles "
                          "combinational circuits", idx, 0)
        elif t0 in _HIERARCHICAL:
            raise err_tok(f"{t0} is not supported: tm2nn reads flat, technology-independent "
                          "BLIF (.names only); flatten the netlist first", idx, 0)
        elif t0 == ".exdc":
            raise err_tok("external don't-care networks (.exdc) are not supported", idx, 0)
        else:
            raise err_tok(f"unknown BLIF directive {_short(t0)!r}", idx, 0)

    # Every real signal name, so generated names can avoid them.
    real: set[str] = {name for name, _, _ in inputs}
    real.update(c.signals[-1] for c in covers)
    for c in covers:
        for k, s in enumerate(c.signals[:-1]):
            if s not in real:
                raise err_tok(f"undefined signal {s!r} (used by {c.signals[-1]!r})", c.item, k + 1)
    for name, idx, k in outputs:
        if name not in real:
            raise err_tok(f"output {name!r} is never defined (no .names drives it and it is not "
                          "an input)", idx, k)

    low = _Lowering(set(real))
    lines = L.lines
    shapes: dict[tuple, tuple] = {}  # the rows of a cover -> its shape (most covers repeat one)
    for c in covers:
        y = c.signals[-1]
        first, _, last = items[c.item]
        if first == last:  # the common case: the output is the last token of this line
            s = lines[first]
            h = s.find("#")
            s = (s if h < 0 else s[:h]).rstrip()
            loc = src.loc(first + 1, s.rfind(y) + 1)
        else:
            loc = src.loc(*L.locate(c.item, len(c.signals)))
        key = (len(c.signals), *[" ".join(toks) for _, toks in c.rows])
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = _shape(c.signals, c.rows, fail)
        low.cover(y, c.signals, shape, loc)
    gates = low.gates

    port_locs: dict[str, Loc] = {}
    for name, idx, k in inputs:
        line, col = L.locate(idx, k)
        if name in port_locs:
            raise src.error(f"input {name!r} declared twice", line, col,
                            notes=(f"{port_locs[name]}: note: first declaration is here",))
        port_locs[name] = src.loc(line, col)
    for name, idx, k in outputs:
        key = "output:" + name
        if key not in port_locs:
            port_locs[key] = src.loc(*L.locate(idx, k))
    first = items[0][0] + 1 if items else 1
    return Circuit(circuit_name(src), tuple(n for n, _, _ in inputs),
                   tuple(n for n, _, _ in outputs), tuple(gates), loc=src.loc(first, 1),
                   port_locs=port_locs)


class _Fallback(Exception):
    """The plain path met something else: :func:`_parse` reads the file instead."""


def _parse_plain(src: SourceText) -> Circuit | None:
    """A file without comments or continuations and without errors, read line by line
    without :class:`_Lines`: exactly what :func:`_parse` gives; None for anything else
    (then _parse reads it and reports the first error where it always has)."""
    text = src.text
    if "#" in text or "\\" in text:
        return None
    try:
        return _Plain(src, text.splitlines()).circuit()
    except _Fallback:
        return None


class _Plain:
    """:func:`_parse_plain`'s reader; raises :class:`_Fallback` on anything unusual."""

    def __init__(self, src: SourceText, lines: list[str]):
        self.src, self.lines = src, lines
        self.inputs: list[tuple[str, int, int]] = []  # (name, line index, token index)
        self.outputs: list[tuple[str, int, int]] = []
        self.covers: list[tuple[int, list[str], list[str]]] = []  # (line index, signals, rows)
        self.first = 0  # the first line with a token

    def circuit(self) -> Circuit:
        self._read()
        inputs, outputs, covers = self.inputs, self.outputs, self.covers
        real = {name for name, _, _ in inputs}
        real.update(sig[-1] for _, sig, _ in covers)
        covered = real.issuperset
        if not all([covered(sig[:-1]) for _, sig, _ in covers]) or not covered(
                [name for name, _, _ in outputs]):
            raise _Fallback  # an undefined signal
        gates = self._gates(real)
        port_locs: dict[str, Loc] = {}
        for name, i, k in inputs:
            if name in port_locs:
                raise _Fallback  # declared twice
            port_locs[name] = self._loc(i, k)
        for name, i, k in outputs:
            port_locs.setdefault("output:" + name, self._loc(i, k))
        return Circuit(circuit_name(self.src), tuple(n for n, _, _ in inputs),
                       tuple(n for n, _, _ in outputs), tuple(gates),
                       loc=self.src.loc(self.first + 1, 1), port_locs=port_locs)

    def _read(self) -> None:
        """The directives and cover rows of the first model (see :func:`_parse`)."""
        rows: list[str] | None = None
        started = False
        first = None
        for i, raw in enumerate(self.lines):
            c = raw[:1]
            if c in ("0", "1", "-") and rows is not None:
                rows.append(raw)
                continue
            toks = raw.split()
            if not toks:
                continue
            if first is None:
                first = self.first = i
            t0 = toks[0]
            if t0[0] != ".":
                if rows is None:
                    raise _Fallback  # a row outside a cover
                rows.append(raw)
                continue
            rows = None
            if t0 == ".names":
                started = True
                if len(toks) < 2:
                    raise _Fallback
                rows = []
                self.covers.append((i, toks[1:], rows))
            elif t0 == ".inputs" or t0 == ".outputs":
                started = True
                ports = self.inputs if t0 == ".inputs" else self.outputs
                ports.extend((t, i, k) for k, t in enumerate(toks[1:], 1))
            elif t0 == ".model":
                if started:
                    break
                started = True
            elif t0 == ".end":
                break
            elif t0 not in _IGNORED:
                raise _Fallback

    def _gates(self, real: set[str]) -> list[Gate]:
        """The covers lowered as :func:`_parse` lowers them, each cover's shape found once
        per distinct rows."""
        low = _Lowering(real.copy())
        lines, loc = self.lines, self.src.loc
        shapes: dict[tuple, tuple] = {}
        for i, signals, rows in self.covers:
            key = (len(signals), *rows)
            shape = shapes.get(key)
            if shape is None:
                shape = shapes[key] = _shape(signals, [(0, r.split()) for r in rows], _fall)
            y = signals[-1]
            low.cover(y, signals, shape, loc(i + 1, lines[i].rstrip().rfind(y) + 1))
        return low.gates

    def _loc(self, i: int, k: int) -> Loc:
        """The location of token ``k`` of line ``i`` (0-based both)."""
        m = list(_TOKEN.finditer(self.lines[i]))[k]
        return self.src.loc(i + 1, m.start() + 1)


def _fall(*_) -> None:
    raise _Fallback


def _shape(signals: list[str], rows: list[tuple[int, list[str]]], fail) -> tuple:
    """The rows ``(item, tokens)`` of the cover of ``signals`` (inputs, then the output)
    checked, as ``(constant, complement, cubes, whole)``: ``constant`` is the op of a
    constant cover (no rows, or a row of only ``-``) else None; a cube is its literals
    ``(input index, positive)``; ``whole`` is the op when the cover is one gate reading
    every input in order (AND, NAND, OR, NOR, BUF, NOT), else None.  Only the rows and
    the number of inputs matter, so covers with the same rows share one shape.  A bad
    row calls ``fail(message, item, token index, column shift)``, which raises."""
    y = signals[-1]
    n = len(signals) - 1
    cubes: list[tuple[tuple[int, bool], ...]] = []
    value = None
    for ridx, toks in rows:
        if n == 0:
            if len(toks) != 1:
                fail(f"a cover of {y!r} with no inputs has rows of one column "
                     "(the output value 0 or 1)", ridx, 1)
            plane, out, out_k = "", toks[0], 0
        else:
            if len(toks) != 2:
                fail(f"expected a cover row '<{n} of 0 1 -> <0|1>' for {y!r}, "
                     f"found {len(toks)} field(s)", ridx, min(2, len(toks)))
            plane, out, out_k = toks[0], toks[1], 1
            if len(plane) != n:
                fail(f"cover row has {len(plane)} input column(s), but .names "
                     f"{y!r} has {n} input(s)", ridx, 0)
            if plane.strip("01-"):
                j = next(i for i, ch in enumerate(plane) if ch not in "01-")
                fail(f"cover rows use 0, 1 and -, not {plane[j]!r}", ridx, 0, j)
        if out not in ("0", "1"):
            fail(f"the output column of a cover row is 0 or 1, not {_short(out)!r}", ridx, out_k)
        if value is None:
            value = out
        elif out != value:
            fail(f"cover of {y!r} mixes on-set (1) and off-set (0) rows; all rows "
                 "of one cover must have the same output value", ridx, out_k)
        cubes.append(tuple((i, ch == "1") for i, ch in enumerate(plane) if ch != "-"))
    complement = value == "0"
    constant = None
    if not cubes:
        constant = "CONST0"
    elif any(not cube for cube in cubes):
        constant = "CONST0" if complement else "CONST1"
    return constant, complement, tuple(cubes), _whole(n, (constant, complement, tuple(cubes), None))


def _whole(n: int, shape: tuple) -> str | None:
    """The op of ``shape`` when :meth:`_Lowering.cover` makes one gate of it, reading the
    ``n`` inputs in order (found by lowering it over stand-in names)."""
    names = [f"\0{i}" for i in range(n)] + ["\0y"]
    probe = _Lowering(set(names))
    probe.cover(names[-1], names, shape, None)
    if len(probe.gates) == 1 and probe.gates[0].inputs == tuple(names[:-1]):
        return probe.gates[0].op
    return None


class _Lowering:
    """The gates of the covers, in order, with the shared NOT of each negated signal and
    internal names that avoid every real signal (see the module docstring)."""

    def __init__(self, taken: set[str]):
        self.taken = taken
        self.gates: list[Gate] = []
        self.nots: dict[str, str] = {}

    def fresh(self, base: str) -> str:
        taken = self.taken
        while base in taken:
            base += "~"
        taken.add(base)
        return base

    def neg(self, s: str, loc: Loc) -> str:
        n = self.nots.get(s)
        if n is None:
            n = self.nots[s] = self.fresh(s + "~n")
            self.gates.append(Gate(n, "NOT", (s,), loc))
        return n

    def product(self, name: str, lits: list[tuple[str, bool]], complement: bool, loc: Loc) -> None:
        """Gate ``name`` = (AND of the literals), complemented if asked."""
        n_pos = sum(p for _, p in lits)
        if len(lits) == 1:
            s, positive = lits[0]
            self.gates.append(Gate(name, "BUF" if positive != complement else "NOT", (s,), loc))
        elif n_pos == len(lits):
            self.gates.append(Gate(name, "NAND" if complement else "AND", tuple(s for s, _ in lits), loc))
        elif not n_pos:
            self.gates.append(Gate(name, "OR" if complement else "NOR", tuple(s for s, _ in lits), loc))
        else:
            ins = tuple(s if p else self.neg(s, loc) for s, p in lits)
            self.gates.append(Gate(name, "NAND" if complement else "AND", ins, loc))

    def cover(self, y: str, signals: list[str], shape: tuple, loc: Loc) -> None:
        """The gates of the cover of ``y`` over ``signals`` (inputs, then ``y``)."""
        constant, complement, cubes, whole = shape
        if whole is not None:  # the common case: one gate over the inputs
            self.gates.append(Gate(y, whole, tuple(signals[:-1]), loc))
        elif constant is not None:
            self.gates.append(Gate(y, constant, (), loc))
        elif len(cubes) == 1:
            self.product(y, [(signals[i], p) for i, p in cubes[0]], complement, loc)
        else:
            terms = []
            for k, cube in enumerate(cubes):
                if len(cube) == 1:
                    i, positive = cube[0]
                    terms.append(signals[i] if positive else self.neg(signals[i], loc))
                else:
                    t = self.fresh(f"{y}~{k}")
                    self.product(t, [(signals[i], p) for i, p in cube], False, loc)
                    terms.append(t)
            self.gates.append(Gate(y, "NOR" if complement else "OR", tuple(terms), loc))


def _short(s: str, n: int = 30) -> str:
    return s if len(s) <= n else s[:n] + "..."
