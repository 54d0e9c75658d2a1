"""Decode the transformer's per-step taps into configurations and run reports.

Everything here works from the output encoding alone (a JSON dict in the model's
metadata), so ``tm2nn eval model.onnx`` needs no source file.  A tap is
``(st, sym1, pos2)`` of o_i plus ``sym2``, the symbol step i wrote at l_{i-1}; see
:mod:`tm2nn.backends.transformer.layout`.

The decoder simulates the stay-free lowered machine (:mod:`tm2nn.passes.stay`); a
lowered step that ends in an auxiliary state is half of a source stay move, so the
source configuration after source step k is the lowered one at the k-th step that
does not end in an auxiliary state.  Reports are the source machine's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.backends.transformer.layout import Layout


class Malformed(ValueError):
    """A tap that is not a valid encoding (a group that is not one-hot)."""


@dataclass
class Decoded:
    """One input's decoded run, in source steps 0..K (K = the compiled source bound).

    ``state[k]`` (a state name), ``head[k]`` (relative to the start cell) and
    ``symbol[k]`` (under the head) are the configuration after source step k;
    ``report`` is ARCHITECTURE.md's run report; ``bad`` is ``(step, message)`` for the
    first malformed tap, if any.  ``state_idx`` / ``symbol_idx`` are the same states and
    symbols as indices into the layout's states and alphabet (for vectorised checks)."""

    state: list[str]
    head: np.ndarray
    symbol: list[str]
    report: dict
    cells: dict
    bad: tuple[int, str] | None = None
    state_idx: np.ndarray | None = None
    symbol_idx: np.ndarray | None = None


