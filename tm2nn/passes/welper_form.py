"""Lowering an ordinary line machine to the machine form of Welper §4.1.

Welper §4.1 wants ``d`` tapes over ``{-1, 1}`` (blank ``-1``), every head moving ``±1``
at every step, and some tapes read-only (§5: one read-only input tape, one output
tape).  :func:`to_welper_form` builds such a machine with ``d = 2`` — tape 0 read-only
holding the encoded input, tape 1 the (initially blank) work tape — from the existing
passes, never copying them:

1. :func:`~tm2nn.passes.binarise.binarise`: symbols ``_ - +``, ``w`` cells per source
   cell; ``_`` reads exactly as ``-`` (checked, not assumed), so ``_``/``-`` -> ``-1``
   and ``+`` -> ``+1``.
2. :func:`~tm2nn.passes.stay.remove_stays`: no ``S`` moves.
3. A copy phase (below), then the step-2 machine runs on the work tape while the
   read-only head oscillates.

**Read-only tape** (``P = w + 2``): cell ``-1`` holds ``+1`` (the header); source cell
``i`` of the input is the block at ``iP``: a marker ``+1``, a pad ``-1``, then the ``w``
code letters.  The marker makes the end of the input visible even when the input holds
the source blank (whose code is all ``-1``), so every input ``check_input`` accepts is
taken.  (``P ≡ w (mod 2)`` is forced: both heads move at every step, so their
displacements have equal parity.)

**Copy phase** (states ``~mark ~pad ~copy0..`` ``~back0..`` ``~fwd1..``): at ``(iP, iw)``
a marker ``+1`` starts copying block ``i`` to work cells ``[iw, iw + w)`` (``P`` steps);
a ``-1`` marker (the end) starts the walk back, ``P`` steps per block (read-only head
always L, work head ``w + 1`` times L and once R) checking each marker, down to
``(-P, -w)`` where the marker reads ``-1``; then ``w`` steps right put the work head at
``0`` and the read-only head at ``-2``, in the source start state.  Exactly
``(2n + 1)·P + w`` steps for ``n`` input symbols (:meth:`WelperLowering.copy_steps`).

**Simulation**: the step-2 machine's rules on tape 1, with the read-only head moving R
when it reads ``-1`` and L when it reads ``+1``: it oscillates between cells ``-2``
(``-1``) and ``-1`` (``+1``) with no parity bit in the state.  Simulated states keep
their names, halting states stay halting (and only they), and missing rules stay
missing, so the lowered machine halts exactly when the source does (both
missing-rule conventions: binarise handles them).

States: ``|Q_S| + 3w + 3`` (``Q_S`` = the step-2 machine's states).  Lowered steps per
source step: at most ``s = 3w - 2`` (binarise), or ``max(3w - 2, 2w)`` if the source
has S moves (an S move costs one more step); a halt on a missing rule takes
``2w - 2`` steps after the last source step.  So ``N`` source steps on ``n`` input
symbols take at most ``(2n + 1)(w + 2) + w + N·s + 2w - 2`` lowered steps
(:meth:`WelperLowering.lowered_steps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tm2nn.errors import Tm2nnError
from tm2nn.interp.multitape import MultiRun
from tm2nn.ir.machine import GridMachine, Machine
from tm2nn.ir.multitape import MConfig, MRule, MultiTapeMachine
from tm2nn.passes.binarise import BinaryLowering, binarise
from tm2nn.passes.lowering import fresh_namer
from tm2nn.passes.stay import StayLowering, remove_stays

SIGN = {"_": -1, "-": -1, "+": 1}
RO, WORK = 0, 1


@dataclass(frozen=True)
class WelperLowering:
    """``machine`` (Welper §4.1 form, 2 tapes, tape 0 read-only) simulates ``source``;
    ``binary`` and ``stays`` are the two passes it is built from; ``copy_states`` the
    states of the copy phase (module docstring)."""

    source: Machine
    machine: MultiTapeMachine
    width: int
    binary: BinaryLowering = field(repr=False)
    stays: StayLowering = field(repr=False)
    copy_states: frozenset[str] = field(repr=False)

    # -- sizes --------------------------------------------------------------------------------
    @property
    def period(self) -> int:
        """``P = w + 2`` read-only cells per source input cell."""
        return self.width + 2

    def copy_steps(self, input_len: int) -> int:
        """Lowered steps of the copy phase for ``input_len`` source cells (exact)."""
        return (2 * input_len + 1) * self.period + self.width

    @property
    def steps_per_source_step(self) -> int:
        """Lowered steps that suffice for one source step (module docstring)."""
        w = self.width
        return max(3 * w - 2, 2 * w) if self.stays.aux else 3 * w - 2

    def lowered_steps(self, source_steps: int, input_len: int = 0) -> int:
        """Copy phase + ``s`` per source step + ``2w - 2``: enough to simulate
        ``source_steps`` source steps, and to have halted if the source halts within
        them or on a missing rule right after them (binarise walks back ``2w - 2`` steps
        to halt on a missing rule)."""
        w = self.width
        return self.copy_steps(input_len) + source_steps * self.steps_per_source_step + 2 * w - 2

    def window(self, lo: int, hi: int, input_len: int) -> tuple[int, int]:
        """``(left, tau)``: cells ``[left, left + tau)`` of both tapes hold every non-blank
        cell and every head position of the lowered run, given the source run keeps its
        non-blank cells and head in ``[lo, hi]`` (``lo <= 0 <= hi``).  Read-only tape and
        copy phase: ``[-P, nP]``; simulation: binarise's ``lowered_columns`` plus one cell
        on the right (an S move steps right and back)."""
        if not lo <= 0 <= hi:
            raise ValueError(f"window needs lo <= 0 <= hi, got {lo}, {hi}")
        a, b = self.binary.lowered_columns(lo, hi)
        left = min(-self.period, a)
        right = max(input_len * self.period, b + 1)
        return left, right - left + 1

    # -- inputs -------------------------------------------------------------------------------
    def lower_input(self, text: str) -> tuple[frozenset[int], frozenset[int]]:
        """Start tapes for ``run_multitape``: the read-only layout of the module docstring
        (``Tm2nnError`` for a symbol outside the source alphabet), and a blank work tape."""
        code = self.binary.lower_input(text)  # checks the input
        w, p = self.width, self.period
        cells = {-1}
        for i in range(len(text)):
            cells.add(i * p)
            cells.update(i * p + 2 + j for j in range(w) if code[i * w + j] == "+")
        return frozenset(cells), frozenset()

    # -- mapping back -------------------------------------------------------------------------
    def at_boundary(self, state: str) -> bool:
        """A simulated state in which one whole source step is complete."""
        if state in self.copy_states or state in self.stays.aux:
            return False
        return self.binary.kind[state][0] == "src"

    def source_config(self, c: MConfig):
        """``(state, head, cells)`` of the source, or ``None`` mid-step (copy phase, stay
        aux states, inside a block operation).  Composes binarise's ``source_config``, so a
        machine halted on a missing rule after binarise's walk back (state ``q~x``) maps to
        the source's final configuration too."""
        if c.state in self.copy_states or c.state in self.stays.aux:
            return None
        w = self.width
        cells: dict[int, str] = {}
        for p in c.tapes[WORK]:  # blocks holding a +1, spelt out (the blank is all '-')
            b = p - p % w
            for q in range(b, b + w):
                cells[q] = "+" if q in c.tapes[WORK] else "-"
        return self.binary.source_config(c.state, c.heads[WORK], cells)

    def source_trace(self, run: MultiRun) -> list[tuple[int, tuple]]:
        """``(lowered step, source configuration)`` for each source step 0, 1, ..., read
        off the lowered run only.  A halt on a missing rule that the source counts as a
        step adds one entry, at the last lowered step."""
        if not _same(run.machine, self.machine):
            raise ValueError(f"the run is of {run.machine.name!r}, not of this lowering's machine")
        out = [(t, self.source_config(c)) for t, c in enumerate(run.configs)
               if self.at_boundary(c.state)]
        last = run.configs[-1]
        if run.halted and last.state not in self.machine.halting:
            conf = self.source_config(last)
            if conf is None:
                raise ValueError(f"lowered run halted in {last.state!r}, which is mid-step")
            if self.source.missing_rule_counts_step:
                out.append((run.steps, conf))
        return out

    # -- metadata -----------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"pass": "welper_form", "width": self.width, "states": len(self.machine.states)}

    @classmethod
    def from_json(cls, d: dict, source: Machine) -> "WelperLowering":
        low = to_welper_form(source)
        if d.get("pass") != "welper_form" or d.get("width") != low.width or \
                d.get("states") != len(low.machine.states):
            raise Tm2nnError(f"welper-form metadata {d} does not match machine {source.name!r}")
        return low


