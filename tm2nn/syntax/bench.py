"""ISCAS ``.bench`` importer and writer.

Reading::

    # comment
    INPUT(G1gat)
    OUTPUT(G22gat)
    G22gat = nand(G10gat, G16gat)

* Keywords and gate types in any case; ``AND OR NAND NOR XOR XNOR`` (alias ``NXOR``)
  with any fan-in, ``NOT`` (alias ``INV``), ``BUF``/``BUFF``; gates in any order.
* Signal names are whatever lies between the delimiters ``( ) , =`` and white space.
* Output order is the order of the ``OUTPUT`` lines.
* Constants follow ABC's convention: a signal named ``gnd`` / ``vdd`` that is used but
  never defined is the constant 0 / 1 (a ``CONST0`` / ``CONST1`` gate of that name).
  As a tm2nn extension, ``x = CONST0()`` / ``x = CONST1()`` also define constants.
* ``DFF`` (and other flip-flops and latches) are rejected: tm2nn handles
  combinational circuits.  Unknown gate types are errors too.

Writing (:func:`dump`): ``INPUT`` lines, ``OUTPUT`` lines, then one line per gate in
the circuit's gate order, upper-case types.  A ``CONST0`` gate named ``gnd`` (``CONST1``
named ``vdd``) is left implicit; other constant gates are written ``x = BUFF(gnd)``
(``vdd``), unless the circuit uses that name for another signal, in which case
``x = CONST0()`` is written.  So parse(dump(c)) computes the same function as ``c``,
and equals ``c`` when ``c`` has no constant gates other than ``gnd``/``vdd`` in use
(the ISCAS files have none).

Speed: plain lines are matched by one regular expression each (:func:`_parse_plain`);
a file with anything else, or with any error, is read again by the general reader,
which reports it where it always has.
"""

from __future__ import annotations

import re

from tm2nn.errors import Loc, Tm2nnError
from tm2nn.gc_pause import gc_paused
from tm2nn.ir.circuit import NULLARY, UNARY, Circuit, Gate
from tm2nn.source import SourceText
from tm2nn.syntax.aiger import circuit_name

KIND = "circuit"

_TOKEN = re.compile(r"[(),=]|[^\s(),=]+")
_NAME = re.compile(r"[^\s(),=#]+")

GATE_TYPES = {
    "AND": "AND", "NAND": "NAND", "OR": "OR", "NOR": "NOR", "XOR": "XOR", "XNOR": "XNOR",
    "NXOR": "XNOR", "NOT": "NOT", "INV": "NOT", "BUF": "BUF", "BUFF": "BUF",
    "CONST0": "CONST0", "CONST1": "CONST1",
}
_SEQUENTIAL = ("DFF", "LATCH", "DLATCH", "FF", "SDFF", "JKFF", "TFF", "SRFF")
_CONST_NAMES = {"gnd": "CONST0", "vdd": "CONST1"}
_FORMS = "expected 'INPUT(name)', 'OUTPUT(name)' or 'name = GATE(inputs, ...)'"


def parse(src: SourceText) -> list[Circuit]:
    with gc_paused():
        return [_parse_plain(src) or _parse(src)]


# The fast path: a file of plain lines (``INPUT(a)``, ``OUTPUT(a)``, ``y = GATE(a, b)``,
# blank lines and comments) without errors, read with one regular expression per line.
# It gives exactly what _parse gives, or None (anything else, and any error: the
# undefined constants gnd/vdd, an unknown gate, a wrong fan-in), and then _parse reads
# the file again and reports what it always has.
_PORT_LINE = re.compile(r"\s*([^\s(),=]+)\s*\(\s*([^\s(),=]+)\s*\)\s*")
_GATE_LINE = re.compile(r"\s*([^\s(),=]+)\s*=\s*([^\s(),=]+)\s*\(\s*([^\s(),=]+(?:\s*,\s*[^\s(),=]+)*)\s*\)\s*")
_ARG_SEP = re.compile(r"\s*,\s*")


