"""The normal form of Goel et al., B.1.2: a no-op first step, and a halt with the answer in
the top-left cell and the rest of the input region blank.

B.1.2 asks of the machine the RCNN simulates that

* "the machine's first step is to not move and not change the tape symbol" (so the
  compute-phase message of B.2 travels one cell ahead of the head), and
* it "halts with output on the left-top corner of the tape and the rest of the input
  tape set to blank".

**The answer.**  Definition 6's machines end in final states "indicating accept or
reject" and output a bit; B.3 reads it as ±1 from the top-left cell.  So the answer is
the outcome: ``accept`` -> ``+`` (+1), ``reject`` -> ``-`` (−1), and a plain ``halt``
(a halting state with outcome ``halt``, or a pair with no rule) -> blank (0): such a
machine gives no verdict, and 0 is the digit B.1.1 keeps for "none".

**The input region** is the cells the input occupies: row 0 (the top row), from the
start cell (0, 0) rightwards; (0, 0) is its top-left cell.  We clear more than that:
at the halt *every* cell is blank except the answer, and the head is on (0, 0).  That is
the final configuration B.3 uses ("the top-left corner will have output ±3⁻¹ + 3⁻² … and
the rest will be set at 3⁻²"), whose readout sums over all cells.

**What the pass needs** (checked; a machine that fails is refused with a
:class:`~tm2nn.errors.Tm2nnError`): a :class:`GridMachine` over ``_ - +`` with blank
``_`` that never moves up or down and never writes the blank, and inputs of one row
without blanks.  Then the non-blank cells are the input plus every cell the head has
left: one run of cells on row 0 containing (0, 0), with the head in it or next to it.
:func:`~tm2nn.passes.binarise.binarise` followed by
:func:`~tm2nn.passes.line_to_grid.line_to_grid` produces such machines from any line
machine.

**The lowered machine**:

1. ``nf~start`` — the no-op first step (B.1.2's "single additional state").
2. ``nf~down``, ``nf~mark`` — step down, write ``+`` at (1, 0) and step back up into the
   source's start state.  This marker below the start cell is how the cleanup finds
   (0, 0) again (B.1.2: the 2D tape "allows us to have markers").
3. The source machine's rules, unchanged.
4. When the source halts (in a halting state, or on a pair without a rule), a cleanup
   that remembers the outcome ``v``: walk right to the end of the run of non-blank cells
   (``nf~right~v``; ``nf~peek~v``/``nf~back~v`` when the head is on a blank just past
   either end), erase it right to left (``nf~erase~v``), step down, walk right on row 1
   to the marker and erase it (``nf~find~v``), step up onto (0, 0), write the answer
   (``nf~answer~v``) and halt in ``nf~v`` (outcome ``v``).

With the run of non-blank cells ``[lo, hi]`` and the head on ``c`` when the source
halts, the cleanup takes ``7 + 2·hi − c − 2·lo`` steps (``c`` in the run), ``8 + 2·hi −
3·lo`` (``c = lo − 1``), ``8 + hi − 2·lo`` (``c = hi + 1``) or 7 (no run); at most
``2·max(n, N) + 3N + 8`` for an input of ``n`` cells and ``N`` source steps.  Source
states keep their names and indices.
"""

from __future__ import annotations

from dataclasses import dataclass

from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import RunResult
from tm2nn.ir.machine import GridMachine, Machine, Rule, check_input
from tm2nn.passes.lowering import Lowering, Mapped, fresh_namer, symbol_map
from tm2nn.source import error_at

BLANK, MINUS, PLUS = "_", "-", "+"
ALPHABET = (BLANK, MINUS, PLUS)
#: The answer written in the top-left cell for each outcome, and its B.1.1 digit value.
ANSWER = {"accept": PLUS, "reject": MINUS, "halt": BLANK}
ANSWER_VALUE = {"accept": 1, "reject": -1, "halt": 0}
_VALUE = {BLANK: 0, MINUS: -1, PLUS: 1}
PREAMBLE = 3
MARKER = (1, 0)