def _same(a: MultiTapeMachine, b: MultiTapeMachine) -> bool:
    """The same machine (``MultiTapeMachine`` compares by identity; a rebuilt lowering,
    e.g. by :meth:`WelperLowering.from_json`, is equal field by field)."""
    return a is b or (
        (a.name, a.tapes, a.read_only, a.states, a.start, a.halting)
        == (b.name, b.tapes, b.read_only, b.states, b.start, b.halting)
        and set(a.rules) == set(b.rules))


def sign_rules(m: Machine) -> dict[tuple[str, int], tuple[str, int, int]]:
    """``(state, sign) -> (next, write sign, move ±1)`` of a machine over ``_ - +`` without
    S moves, checking that reading ``_`` does exactly what reading ``-`` does."""
    mv = {"L": -1, "R": 1}
    table: dict[tuple[str, int], tuple[str, int, int]] = {}
    for q in m.states:
        got = {}
        for a in ("_", "-", "+"):
            r = m.delta.get((q, a))
            if r is not None and r.move not in mv:
                raise Tm2nnError(f"welper form: rule ({q}, {a}) moves {r.move!r}, not L or R")
            got[a] = None if r is None else (r.next, SIGN[r.write], mv[r.move])
        if got["_"] != got["-"]:
            raise Tm2nnError(f"welper form: state {q!r} of {m.name!r} treats '_' and '-' "
                             f"differently ({got['_']} vs {got['-']}), so -1 is ambiguous")
        for a, s in (("-", -1), ("+", 1)):
            if got[a] is not None:
                table[(q, s)] = got[a]
    return table


