"""Text -> IR.  One module per format; this file only dispatches.

Every format module exposes

* ``KIND``: ``"machine"`` or ``"circuit"``;
* ``parse(src: SourceText) -> list[Machine | GridMachine | Circuit]`` — raises
  :class:`~tm2nn.errors.Tm2nnError` (via ``src.error``) on bad input, never anything else;
* optionally ``dump(ir) -> str``, the inverse, used by ``tm2nn convert``.

Formats are chosen by extension, ``--format NAME`` overrides.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from tm2nn.errors import Tm2nnError
from tm2nn.ir import Circuit, Learner, Machine, NoisyLearner
from tm2nn.limits import human
from tm2nn.options import OptionError
from tm2nn.source import SourceText
from tm2nn.syntax.budget import check_source

# format name -> module (under tm2nn.syntax)
FORMATS: dict[str, str] = {
    "tm": "tm_dsl",
    "circ": "circuit_dsl",
    "std": "std",
    "morphett": "morphett",
    "tmio": "tmio",
    "bench": "bench",
    "aag": "aiger",
    "aig": "aiger_binary",
    "blif": "blif",
}

EXTENSIONS: dict[str, str] = {
    ".tm": "tm",
    ".circ": "circ",
    ".std": "std",
    ".morphett": "morphett",
    ".yaml": "tmio",
    ".yml": "tmio",
    ".bench": "bench",
    ".aag": "aag",
    ".aig": "aig",
    ".blif": "blif",
}


def format_module(fmt: str) -> ModuleType:
    if fmt not in FORMATS:
        raise Tm2nnError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    return importlib.import_module(f"tm2nn.syntax.{FORMATS[fmt]}")


def guess_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in EXTENSIONS:
        return EXTENSIONS[suffix]
    known = ", ".join(sorted(EXTENSIONS))

    raise OptionError(
        f"cannot tell the format of {str(path)!r} from its extension {suffix or '(none)'!r}; "
        f"name it with {{format}} (extensions: {known}; formats: {', '.join(FORMATS)})", "format"
    )


def parse_text(text: str | bytes, fmt: str, path: str = "<string>") -> list:
    """Parse ``text`` in format ``fmt``; ``path`` names it in error messages."""
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    src = SourceText.register(path, data)
    return _parse(src, fmt)


def load_all(path: str | Path, fmt: str | None = None) -> list:
    """Every machine or circuit in the file at ``path``."""
    fmt = fmt or guess_format(path)
    mod = format_module(fmt)  # unknown format is an error before the file is read
    src = SourceText.from_file(path)
    return _parse(src, fmt, mod)


def _aiger_kind(src: SourceText, fmt: str) -> str:
    """An AIGER file is read as its header says (``aag``: ASCII, ``aig``: binary),
    whatever its extension."""
    head = src.data.split(b"\n", 1)[0].split()[:1]
    return {b"aag": "aag", b"aig": "aig"}.get(head[0] if head else b"", fmt)


def _parse(src: SourceText, fmt: str, mod: ModuleType | None = None) -> list:
    if fmt in ("aag", "aig") and _aiger_kind(src, fmt) != fmt:
        fmt, mod = _aiger_kind(src, fmt), None
    mod = mod or format_module(fmt)
    src = src.text_form() if fmt != "aig" else src
    check_source(src, fmt)
    items = _parsed(src, mod)
    items = [it for it in items if not _empty(it)]
    if not items:
        raise src.error(f"no {'machine' if mod.KIND == 'machine' else 'circuit'} found", None)
    for it in items:
        _has_outputs(src, fmt, it)
    return items


def _parsed(src: SourceText, mod: ModuleType) -> list:
    """``mod.parse(src)``; running out of memory past the estimate is one error line, raised
    once the parse's partial state (held by the MemoryError's traceback) is freed."""
    try:
        return mod.parse(src)
    except MemoryError:
        pass
    raise Tm2nnError(f"out of memory while reading {src.path} ({human(len(src.data))}); the memory limit "
                     f"(--max-memory) was not reached by the estimate, so the machine has less than it says")


def _empty(item) -> bool:
    """A circuit with no inputs, outputs or gates: what an empty (or comment-only) file
    of a format without a header reads as."""

    return isinstance(item, Circuit) and not (item.inputs or item.outputs or item.gates)


def _has_outputs(src: SourceText, fmt: str, item) -> None:
    """A source circuit computes something: one with no outputs is an error, at its
    declaration (every format alike)."""

    if isinstance(item, Circuit) and not item.outputs:
        loc = item.loc
        raise src.error(f"circuit {item.name!r} has no outputs, so it computes nothing: declare them "
                        f"({_OUTPUTS.get(fmt, 'an output line')})",
                        loc.line if loc else 1, loc.col if loc else 1)


#: How each circuit format declares outputs (for the error above).
_OUTPUTS = {"circ": "'output NAME ...'", "bench": "'OUTPUT(NAME)'", "blif": "'.outputs NAME ...'",
            "aag": "the header's O and one output literal a line", "aig": "the header's O and one output literal a line"}


def select(items: list, name: str | None, path: str = "") -> object:
    """Pick one item by name, or by 1-based index, default the first."""
    if name is None:
        return items[0]
    for it in items:
        if it.name == name:
            return it
    if name.isdigit() and 1 <= int(name) <= len(items):
        return items[int(name) - 1]
    shown = ", ".join(it.name for it in items[:10]) + (", ..." if len(items) > 10 else "")
    raise Tm2nnError(
        f"{path or 'input'}: no machine or circuit named {name!r} "
        f"(it holds {len(items)}: {shown}; a 1-based index also works)"
    )


def load(path: str | Path, fmt: str | None = None, name: str | None = None):
    """One machine, circuit or learner from ``path`` (``name`` picks one from a
    multi-item file).  A ``.circ`` file with a ``learner`` block lists its learners
    first, so without ``name`` this returns the (first) learner."""
    return select(load_all(path, fmt), name, str(path))


def native_format(ir) -> str:
    """tm2nn's own format for ``ir``: ``tm`` for machines, ``circ`` for circuits and learners
    (what a model file records its source in)."""
    return "tm" if isinstance(ir, Machine) else "circ"


def native_text(ir) -> str:
    """``ir`` written in tm2nn's own format (:func:`native_format`)."""
    return dump(ir, native_format(ir))


def dump(obj, fmt: str) -> str:
    """Write ``obj`` in format ``fmt`` (``tm``/``std`` for machines, ``circ``/``bench`` for circuits)."""
    mod = format_module(fmt)
    if not hasattr(mod, "dump"):
        raise Tm2nnError(f"tm2nn cannot write the {fmt!r} format")

    if isinstance(obj, (Learner, NoisyLearner)) and fmt != "circ":
        raise Tm2nnError(f"only the 'circ' format can hold a learner, not {fmt!r}")
    want = "circuit" if isinstance(obj, (Circuit, Learner, NoisyLearner)) else "machine"
    if mod.KIND != want:
        raise Tm2nnError(f"the {fmt!r} format holds {mod.KIND}s, not {want}s")
    return mod.dump(obj)
