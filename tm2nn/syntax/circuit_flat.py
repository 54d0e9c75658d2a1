"""The fast path of the circuit language (``.circ``): flat texts, one gate per line.

The LALR parser of :mod:`tm2nn.syntax.circuit_dsl` reads about 10^4 lines a second;
a 10^6-gate circuit as ``tm2nn convert`` writes it would take minutes.  Such files use
a small part of the language, which this module reads with one regular expression per
line:

* ``circuit NAME {`` ... ``}`` blocks, or the items of one bare circuit;
* ``input a b "c[3]"`` / ``output ...``: names separated by white space (no commas, no
  vectors such as an unquoted ``c[8]``);
* ``name = OP(a, b, ...)`` (a call may continue over lines while its parenthesis is
  open), ``name = a`` and ``name = 0`` / ``1``;
* blank lines and ``#`` comments.

Names are identifiers (``c[03]`` is ``c[3]``, as in the grammar) or quoted names without
escapes; the words ``input``, ``output``, ``circuit``, ``learner`` and ``noisy_learner``
must be quoted.

The contract: :func:`parse_flat` returns exactly what the grammar path returns (the
same circuits, gates in the same order, the same locations), or None.  It returns None
as soon as a line is anything else (a nested or infix expression, a learner, a vector
declaration, an escape, anything unusual) and when the text has any error, so that the
grammar path reads the whole text again and reports the error exactly where it always
has.  Flat assignments never create internal ``y$k`` gates, so none are named here.
"""

from __future__ import annotations

import re
from pathlib import Path

from tm2nn.errors import Tm2nnError
from tm2nn.ir.circuit import Circuit, Gate
from tm2nn.source import SourceText

_W = r"[ \t\f\r]"  # the grammar's white space
_ID = r"[A-Za-z_][A-Za-z0-9_.$]*(?:\[[0-9]+\])?"
_SIG = rf'(?:{_ID}|"[^"\\\n]*")'
_OP = r"[A-Za-z_][A-Za-z0-9_.$]*"
_COMMENT = r"(?:#.*)?"
_ARG = rf"{_W}*{_SIG}{_W}*"
_ARGS = rf"{_ARG}(?:,{_ARG})*(?:,{_W}*)?"  # at least one argument, a trailing comma allowed

#: The common line, unquoted: ``  g12 = AND(g3, g7)  # comment``; group 3 is the
#: arguments from the first name to the last
_CALL_PLAIN = re.compile(
    rf"{_W}*({_ID}){_W}*={_W}*({_OP}){_W}*\({_W}*({_ID}(?:{_W}*,{_W}*{_ID})*){_W}*,?{_W}*\)"
    rf"{_W}*{_COMMENT}")
_COMMA = re.compile(rf"{_W}*,{_W}*")
_NAMES = re.compile(rf'"([^"\\\n]*)"|({_ID})')
_ASSIGN = re.compile(rf"{_W}*({_SIG}){_W}*={_W}*")
_CALL = re.compile(rf"({_OP}){_W}*\(({_ARGS})\){_W}*")
_CALL_OPEN = re.compile(rf"({_OP}){_W}*\(")
_SINGLE = re.compile(rf"({_SIG}|[01]){_W}*")
_DECL = re.compile(rf"{_W}*(input|output)((?:{_W}+{_SIG})+){_W}*")
_HEADER = re.compile(rf"{_W}*(circuit){_W}+({_SIG}){_W}*\{{{_W}*")
_BRACE = re.compile(rf"{_W}*\}}{_W}*")
_BLANK = re.compile(rf"{_W}*")
_CODE = re.compile(r'(?:[^"#\n]|"[^"\\\n]*")*')  # a line up to its comment
_QUOTED = re.compile(r'"[^"\\\n]*"')
_INDEXED = re.compile(r"([A-Za-z_][A-Za-z0-9_.$]*)\[([0-9]+)\]")

