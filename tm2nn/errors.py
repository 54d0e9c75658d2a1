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
        return render_located("error", self.message, self.file, self.line, self.col, self.snippet, self.notes)

    def __str__(self) -> str:
        return self.render()


def render_located(severity: str, message: str, file: str | None, line: int | None, col: int | None,
                   snippet: str | None, notes=()) -> str:
    """``file:line:col: severity: message``, the source line and a caret under ``col``,
    then the notes (the layout of every error and warning tm2nn prints)."""
    if file is not None and line is not None:
        head = f"{file}:{line}:{col or 1}: {severity}: {message}"
    elif file is not None:
        head = f"{file}: {severity}: {message}"
    else:
        head = f"tm2nn: {severity}: {message}"
    out = [head]
    if snippet is not None:
        shown = snippet.rstrip("\r\n").expandtabs(1)
        out.append("    " + shown)
        out.append("    " + " " * min(max(1, col or 1) - 1, len(shown)) + "^")
    out.extend(notes)
    return "\n".join(out)


class OptionError(Tm2nnError):
    """A bad, missing or unknown option.  ``template`` names options as ``{name}``;
    ``str()`` shows argument names, :meth:`for_cli` the command-line flags."""

    def __init__(self, template: str, *names: str, **loc):
        self.template = template
        self.names = names
        super().__init__(self._render(lambda n: n), **loc)

    def _render(self, show) -> str:
        out = self.template
        for n in self.names:
            out = out.replace("{" + n + "}", show(n))
        return out

    #: Flags that differ from the option's own on the verb that raised it (``run`` sets a
    #: backend's step bound with ``--max-steps``).
    flags: dict = {}

    def for_cli(self, flag_of) -> "OptionError":
        """This error with every option shown as its flag (``flag_of(name)``)."""
        self.message = self._render(lambda n: self.flags.get(n) or flag_of(n))
        self.args = (self.message,)
        return self
