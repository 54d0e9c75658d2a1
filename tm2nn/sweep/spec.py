"""A sweep spec (TOML) -> a validated :class:`SweepSpec` -> its list of :class:`Task` s.

``load_spec(path)`` reads the spec, checks every key, type and value, expands the sources
(globs, multi-item files with index ranges or names), the backends and the ``[grid]``
cross product, and validates each point's options with the backend's own option checks
(``backends.get(b).options(**values)``), all before any task runs.  Every mistake is a
:class:`~tm2nn.errors.Tm2nnError` located in the spec (``spec.toml:line:col``, the line and
a caret), so ``tm2nn sweep`` exits 2 on a bad spec.  The format is in docs/sweep.md, "The
spec".

A task is one call of the public API (the contract of issue 22): its id is a hash of its
canonical JSON, so the same spec gives the same tasks and ids every time, and a rerun skips
the finished ones.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tm2nn import backends
from tm2nn.api import run
from tm2nn.errors import Tm2nnError
from tm2nn.fileio import read_input
from tm2nn.ir import GridMachine, Machine
from tm2nn.limits import SEED_MAX, check_float, check_int
from tm2nn.options import OptionError, fields_of
from tm2nn.sweep.walk import Walk
from tm2nn.syntax import FORMATS, guess_format, load_all, select

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10: the same parser as a package
    import tomli as tomllib

KINDS = ("verify", "margin", "find-beta", "info", "learn", "run")
#: a spec that expands to more tasks is refused up front, with its count
MAX_TASKS = 10**6
#: the default of ``halt_limit``: ``halt+K`` runs each machine at most this many steps
DEFAULT_HALT_LIMIT = 10**5
MAX_HALT_LIMIT = 10**9
INTERP = "interp"

TOP_KEYS = ("name", "task", "backends", "sources", "source", "halt_limit", "grid", "args")
SOURCE_KEYS = ("path", "format", "items", "names")
#: the task argument that takes ``halt+K`` (besides the backend's step-bound option)
HALT_ARGS = ("max_steps",)
HALT = re.compile(r"\s*halt\s*(?:\+\s*(\d+))?\s*")


def canonical(obj) -> str:
    """Canonical JSON (sorted keys, no spaces): what a task id hashes, and the form of the
    ``options`` / ``args`` columns of a results row."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class Task:
    """One call of the public API (issue 22's contract): ``kind`` on ``source`` (an absolute
    path; ``name`` picks an item of a multi-item file, ``format`` when the extension does
    not tell) with ``backend``, its compile (or learn) ``options`` and the task's ``args``."""

    kind: str
    source: str
    name: str | None
    format: str | None
    backend: str
    options: dict
    args: dict

    def _key(self) -> dict:
        return {"kind": self.kind, "source": self.source, "name": self.name, "format": self.format,
                "backend": self.backend, "options": self.options, "args": self.args}

    @functools.cached_property
    def id(self) -> str:
        """The first 16 hex digits of the sha256 of the task's canonical JSON."""
        return hashlib.sha256(canonical(self._key()).encode()).hexdigest()[:16]

    def __hash__(self) -> int:  # the dict fields are not hashable; the id stands for them
        return hash(self.id)

    def to_json(self) -> dict:
        return {**self._key(), "id": self.id}

    @classmethod
    def from_json(cls, d: dict) -> "Task":
        """The task of a :meth:`to_json` dict (its ``id`` is recomputed, not read)."""
        return cls(d["kind"], d["source"], d.get("name"), d.get("format"), d["backend"], dict(d.get("options") or {}),
                   dict(d.get("args") or {}))


@dataclass(frozen=True)
class SweepSpec:
    """A checked spec: ``path`` as given, ``name`` (default the file's stem), ``kind`` (the
    task), ``sha256`` of the file's bytes and ``n_tasks``; :meth:`tasks` lists them."""

    path: str
    name: str
    kind: str
    sha256: str
    n_tasks: int
    backends: tuple[str, ...]
    _tasks: tuple[Task, ...] = field(repr=False, compare=False)

    def tasks(self) -> list[Task]:
        """Every task, in the spec's order: sources (globs sorted, items in file order),
        then backends, then grid points (keys in spec order, values in order)."""
        return list(self._tasks)


