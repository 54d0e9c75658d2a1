"""Reference interpreter for Machine and GridMachine.

This is the ground truth every backend is verified against.  Conventions are the
IR's (see ``tm2nn.ir.machine``): steps count transitions taken including the one
into a halting state; a missing rule halts, and counts a step only for machines
with ``missing_rule_counts_step`` (morphett).

The line-tape loop is a tight integer loop over a ``bytearray`` (about 4·10⁶
steps/s here: BB(5) halts in about 11 s).  Tracing uses a second loop that
records every step, so the fast path pays nothing for it.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Callable

from tm2nn import interrupt
from tm2nn.ir.machine import MOVE_DELTA, GridMachine, Machine, check_input
from tm2nn.limits import check_memory
from tm2nn.options import OptionError

DEFAULT_MAX_STEPS = 10_000_000


#: Bytes a :class:`Trace` keeps per step of a line machine.
TRACE_BYTES_PER_STEP = 28
#: Bytes a non-blank cell of a result takes: its entry in ``cells`` (an int key, a dict
#: slot) and its character in the report's tape (measured: about 80).
CELL_BYTES = 100


@dataclass
class Trace:
    """One entry per step taken: the rule applied and the configuration after it.

    ``state[k]``, ``head[k]`` are after step k+1; ``read[k]``/``write[k]`` are symbol
    indices into the machine's alphabet; ``pos[k]`` is the cell written at step k+1
    (relative to the start cell).  For grid machines heads and positions are
    ``row * GRID_STRIDE + col`` pairs stored separately in ``head_row``/``pos_row``.
    """

    state: array = field(default_factory=lambda: array("i"))
    head: array = field(default_factory=lambda: array("q"))
    pos: array = field(default_factory=lambda: array("q"))
    read: array = field(default_factory=lambda: array("i"))
    write: array = field(default_factory=lambda: array("i"))
    head_row: array = field(default_factory=lambda: array("q"))
    pos_row: array = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.state)


@dataclass
class RunResult:
    """The outcome of a run.  ``cells`` maps position -> symbol for non-blank cells
    (position is an int for line machines, (row, col) for grid machines)."""

    machine: Machine
    input: str
    halted: bool
    steps: int
    state: str
    outcome: str | None
    head: int | tuple[int, int]
    cells: dict
    trace: Trace | None = None

    @property
    def sigma(self) -> int:
        return len(self.cells)

    @property
    def tape(self) -> str:
        """Span from the leftmost to the rightmost non-blank cell (grid: rows joined by '/')."""
        if not self.cells:
            return ""
        blank = self.machine.blank
        if isinstance(self.machine, GridMachine):
            rows = [r for r, _ in self.cells]
            cols = [c for _, c in self.cells]
            return "/".join(
                "".join(self.cells.get((r, c), blank) for c in range(min(cols), max(cols) + 1))
                for r in range(min(rows), max(rows) + 1)
            )
        lo, hi = min(self.cells), max(self.cells)
        return "".join(self.cells.get(i, blank) for i in range(lo, hi + 1))

    @property
    def tape_start(self) -> int | tuple[int, int]:
        """Position of the tape string's first cell relative to the start cell."""
        if isinstance(self.machine, GridMachine):
            if not self.cells:
                return (0, 0)
            return (min(r for r, _ in self.cells), min(c for _, c in self.cells))
        return min(self.cells) if self.cells else 0

    def report(self) -> dict:
        """The ``--json`` run report of ARCHITECTURE.md."""
        head = list(self.head) if isinstance(self.head, tuple) else self.head
        return {
            "halted": self.halted,
            "steps": self.steps,
            "state": self.state,
            "outcome": self.outcome,
            "tape": self.tape,
            "head": head,
            "sigma": self.sigma,
        }

    def symbol_at(self, pos) -> str:
        return self.cells.get(pos, self.machine.blank)


class _Tables:
    """Integer transition tables: index = state * K + symbol."""

    def __init__(self, m: Machine):
        # Live states first, halting states after, so "halted" is one comparison.
        live = [q for q in m.states if q not in m.halting]
        order = live + [q for q in m.states if q in m.halting]
        self.names = order
        self.sidx = {q: i for i, q in enumerate(order)}
        self.n_live = len(live)
        self.K = len(m.alphabet)
        K = self.K
        n = len(order) * K
        self.write = [-1] * n
        self.dcol = [0] * n
        self.drow = [0] * n
        self.next = [0] * n
        for r in m.rules:
            i = self.sidx[r.state] * K + m.symbol_index[r.read]
            self.write[i] = m.symbol_index[r.write]
            self.drow[i], self.dcol[i] = MOVE_DELTA[r.move]
            self.next[i] = self.sidx[r.next]