@dataclass(frozen=True)
class NormalFormLowering(Lowering):
    """``machine`` is ``source`` in the B.1.2 normal form (module docstring).  ``preamble``
    are the three states before the source's start, ``cleanup`` the cleanup states and
    ``final[v]`` the halting state of outcome ``v``."""

    source: GridMachine
    machine: GridMachine
    preamble: tuple[str, ...]
    cleanup: tuple[str, ...]
    final: dict[str, str]

    def to_json(self) -> dict:
        return {"pass": "normal_form"}

    def lower_input(self, text: str) -> str:
        """Goel et al., B.1.2: the input is one row without blanks."""
        if "/" in text:
            raise Tm2nnError("the normal form takes a one-row input (no '/')", file="input",
                             line=1, col=text.index("/") + 1, snippet=text)
        check_input(self.source, text)
        if BLANK in text:
            raise Tm2nnError("the normal form takes an input without blanks '_' "
                             "(binarise the machine to encode blank input cells)",
                             file="input", line=1, col=text.index(BLANK) + 1, snippet=text)
        return text

    def source_input(self, text: str) -> str:
        return text

    def lowered_steps(self, source_steps: int, input_len: int = 0) -> int:
        n = source_steps
        return PREAMBLE + n + 2 * max(input_len, n) + 3 * n + 8

    def lowered_columns(self, lo: int, hi: int) -> tuple[int, int]:
        """The cleanup peeks one cell past either end of the run of non-blank cells, and
        the marker at (1, 0) is in ``[lo, hi]`` since ``lo <= 0``."""
        return lo - 1, hi + 1

    def source_config(self, state: str, head, cells: dict):
        if state not in self.source.state_index:
            return None
        up = dict(cells)
        if up.get(MARKER) == PLUS:
            del up[MARKER]
        return state, head, up

    def answer(self, lowered: RunResult) -> int | None:
        """The answer of a halted lowered run: the top-left cell as −1, 0 or +1."""
        if not lowered.halted:
            return None
        return _VALUE[lowered.cells.get((0, 0), BLANK)]

    def _map(self, lowered: RunResult) -> Mapped:
        """Goel et al., B.1.2: the source's steps are the lowered steps between the
        preamble and the cleanup."""
        tr = lowered.trace
        g, m = self.source, self.machine
        sym = symbol_map(m, g)
        ours = {m.state_index[q]: g.state_index[q] for q in g.states}
        out = Mapped()
        n = len(tr)
        if n < PREAMBLE:
            out.halted = g.start in g.halting
            return out
        out.marks.append(PREAMBLE)
        j = PREAMBLE
        while j < n and tr.state[j] in ours:
            out.add((tr.pos_row[j], tr.pos[j]), sym[tr.read[j]], sym[tr.write[j]],
                    ours[tr.state[j]], (tr.head_row[j], tr.head[j]), j + 1)
            j += 1
        last = g.states[out.state[-1]] if out.state else g.start
        if last in g.halting:
            out.halted = True
        elif j < n:  # the source found no rule: the cleanup began
            out.halted = True
            if g.missing_rule_counts_step:
                head = out.head[-1] if out.head else (0, 0)
                a = sym[tr.read[j]]
                out.add(head, a, a, g.state_index[last], head, out.marks[-1])
        return out


