"""What the machine-to-machine passes of the RCNN form share: mapping a run back.

A pass lowers an *upper* machine to a *lowered* one that simulates it (one upper step
is one or more lowered steps).  Backends run, or decode, the lowered machine and must
still report the upper (source) machine's steps, state and tape (ARCHITECTURE.md,
"--json run report").  Every lowering here therefore answers three questions:

* :meth:`Lowering.source_result` — a lowered :class:`RunResult` made with
  ``trace=True`` → the upper machine's :class:`RunResult`, trace included.  It is
  built from what the lowered run did (its trace and tape), never by running the
  upper machine, so comparing it with the interpreter's run of the upper machine is a
  real check.  With ``max_steps`` it is cut off as ``run_machine(upper, x, max_steps)``
  would be (which does not look for a missing rule after the last step allowed, unless
  the machine counts that step).
* :meth:`Lowering.step_map` — for each upper configuration k, the number of lowered
  steps after which the lowered configuration represents it.
* :meth:`Lowering.source_config` — one lowered configuration → the upper configuration
  it represents, or ``None`` if it is in the middle of an upper step.

A pass implements ``_map(lowered) -> Mapped`` (the upper trace entries and step marks);
the rest is shared.  :class:`Chain` composes passes.  Backends that decode a network's
output into lowered configurations can build a lowered :class:`RunResult` with
:func:`result_from_configurations` and map it back the same way.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import RunResult, Trace, configurations
from tm2nn.ir.machine import GridMachine, Machine


@dataclass
class Mapped:
    """An upper run read off a lowered one: one entry per upper step, as in
    :class:`~tm2nn.interp.machine.Trace` (positions are ``(row, col)`` on a grid and a
    column on a line; symbols and states are indices into the *upper* machine's
    alphabet and states); ``marks[k]`` = lowered steps after which upper configuration
    k is represented; ``halted`` = the upper machine halted."""

    pos: list = field(default_factory=list)
    read: list = field(default_factory=list)
    write: list = field(default_factory=list)
    state: list = field(default_factory=list)
    head: list = field(default_factory=list)
    marks: list = field(default_factory=list)
    halted: bool = False

    def add(self, pos, read: int, write: int, state: int, head, mark: int) -> None:
        self.pos.append(pos)
        self.read.append(read)
        self.write.append(write)
        self.state.append(state)
        self.head.append(head)
        self.marks.append(mark)


class Lowering:
    """Base of the lowering objects: ``source`` (upper machine) and ``machine`` (lowered).

    Subclasses set ``source`` and ``machine`` and implement :meth:`_map`,
    :meth:`lower_input`, :meth:`source_input`, :meth:`lowered_steps` and
    :meth:`source_config`."""

    source: Machine
    machine: Machine

    # -- per pass ------------------------------------------------------------------------------
    def to_json(self) -> dict:  # pragma: no cover - abstract
        """The pass and its options: with the source machine, enough to rebuild it."""
        raise NotImplementedError

    def lower_input(self, text: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def source_input(self, text: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def lowered_steps(self, source_steps: int, input_len: int = 0) -> int:  # pragma: no cover
        """Lowered steps that suffice for ``source_result(lowered_run, N)`` to equal
        ``run_machine(upper, x, N)`` for ``N = source_steps`` and an input ``x`` of
        ``input_len`` upper cells; the lowered machine has halted by then if the upper
        one halted within N steps."""
        raise NotImplementedError

    def source_config(self, state: str, head, cells: dict):  # pragma: no cover - abstract
        raise NotImplementedError

    def _map(self, lowered: RunResult) -> Mapped:  # pragma: no cover - abstract
        raise NotImplementedError

    def lowered_columns(self, lo: int, hi: int) -> tuple[int, int]:
        """Columns ``[lo', hi']`` that hold every non-blank lowered cell and the lowered
        head, given that the upper run keeps its non-blank cells and head in columns
        ``[lo, hi]`` (with ``lo <= 0 <= hi``).  Backends size finite tapes with it."""
        raise NotImplementedError(f"{type(self).__name__} does not bound its columns")

    # -- shared ------------------------------------------------------------------------------
    def lowered_input_len(self, input_len: int) -> int:
        """Length of ``lower_input`` of an upper input of ``input_len`` cells."""
        return input_len

    def source_result(self, lowered: RunResult, max_steps: int | None = None) -> RunResult:
        """The upper machine's run, read off the lowered run ``lowered`` (module docstring)."""
        return _build(self.source, self.source_input(lowered.input), self._mapped(lowered),
                      max_steps)

    def step_map(self, lowered: RunResult) -> np.ndarray:
        """``out[k]`` = lowered steps after which upper configuration k is represented."""
        return np.asarray(self._mapped(lowered).marks, dtype=np.int64)

    def _mapped(self, lowered: RunResult) -> Mapped:
        if lowered.machine is not self.machine and lowered.machine != self.machine:
            raise ValueError(f"the run is of {lowered.machine.name!r}, not of this lowering's machine")
        if lowered.trace is None:
            raise ValueError("mapping a run back needs a run made with trace=True")
        return self._map(lowered)