def run_machine(
    m: Machine,
    input: str = "",
    max_steps: int = DEFAULT_MAX_STEPS,
    trace: bool = False,
    progress: Callable[[int], None] | None = None,
    start: tuple[int, int] | None = None,
) -> RunResult:
    """Run ``m`` on ``input`` (written from the start cell rightwards; for grid
    machines rows are separated by ``/``) for at most ``max_steps`` steps.

    Grid machines only: ``start = (row, col)`` puts the head on that cell of the input
    instead of its first cell (positions in the result and the trace are then relative
    to the input's first cell; the RCNN learner starts on the bottom-right input cell).

    ``progress(steps)`` is called about every 2**20 steps, for progress bars.
    """
    if max_steps < 0:
        raise OptionError(f"{{max_steps}} must be >= 0, got {max_steps}", "max_steps")
    if trace:  # 4 + 8 + 8 + 4 + 4 bytes a step (+16 on a grid), and array's doubling

        per = TRACE_BYTES_PER_STEP + (16 if isinstance(m, GridMachine) else 0)
        check_memory(2 * per * max_steps, f"a trace of up to {max_steps:,} steps ({per} bytes a step)", ("max_steps",))
    if isinstance(m, GridMachine):
        return _run_grid(m, input, max_steps, trace, progress, start or (0, 0))
    if start is not None:
        raise ValueError("start= is for grid machines")
    check_input(m, input)
    t = _Tables(m)
    K, W, D, N, n_live = t.K, t.write, t.dcol, t.next, t.n_live
    blank = m.symbol_index[m.blank]
    counts_missing = m.missing_rule_counts_step

    size = max(1024, 4 * len(input) + 64)
    origin = size // 4
    tape = bytearray([blank]) * size
    for i, ch in enumerate(input):
        tape[origin + i] = m.symbol_index[ch]
    h = origin
    q = t.sidx[m.start]
    steps = 0
    missing = False
    tr = Trace() if trace else None
    chunk = 1 << 20

    while q < n_live and steps < max_steps:
        limit = min(max_steps, steps + chunk)
        if tr is None:
            while steps < limit:
                i = q * K + tape[h]
                w = W[i]
                if w < 0:
                    missing = True
                    break
                tape[h] = w
                h += D[i]
                q = N[i]
                steps += 1
                if q >= n_live:
                    break
                if h < 0 or h >= size:
                    tape, h, origin, size = _grow(tape, h, origin, size, blank)
        else:
            while steps < limit:
                a = tape[h]
                i = q * K + a
                w = W[i]
                if w < 0:
                    missing = True
                    break
                tr.pos.append(h - origin)
                tape[h] = w
                h += D[i]
                q = N[i]
                steps += 1
                tr.state.append(q)
                tr.head.append(h - origin)
                tr.read.append(a)
                tr.write.append(w)
                if q >= n_live:
                    break
                if h < 0 or h >= size:
                    tape, h, origin, size = _grow(tape, h, origin, size, blank)
        if progress is not None:
            progress(steps)
        if missing or interrupt.requested():
            break

    if missing and counts_missing:
        steps += 1
        if tr is not None:  # the counted no-rule step changes nothing
            a = tape[h]
            tr.pos.append(h - origin)
            tr.state.append(q)
            tr.head.append(h - origin)
            tr.read.append(a)
            tr.write.append(a)
    halted = q >= n_live or missing
    state = t.names[q]
    if tr is not None:  # trace states as names-table indices -> machine state indices
        remap = array("i", [m.state_index[n] for n in t.names])
        tr.state = array("i", (remap[s] for s in tr.state))
    written = len(tape) - tape.count(blank)  # the result's cells, checked before they are built
    check_memory(written * CELL_BYTES, f"the result of a run that left {written:,} non-blank cells", ("max_steps",))
    cells = {i - origin: m.alphabet[s] for i, s in enumerate(tape) if s != blank}
    outcome = (m.halting.get(state, "halt")) if halted else None
    return _done(RunResult(m, input, halted, steps, state, outcome, h - origin, cells, tr), max_steps)


