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

from tm2nn.backends.transformer.binary_search import CITE_C6
from tm2nn.backends.transformer.layout import Layout
from tm2nn.backends.transformer.paper_layers import decoder
from tm2nn.nets import Attention


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
        # Σ_k bit_k 2^k, a column at a time (a [T, w_pos] int64 copy cost more than the run at T = 10^6)
        loc = np.full(len(bits), -self.lay.offset, dtype=np.int64)
        for k, w in enumerate(self.weights.tolist()):
            np.add(loc, w, out=loc, where=bits[:, k])
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


def description(enc: dict, net) -> dict:
    """How :class:`TraceDecoder` reads each report field from the net's dimensions, for a
    model's manifest (the codec's ``describe``): every field reads
    the tap groups of the Decode op's output (one row per decoder step, row i = o_i in
    Wei, Chen & Ma's form (C.2), plus the written symbol u_i of Lemma C.1), listed by
    the layout's labels in the order the decoder slices them (``Layout.tap_indices``);
    ``notes`` say which rows are source steps (the stay lowering, :mod:`tm2nn.passes.stay`)
    and where the binary search of Claims C.4–C.6 leaves its result."""
    lay = Layout.from_json(enc["layout"])
    tap = net.outputs[0]

    def labels(*groups: str) -> list[str]:
        return [lay.space.labels[i] for g in groups for i in lay.idx(g)]

    def field(rule: str, *groups: str) -> dict:
        return {"value": tap, "labels": labels(*groups), "rule": rule}

    at = ("at the report row r: the first row in a halting configuration (see 'halted'), else the row of "
          "source step T (notes: rows, lowering)")
    bits = "Σ_k 2^k · [pos2:b<k> > 1/2]"
    fields = {
        "state": field(f"the state whose st dimension exceeds 1/2 (o_i^st = 1(z_i), Wei, Chen & Ma (C.2)), {at}",
                       "st"),
        "symbol": field("the symbol under the head, a_i: the sym1 dimension above 1/2 in row i (o_i^sym1, (C.2)); "
                        "verify compares it at every source step (it is not a run report field)", "sym1"),
        "halted": field("true when a row of source step k <= T (T = encodings.output.source_steps) is a halting "
                        "configuration: its state (st) is in encodings.output.halting, or (state, sym1 symbol) is "
                        "in encodings.output.no_rule (a halting state loops in place: Lemma C.1's S maps it to "
                        "itself); a no-rule halt counted as a step (missing_rule_counts_step) must end by T",
                        "st", "sym1"),
        "steps": field("the source step k of the report row r: the rows 1..r whose state is not an auxiliary "
                       "one (notes: lowering), plus 1 for a no-rule halt when missing_rule_counts_step; at most T",
                       "st"),
        "outcome": field("encodings.output.halting[state] when halted (accept, reject or halt), else null", "st"),
        "head": field(f"{bits} - encodings.output.layout.offset {at} (o_i^pos2 = Bin(l_i), (C.2); cell c is "
                      "stored at location c + offset, our two-way tape)", "pos2"),
        "tape": field(f"the input (cell c = input character c), then for i = 1..r in order: row i's sym2 "
                      "symbol (u_i, what decoder step i wrote, Lemma C.1) written at the cell row i-1's pos2 "
                      f"gives ({bits} - offset, the head before step i); the last write to a cell wins; the span "
                      "from the leftmost to the rightmost non-blank cell", "sym2", "pos2"),
        "sigma": field("the number of non-blank cells of the tape above", "sym2", "pos2"),
    }
    body = decoder(net)
    c6 = next((op.name for op in body.body.nodes if isinstance(op, Attention) and op.cite == CITE_C6), None)
    notes = {
        "rows": f"{tap!r} is [batch, T'+1, tap width]: row 0 is the prologue's o_0 (the start configuration; "
                f"its sym2 is not read), row i >= 1 is decoder step i ({body.name}/body/{body.body.outputs[1]}); "
                "each group is read as one-hot at threshold 1/2, and a row where one is not is malformed "
                "(verify reports its step)",
        "lowering": "the decoder runs the stay-free machine of tm2nn.passes.stay (App. C's head moves every "
                    "step): a source stay move (q, a) -> (b, S, q') takes two decoder steps, right into the "
                    "auxiliary state q'~S, then left into q'.  Auxiliary states are st labels too "
                    "(encodings.output.lowering.aux lists [aux, target] pairs).  Row 0 is source step 0, and "
                    "source step k is the k-th row >= 1 whose state is not auxiliary; so T' = 2T decoder steps "
                    "when there are auxiliary states, else T, and state, steps, head and tape are the source "
                    "machine's",
    }
    if c6 is not None:
        notes["binary_search"] = (
            f"not read by the report, but there to inspect: the output of {body.name}/body/{c6} (Wei, Chen & "
            "Ma, Claim C.6, the last attention of the binary search of Claims C.4-C.6) at decoder step i holds "
            "scr3 = Bin(i'), i' the last step t <= i that wrote the cell the head is on after step i (Lemma C.3), "
            "scr1 = 1(u_{i'}) (all 0 when i' = 0), scr4:1 = 1(i' > 0), pos3 = Bin(l_i + offset), pos1 = Bin(i)")
    if enc.get("cls_column") is not None:
        notes["cls"] = ("the last tap column (label cls) is θ_clsᵀ o_i (proof of Theorem 4.1): +1 accept, -1 "
                        "reject, 0 otherwise; its last row is the paper's readout")
    return {"fields": fields, "notes": notes}