def _parse_plain(src: SourceText) -> Circuit | None:
    """The circuit of a plain file, exactly as :func:`_parse` builds it; None otherwise."""
    inputs: list[str] = []
    outputs: list[str] = []
    port_locs: dict[str, Loc] = {}
    gates: list[Gate] = []
    loc, types, split = src.loc, GATE_TYPES, _ARG_SEP.split
    gate_line, port_line = _GATE_LINE.fullmatch, _PORT_LINE.fullmatch
    for i, raw in enumerate(src.text.splitlines(), 1):
        h = raw.find("#")
        text = raw if h < 0 else raw[:h]
        m = gate_line(text)
        if m is not None:
            op = types.get(m.group(2).upper())
            args = split(m.group(3))
            if op is None or (op in UNARY and len(args) != 1) or op in NULLARY:
                return None
            gates.append(Gate(m.group(1), op, tuple(args), loc(i, m.start(1) + 1)))
            continue
        if not text or text.isspace():
            continue
        m = port_line(text)
        if m is None:
            return None
        kind, name = m.group(1).upper(), m.group(2)
        if kind == "INPUT" and name not in port_locs:
            inputs.append(name)
            port_locs[name] = loc(i, m.start(2) + 1)
        elif kind == "OUTPUT":
            outputs.append(name)
            port_locs.setdefault("output:" + name, loc(i, m.start(2) + 1))
        else:
            return None
    try:
        return Circuit(circuit_name(src), tuple(inputs), tuple(outputs), tuple(gates),
                       loc=src.loc(1, 1), port_locs=port_locs)
    except Tm2nnError:  # an undefined signal or output (perhaps gnd/vdd), a cycle, ...
        return None


def _parse(src: SourceText) -> Circuit:
    lines = src.text.splitlines()
    inputs: list[str] = []
    outputs: list[tuple[str, int, int]] = []  # (name, line, col)
    port_locs: dict[str, Loc] = {}
    gates: list[Gate] = []
    uses: list[tuple[str, str, int, int]] = []  # (signal, used by, line, col)
    for i, raw in enumerate(lines):
        ln = i + 1
        h = raw.find("#")
        text = raw if h < 0 else raw[:h]
        if not text or text.isspace():
            continue
        toks = [(m.group(), m.start() + 1) for m in _TOKEN.finditer(text)]
        if not toks:
            continue
        end = len(text.rstrip()) + 1  # column just after the last token
        at = _Cols(toks, end)
        tok = _Toks(toks)
        t0 = tok(0)
        if tok(1) == "(" and t0.upper() in ("INPUT", "OUTPUT"):
            name = tok(2)
            if not _NAME.fullmatch(name):
                raise src.error(f"expected a signal name inside {t0}( )", ln, at(2))
            if tok(3) != ")":
                raise src.error(f"expected ')' after {t0}({name}", ln, at(3))
            if len(toks) > 4:
                raise src.error(f"unexpected {tok(4)!r} after {t0}({name})", ln, at(4))
            if t0.upper() == "INPUT":
                if name in port_locs:
                    prev = port_locs[name]
                    raise src.error(f"input {name!r} declared twice", ln, at(2),
                                    notes=(f"{prev}: note: first declaration is here",))
                inputs.append(name)
                port_locs[name] = src.loc(ln, at(2))
            else:
                outputs.append((name, ln, at(2)))
                port_locs.setdefault("output:" + name, src.loc(ln, at(2)))
            continue
        if not _NAME.fullmatch(t0):
            raise src.error(_FORMS, ln, at(0))
        if tok(1) != "=":
            raise src.error(f"{_FORMS}; missing '=' after {t0!r}" if len(toks) > 1
                            else _FORMS, ln, at(1))
        kind = tok(2)
        if not kind or kind in "(),=":
            raise src.error(f"expected a gate type after '{t0} ='", ln, at(2))
        op = GATE_TYPES.get(kind.upper())
        if op is None:
            if kind.upper().startswith(_SEQUENTIAL):
                raise src.error(f"sequential element {kind} is not supported: tm2nn handles "
                                "combinational circuits", ln, at(2))
            known = ", ".join(sorted(k for k in GATE_TYPES))
            raise src.error(f"unknown gate type {kind!r} (known: {known})", ln, at(2))
        if tok(3) != "(":
            raise src.error(f"expected '(' after the gate type {kind}", ln, at(3))
        args: list[str] = []
        k = 4
        if tok(k) == ")":
            k += 1
        else:
            while True:
                a = tok(k)
                if not _NAME.fullmatch(a):
                    raise src.error(f"expected a signal name in the inputs of {t0!r}", ln, at(k))
                args.append(a)
                uses.append((a, t0, ln, at(k)))
                k += 1
                sep = tok(k)
                k += 1
                if sep == ")":
                    break
                if sep != ",":
                    raise src.error("expected ',' or ')' in the input list", ln, at(k - 1))
        if k < len(toks):
            raise src.error(f"unexpected {tok(k)!r} after the gate", ln, at(k))
        n = len(args)
        if op in UNARY and n != 1:
            raise src.error(f"{kind} takes exactly one input, got {n}", ln, at(2))
        if op in NULLARY and n:
            raise src.error(f"{kind} takes no inputs, got {n}", ln, at(2))
        if op not in NULLARY and not n:
            raise src.error(f"{kind} needs at least one input", ln, at(2))
        gates.append(Gate(t0, op, tuple(args), src.loc(ln, at(0))))

    defined = set(inputs)
    defined.update(g.name for g in gates)
    for s, by, ln, col in uses:
        if s not in defined:
            if s in _CONST_NAMES:
                defined.add(s)
                gates.append(Gate(s, _CONST_NAMES[s], (), src.loc(ln, col)))
                continue
            raise src.error(f"undefined signal {s!r} (used by {by!r})", ln, col)
    for s, ln, col in outputs:
        if s not in defined:
            if s in _CONST_NAMES:
                defined.add(s)
                gates.append(Gate(s, _CONST_NAMES[s], (), src.loc(ln, col)))
                continue
            raise src.error(f"output {s!r} is never defined", ln, col)
    return Circuit(circuit_name(src), tuple(inputs), tuple(o for o, _, _ in outputs),
                   tuple(gates), loc=src.loc(1, 1), port_locs=port_locs)


