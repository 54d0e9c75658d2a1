"""ASCII AIGER (``.aag``) importer, and the AIG -> Circuit builder shared with
:mod:`tm2nn.syntax.aiger_binary`.

Format: the AIGER 1.9 report (``aag M I L O A`` with the optional ``B C J F``
extension).  Supported: combinational AIGs (``L = 0``) without properties
(``B = C = J = F = 0``); inputs, outputs, AND lines, the symbol table and the
comment section.  Latches and properties are rejected with a clear error.

How the AIG becomes a :class:`~tm2nn.ir.Circuit`:

* input ``k`` is named by its symbol ``i<k>`` if the symbol table has one, else ``i<k>``;
  output ``k`` likewise by ``o<k>`` or its symbol;
* an AND with left-hand side ``2v`` is an ``AND`` gate named ``n<v>``, or named like the
  first output whose literal is exactly ``2v`` (so a plain output costs no extra gate);
* a negated literal ``2v+1`` is one ``NOT`` gate per variable, shared by all its uses,
  named ``not_<name of 2v>`` (or like the first output that is exactly ``2v+1``);
* literals 0 / 1 become ``CONST0`` / ``CONST1`` gates (one each, on first use);
* an output whose literal already has a signal under another name (an input, an
  earlier output with the same literal) is a ``BUF`` named as the output.

Generated names never collide with symbol-table names: a clash appends ``_``.
Two different signals given the same name by the symbol table are an error.

Speed: an AND section of plain lines (``lhs rhs0 rhs1``, single spaces) is read and
checked with array operations (:func:`_plain_ands`); any other section, or one with an
error, is read line by line, which reports the error where it always has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from tm2nn.errors import Loc, Tm2nnError
from tm2nn.gc_pause import gc_paused
from tm2nn.ir.circuit import Circuit, Gate
from tm2nn.source import SourceText

KIND = "circuit"

_TOKEN = re.compile(r"\S+")

# err(message, line, col) -> Tm2nnError; lets the binary reader quote its own lines.
ErrorFn = Callable[[str, int, int], Tm2nnError]

_HEADER_FIELDS = ("M", "I", "L", "O", "A", "B", "C", "J", "F")
_PROPERTY_WHAT = {
    "B": "bad-state properties",
    "C": "invariant constraints",
    "J": "justice properties",
    "F": "fairness constraints",
}


def circuit_name(src: SourceText) -> str:
    """The circuit's name: the file stem of the source path."""
    return Path(src.path).stem or "circuit"


def tokens(text: str) -> list[tuple[str, int]]:
    """Whitespace-separated tokens with their 1-based columns."""
    return [(m.group(), m.start() + 1) for m in _TOKEN.finditer(text)]


MAX_DIGITS = 100  # longer numbers cannot be meaningful (and int() refuses > 4300 digits)


def number(tok: str) -> int | None:
    """A non-negative ASCII decimal of at most MAX_DIGITS digits, or None."""
    if tok.isascii() and tok.isdigit() and len(tok) <= MAX_DIGITS:
        return int(tok)
    return None


def not_a_number(what: str, tok: str) -> str:
    """The message for a token where a number was expected."""
    if tok.isascii() and tok.isdigit():
        return f"{what} has {len(tok)} digits; at most {MAX_DIGITS} are accepted"
    return f"{what} must be a non-negative integer, got {_short(tok)!r}"


@dataclass(frozen=True)
class Header:
    fmt: str  # "aag" or "aig"
    M: int
    I: int  # noqa: E741
    L: int
    O: int  # noqa: E741
    A: int
    cols: dict[str, int]  # column of each field in the header line


