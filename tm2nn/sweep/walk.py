"""A spec's globs, walked with a bound: ``glob.glob(pattern, recursive=True)``'s matches,
but the folder entries the walk reads are counted, and a walk past :data:`MAX_ENTRIES`
of them (a glob such as ``/**/*.tm``, which would read the whole disk for minutes) stops
with an error that names the count.  ``seen(n)`` is told the count as the walk goes (a
progress line).  The matching is glob's: ``*``, ``?`` and ``[...]`` within a name, ``**``
alone for any number of folders (following links to folders, as glob does), names that
begin with a dot only for a pattern part that does too, and unreadable folders skipped."""

from __future__ import annotations

import fnmatch
import glob
import os

from tm2nn.errors import Tm2nnError

#: folder entries the globs of one spec may read in all
MAX_ENTRIES = 1_000_000
#: ``seen`` is called every this many entries
EVERY = 10_000


class Walk:
    """The entries read so far by a spec's globs (one count across them)."""

    def __init__(self, limit: int | None = None, seen=None):
        self.limit = MAX_ENTRIES if limit is None else limit
        self.n = 0
        self.seen = seen

    def glob(self, pattern: str) -> list[str]:
        """The paths ``pattern`` matches (files and folders; unsorted, each once)."""
        if not glob.has_magic(pattern):
            return [pattern] if os.path.lexists(pattern) else []
        parts = pattern.split(os.sep)
        i = next(k for k, part in enumerate(parts) if glob.has_magic(part))
        rest: list[str] = []
        for part in parts[i:]:  # '**/**' is '**'
            if not (part == "**" and rest and rest[-1] == "**"):
                rest.append(part)
        base = os.sep.join(parts[:i]) or (os.sep if pattern.startswith(os.sep) else os.curdir)
        out: set[str] = set()
        if os.path.isdir(base):
            self._match(base, rest, out, pattern)
        return list(out)

    def _entries(self, folder: str, pattern: str):
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    self.n += 1
                    if self.n > self.limit:
                        raise Tm2nnError(f"the glob {pattern!r} reads more than {self.limit:,} folder entries: "
                                         "give a narrower one (a folder to start from, not '/' or '~')")
                    if self.seen is not None and self.n % EVERY == 0:
                        self.seen(self.n)
                    yield entry
        except OSError:  # unreadable: skipped, as glob does
            return

    def _match(self, folder: str, rest: list[str], out: set, pattern: str) -> None:
        part, more = rest[0], rest[1:]
        if part == "**":
            if not more:  # a final '**': everything below (glob gives the folder itself too)
                out.add(os.path.join(folder, ""))
            else:
                self._match(folder, more, out, pattern)
            for sub, is_dir in self._below(folder, pattern):
                if not more:
                    out.add(sub)
                elif is_dir:
                    self._match(sub, more, out, pattern)
            return
        if not glob.has_magic(part):
            path = os.path.join(folder, part)
            if not more:
                if os.path.lexists(path):
                    out.add(path)
            elif os.path.isdir(path):
                self._match(path, more, out, pattern)
            return
        hidden_too = part.startswith(".")
        for entry in self._entries(folder, pattern):
            if (hidden_too or not entry.name.startswith(".")) and fnmatch.fnmatch(entry.name, part):
                path = os.path.join(folder, entry.name)
                if not more:
                    out.add(path)
                elif _is_dir(entry):
                    self._match(path, more, out, pattern)

    def _below(self, folder: str, pattern: str):
        """``(path, is_folder)`` for every path below ``folder`` (names with a leading dot
        left out), depth-first."""
        stack = [folder]
        while stack:
            here = stack.pop()
            for entry in self._entries(here, pattern):
                if entry.name.startswith("."):
                    continue
                path, is_dir = os.path.join(here, entry.name), _is_dir(entry)
                yield path, is_dir
                if is_dir:
                    stack.append(path)


def _is_dir(entry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
