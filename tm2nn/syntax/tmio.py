"""turingmachine.io machines (YAML, Andy Li's turing-machine-viz).

Format
------
The machine is a YAML mapping with keys ``blank``, ``start state``, ``table`` and optionally
``input``, ``name`` and ``synonyms``.  It sits either at the top level or, as in the files
the site exports, as a string under the key ``source code`` (with ``name`` and
``positions`` beside it).

``table`` maps each state to null (no transitions) or to a mapping from symbols to
instructions.  A symbol key may list several symbols: ``[0,1]`` or ``0,1`` (the site
turns a key into text and splits it on commas, reading ``,,`` as the symbol ``,``; so
``','`` and ``[0, ',']`` also work).  An instruction is

* ``L`` / ``R`` (move, keep symbol and state), ``N`` (stay; newer versions of the site);
* a synonym name defined under ``synonyms``;
* a mapping with exactly one of ``L``, ``R``, ``N`` (value: the next state, or null to keep
  the state) and optionally ``write: <symbol>``.

YAML scalars follow the site's YAML (js-yaml, core schema): ``1`` is the symbol ``'1'``,
``true`` is ``'true'``, ``yes``/``on`` are plain strings.  Symbols are single characters;
a longer symbol is an error.  Every next state must be a key of ``table``.

Semantics kept from the site
----------------------------
The machine halts when no transition applies; the transition into a state counts, the
failed lookup does not (the bbchallenge convention, ``missing_rule_counts_step=False``).
A state is not special for having no entry: the IR gets no halting states, and the
interpreter reports outcome ``halt`` for the state where the run stopped.
``binaryIncrement`` on ``1011`` halts after 8 steps with ``1100``.

Choices of this importer
------------------------
* Alphabet: the blank, then every symbol read or written, then the symbols of the default
  ``input``, in order of first appearance.  Input strings with other symbols are rejected
  by the interpreter (the site would halt on them).
* Two keys of one state that list the same symbol are an error (the site silently keeps
  one of them, in JavaScript key order).  Duplicate YAML keys are an error, as in js-yaml.
* The machine is named by ``name`` (outer, then inner), else by the file stem.
* The default ``input`` is not part of the IR: :func:`default_input` returns it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import Machine, Rule
from tm2nn.source import SourceText

KIND = "machine"

_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"


class _Loader(yaml.SafeLoader):
    """Composes node trees; scalars resolve roughly as js-yaml's core schema does."""

    yaml_implicit_resolvers: dict = {}