def to_welper_form(m: Machine) -> WelperLowering:
    """Welper §4.1: lower the line machine ``m`` to 2 tapes over ``{-1, 1}`` with tape 0
    read-only (module docstring)."""
    if isinstance(m, GridMachine):
        raise Tm2nnError(f"welper form: {m.name!r} is a grid machine; only line machines lower "
                         "to the 2-tape form")
    b = binarise(m)
    w = b.width
    if set(b.code[m.blank]) != {"-"}:
        raise Tm2nnError("welper form: the blank's block code must be all '-'")
    st = remove_stays(b.machine)
    sm = st.machine
    table = sign_rules(sm)
    name = fresh_namer(sm.states)
    p = w + 2
    mark, pad = name("~mark"), name("~pad")
    copy = [name(f"~copy{j}") for j in range(w)]
    back = [name(f"~back{k}") for k in range(p)]
    fwd = [name(f"~fwd{k}") for k in range(1, w)]
    extra = [mark, pad, *copy, *back, *fwd]
    rules: list[MRule] = []
    both = [(r, a) for r in (-1, 1) for a in (-1, 1)]

    def add(q: str, nxt, moves) -> None:
        """Rules of ``q`` for every read; ``nxt(r, a)`` -> next state (None: no rule),
        ``moves(r, a)`` -> (ro move, work move, work write)."""
        for r, a in both:
            n = nxt(r, a)
            if n is not None:
                mro, mw, wr = moves(r, a)
                rules.append(MRule(q, (r, a), n, (r, wr), (mro, mw)))

    # copy: at (iP, iw) read the marker
    add(mark, lambda r, a: pad if r == 1 else back[1], lambda r, a: (1 if r == 1 else -1, -1, a))
    add(pad, lambda r, a: copy[0], lambda r, a: (1, 1, a))
    for j in range(w):
        add(copy[j], lambda r, a, j=j: copy[j + 1] if j + 1 < w else mark, lambda r, a: (1, 1, r))
    # walk back P cells per block: work L first, R on the last step; check each marker
    start_fwd = fwd[0] if fwd else sm.start
    add(back[0], lambda r, a: back[1] if r == 1 else start_fwd,
        lambda r, a: (-1, -1, a) if r == 1 else (1, 1, a))
    for k in range(1, p):
        add(back[k], lambda r, a, k=k: back[(k + 1) % p], lambda r, a, k=k: (-1, 1 if k == p - 1 else -1, a))
    for k in range(len(fwd)):
        add(fwd[k], lambda r, a, k=k: fwd[k + 1] if k + 1 < len(fwd) else sm.start, lambda r, a: (1, 1, a))
    # simulation: the read-only head oscillates between -2 (-1) and -1 (+1)
    for (q, a), (n, wr, mv) in table.items():
        for r in (-1, 1):
            rules.append(MRule(q, (r, a), n, (r, wr), (1 if r == -1 else -1, mv)))
    lowered = MultiTapeMachine(
        name=m.name, tapes=2, read_only=frozenset({RO}), states=sm.states + tuple(extra),
        start=mark, halting=frozenset(sm.halting), rules=tuple(rules))
    return WelperLowering(m, lowered, w, b, st, frozenset(extra))
