"""The comment header a source file documents itself with.

Example files (``examples/*.tm``, ``*.circ``, ...) carry lines such as::

    # input: 1011        the input to run it on (machines: tape, circuits: bits)
    # output: 1100       the expected tape (machines) or output bits (circuits)
    # outcome: halt      machines: the expected outcome (accept, reject or halt)
    # target: parity:1011   learners: the target the samples come from
    # samples: 100          learners: how many samples (seed 0)
    # train: data.csv       RCNN learner machines (B.1.2 form): the training set

A key line starts with ``#`` or ``;`` (morphett comments), is among the first 60 lines,
and the first line for a key wins.  A value quoted with ``'``, ``"`` or a backquote loses
its quotes (``# output: ''`` is the empty tape).  An unquoted value with spaces that are
not between groups of bits (``1010 1100``) is prose, not a value, and is skipped: files
from elsewhere describe themselves so (``; Input: two numbers in binary, ...``).

What a documented result means is defined here, once, for ``tm2nn demo`` and
``tm2nn check`` alike:

* a machine run matches when it halted, its tape (the span from the leftmost to the
  rightmost non-blank cell, :attr:`tm2nn.interp.RunResult.tape`) equals ``output`` and its
  outcome equals ``outcome`` (each only when documented);
* a circuit matches when its output bits equal ``output``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tm2nn.fileio import read_input

_KEY = re.compile(r"^\s*[#;]\s*(input|output|outcome|target|samples|train)\s*:\s*(.*?)\s*$", re.IGNORECASE)
HEADER_LINES = 60
_QUOTES = "'\"`"
_BIT_GROUPS = re.compile(r"[01_]+(?:\s+[01_]+)*")


@dataclass(frozen=True)
class HeaderLine:
    """One header entry: its (unquoted) value and where the value starts (1-based)."""

    key: str
    value: str
    line: int
    col: int


def read_header(path: str | Path) -> dict[str, HeaderLine]:
    """The header entries of the file at ``path``, by lower-case key, with positions."""
    found: dict[str, HeaderLine] = {}

    text = read_input(path).decode("utf-8", errors="replace")
    for lineno, line in enumerate(text.splitlines()[:HEADER_LINES], start=1):
        m = _KEY.match(line)
        if m and m.group(1).lower() not in found:
            val, col = m.group(2), m.start(2) + 1
            if len(val) >= 2 and val[0] == val[-1] and val[0] in _QUOTES:
                val, col = val[1:-1], col + 1
            elif len(val.split()) > 1 and not _BIT_GROUPS.fullmatch(val):
                continue  # prose
            found[m.group(1).lower()] = HeaderLine(m.group(1).lower(), val, lineno, col)
    return found


def example_header(path: str | Path) -> dict[str, str]:
    """The ``# input:`` / ``# output:`` / ``# outcome:`` ... values of a file's header."""
    return {k: h.value for k, h in read_header(path).items()}


def machine_mismatches(header: dict[str, str], result) -> list[tuple[str, str, str | None]]:
    """``(key, documented, actual)`` for each documented field a machine run differs in:
    ``output`` (the tape span) and ``outcome``.  Whether the run halted is the caller's
    to check (a run that did not halt matches nothing)."""
    out: list[tuple[str, str, str | None]] = []
    if "output" in header and result.tape != header["output"]:
        out.append(("output", header["output"], result.tape))
    if "outcome" in header and result.outcome != header["outcome"]:
        out.append(("outcome", header["outcome"], result.outcome))
    return out


def circuit_mismatches(header: dict[str, str], outputs: str) -> list[tuple[str, str, str]]:
    """``[("output", documented, actual)]`` when a circuit's output bits differ from ``output``."""
    if "output" in header and outputs != header["output"]:
        return [("output", header["output"], outputs)]
    return []