for _tag, _pattern in (
    (_NULL, r"~|null|Null|NULL|"),
    (_BOOL, r"true|True|TRUE|false|False|FALSE"),
    (_INT, r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+|0b[01]+"),
    (_FLOAT, r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
             r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"),
):
    _Loader.add_implicit_resolver(_tag, re.compile(rf"(?:{_pattern})\Z"), None)


# A position mapper: 0-based (line, col) in the composed text -> 1-based (line, col) in the file.
Mapper = Callable[[int, int], tuple[int, int]]


def _identity(line: int, col: int) -> tuple[int, int]:
    return line + 1, col + 1


@dataclass
class _Doc:
    """A composed YAML text and how its positions map to the file."""

    src: SourceText
    pos: Mapper

    def at(self, node: Node) -> tuple[int, int]:
        return self.pos(node.start_mark.line, node.start_mark.column)

    def error(self, message: str, node: Node | None) -> Tm2nnError:
        if node is None:
            return self.src.error(message, 1, 1)
        return self.src.error(message, *self.at(node))

    def loc(self, node: Node):
        return self.src.loc(*self.at(node))


def _compose(src: SourceText, text: str, pos: Mapper) -> Node | None:
    try:
        return yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        what = " ".join(str(p) for p in (e.context, e.problem) if p) or "bad YAML"
        if mark is None:
            raise src.error(f"YAML error: {what}", 1, 1) from None
        raise src.error(f"YAML error: {what}", *pos(mark.line, mark.column)) from None
    except yaml.reader.ReaderError as e:
        before = text[: max(0, e.position)]
        line = before.count("\n")
        col = len(before) - (before.rfind("\n") + 1)
        raise src.error(f"YAML error: {e.reason} (character {e.character!r})", *pos(line, col)) from None
    except yaml.YAMLError as e:
        raise src.error(f"YAML error: {e}", 1, 1) from None
    except RecursionError:
        raise src.error("YAML error: nested too deeply", 1, 1) from None


def _scalar(doc: _Doc, node: Node):
    """A scalar node's value: None, bool, int, float or str."""
    if not isinstance(node, ScalarNode):
        raise doc.error("expected a single value here, not a list or mapping", node)
    tag, v = node.tag, node.value
    if tag == _STR:
        return v
    if tag == _NULL:
        return None
    if tag == _BOOL:
        return v.lower() == "true"
    if tag == _INT:
        try:
            s = v.replace("_", "")
            if s[:2] in ("0o", "0x", "0b"):
                return int(s[2:], {"o": 8, "x": 16, "b": 2}[s[1]])
            return int(s, 10)
        except ValueError:
            return v
    if tag == _FLOAT:
        low = v.lower()
        if low.endswith(".nan"):
            return math.nan
        if low.endswith(".inf"):
            return -math.inf if v.startswith("-") else math.inf
        try:
            return float(v)
        except ValueError:
            return v
    raise doc.error(f"unsupported YAML tag {tag!r}", node)


def _js_str(value) -> str:
    """``String(value)`` in JavaScript, for the scalar kinds YAML produces."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    return str(value)


def _key_str(doc: _Doc, node: Node) -> str:
    """A mapping key as js-yaml stores it: scalars via String(), lists joined by ','."""
    if isinstance(node, SequenceNode):
        parts = []
        for item in node.value:
            if isinstance(item, SequenceNode):
                raise doc.error("nested lists are not supported inside keys", item)
            parts.append("[object Object]" if isinstance(item, MappingNode) else _js_str(_scalar(doc, item)))
        return ",".join(parts)
    if isinstance(node, MappingNode):
        return "[object Object]"
    return _js_str(_scalar(doc, node))


def _mapping(doc: _Doc, node: Node, what: str) -> list[tuple[str, Node, Node]]:
    """``(key, key_node, value_node)`` triples of a mapping node, rejecting duplicate keys."""
    if not isinstance(node, MappingNode):
        raise doc.error(f"{what} must be a mapping", node)
    out: list[tuple[str, Node, Node]] = []
    seen: dict[str, Node] = {}
    for knode, vnode in node.value:
        key = _key_str(doc, knode)
        if key in seen:
            first = seen[key]
            line, col = doc.at(first)
            raise doc.src.error(
                f"duplicate key {key!r} in {what}", *doc.at(knode),
                notes=(f"{doc.src.path}:{line}:{col}: note: the first {key!r} is here",),
            )
        seen[key] = knode
        out.append((key, knode, vnode))
    return out


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _NULL


def _split_symbols(key: str) -> list[str]:
    """The site's reading of a symbol key: split on ',', where ',,' means the symbol ','."""
    out: list[str] = []
    for part in key.split(","):
        if part == "" and out and out[-1] == "":
            out[-1] = ","
        else:
            out.append(part)
    return out


def _block_mapper(src: SourceText, node: ScalarNode) -> Mapper:
    """Map positions inside a ``source code: |`` block back to the file.

    A literal block keeps its lines verbatim behind a fixed indentation.  When that checks
    out line by line, positions map exactly; otherwise they all map to the value's start.
    """
    start_line, start_col = node.start_mark.line, node.start_mark.column

    def fallback(line: int, col: int) -> tuple[int, int]:
        return start_line + 1, start_col + 1

    if node.style != "|":
        return fallback
    inner = node.value.split("\n")
    first = start_line + 1  # 0-based file line of the block's first content line
    file_lines = src.lines
    indent = None
    for i, text in enumerate(inner):
        if text.strip() and first + i < len(file_lines):
            raw = file_lines[first + i]
            indent = len(raw) - len(raw.lstrip(" "))
            break
    if indent is None:
        return fallback
    for i, text in enumerate(inner):
        n = first + i
        if n >= len(file_lines):
            if text:
                return fallback
            continue
        raw = file_lines[n]
        if raw[indent:] != text and not (text == "" and raw.strip() == ""):
            return fallback

    def mapper(line: int, col: int) -> tuple[int, int]:
        if line >= len(inner):
            line, col = len(inner) - 1, len(inner[-1])
        return first + line + 1, indent + col + 1

    return mapper


@dataclass
class _Spec:
    doc: _Doc
    root: Node
    name: str | None
    entries: dict[str, tuple[Node, Node]]


def _load(src: SourceText) -> _Spec | None:
    """Find the machine mapping (top level or inside ``source code``)."""
    text = src.text
    outer = _Doc(src, _identity)
    root = _compose(src, text, _identity)
    if root is None:
        return None
    top = {k: (kn, vn) for k, kn, vn in _mapping(outer, root, "the document")}
    name = None
    if "name" in top and not _is_null(top["name"][1]):
        name = _js_str(_scalar(outer, top["name"][1]))
    doc, spec_root = outer, root
    if "source code" in top:
        vnode = top["source code"][1]
        code = _scalar(outer, vnode)
        if not isinstance(code, str):
            raise outer.error("'source code' must be a string holding the machine's YAML", vnode)
        pos = _block_mapper(src, vnode)
        doc = _Doc(src, pos)
        spec_root = _compose(src, code, pos)
        if spec_root is None:
            raise outer.error("'source code' is empty: expected blank, start state and table", vnode)
    entries = {k: (kn, vn) for k, kn, vn in _mapping(doc, spec_root, "the machine")}
    if name is None and "name" in entries and not _is_null(entries["name"][1]):
        name = _js_str(_scalar(doc, entries["name"][1]))
    return _Spec(doc, spec_root, name, entries)


def _input_of(spec: _Spec) -> str | None:
    if "input" not in spec.entries:
        return None
    value = _scalar(spec.doc, spec.entries["input"][1])
    if value is None:
        return None
    # The site: spec.input ? String(spec.input).split('') : []
    falsy = value in (0, "", False) or (isinstance(value, float) and math.isnan(value))
    return "" if falsy else _js_str(value)


def _as_source(text: str | SourceText) -> SourceText:
    if isinstance(text, SourceText):
        return text
    return SourceText.from_string(text, "<tmio>")


def default_input(text: str | SourceText) -> str | None:
    """The machine's ``input`` (its default tape), or None if it has none."""
    src = _as_source(text)
    spec = _load(src)
    return None if spec is None else _input_of(spec)


@dataclass(frozen=True)
class _Action:
    write: str | None
    move: str
    next: str | None


_MOVE_KEYS = {"L": "L", "R": "R", "N": "S"}


def _action(doc: _Doc, node: Node, synonyms: dict[str, _Action] | None, states: dict) -> _Action:
    if isinstance(node, ScalarNode) and node.tag != _NULL:
        value = _scalar(doc, node)
        if not isinstance(value, str):
            raise doc.error(
                f"invalid instruction {_js_str(value)!r}: expected L, R, a synonym, "
                "or a mapping like {write: 1, R: next}",
                node,
            )
        if value in _MOVE_KEYS:
            return _Action(None, _MOVE_KEYS[value], None)
        if synonyms is not None and value in synonyms:
            return synonyms[value]
        hint = "" if synonyms is not None else " (a synonym cannot be defined by another synonym)"
        raise doc.error(f"unknown instruction {value!r}: expected L, R or a synonym{hint}", node)
    if _is_null(node):
        raise doc.error("missing instruction: expected L, R, a synonym, or {write: 1, R: next}", node)
    items = _mapping(doc, node, "an instruction")
    keys = {k: (kn, vn) for k, kn, vn in items}
    for k, kn, _ in items:
        if k not in ("L", "R", "N", "write"):
            raise doc.error(f"unknown key {k!r} in instruction: expected L, R or N, and optionally write", kn)
    moves = [kn for k, kn, _ in items if k in ("L", "R")]
    if len(moves) > 1:
        raise doc.error("conflicting moves: an instruction has exactly one of L and R", moves[1])
    move_key = next((k for k in ("L", "R", "N") if k in keys), None)
    if move_key is None:
        raise doc.error("missing move: an instruction needs L or R (e.g. {write: 1, R: next})", node)
    snode = keys[move_key][1]
    nxt = None if _is_null(snode) else _js_str(_scalar(doc, snode))
    if nxt is not None and nxt not in states:
        raise doc.error(f"undeclared state {nxt!r}: every state must be a key of 'table'", snode)
    write = None
    if "write" in keys:
        wnode = keys["write"][1]
        write = _js_str(_scalar(doc, wnode))
        if len(write) != 1:
            raise doc.error(f"write needs a single character, not {write!r}", wnode)
    return _Action(write, _MOVE_KEYS[move_key], nxt)


def parse(src: SourceText) -> list[Machine]:
    spec = _load(src)
    if spec is None:
        return []
    doc, entries = spec.doc, spec.entries

    def required(key: str) -> Node:
        if key not in entries or _is_null(entries[key][1]):
            raise doc.error(f"missing {key!r}: a machine needs blank, start state and table", spec.root)
        return entries[key][1]

    bnode = required("blank")
    blank = _js_str(_scalar(doc, bnode))
    if len(blank) != 1:
        raise doc.error(f"the blank must be a single character, not {blank!r} (e.g. blank: ' ')", bnode)
    snode = required("start state")
    start = _js_str(_scalar(doc, snode))
    tnode = required("table")
    table = _mapping(doc, tnode, "the table")
    states = {q: None for q, _, _ in table}
    if start not in states:
        raise doc.error(f"the start state {start!r} is not declared in the table", snode)

    synonyms: dict[str, _Action] = {}
    if "synonyms" in entries and not _is_null(entries["synonyms"][1]):
        for k, _, vnode in _mapping(doc, entries["synonyms"][1], "synonyms"):
            synonyms[k] = _action(doc, vnode, None, states)

    symbols: dict[str, None] = {blank: None}
    rules: list[Rule] = []
    for q, _, body in table:
        if _is_null(body):
            continue
        if not isinstance(body, MappingNode):
            raise doc.error(
                f"state {q!r}: expected a mapping from symbols to instructions (or nothing)", body
            )
        seen: dict[str, Node] = {}
        for key, knode, vnode in _mapping(doc, body, f"state {q!r}"):
            act = _action(doc, vnode, synonyms, states)
            for a in _split_symbols(key):
                if len(a) != 1:
                    raise doc.error(f"state {q!r}: symbol {a!r} is not a single character", knode)
                if a in seen:
                    line, col = doc.at(seen[a])
                    raise doc.src.error(
                        f"state {q!r}: two instructions for symbol {a!r}", *doc.at(knode),
                        notes=(f"{src.path}:{line}:{col}: note: the first is here",),
                    )
                seen[a] = knode
                w = a if act.write is None else act.write
                symbols.setdefault(a)
                symbols.setdefault(w)
                rules.append(Rule(q, a, w, act.move, q if act.next is None else act.next, loc=doc.loc(knode)))
    for a in _input_of(spec) or "":
        symbols.setdefault(a)

    name = spec.name or Path(src.path).stem or "machine"
    return [Machine(
        name=name,
        alphabet=tuple(symbols),
        blank=blank,
        states=tuple(states),
        start=start,
        halting={},
        rules=tuple(rules),
        missing_rule_counts_step=False,
        loc=doc.loc(spec.root),
        locations={"start": doc.loc(snode)},
    )]
