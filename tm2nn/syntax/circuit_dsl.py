"""The tm2nn circuit language (``.circ``): parser and writer.

The grammar is ``grammars/circuit.lark`` (LALR(1)).  A file holds either one
circuit written bare, named after the file's stem, or one or more blocks::

    circuit NAME {
      ...items...
    }

Items, one per line; ``#`` starts a comment, blank lines are ignored, and an
expression may continue across lines while a parenthesis is open:

``input a b c[8]``
    Declares inputs, in order.  ``c[8]`` is a vector: it declares ``c[0]`` ..
    ``c[7]`` in that order.  Several ``input`` lines may appear; the input order
    is the declaration order.  Commas between names are optional.
``output s cout v[4]``
    Declares outputs, expanded the same way; output order is declaration order.
    An output may be an input or any assigned signal, and may be listed twice.
``name = EXPR`` and ``v[2] = EXPR``
    Assigns a signal (a vector element is assigned one at a time).

Expressions:

* gate calls ``AND(a, b, c)``, ``OR``, ``NOT``, ``XOR``, ``NAND``, ``NOR``, ``XNOR``,
  ``BUF`` (case-insensitive), any fan-in of at least one (``NOT``/``BUF``: exactly
  one), nested arbitrarily; a trailing comma is allowed;
* infix operators ``~x`` (NOT), ``a & b`` (AND), ``a ^ b`` (XOR), ``a | b`` (OR),
  binding in that order (``~`` tightest): ``a | b & c`` is ``OR(a, AND(b, c))``;
* a chain of one infix operator is one wide gate: ``a & b & c`` is
  ``AND(a, b, c)``.  Parentheses are kept: ``(a & b) & c`` is
  ``AND(AND(a, b), c)``, so one can ask for a tree of small gates; a gate call is
  never merged with anything;
* the constants ``0`` and ``1``;
* signal references.

What an assignment ``y = EXPR`` makes: ``y = x`` is ``BUF(x)``; ``y = 0`` is a
CONST0 gate; ``y = OP(...)`` (or an infix form) is that gate driving ``y``.  Each
nested gate or constant becomes an internal gate named ``y$k`` (k = 1, 2, ...
in left-to-right, inner-first order), skipping every ``k`` whose name already
appears anywhere in the circuit.

Names: an identifier ``[A-Za-z_][A-Za-z0-9_.$]*`` with an optional element index
``[N]`` (``c[03]`` is ``c[3]``), or any text in double quotes with the escapes
``\\"`` ``\\\\`` ``\\n`` ``\\t`` ``\\r`` and ``\\u{HEX}``: ``"1gat"``, ``"N6287"``,
``"a b"``.  A quoted name is taken verbatim: ``input "c[3]"`` declares one input
named ``c[3]``, not a vector.  ``0`` and ``1`` unquoted are constants; the words
``input``, ``output`` and ``circuit`` are keywords only where a keyword can stand:
``input input`` declares an input named ``input`` and ``output = a`` assigns it,
but as the first word of a bare file ``circuit x`` starts a block (quote the
name, ``"circuit"``, to be safe; :func:`dump` always does).  Gate names are not reserved: ``AND`` alone is a signal,
``AND(...)`` is a gate.

Checks, each reported at its position: syntax errors (with what was expected),
unknown gate names, wrong fan-in, constants other than 0/1, an index outside a
declared vector (``c[9]`` with ``input c[8]``; an element of a name never
declared as a vector is an ordinary name, undefined unless assigned), an input
declared twice, undefined signals, and -- through the IR's validation --
redefinitions, assignments to inputs, outputs never defined, and cycles.

:func:`dump` writes any :class:`~tm2nn.ir.Circuit` back in this language, one
flat assignment per gate, so that ``parse(dump(c))[0] == c``.

Implementation: one cached LALR parser whose callbacks build the items while
parsing (an inline transformer), and positions come from the tokens; nothing
recurses, so deeply nested expressions are fine.  It reads ~10^4 lines a second, so
flat texts (one gate per line, what :func:`dump` writes) go through a line scanner
first, :mod:`tm2nn.syntax.circuit_flat`, ~20 times faster; it gives the same circuits
or None, and any other text, and any text with an error, is read by the grammar.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from lark import Lark, Token
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.lark import PostLex

from tm2nn.errors import Loc, Tm2nnError
from tm2nn.gc_pause import gc_paused
from tm2nn.ir.circuit import Circuit, Gate
from tm2nn.ir.learner import BaseLearner, Learner
from tm2nn.ir.noisy_learner import NoisyLearner
from tm2nn.learners.theorem4 import Theorem4Options, theorem4
from tm2nn.source import SourceText
from tm2nn.syntax.budget import check_grammar
from tm2nn.syntax.circuit_flat import parse_flat
from tm2nn.syntax.grammar import grammar_path, lalr_parser

KIND = "circuit"

GRAMMAR_PATH = grammar_path("circuit.lark")

#: Gate calls the language knows; the value is the IR op.
CALLS = {op: op for op in ("AND", "OR", "NOT", "XOR", "NAND", "NOR", "XNOR", "BUF")}
_INFIX_OP = {"&": "AND", "^": "XOR", "|": "OR"}
KEYWORDS = frozenset({"input", "output", "circuit", "learner", "noisy_learner"})
#: The item words of a ``learner`` block, in the order :func:`dump_learner` writes them.
LEARNER_WORDS = ("input", "random", "coin", "memory", "init", "output", "update")
#: The item words of a ``learner`` block with ``phases theorem4``: a learning algorithm
#: (Theorem 4's A) that :func:`tm2nn.learners.theorem4.theorem4` gives its phases.
THEOREM4_WORDS = ("phases", "input", "random", "label", "memory", "init", "predict", "update", "done",
                  "samples", "coin", "counter")
#: The item words of a ``noisy_learner`` block (§4.2), in the order :func:`dump_noisy_learner` writes them.
NOISY_WORDS = ("input", "samples", "output")
#: Largest vector one declaration may expand to.
MAX_VECTOR = 1 << 20

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")
_INDEXED = re.compile(r"([A-Za-z_][A-Za-z0-9_.$]*)\[(0|[1-9][0-9]*)\]")
_NAME_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_.$]*)(?:\[([0-9]+)\])?")


# --------------------------------------------------------------------------- parse tree


class _Err(Exception):
    """An error found while reducing; turned into a Tm2nnError by :func:`parse`."""

    def __init__(self, message: str, line: int, col: int, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message, self.line, self.col, self.notes = message, line, col, notes


@dataclass
class _Sig:
    name: str
    line: int
    col: int
    quoted: bool
    base: str | None = None  # for an unquoted ``base[index]``
    index: int | None = None


@dataclass
class _Expr:
    kind: str  # "ref" | "const" | "gate"
    line: int
    col: int
    op: str = ""  # gate op, or CONST0/CONST1
    args: list = field(default_factory=list)
    sig: _Sig | None = None  # for "ref"
    infix: bool = False  # built by an infix operator chain (may be extended)
    grouped: bool = False  # wrapped in parentheses (not extended any more)


@dataclass
class _Decl:
    kind: str  # "input" | "output"
    sigs: list


@dataclass
class _Assign:
    target: _Sig
    expr: _Expr


@dataclass
class _Block:
    name: _Sig
    line: int
    col: int
    items: list


@dataclass
class _LItem:
    word: Token
    sigs: list


@dataclass
class _LearnerBlock:
    name: _Sig
    line: int
    col: int
    items: list


@dataclass
class _NoisyBlock:
    name: _Sig
    line: int
    col: int
    items: list  # _LItem, sigs holding _Sig and NUMBER tokens


_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
_ESCAPE_RE = re.compile(r"\\(u\{([0-9A-Fa-f]{1,6})\}|.)")


def _unquote(tok: Token) -> str:
    body = tok.value[1:-1]

    def repl(m: re.Match) -> str:
        if m.group(2) is not None:
            cp = int(m.group(2), 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                raise _Err(f"\\u{{{m.group(2)}}} is not a character", tok.line, tok.column + 1 + m.start())
            return chr(cp)
        ch = m.group(1)
        if ch not in _ESCAPES:
            raise _Err(
                f"unknown escape '\\{ch}' in a quoted name (known: \\\" \\\\ \\n \\t \\r \\u{{HEX}})",
                tok.line,
                tok.column + 1 + m.start(),
            )
        return _ESCAPES[ch]

    name = _ESCAPE_RE.sub(repl, body)
    if not name:
        raise _Err("empty signal name", tok.line, tok.column)
    return name


class _Builder:
    """Inline LALR callbacks: build the item list while parsing (no recursion)."""

    def sig(self, children):
        (tok,) = children
        if tok.type == "QUOTED":
            return _Sig(_unquote(tok), tok.line, tok.column, True)
        m = _NAME_TOKEN.fullmatch(tok.value)
        base, index = m.group(1), m.group(2)
        if index is None:
            return _Sig(base, tok.line, tok.column, False)
        if len(index.lstrip("0")) > 18:
            raise _Err(f"index [{index}] is too large", tok.line, tok.column)
        i = int(index)
        return _Sig(f"{base}[{i}]", tok.line, tok.column, False, base, i)

    def target(self, children):
        (x,) = children
        if isinstance(x, Token):  # a keyword used as the assigned name: ``input = a``
            return _Sig(x.value, x.line, x.column, False)
        return x

    def ref(self, children):
        (s,) = children
        return _Expr("ref", s.line, s.col, sig=s)

    def const(self, children):
        (tok,) = children
        if tok.value in ("0", "1"):
            return _Expr("const", tok.line, tok.column, op="CONST" + tok.value)
        hint = f'; a name that starts with a digit must be quoted: "{tok.value}"'
        if tok.value.isdigit():
            hint = ""
        raise _Err(f"{tok.value!r} is not a constant (the constants are 0 and 1){hint}",
                   tok.line, tok.column)

    def call(self, children):
        name, args = children[0], [a for a in children[2:-1] if isinstance(a, _Expr)]
        op = CALLS.get(name.value.upper())
        if op is None:
            raise _Err(
                f"unknown gate {name.value!r} (known: {', '.join(CALLS)}, case-insensitive)",
                name.line, name.column,
            )
        if op in ("NOT", "BUF") and len(args) != 1:
            raise _Err(f"{op} takes exactly one input, got {len(args)}", name.line, name.column)
        if not args:
            raise _Err(f"{op} needs at least one input", name.line, name.column)
        return _Expr("gate", name.line, name.column, op=op, args=args)

    def group(self, children):
        e = children[1]
        e.grouped = True
        return e

    def negate(self, children):
        tok, e = children
        return _Expr("gate", tok.line, tok.column, op="NOT", args=[e])

    def infix(self, children):
        left, tok, right = children
        op = _INFIX_OP[tok.value]
        if left.kind == "gate" and left.infix and not left.grouped and left.op == op:
            left.args.append(right)
            return left
        return _Expr("gate", tok.line, tok.column, op=op, args=[left, right], infix=True)

    def assign(self, children):
        return _Assign(children[0], children[2])

    def input_decl(self, children):
        return _Decl("input", [s for s in children[1:] if isinstance(s, _Sig)])

    def output_decl(self, children):
        return _Decl("output", [s for s in children[1:] if isinstance(s, _Sig)])

    def block(self, children):
        kw, name = children[0], children[1]
        items = [c for c in children[3:-1] if isinstance(c, (_Decl, _Assign))]
        return _Block(name, kw.line, kw.column, items)

    def lword(self, children):
        return children[0]

    def learner(self, children):
        kw, name = children[0], children[1]
        items = []
        rest = [c for c in children[3:-1] if isinstance(c, (Token, _Sig))]
        for c in rest:
            if isinstance(c, Token) and c.type in ("NAME", "INPUT", "OUTPUT"):
                items.append(_LItem(c, []))
            elif isinstance(c, _Sig) or (isinstance(c, Token) and c.type == "NUMBER"):
                items[-1].sigs.append(c)
        return _LearnerBlock(name, kw.line, kw.column, items)

    def noisy_learner(self, children):
        kw, name = children[0], children[1]
        items = []
        for c in children[3:-1]:
            if isinstance(c, Token) and c.type in ("NAME", "INPUT", "OUTPUT"):
                items.append(_LItem(c, []))
            elif isinstance(c, _Sig) or (isinstance(c, Token) and c.type == "NUMBER"):
                items[-1].sigs.append(c)
        return _NoisyBlock(name, kw.line, kw.column, items)

    def start(self, children):
        return list(children)


class _Lines(PostLex):
    """Newline handling: drop newlines inside parentheses, collapse blank lines,
    and end the last item (and the item before a ``}``) with a newline."""

    # ``}`` too, so that a ``}`` ending an item's line reaches process() and can
    # get its newline inserted (the contextual lexer would reject it otherwise).
    always_accept = ("_NL", "RBRACE")

    def process(self, stream):
        depth = 0
        last = None
        for tok in stream:
            t = tok.type
            if t == "_NL":
                if depth > 0 or last is None or last.type == "_NL":
                    continue
            elif t == "LPAR":
                depth += 1
            elif t == "RPAR":
                depth = max(0, depth - 1)
            elif t == "RBRACE" and depth == 0 and last is not None and last.type != "_NL":
                yield Token("_NL", "", tok.start_pos, tok.line, tok.column)
            last = tok
            yield tok
        if last is not None and last.type != "_NL" and depth == 0:
            yield Token("_NL", "", last.end_pos, last.end_line, last.end_column)


def _parser() -> Lark:
    return lalr_parser("circuit.lark", lexer="contextual", postlex=_Lines(), transformer=_Builder())


# --------------------------------------------------------------------------- errors

_DESCRIBE = {
    "NAME": "a name",
    "QUOTED": 'a quoted name "..."',
    "NUMBER": "0 or 1",
    "_NL": "end of line",
    "$END": "end of file",
}
_ORDER = ["NAME", "QUOTED", "NUMBER", "NOT_OP", "LPAR", "RPAR", "COMMA", "EQUAL",
          "AND_OP", "XOR_OP", "OR_OP", "INPUT", "OUTPUT", "CIRCUIT", "LEARNER", "NOISY_LEARNER", "LBRACE", "RBRACE",
          "_NL", "$END"]


def _describe_terminal(name: str) -> str:
    if name in _DESCRIBE:
        return _DESCRIBE[name]
    for t in _parser().terminals:
        if t.name == name and t.pattern.type == "str":
            return f"'{t.pattern.value}'"
    return name


def _expected(names) -> str:
    names = sorted(set(names), key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))
    parts = [_describe_terminal(n) for n in names]
    if not parts:
        return ""
    if len(parts) == 1:
        return "; expected " + parts[0]
    return "; expected " + ", ".join(parts[:-1]) + " or " + parts[-1]


def _describe_token(tok: Token) -> str:
    if tok.type == "_NL":
        return "end of line"
    if tok.type == "$END":
        return "end of file"
    if tok.type == "NAME":
        return f"name {tok.value!r}"
    return repr(tok.value)


def _lark_error(src: SourceText, text: str, e: UnexpectedInput) -> Tm2nnError:
    if isinstance(e, UnexpectedCharacters):
        ch = text[e.pos_in_stream] if 0 <= e.pos_in_stream < len(text) else ""
        if ch == '"':
            msg = "unterminated quoted name (a name in double quotes must end on its line)"
        else:
            msg = f"unexpected character {ch!r}"
        return src.error(msg, e.line, e.column)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        try:
            accepts = e.accepts or e.expected
        except Exception:  # pragma: no cover - accepts() replays the parser; fall back
            accepts = e.expected
        msg = f"unexpected {_describe_token(tok)}" + _expected(accepts)
        if tok.type == "$END":
            return _at_end(src, text, msg)
        line, col = tok.line, tok.column
        before = text[: tok.start_pos].rsplit("\n", 1)[-1].strip() if tok.start_pos else ""
        if before == "circuit" and tok.type in ("NAME", "QUOTED"):
            msg += " (a file holds either one bare circuit or 'circuit NAME { ... }' blocks, not both)"
        return src.error(msg, line, col)
    line, col = getattr(e, "line", None), getattr(e, "column", None)
    if not isinstance(line, int) or line < 1:
        return _at_end(src, text, "syntax error")
    return src.error("syntax error", line, col)


def _at_end(src: SourceText, text: str, msg: str) -> Tm2nnError:
    return src.error_at_offset(msg, len(text.rstrip()))


# --------------------------------------------------------------------------- building


def parse(src: SourceText) -> list[Circuit]:
    """Every circuit in ``src``; raises :class:`Tm2nnError` on any bad input.

    A flat text (one gate per line, as :func:`dump` writes it) is read by the fast path
    :func:`~tm2nn.syntax.circuit_flat.parse_flat`, which gives the same result; anything
    else, and any text with an error, by the grammar (:func:`parse_grammar`)."""

    with gc_paused():
        found = parse_flat(src)
        return found if found is not None else parse_grammar(src)


def parse_grammar(src: SourceText) -> list[Circuit]:
    """:func:`parse` by the LALR grammar alone: every form of the language, and the
    located error messages."""
    check_grammar(src)
    text = src.text
    try:
        items = _parser().parse(text)
    except _Err as e:
        raise src.error(e.message, e.line, e.col, notes=e.notes) from None
    except UnexpectedInput as e:
        raise _lark_error(src, text, e) from None
    except LarkError as e:  # pragma: no cover - lark reports input errors as UnexpectedInput
        raise src.error(f"syntax error: {e}", None) from None
    except RecursionError:  # pragma: no cover - parsing and building are iterative
        raise src.error("input nested too deeply", None) from None
    if not items:
        return []
    if isinstance(items[0], (_Block, _LearnerBlock, _NoisyBlock)):
        out, seen = [], {}
        for b in items:
            if b.name.name in seen:
                first = seen[b.name.name]
                what = {_Block: "circuit", _LearnerBlock: "learner"}.get(type(b), "noisy learner")
                raise src.error(f"{what} {b.name.name!r} is defined twice (circuit and learner names "
                                "share one namespace)", b.name.line,
                                b.name.col, notes=(f"{first}: note: first definition is here",))
            seen[b.name.name] = src.loc(b.name.line, b.name.col)
            if isinstance(b, _Block):
                out.append(_build(src, b.name.name, b.items, src.loc(b.line, b.col)))
        circuits = {c.name: c for c in out}
        learners = [_build_learner(src, b, circuits) if isinstance(b, _LearnerBlock)
                    else _build_noisy_learner(src, b, circuits)
                    for b in items if isinstance(b, (_LearnerBlock, _NoisyBlock))]
        return learners + out
    name = Path(src.path).stem or "circuit"
    first = items[0]
    pos = first.target if isinstance(first, _Assign) else first.sigs[0]
    return [_build(src, name, items, src.loc(pos.line, 1))]


def _expand(src: SourceText, s: _Sig) -> list[str]:
    if s.index is None:
        return [s.name]
    if s.index == 0:
        raise src.error(f"vector {s.base}[0] has no elements", s.line, s.col)
    if s.index > MAX_VECTOR:
        raise src.error(f"vector {s.base}[{s.index}] is too large (at most {MAX_VECTOR} elements)",
                        s.line, s.col)
    return [f"{s.base}[{i}]" for i in range(s.index)]


def _build_learner(src: SourceText, b: _LearnerBlock, circuits: dict[str, Circuit]):
    """A ``learner`` block: groups (vectors expand as in ``input``), the h and g
    circuits by name, ``init`` listing the memory bits that start at 1.  With a
    ``phases theorem4`` item, a learning algorithm instead (:func:`_build_theorem4`)."""

    if any(it.word.value == "phases" for it in b.items):
        return _build_theorem4(src, b, circuits)
    groups: dict[str, list[str]] = {"input": [], "random": [], "coin": [], "memory": []}
    locs: dict[str, Loc] = {}
    refs: dict[str, _Sig] = {}
    ones: list[tuple[str, _Sig]] = []
    for it in b.items:
        word = it.word.value
        here = src.loc(it.word.line, it.word.column)
        if word not in LEARNER_WORDS:
            close = difflib.get_close_matches(word, LEARNER_WORDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            if word in THEOREM4_WORDS:
                hint = f"; '{word}' is an item of a learning algorithm, which starts with 'phases theorem4'"
            raise src.error(f"unknown learner item {word!r} (known: {', '.join(LEARNER_WORDS)}){hint}",
                            it.word.line, it.word.column)
        for a in it.sigs:
            if isinstance(a, Token):
                raise src.error(f"'{word}' takes names, not the number {a.value!r}", a.line, a.column)
        if word in ("output", "update"):
            key = "h" if word == "output" else "g"
            if key in refs:
                raise src.error(f"the learner's {word} circuit is given twice", it.word.line, it.word.column,
                                notes=(f"{locs[key]}: note: first given here",))
            if len(it.sigs) != 1:
                raise src.error(f"'{word}' names exactly one circuit, got {len(it.sigs)}",
                                it.word.line, it.word.column)
            s = it.sigs[0]
            refs[key] = s
            locs[key] = src.loc(s.line, s.col)
            continue
        if word == "init":
            locs.setdefault("init", here)
            for s in it.sigs:
                ones += [(n, s) for n in _expand(src, s)]
            continue
        locs.setdefault(word, here)
        for s in it.sigs:
            for n in _expand(src, s):
                locs.setdefault("port:" + n, src.loc(s.line, s.col))
                groups[word].append(n)
    for key, word in (("h", "output"), ("g", "update")):
        if key not in refs:
            raise src.error(f"learner {b.name.name!r} has no '{word}' item naming its "
                            f"{'output (h)' if key == 'h' else 'memory-update (g)'} circuit",
                            b.name.line, b.name.col)
    found = {}
    for key, s in refs.items():
        found[key] = _circuit_ref(src, s, circuits)
    mem = set(groups["memory"])
    init_ones = set()
    for n, s in ones:
        if n not in mem:
            raise src.error(f"'init' lists {n!r}, which is not a memory bit", s.line, s.col)
        init_ones.add(n)
    return Learner(b.name.name, tuple(groups["input"]), tuple(groups["memory"]), found["h"], found["g"],
                   random=tuple(groups["random"]), coin=tuple(groups["coin"]),
                   init=tuple(int(n in init_ones) for n in groups["memory"]),
                   loc=src.loc(b.line, b.col), locs=locs)


def _build_theorem4(src: SourceText, b: _LearnerBlock, circuits: dict[str, Circuit]):
    """A ``learner`` block with ``phases theorem4``: a learning algorithm (Abbe & Sandon
    §4.1, Theorem 4's A, a :class:`~tm2nn.ir.learner.BaseLearner`) -- groups ``input``
    ``random`` ``memory`` ``init`` as in the Lemma 3 form, ``label Y`` (default ``y``),
    circuits ``predict P`` (over x ++ r ++ b), ``update U`` (over x ++ r ++ y ++ b) and
    ``done D`` or ``samples T``; optional ``coin`` and ``counter`` name what the
    transformation adds.  Returns ``theorem4(base)``, the Lemma 3 learner."""

    groups: dict[str, list[str]] = {"input": [], "random": [], "memory": []}
    single: dict[str, object] = {}
    locs: dict[str, Loc] = {}
    ones: list[tuple[str, _Sig]] = []
    for it in b.items:
        word, w = it.word.value, it.word
        if word not in THEOREM4_WORDS:
            close = difflib.get_close_matches(word, THEOREM4_WORDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            extra = " ('output' is the Lemma 3 form's; here it is 'predict')" if word == "output" else ""
            raise src.error(f"unknown item {word!r} of a 'phases theorem4' learner "
                            f"(known: {', '.join(THEOREM4_WORDS)}){extra}{hint}", w.line, w.column)
        for a in it.sigs:
            if isinstance(a, Token) and word != "samples":
                raise src.error(f"'{word}' takes names, not the number {a.value!r}", a.line, a.column)
        if word in groups or word == "init":
            locs.setdefault(word, src.loc(w.line, w.column))
            for s in it.sigs:
                for n in _expand(src, s):
                    if word == "init":
                        ones.append((n, s))
                    else:
                        locs.setdefault("port:" + n, src.loc(s.line, s.col))
                        groups[word].append(n)
            continue
        a, line, col = _single_arg(src, it, single, locs, "the learner's")
        if word == "samples":
            # the range is checked by the base learner's validation
            single[word] = _count_arg(src, a, line, col, "the number T of learned samples after which "
                                      "the algorithm is done")
        elif word == "phases":
            if a.name != "theorem4":
                raise src.error(f"unknown phases {a.name!r} (known: theorem4, Abbe & Sandon's "
                                "Theorem 4 learning phase)", line, col)
            single[word] = a.name
        elif word in ("predict", "update", "done"):
            single[word] = _circuit_ref(src, a, circuits)
        else:  # label, coin, counter: one name
            if a.index is not None and word == "counter":
                raise src.error("'counter' takes a plain name (the bits are NAME[0..w-1])", line, col)
            single[word] = a.name
    for word, what in (("predict", "its prediction circuit A(b, x)"),
                       ("update", "its memory-update circuit A(b, x, y, r)")):
        if word not in single:
            raise src.error(f"learner {b.name.name!r} has no '{word}' item naming {what}",
                            b.name.line, b.name.col)
    mem = set(groups["memory"])
    for n, s in ones:
        if n not in mem:
            raise src.error(f"'init' lists {n!r}, which is not a memory bit", s.line, s.col)
    base = BaseLearner(b.name.name, tuple(groups["input"]), tuple(groups["memory"]), single["predict"],
                       single["update"], done=single.get("done"), samples=single.get("samples"),
                       random=tuple(groups["random"]), label=single.get("label", "y"),
                       init=tuple(int(n in {o for o, _ in ones}) for n in groups["memory"]),
                       loc=src.loc(b.line, b.col), locs=locs)
    opts = Theorem4Options(coin=single.get("coin", "rp"), counter=single.get("counter", "seen"))
    return theorem4(base, opts)


def _single_arg(src: SourceText, it, seen: dict, locs: dict[str, Loc], whose: str):
    """``(argument, line, col)`` of a block item given at most once and with exactly one
    argument (``seen``: the items already given; ``whose``: "the learner's", ...);
    records where it was given in ``locs``."""
    word, w = it.word.value, it.word
    if word in seen:
        raise src.error(f"{whose} '{word}' item is given twice", w.line, w.column,
                        notes=(f"{locs[word]}: note: first given here",))
    if len(it.sigs) != 1:
        raise src.error(f"'{word}' takes exactly one argument, got {len(it.sigs)}", w.line, w.column)
    (a,) = it.sigs
    line, col = (a.line, a.column) if isinstance(a, Token) else (a.line, a.col)
    locs[word] = src.loc(line, col)
    return a, line, col


def _count_arg(src: SourceText, a, line: int, col: int, meaning: str) -> int:
    """A ``samples`` argument: a positive integer of at most 18 digits."""
    if not isinstance(a, Token) or not a.value.isdigit() or len(a.value) > 18 or int(a.value) < 1:
        raise src.error(f"'samples' takes {meaning}, an integer >= 1", line, col)
    return int(a.value)


def _circuit_ref(src: SourceText, s: _Sig, circuits: dict[str, Circuit]) -> Circuit:
    c = circuits.get(s.name)
    if c is None:
        close = difflib.get_close_matches(s.name, sorted(circuits), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise src.error(f"no circuit named {s.name!r} in this file{hint}", s.line, s.col)
    return c


def _build_noisy_learner(src: SourceText, b: _NoisyBlock, circuits: dict[str, Circuit]):
    """A ``noisy_learner`` block (§4.2): ``input x[n]`` (exactly one vector named x),
    ``samples T`` (a positive integer), ``output H`` (a circuit of this file); the
    structural checks (h's ports and output) are :func:`validate_noisy_learner`'s."""
    name = b.name.name
    got: dict[str, object] = {}
    locs: dict[str, Loc] = {}
    for it in b.items:
        word, w = it.word.value, it.word
        if word not in NOISY_WORDS:
            close = difflib.get_close_matches(word, NOISY_WORDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise src.error(f"unknown noisy_learner item {word!r} (known: {', '.join(NOISY_WORDS)}){hint}",
                            w.line, w.column)
        a, line, col = _single_arg(src, it, got, locs, "the noisy learner's")
        if word == "samples":
            got[word] = _count_arg(src, a, line, col, "the number of training samples t")
        elif isinstance(a, Token):
            raise src.error(f"'{word}' takes a name, not the number {a.value!r}", line, col)
        elif word == "input":
            if a.quoted or a.base != "x" or a.index is None:
                raise src.error("a noisy learner's input is written 'input x[n]' (the vector x of "
                                "Lemma 6's ports x0[..], y0, ..., x[..])", line, col)
            _expand(src, a)
            got[word] = a.index
        else:
            got[word] = _circuit_ref(src, a, circuits)
    for word in NOISY_WORDS:
        if word not in got:
            what = {"input": "its input ('input x[n]')", "samples": "the number of samples ('samples T')",
                    "output": "its circuit h ('output H')"}[word]
            raise src.error(f"noisy learner {name!r} has no '{word}' item giving {what}",
                            b.name.line, b.name.col)
    locs["h"] = locs.pop("output")
    return NoisyLearner(name, got["input"], got["samples"], got["output"],
                        loc=src.loc(b.line, b.col), locs=locs)


def _walk(expr: _Expr):
    """Every node of ``expr``, parents before children, left to right."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        if e.kind == "gate":
            stack.extend(reversed(e.args))


def _build(src: SourceText, name: str, items: list, loc: Loc) -> Circuit:
    decls = [it for it in items if isinstance(it, _Decl)]
    assigns = [it for it in items if isinstance(it, _Assign)]

    # Declared vector sizes, for the index range check.
    sizes: dict[str, int] = {}
    for d in decls:
        for s in d.sigs:
            if s.index is not None:
                if s.index == 0:
                    raise src.error(f"vector {s.base}[0] has no elements", s.line, s.col)
                if s.index > MAX_VECTOR:
                    raise src.error(
                        f"vector {s.base}[{s.index}] is too large (at most {MAX_VECTOR} elements)",
                        s.line, s.col)
                sizes[s.base] = max(sizes.get(s.base, 0), s.index)

    inputs: list[str] = []
    outputs: list[str] = []
    port_locs: dict[str, Loc] = {}
    for d in decls:
        for s in d.sigs:
            here = src.loc(s.line, s.col)
            names = ([f"{s.base}[{i}]" for i in range(s.index)] if s.index is not None
                     else [s.name])
            for n in names:
                if d.kind == "input":
                    if n in port_locs:
                        raise src.error(f"input {n!r} declared twice", s.line, s.col,
                                        notes=(f"{port_locs[n]}: note: first declared here",))
                    port_locs[n] = here
                    inputs.append(n)
                else:
                    port_locs.setdefault("output:" + n, here)
                    outputs.append(n)

    def check_range(s: _Sig) -> None:
        if s.index is not None and not s.quoted and s.base in sizes and s.index >= sizes[s.base]:
            raise src.error(
                f"index {s.index} is out of range for {s.base}[{sizes[s.base]}] "
                f"(elements {s.base}[0] .. {s.base}[{sizes[s.base] - 1}])",
                s.line, s.col)

    # Every name written anywhere: internal names must avoid all of them.
    used: set[str] = set(inputs) | set(outputs)
    refs: list[_Sig] = []
    for a in assigns:
        check_range(a.target)
        used.add(a.target.name)
        for e in _walk(a.expr):
            if e.kind == "ref":
                check_range(e.sig)
                used.add(e.sig.name)
                refs.append(e.sig)

    counters: dict[str, int] = {}

    def fresh(target: str) -> str:
        k = counters.get(target, 0) + 1
        while f"{target}${k}" in used:
            k += 1
        counters[target] = k
        n = f"{target}${k}"
        used.add(n)
        return n

    gates: list[Gate] = []
    for a in assigns:
        target, root = a.target.name, a.expr
        tloc = src.loc(a.target.line, a.target.col)
        if root.kind == "ref":
            gates.append(Gate(target, "BUF", (root.sig.name,), tloc))
            continue
        if root.kind == "const":
            gates.append(Gate(target, root.op, (), tloc))
            continue
        # Post-order, left to right, without recursion.
        signal: dict[int, str] = {}
        stack: list[tuple[_Expr, bool]] = [(root, False)]
        while stack:
            e, done = stack.pop()
            if e.kind == "ref":
                signal[id(e)] = e.sig.name
            elif e.kind == "const":
                n = fresh(target)
                gates.append(Gate(n, e.op, (), src.loc(e.line, e.col)))
                signal[id(e)] = n
            elif not done:
                stack.append((e, True))
                stack.extend((x, False) for x in reversed(e.args))
            else:
                n = target if e is root else fresh(target)
                ins = tuple(signal[id(x)] for x in e.args)
                gates.append(Gate(n, e.op, ins, tloc if e is root else src.loc(e.line, e.col)))
                signal[id(e)] = n

    defined = set(inputs) | {g.name for g in gates}
    for s in refs:
        if s.name not in defined:
            close = difflib.get_close_matches(s.name, sorted(defined), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise src.error(f"undefined signal {s.name!r}{hint}", s.line, s.col)

    return Circuit(name, tuple(inputs), tuple(outputs), tuple(gates), loc=loc, port_locs=port_locs)


# --------------------------------------------------------------------------- writing


def _quote(name: str) -> str:
    out = []
    for ch in name:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif not ch.isprintable():
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def port_name(name: str) -> str:
    """``name`` as written in an input/output list (indexed names are quoted)."""
    if _IDENT.fullmatch(name) and name not in KEYWORDS:
        return name
    return _quote(name)


def signal_name(name: str) -> str:
    """``name`` as written in an assignment or expression."""
    if (_IDENT.fullmatch(name) or _INDEXED.fullmatch(name)) and name not in KEYWORDS:
        return name
    return _quote(name)


def _wrap(keyword: str, names: list[str], width: int = 100) -> list[str]:
    width -= len(keyword) + 3
    lines, cur = [], ""
    for n in names:
        if cur and len(cur) + 1 + len(n) > width:
            lines.append(f"  {keyword} {cur}")
            cur = n
        else:
            cur = f"{cur} {n}" if cur else n
    if cur:
        lines.append(f"  {keyword} {cur}")
    return lines


#: A line that is not a plain identifier (in a text of one name per line).
_NOT_PLAIN = re.compile(r"^(?![A-Za-z_][A-Za-z0-9_.$]*$)", re.M)


def _all_plain(names: list[str]) -> bool:
    """Whether :func:`signal_name` writes every one of ``names`` as it is (identifiers,
    no keyword): checked at once, not name by name."""
    if not names:
        return True
    text = "\n".join(names)
    return (KEYWORDS.isdisjoint(names) and text.count("\n") == len(names) - 1
            and _NOT_PLAIN.search(text) is None)


def _gate_line(g: Gate, plain: bool = False) -> str:
    """The gate's line; ``plain``: its names are written as they are (:func:`_all_plain`)."""
    lhs = g.name if plain else signal_name(g.name)
    if g.op == "CONST0":
        return f"  {lhs} = 0"
    if g.op == "CONST1":
        return f"  {lhs} = 1"
    args = list(g.inputs) if plain else [signal_name(i) for i in g.inputs]
    if g.op == "BUF":
        return f"  {lhs} = {args[0]}"
    line = f"  {lhs} = {g.op}({', '.join(args)})"
    if len(line) <= 100:
        return line
    body = [f"  {lhs} = {g.op}("]
    cur = ""
    for a in args:
        if cur and len(cur) + len(a) + 2 > 92:
            body.append(f"      {cur}")
            cur = ""
        cur += a + ", "
    body.append(f"      {cur.rstrip()}")
    body.append("  )")
    return "\n".join(body)


def _gate_lines(c: Circuit) -> list[str]:
    """One line per gate, in topological order (names checked once for the whole circuit)."""
    plain = _all_plain([*c.inputs, *[g.name for g in c.gates]])
    return [_gate_line(g, plain) for g in c.topo]


def dump(c) -> str:
    """``c`` in the circuit language: one ``circuit`` block, one line per gate (a
    :class:`~tm2nn.ir.Learner` is written by :func:`dump_learner`)."""
    if not isinstance(c, Circuit):
        if hasattr(c, "t") and not hasattr(c, "g"):
            return dump_noisy_learner(c)
        return dump_learner(c)
    lines = ["# converted by tm2nn", f"circuit {signal_name(c.name)} {{"]
    lines += _wrap("input", [port_name(x) for x in c.inputs])
    lines += _wrap("output", [port_name(x) for x in c.outputs])
    lines += _gate_lines(c)
    lines.append("}")
    return "\n".join(lines) + "\n"


def compact_ports(names) -> list[str]:
    """Port names as written in a declaration, with each whole vector ``v[0] .. v[k-1]``
    (every ``v[...]`` in ``names``, consecutive and in order) written ``v[k]``."""
    names = list(names)
    bases: dict[str, int] = {}
    for n in names:
        m = _INDEXED.fullmatch(n)
        if m:
            bases[m.group(1)] = bases.get(m.group(1), 0) + 1
    out, i = [], 0
    while i < len(names):
        m = _INDEXED.fullmatch(names[i])
        if m and m.group(2) == "0" and m.group(1) not in KEYWORDS:
            base, k = m.group(1), bases[m.group(1)]
            if names[i:i + k] == [f"{base}[{j}]" for j in range(k)]:
                out.append(f"{base}[{k}]")
                i += k
                continue
        out.append(port_name(names[i]))
        i += 1
    return out


def _block_text(c: Circuit) -> list[str]:
    lines = [f"circuit {signal_name(c.name)} {{"]
    lines += _wrap("input", compact_ports(c.inputs))
    lines += _wrap("output", compact_ports(c.outputs))
    lines += _gate_lines(c)
    lines.append("}")
    return lines


def dump_learner(lr, header: bool = True) -> str:
    """``lr`` (a :class:`~tm2nn.ir.Learner`) as a ``learner`` block followed by its h and
    g circuit blocks; ``parse(dump_learner(lr))[0] == lr``."""
    lines = ["# converted by tm2nn"] if header else []
    lines.append(f"learner {signal_name(lr.name)} {{")
    for word, names in (("input", lr.inputs), ("random", lr.random), ("coin", lr.coin),
                        ("memory", lr.memory),
                        ("init", [b for b, v in zip(lr.memory, lr.init) if v])):
        if names:
            lines += _wrap(word, compact_ports(names))
    lines.append(f"  output {signal_name(lr.h.name)}")
    lines.append(f"  update {signal_name(lr.g.name)}")
    lines.append("}")
    for c in (lr.h,) if lr.h.name == lr.g.name else (lr.h, lr.g):
        lines.append("")
        lines += _block_text(c)
    return "\n".join(lines) + "\n"


def dump_noisy_learner(lr, header: bool = True) -> str:
    """``lr`` (a :class:`~tm2nn.ir.noisy_learner.NoisyLearner`) as a
    ``noisy_learner`` block followed by its h circuit block; parsing it back gives an equal
    learner."""
    lines = ["# converted by tm2nn"] if header else []
    lines += [f"noisy_learner {signal_name(lr.name)} {{", f"  input x[{lr.n}]", f"  samples {lr.t}",
              f"  output {signal_name(lr.h.name)}", "}", ""]
    lines += _block_text(lr.h)
    return "\n".join(lines) + "\n"


__all__ = ["KIND", "parse", "dump", "dump_learner", "dump_noisy_learner", "compact_ports", "port_name", "signal_name",
           "GRAMMAR_PATH"]