def parse_header(text: str, err: ErrorFn) -> Header:
    """Parse line 1, ``aag|aig M I L O A [B C J F]``; reject latches and properties."""
    toks = tokens(text)
    if not toks:
        raise err("expected an AIGER header 'aag M I L O A' (or 'aig ...' for binary AIGER)", 1, 1)
    fmt, col = toks[0]
    if fmt not in ("aag", "aig"):
        raise err(
            f"expected an AIGER header 'aag M I L O A' (or 'aig ...'), found {_short(fmt)!r}", 1, col
        )
    vals: dict[str, int] = {}
    cols: dict[str, int] = {}
    for i, (tok, col) in enumerate(toks[1:]):
        if i >= len(_HEADER_FIELDS):
            raise err("too many numbers in the AIGER header (at most 9: M I L O A B C J F)", 1, col)
        v = number(tok)
        field_name = _HEADER_FIELDS[i]
        if v is None:
            raise err(not_a_number(f"header field {field_name}", tok), 1, col)
        vals[field_name] = v
        cols[field_name] = col
    if len(vals) < 5:
        missing = " ".join(_HEADER_FIELDS[len(vals):5])
        raise err(f"the AIGER header needs 5 numbers 'M I L O A'; missing {missing}", 1,
                  len(text.rstrip()) + 1)
    if vals["L"]:
        raise err(
            f"latches (sequential) not supported yet: L = {vals['L']}; "
            "tm2nn handles combinational circuits (L = 0)", 1, cols["L"])
    for f, what in _PROPERTY_WHAT.items():
        if vals.get(f):
            raise err(f"{what} ({f} = {vals[f]}) are not supported: tm2nn imports plain "
                      "combinational AIGs (B = C = J = F = 0)", 1, cols[f])
    need = vals["I"] + vals["L"] + vals["A"]
    if vals["M"] < need:
        raise err(f"maximum variable index M = {vals['M']} is too small: I + L + A = {need} "
                  "variables are defined", 1, cols["M"])
    return Header(fmt, vals["M"], vals["I"], vals["L"], vals["O"], vals["A"], cols)


def _short(s: str, n: int = 30) -> str:
    return s if len(s) <= n else s[:n] + "..."


@dataclass
class Symbols:
    inputs: dict[int, tuple[str, Loc]]
    outputs: dict[int, tuple[str, Loc]]


def parse_trailer(src: SourceText, lines: Iterable[tuple[int, str]], h: Header,
                  err: ErrorFn) -> Symbols:
    """The symbol table (``[ilo]<pos> <name>`` lines) up to the comment section (``c``).

    ``lines`` yields (line number, text); reading stops at the comment header, so
    comments (arbitrary bytes) are never decoded.  Blank lines are skipped.
    """
    syms = Symbols({}, {})
    for ln, text in lines:
        text = text.rstrip("\r")
        if not text.strip():
            continue
        kind = text[0]
        if kind == "c" and not text[1:2].isdigit():
            break  # comment section: the rest of the file is free text
        if kind not in "ilobcjf":
            raise err(f"expected a symbol table entry '[ilo]<pos> <name>' or the comment header "
                      f"'c', found {_short(text)!r}", ln, 1)
        sp = text.find(" ")
        pos_text = text[1:] if sp < 0 else text[1:sp]
        pos = number(pos_text)
        if pos is None:
            raise err(f"symbol table entry needs a position right after {kind!r}, "
                      f"e.g. '{kind}0 name'", ln, 2)
        if sp < 0 or sp == len(text) - 1:
            raise err(f"symbol table entry {text[:sp] if sp >= 0 else text!r} has no name", ln,
                      len(text) + 1)
        name = text[sp + 1:]
        if kind == "i":
            table, count, what = syms.inputs, h.I, "inputs"
        elif kind == "o":
            table, count, what = syms.outputs, h.O, "outputs"
        else:
            what = {"l": "latches", "b": "bad-state properties", "c": "constraints",
                    "j": "justice properties", "f": "fairness constraints"}[kind]
            raise err(f"symbol for {what} {kind}{pos}, but the circuit has no {what}", ln, 1)
        if pos >= count:
            raise err(f"symbol position {kind}{pos} is out of range: there are {count} {what}",
                      ln, 2)
        if pos in table:
            raise err(f"second symbol for {kind}{pos} (first: {table[pos][0]!r})", ln, 1)
        table[pos] = (name, src.loc(ln, sp + 2))
    return syms