_KEYWORDS = frozenset({"input", "output", "circuit", "learner", "noisy_learner"})
_CALLS = {op: op for op in ("AND", "OR", "NOT", "XOR", "NAND", "NOR", "XNOR", "BUF")}


class _Unusual(Exception):
    """The text leaves the fast path's forms, or has an error: use the grammar."""


def parse_flat(src: SourceText) -> list[Circuit] | None:
    """The circuits of ``src`` when it is a flat text (see the module docstring) without
    errors, exactly as the grammar path gives them; else None."""
    try:
        return _Reader(src).read()
    except (_Unusual, Tm2nnError):
        return None


def _name(text: str) -> str:
    """A name token as the grammar reads it: unquoted, ``base[index]`` with the index's
    leading zeros dropped; quoted, the text between the quotes."""
    if text[0] == '"':
        if len(text) == 2:
            raise _Unusual  # the empty name is an error
        return text[1:-1]
    if text in _KEYWORDS:
        raise _Unusual
    if "[" in text:
        base, index = _INDEXED.fullmatch(text).groups()
        if len(index.lstrip("0")) > 18:
            raise _Unusual  # "index too large"
        return f"{base}[{int(index)}]"
    return text


def _plain_args(text: str) -> list[str]:
    """The names of group 3 of :data:`_CALL_PLAIN`."""
    args = _COMMA.split(text)
    if "[" in text or not _KEYWORDS.isdisjoint(args):
        args = [_name(a) for a in args]
    return args


def _arg_names(text: str) -> list[str]:
    """The names of an argument list already checked against :data:`_ARGS`."""
    return [_name(m.group()) for m in _NAMES.finditer(text)]


def _code(line: str) -> str:
    """``line`` without its comment (a ``#`` outside quotes starts one)."""
    if '"' not in line:
        h = line.find("#")
        return line if h < 0 else line[:h]
    m = _CODE.match(line)
    if m.end() < len(line) and line[m.end()] != "#":
        raise _Unusual  # an unterminated quote
    return m.group()


