"""Decoding an RCNN machine-mode run, streamed and vectorised: the grids after every
filter step (Goel, Kakade, Kalai & Zhang, B.2's ``f̄_TM``, one lowered machine step each)
read back as B.1.1 cells (:mod:`.encoding`) into the lowered machine's run, and mapped
back through the chain to the source machine's (:mod:`tm2nn.passes.lowering`).

The grids arrive in step order, a block ``[n, H, W]`` at a time (:meth:`TraceDecoder.feed`),
so a run of any length decodes in the memory of one block plus a few numbers per step.
A cell whose value is, as a float, equal to its value one step before decodes to the
same digits, so only the cells that changed are read: all cells of the first grid, then a
few per step (the head's neighbourhood).  Each block is one set of array operations
over its changed cells; nothing loops over cells or steps in Python.

The answers are those of the per-step decode it replaces (``from_value`` and
``decode`` over every grid of the run, then ``configs_from_grids`` and
``result_from_configurations``: :func:`per_step_run`, kept as the tests' reference and the
benchmark's baseline):

* every grid of the run is checked, after the stop too, and the error reported is the
  one that pipeline raised first: a value off the code (the first in (step, row, column)
  order), else a cell that is no B.1.1 code, else a grid with more than one head, else
  head digits that name no state, else a start grid without a head, else a step that
  changed the tape away from the head;
* the run read back ends at the lowered machine's halt (a halting state, or no rule
  for the symbol read; the halted grid is the last configuration), or before the first
  grid without a head.
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.rcnn.encoding import (
    BAD_CELL,
    HEAD,
    STATE,
    SYMBOL,
    CellCode,
    cell_faults,
    configs_from_grids,
    from_value,
    head_states,
    no_state,
    not_a_value,
    round_values,
    unpack,
)
from tm2nn.backends.rcnn.filter_net import bump_grid
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import RunResult, Trace
from tm2nn.passes.lowering import check_only_head_written, result_from_configurations

#: A decoded cell may be off by at most this many units of the last digit (an upper bound:
#: :func:`value_tolerance` is the one decoding uses).
VALUE_TOL = 0.25
#: cells per block when a whole run's grids are decoded from one array (:func:`decode_grids`)
BLOCK_CELLS = 1 << 22
# the errors, in the order the per-step decode raised them
VALUE, CELL, HEADS, NO_STATE, NO_HEAD, TAPE = range(6)


def value_tolerance(n_digits: int) -> float:
    """How far, in units of the last digit ``h = 3^{-(D-1)}``, a network's cell may be
    from its B.1.1 value and still decode: the filter's own input tolerance ``1.5 g``
    (Goel et al., B.2, as built in :mod:`.filter_net`: within it the next step's hidden
    units are exactly the exact input's), ``1.5 g / h`` in [0.047, 0.094].  The same in
    float32 (D <= 12) and float64 (D <= 30): the dtype is chosen so that the net's error
    (a few ulp) stays inside it; a grid that decodes is one the net goes on with exactly."""
    return min(VALUE_TOL, 1.5 * float(bump_grid(n_digits)) * float(3 ** (n_digits - 1)))


def lowered_halted(g, state: str, head, cells: dict) -> bool:
    """The lowered machine stops here: a halting state, or no rule for the symbol read."""
    return state in g.halting or (state, cells.get(head, g.blank)) not in g.delta


class TraceDecoder:
    """One run's grids, fed in step order, to the source machine's run (module doc)."""

    def __init__(self, chain, code: CellCode, window) -> None:
        g = chain.machine
        self.chain, self.code, self.g = chain, code, g
        self.top, self.left = int(window[0]), int(window[1])
        self.D = code.n_digits
        self.tol = value_tolerance(self.D)
        self.scale = float(3 ** (self.D - 1))
        symbols = [code.value_symbol(v) for v in (-1, 0, 1)]  # by tape digit + 1
        self.sym_index = np.array([g.symbol_index[a] for a in symbols], dtype=np.int64)
        #: halts[q, digit + 1]: state q reading that symbol stops the lowered machine
        self.halts = np.array([[lowered_halted(g, q, 0, {0: a}) for a in symbols] for q in code.states], dtype=bool)
        self.k = 0  # steps fed so far
        self.prev: np.ndarray | None = None  # the last grid fed
        self.heads = 0  # the head count, head cell, its state and tape digit, of the last grid
        self.hr = self.hc = self.hq = -1
        self.hsym = 0
        self.max_heads, self.deviation = 0, 0.0
        self.errors: dict[int, object] = {}
        self.stop: int | None = None  # the last configuration of the run read back
        self.halted = False
        self.final: np.ndarray | None = None  # its grid
        self.start: tuple = (-1, None)  # the start grid's state and head
        self.trace: list[tuple[np.ndarray, ...]] = []  # per block: pos r, c, read, write, state, head r, c

    # -- reading cells -----------------------------------------------------------------------
    def _digits(self, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(packed, within tolerance, digits [m, D])`` of cell values ``vals``."""
        n, ok = round_values(vals, self.D, self.tol)
        n = np.where(ok, n, 0)
        return n, ok, unpack(n, self.D)

    def _changes(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(step, row, col)`` of the cells of ``v`` whose value differs, as a float, from
        the step before (every cell of the start grid).  A block that repeats one grid (the
        fixed point, broadcast over the steps) changes at its first step only."""
        same = v.shape[0] > 1 and v.strides[0] == 0
        head = v[:1] if same else v
        chg = np.empty(head.shape, dtype=bool)
        if self.prev is None:
            chg[0] = True
        else:
            np.not_equal(head[0], self.prev, out=chg[0])
        np.not_equal(head[1:], head[:-1], out=chg[1:])
        return np.nonzero(chg)

    def _first(self, kind: int, what) -> None:
        if kind not in self.errors:
            self.errors[kind] = what

    # -- the stream --------------------------------------------------------------------------
    def feed(self, block) -> None:
        """The grids ``[n, H, W]`` of the next ``n`` steps (a view is read, not kept; a block
        of ``n·H·W`` cells takes that many bytes of scratch)."""
        v = np.asarray(block)
        n = v.shape[0]
        if n == 0:
            return
        k0 = self.k
        s, r, c = self._changes(v)  # the changed cells, step by step, row-major
        new = v[s, r, c]
        nn, ok, dig = self._digits(new)
        if len(new):
            self.deviation = max(self.deviation, float(np.max(np.abs(new.astype(np.float64) * self.scale - nn))))
        if not ok.all():
            i = int(np.argmin(ok))
            self._first(VALUE, not_a_value(new[i], (k0 + s[i], r[i], c[i]), self.D))
        bad = cell_faults(dig) & ok
        if bad.any():
            i = int(np.argmax(bad))
            self._first(CELL, f"decode: grid {k0 + s[i]} cell ({r[i]}, {c[i]}) {BAD_CELL}")
        good = ok & ~bad
        head_new = good & (dig[:, HEAD] == 1)
        # the same cells one step before (the start grid has no step before)
        inner = s > 0
        before = inner | (self.prev is not None)
        old = np.zeros(len(s), dtype=v.dtype)
        old[inner] = v[s[inner] - 1, r[inner], c[inner]]
        if self.prev is not None:
            old[~inner] = self.prev[r[~inner], c[~inner]]
        _n, ok_old, dig_old = self._digits(old)
        head_old = before & ok_old & (dig_old[:, HEAD] == 1)
        counts = self.heads + np.cumsum(np.bincount(s, weights=head_new.astype(np.int64) - head_old, minlength=n)
                                        ).astype(np.int64)
        many = np.flatnonzero(counts > 1)
        if many.size:
            self._first(HEADS, k0 + int(many[0]))
            self.max_heads = max(self.max_heads, int(counts.max()))
        hq_cells = np.full(len(s), -1, dtype=np.int64)
        if head_new.any():
            hq_cells[head_new] = head_states(self.code, dig[head_new, STATE:])
            nameless = head_new & (hq_cells < 0)
            if nameless.any():
                i = int(np.argmax(nameless))
                self._first(NO_STATE, no_state(k0 + s[i], r[i], c[i], dig[i, STATE:]))
        # the head of every step: the new head cell of the step, else the last one
        last = np.full(n, -1, dtype=np.int64)
        np.maximum.at(last, s[head_new], np.flatnonzero(head_new))
        fill = np.maximum.accumulate(np.where(last >= 0, np.arange(n), -1))
        at = np.where(fill >= 0, last[np.maximum(fill, 0)], -1)
        hr, hc, hq = (np.where(at >= 0, x[np.maximum(at, 0)], carry) if len(x) else np.full(n, carry)
                      for x, carry in ((r, self.hr), (c, self.hc), (hq_cells, self.hq)))
        has = counts >= 1
        steps = np.arange(n)
        hsym = np.zeros(n, dtype=np.int64)
        if has.any():
            hsym[has] = self._digits(v[steps[has], hr[has], hc[has]])[2][:, SYMBOL]
        if k0 == 0 and has[0]:
            self.start = (int(hq[0]), (int(hr[0]) + self.top, int(hc[0]) + self.left))
        # where the run read back ends
        if self.stop is None:
            halt = has & self.halts[np.maximum(hq, 0), hsym + 1] & (hq >= 0)
            ends = np.flatnonzero(~has | halt)
            if ends.size:
                i = int(ends[0])
                if halt[i]:
                    self.stop, self.halted = k0 + i, True
                    self.final = v[i].copy()
                elif k0 + i == 0:
                    self._first(NO_HEAD, "the start grid has no head")
                    self.stop = 0
                else:
                    self.stop = k0 + i - 1
                    self.final = (v[i - 1] if i else self.prev).copy()
            self._record(v, k0, s, r, c, dig, dig_old, good, hr, hc, hq, hsym)
        self.prev = v[-1].copy()
        self.heads, self.hr, self.hc, self.hq, self.hsym = int(counts[-1]), int(hr[-1]), int(hc[-1]), int(hq[-1]), \
            int(hsym[-1])
        self.k = k0 + n

    def _record(self, v, k0, s, r, c, dig, dig_old, good, hr, hc, hq, hsym) -> None:
        """The lowered trace of this block's steps ``k >= 1`` up to the stop: the cell
        written (the head of step k − 1), the symbols read and written, the state and head
        after; and the first step that changed the tape elsewhere."""
        n = v.shape[0]
        end = n if self.stop is None else self.stop - k0 + 1
        lo = 1 if k0 == 0 else 0
        if end <= lo:
            return
        phr = np.concatenate([[self.hr], hr[:-1]])[lo:end]
        phc = np.concatenate([[self.hc], hc[:-1]])[lo:end]
        read = np.concatenate([[self.hsym], hsym[:-1]])[lo:end]
        write = self._digits(v[np.arange(lo, end), phr, phc])[2][:, SYMBOL]
        if TAPE not in self.errors:
            moved = good & (s >= lo) & (s < end) & (dig[:, SYMBOL] != dig_old[:, SYMBOL])
            moved &= (r != phr[np.clip(s - lo, 0, end - lo - 1)]) | (c != phc[np.clip(s - lo, 0, end - lo - 1)])
            if moved.any():
                i = int(np.argmax(moved))
                j = int(s[i]) - lo
                cell = (int(r[i]) + self.top, int(c[i]) + self.left)
                blank = self.g.blank
                sym = self.code.value_symbol
                self._first(TAPE, (k0 + int(s[i]), (int(phr[j]) + self.top, int(phc[j]) + self.left),
                                   {cell: sym(int(dig_old[i, SYMBOL]))}, {cell: sym(int(dig[i, SYMBOL]))}, blank))
        self.trace.append((phr + self.top, phc + self.left, self.sym_index[read + 1], self.sym_index[write + 1],
                           hq[lo:end], hr[lo:end] + self.top, hc[lo:end] + self.left))

    # -- the run -----------------------------------------------------------------------------
    def check(self) -> None:
        """Raise the error the per-step decode raised first, if any (module doc)."""
        e = self.errors
        if VALUE in e or CELL in e:
            raise Tm2nnError(e.get(VALUE, e.get(CELL)))
        if HEADS in e:
            raise Tm2nnError(f"decode: grid {e[HEADS]} has {self.max_heads} heads")
        for kind in (NO_STATE, NO_HEAD):
            if kind in e:
                raise Tm2nnError(e[kind])
        if TAPE in e:
            check_only_head_written(*e[TAPE])

    def lowered(self, text: str) -> RunResult:
        """The lowered machine's run read back from the grids fed (all of the run's), with
        its trace; ``text`` is the source input."""
        if self.k == 0:
            raise Tm2nnError("no grid to decode")
        self.check()
        g = self.g
        if self.stop is None:  # a head at every step and no halt: the whole run
            self.stop, self.final = self.k - 1, self.prev
        tr = Trace()
        cols = list(zip(*self.trace)) if self.trace else [[np.zeros(0, dtype=np.int64)]] * 7
        pos_r, pos_c, read, write, state, head_r, head_c = (np.concatenate(x) for x in cols)
        for a, x in ((tr.pos_row, pos_r), (tr.pos, pos_c), (tr.read, read), (tr.write, write), (tr.state, state),
                     (tr.head_row, head_r), (tr.head, head_c)):
            a.frombytes(x.astype(np.int32 if a.typecode == "i" else np.int64).tobytes())
        if self.trace:
            q, head = g.states[int(state[-1])], (int(head_r[-1]), int(head_c[-1]))
        else:  # the start grid is the last configuration
            q, head = g.states[self.start[0]], self.start[1]
        sym = self._digits(self.final.reshape(-1))[2][:, SYMBOL].reshape(self.final.shape)
        rr, cc = np.nonzero(sym)
        cells = {(int(a) + self.top, int(b) + self.left): self.code.value_symbol(int(x))
                 for a, b, x in zip(rr, cc, sym[rr, cc])}
        outcome = g.halting.get(q, "halt") if self.halted else None
        return RunResult(g, self.chain.lower_input(text), self.halted, len(tr), q, outcome, head, cells, tr)

    def result(self, text: str, steps: int) -> RunResult:
        """The source machine's run (with trace), cut at ``steps`` source steps."""
        return self.chain.source_result(self.lowered(text), max_steps=steps)


def per_step_run(chain, code: CellCode, window, grids: np.ndarray, text: str, steps: int) -> RunResult:
    """The reference the streamed decode is checked against, and the benchmark's baseline:
    the per-step decode it replaced (:func:`per_step_lowered`, mapped back through the chain)."""
    return chain.source_result(per_step_lowered(chain, code, window, grids, text), max_steps=steps)


def per_step_lowered(chain, code: CellCode, window, grids: np.ndarray, text: str) -> RunResult:
    """The lowered run of :func:`per_step_run`: every grid's digits at once
    (:func:`~.encoding.from_value`, :func:`~.encoding.decode`), one configuration dict per
    step (:func:`~.encoding.configs_from_grids`), the lowered run built from them
    (:func:`~tm2nn.passes.lowering.result_from_configurations`).  Its memory is about 30 bytes per cell of ``grids`` (the digits and their
    checks), and its time a Python loop over the steps and their cells."""
    g = chain.machine
    digits = unpack(from_value(grids, code.n_digits, tol=value_tolerance(code.n_digits)), code.n_digits)
    configs, halted = [], False
    for k, (state, head, cells, _phase) in enumerate(configs_from_grids(code, digits, window)):
        if state is None:
            if k == 0:
                raise Tm2nnError("the start grid has no head")
            break
        configs.append((k, state, head, cells))
        if lowered_halted(g, state, head, cells):
            halted = True
            break
    return result_from_configurations(g, chain.lower_input(text), configs, halted)


def feed_blocks(dec: TraceDecoder, grids: np.ndarray) -> TraceDecoder:
    """``dec`` fed the grids ``[n, H, W]`` in blocks of about :data:`BLOCK_CELLS` cells."""
    per = max(1, BLOCK_CELLS // max(1, grids.shape[1] * grids.shape[2]))
    for k in range(0, len(grids), per):
        dec.feed(grids[k:k + per])
    return dec


def decode_grids(chain, code: CellCode, window, grids: np.ndarray) -> TraceDecoder:
    """A :class:`TraceDecoder` fed the whole run ``grids`` ``[L+1, H, W]``."""
    return feed_blocks(TraceDecoder(chain, code, window), grids)
