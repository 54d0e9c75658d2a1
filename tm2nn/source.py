"""Source text with positions, shared by every parser and importer.

A :class:`SourceText` remembers the file name and lines, so any stage can turn
a (line, col) into a :class:`~tm2nn.errors.Tm2nnError` with the source line
and a caret.  Registered texts let later stages (IR validation) quote lines
from a :class:`~tm2nn.errors.Loc` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tm2nn.errors import Loc, Tm2nnError
from tm2nn.fileio import read_input

_REGISTRY: dict[str, "SourceText"] = {}
#: The UTF-8 byte order mark some editors put at the start of a text file.
BOM = b"\xef\xbb\xbf"


@dataclass
class SourceText:
    path: str
    data: bytes
    _lines: list[str] | None = field(default=None, repr=False)

    @classmethod
    def from_file(cls, path: str | Path) -> "SourceText":
        """The file at ``path``, read by :func:`tm2nn.fileio.read_input` (regular files
        only, at most the source size limit)."""

        return cls.register(str(path), read_input(path))

    @classmethod
    def from_string(cls, text: str, path: str = "<string>") -> "SourceText":
        return cls.register(path, text.encode("utf-8"))

    @classmethod
    def register(cls, path: str, data: bytes) -> "SourceText":
        src = cls(path, data)
        _REGISTRY[path] = src
        return src

    def text_form(self) -> "SourceText":
        """This text as the text parsers read it: a leading UTF-8 byte order mark dropped
        (columns count from the character after it, as editors show them) and every line
        end (``\\r\\n``, and a lone ``\\r`` of old Mac files) made ``\\n``; re-registered
        under its path so that errors quote the lines parsed.  ``self`` when there is nothing
        to change."""
        data = self.data[len(BOM):] if self.data.startswith(BOM) else self.data
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return self if data is self.data else self.register(self.path, data)

    @property
    def text(self) -> str:
        """The data decoded as UTF-8; undecodable bytes are an error at their position."""
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = self.data[: e.start].count(b"\n") + 1
            col = e.start - (self.data.rfind(b"\n", 0, e.start) + 1) + 1
            raise Tm2nnError(
                f"not UTF-8 text (byte 0x{self.data[e.start]:02x})", file=self.path, line=line, col=col
            ) from None

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self.data.decode("utf-8", errors="replace").splitlines()
        return self._lines

    def line_text(self, line: int) -> str | None:
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1]
        return None

    def loc(self, line: int, col: int = 1) -> Loc:
        return Loc(self.path, line, col)

    def error(self, message: str, line: int | None, col: int | None = 1, notes=()) -> Tm2nnError:
        """A ``Tm2nnError`` at (line, col) of this text, quoting the line."""
        if line is None:
            return Tm2nnError(message, file=self.path, notes=notes)
        return Tm2nnError(
            message,
            file=self.path,
            line=line,
            col=col or 1,
            snippet=self.line_text(line),
            notes=notes,
        )

    def error_at_offset(self, message: str, offset: int) -> Tm2nnError:
        """An error at a character offset into ``text``."""
        text = self.text
        offset = max(0, min(offset, len(text)))
        line = text.count("\n", 0, offset) + 1
        col = offset - (text.rfind("\n", 0, offset) + 1) + 1
        return self.error(message, line, col)


def registered(path: str) -> SourceText | None:
    """The text last read from ``path`` (by a parser), or None."""
    return _REGISTRY.get(path)


def line_of(loc: Loc) -> str | None:
    """The source line at ``loc`` if its text was registered, else None."""
    src = _REGISTRY.get(loc.file)
    return src.line_text(loc.line) if src else None


def error_at(loc: Loc | None, message: str, notes=()) -> Tm2nnError:
    """An error at ``loc``, with the source line read back from the file when possible."""
    if loc is None:
        return Tm2nnError(message, notes=notes)
    return Tm2nnError(
        message, file=loc.file, line=loc.line, col=loc.col, snippet=line_of(loc), notes=notes
    )