def load_spec(path, seen=None) -> SweepSpec:
    """Read, check and expand the spec at ``path`` (every error a located
    :class:`Tm2nnError`; nothing runs).  ``seen(n)``: told the folder entries the globs
    have read so far, as they walk (at most :data:`tm2nn.sweep.walk.MAX_ENTRIES`)."""

    data = read_input(path, "sweep spec")
    doc = _Doc.of(str(path), data)
    return _Builder(doc, data, seen).build()


# -- where things are in the spec's text ----------------------------------------------------

#: ``_Doc.where(..., value=KEY)``: the key itself, not its value
KEY = object()
_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_\-.\"' ]+?)\s*\]\]?\s*(?:#.*)?$")


def _at_top(text: str) -> list[bool]:
    """For each line: does it start outside any array, inline table or multi-line
    string?  (Only such a line can be a table header or a key of its table.)"""
    out, depth, i, n = [True], 0, 0, len(text)
    quote = None  # the open string's delimiter
    while i < n:
        c = text[i]
        if quote is not None:
            if c == "\\" and quote in ('"', '"""'):
                if text.startswith("\n", i + 1):  # a line-ending backslash
                    out.append(False)
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
            if c == "\n":
                if len(quote) == 1:  # a one-line string does not span lines (not valid TOML anyway)
                    quote = None
                out.append(False)
        elif c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote)
            continue
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth = max(0, depth - 1)
        elif c == "\n":
            out.append(depth == 0)
        i += 1
    return out


@dataclass
class _Doc:
    """The spec's text: turns a (table, key, value) into ``line:col`` for an error."""

    path: str
    text: str

    def __post_init__(self):
        self.lines = self.text.split("\n")
        top = _at_top(self.text)
        self.top = top + [False] * (len(self.lines) - len(top))
        self.headers = []  # (line index, is [[array]], name)
        for i, line in enumerate(self.lines):
            m = _HEADER.match(line) if self.top[i] else None
            if m:
                self.headers.append((i, m.group(1) == "[[", m.group(2).strip().strip("\"'")))

    @classmethod
    def of(cls, path: str, data: bytes) -> "_Doc":
        try:
            return cls(path, data.decode("utf-8"))
        except UnicodeDecodeError as e:
            before = data[:e.start].decode("utf-8", "replace").split("\n")
            doc = cls(path, data.decode("utf-8", "replace"))
            raise doc.error(f"the spec is not UTF-8 text (byte {e.start + 1})", len(before),
                            len(before[-1]) + 1) from None

    def error(self, message: str, line: int = 1, col: int = 1, notes=()) -> Tm2nnError:
        line = max(1, line)
        snippet = self.lines[line - 1] if line <= len(self.lines) else None
        return Tm2nnError(message, file=self.path, line=line, col=max(1, col), snippet=snippet, notes=notes)

    def _block(self, table) -> tuple[int, int] | None:
        """``[start, end)`` line indices of a table's block: None = the top level,
        ``"grid"``, or ``("source", i)`` the i-th ``[[source]]``."""
        hs = self.headers
        ends = [h[0] for h in hs[1:]] + [len(self.lines)]
        if table is None:
            return 0, hs[0][0] if hs else len(self.lines)
        array, name, nth = (True, *table) if isinstance(table, tuple) else (False, table, 0)
        found = [(h[0], e) for h, e in zip(hs, ends) if h[1] == array and h[2] == name]
        return found[nth] if nth < len(found) else None

    def where(self, table=None, key: str | None = None, value=KEY) -> tuple[int, int]:
        """``(line, col)`` in ``table`` of ``key`` (``value=KEY``), of its value
        (``value=None``: the text after ``=``), or of ``value``'s text after the key;
        falling back to the key, the table's header, the start of the file."""
        block = self._block(table)
        if key is not None:
            k = re.escape(key)
            pat = re.compile(rf"^(\s*)(?:\"{k}\"|'{k}'|{k})\s*=")
            spans = ([block] if block else []) + [(0, len(self.lines))]
            for lo, hi in spans:
                for i in range(lo, hi):
                    m = pat.match(self.lines[i]) if self.top[i] else None
                    if m:
                        found = None if value is KEY else self._value_at(i, hi, m.end(), value)
                        return found or (i + 1, len(m.group(1)) + 1)
            for h in self.headers:  # a table of that name ([gird] for [grid])
                if h[2] == key:
                    return h[0] + 1, self.lines[h[0]].find(key) + 1
        if block and table is not None:
            return block[0] + 1, 1
        return 1, 1

    def _value_at(self, i: int, hi: int, start: int, value) -> tuple[int, int] | None:
        """Where ``value`` is written, from column ``start`` of line ``i`` on to the
        block's end (its first character; or, for no value, the first after ``=``)."""
        if value is None:
            rest = self.lines[i][start:]
            return i + 1, start + len(rest) - len(rest.lstrip()) + 1
        if isinstance(value, str):
            pats = [re.escape(json.dumps(value, ensure_ascii=False)), re.escape(f"'{value}'"), re.escape(value)]
        else:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            pats = [r"(?<![\w.+-])" + re.escape(shown) + r"(?![\w.])"]
        for p in pats:
            for j in range(i, hi):
                m = re.compile(p).search(self.lines[j], start if j == i else 0)
                if m:
                    return j + 1, m.start() + 1
        return None

    def at(self, message: str, table=None, key: str | None = None, value=KEY, notes=()) -> Tm2nnError:
        return self.error(message, *self.where(table, key, value), notes=notes)