def _check(g: Machine) -> None:
    """The preconditions of :func:`normal_form` (module docstring)."""
    where = g.loc
    if not isinstance(g, GridMachine):
        raise error_at(where, f"machine {g.name!r}: the normal form is for grid machines "
                              "(lower a line machine with line_to_grid first)")
    if g.blank != BLANK or not set(g.alphabet) <= set(ALPHABET):
        raise error_at(where, f"machine {g.name!r}: the normal form needs the symbols '_' (blank) "
                              f"'-' '+', not {' '.join(repr(a) for a in g.alphabet)} with blank "
                              f"{g.blank!r} (lower the machine with binarise first)")
    for r in g.rules:
        if r.move in ("U", "D"):
            raise error_at(r.loc or where, f"machine {g.name!r}: rule ({r.state}, {r.read}) moves "
                                           f"{r.move}; the normal form needs a machine that keeps to row 0")
        if r.write == BLANK:
            raise error_at(r.loc or where, f"machine {g.name!r}: rule ({r.state}, {r.read}) writes the "
                                           "blank; the normal form needs a machine that never does "
                                           "(binarise it first)")


def normal_form(g: GridMachine) -> NormalFormLowering:
    """Goel et al., B.1.2 ("First step", "Halting position"): ``g`` with a no-op first step
    and a cleanup that leaves only the answer, in the top-left cell (module docstring)."""
    _check(g)
    name = fresh_namer(g.states)
    start, down, mark = name("nf~start"), name("nf~down"), name("nf~mark")
    rules = [Rule(start, a, a, "S", down) for a in ALPHABET]
    rules += [Rule(down, a, a, "D", mark) for a in ALPHABET]
    rules += [Rule(mark, a, PLUS, "U", g.start) for a in ALPHABET]
    rules += list(g.rules)

    # Which outcomes the source can end with: its halting states', and "halt" for pairs
    # without a rule (a live state reading one of the three symbols).
    live = [q for q in g.states if q not in g.halting]
    missing = [(q, a) for q in live for a in ALPHABET if (q, a) not in g.delta]
    outcomes = [v for v in ANSWER if v in g.halting.values() or (v == "halt" and missing)]
    cleanup: list[str] = []
    final: dict[str, str] = {}
    entry: dict[str, tuple[str, str]] = {}
    for v in outcomes:
        right, peek, back, erase, find, answer = (
            name(f"nf~{s}~{v}") for s in ("right", "peek", "back", "erase", "find", "answer"))
        final[v] = name(f"nf~{v}")
        cleanup += [right, peek, back, erase, find, answer]
        entry[v] = (right, peek)
        signs = (MINUS, PLUS)
        rules += [Rule(right, a, a, "R", right) for a in signs]
        rules += [Rule(right, BLANK, BLANK, "L", erase)]       # past the right end
        rules += [Rule(peek, a, a, "R", right) for a in signs]   # the run starts here
        rules += [Rule(peek, BLANK, BLANK, "L", back)]          # the run ends left of here
        rules += [Rule(back, a, a, "L", erase) for a in ALPHABET]
        rules += [Rule(erase, a, BLANK, "L", erase) for a in signs]
        rules += [Rule(erase, BLANK, BLANK, "D", find)]         # past the left end: row 1
        rules += [Rule(find, a, BLANK, "R", find) for a in (BLANK, MINUS)]
        rules += [Rule(find, PLUS, BLANK, "U", answer)]         # the marker, below (0, 0)
        rules += [Rule(answer, a, ANSWER[v], "S", final[v]) for a in ALPHABET]

    def enter(q: str, a: str, v: str) -> Rule:
        """The source halted in ``q`` on ``a``: step right into the cleanup for ``v``."""
        right, peek = entry[v]
        return Rule(q, a, a, "R", right if a != BLANK else peek)

    rules += [enter(q, a, v) for q, v in g.halting.items() for a in ALPHABET]
    rules += [enter(q, a, "halt") for q, a in missing]

    lowered = GridMachine(
        name=g.name, alphabet=ALPHABET, blank=BLANK,
        states=g.states + (start, down, mark) + tuple(cleanup) + tuple(final.values()),
        start=start, halting={h: v for v, h in final.items()}, rules=tuple(rules),
        missing_rule_counts_step=g.missing_rule_counts_step, loc=g.loc,
    )
    return NormalFormLowering(g, lowered, (start, down, mark), tuple(cleanup), final)
