"""Step-by-step verification of a compiled machine (the transformer backend).

The model's taps are decoded (:mod:`tm2nn.backends.transformer.decoding`) into the
configuration after every source step 0..T — state, head position and the symbol
under the head — and compared with the interpreter's trace, step by step; then the
final run report field by field.  The first divergence names the input, the step, the
field and both values.  Runs in torch and, unless told not to, in onnxruntime.
"""

from __future__ import annotations

import numpy as np

from tm2nn.backends.base import Compiled
from tm2nn.verify.check import REPORT_FIELDS, Checker, InputSpace

#: Exhaustive verification covers every tape up to this many cells (when few enough).
EXHAUSTIVE_CELLS = 8
#: ... and at most this many tapes (each decodes T steps).
EXHAUSTIVE_TAPES = 4096
BATCH = 512


def encode_tokens(enc: dict, texts: list[str]) -> np.ndarray:
    """Input strings -> ``[n, L]`` int64 token ids, padded on the right with the blank
    (a blank cell is what the tape holds there anyway)."""
    from tm2nn.errors import Tm2nnError

    index = {a: i for i, a in enumerate(enc["alphabet"])}
    blank = index[enc["blank"]]
    width = max([1, *(len(t) for t in texts)])
    out = np.full((len(texts), width), blank, dtype=np.int64)
    for r, t in enumerate(texts):
        for c, ch in enumerate(t):
            if ch not in index:
                raise Tm2nnError(f"symbol {ch!r} is not in the alphabet "
                                 f"({' '.join(repr(a) for a in enc['alphabet'])})",
                                 file="input", line=1, col=c + 1, snippet=t)
            out[r, c] = index[ch]
    return out


def torch_runner(net_or_module, progress=None):
    """``tokens [n, L] -> taps [n, T+1, tap_w]`` with the torch module (float32, no_grad)."""
    import torch

    from tm2nn.emit.torch_emit import loop_progress, to_torch
    from tm2nn.emit.torch_net import NetModule

    mod = net_or_module if isinstance(net_or_module, NetModule) else to_torch(net_or_module)

    def run(tokens: np.ndarray) -> np.ndarray:
        outs = []
        threads = torch.get_num_threads()
        # A decode step is a chain of tiny ops: extra intra-op threads only add
        # synchronisation (and oversubscribe a shared machine).
        torch.set_num_threads(1)
        try:
            with torch.no_grad(), loop_progress(mod, progress):
                for s in range(0, tokens.shape[0], BATCH):
                    outs.append(mod(torch.from_numpy(tokens[s:s + BATCH])).numpy())
        finally:
            torch.set_num_threads(threads)
        return np.concatenate(outs)
    return run


def first_divergence(m, decoded, text: str, steps: int, run=None) -> tuple[int | None, str, object, object] | None:
    """Compare one decoded run with the interpreter's (``run``, with its trace; run here
    when not given), step by step, then the report.  Returns ``(step, field, expected,
    got)`` for the first difference, or None.  Vectorised over the steps (a run of 10^6
    steps compares in well under a second)."""
    from tm2nn.interp import run_machine

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
    from tm2nn.interp import configurations

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


