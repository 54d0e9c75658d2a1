"""Training sets for ``tm2nn learn``: CSV files of ±1 examples (or of real numbers, for
a backend that asks for them: ``load_csv(path, reals=True)``, option ``data="csv-reals"``).

Format: one example per line, ``d`` features then the label, separated by commas,
each field ``1``, ``+1`` or ``-1`` (spaces around a field are ignored).  An optional
header line (its first field is not a number, e.g. ``x1,x2,y``) is skipped, as are
blank lines and lines starting with ``#``.  Every example has the same width ``d + 1``
with ``d >= 1``; there is at least one example.  Anything else is a
:class:`~tm2nn.errors.Tm2nnError` at ``file:line:col``.  A ``# target: SPEC`` comment
(``parity:0,2,3``) may say which function labelled the examples
(:func:`declared_target`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.fileio import read_input
from tm2nn.source import SourceText

_VALUES = {"1": 1, "+1": 1, "-1": -1}


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def load_csv(path: str | Path, reals: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(X, Y)``: ``int64 [m, d]`` features and ``[m]`` labels, all ±1; with ``reals``,
    ``float64`` arrays of any finite decimal numbers (the backend checks their format)."""
    path = str(path)
    text = _text(path)
    rows: list[list[int]] = []
    width = None
    first = True
    for ln, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        fields = line.split(",")
        if first:
            first = False
            if not _is_number(fields[0].strip()):
                continue  # a header line
        row = []
        col = 1
        for f in fields:
            v = _real(f.strip()) if reals else _VALUES.get(f.strip())
            if v is None and reals:
                lead = len(f) - len(f.lstrip())
                raise Tm2nnError(f"{f.strip() or 'an empty field'!r} is not a finite number",
                                 file=path, line=ln, col=col + lead, snippet=line)
            if v is None:
                lead = len(f) - len(f.lstrip())
                shown = f.strip() or "an empty field"
                raise Tm2nnError(f"{shown!r} is not +1 or -1 (features and labels are signs)" if f.strip()
                                 else "an empty field: features and labels are +1 or -1",
                                 file=path, line=ln, col=col + lead, snippet=line)
            row.append(v)
            col += len(f) + 1
        if len(row) < 2:
            raise Tm2nnError("an example needs at least one feature and a label",
                             file=path, line=ln, col=1, snippet=line)
        if width is None:
            width = len(row)
        elif len(row) != width:
            # point where the missing field should start, or at the first extra one
            col = len(line) + 1 if len(row) < width else len(",".join(fields[:width])) + 2
            raise Tm2nnError(f"this example has {len(row)} fields, the first one has {width} "
                             f"({width - 1} features and a label)", file=path, line=ln, col=col, snippet=line)
        rows.append(row)
    if not rows:
        raise Tm2nnError(f"the training set {path} has no examples", file=path, line=1, col=1)
    a = np.array(rows, dtype=np.float64 if reals else np.int64)
    return a[:, :-1], a[:, -1]


def _real(s: str) -> float | None:
    try:
        v = float(s)
    except ValueError:
        return None
    return v if np.isfinite(v) else None


def _text(path: str) -> str:
    """The CSV's text: not UTF-8 is an error at its byte; a byte-order mark (spreadsheets
    write one) is dropped."""

    return SourceText(path, read_input(path, "training set")).text.removeprefix("\ufeff")


def declared_target(path: str | Path) -> tuple[str, int, int, str] | None:
    """``(SPEC, line, col, the line)`` of a ``# target: SPEC`` comment line in the CSV (the function
    that labelled it, e.g. ``parity:0,2,3``), or None.  ``tm2nn learn`` uses it as the
    default ``--target``."""
    text = _text(str(path))
    for ln, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if s.startswith("#") and s[1:].strip().startswith("target:"):
            rest = s[1:].strip()[len("target:"):].split()
            spec = rest[0] if rest else ""  # the first word: a note may follow
            return spec, ln, (line.index(spec) + 1 if spec else len(line) + 1), line
    return None