def _one_hot(block: np.ndarray, allow_zero: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(argmax, valid) per row of a [n, k] block thresholded at 1/2."""
    on = block > 0.5
    count = on.sum(1)
    valid = (count == 1) | (allow_zero & (count == 0))
    return np.argmax(block, axis=1), valid


class TraceDecoder:
    """Built once per encoding; :meth:`decode` turns one ``[T+1, tap_w]`` tap array (any
    real dtype, or the index engine's exact ``int8`` values) and the input string into a
    :class:`Decoded`."""

    def __init__(self, enc: dict) -> None:
        self.lay = Layout.from_json(enc["layout"])
        self.states = self.lay.states
        self.alphabet = self.lay.alphabet
        self.blank = self.lay.blank
        self.aux = {a for a, _t in enc.get("lowering", {}).get("aux", [])}
        self.halting = dict(enc["halting"])
        self.no_rule = {(q, a) for q, a in enc["no_rule"]}
        self.counts_missing = bool(enc.get("missing_rule_counts_step", False))
        self.source_steps = int(enc["source_steps"])
        self.weights = np.array([1 << k for k in self.lay.bits_msb_first], dtype=np.int64)
        self.is_aux = np.array([q in self.aux for q in self.states], dtype=bool)
        #: halted[state, symbol]: a halting state, or a pair with no rule
        self.halted = np.array([[self.halted_config(q, a) for a in self.alphabet] for q in self.states], dtype=bool)

    def halted_config(self, q: str, a: str) -> bool:
        return q in self.halting or (q, a) in self.no_rule

    def _fields(self, taps: np.ndarray):
        """Per decoder step: state indices, head locations, written and read symbol
        indices, validity; the first malformed step; the decoder steps that end a source
        step (not in an auxiliary state), cut at the source bound."""
        ti = self.lay.tap_indices
        taps = np.asarray(taps)
        st, ok_st = _one_hot(taps[:, ti["st"]])
        sym, ok_sym = _one_hot(taps[:, ti["sym1"]])
        wr, ok_wr = _one_hot(taps[:, ti["sym2"]], allow_zero=True)
        bits = taps[:, ti["pos2"]] > 0.5
        loc = bits.astype(np.int64) @ self.weights - self.lay.offset
        ok = ok_st & ok_sym & ok_wr
        ok[1:] &= (taps[1:, ti["sym2"]] > 0.5).sum(1) == 1  # every real step writes one symbol
        bad = None
        if not ok.all():
            i = int(np.argmin(ok))
            bad = (i, "a tap group is not one-hot at decoder step %d" % i)
        # Source steps: the lowered steps that do not end in an auxiliary state.
        keep = np.flatnonzero(~self.is_aux[st])
        keep = np.concatenate([[0], keep[keep > 0]])[: self.source_steps + 1]
        return st, loc, wr, sym, ok, bad, keep

    def _write(self, cells: dict, loc, wr, i: int) -> None:
        """Apply decoder step ``i``'s write (at the head location before the step)."""
        p = int(loc[i - 1])
        a = self.alphabet[int(wr[i])]
        if a == self.blank:
            cells.pop(p, None)
        else:
            cells[p] = a

    def _tape(self, input: str, loc, wr, ok, last: int) -> dict:
        """The non-blank cells after decoder step ``last``: the input overlaid with the
        writes of steps 1..last (up to the first malformed step), the last write to a cell
        winning."""
        cells = {k: ch for k, ch in enumerate(input) if ch != self.blank}
        bad = np.flatnonzero(~ok[1:last + 1])
        if bad.size:
            last = int(bad[0])
        if last < 1:
            return cells
        pos, sym = loc[:last][::-1], wr[1:last + 1][::-1]   # latest write first
        cell, first = np.unique(pos, return_index=True)
        for p, a in zip(cell.tolist(), sym[first].tolist()):
            if self.alphabet[a] == self.blank:
                cells.pop(p, None)
            else:
                cells[p] = self.alphabet[a]
        return cells

    def decode(self, taps: np.ndarray, input: str) -> Decoded:
        """The run the taps describe.  The report's tape is the tape at the halting step
        (or after the last source step): a halted machine's later steps write back what
        they read, and a run's report ends where it halts."""
        st, loc, wr, sym, ok, bad, keep = self._fields(taps)
        halt = np.flatnonzero(self.halted[st[keep], sym[keep]])
        halt_at = int(halt[0]) if halt.size else None
        cells = self._tape(input, loc, wr, ok, int(keep[halt_at if halt_at is not None else -1]))
        names = [self.states[i] for i in st[keep]]
        head = loc[keep]
        symbol = [self.alphabet[i] for i in sym[keep]]
        report = self._report(names, head, symbol, cells, halt_at)
        return Decoded(names, head, symbol, report, cells, bad, st[keep], sym[keep])

    def configurations(self, taps: np.ndarray, input: str) -> list[tuple[str, int, dict]]:
        """``(state, head, non-blank cells)`` after every source step the taps hold (up to
        the first malformed step), replaying the recorded writes: the whole tape at every
        step, for pictures (:mod:`tm2nn.viz`)."""
        st, loc, wr, _sym, ok, _bad, keep = self._fields(taps)
        cells = {k: ch for k, ch in enumerate(input) if ch != self.blank}
        out, i = [], 0
        for k in keep.tolist():
            while i < k:
                i += 1
                if not ok[i]:
                    return out
                self._write(cells, loc, wr, i)
            out.append((self.states[st[k]], int(loc[k]), dict(cells)))
        return out

    def _report(self, state, head, symbol, cells, halt_at: int | None) -> dict:
        if halt_at is None:
            halted, steps, k = False, len(state) - 1, len(state) - 1
        else:
            k = halt_at
            missing = state[k] not in self.halting
            steps = k + 1 if (missing and self.counts_missing) else k
            halted = steps <= self.source_steps
            if not halted:  # the counted no-rule step falls past the bound
                steps = self.source_steps
        q = state[k]
        if cells:
            lo, hi = min(cells), max(cells)
            tape = "".join(cells.get(i, self.blank) for i in range(lo, hi + 1))
        else:
            tape = ""
        return {"halted": bool(halted), "steps": int(steps), "state": q,
                "outcome": (self.halting.get(q, "halt") if halted else None),
                "tape": tape, "head": int(head[k]), "sigma": len(cells)}

    def horizon(self, n_inputs: int) -> "Horizon":
        """A stop for ``run``: T source steps decoded, or a halt (:class:`Horizon`)."""
        return Horizon(self, n_inputs)

    def checked_horizon(self, n_inputs: int) -> "Horizon":
        """A stop for ``verify``: T source steps decoded (the steps after a halt are
        checked too)."""
        return Horizon(self, n_inputs, halts=False)


class Horizon:
    """``stop(taps, n)`` for an engine that can end a decode early (the index engine):
    True once the taps of steps 0..n decide every input's run report, i.e. each input has
    decoded its T source steps or (``halts``) reached a halting configuration
    (:meth:`TraceDecoder.decode` reads nothing after that; a machine with stay moves has
    up to 2T decoder steps, and the ones after source step T decode to nothing).
    Incremental: each call reads only the rows it has not seen."""

    def __init__(self, dec: TraceDecoder, n_inputs: int, halts: bool = True) -> None:
        self.dec = dec
        self.halts = halts
        self.seen = -1
        self.kept = np.zeros(n_inputs, dtype=np.int64)
        self.done = np.zeros(n_inputs, dtype=bool)

    def __call__(self, taps: np.ndarray, n: int) -> bool:
        dec, ti = self.dec, self.dec.lay.tap_indices
        rows = np.asarray(taps)[:, self.seen + 1:n + 1]
        st = np.argmax(rows[:, :, ti["st"]], axis=2)
        sym = np.argmax(rows[:, :, ti["sym1"]], axis=2)
        kept = ~dec.is_aux[st]
        if self.seen < 0:
            kept[:, 0] = True  # step 0 is source step 0
        count = self.kept[:, None] + np.cumsum(kept, axis=1)       # kept steps so far, this one included
        within = count <= dec.source_steps + 1
        self.done |= count[:, -1] >= dec.source_steps + 1
        if self.halts:
            self.done |= (dec.halted[st, sym] & kept & within).any(1)
        self.kept = count[:, -1]
        self.seen = n
        return bool(self.done.all())