def _table_name(table) -> str:
    if table is None:
        return "the spec's top level"
    if isinstance(table, tuple):
        return f"[[source]] number {table[1] + 1}"
    return f"[{table}]"


# -- task arguments ------------------------------------------------------------------------

@dataclass(frozen=True)
class _Arg:
    """A task argument's type: ``int``/``float`` (with bounds), ``str``, ``bool``, or a
    ``list`` of strings; ``engine`` marks engine names (checked against the backend)."""

    kind: type
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    engine: bool = False


def _seed() -> _Arg:
    return _Arg(int, 0, SEED_MAX)


_INPUTS = _Arg(list)
_SAMPLES = _Arg(int, 1)
_ENGINES = _Arg(list, engine=True)

#: the task arguments of each kind (issue 22's contract: what ``run_task`` passes on)
ARGS: dict[str, dict[str, _Arg]] = {
    "verify": {"inputs": _INPUTS, "budget": _Arg(float, 0.0, open_low=True), "samples": _SAMPLES, "seed": _seed(),
               "engines": _ENGINES, "onnx": _Arg(bool)},
    "margin": {"samples": _SAMPLES, "trials": _Arg(int, 1), "seed": _seed(), "engines": _ENGINES},
    "find-beta": {"inputs": _INPUTS, "samples": _SAMPLES, "seed": _seed()},
    "info": {},
    "learn": {},
    "run": {"input": _Arg(str), "max_steps": _Arg(int, 0), "engine": _Arg(str, engine=True)},
}


def _check_arg(name: str, a: _Arg, value):
    """``value`` as the argument's type, or an OptionError."""

    if a.kind is int:
        return check_int(name, value, a.low, a.high)
    if a.kind is float:
        return check_float(name, value, a.low, a.high, open_low=a.open_low)
    if a.kind is bool and not isinstance(value, bool):
        raise OptionError(f"{{{name}}} must be true or false, got {_shown(value)}", name)
    if a.kind is str and not isinstance(value, str):
        raise OptionError(f"{{{name}}} must be a string, got {_shown(value)}", name)
    if a.kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise OptionError(f"{{{name}}} must be a list of strings, got {_shown(value)}", name)
        if not value:
            raise OptionError(f"{{{name}}} is an empty list", name)
    return value


def _shown(value) -> str:
    return json.dumps(value) if isinstance(value, (str, bool, list, dict)) else repr(value)


# -- the builder ---------------------------------------------------------------------------

@dataclass
class _Item:
    """One source item: the file (absolute), the name passed to ``select`` (or None),
    the format given, its IR, and where the spec lists it."""

    path: str
    name: str | None
    format: str | None
    ir: object
    where: tuple  # (table, key, value) for Doc.at

    @property
    def label(self) -> str:
        return f"{os.path.basename(self.path)}" + (f" item {self.name!r}" if self.name else "")


