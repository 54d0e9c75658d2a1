"""Binary AIGER (``.aig``) importer.

Layout (AIGER report, "Binary Format Definition"): an ASCII header line
``aig M I L O A [B C J F]`` with ``M = I + L + A``; inputs are implicit (literals
2, 4, ..., 2I); then the ``O`` output literals as ASCII lines; then the ``A`` AND
gates, gate ``k`` having ``lhs = 2(I + L + k + 1)`` and two LEB128-style varints
``delta0 = lhs - rhs0``, ``delta1 = rhs0 - rhs1`` (so ``lhs > rhs0 >= rhs1``); then
the optional ASCII symbol table and comment section.

Latches and properties are rejected (see :func:`tm2nn.syntax.aiger.parse_header`).
The AIG -> Circuit construction and naming are those of :mod:`tm2nn.syntax.aiger`.
Errors in the binary AND section cannot point at a meaningful line: they are
reported at the header's ``A`` field and give the byte offset in the message.
"""

from __future__ import annotations

from tm2nn.errors import Loc, Tm2nnError
from tm2nn.gc_pause import gc_paused
from tm2nn.ir.circuit import Circuit
from tm2nn.source import SourceText
from tm2nn.syntax.aiger import (
    Symbols,
    build_circuit,
    not_a_number,
    number,
    parse_header,
    parse_trailer,
    tokens,
)

KIND = "circuit"

MAX_INPUTS = 1_000_000
_MAX_VARINT_BYTES = 10  # 70 bits: far beyond any literal a file could define


def parse(src: SourceText) -> list[Circuit]:
    with gc_paused():
        return [_parse_binary(src)]


def _parse_binary(src: SourceText) -> Circuit:
    data = src.data
    n = len(data)
    line_text: dict[int, str] = {}  # the lines we quote in errors, decoded as we read them

    def err(message: str, line: int, col: int) -> Tm2nnError:
        return Tm2nnError(message, file=src.path, line=line, col=col, snippet=line_text.get(line))

    nl = data.find(b"\n")
    head = (data if nl < 0 else data[:nl]).decode("ascii", errors="replace")
    line_text[1] = head
    h = parse_header(head, err)
    if h.fmt != "aig":
        raise err("expected a binary AIGER header 'aig ...'", 1, 1)
    if nl < 0:
        raise err("the header line must end with a newline", 1, len(head) + 1)
    if h.M != h.I + h.L + h.A:
        raise err(f"binary AIGER needs M = I + L + A, but M = {h.M} and I + L + A = "
                  f"{h.I + h.L + h.A}", 1, h.cols["M"])
    if h.I > MAX_INPUTS:
        raise err(f"I = {h.I} inputs is more than tm2nn accepts ({MAX_INPUTS}); the binary "
                  "format declares inputs without listing them, so this is refused before "
                  "allocating them", 1, h.cols["I"])
    maxlit = 2 * h.M + 1
    pos = nl + 1
    ln = 1

    outputs: list[tuple[int, Loc]] = []
    for k in range(h.O):
        ln += 1
        e = data.find(b"\n", pos)
        if e < 0:
            tail = data[pos:].decode("ascii", errors="replace")
            line_text[ln] = tail
            raise err(f"file ends early: expected output {k} of {h.O} as a literal on its own "
                      "line", ln, len(tail) + 1)
        text = data[pos:e].decode("ascii", errors="replace")
        line_text[ln] = text
        pos = e + 1
        toks = tokens(text)
        if len(toks) != 1:
            col = toks[1][1] if len(toks) > 1 else 1
            raise err(f"expected one output literal (output {k} of {h.O}), found {len(toks)} "
                      "field(s)", ln, col)
        tok, col = toks[0]
        lit = number(tok)
        if lit is None:
            raise err(not_a_number("an output literal", tok), ln, col)
        if lit > maxlit:
            raise err(f"literal {lit} exceeds the maximum 2*M+1 = {maxlit}", ln, col)
        outputs.append((lit, src.loc(ln, col)))

    # The AND section.  A well-formed file defines every variable, so the only
    # checks are the ranges of the deltas (which also make the graph acyclic).
    a_col = h.cols["A"]
    and_loc = src.loc(1, a_col)
    ands: list[tuple[int, int, int, Loc]] = []
    lhs = 2 * (h.I + h.L)
    for k in range(h.A):
        lhs += 2
        deltas = []
        for which in (0, 1):
            start = pos
            x = 0
            shift = 0
            while True:
                if pos >= n:
                    raise err(f"truncated binary AND section: file ends inside delta{which} of "
                              f"AND gate {k} of {h.A} (byte offset {start})", 1, a_col)
                b = data[pos]
                pos += 1
                x |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift >= 7 * _MAX_VARINT_BYTES:
                    raise err(f"malformed varint for delta{which} of AND gate {k} at byte offset "
                              f"{start}: longer than {_MAX_VARINT_BYTES} bytes", 1, a_col)
            deltas.append((x, start))
        (d0, off0), (d1, off1) = deltas
        if not 1 <= d0 <= lhs:
            raise err(f"AND gate {k} (literal {lhs}): delta0 = {d0} at byte offset {off0} is out "
                      f"of range 1..{lhs} (rhs0 must be below lhs)", 1, a_col)
        r0 = lhs - d0
        if d1 > r0:
            raise err(f"AND gate {k} (literal {lhs}): delta1 = {d1} at byte offset {off1} "
                      f"exceeds rhs0 = {r0} (rhs1 would be negative)", 1, a_col)
        ands.append((lhs, r0, r0 - d1, and_loc))

    # Symbol table and comments: ASCII lines again.  Line numbers count the
    # newlines before this point (the binary section may contain some).
    base_line = data.count(b"\n", 0, pos) + 1
    line_start = data.rfind(b"\n", 0, pos) + 1

    def trailer():
        ln = base_line
        start = pos
        while start < n:
            e = data.find(b"\n", start)
            if e < 0:
                e = n
            text = data[start:e].decode("utf-8", errors="replace")
            line_text[ln] = (data[line_start:e].decode("utf-8", errors="replace")
                             if ln == base_line else text)
            yield ln, text
            ln += 1
            start = e + 1

    def trailer_err(message: str, line: int, col: int) -> Tm2nnError:
        if line == base_line:  # the first trailer line may start mid-line after the binary data
            col += pos - line_start
        return err(message, line, col)

    syms: Symbols = parse_trailer(src, trailer(), h, trailer_err)
    in_loc = src.loc(1, h.cols["I"])
    inputs = [(2 * (i + 1), in_loc) for i in range(h.I)]
    return build_circuit(src, inputs=inputs, ands=ands, outputs=outputs, symbols=syms,
                         err=trailer_err)

