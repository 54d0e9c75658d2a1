"""What reading a source may cost, checked before a parser starts (issue 40).

* **Words.**  A word (a run of characters between white space and the format's
  punctuation: a name, a symbol, a number) is at most :data:`MAX_WORD_BYTES` bytes of
  UTF-8.  A longer one is a located error at its first character, found by one scan of the
  bytes before anything is parsed (a 100 MB state name took 6.7 GB to parse).
* **Memory.**  A parse keeps its whole source as Python objects: tokens, a parse tree or
  the items a line reader builds, and the IR.  :func:`parse_estimate` bounds its peak from
  the source's size and the number of separators in it (each one may start a token), with
  factors measured per format (docs/formats.md, "What a parse may cost"), and
  :func:`check_source` refuses a source over :func:`tm2nn.limits.memory_limit` with the
  estimate and the flag to raise (``--max-memory``).  The ``.circ`` grammar (the path for
  text that is not one flat gate a line) costs more than its line reader; it is checked
  again, with its own factors, before it starts (:func:`check_grammar`).

The estimates do not count the fixed cost of starting tm2nn and building a parser (about
100 MiB of Python, lark and numpy), which the limit does not cover.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tm2nn.errors import Tm2nnError
from tm2nn.limits import check_memory, human
from tm2nn.source import SourceText

#: Longest word (name, symbol, number) any text format reads, in bytes of UTF-8.
MAX_WORD_BYTES = 4096


@dataclass(frozen=True)
class Cost:
    """A parse's peak memory: ``per_byte`` bytes for each byte of source plus ``per_sep``
    for each separator (a byte of ``seps``)."""

    per_byte: int
    per_sep: int
    seps: bytes = b" \t\n"

    def estimate(self, data: bytes) -> int:
        return self.per_byte * len(data) + self.per_sep * sum(data.count(c) for c in self.seps)


#: Measured peak memory of each format's parser (worst shape measured, with a margin).
COSTS: dict[str, Cost] = {
    "tm": Cost(100, 500),
    "circ": Cost(40, 500, b" \t\n,"),  # the line reader of flat text; the grammar: GRAMMAR_COST
    "bench": Cost(40, 400, b" \t\n(,"),
    "blif": Cost(60, 400),
    "aag": Cost(100, 500),
    "aig": Cost(400, 0),
    "morphett": Cost(60, 400),
    "tmio": Cost(200, 1000, b" \t\n:,{}"),
    "std": Cost(200, 1000, b" \t\n_"),
}
#: The ``.circ`` grammar: every operator, parenthesis and comma may make a node (``~~~a``).
GRAMMAR_COST = Cost(40, 1200, b" \t\n~(&|^,")

#: Per format, the bytes that end a word (besides white space).  ``aig`` is binary.
_BREAKS: dict[str, bytes] = {
    "tm": rb"#*{}':",
    "circ": rb"#(),=&|^~\"{}",
    "bench": rb"#(),=",
    "blif": rb"#\\",
    "aag": rb"",
    "morphett": rb";",
    "tmio": rb":,\[\]{}'\"#",
    "std": rb"",
}
_LONG_WORD = {fmt: re.compile(rb"[^\s" + breaks + rb"]{%d,}" % (MAX_WORD_BYTES + 1))
              for fmt, breaks in _BREAKS.items()}
#: A BLIF cover row (``0101-1``) is as long as its gate's fan-in, not a name.
_COVER_ROW = re.compile(rb"[01-]+")


def check_source(src: SourceText, fmt: str) -> None:
    """Refuse ``src`` (to be read as ``fmt``) with a word over :data:`MAX_WORD_BYTES`, or
    a parse estimated over the memory limit; before anything is parsed."""
    check_words(src, fmt)
    cost = COSTS.get(fmt)
    if cost is not None:
        _check(src, fmt, cost.estimate(src.data))


def check_grammar(src: SourceText) -> None:
    """Refuse a ``.circ`` text the grammar would read at a cost over the memory limit."""
    _check(src, "circ", GRAMMAR_COST.estimate(src.data))


def parse_estimate(data: bytes, fmt: str) -> int:
    """Bytes a parse of ``data`` as ``fmt`` may peak at (the larger of the ``.circ`` paths)."""
    est = COSTS[fmt].estimate(data)
    return max(est, GRAMMAR_COST.estimate(data)) if fmt == "circ" else est


def _check(src: SourceText, fmt: str, nbytes: int) -> None:
    check_memory(nbytes, f"reading {src.path} ({human(len(src.data))} of {fmt} text)")


def check_words(src: SourceText, fmt: str) -> None:
    """A located error at the first word of ``src`` longer than :data:`MAX_WORD_BYTES`."""
    pattern = _LONG_WORD.get(fmt)
    if pattern is None:
        return
    for m in pattern.finditer(src.data):
        if fmt == "blif" and _COVER_ROW.fullmatch(m.group()):
            continue
        raise _word_error(src, m.start(), m.end() - m.start())


#: How much of a long word is quoted (with its line up to it, when that is at most
#: MAX_WORD_BYTES long).
_SHOWN = 80


def _word_error(src: SourceText, start: int, length: int) -> Tm2nnError:
    """The error at byte ``start``, quoting the start of its line (which may be 100 MB)."""
    data = src.data
    line_start = data.rfind(b"\n", 0, start) + 1
    line = data.count(b"\n", 0, start) + 1
    col = len(data[line_start:start].decode("utf-8", "replace")) + 1
    snippet = None
    if start - line_start <= MAX_WORD_BYTES:
        snippet = data[line_start:start + _SHOWN].decode("utf-8", "replace") + "..."
    return Tm2nnError(f"a word of {length:,} bytes, over the {MAX_WORD_BYTES:,} a name, symbol or number may "
                      f"have", file=src.path, line=line, col=col, snippet=snippet)