class _Builder:
    """Checks the parsed TOML against the format and expands it (one spec, once)."""

    def __init__(self, doc: _Doc, data: bytes, seen=None):
        self.doc = doc
        self.walk = Walk(seen=seen)
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.folder = os.path.dirname(os.path.abspath(doc.path))
        try:
            self.data = tomllib.loads(doc.text)
        except tomllib.TOMLDecodeError as e:
            raise self._toml_error(e) from None
        self._files: dict = {}
        self._halts: dict = {}
        self._checked: dict = {}

    def _toml_error(self, e) -> Tm2nnError:
        msg = str(e)
        m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", msg)
        if m:
            return self.doc.error(f"not valid TOML: {msg[:m.start()]}", int(m.group(1)), int(m.group(2)))
        m = re.search(r"\s*\(at end of document\)$", msg)
        last = max(1, len(self.doc.lines))
        col = len(self.doc.lines[-1]) + 1 if self.doc.lines else 1
        return self.doc.error(f"not valid TOML: {msg[:m.start()] if m else msg}", last, col)

    # -- top level ---------------------------------------------------------------------
    def build(self) -> SweepSpec:
        d = self.data
        self._known(d, TOP_KEYS, None)
        name = d.get("name", Path(self.doc.path).stem)
        self._type(name, str, None, "name", "a string")
        if not name.strip():
            raise self.doc.at("name is empty", None, "name", None)
        if "task" not in d:
            raise self.doc.error(f"the spec needs task = one of {', '.join(map(repr, KINDS))}")
        kind = d["task"]
        self._type(kind, str, None, "task", "a string")
        if kind not in KINDS:
            raise self.doc.at(f"unknown task {kind!r} (tasks: {', '.join(KINDS)})", None, "task", kind)
        self.kind = kind
        self.halt_limit = self._halt_limit(d)
        backs = self._backends(d)
        items = self._sources(d)
        grid, fixed = self._grid(d, backs)
        n = len(items) * len(backs) * math.prod(len(v) for v in grid.values())
        if n > MAX_TASKS:
            raise self.doc.at(f"the spec expands to {n:,} tasks ({len(items):,} sources x {len(backs)} backends x "
                              f"{math.prod(len(v) for v in grid.values()):,} grid points), more than the "
                              f"{MAX_TASKS:,} a sweep takes: split it", "grid" if "grid" in d else None)
        tasks: dict[str, Task] = {}
        for item in items:
            for b in backs:
                self._takes(item, b)
                for point in itertools.product(*grid.values()):
                    t = self._task(item, b, {**dict(zip(grid, point)), **fixed})
                    tasks.setdefault(t.id, t)
        return SweepSpec(self.doc.path, name, kind, self.sha256, len(tasks), tuple(backs), tuple(tasks.values()))

    def _known(self, table: dict, keys, where) -> None:
        for k in table:
            if k not in keys:
                raise self.doc.at(f"unknown key {k!r} in {_table_name(where)} (keys: {', '.join(keys)})", where, k)

    def _type(self, value, kind, table, key, what: str) -> None:
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise self.doc.at(f"{key} must be {what}, got {_shown_toml(value)}", table, key, None)

    def _list(self, value, table, key, what: str) -> list:
        """A list of ``what`` (one value alone counts as a list of one); never empty."""
        values = value if isinstance(value, list) else [value]
        if not values:
            raise self.doc.at(f"{key} is an empty list", table, key, None)
        for v in values:
            if not isinstance(v, str):
                raise self.doc.at(f"{key} must hold {what}, got {_shown_toml(v)}", table, key, v)
        return values

    def _halt_limit(self, d) -> int:
        v = d.get("halt_limit", DEFAULT_HALT_LIMIT)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_HALT_LIMIT:
            raise self.doc.at(f"halt_limit must be an integer in [1, {MAX_HALT_LIMIT:,}], got {_shown_toml(v)}",
                              None, "halt_limit", None)
        return v

    # -- backends ----------------------------------------------------------------------
    def _backends(self, d) -> list:
        if "backends" not in d:
            raise self.doc.error("the spec needs backends = [...] (backends: " + ", ".join(backends.names())
                                 + (f", {INTERP} for task = 'run'" if self.kind == "run" else "") + ")")
        out = []
        for name in self._list(d["backends"], None, "backends", "backend names (strings)"):
            where = (None, "backends", name)
            if name == INTERP:
                if self.kind != "run":
                    raise self.doc.at(f"the {INTERP} backend (the reference interpreter) only runs: it takes "
                                      f"task = 'run', not {self.kind!r}", *where)
                out.append(None)
                continue
            try:
                b = backends.get(name)
            except Tm2nnError as e:
                raise self.doc.at(e.message, *where) from None
            if _lacks(b, self.kind):
                having = [x.name for x in backends.all() if not _lacks(x, self.kind)]
                raise self.doc.at(f"the {name} backend has no {self.kind} (backends that do: "
                                  f"{', '.join(having + ([INTERP] if self.kind == 'run' else []))})", *where)
            out.append(b)
        return out

    # -- sources -----------------------------------------------------------------------
    def _sources(self, d) -> list[_Item]:
        if "sources" not in d and "source" not in d:
            raise self.doc.error("the spec needs sources = [\"GLOB\", ...] or a [[source]] table")
        items: list[_Item] = []
        if "sources" in d:
            for pattern in self._list(d["sources"], None, "sources", "globs (strings)"):
                for path in self._glob(pattern, (None, "sources", pattern)):
                    items.append(self._whole_file(path, (None, "sources", pattern)))
        if "source" in d:
            tables = d["source"]
            if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
                raise self.doc.at("source must be an array of tables: write [[source]] above each one", None, "source")
            for i, t in enumerate(tables):
                items += self._source_table(t, ("source", i))
        return items

    def _glob(self, pattern: str, where) -> list[str]:
        """The files ``pattern`` matches (relative to the spec's folder), sorted."""
        if not pattern.strip() or "\x00" in pattern:
            raise self.doc.at(f"not a file name or glob: {pattern!r}", *where)
        full = os.path.join(self.folder, os.path.expanduser(pattern))
        try:
            found = sorted({os.path.normpath(p) for p in self.walk.glob(full) if os.path.isfile(p)})
        except Tm2nnError as e:  # more entries than a spec's globs may read
            raise self.doc.at(e.message.replace(repr(full), repr(pattern)), *where) from None
        except (OSError, ValueError) as e:
            raise self.doc.at(f"cannot read the glob {pattern!r}: {e}", *where) from None
        if not found:
            raise self.doc.at(f"{pattern!r} matches no file (relative to the spec's folder {self.folder})", *where)
        return found

    def _load(self, path: str, fmt: str | None, where) -> list:
        """Every item of the file (read once per file and format); errors in the file
        stay located in it, with a note naming the spec's line."""
        key = (path, fmt)
        if key not in self._files:
            try:
                if fmt is None:
                    guess_format(path)
                self._files[key] = load_all(path, fmt)
            except Tm2nnError as e:
                if e.file is None or e.line is None:
                    msg = e.message.replace("name it with format", "give it with format = ... in a [[source]]")
                    raise self.doc.at(f"{os.path.basename(path)}: {msg}", *where) from None
                line, col = self.doc.where(*where)
                e.notes = (*e.notes, f"  (listed at {self.doc.path}:{line}:{col})")
                raise
        return self._files[key]

    def _whole_file(self, path: str, where) -> _Item:
        """A file matched by a glob: the item ``tm2nn.compile(path)`` takes (its first)."""
        return _Item(path, None, None, self._load(path, None, where)[0], where)

    def _source_table(self, t: dict, table) -> list[_Item]:
        self._known(t, SOURCE_KEYS, table)
        if "path" not in t:
            raise self.doc.at("[[source]] needs path = \"FILE\"", table)
        self._type(t["path"], str, table, "path", "a string (a file or glob)")
        fmt = t.get("format")
        if fmt is not None:
            self._type(fmt, str, table, "format", "a string")
            if fmt not in FORMATS:
                raise self.doc.at(f"unknown format {fmt!r} (formats: {', '.join(FORMATS)})", table, "format", fmt)
        if "items" in t and "names" in t:
            raise self.doc.at("give items or names, not both", table, "names")
        out = []
        for path in self._glob(t["path"], (table, "path", t["path"])):
            where = (table, "path", t["path"])
            all_items = self._load(path, fmt, where)
            if "items" in t:
                chosen = self._ranges(t["items"], len(all_items), table, os.path.basename(path))
            elif "names" in t:
                chosen = self._names(t["names"], all_items, table, os.path.basename(path))
            else:
                chosen = range(len(all_items))
            out += [_Item(path, _name_of(all_items, i), fmt, all_items[i], where) for i in chosen]
        return out

    def _ranges(self, spec, n: int, table, file: str) -> list[int]:
        """0-based indices of ``"1-100,205"`` (1-based, inclusive ranges), in file order."""
        if isinstance(spec, int) and not isinstance(spec, bool):
            spec = str(spec)
        self._type(spec, str, table, "items", 'a string of 1-based index ranges ("1-100,205")')
        if not spec.strip():
            raise self.doc.at("items is empty", table, "items", None)
        chosen: set[int] = set()
        for part in spec.split(","):
            m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
            if not m:
                raise self.doc.at(f"items: {part.strip()!r} is not an index or a range N-M", table, "items",
                                  part.strip() or spec)
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if lo < 1 or hi < lo:
                raise self.doc.at(f"items: {part.strip()!r} is not a range of 1-based indices (N-M with 1 <= N <= M)",
                                  table, "items", part.strip())
            if hi > n:
                raise self.doc.at(f"items: {part.strip()!r} is out of range: {file} holds {n:,} items", table,
                                  "items", part.strip())
            chosen.update(range(lo - 1, hi))
        return sorted(chosen)

    def _names(self, names, items: list, table, file: str) -> list[int]:
        """0-based indices of the named items, in file order."""
        names = self._list(names, table, "names", "item names (strings)")
        index = {}
        for i, it in enumerate(items):
            index.setdefault(it.name, i)
        for nm in names:
            if nm not in index:
                shown = ", ".join(it.name for it in items[:5]) + (", ..." if len(items) > 5 else "")
                raise self.doc.at(f"names: {file} holds no item named {nm!r} (it holds {len(items):,}: {shown})",
                                  table, "names", nm)
        return sorted({index[nm] for nm in names})

    def _takes(self, item: _Item, b) -> None:
        """Refuse a source item the backend does not compile (or train)."""
        if b is None:
            return
        try:
            if self.kind == "learn":
                if not isinstance(item.ir, tuple(b.trainer.takes)):
                    raise Tm2nnError(f"the {b.name} backend trains {b.takes_what}; {item.ir.name!r} is a "
                                     f"{type(item.ir).__name__.lower()}")
            else:
                b.check_source(item.ir)
        except Tm2nnError as e:
            raise self.doc.at(f"{item.label}: {e.message} (leave it out of the sources, or list the backends "
                              f"for it in a spec of its own)", *item.where) from None

    # -- grid and args -----------------------------------------------------------------
    def _grid(self, d, backs) -> tuple[dict, dict]:
        """``(grid, fixed)``: each grid key's list of values, and the fixed ``[args]``."""
        grid, fixed = {}, {}
        for table, out in (("grid", grid), ("args", fixed)):
            t = d.get(table, {})
            if not isinstance(t, dict):
                raise self.doc.at(f"{table} must be a table: write [{table}] and its keys below it", None, table)
            for key, value in t.items():
                if table == "args" and key in grid:
                    raise self.doc.at(f"{key!r} is in both [grid] and [args]: give it in one", "args", key)
                self._key_kind(key, backs, table)
                _no_dates(self.doc, value, table, key)
                if table == "grid":
                    values = value if isinstance(value, list) else [value]
                    if not values:
                        raise self.doc.at(f"[grid] {key} is an empty list", "grid", key, None)
                    out[key] = values
                else:
                    out[key] = value
        self.where_of = {k: ("grid", k) for k in grid} | {k: ("args", k) for k in fixed}
        return grid, fixed

    def _key_kind(self, key: str, backs, table) -> str:
        """``"arg"`` or ``"option"``; a key that is neither (for every backend) is an error."""
        args = ARGS[self.kind]
        if key in args:
            return "arg"
        learn = self.kind == "learn"
        takes = {b.name if b else INTERP: _option_names(b, learn) for b in backs}
        if all(key in names for names in takes.values()):
            for b in backs:
                if b is not None and self.kind == "run" and key == b.stepping.option:
                    raise self.doc.at(f"for task = 'run' the step bound is the argument max_steps, not the "
                                      f"{b.name} option {key!r}", table, key)
            return "option"
        what = "learn option" if learn else "option"
        some = [n for n, names in takes.items() if key in names]
        if some:
            lacking = [n for n in takes if n not in some]
            raise self.doc.at(f"{key!r} is an {what} of the {', '.join(some)} backend but not of {', '.join(lacking)}: "
                              "a sweep's options apply to every backend it lists (write a spec per backend)",
                              table, key)
        listed = "; ".join(f"{n}: {', '.join(names) or 'none'}" for n, names in takes.items())
        raise self.doc.at(f"unknown key {key!r} in [{table}]: not an argument of task {self.kind!r} (its arguments: "
                          f"{', '.join(args) or 'none'}) nor an {what} of the backends ({listed})", table, key)

    # -- one task ----------------------------------------------------------------------
    def _task(self, item: _Item, b, values: dict) -> Task:
        """The task of one source item, backend and grid point, every value checked."""
        spec = ARGS[self.kind]
        args: dict = {}
        for k, a in spec.items():  # in the kind's order: run's input before max_steps
            if k in values:
                args[k] = self._arg(k, a, values[k], item, b, args)
        opts = {k: v for k, v in values.items() if k not in spec}
        for k, v in opts.items():
            if _is_halt(v):
                bound = b is not None and self.kind != "learn" and k in ("steps", b.stepping.option if b.stepping else None)
                opts[k] = self._halt_value(k, v, item, "", bound)
        opts = self._options(b, opts, args)
        return Task(self.kind, item.path, item.name, item.format, b.name if b is not None else INTERP, opts, args)

    def _arg(self, key: str, a: _Arg, value, item: _Item, b, args: dict):
        """A task argument checked (``halt+K`` resolved; engines checked against ``b``)."""
        raw = value
        if _is_halt(value):
            value = self._halt_value(key, value, item, args.get("input", ""), key in HALT_ARGS)
        try:
            out = _check_arg(key, a, value)
            if a.engine and b is None:
                raise OptionError(f"{{{key}}} applies to a backend; the {INTERP} backend (the interpreter) has no "
                                  "engine", key)
            for e in (out if isinstance(out, list) else [out]) if a.engine else ():
                if e not in b.engines:
                    raise OptionError(f"{{{key}}}: the {b.name} backend runs on {', '.join(b.engines)}, not {e!r}",
                                      key)
        except OptionError as e:
            bad = next((x for x in (value if isinstance(value, list) else [value]) if a.engine
                        and b is not None and x not in b.engines), raw)
            raise self.doc.at(e.message, *self.where_of[key], _bad_value(bad)) from None
        return out

    def _halt_value(self, key: str, text: str, item: _Item, given: str, bound: bool) -> int:
        """``halt+K``: the machine's step count on the task's input ``given`` (run's
        ``input``; else the blank input), by the reference interpreter, plus K."""
        where = (*self.where_of[key], text)
        m = HALT.fullmatch(text)
        if not m:
            raise self.doc.at(f"{key}: {text!r} is not 'halt' or 'halt+K' (K an integer >= 0)", *where)
        if not bound:
            raise self.doc.at(f"{key}: 'halt+K' is a step bound: only the step bound steps of a backend and "
                              "max_steps (task = 'run') take it", *where)
        return self._halts_at(item, given) + int(m.group(1) or 0)

    def _halts_at(self, item: _Item, text: str) -> int:
        """The reference interpreter's step count for ``item`` on ``text`` (run once each)."""
        key = (id(item.ir), text)
        if key not in self._halts:
            if not isinstance(item.ir, (Machine, GridMachine)):
                raise self.doc.at(f"'halt+K' counts a machine's steps; {item.label} is a "
                                  f"{type(item.ir).__name__.lower()}", *item.where)
            try:
                rep = run(item.ir, text, max_steps=self.halt_limit)
            except Tm2nnError as e:
                raise self.doc.at(f"{item.label}: {e.message}", *self.where_of.get("input", item.where)) from None
            if not rep["halted"]:
                shown = "the blank input" if text == "" else f"input {text!r}"
                raise self.doc.at(f"{item.label} ({item.path}) does not halt within halt_limit = {self.halt_limit:,} "
                                  f"steps on {shown}, so 'halt+K' has no value: leave it out (items = ..., names = "
                                  "...) or raise halt_limit", *item.where)
            self._halts[key] = int(rep["steps"])
        return self._halts[key]

    def _options(self, b, opts: dict, args: dict) -> dict:
        """The options as the backend checks them (``Backend.options``, or
        ``learn_options`` for task = 'learn'), each value as the backend reads it
        (``beta = 10`` -> 10.0); training-set paths made absolute (from the spec's folder)."""
        if b is None:
            return opts
        learn = self.kind == "learn"
        if learn:
            for f in fields_of(b.trainer.Options):
                if f.data is not None and isinstance(opts.get(f.name), str):
                    opts[f.name] = os.path.normpath(os.path.join(self.folder, os.path.expanduser(opts[f.name])))
        values = dict(opts)
        if self.kind == "run":  # what tm2nn.run compiles with: its step bound is max_steps
            values[b.stepping.option] = args.get("max_steps", b.stepping.default)
        key = (b.name, canonical(values))
        if key not in self._checked:
            try:
                made = b.learn_options(**values) if learn else b.options(**values)
                self._checked[key] = {k: getattr(made, k) for k in opts}
            except Tm2nnError as e:
                self._checked[key] = self._option_error(b, e, values)
        got = self._checked[key]
        if isinstance(got, Tm2nnError):
            raise got
        return dict(got)

    def _option_error(self, b, e: Tm2nnError, values: dict) -> Tm2nnError:
        """A backend's refusal, located at the option it names (else at the backend)."""
        if not isinstance(e, OptionError):
            return self.doc.at(e.message, None, "backends", b.name)
        rename = {b.stepping.option: "max_steps"} if self.kind == "run" else {}
        msg = e._render(lambda n: rename.get(n, n))
        owner = f"learning with the {b.name} backend" if self.kind == "learn" else f"the {b.name} backend"
        if not msg.startswith(owner):
            msg = f"{owner}: {msg}"
        named = [rename.get(n, n) for n in e.names if rename.get(n, n) in self.where_of]
        if named:
            return self.doc.at(msg, *self.where_of[named[0]], _bad_value(values.get(e.names[0])))
        return self.doc.at(f"{msg}: give it in [grid] or [args]" if " needs " in msg else msg,
                           None, "backends", b.name)