def cut_at(m: Machine, n: int, halted: bool, max_steps: int | None, state_after) -> tuple[int, bool]:
    """``(steps, halted)`` of a mapped run of ``n`` upper steps cut off as
    ``run_machine(m, x, max_steps)`` would cut it; ``state_after(k)`` is the state after
    step ``k``."""
    if max_steps is not None and n > max_steps:
        # The upper run went on after step max_steps, so it had not halted there.
        return max_steps, False
    if max_steps is not None and n == max_steps and halted and not m.missing_rule_counts_step:
        # A run cut off at max_steps does not look for a rule it would not count.
        return n, state_after(n) in m.halting
    return n, halted


def _build(m: Machine, text: str, mp: Mapped, max_steps: int | None) -> RunResult:
    """An upper :class:`RunResult` from its mapped trace; the tape is the upper input
    with the mapped writes replayed."""
    n, halted = cut_at(m, len(mp.state), mp.halted, max_steps,
                       lambda k: m.states[mp.state[k - 1]] if k else m.start)
    grid = isinstance(m, GridMachine)
    tr = Trace()
    tr.state.extend(mp.state[:n])
    tr.read.extend(mp.read[:n])
    tr.write.extend(mp.write[:n])
    if grid:
        tr.pos_row.extend(p[0] for p in mp.pos[:n])
        tr.pos.extend(p[1] for p in mp.pos[:n])
        tr.head_row.extend(h[0] for h in mp.head[:n])
        tr.head.extend(h[1] for h in mp.head[:n])
        origin = (0, 0)
    else:
        tr.pos.extend(mp.pos[:n])
        tr.head.extend(mp.head[:n])
        origin = 0
    state = m.states[tr.state[-1]] if n else m.start
    head = mp.head[n - 1] if n else origin
    res = RunResult(m, text, halted, n, state, None, head, {}, tr)
    cells: dict = {}
    for conf in configurations(res):  # replay the writes
        cells = conf[3]
    res.cells = dict(cells)
    res.outcome = m.halting.get(state, "halt") if halted else None
    return res


def check_only_head_written(k: int, head, before: dict, after: dict, blank: str) -> None:
    for cell in before.keys() | after.keys():
        if cell != head and before.get(cell, blank) != after.get(cell, blank):
            raise Tm2nnError(f"step {k}: the decoded tape changed at cell {cell} ({before.get(cell, blank)!r} -> "
                             f"{after.get(cell, blank)!r}), away from the head at {head}: no run of the machine")


