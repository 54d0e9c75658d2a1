"""Step-by-step comparison of a machine's run decoded from a network with the
interpreter's: the first step, field and both values where they differ.

* :func:`first_divergence` — a run decoded into per-step arrays (state, head, symbol under
  the head; the transformer's :class:`tm2nn.backends.transformer.decoding.Decoded`)
  against the interpreter's trace, vectorised over the steps, then the run report;
* :func:`compare_runs` — two :class:`~tm2nn.interp.machine.RunResult` runs with traces,
  configuration by configuration (every non-blank cell), then the run report;
* :data:`EXHAUSTIVE_CELLS` / :data:`EXHAUSTIVE_TAPES` — how far a machine's input space is
  covered exhaustively.
"""

from __future__ import annotations

import numpy as np

from tm2nn.interp import configurations, run_machine
from tm2nn.verify.check import REPORT_FIELDS

#: Exhaustive verification covers every tape up to this many cells (when few enough).
EXHAUSTIVE_CELLS = 8
#: ... and at most this many tapes (each decodes T steps).
EXHAUSTIVE_TAPES = 4096


def first_divergence(m, decoded, text: str, steps: int, run=None) -> tuple[int | None, str, object, object] | None:
    """Compare one decoded run with the interpreter's (``run``, with its trace; run here
    when not given), step by step, then the report.  Returns ``(step, field, expected,
    got)`` for the first difference, or None.  Vectorised over the steps (a run of 10^6
    steps compares in well under a second)."""
    if decoded.bad is not None:
        return decoded.bad[0], "encoding", "one-hot groups", decoded.bad[1]
    if run is None:
        run = run_machine(m, text, steps, trace=True)
    want_q, want_h, want_a = _configuration_arrays(m, run)
    n = run.steps + 1
    got_q = _state_indices(m, decoded)
    got_h = np.asarray(decoded.head, dtype=np.int64)
    got_a = _symbol_indices(m, decoded)
    if len(got_q) < n:  # the taps end before the interpreter's run does
        k = len(got_q)
        return k, "steps", f"a configuration at step {k}", "none"
    # after a halt the decoder must keep emitting the halting configuration
    pad = len(got_q) - n
    want_q = np.concatenate([want_q, np.full(pad, want_q[-1])])
    want_h = np.concatenate([want_h, np.full(pad, want_h[-1])])
    want_a = np.concatenate([want_a, np.full(pad, want_a[-1])])
    bad = np.flatnonzero((want_q != got_q) | (want_h != got_h) | (want_a != got_a))
    if bad.size:
        k = int(bad[0])
        if want_q[k] != got_q[k]:
            return k, "state", m.states[want_q[k]], decoded.state[k]
        if want_h[k] != got_h[k]:
            return k, "head", int(want_h[k]), int(got_h[k])
        return k, "symbol under head", m.alphabet[want_a[k]], decoded.symbol[k]
    want = run.report()
    for f in REPORT_FIELDS:
        if decoded.report.get(f) != want[f]:
            return None, f, want[f], decoded.report.get(f)
    return None


def _configuration_arrays(m, run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The interpreter's configuration after every step 0..steps as arrays: state
    indices, head, symbol under the head (from the trace: the symbol step k + 1 read, and
    the tape at the end)."""
    tr = run.trace
    q = np.concatenate([[m.state_index[m.start]], np.frombuffer(tr.state, dtype=np.int32)]).astype(np.int64)
    h = np.concatenate([[0], np.frombuffer(tr.head, dtype=np.int64)])
    last = m.symbol_index[run.cells.get(run.head, m.blank)]
    a = np.concatenate([np.frombuffer(tr.read, dtype=np.int32), [last]]).astype(np.int64)
    return q, h, a


def _indices(names: list, codes: np.ndarray | None, table: dict) -> np.ndarray:
    """Names as indices into ``table`` (-1 where it lacks one), mapped once per distinct
    ``codes`` value when the decoder gave the names as codes too."""
    if codes is None or not len(names):
        return np.array([table.get(x, -1) for x in names], dtype=np.int64)
    _u, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    return np.array([table.get(names[f], -1) for f in first], dtype=np.int64)[inv.ravel()]


def _state_indices(m, decoded) -> np.ndarray:
    return _indices(decoded.state, decoded.state_idx, m.state_index)


def _symbol_indices(m, decoded) -> np.ndarray:
    return _indices(decoded.symbol, decoded.symbol_idx, m.symbol_index)


def compare_runs(want, got) -> tuple[int | None, str, object, object] | None:
    """Two runs of one machine (:class:`~tm2nn.interp.machine.RunResult` with traces):
    the interpreter's and one decoded from a network.  Compares the configuration
    (state, head, every non-blank cell) after every step, then the run report; returns
    ``(step, field, expected, got)`` for the first difference, or None."""
    mine = configurations(got)
    for k, q, head, cells in configurations(want):
        nxt = next(mine, None)
        if nxt is None:
            return k, "steps", f"a configuration at step {k}", "none"
        _k, q2, head2, cells2 = nxt
        for f, a, b in (("state", q, q2), ("head", head, head2), ("tape", cells, cells2)):
            if a != b:
                if f == "tape":
                    diff = sorted(set(a.items()) ^ set(b.items()), key=repr)[0][0]
                    return k, f"cell {diff}", a.get(diff, want.machine.blank), b.get(diff, want.machine.blank)
                return k, f, a, b
    extra = next(mine, None)
    if extra is not None:
        return extra[0], "steps", "no further step", f"a step into {extra[1]!r}"
    a, b = want.report(), got.report()
    for f in REPORT_FIELDS:
        if a[f] != b.get(f):
            return None, f, a[f], b.get(f)
    return None
