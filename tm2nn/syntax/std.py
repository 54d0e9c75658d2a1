"""The bbchallenge standard text format ("std"): ``1RB1LC_1RC1RB_1RD0LE_1LA1LD_1RZ0LA``.

Format
------
* Rows are separated by ``_``, one row per state ``A``, ``B``, ``C``, ... in order; the
  start state is ``A``.
* A row holds K transitions of three characters, one per read symbol ``0`` .. ``K-1``
  (K <= 10): ``<write digit><L|R><state letter>``.
* ``---`` is an undefined transition: the machine halts there, and the step that finds
  no rule does not count.
* A state letter that names no row (``Z`` in ``1RZ``, ``H`` in a 4-row machine, ...) is a
  halting state named after that letter, outcome ``halt``.  The transition into it counts
  as a step (bbchallenge convention).  Different such letters are different halting states.
* Symbols are the digit characters ``'0'`` .. ``str(K-1)``; the blank is ``'0'``.

A ``.std`` file holds one machine per line.  A line may carry more whitespace-separated
fields after the machine (the corpus files: ``1RB1LB_1LA1RZ Halt 6 4``); they are ignored by
:func:`parse` and returned by :func:`parse_corpus_line`.  Blank lines and ``#`` comments
(to the end of the line) are skipped.

Machine names: every machine is named by its own std text (``1RB1LB_1LA1RZ``), which is
readable and is the machine's identity in bbchallenge.  When the same text occurs again in
the same file, the repeat is named ``<text>@<line>``.

:func:`dump` writes a :class:`~tm2nn.ir.Machine` as std text when the format can express
it (see its docstring).
"""

from __future__ import annotations

import string

from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import GridMachine, Machine, Rule
from tm2nn.source import SourceText

KIND = "machine"

LETTERS = string.ascii_uppercase
MAX_SYMBOLS = 10
MAX_ROWS = len(LETTERS)


def parse_corpus_line(line: str) -> tuple[str, list[str]] | None:
    """Split one line of a ``.std`` or corpus file into ``(machine_text, other_fields)``.

    Returns None for a blank or comment-only line.  ``other_fields`` are the remaining
    whitespace-separated fields (for the corpus: status, steps, sigma).
    """
    fields = line.split("#", 1)[0].split()
    if not fields:
        return None
    return fields[0], fields[1:]


def parse(src: SourceText) -> list[Machine]:
    """Every machine in the file, one per non-blank, non-comment line."""
    machines: list[Machine] = []
    seen: set[str] = set()
    for lineno, raw in enumerate(src.text.splitlines(), start=1):
        line = raw.split("#", 1)[0]
        stripped = line.lstrip()
        if not stripped:
            continue
        col = len(line) - len(stripped) + 1
        text = stripped.split()[0]
        name = text if text not in seen else f"{text}@{lineno}"
        seen.add(text)
        machines.append(parse_machine(src, text, lineno, col, name))
    return machines


def parse_machine(src: SourceText, text: str, line: int, col: int, name: str | None = None) -> Machine:
    """Parse one machine ``text`` found at ``line``:``col`` of ``src``."""
    # Split into rows, remembering where each starts.
    rows: list[tuple[int, str]] = []
    start = 0
    for part in text.split("_"):
        rows.append((col + start, part))
        start += len(part) + 1
    if len(rows) > MAX_ROWS:
        raise src.error(
            f"std text has {len(rows)} rows; at most {MAX_ROWS} states (A-Z) are possible",
            line, rows[MAX_ROWS][0],
        )
    first_col, first = rows[0]
    if not first:
        raise src.error("empty row: expected transitions like '1RB'", line, first_col)
    if len(first) % 3:
        raise src.error(
            f"row A has {len(first)} characters; each transition is 3 characters (e.g. '1RB')",
            line, first_col + len(first) - len(first) % 3,
        )
    k = len(first) // 3
    if k > MAX_SYMBOLS:
        raise src.error(
            f"row A has {k} transitions; the std format allows at most {MAX_SYMBOLS} symbols",
            line, first_col + 3 * MAX_SYMBOLS,
        )
    n = len(rows)
    row_letters = LETTERS[:n]
    symbols = tuple(str(d) for d in range(k))
    rules: list[Rule] = []
    halting: dict[str, str] = {}
    for r, (rcol, row) in enumerate(rows):
        state = LETTERS[r]
        if len(row) != 3 * k:
            if not row:
                raise src.error(f"empty row {state}: expected {k} transitions", line, rcol)
            where = rcol + min(len(row), 3 * k)
            raise src.error(
                f"row {state} has {len(row)} characters, expected {3 * k} "
                f"({k} transitions of 3 characters, like row A)",
                line, where,
            )
        for j in range(k):
            t = row[3 * j: 3 * j + 3]
            tcol = rcol + 3 * j
            if t == "---":
                continue
            w, mv, nxt = t
            if w not in symbols:
                if w == "-":
                    raise src.error(f"undefined transition must be written '---', not {t!r}", line, tcol)
                raise src.error(
                    f"bad write symbol {w!r}: expected a digit 0-{k - 1} (this machine has {k} symbols)",
                    line, tcol,
                )
            if mv not in "LR":
                raise src.error(f"bad move {mv!r}: expected 'L' or 'R'", line, tcol + 1)
            if nxt not in LETTERS:
                raise src.error(f"bad state {nxt!r}: expected a letter A-Z", line, tcol + 2)
            if nxt not in row_letters:
                halting[nxt] = "halt"
            rules.append(Rule(state, symbols[j], w, mv, nxt, loc=src.loc(line, tcol)))
    states = tuple(row_letters) + tuple(sorted(halting))
    return Machine(
        name=name or text,
        alphabet=symbols,
        blank="0",
        states=states,
        start="A",
        halting=halting,
        rules=tuple(rules),
        missing_rule_counts_step=False,
        loc=src.loc(line, col),
    )