class _Reader:
    """One pass over the lines; raises :class:`_Unusual` on anything else."""

    def __init__(self, src: SourceText):
        self.src = src
        self.lines = src.text.split("\n")  # the grammar's lines: only \n ends one
        self.i = 0

    def read(self) -> list[Circuit]:
        lines = self.lines
        first = self._next_code()
        if first is None:
            raise _Unusual  # no items: the grammar path says what is missing
        m = _HEADER.fullmatch(_code(lines[first]))
        if m is None:
            self.i = first
            circuit = self._items(None, Path(self.src.path).stem or "circuit")
            if self._next_code() is not None:
                raise _Unusual
            return [circuit]
        circuits: list[Circuit] = []
        names: set[str] = set()
        while first is not None:
            m = _HEADER.fullmatch(_code(lines[first]))
            if m is None:
                raise _Unusual
            name = _name(m.group(2))
            if name in names:
                raise _Unusual  # defined twice
            names.add(name)
            self.i = first + 1
            circuits.append(self._items((first + 1, m.start(1) + 1), name))
            first = self._next_code()
        return circuits

    def _next_code(self) -> int | None:
        """The index of the next line with something other than space and comments."""
        lines, i = self.lines, self.i
        while i < len(lines):
            line = lines[i]
            if line and not _BLANK.fullmatch(_code(line)):
                self.i = i
                return i
            i += 1
        self.i = i
        return None

    def _items(self, block: tuple[int, int] | None, name: str) -> Circuit:
        """The items from line ``self.i`` to the block's ``}`` (``block`` = the position of
        its ``circuit`` keyword) or, for a bare circuit, to the end."""
        src, lines = self.src, self.lines
        loc = src.loc
        inputs: list[str] = []
        outputs: list[str] = []
        port_locs: dict = {}
        gates: list[Gate] = []
        first_line = None
        plain, calls, add = _CALL_PLAIN.fullmatch, _CALLS, gates.append
        n = len(lines)
        i = self.i
        while i < n:
            line = lines[i]
            i += 1
            m = plain(line)
            if m is not None:
                target, op, text = m.groups()
                op = calls.get(op.upper())
                args = _plain_args(text)
                if op is None or ((op == "NOT" or op == "BUF") and len(args) != 1):
                    raise _Unusual
                if target in _KEYWORDS or "[" in target:
                    target = _name(target)
                add(Gate(target, op, tuple(args), loc(i, m.start(1) + 1)))
                first_line = first_line or i
                continue
            body = _code(line)
            if not body or _BLANK.fullmatch(body):
                continue
            if block is not None and _BRACE.fullmatch(body):
                self.i = i
                return self._circuit(name, inputs, outputs, gates, port_locs, loc(*block))
            d = _DECL.fullmatch(body)
            if d is not None:
                self._ports(d, i, inputs if d.group(1) == "input" else None, outputs, port_locs)
                first_line = first_line or i
                continue
            first_line = first_line or i
            i = self._assign(body, i, gates)
        if block is not None:
            raise _Unusual  # the block is not closed
        self.i = i
        return self._circuit(name, inputs, outputs, gates, port_locs, loc(first_line or 1, 1))

    def _ports(self, d: re.Match, line: int, inputs: list[str] | None, outputs: list[str],
               port_locs: dict) -> None:
        """One ``input`` (``inputs`` given) or ``output`` declaration."""
        body = d.string
        for m in _NAMES.finditer(body, d.start(2), d.end(2)):
            if m.group(2) is not None and "[" in m.group(2):
                raise _Unusual  # a vector declaration
            n = _name(m.group())
            here = self.src.loc(line, m.start() + 1)
            if inputs is not None:
                if n in port_locs:
                    raise _Unusual  # declared twice
                port_locs[n] = here
                inputs.append(n)
            else:
                port_locs.setdefault("output:" + n, here)
                outputs.append(n)

    def _assign(self, body: str, line: int, gates: list[Gate]) -> int:
        """``target = OP(...)`` (perhaps over several lines), ``target = a`` or ``target =
        0/1`` on line ``line`` (1-based); returns the index of the line after it."""
        m = _ASSIGN.match(body)
        if m is None:
            raise _Unusual
        target, at = _name(m.group(1)), self.src.loc(line, m.start(1) + 1)
        rhs = body[m.end():]
        c = _CALL.fullmatch(rhs)
        if c is None and _CALL_OPEN.match(rhs) and not _closes(rhs):
            rhs, line = self._continued(rhs, line)
            c = _CALL.fullmatch(rhs)
        if c is not None:
            op = _CALLS.get(c.group(1).upper())
            args = _arg_names(c.group(2))
            if op is None or ((op == "NOT" or op == "BUF") and len(args) != 1):
                raise _Unusual
            gates.append(Gate(target, op, tuple(args), at))
            return line
        s = _SINGLE.fullmatch(rhs)
        if s is None:
            raise _Unusual
        value = s.group(1)
        if value == "0" or value == "1":
            gates.append(Gate(target, "CONST" + value, (), at))
        else:
            gates.append(Gate(target, "BUF", (_name(value),), at))
        return line

    def _continued(self, rhs: str, line: int) -> tuple[str, int]:
        """A call whose parenthesis stays open: the lines up to the one that closes it,
        joined by spaces (the grammar drops newlines inside parentheses)."""
        parts = [rhs]
        lines = self.lines
        while line < len(lines):
            body = _code(lines[line])
            line += 1
            parts.append(body)
            if _closes(body):
                return " ".join(parts), line
        raise _Unusual  # the file ends inside the call

    def _circuit(self, name, inputs, outputs, gates, port_locs, loc) -> Circuit:
        return Circuit(name, tuple(inputs), tuple(outputs), tuple(gates), loc=loc,
                       port_locs=port_locs)


def _closes(text: str) -> bool:
    """Whether ``text`` has a ``)`` outside quotes."""
    if '"' in text:
        text = _QUOTED.sub("", text)
    return ")" in text
