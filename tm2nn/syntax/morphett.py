"""morphett.info Turing machine programs (Anthony Morphett's jsturing simulator).

Format
------
One rule per line: ``<state> <read> <write> <dir> <new state>`` (an optional sixth field
``!`` is a breakpoint and is ignored).  ``;`` starts a comment anywhere on a line.
Directions are ``l``, ``r`` and ``*`` (stay), in either case.  Symbols are single
characters; ``_`` is the blank.

Semantics kept from the simulator
---------------------------------
* The start state is ``0``.
* ``*`` as read symbol matches any symbol; ``*`` as current state matches any state.  The
  rule for a (state, symbol) pair is looked up in this order: (state, symbol),
  (state, ``*``), (``*``, symbol), (``*``, ``*``).  ``*`` as write symbol keeps the symbol
  read, ``*`` as new state keeps the state.  The importer expands the wildcards into
  explicit rules over the machine's alphabet, in that order of precedence.
* A state whose name starts with ``halt`` (any case) halts when entered.  Its outcome is
  ``accept`` if the name contains ``accept``, ``reject`` if it contains ``reject``
  (whichever comes first), else ``halt``.  Rules for such states never fire, so they are
  dropped.
* When no rule applies, the machine halts and that step counts
  (``missing_rule_counts_step=True``), as the simulator's step counter does.
  (The simulator then shows the state as ``halt``; tm2nn reports the state in which no
  rule applied.)

Choices of this importer
------------------------
* Alphabet: ``_`` first, then every symbol the program mentions, then the symbols of the
  ``$INITIAL_TAPE`` directive, in order of first appearance.  A wildcard cannot name a
  symbol the program never mentions, so input strings with other symbols are rejected by
  the interpreter (:func:`tm2nn.ir.check_input`) with a clear error, not run.
* Two rules for the same (state, symbol) pair — wildcards included — are an error, with
  both locations.  (The simulator warns, marks both lines, and uses the later one.)
* A malformed line is an error.  (The simulator marks it and skips it.)
* The machine is named after the file stem.  A file without any rule holds no machine.
* ``; ... $INITIAL_TAPE: <tape>`` is the program's default input.  :func:`initial_tape`
  returns it (spaces become ``_``; a ``*`` marking the head's start cell is removed and
  :func:`initial_head` gives its index).  It is not part of the IR.  (The simulator reads
  the directive only from the file's last line; here the last directive on any line wins.)
"""

from __future__ import annotations

import re
from pathlib import Path

from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import Machine, Rule
from tm2nn.source import SourceText

KIND = "machine"

BLANK = "_"
WILD = "*"
START = "0"
MOVES = {"l": "L", "r": "R", "*": "S"}

_TOKEN = re.compile(r"\S+")
_INITIAL_TAPE = re.compile(r"\$INITIAL_TAPE:?(.*)$")


def outcome_of(state: str) -> str | None:
    """The halting outcome of a morphett state name, or None if it does not halt."""
    low = state.lower()
    if not low.startswith("halt"):
        return None
    a, r = low.find("accept"), low.find("reject")
    if a >= 0 and (r < 0 or a < r):
        return "accept"
    if r >= 0:
        return "reject"
    return "halt"


def _directive(text: str | SourceText) -> str | None:
    """The raw value of the last ``; ... $INITIAL_TAPE:`` directive, or None."""
    if isinstance(text, SourceText):
        text = text.text
    found = None
    for line in text.splitlines():
        semi = line.find(";")
        if semi < 0:
            continue
        mt = _INITIAL_TAPE.search(line, semi)
        if mt:
            found = mt.group(1).strip()
    return found


def initial_tape(text: str | SourceText) -> str | None:
    """The default input from ``$INITIAL_TAPE`` (None if absent), as a tm2nn input string."""
    raw = _directive(text)
    if raw is None:
        return None
    return raw.replace(WILD, "").replace(" ", BLANK).replace("\t", BLANK)


def initial_head(text: str | SourceText) -> int:
    """Index into :func:`initial_tape` where the head starts (a ``*`` in the directive), else 0."""
    raw = _directive(text)
    if raw is None or WILD not in raw:
        return 0
    return raw.index(WILD)