def build_circuit(
    src: SourceText,
    *,
    inputs: list[tuple[int, Loc]],
    ands: list[tuple[int, int, int, Loc]],
    outputs: list[tuple[int, Loc]],
    symbols: Symbols,
    err: ErrorFn,
) -> Circuit:
    """Turn a well-formed AIG into a Circuit (see the module docstring for the naming).

    ``inputs``: (even literal, loc); ``ands``: (lhs, rhs0, rhs1, loc); ``outputs``:
    (literal, loc).  The caller has checked that every literal used is defined.
    """
    taken: set[str] = {n for n, _ in symbols.inputs.values()}
    taken.update(n for n, _ in symbols.outputs.values())

    def fresh(base: str) -> str:
        while base in taken:
            base += "_"
        taken.add(base)
        return base

    in_names = [symbols.inputs[k][0] if k in symbols.inputs else fresh(f"i{k}")
                for k in range(len(inputs))]
    out_names = [symbols.outputs[k][0] if k in symbols.outputs else fresh(f"o{k}")
                 for k in range(len(outputs))]

    names: dict[int, str] = {}  # literal -> the name of its signal
    made: dict[int, str] = {}  # literals whose signal exists (input or gate created)
    claim: dict[str, int] = {}  # signal name -> literal
    port_locs: dict[str, Loc] = {}

    def where(table: dict[int, tuple[str, Loc]], k: int, loc: Loc) -> tuple[int, int]:
        at = table[k][1] if k in table else loc
        return at.line, at.col

    for k, (lit, loc) in enumerate(inputs):
        nm = in_names[k]
        if nm in claim:
            raise err(f"two inputs are named {nm!r}", *where(symbols.inputs, k, loc))
        claim[nm] = lit
        names[lit] = made[lit] = nm
        port_locs[nm] = loc
    bufs: list[tuple[str, int, Loc]] = []
    for k, (lit, loc) in enumerate(outputs):
        nm = out_names[k]
        port_locs.setdefault("output:" + nm, loc)
        if nm in claim:
            if claim[nm] != lit:
                raise err(f"output {k} is named {nm!r}, but that name already stands for a "
                          "different signal", *where(symbols.outputs, k, loc))
            continue  # the same signal listed again
        claim[nm] = lit
        if lit in names:
            bufs.append((nm, lit, loc))
        else:
            names[lit] = nm
    for lhs, _, _, _ in ands:
        if lhs not in names:
            nm = f"n{lhs >> 1}"
            if nm in taken:
                nm = fresh(nm)
            else:
                taken.add(nm)
            names[lhs] = nm

    gates: list[Gate] = []

    def sig(lit: int, loc: Loc) -> str:
        s = made.get(lit)
        if s is not None:
            return s
        if lit < 2:
            nm = names.get(lit) or fresh(f"const{lit}")
            gates.append(Gate(nm, "CONST1" if lit else "CONST0", (), loc))
        else:  # a negated literal (positive ones are inputs or ANDs, made or named)
            base = names[lit ^ 1]
            nm = names.get(lit) or fresh(f"not_{base}")
            gates.append(Gate(nm, "NOT", (base,), loc))
        made[lit] = nm
        return nm

    made_get, add = made.get, gates.append
    for lhs, r0, r1, loc in ands:  # the hot loop: sig() only for a literal not made yet
        a = names[r0] if r0 > 1 and not r0 & 1 else made_get(r0) or sig(r0, loc)
        b = names[r1] if r1 > 1 and not r1 & 1 else made_get(r1) or sig(r1, loc)
        nm = names[lhs]
        made[lhs] = nm
        add(Gate(nm, "AND", (a, b), loc))
    for lit, loc in outputs:
        if lit & 1 or lit < 2:
            sig(lit, loc)
    for nm, lit, loc in bufs:
        src_sig = sig(lit, loc) if lit & 1 or lit < 2 else names[lit]
        gates.append(Gate(nm, "BUF", (src_sig,), loc))
    return Circuit(circuit_name(src), tuple(in_names), tuple(out_names), tuple(gates),
                   loc=src.loc(1, 1), port_locs=port_locs)


# --------------------------------------------------------------------------- ASCII


def parse(src: SourceText) -> list[Circuit]:
    with gc_paused():
        return [_parse_ascii(src)]


