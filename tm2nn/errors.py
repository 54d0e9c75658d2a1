"""The one user-facing error type.

Every mistake in user input (a file, a flag, an ``--input`` string) becomes a
:class:`Tm2nnError` carrying ``file:line:col`` and the offending source line.
The CLI prints :meth:`Tm2nnError.render` and exits with code 2; no traceback
reaches the user.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in a source file (1-based line and column)."""

    file: str
    line: int
    col: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Tm2nnError(Exception):
    """A user error: bad input file, bad flag, oversize request.

    ``snippet`` is the source line; ``render()`` puts a caret under ``col``.
    ``notes`` are extra lines (for example the location of a conflicting rule).
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        col: int | None = None,
        snippet: str | None = None,
        notes: tuple[str, ...] | list[str] = (),
    ):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        self.snippet = snippet
        self.notes = tuple(notes)

    @property
    def loc(self) -> Loc | None:
        if self.file is None or self.line is None:
            return None
        return Loc(self.file, self.line, self.col or 1)

    def render(self) -> str:
        if self.file is not None and self.line is not None:
            head = f"{self.file}:{self.line}:{self.col or 1}: error: {self.message}"
        elif self.file is not None:
            head = f"{self.file}: error: {self.message}"
        else:
            head = f"tm2nn: error: {self.message}"
        out = [head]
        if self.snippet is not None:
            shown = self.snippet.rstrip("\r\n").expandtabs(1)
            out.append("    " + shown)
            col = max(1, self.col or 1)
            out.append("    " + " " * min(col - 1, len(shown)) + "^")
        out.extend(self.notes)
        return "\n".join(out)

    def __str__(self) -> str:
        return self.render()


def error_at(loc: Loc | None, message: str, notes=()) -> Tm2nnError:
    """An error at ``loc``, with the source line read back from the file when possible."""
    if loc is None:
        return Tm2nnError(message, notes=notes)
    from tm2nn.source import line_of  # local import: source.py imports this module

    return Tm2nnError(
        message, file=loc.file, line=loc.line, col=loc.col, snippet=line_of(loc), notes=notes
    )
