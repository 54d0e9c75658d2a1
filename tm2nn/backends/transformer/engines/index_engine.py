"""The index engine (``--engine index``): a compiled transformer's decoder for long runs.

It evaluates the network the transformer backend builds (Wei, Chen & Ma §4.1 / App. C),
with the same weights, the same hard-max attention with ties averaged and the same round
corrections, in float64.  Two things make it fast, and neither changes the function
(docs/transformer.md, "The index engine"):

* every op of a decoder step runs in one numba kernel over a flat program of the
  network's ops (:mod:`.decode_program`, :mod:`.decode_kernel`); the kernel runs many
  steps per call, so a step costs no Python dispatch;
* each hard-max attention is a branch-and-bound lookup in a crit-bit tree of the keys
  (:mod:`.hardmax_index`) instead of a scan over every past step.

Outputs are the taps as ``int8`` (every tap value of the construction is exactly 0 or 1
in float64, θ_cls's -1, 0 or 1, and the kernel checks it).  Memory per input is the history index, about
``(24 + 20 + 8 nv) · T`` bytes per index (keys bit-packed in one ``uint64``), plus ``T ·
tap_w`` bytes of taps: estimated and refused up front when it does not fit.  Inputs of a
batch advance in lockstep, a chunk of steps at a time, so progress, Ctrl-C and an early
stop see them all at the same step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tm2nn import interrupt
from tm2nn.backends.transformer.engines import decode_kernel as K
from tm2nn.backends.transformer.engines.decode_program import (
    MEMORY,
    DecodeProgram,
    build_program,
    imeta_for,
)
from tm2nn.backends.transformer.engines.hardmax_index import MAX_KEY_BITS, STACK
from tm2nn.engines import EngineRefused
from tm2nn.limits import check_memory
from tm2nn.nets.positions import BinaryPositions

#: bytes per index item: leaf key (8), count (4), crit-bit node: bit, 2 children, count,
#: representative (5 × 4)
ITEM_BYTES = 8 + 4 + 5 * 4
#: a chunk of decoder steps per kernel call aims at about this many seconds
CHUNK_SECONDS = 0.25


@dataclass
class Run:
    """What :meth:`IndexEngine.run` returns: ``taps`` ``[B, n + 1, tap_w]`` int8 (steps
    0..n, n = the steps run), and with ``probe`` the attention probe ``[B, n, n_attn, 4]``
    (per step and op: the items' top score + b_k·q, the null's score, the items at the
    top, the null's weight), with ``dump`` every step's workspace ``[B, n, ws]``."""

    taps: np.ndarray
    steps: int
    probes: np.ndarray | None = None
    dumps: np.ndarray | None = None


class _Input:
    """One input's state: workspace, index pools and the per-query scratch."""

    def __init__(self, prog: DecodeProgram, memory_length: int, steps: int) -> None:
        self.imeta, sizes = imeta_for(prog, memory_length, steps)
        self.istate = np.zeros((len(prog.indexes), 3), dtype=np.uint64)
        n, m = sizes["leaves"], sizes["nodes"]
        # leaves: key, count, value sums; nodes: crit bit, children, count, value sums, a leaf
        self.pools = (np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.int32), np.zeros(sizes["vs"], dtype=np.int32),
                      np.zeros(m, dtype=np.uint32), np.zeros(m, dtype=np.uint32), np.zeros(m, dtype=np.uint32),
                      np.zeros(m, dtype=np.int32), np.zeros(sizes["vsn"], dtype=np.int32),
                      np.zeros(m, dtype=np.uint32))
        self.ws = np.zeros(prog.ws_size, dtype=np.float64)
        dk = int(prog.ameta[:, K.A_DK].max()) if len(prog.ameta) else 1
        nv = max([1, *(len(ix.val_cols) for ix in prog.indexes)])
        self.scratch = (np.zeros(dk), np.zeros(MAX_KEY_BITS + 1), np.zeros(MAX_KEY_BITS + 1),
                        np.zeros(STACK, dtype=np.uint64), np.zeros(STACK), np.zeros(STACK, dtype=np.uint64),
                        np.zeros(nv, dtype=np.int64), np.zeros(nv, dtype=np.int64))
        self.vbits = self.scratch[-1]  # an item's value bits, as it is inserted
        self.err_i = np.zeros(4, dtype=np.int64)
        self.err_f = np.zeros(1)


