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
    first malformed tap, if any."""

    state: list[str]
    head: np.ndarray
    symbol: list[str]
    report: dict
    cells: dict
    bad: tuple[int, str] | None = None


def _one_hot(block: np.ndarray, allow_zero: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(argmax, valid) per row of a [n, k] block thresholded at 1/2."""
    on = block > 0.5
    count = on.sum(1)
    valid = (count == 1) | (allow_zero & (count == 0))
    return np.argmax(block, axis=1), valid


class TraceDecoder:
    """Built once per encoding; :meth:`decode` turns one ``[T+1, tap_w]`` tap array and
    the input string into a :class:`Decoded`."""

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

    def halted_config(self, q: str, a: str) -> bool:
        return q in self.halting or (q, a) in self.no_rule

    def _fields(self, taps: np.ndarray):
        """Per decoder step: state names, head locations, written and read symbol
        indices, validity; the first malformed step; the decoder steps that end a source
        step (not in an auxiliary state), cut at the source bound."""
        ti = self.lay.tap_indices
        taps = np.asarray(taps, dtype=np.float64)
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
        names = [self.states[s] for s in st]
        # Source steps: the lowered steps that do not end in an auxiliary state.
        keep = [0] + [i for i in range(1, len(names)) if names[i] not in self.aux]
        return names, loc, wr, sym, ok, bad, keep[: self.source_steps + 1]

    def _write(self, cells: dict, loc, wr, i: int) -> None:
        """Apply decoder step ``i``'s write (at the head location before the step)."""
        p = int(loc[i - 1])
        a = self.alphabet[int(wr[i])]
        if a == self.blank:
            cells.pop(p, None)
        else:
            cells[p] = a

    def decode(self, taps: np.ndarray, input: str) -> Decoded:
        names, loc, wr, sym, ok, bad, keep = self._fields(taps)
        # The tape after the last kept lowered step: input overlaid with the writes.
        cells = {k: ch for k, ch in enumerate(input) if ch != self.blank}
        for i in range(1, keep[-1] + 1):
            if not ok[i]:
                break
            self._write(cells, loc, wr, i)
        state = [names[i] for i in keep]
        head = loc[keep]
        symbol = [self.alphabet[int(sym[i])] for i in keep]
        report = self._report(state, head, symbol, cells)
        return Decoded(state, head, symbol, report, cells, bad)

    def configurations(self, taps: np.ndarray, input: str) -> list[tuple[str, int, dict]]:
        """``(state, head, non-blank cells)`` after every source step the taps hold (up to
        the first malformed step), replaying the recorded writes: the whole tape at every
        step, for pictures (:mod:`tm2nn.viz`)."""
        names, loc, wr, _sym, ok, _bad, keep = self._fields(taps)
        cells = {k: ch for k, ch in enumerate(input) if ch != self.blank}
        out, i = [], 0
        for k in keep:
            while i < k:
                i += 1
                if not ok[i]:
                    return out
                self._write(cells, loc, wr, i)
            out.append((names[k], int(loc[k]), dict(cells)))
        return out

    def _report(self, state, head, symbol, cells) -> dict:
        halt_at = next((k for k in range(len(state)) if self.halted_config(state[k], symbol[k])), None)
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
