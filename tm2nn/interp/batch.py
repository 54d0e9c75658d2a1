"""Batched machine runner: many inputs of one line machine, stepped together in numpy.

Each step is a handful of vectorised gathers over the batch, so thousands of
inputs cost little more than one.  Results are the same :class:`RunResult`
objects the scalar interpreter returns (tests check the two agree).
"""

from __future__ import annotations

import numpy as np

from tm2nn.interp.machine import DEFAULT_MAX_STEPS, RunResult, _Tables, run_machine
from tm2nn.ir.machine import GridMachine, Machine, check_input
from tm2nn.options import OptionError


def run_batch(m: Machine, inputs: list[str], max_steps: int = DEFAULT_MAX_STEPS) -> list[RunResult]:
    """Run ``m`` on every input; equivalent to ``[run_machine(m, x, max_steps) for x in inputs]``."""
    if isinstance(m, GridMachine):
        return [run_machine(m, x, max_steps) for x in inputs]
    if max_steps < 0:
        raise OptionError(f"{{max_steps}} must be >= 0, got {max_steps}", "max_steps")
    for x in inputs:
        check_input(m, x)
    B = len(inputs)
    if B == 0:
        return []
    t = _Tables(m)
    K = t.K
    W = np.array(t.write, dtype=np.int64)
    D = np.array(t.dcol, dtype=np.int64)
    N = np.array(t.next, dtype=np.int64)
    blank = m.symbol_index[m.blank]

    longest = max(len(x) for x in inputs)
    margin = 64
    width = longest + 2 * margin
    tape = np.full((B, width), blank, dtype=np.int64)
    for b, x in enumerate(inputs):
        if x:
            tape[b, margin : margin + len(x)] = [m.symbol_index[c] for c in x]
    origin = margin
    head = np.full(B, origin, dtype=np.int64)
    q = np.full(B, t.sidx[m.start], dtype=np.int64)
    steps = np.zeros(B, dtype=np.int64)
    missing = np.zeros(B, dtype=bool)
    active = q < t.n_live
    rows = np.arange(B)

    for _ in range(max_steps):
        if not active.any():
            break
        idx = q * K + tape[rows, head]
        w = W[idx]
        miss = active & (w < 0)
        missing |= miss
        go = active & ~miss
        tape[rows[go], head[go]] = w[go]
        head = np.where(go, head + D[idx], head)
        q = np.where(go, N[idx], q)
        steps += go
        active = go & (q < t.n_live)
        lo, hi = int(head.min()), int(head.max())
        if lo < 1 or hi >= width - 1:  # grow both sides
            pad = width
            tape = np.pad(tape, ((0, 0), (pad, pad)), constant_values=blank)
            head += pad
            origin += pad
            width += 2 * pad

    if m.missing_rule_counts_step:
        steps += missing
    out = []
    for b, x in enumerate(inputs):
        halted = bool(q[b] >= t.n_live or missing[b])
        state = t.names[int(q[b])]
        nz = np.nonzero(tape[b] != blank)[0]
        cells = {int(i) - origin: m.alphabet[int(tape[b, i])] for i in nz}
        outcome = m.halting.get(state, "halt") if halted else None
        out.append(RunResult(m, x, halted, int(steps[b]), state, outcome, int(head[b]) - origin, cells))
    return out