class _Toks:
    """``tok(k)``: the k-th token of a line, or "" past the end."""

    __slots__ = ("toks",)

    def __init__(self, toks: list[tuple[str, int]]):
        self.toks = toks

    def __call__(self, k: int) -> str:
        return self.toks[k][0] if k < len(self.toks) else ""


class _Cols:
    """``at(k)``: the column of the k-th token, or just past the line's end."""

    __slots__ = ("toks", "end")

    def __init__(self, toks: list[tuple[str, int]], end: int):
        self.toks = toks
        self.end = end

    def __call__(self, k: int) -> int:
        return self.toks[k][1] if k < len(self.toks) else self.end


_WRITE = {"AND": "AND", "NAND": "NAND", "OR": "OR", "NOR": "NOR", "XOR": "XOR",
          "XNOR": "XNOR", "NOT": "NOT", "BUF": "BUFF"}


def dump(c: Circuit) -> str:
    """The circuit as ``.bench`` text (see the module docstring for constants)."""
    signals = set(c.inputs) | {g.name for g in c.gates}
    for s in sorted(signals | set(c.outputs)):
        if not _NAME.fullmatch(s):
            raise Tm2nnError(f"signal name {s!r} cannot be written in .bench (names cannot "
                             "contain white space or any of ( ) , = #)")
    driver = {g.name: g for g in c.gates}
    # The implicit constant names are usable unless the circuit means something else by them.
    implicit = {name: op for name, op in _CONST_NAMES.items()
                if name not in signals or (name in driver and driver[name].op == op)}
    const_name = {op: name for name, op in implicit.items()}
    out = [f"# {c.name}", f"# {len(c.inputs)} inputs, {len(c.outputs)} outputs, "
           f"{len(c.gates)} gates (written by tm2nn)"]
    out += [f"INPUT({x})" for x in c.inputs]
    out += [f"OUTPUT({y})" for y in c.outputs]
    for g in c.gates:
        if g.op in NULLARY:
            name = const_name.get(g.op)
            if name is None:
                out.append(f"{g.name} = {g.op}()")
            elif g.name != name:
                out.append(f"{g.name} = BUFF({name})")
            continue
        out.append(f"{g.name} = {_WRITE[g.op]}({', '.join(g.inputs)})")
    return "\n".join(out) + "\n"