def _done(result: RunResult, max_steps: int) -> RunResult:
    """``result``, or :class:`~tm2nn.interrupt.Interrupted` carrying it when Ctrl-C
    stopped the run early (the configuration after ``result.steps`` steps, exact)."""
    if interrupt.requested() and not result.halted and result.steps < max_steps:
        raise interrupt.Interrupted(result.steps, max_steps, partial=result)
    return result


def _grow(tape: bytearray, h: int, origin: int, size: int, blank: int):
    """Double the tape on the side the head fell off."""
    extra = bytearray([blank]) * size
    if h < 0:
        return extra + tape, h + size, origin + size, 2 * size
    return tape + extra, h, origin, 2 * size


def _run_grid(m: GridMachine, input: str, max_steps: int, trace: bool, progress,
              start: tuple[int, int] = (0, 0)) -> RunResult:
    rows = input.split("/") if "/" not in m.symbol_index else [input]
    for r, row in enumerate(rows):
        check_input(m, row, what="input" if len(rows) == 1 else f"input row {r}")
    t = _Tables(m)
    K = t.K
    blank = m.symbol_index[m.blank]
    grid: dict[tuple[int, int], int] = {}
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            s = m.symbol_index[ch]
            if s != blank:
                grid[(r, c)] = s
    hr, hc = int(start[0]), int(start[1])
    q = t.sidx[m.start]
    steps = 0
    missing = False
    tr = Trace() if trace else None
    while q < t.n_live and steps < max_steps:
        a = grid.get((hr, hc), blank)
        i = q * K + a
        w = t.write[i]
        if w < 0:
            missing = True
            break
        if tr is not None:
            tr.pos_row.append(hr)
            tr.pos.append(hc)
        if w == blank:
            grid.pop((hr, hc), None)
        else:
            grid[(hr, hc)] = w
        hr += t.drow[i]
        hc += t.dcol[i]
        q = t.next[i]
        steps += 1
        if tr is not None:
            tr.state.append(m.state_index[t.names[q]])
            tr.head_row.append(hr)
            tr.head.append(hc)
            tr.read.append(a)
            tr.write.append(w)
        if steps % (1 << 16) == 0:
            if progress is not None and steps % (1 << 20) == 0:
                progress(steps)
            if interrupt.requested():
                break
    if missing and m.missing_rule_counts_step:
        steps += 1
        if tr is not None:
            a = grid.get((hr, hc), blank)
            tr.pos_row.append(hr)
            tr.pos.append(hc)
            tr.state.append(m.state_index[t.names[q]])
            tr.head_row.append(hr)
            tr.head.append(hc)
            tr.read.append(a)
            tr.write.append(a)
    halted = q >= t.n_live or missing
    state = t.names[q]
    cells = {p: m.alphabet[s] for p, s in grid.items()}
    outcome = m.halting.get(state, "halt") if halted else None
    return _done(RunResult(m, input, halted, steps, state, outcome, (hr, hc), cells, tr), max_steps)


def configurations(result: RunResult):
    """Yield ``(step, state, head, cells)`` for step 0..steps, replaying the trace.

    ``cells`` is a dict position -> symbol (non-blank only), shared and updated in
    place between yields: copy it if you keep it.  Needs a run made with ``trace=True``.
    """
    m = result.machine
    tr = result.trace
    if tr is None:
        raise ValueError("configurations() needs a run with trace=True")
    grid = isinstance(m, GridMachine)
    blank = m.blank
    cells: dict = {}
    if grid:
        rows = result.input.split("/") if "/" not in m.symbol_index else [result.input]
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                if ch != blank:
                    cells[(r, c)] = ch
        yield 0, m.start, (0, 0), cells
    else:
        for i, ch in enumerate(result.input):
            if ch != blank:
                cells[i] = ch
        yield 0, m.start, 0, cells
    for k in range(len(tr)):
        p = (tr.pos_row[k], tr.pos[k]) if grid else tr.pos[k]
        sym = m.alphabet[tr.write[k]]
        if sym == blank:
            cells.pop(p, None)
        else:
            cells[p] = sym
        head = (tr.head_row[k], tr.head[k]) if grid else tr.head[k]
        yield k + 1, m.states[tr.state[k]], head, cells
