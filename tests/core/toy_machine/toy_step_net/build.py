"""The toy step net (a toy for the protocol test, not a construction from the papers).

One step maps a configuration vector ``x`` (:mod:`.layout`: one-hot head ``h_i``, state
``s_q``, cells ``c_{i,a}`` on a window of ``2T + 1`` cells) to the next one, in two layers:

1. indicators ``I_{i,q,a} = ReLU(h_i + s_q + c_{i,a} - 2)``, one per (cell, state, symbol);
2. an affine map of ``[x, I]`` to the next configuration: for the rule ``(q, a) -> (b, d, q')``
   the indicator ``I_{i,q,a}`` adds 1 to ``h'_{i+d}`` and to ``s'_{q'}``, and moves cell ``i``
   from ``a`` to ``b`` (``c'_{i,b} = c_{i,b} + Σ_{q,a} I_{i,q,a} ([b = write] - [b = a])``);
   a ``(q, a)`` with no rule (halting states included) keeps head, state and cell, which is
   the interpreter's absorbing halted configuration.

Exactness, in two lines: when ``x`` is a valid one-hot configuration (head at ``i*``, state
``q*``, cell ``i`` holding ``a_i``), ``h_i + s_q + c_{i,a}`` is 3 exactly at ``(i*, q*, a_{i*})``
and at most 2 elsewhere, so exactly one indicator is 1 and the others 0; the affine map then
writes the next configuration one-hot, exactly (integers, in any float type).  The head
never leaves the window in T steps (:mod:`.layout`), so a move off its edge (whose indicator
is never 1 on a valid run) simply has no target.

The net is a ``Loop`` of this step, ``T`` trips, scanning: its output ``configs`` is every
configuration ``x_0 .. x_T`` (``[batch, T + 1, width]``); the loop stops early once every
configuration of the batch is a fixed point (``until_fixed``: all halted).
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.protocol import Model
from tm2nn.errors import Tm2nnError
from tm2nn.ir import GridMachine, Machine
from tm2nn.ir.machine import MOVE_DELTA
from tm2nn.limits import check_memory
from tm2nn.nets import Affine, Concat, Loop, Net, Port, ReLU, SparseMatrix

from .layout import Layout

NAME = "toy-step-net"
CITE_INDICATORS = "toy step net (not from the papers): I_{i,q,a} = ReLU(h_i + s_q + c_{i,a} - 2)"
CITE_NEXT = "toy step net (not from the papers): the rule of the one active indicator, as an affine map"
#: bytes a stored weight entry takes while it is built (row, column, value, and the sort)
ENTRY_BYTES = 48


def check_ir(ir) -> None:
    """A line machine only (a grid machine is a ``Machine`` too)."""
    if isinstance(ir, GridMachine):
        raise Tm2nnError(f"the {NAME} backend compiles line machines; {ir.name!r} is a grid machine")


def step_net(lay: Layout) -> Net:
    """One step: indicators, then the affine map to the next configuration (module doc)."""
    m = lay.machine
    n_ind, width = lay.n_indicators, lay.width
    rows, cols = [], []
    nxt: list[tuple[int, int, float]] = [(lay.cell(i, a), lay.cell(i, a), 1.0)  # c' = c + ...
                                         for i in range(lay.cells) for a in range(lay.n_symbols)]
    for i in range(lay.cells):
        for q, state in enumerate(m.states):
            for a, sym in enumerate(m.alphabet):
                j = lay.indicator(i, q, a)
                rows += [j, j, j]
                cols += [lay.head(i), lay.state(q), lay.cell(i, a)]
                col = width + j  # I_{i,q,a} in [x, I]
                rule = m.delta.get((state, sym))
                if rule is None:  # no rule (a halting state, or a missing one): keep the configuration
                    nxt += [(lay.head(i), col, 1.0), (lay.state(q), col, 1.0)]
                    continue
                to = i + MOVE_DELTA[rule.move][1]
                if 0 <= to < lay.cells:  # off the window: never reached in T steps (.layout)
                    nxt.append((lay.head(to), col, 1.0))
                nxt.append((lay.state(m.state_index[rule.next]), col, 1.0))
                b = m.symbol_index[rule.write]
                if b != a:
                    nxt += [(lay.cell(i, b), col, 1.0), (lay.cell(i, a), col, -1.0)]
    w1 = SparseMatrix((n_ind, width), np.array(rows), np.array(cols), np.ones(len(rows)))
    w2 = SparseMatrix.from_entries((width, width + n_ind), nxt)
    return Net("step", (Port("x", lay.space),), (
        Affine("match", ("x",), w1, np.full(n_ind, -2.0), lay.indicator_space, cite=CITE_INDICATORS),
        ReLU("ind", ("match",)),
        Concat("x_ind", ("x", "ind")),
        Affine("next", ("x_ind",), w2, None, lay.space, cite=CITE_NEXT),
    ), ("next",))


def bounds(lay: Layout) -> list[list[str]]:
    """Size rows next to the toy's own formulas (there is no paper)."""
    return [["configuration width", str(lay.width), "(2T+1)(1+|Σ|) + |Q|"],
            ["indicator units per step", str(lay.n_indicators), "(2T+1)·|Q|·|Σ|"],
            ["steps (loop trips, weights shared)", str(lay.steps), "T"]]


def compile(ir: Machine, opts) -> Model:
    """The toy step net of ``ir`` for ``opts.steps`` steps."""
    check_ir(ir)
    lay = Layout(ir, opts.steps)
    entries = 6 * lay.n_indicators + lay.cells * lay.n_symbols
    check_memory(entries * ENTRY_BYTES, f"a toy step net of {lay.n_indicators:,} indicator units", ("steps",))
    net = Net(f"{ir.name}_toy_step_net", (Port("x", lay.space),),
              (Loop("configs", ("x",), body=step_net(lay), trips=lay.steps, scan=True, until_fixed=True),),
              ("configs",))
    enc = {"kind": "toy-config", **lay.to_json(), "start": ir.start}
    out = {"kind": "toy-configs", **lay.to_json(), "halting": dict(ir.halting),
           "no_rule": [[q, a] for q in ir.states for a in ir.alphabet if (q, a) not in ir.delta],
           "missing_rule_counts_step": ir.missing_rule_counts_step}
    return Model(NAME, net, ir, enc, out, bounds(lay),
                 {"steps": lay.steps, "cells": lay.cells, "width": lay.width, "indicators": lay.n_indicators})