class TraceChecker(Checker):
    """The transformer: every source step's state, head and symbol under the head,
    decoded from the taps, against the interpreter's trace; then the run report.  A model
    with the θ_cls readout (``output_encoding["cls_column"]``, Wei, Chen & Ma's proof of
    Theorem 4.1) also has its last step's ``cls`` column compared with
    :func:`expected_cls`; its deviation is from {0, 1} on the tap groups and from
    {−1, 0, 1} on ``cls``."""

    compares = "state, head and the symbol under the head after every step, then the run report"

    def __init__(self, compiled) -> None:
        from tm2nn.backends.transformer.decoding import TraceDecoder

        super().__init__(compiled)
        self.steps = int(compiled.output_encoding["source_steps"])
        self.decoder = TraceDecoder(compiled.output_encoding)
        c = compiled.output_encoding.get("cls_column")
        self.column = None if c is None else int(c)
        if self.column is not None:
            self.compares += ", then cls = θ_clsᵀ o_T' (+1 accept, -1 reject, 0 otherwise)"

    def space(self) -> InputSpace:
        return InputSpace(self.compiled.source.alphabet, 0, min(EXHAUSTIVE_CELLS, self.steps + 1), EXHAUSTIVE_TAPES)

    def batch(self) -> int:
        return BATCH

    def prepare(self, texts: list[str]) -> list:
        from tm2nn.interp import run_machine

        runs = [run_machine(self.compiled.source, t, self.steps, trace=True) for t in texts]
        if self.column is None:
            return [(run, None) for run in runs]
        return [(run, expected_cls(self.compiled, t)) for run, t in zip(runs, texts)]

    def check(self, engine: str, texts: list[str], prepared):
        # the index engine stops once every input has decoded its T source steps (a machine
        # with stay moves has up to 2T decoder steps; the ones after source step T decode to
        # nothing), unless θ_cls is checked: it reads the last decoder step
        c = self.column
        early = engine == "index" and c is None
        taps = run_taps(self.compiled, texts, engine, horizon=self.decoder.checked_horizon if early else None)
        if isinstance(taps, list):  # the index engine's per-input taps: exact int8, -1/0/1 checked as they ran
            groups = [t if c is None else np.delete(t, c, axis=1) for t in taps]
            dev = float(any(np.any((g != 0) & (g != 1)) for g in groups))
        else:
            groups = taps if c is None else np.delete(taps, c, axis=2)
            dev = float(np.max(np.minimum(np.abs(groups), np.abs(groups - 1)), initial=0.0))
        if c is not None:
            got = np.array([t[-1, c] for t in taps], dtype=np.float64)
            dev = max(dev, float(np.max(np.abs(got - np.clip(np.rint(got), -1, 1)), initial=0.0)))
        m = self.compiled.source
        out = []
        for b, (text, (run, want)) in enumerate(zip(texts, prepared)):
            d = first_divergence(m, self.decoder.decode(taps[b], text), text, self.steps, run)
            if d is None and c is not None and abs(float(taps[b][-1, c]) - want) >= 0.5:
                d = (None, "cls (θ_clsᵀ o_T')", want, float(taps[b][-1, c]))
            out.append(d)
        return out, dev, {}


def expected_cls(compiled, text: str) -> float:
    """What θ_clsᵀ o_{T'} must be on ``text``: θ_cls at the state the interpreter's run of
    the lowered (stay-free) machine is in after at most T' decoder steps (docs/transformer.md,
    "The θ_cls readout")."""
    from tm2nn.backends.transformer.cls import OUTCOME_VALUE
    from tm2nn.interp import run_machine
    from tm2nn.passes.stay import remove_stays

    enc = compiled.output_encoding
    low = remove_stays(compiled.source).machine
    run = run_machine(low, text, int(enc["layout"]["steps"]))
    return float(OUTCOME_VALUE.get(dict(enc["halting"]).get(run.report()["state"]), 0.0))


def run_taps(compiled: Compiled, texts: list[str], engine: str, progress=None, horizon=None):
    """``[n, T+1, tap_w]`` taps of a compiled transformer on ``texts`` (torch,
    onnxruntime or the index engine).  ``horizon(n_inputs)``, for the index engine only,
    makes the ``stop(taps, n)`` that may end its decode once the taps decide every report
    (:class:`tm2nn.backends.transformer.decoding.Horizon`); the taps are then a list of
    per-input arrays of the steps run."""
    tokens = compiled.encode(texts)
    if engine == "torch":
        return torch_runner(compiled.module(), progress)(tokens)
    if engine == "index":
        return index_taps(compiled, tokens, progress, horizon)
    y = compiled.runner(engine)(tokens, batch_size=BATCH)
    return y[0] if isinstance(y, tuple) else y


def index_taps(compiled: Compiled, tokens: np.ndarray, progress=None, horizon=None):
    """The index engine (:mod:`tm2nn.engines.index_engine`) on ``tokens``, in batches that
    fit the memory limit (each input's history index and taps are counted first)."""
    from tm2nn.engines.index_engine import IndexEngine
    from tm2nn.limits import memory_limit

    eng = IndexEngine.for_net(compiled.net)
    per = eng.bytes_per_input(min(tokens.shape[1], eng.prog.embed.max_len))
    size = int(max(1, min(BATCH, memory_limit() // max(1, 2 * per))))
    total = tokens.shape[0] * eng.steps
    out = []
    for s in range(0, tokens.shape[0], size):
        part = tokens[s:s + size]
        report = None if progress is None else \
            (lambda done, steps, s=s, n=part.shape[0]: progress(s * eng.steps + done * n, total))
        run = eng.run(part, progress=report, stop=None if horizon is None else horizon(part.shape[0]))
        out += list(run.taps) if horizon is not None else [run.taps]
    return out if horizon is not None else np.concatenate(out)