class IndexEngine:
    """Built once per compiled network (:meth:`for_net` caches it on the net)."""

    name = "index"

    def __init__(self, net, separable: bool = True) -> None:
        self.prog = build_program(net, separable=separable)
        p = self.prog
        self.tap_w = p.body.tap_w
        self.geo = np.array([p.body.x_off, p.body.o_off, p.body.tap_off, p.body.tap_w, p.body.w, p.pos_kind,
                             p.pos_offset, len(p.pos_cols)], dtype=np.uint64)

    @classmethod
    def for_net(cls, net) -> "IndexEngine":
        eng = getattr(net, "_index_engine", None)
        if eng is None:
            eng = cls(net)
            object.__setattr__(net, "_index_engine", eng)
        return eng

    @property
    def steps(self) -> int:
        return self.prog.steps

    # -- sizes --------------------------------------------------------------------------
    def bytes_per_input(self, memory_length: int, steps: int | None = None) -> int:
        """Memory one input needs for ``steps`` decoder steps (default: all)."""
        steps = self.steps if steps is None else steps
        total = 0
        for ix in self.prog.indexes:
            cap = max(1, memory_length if ix.hist == MEMORY else steps)
            total += cap * (ITEM_BYTES + 8 * len(ix.val_cols))
        return total + (steps + 1) * self.tap_w + 8 * self.prog.ws_size + memory_length * 8 * len(self.prog.init)

    # -- the encoder ----------------------------------------------------------------------
    def memory(self, tokens: np.ndarray) -> np.ndarray:
        """``Enc_k(x) = E[:, x_k] + β(k)`` for one input's tokens (Wei, Chen & Ma §4.1), ``[L, w]``
        float64: the Embed op, as the torch module computes it."""
        e = self.prog.embed
        tok = np.asarray(tokens, dtype=np.int64)[: e.max_len]
        pos = e.positions
        rows = pos.rows(np.arange(tok.size)) if isinstance(pos, BinaryPositions) else np.asarray(pos)[: tok.size]
        return e.table[tok] + rows

    # -- one input ------------------------------------------------------------------------
    def start(self, tokens: np.ndarray, steps: int) -> tuple[_Input, np.ndarray]:
        """An input's state after the prologue, and ``tap_0`` (int8)."""
        p = self.prog
        mem = self.memory(tokens)
        st = _Input(p, mem.shape[0], steps)
        for k, ix in enumerate(p.indexes):
            if ix.hist != MEMORY:
                continue
            status = K.insert_rows(st.imeta, st.istate, np.uint64(k), mem, p.idata, st.vbits, st.err_i,
                                   st.err_f, *st.pools)
            if status == K.ERR_HISTORY:
                raise EngineRefused(f"the index engine stores keys as bits; encoder position {st.err_i[1]}, "
                                    f"coordinate {st.err_i[3]} is {float(st.err_f[0])!r}: run this model with the torch "
                                    "engine")
            if status:
                raise RuntimeError(f"index {k} holds fewer items than the memory's {len(mem)} rows")  # sized above
        pr = p.prologue
        st.ws[pr.x_off:pr.x_off + pr.w] = p.init
        tap0 = np.zeros(self.tap_w, dtype=np.int8)
        probe = np.zeros((0, K.PROBE_WIDTH))
        status = K.exec_net(pr.iprog, p.fdata, p.idata, p.ameta, st.imeta, st.istate, *st.pools, st.ws,
                            *st.scratch, probe, np.uint64(0), st.err_i, st.err_f)
        if not status:
            status = K.write_tap(st.ws, np.uint64(pr.tap_off), np.uint64(pr.tap_w), tap0, np.uint64(0), st.err_i,
                                 st.err_f)
        self._check(status, st, "prologue")
        b = p.body
        st.ws[b.o_off:b.o_off + b.w] = st.ws[pr.o_off:pr.o_off + pr.w]
        return st, tap0

    def advance(self, st: _Input, first: int, n: int, taps: np.ndarray, probes=None, dumps=None) -> None:
        """Decoder steps ``first .. first + n - 1`` into ``taps`` (rows indexed by step)."""
        p = self.prog
        probes = np.zeros((1, 0, K.PROBE_WIDTH)) if probes is None else probes
        dumps = np.zeros((1, 0)) if dumps is None else dumps
        b = p.body
        done, status = K.run_steps(b.iprog, p.fdata, p.idata, p.ameta, st.imeta, st.istate, *st.pools, st.ws,
                                   *st.scratch, self.geo, p.pos_cols, p.pos_table, np.uint64(first), np.uint64(n),
                                   taps, probes, dumps,
                                   st.err_i, st.err_f)
        self._check(status, st, "body")

    def _check(self, status: int, st: _Input, part: str) -> None:
        if not status:
            return
        code, step, where, col = (int(v) for v in st.err_i)
        value = float(st.err_f[0])
        names = self.prog.attn_names
        if code == K.ERR_SCORE:
            what = f"attention {names[where]!r} has a non-integer score term ({value!r})"
        elif code == K.ERR_HISTORY:
            what = f"a history coordinate ({col}) is {value!r}, not 0 or 1"
        elif code == K.ERR_TAP:
            what = f"tap column {col} is {value!r}, not 0 or 1 (or θ_cls's -1)"
        else:
            what = "an index is full (more items than decoder steps)"
        raise EngineRefused(f"the index engine computes this network exactly only while every key and tap is 0 or 1 "
                            f"and every score an integer (docs/transformer.md, \"The index engine\"); at decoder "
                            f"step {step} ({part}) {what}: run this model with the torch engine")

    # -- a batch ------------------------------------------------------------------------
    def run(self, tokens: np.ndarray, *, steps: int | None = None, progress=None, stop=None,
            probe: bool = False, dump: bool = False) -> Run:
        """Decode every input of ``tokens`` ``[B, L]`` for ``steps`` decoder steps (default:
        the network's), in lockstep.  ``progress(done, total)`` is called after each chunk;
        ``stop(taps, n)`` (taps ``[B, n + 1, tap_w]`` so far) may end the run early by
        returning True.  Ctrl-C (:func:`tm2nn.interrupt.graceful`) raises
        :class:`~tm2nn.interrupt.Interrupted` with the taps so far."""
        steps = self.steps if steps is None else int(steps)
        if not 0 <= steps <= self.steps:
            raise ValueError(f"the decoder runs at most {self.steps} steps (its positions), not {steps}")
        tokens = np.atleast_2d(np.asarray(tokens, dtype=np.int64))
        n_in = tokens.shape[0]
        length = min(tokens.shape[1], self.prog.embed.max_len)
        need = n_in * self.bytes_per_input(length, steps)
        n_attn = len(self.prog.attn_names)
        if probe:
            need += n_in * steps * n_attn * K.PROBE_WIDTH * 8
        if dump:
            need += n_in * steps * self.prog.ws_size * 8
        check_memory(need, f"the index engine on {n_in} input(s) for {steps:,} decoder steps (history indexes and "
                           "taps)", ("steps",))
        taps = np.zeros((n_in, steps + 1, self.tap_w), dtype=np.int8)
        probes = np.zeros((n_in, steps, n_attn, K.PROBE_WIDTH)) if probe else None
        dumps = np.zeros((n_in, steps, self.prog.ws_size)) if dump else None
        states = []
        for b in range(n_in):
            st, taps[b, 0] = self.start(tokens[b], steps)
            states.append(st)
        done, chunk = 0, 256
        while done < steps:
            n = min(chunk, steps - done)
            t0 = time.perf_counter()
            for b, st in enumerate(states):
                self.advance(st, done + 1, n, taps[b],
                             None if probes is None else probes[b, done:done + n],
                             None if dumps is None else dumps[b, done:done + n])
            done += n
            dt = time.perf_counter() - t0
            chunk = int(max(64, min(chunk * 4, n * CHUNK_SECONDS / max(dt, 1e-6))))
            if progress is not None:
                progress(done, steps)
            if stop is not None and done < steps and stop(taps[:, :done + 1], done):
                break
            if interrupt.requested() and done < steps:
                raise interrupt.Interrupted(done, steps, what="decoder steps", partial=taps[:, :done + 1].copy())
        return Run(taps[:, :done + 1] if done < steps else taps, done,
                   None if probes is None else probes[:, :done], None if dumps is None else dumps[:, :done])