def result_from_configurations(m: Machine, text: str, configs: Iterable, halted: bool) -> RunResult:
    """A :class:`RunResult` with trace from configurations ``(step, state, head, cells)``,
    steps 0, 1, 2, ... (as :func:`~tm2nn.interp.machine.configurations` yields them, or as
    a backend decodes them): step k's written cell is the one under the head after step
    k-1.  ``halted`` says whether the last configuration is a halted one.

    A step writes only the cell under the head, so a decoded configuration whose tape
    changed anywhere else is no run of ``m``: a :class:`~tm2nn.errors.Tm2nnError` names the
    step and the cell (the trace records the head's cell only, and would hide it)."""
    grid = isinstance(m, GridMachine)
    blank = m.blank
    tr = Trace()
    it = iter(configs)
    _k, state, head, cells = next(it)
    prev_head, under, before = head, cells.get(head, blank), dict(cells)
    steps = 0
    for k, state, head, cells in it:
        p = prev_head
        check_only_head_written(k, p, before, cells, blank)
        before = dict(cells)  # configurations() may update one dict in place
        tr.read.append(m.symbol_index[under])
        tr.write.append(m.symbol_index[cells.get(p, blank)])
        tr.state.append(m.state_index[state])
        if grid:
            tr.pos_row.append(p[0])
            tr.pos.append(p[1])
            tr.head_row.append(head[0])
            tr.head.append(head[1])
        else:
            tr.pos.append(p)
            tr.head.append(head)
        prev_head, under = head, cells.get(head, blank)
        steps += 1
    outcome = m.halting.get(state, "halt") if halted else None
    return RunResult(m, text, halted, steps, state, outcome, prev_head, dict(cells), tr)


@dataclass(frozen=True)
class Chain(Lowering):
    """Lowerings applied one after the other: ``steps[0]`` lowers ``source``, each next
    one lowers the previous one's machine, and ``machine`` is the last one's."""

    steps: tuple[Lowering, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a chain needs at least one lowering")
        for a, b in zip(self.steps, self.steps[1:]):
            if b.source is not a.machine:
                raise ValueError("each lowering in a chain must lower the previous one's machine")

    @property
    def source(self) -> Machine:  # type: ignore[override]
        return self.steps[0].source

    @property
    def machine(self) -> Machine:  # type: ignore[override]
        return self.steps[-1].machine

    def to_json(self) -> dict:
        return {"passes": [s.to_json() for s in self.steps]}

    def lower_input(self, text: str) -> str:
        for s in self.steps:
            text = s.lower_input(text)
        return text

    def source_input(self, text: str) -> str:
        for s in reversed(self.steps):
            text = s.source_input(text)
        return text

    def lowered_input_len(self, input_len: int) -> int:
        for s in self.steps:
            input_len = s.lowered_input_len(input_len)
        return input_len

    def lowered_steps(self, source_steps: int, input_len: int = 0) -> int:
        for s in self.steps:
            source_steps = s.lowered_steps(source_steps, input_len)
            input_len = s.lowered_input_len(input_len)
        return source_steps

    def lowered_columns(self, lo: int, hi: int) -> tuple[int, int]:
        for s in self.steps:
            lo, hi = s.lowered_columns(lo, hi)
        return lo, hi

    def source_config(self, state: str, head, cells: dict):
        conf = (state, head, cells)
        for s in reversed(self.steps):
            conf = s.source_config(*conf)
            if conf is None:
                return None
        return conf

    def source_result(self, lowered: RunResult, max_steps: int | None = None) -> RunResult:
        res = lowered
        for i, s in enumerate(reversed(self.steps)):
            res = s.source_result(res, max_steps if i == len(self.steps) - 1 else None)
        return res

    def step_map(self, lowered: RunResult) -> np.ndarray:
        res, marks = lowered, None
        for s in reversed(self.steps):
            m = s.step_map(res)
            marks = m if marks is None else marks[m]
            res = s.source_result(res)
        return marks


def fresh_namer(taken: Iterable[str]):
    """``name(base)`` -> ``base``, or ``base`` with ``~`` appended until it is not taken
    (by the machine's states or an earlier call)."""
    used = set(taken)

    def name(base: str) -> str:
        while base in used:
            base += "~"
        used.add(base)
        return base
    return name


def symbol_map(lower: Machine, upper: Machine) -> array:
    """Lowered symbol index -> upper symbol index (-1 where the upper machine lacks it)."""
    return array("i", [upper.symbol_index.get(a, -1) for a in lower.alphabet])