def _parse_ascii(src: SourceText) -> Circuit:
    lines = src.lines
    err: ErrorFn = src.error
    h = parse_header(lines[0] if lines else "", err)
    if h.fmt != "aag":
        raise err("expected an ASCII AIGER header 'aag ...'", 1, 1)
    maxlit = 2 * h.M + 1
    pos = 1  # index into lines of the next line

    def line_nums(count: int, what: str) -> tuple[int, list[tuple[int, int]]]:
        nonlocal pos
        if pos >= len(lines):
            last = len(lines)
            raise err(f"file ends early: expected {what}", last,
                      len(lines[-1]) + 1 if lines else 1)
        ln = pos + 1
        text = lines[pos]
        pos += 1
        toks = tokens(text)
        if len(toks) != count:
            col = toks[count][1] if len(toks) > count else len(text.rstrip()) + 1
            want = "one literal" if count == 1 else f"{count} literals"
            raise err(f"expected {want} ({what}), found {len(toks)} field(s)", ln, col)
        out = []
        for tok, col in toks:
            v = number(tok)
            if v is None:
                raise err(not_a_number("a literal", tok), ln, col)
            if v > maxlit:
                raise err(f"literal {v} exceeds the maximum 2*M+1 = {maxlit}", ln, col)
            out.append((v, col))
        return ln, out

    defined: dict[int, tuple[int, int]] = {}  # variable -> (line, col) of its definition
    inputs: list[tuple[int, Loc]] = []
    for k in range(h.I):
        ln, [(lit, col)] = line_nums(1, f"input {k} of {h.I}")
        _check_def(err, defined, lit, ln, col, "input")
        inputs.append((lit, src.loc(ln, col)))
    outputs: list[tuple[int, Loc]] = []
    uses: list[tuple[int, int, int]] = []  # (literal, line, col) to check once all is defined
    for k in range(h.O):
        ln, [(lit, col)] = line_nums(1, f"output {k} of {h.O}")
        outputs.append((lit, src.loc(ln, col)))
        uses.append((lit, ln, col))
    ands = _plain_ands(src, lines, pos, h.A, maxlit, defined)
    if ands is not None:
        pos += h.A
    else:
        ands = []
        for k in range(h.A):
            ln, [(lhs, c0), (r0, c1), (r1, c2)] = line_nums(3, f"AND gate {k} of {h.A}: 'lhs rhs0 rhs1'")
            _check_def(err, defined, lhs, ln, c0, "AND")
            ands.append((lhs, r0, r1, src.loc(ln, c0)))
            uses.append((r0, ln, c1))
            uses.append((r1, ln, c2))
    for lit, ln, col in uses:
        if lit > 1 and (lit >> 1) not in defined:
            raise err(f"undefined literal {lit}: variable {lit >> 1} is neither an input nor "
                      "the left-hand side of an AND", ln, col)
    syms = parse_trailer(src, ((i + 1, lines[i]) for i in range(pos, len(lines))), h, err)
    return build_circuit(src, inputs=inputs, ands=ands, outputs=outputs, symbols=syms, err=err)


_PLAIN_ANDS = re.compile(r"(?:[0-9]{1,18} [0-9]{1,18} [0-9]{1,18}\n)*[0-9]{1,18} [0-9]{1,18} [0-9]{1,18}")


def _plain_ands(src: SourceText, lines: list[str], pos: int, count: int, maxlit: int,
                defined: dict[int, tuple[int, int]]) -> list[tuple[int, int, int, Loc]] | None:
    """The fast path for the ``count`` AND lines from ``lines[pos]``: when each is plain
    ``lhs rhs0 rhs1`` (single spaces, at most 18 digits) and the section is valid (even,
    new left-hand sides; every literal at most ``maxlit`` and defined), the ANDs as the
    line-by-line loop makes them, checked with array operations, and ``defined``
    updated; else None, and that loop reads the section and reports its first error."""
    if count == 0:
        return []
    if pos + count > len(lines):
        return None
    block = "\n".join(lines[pos:pos + count])
    if _PLAIN_ANDS.fullmatch(block) is None:
        return None
    import numpy as np

    lits = np.fromstring(block, dtype=np.int64, sep=" ").reshape(count, 3)
    lhs = lits[:, 0]
    if lits.max() > maxlit or (lhs & 1).any() or not lhs.all():
        return None
    var = lhs >> 1
    known = np.concatenate([np.fromiter(defined, dtype=np.int64, count=len(defined)), var])
    if np.unique(known).size != known.size:  # a variable defined twice
        return None
    used = lits[:, 1:].ravel()
    if not np.isin(used[used > 1] >> 1, known).all():
        return None
    first = pos + 1  # the line number of the first AND
    defined.update(zip(var.tolist(), ((ln, 1) for ln in range(first, first + count))))
    loc = src.loc
    return [(a, b, c, loc(ln, 1)) for ln, (a, b, c) in enumerate(lits.tolist(), first)]


def _check_def(err: ErrorFn, defined: dict[int, tuple[int, int]], lit: int, ln: int, col: int,
               what: str) -> None:
    if lit & 1:
        raise err(f"{what} literal {lit} is odd (negated); it must be even", ln, col)
    if lit == 0:
        raise err(f"{what} literal 0 is the constant FALSE and cannot be defined", ln, col)
    prev = defined.get(lit >> 1)
    if prev is not None:
        raise err(f"variable {lit >> 1} (literal {lit}) is defined twice; first definition at "
                  f"line {prev[0]}", ln, col)
    defined[lit >> 1] = (ln, col)