def _name_of(items: list, i: int) -> str:
    """The name that picks item ``i`` with :func:`tm2nn.syntax.select`: its own, else its
    1-based index."""

    nm = items[i].name
    if nm and select(items, nm) is items[i]:
        return nm
    return str(i + 1)


def _option_names(b, learn: bool) -> tuple[str, ...]:
    if b is None:
        return ()
    cls = (b.trainer.Options if b.trainer else None) if learn else b.Options
    return tuple(f.name for f in fields_of(cls)) if cls is not None else ()


def _lacks(b, kind: str) -> bool:
    return {"margin": not b.has("margin"), "find-beta": not b.has("find_beta"),
            "learn": b.trainer is None, "run": b.stepping is None}.get(kind, False)


def _is_halt(v) -> bool:
    """A ``halt+K`` value (or a misspelt one, which :meth:`_Builder._halt_value` refuses)."""
    return isinstance(v, str) and re.match(r"\s*halt\b", v) is not None


def _bad_value(v):
    return v if isinstance(v, (str, int, float)) and not isinstance(v, bool) else None


def _shown_toml(v) -> str:
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "a list"
    return _shown(v) if isinstance(v, (str, bool, int, float)) else f"a {type(v).__name__}"


def _no_dates(doc: _Doc, value, table, key) -> None:
    """TOML dates and times are no values tm2nn takes (and not JSON): refuse them here."""
    import datetime

    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (datetime.date, datetime.time)):
            raise doc.at(f"{key}: a TOML date or time is not a value tm2nn takes", table, key, None)
        if isinstance(v, list):
            stack += v
        elif isinstance(v, dict):
            stack += v.values()