def to_std(m: Machine) -> str:
    """The std text of ``m`` (no newline).  Raises :class:`Tm2nnError` when std cannot express it.

    Requirements: a line tape; moves L and R only; the bbchallenge step convention (the
    no-rule step does not count); at most 10 symbols; at most 26 states; all halting
    states have outcome ``halt`` (std has no accept/reject); the start state is not halting.

    Mapping: the blank becomes ``0`` and the other symbols ``1``, ``2``, ... in alphabet
    order.  The start state becomes row ``A``, the other non-halting states ``B``, ``C``, ...
    in the machine's state order.  A halting state keeps its name if that is one letter
    naming no row (so std -> Machine -> std is the identity); the other halting states
    all become ``Z`` (their names are lost, but not their behaviour).
    """
    if isinstance(m, GridMachine) or m.tape_kind != "line":
        raise Tm2nnError(f"machine {m.name!r}: the std format holds line-tape machines only, not grid machines")
    if m.missing_rule_counts_step:
        raise Tm2nnError(
            f"machine {m.name!r} counts the step on which no rule applies (morphett convention); "
            "the std format cannot express that (its undefined transitions '---' do not count a step)"
        )
    stay = next((r for r in m.rules if r.move not in ("L", "R")), None)
    if stay is not None:
        raise Tm2nnError(
            f"machine {m.name!r}: rule ({stay.state}, {stay.read}) moves {stay.move!r}; the std format "
            "has only L and R moves (remove stay moves first)"
        )
    if len(m.alphabet) > MAX_SYMBOLS:
        raise Tm2nnError(
            f"machine {m.name!r} has {len(m.alphabet)} symbols; the std format allows at most {MAX_SYMBOLS}"
        )
    bad = {q: o for q, o in m.halting.items() if o != "halt"}
    if bad:
        shown = ", ".join(f"{q!r} ({o})" for q, o in sorted(bad.items()))
        raise Tm2nnError(
            f"machine {m.name!r}: halting states with outcome accept/reject ({shown}); the std format "
            "has no outcomes, so this information would be lost"
        )
    if m.start in m.halting:
        raise Tm2nnError(f"machine {m.name!r}: the start state is a halting state; std text cannot express that")
    live = [m.start] + [q for q in m.states if q not in m.halting and q != m.start]
    if len(live) > MAX_ROWS:
        raise Tm2nnError(
            f"machine {m.name!r} has {len(live)} non-halting states; the std format allows at most {MAX_ROWS} (A-Z)"
        )
    letter = {q: LETTERS[i] for i, q in enumerate(live)}
    free = LETTERS[len(live):]
    used_halts = {r.next for r in m.rules if r.next in m.halting}
    default_halt = free[-1] if free else None  # 'Z' unless all 26 letters name rows
    for q in sorted(used_halts):
        if len(q) == 1 and q in free:
            letter[q] = q
        elif default_halt is not None:
            letter[q] = default_halt
        else:
            raise Tm2nnError(
                f"machine {m.name!r}: 26 non-halting states leave no letter for the halting state {q!r}"
            )
    digits = [m.blank] + [a for a in m.alphabet if a != m.blank]
    digit = {a: str(i) for i, a in enumerate(digits)}
    delta = m.delta
    rows = []
    for q in live:
        cells = []
        for a in digits:
            r = delta.get((q, a))
            cells.append("---" if r is None else f"{digit[r.write]}{r.move}{letter[r.next]}")
        rows.append("".join(cells))
    return "_".join(rows)


def dump(m: Machine) -> str:
    """``m`` as a one-line ``.std`` file (see :func:`to_std`), ending in a newline."""
    return to_std(m) + "\n"