def default_input(text: str | SourceText) -> str | None:
    """The input ``tm2nn run`` uses when ``--input`` is not given: ``$INITIAL_TAPE``.

    tm2nn starts the head on the first input cell; a ``*`` head marker elsewhere
    cannot be honoured, so it is an error rather than a silently different run.
    """
    tape = initial_tape(text)
    if tape is not None and initial_head(text) != 0:
        raise Tm2nnError(
            "$INITIAL_TAPE puts the head (the '*' marker) after the first cell; tm2nn starts "
            "the head on the first input cell: give the input from the head onwards"
        )
    return tape


def parse(src: SourceText) -> list[Machine]:
    text = src.text
    name = Path(src.path).stem or "machine"

    # (state, read) -> (write, move, next, line, col, column of next)
    table: dict[tuple[str, str], tuple[str, str, str, int, int, int]] = {}
    states: dict[str, None] = {START: None}
    symbols: dict[str, None] = {BLANK: None}

    for lineno, raw in enumerate(text.splitlines(), start=1):
        code = raw.split(";", 1)[0]
        toks = [(mt.group(), mt.start() + 1) for mt in _TOKEN.finditer(code)]
        if not toks:
            continue
        what = ("current symbol", "new symbol", "direction", "new state")
        if len(toks) < 5:
            missing = what[len(toks) - 1]
            raise src.error(
                f"missing <{missing}>: a rule is '<state> <symbol> <new symbol> <direction> <new state>'",
                lineno, len(code.rstrip()) + 1,
            )
        if len(toks) > 6 or (len(toks) == 6 and toks[5][0] != "!"):
            bad = toks[5] if toks[5][0] != "!" else toks[6]
            raise src.error(
                "too many fields: a rule has 5 fields (and optionally '!' for a breakpoint)",
                lineno, bad[1],
            )
        (state, scol), (read, rcol), (write, wcol), (dirn, dcol), (nxt, ncol) = toks[:5]
        for sym, c, role in ((read, rcol, "current symbol"), (write, wcol, "new symbol")):
            if len(sym) != 1:
                raise src.error(f"<{role}> must be a single character, not {sym!r}", lineno, c)
        move = MOVES.get(dirn.lower())
        if move is None:
            raise src.error(f"bad direction {dirn!r}: expected 'l', 'r' or '*'", lineno, dcol)
        key = (state, read)
        if key in table:
            pl, pc = table[key][3], table[key][4]
            raise src.error(
                f"two rules for state {state!r} reading {read!r}",
                lineno, scol,
                notes=(f"{src.path}:{pl}:{pc}: note: the first rule is here",),
            )
        table[key] = (write, move, nxt, lineno, scol, ncol)
        for q in (state, nxt):
            if q != WILD:
                states.setdefault(q)
        for a in (read, write):
            if a != WILD:
                symbols.setdefault(a)

    if not table:
        return []  # comments only: no program here
    tape = initial_tape(text)
    for a in tape or "":
        symbols.setdefault(a)

    alphabet = tuple(symbols)
    halting = {q: o for q in states if (o := outcome_of(q)) is not None}
    rules: list[Rule] = []
    locations: dict = {}  # no start declaration: the start state is always '0'
    for q in states:
        if q in halting:
            continue
        for a in alphabet:
            hit = table.get((q, a)) or table.get((q, WILD)) or table.get((WILD, a)) or table.get((WILD, WILD))
            if hit is None:
                continue
            w, mv, nq, ln, col, ncol = hit
            rules.append(Rule(
                q, a, a if w == WILD else w, mv, q if nq == WILD else nq, loc=src.loc(ln, col),
            ))
            locations[("next", q, a)] = src.loc(ln, ncol)
    return [Machine(
        name=name,
        alphabet=alphabet,
        blank=BLANK,
        states=tuple(states),
        start=START,
        halting=halting,
        rules=tuple(rules),
        missing_rule_counts_step=True,
        loc=src.loc(1, 1),
        locations=locations,
    )]
