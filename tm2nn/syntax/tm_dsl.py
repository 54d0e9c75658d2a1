"""The tm2nn machine language (``.tm`` files): parser and writer.

A file holds one or more machines::

    # adds 1 to a binary number
    machine binary_increment {
      alphabet: 0 1 _
      blank: _
      start: right
      halt: done
      right 0 1 -> * R *        # one rule per symbol; * = same symbol / same state
      right _ -> _ L carry
      carry 1 -> 0 L carry
      carry 0 _ -> 1 S done
    }

Lexical rules
-------------
* Items end at the end of a line.  Blank lines are ignored; ``#`` starts a comment that
  runs to the end of the line (anywhere, also after an item).
* A *word* is a run of characters that are neither white space nor one of ``# * { } ' :``
  and does not contain ``->`` (so ``a->b`` is ``a``, ``->``, ``b``).
* A *quoted* atom is ``'...'`` on one line, with the escapes ``\\'`` ``\\\\`` ``\\n`` ``\\t``
  ``\\r`` and ``\\u{HEX}`` (any code point).  Quoting is how a symbol or name contains a
  special character: ``' '``, ``'#'``, ``'*'``, ``'{'``, ``'}'``, ``':'``, ``'\\''``.
* A *symbol* is a word of exactly one character, or a quoted atom holding exactly one
  character.  Only a quoted ``'*'`` is the symbol ``*``; a bare ``*`` is the wildcard below.
* A *name* (machine or state) is a word of letters, digits and ``_ - .`` whose first
  character is a letter, digit or ``_`` (Unicode letters and digits count: ``1o``,
  ``halt-accept``, ``q.2``, ``q₀``), or any quoted atom (also the empty ``''``).

Items inside ``machine NAME { ... }``
-------------------------------------
Declarations ``key: values`` may come in any order, each key at most once:

* ``alphabet: 0 1 _`` — the symbols, in this order.  Optional: without it the alphabet is
  the blank followed by every symbol the rules mention, in order of first appearance.
* ``blank: _`` — the blank symbol; default ``_``.  A blank missing from a declared
  alphabet is appended to it (not an error).
* ``states: q0 q1 ...`` — optional.  Without it the states are the start state followed
  by every other state in order of first appearance in the block.  With it, a rule or
  ``start:`` naming an undeclared state is an error.
* ``start: q0`` — required.
* ``accept: ...``, ``reject: ...``, ``halt: ...`` — halting states with their outcome;
  they join the state set (appended to a declared ``states:`` list if missing there).
* ``tape: line`` (default) or ``tape: grid`` (a :class:`~tm2nn.ir.GridMachine`).
* ``convention: bbchallenge`` (default) or ``convention: morphett`` — with ``morphett`` the
  step on which no rule applies counts as a step (``missing_rule_counts_step``).

Rules ``STATE SYMBOL... -> WRITE MOVE NEXT``:

* several symbols on the left give one rule per symbol;
* ``*`` on the left stands for every symbol that has no explicit rule for this state (an
  explicit rule wins wherever it is written; one ``*`` rule per state);
* ``*`` as WRITE writes the symbol read; ``*`` as NEXT stays in the same state;
* MOVE is ``L R S`` on a line tape, ``L R U D S`` on a grid tape, in either case;
* ``-->`` is an error (a typo of ``->``), not the symbol ``-`` followed by ``->``: write
  ``- ->`` to read ``-``.  A rule line without ``->`` is reported at the word used
  instead (``=>``, ``- >``, ...) or where the arrow is missing.

The machine's rule order is the order of the lines; a ``*`` rule expands, in alphabet
order, where it is written.  Structural checks (determinism, halting states without
rules, ...) are :func:`tm2nn.ir.machine.validate_machine`'s, reported at each rule's line.

:func:`dump` writes every declaration explicitly and one rule per line, quoting what
needs quoting, so that ``parse(dump(m))[0] == m``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import GRID_MOVES, LINE_MOVES, GridMachine, Machine, Rule
from tm2nn.source import SourceText
from tm2nn.syntax.grammar import grammar_path, lalr_parser

KIND = "machine"

GRAMMAR_PATH = grammar_path("tm.lark")

_NAME_RE = re.compile(r"[\w][\w\-.]*")
_SPECIAL = set("#*{}':")
_ESCAPES = {"'": "'", "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
_ESCAPE_OUT = {"'": "\\'", "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_KEYS = ("alphabet", "blank", "states", "start", "accept", "reject", "halt", "tape", "convention")
_SINGLE = ("blank", "start", "tape", "convention")
_OUTCOME_KEYS = ("accept", "reject", "halt")

def _lark() -> Lark:
    return lalr_parser("tm.lark")


# ---------------------------------------------------------------------------------------
# parse
# ---------------------------------------------------------------------------------------


def parse(src: SourceText) -> list[Machine]:
    """Every machine in ``src``; raises :class:`Tm2nnError` on any bad input."""
    text = src.text
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(src, text, e) from None
    except LarkError as e:  # pragma: no cover - lark raises UnexpectedInput for bad text
        raise src.error(f"syntax error: {e}", None) from None
    machines: list[Machine] = []
    first_line: dict[str, int] = {}
    for node in tree.children:
        m = _Builder(src, node).build()
        if m.name in first_line:
            tok = node.children[1]
            raise src.error(
                f"machine {m.name!r} is defined twice in this file",
                tok.line,
                tok.column,
                notes=(f"{src.loc(first_line[m.name])}: note: first definition is here",),
            )
        first_line[m.name] = node.children[0].line
        machines.append(m)
    return machines


_TERMINALS = {
    "WORD": "a name or symbol",
    "QUOTED": "a name or symbol",
    "STAR": "'*'",
    "_ARROW": "'->'",
    "_COLON": "':'",
    "_LBRACE": "'{'",
    "_RBRACE": "'}'",
    "_NL": "end of line",
    "MACHINE": "'machine'",
    "$END": "end of file",
}
_ITEM_TERMINALS = {"WORD", "QUOTED", "STAR", "_ARROW", "_COLON"}
_RULE_HINT = "note: a rule reads  STATE SYMBOL... -> WRITE MOVE NEXT  (e.g.  q0 0 1 -> * R q1)"
_DECL_HINT = "note: a declaration reads  KEY: VALUE...  (e.g.  alphabet: 0 1 _)"


def _expected(names) -> str:
    descs = sorted({_TERMINALS.get(n, n) for n in names or ()})
    if not descs:
        return ""
    if len(descs) == 1:
        return f"; expected {descs[0]}"
    return "; expected " + ", ".join(descs[:-1]) + " or " + descs[-1]


def _hint(src: SourceText, line: int, expected) -> tuple[str, ...]:
    """How a line inside a machine should look, when the parser was inside an item."""
    if not _ITEM_TERMINALS & set(expected or ()):
        return ()
    text = src.line_text(line) or ""
    if "->" in text:
        return (_RULE_HINT,)
    if ":" in text:
        return (_DECL_HINT,)
    return (_DECL_HINT, _RULE_HINT)


def _end_position(src: SourceText) -> tuple[int, int]:
    lines = src.lines
    if not lines:
        return 1, 1
    return len(lines), len(lines[-1]) + 1


def _syntax_error(src: SourceText, text: str, e: UnexpectedInput) -> Tm2nnError:
    if isinstance(e, UnexpectedCharacters):
        ch = text[e.pos_in_stream] if 0 <= e.pos_in_stream < len(text) else ""
        if ch == "'":
            msg = "unterminated quote: a quoted name or symbol must end with ' on the same line"
        else:
            msg = f"unexpected character {ch!r}" + _expected(e.allowed)
        return src.error(msg, e.line, e.column, notes=_hint(src, e.line, e.allowed))
    if isinstance(e, UnexpectedToken):
        tok = e.token
        if tok.type in ("_NL", "$END", "_RBRACE") and "_ARROW" in (e.expected or ()):
            # A rule's line ended (or a comment, '}' came) before any '->': point at the
            # arrow-like typo or at the place where '->' is missing, not at the line's end.
            line = tok.line if tok.type != "$END" and tok.line is not None else _end_position(src)[0]
            bad = _arrow_error(src, line)
            if bad is not None:
                return bad
        if tok.type == "$END":
            line, col = _end_position(src)
            return src.error("unexpected end of file" + _expected(e.expected), line, col)
        if tok.type == "_NL":
            what = "end of line"
            # a comment counts as an end of line: point at the line break itself
            line, col = tok.line, tok.column
        elif tok.type in ("WORD", "QUOTED"):
            what = f"{str(tok)!r}" if tok.type == "WORD" else str(tok)
            line, col = tok.line, tok.column
        else:
            what = _TERMINALS.get(tok.type, repr(str(tok)))
            line, col = tok.line, tok.column
        if line is None:
            line, col = _end_position(src)
        return src.error(
            f"unexpected {what}" + _expected(e.expected),
            line,
            col,
            notes=_hint(src, line, e.expected),
        )
    line = getattr(e, "line", None)
    col = getattr(e, "column", None)
    if not isinstance(line, int) or line < 1:
        line, col = _end_position(src)
    return src.error("syntax error" + _expected(getattr(e, "expected", ()) or ()), line, col)


_LINE_TOKEN = re.compile(
    r"(?P<q>'(?:[^'\\\n\r]|\\[^\n\r])*')|(?P<c>#)|(?P<p>->|[*{}:])|(?P<w>(?:(?!->)[^\s#*{}':])+)|(?P<x>\S)"
)
# A word that was meant as '->': '=>', '==>', '~>', '>', a Unicode arrow, ... (a lone '-'
# or '=' only where a rule's arrow belongs: it may be a symbol elsewhere).
_ARROWISH = re.compile(r"[-=~\u2013\u2014]*[>\u2192\u21d2\u27f6\u279e\u27f9]+")
_ARROW_PART = re.compile(r"[-=~>\u2013\u2014\u2192\u21d2\u27f6\u279e\u27f9]+")
_RULE_FORM = "a rule reads  STATE SYMBOL... -> WRITE MOVE NEXT"


def _line_words(text: str) -> list[tuple[str, int]]:
    """The atoms of the item on one line, as the grammar splits them, with 1-based
    columns: after a '{', up to a '}' or a comment."""
    out: list[tuple[str, int]] = []
    for mt in _LINE_TOKEN.finditer(text):
        if mt.lastgroup == "c" or mt.group() == "}":
            break
        if mt.group() == "{":  # 'machine m { ...': the item starts after the brace
            out.clear()
            continue
        out.append((mt.group(), mt.start() + 1))
    return out


def _arrow_error(src: SourceText, line: int) -> Tm2nnError | None:
    """A rule line without '->': an error at the arrow-like word used instead (``=>``,
    ``- >``, ``→``, ...) or, when the line has the shape of a rule, where '->' is missing.
    None when the line does not look like a rule (the generic message is better then)."""
    words = _line_words(src.line_text(line) or "")
    n = len(words)
    if n < 3 or (words[0][0].lower() in _KEYS and n < 5):
        return None
    # 1. an unmistakable arrow (after the state and at least one symbol read)
    for i in range(2, n):
        w, col = words[i]
        if w == "-" and i + 1 < n and words[i + 1][0].startswith(">") and _ARROW_PART.fullmatch(words[i + 1][0]):
            got = src.line_text(line)[col - 1 : words[i + 1][1] - 1 + len(words[i + 1][0])]
            return src.error(f"expected '->' ({_RULE_FORM}), got {got!r}", line, col)
        if _ARROWISH.fullmatch(w):
            return src.error(f"expected '->' ({_RULE_FORM}), got {w!r}", line, col)
    # 2. a stray '-', '=', ... exactly where the arrow belongs: before WRITE MOVE NEXT
    if n >= 5 and _ARROW_PART.fullmatch(words[n - 4][0]):
        w, col = words[n - 4]
        return src.error(f"expected '->' ({_RULE_FORM}), got {w!r}", line, col)
    # 3. the shape of a rule with the arrow left out: ... WRITE MOVE NEXT
    if n >= 5 and words[n - 2][0].upper() in GRID_MOVES:
        w, col = words[n - 3]
        return src.error(f"missing '->' before {w!r} ({_RULE_FORM})", line, col)
    return None


def _unquote(src: SourceText, tok: Token) -> str:
    """The text of a QUOTED token, escapes resolved."""
    body = str(tok)[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        col = tok.column + 1 + i
        nxt = body[i + 1]  # the token regex guarantees a character after a backslash
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        if nxt == "u":
            m = re.match(r"u\{([0-9A-Fa-f]{1,6})\}", body[i + 1 :])
            if m and int(m.group(1), 16) <= 0x10FFFF:
                out.append(chr(int(m.group(1), 16)))
                i += 1 + m.end()
                continue
            raise src.error(
                "bad \\u escape: write \\u{HEX} with 1 to 6 hex digits, at most 10FFFF",
                tok.line,
                col,
            )
        raise src.error(
            f"unknown escape \\{nxt} (known: \\' \\\\ \\n \\t \\r \\u{{HEX}})", tok.line, col
        )
    return "".join(out)


@dataclass
class _RawRule:
    tok: Token  # first token: position of the rule
    state: Token
    reads: list[Token]
    write: Token
    move: Token
    next: Token


@dataclass
class _Builder:
    src: SourceText
    node: Tree
    decls: dict[str, tuple[Token, list[Token]]] = field(default_factory=dict)
    raw_rules: list[_RawRule] = field(default_factory=list)

    # -- helpers -------------------------------------------------------------------------
    def err(self, msg: str, tok: Token, notes=()) -> Tm2nnError:
        return self.src.error(msg, tok.line, tok.column, notes=notes)

    def name(self, tok: Token, what: str) -> str:
        if tok.type == "STAR":
            raise self.err(f"'*' cannot be {what} here (quote it as '*' for a name '*')", tok)
        if tok.type == "QUOTED":
            return _unquote(self.src, tok)
        s = str(tok)
        if not _NAME_RE.fullmatch(s):
            bad = next(c for i, c in enumerate(s) if not _NAME_RE.fullmatch(s[: i + 1]))
            raise self.err(
                f"bad {what} {s!r}: character {bad!r} is not allowed in an unquoted name "
                f"(letters, digits, _ - . ; the first one a letter, digit or _); "
                f"quote it: {_quote(s)}",
                tok,
            )
        return s

    def symbol(self, tok: Token, what: str = "symbol") -> str:
        if tok.type == "STAR":
            raise self.err(f"'*' cannot be a {what} here (quote it as '*' for the symbol *)", tok)
        s = _unquote(self.src, tok) if tok.type == "QUOTED" else str(tok)
        if len(s) != 1:
            raise self.err(
                f"{what} {str(tok)!r} is {len(s)} characters long; symbols are single characters"
                + (" (separate symbols with spaces)" if tok.type == "WORD" else ""),
                tok,
            )
        return s

    # -- the machine ---------------------------------------------------------------------
    def build(self) -> Machine:
        kw_tok, name_tok, *items = self.node.children
        mname = self.name(name_tok, "machine name")
        for it in items:
            if it.data == "decl":
                self.add_decl(it)
            else:
                st, lhs, write, move, nxt = it.children
                self.check_arrow(lhs.children[-1])
                self.raw_rules.append(_RawRule(st, st, list(lhs.children), write, move, nxt))

        tape = self.single_word("tape", ("line", "grid"), "line")
        cls = GridMachine if tape == "grid" else Machine
        convention = self.single_word("convention", ("bbchallenge", "morphett"), "bbchallenge")

        # symbols
        if "blank" in self.decls:
            blank = self.symbol(self.decls["blank"][1][0], "blank symbol")
        else:
            blank = "_"
        alphabet_declared = "alphabet" in self.decls
        if alphabet_declared:
            alphabet = self.unique(self.decls["alphabet"][1], self.symbol, "symbol")
            if blank not in alphabet:
                alphabet.append(blank)
        else:
            alphabet = [blank]
            for r in self.raw_rules:
                for tok in (*r.reads, r.write):
                    if tok.type != "STAR":
                        a = self.symbol(tok)
                        if a not in alphabet:
                            alphabet.append(a)
        symbols = set(alphabet)

        # states
        if "start" not in self.decls:
            raise self.err(f"machine {mname!r} has no 'start:' declaration", kw_tok)
        start_tok = self.decls["start"][1][0]
        start = self.name(start_tok, "state name")
        states_declared = "states" in self.decls
        if states_declared:
            states = self.unique(
                self.decls["states"][1], lambda t: self.name(t, "state name"), "state"
            )
        else:
            states = [start]
        known = set(states)

        def state(tok: Token) -> str:
            q = self.name(tok, "state name")
            if q not in known:
                if states_declared:
                    line = self.decls["states"][0].line
                    raise self.err(
                        f"unknown state {q!r} (not in the states: list on line {line})", tok
                    )
                states.append(q)
                known.add(q)
            return q

        # In text order: halting declarations and rules mention states.
        mentions: list[tuple[int, int, str, Token]] = []
        for key in _OUTCOME_KEYS:
            if key in self.decls:
                for tok in self.decls[key][1]:
                    mentions.append((tok.line, tok.column, key, tok))
        for r in self.raw_rules:
            for tok in (r.state, r.next):
                mentions.append((tok.line, tok.column, "rule", tok))
        mentions.sort(key=lambda x: (x[0], x[1]))

        if states_declared and start not in known:
            line = self.decls["states"][0].line
            raise self.err(
                f"unknown state {start!r} (not in the states: list on line {line})", start_tok
            )
        halting: dict[str, str] = {}
        halting_tok: dict[str, Token] = {}
        for _, _, key, tok in mentions:
            if key == "rule":
                if tok.type != "STAR":
                    state(tok)
                continue
            q = self.name(tok, "state name")
            if q in halting:
                prev = halting_tok[q]
                raise self.err(
                    f"state {q!r} is declared halting twice ({halting[q]}: on line {prev.line}, {key}: here)",
                    tok,
                )
            halting[q] = key
            halting_tok[q] = tok
            if q not in known:  # halting states join the state set
                states.append(q)
                known.add(q)

        # rules
        moves = cls.moves
        explicit: set[tuple[str, str]] = set()
        star_rule: dict[str, _RawRule] = {}
        parsed: list[tuple[_RawRule, str, list[str | None], str | None, str, str | None]] = []
        for r in self.raw_rules:
            if r.state.type == "STAR":
                raise self.err("'*' cannot stand for the state on the left of a rule", r.state)
            q = state(r.state)
            reads: list[str | None] = []
            for tok in r.reads:
                if tok.type == "STAR":
                    if q in star_rule:
                        prev = star_rule[q]
                        raise self.err(
                            f"nondeterministic: two '*' rules for state {q!r} "
                            f"(lines {prev.tok.line} and {tok.line})",
                            tok,
                            notes=(
                                f"{self.src.loc(prev.tok.line, prev.tok.column)}: note: first '*' rule is here",
                            ),
                        )
                    star_rule[q] = r
                    reads.append(None)
                else:
                    a = self.known_symbol(tok, symbols, alphabet_declared)
                    explicit.add((q, a))
                    reads.append(a)
            write = (
                None
                if r.write.type == "STAR"
                else self.known_symbol(r.write, symbols, alphabet_declared)
            )
            mv = str(r.move).upper()
            if mv not in moves:
                if mv in GRID_MOVES:
                    raise self.err(
                        f"move {str(r.move)!r} needs a grid tape (add 'tape: grid'); "
                        f"a line tape moves {', '.join(LINE_MOVES)}",
                        r.move,
                    )
                raise self.err(
                    f"bad move {str(r.move)!r}: expected one of {' '.join(moves)}", r.move
                )
            nxt = None if r.next.type == "STAR" else state(r.next)
            parsed.append((r, q, reads, write, mv, nxt))

        rules: list[Rule] = []
        locations: dict = {"start": self.src.loc(start_tok.line, start_tok.column)}
        if states_declared:
            tok = self.decls["states"][0]
            locations["states"] = self.src.loc(tok.line, tok.column)
        for r, q, reads, write, mv, nxt in parsed:
            loc = self.src.loc(r.tok.line, r.tok.column)
            next_loc = self.src.loc(r.next.line, r.next.column)
            for a in reads:
                targets = [a] if a is not None else [b for b in alphabet if (q, b) not in explicit]
                for b in targets:
                    rules.append(
                        Rule(
                            q, b, b if write is None else write, mv, q if nxt is None else nxt, loc
                        )
                    )
                    locations[("next", q, b)] = next_loc

        return cls(
            name=mname,
            alphabet=tuple(alphabet),
            blank=blank,
            states=tuple(states),
            start=start,
            halting=halting,
            rules=tuple(rules),
            missing_rule_counts_step=convention == "morphett",
            loc=self.src.loc(kw_tok.line, kw_tok.column),
            locations=locations,
        )

    def check_arrow(self, last: Token) -> None:
        """``s a --> b R t`` lexes as reading ``a`` and ``-``: a silent extra rule when
        ``-`` is a symbol.  A run of ``-`` glued to the arrow is a typo of ``->``."""
        text = self.src.line_text(last.line) or ""
        end = last.column - 1 + len(str(last))
        if last.type == "WORD" and set(str(last)) == {"-"} and text[end : end + 2] == "->":
            raise self.err(
                f"expected '->' ({_RULE_FORM}), got {str(last) + '->'!r} "
                f"(to read the symbol '-', write  - ->  with a space)",
                last,
            )

    def add_decl(self, it: Tree) -> None:
        key_tok, *values = it.children
        key = str(key_tok)
        if key not in _KEYS:
            raise self.err(f"unknown declaration {key!r} (known: {', '.join(_KEYS)})", key_tok)
        if key in self.decls:
            prev = self.decls[key][0]
            raise self.err(
                f"'{key}:' is declared twice (first on line {prev.line})",
                key_tok,
                notes=(f"{self.src.loc(prev.line, prev.column)}: note: first declaration is here",),
            )
        if key in _SINGLE and len(values) != 1:
            if not values:
                raise self.err(f"'{key}:' needs a value", key_tok)
            raise self.err(f"'{key}:' takes one value, got {len(values)}", values[1])
        self.decls[key] = (key_tok, values)

    def single_word(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        if key not in self.decls:
            return default
        tok = self.decls[key][1][0]
        v = str(tok)
        if tok.type != "WORD" or v not in allowed:
            raise self.err(f"bad {key} {v!r}: expected {' or '.join(allowed)}", tok)
        return v

    def unique(self, toks: list[Token], conv, what: str) -> list[str]:
        out: list[str] = []
        seen: set[str] = set()  # a list's `in` made a 10^5-state list take minutes
        for tok in toks:
            v = conv(tok)
            if v in seen:
                raise self.err(f"{what} {v!r} is listed twice", tok)
            seen.add(v)
            out.append(v)
        return out

    def known_symbol(self, tok: Token, symbols: set[str], declared: bool) -> str:
        a = self.symbol(tok)
        if a not in symbols:
            line = self.decls["alphabet"][0].line if declared else tok.line
            raise self.err(f"symbol {a!r} is not in the alphabet (declared on line {line})", tok)
        return a


# ---------------------------------------------------------------------------------------
# dump
# ---------------------------------------------------------------------------------------


def _quote(s: str) -> str:
    parts = []
    for ch in s:
        if ch in _ESCAPE_OUT:
            parts.append(_ESCAPE_OUT[ch])
        elif ch.isprintable():
            parts.append(ch)
        else:
            parts.append(f"\\u{{{ord(ch):x}}}")
    return "'" + "".join(parts) + "'"


def _sym(a: str) -> str:
    if len(a) == 1 and a.isprintable() and not a.isspace() and a not in _SPECIAL:
        return a
    return _quote(a)


def _nm(s: str) -> str:
    if _NAME_RE.fullmatch(s) and s.isprintable():
        return s
    return _quote(s)


def dump(m: Machine) -> str:
    """``m`` in the tm2nn machine language; ``parse`` of the result gives back ``m``."""
    out = ["# converted by tm2nn", f"machine {_nm(m.name)} {{"]
    out.append(f"  tape: {'grid' if isinstance(m, GridMachine) else 'line'}")
    out.append(f"  convention: {m.convention}")
    out.append("  alphabet: " + " ".join(_sym(a) for a in m.alphabet))
    out.append(f"  blank: {_sym(m.blank)}")
    out.append("  states: " + " ".join(_nm(q) for q in m.states))
    out.append(f"  start: {_nm(m.start)}")
    for key in _OUTCOME_KEYS:
        qs = [q for q in m.states if m.halting.get(q) == key]
        if qs:
            out.append(f"  {key}: " + " ".join(_nm(q) for q in qs))
    for r in m.rules:
        out.append(f"  {_nm(r.state)} {_sym(r.read)} -> {_sym(r.write)} {r.move} {_nm(r.next)}")
    out.append("}")
    return "\n".join(out) + "\n"
