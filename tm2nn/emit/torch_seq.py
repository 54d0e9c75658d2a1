"""The torch modules of the sequence ops (:mod:`tm2nn.nets.ops`): attention with a null
key/value, the encoder embedding and the incremental decoder of Wei, Chen & Ma §4.1 / App. C.
Each class is the torch emitter's entry for its op (:func:`~tm2nn.emit.torch_net.torch_emitter`)
and follows :mod:`tm2nn.emit.torch_net`'s conventions (Parameters, caches, hooks, ``to_op``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from tm2nn import interrupt
from tm2nn.emit import BULK_BATCH, STEP_BATCH
from tm2nn.emit.torch_net import (
    NetModule,
    OpModule,
    _batch_major,
    _fm,
    _net_fm,
    saved_bytes,
    torch_emitter,
)
from tm2nn.limits import check_memory
from tm2nn.nets import Attention, BinaryPositions, Decode, Embed
from tm2nn.options import OptionError

#: The torch module materialises a decoder's positional tables (``[steps, w]``, and the
#: encoder's ``[max_len, w]``); it refuses beyond this many entries.  The ONNX model
#: computes positions from the loop counter, and the index engine needs no table.
MAX_POSITION_ENTRIES = 50_000_000

#: While :func:`record_attention` is active: op name -> the attention weights of every
#: call, ``[B, 1 + n]`` with the null key in slot 0 (None otherwise: no cost).
_PROBE: dict | None = None


@contextlib.contextmanager
def record_attention():
    """Record every attention op's weights while the block runs (for pictures,
    :mod:`tm2nn.viz.attention`); yields ``{op name: [weights of call 0, call 1, ...]}``."""
    global _PROBE
    rec: dict = {}
    old, _PROBE = _PROBE, rec
    try:
        yield rec
    finally:
        _PROBE = old


class _History:
    """One attended history during a decode: the columns ``cols`` of a body value
    ``src`` at steps 1..i, in a preallocated feature-major ``[batch, c, capacity]``
    buffer (a score is then one long row per coordinate: faster than ``[n, c]`` rows of
    a few floats), so appending step ``i`` is O(1) and attending is O(i)
    (ARCHITECTURE.md: earlier steps' representations never change).  Every
    self-attention op over ``src`` reads it.  Written in place: for runs without
    gradients (:class:`_GradHistory` is the one autograd can differentiate)."""

    def __init__(self, cols: torch.Tensor, capacity: int, batch: int, dtype: torch.dtype) -> None:
        self.cols = cols
        self.x = torch.empty((batch, cols.numel(), capacity), dtype=dtype, device=cols.device)
        self.n = 0
        self.step = None

    def extend(self, src: torch.Tensor, step) -> torch.Tensor:
        """Append ``src`` (feature-major ``[w, B]``) once per ``step``; the history so far
        ``[B, c, n]``."""
        if self.step != step:
            if self.n >= self.x.shape[2]:  # grow (only when driven past the planned length)
                self.x = torch.cat([self.x, torch.empty_like(self.x)], 2)
            self.x[:, :, self.n] = src.index_select(0, self.cols).t()
            self.n += 1
            self.step = step
        return self.x[:, :, : self.n]


class _GradHistory:
    """The same history for a decode that autograd differentiates: no tensor is written
    after it is read.  ``prior`` holds the columns ``[B, c]`` of the earlier steps (never
    changed); a step's first :meth:`extend` stacks them with its own column into a fresh
    ``[B, c, n]`` (O(i) a step, as the in-place history's reads are), which every op over
    ``src`` in that step shares.  :attr:`new` is the step's column, which the decoder
    appends to the next step's ``prior``: so one step is a pure function of its inputs and
    ``prior``, and can be recomputed under checkpointing."""

    def __init__(self, cols: torch.Tensor, prior: tuple) -> None:
        self.cols = cols
        self.prior = prior
        self.new = None
        self.x = None

    def extend(self, src: torch.Tensor, step) -> torch.Tensor:
        if self.x is None:
            self.new = src.index_select(0, self.cols).t()                          # [B, c]
            self.x = torch.stack((*self.prior, self.new), 2)
        return self.x


class _AttentionForm:
    """The runtime tensors of an attention op (:meth:`AttentionModule._build`)."""

    __slots__ = ("wq", "bq", "wk", "bk", "wv", "bv", "null_key", "null_value", "rows", "cols",
                 "wk_c_t", "wv_c")


@torch_emitter(Attention)
class AttentionModule(OpModule):
    """Hard-max (ties averaged) or softmax attention with a null key/value (see
    :class:`tm2nn.nets.Attention`).  Values are computed only on ``value_rows``.

    Cross-attention precomputes the memory's keys and values, batch-major ``[B, 1 + L, d]``
    with the null in slot 0.  Self-attention keeps no keys: it reads the history ``X``
    ``[B, c, n]`` of the attended coordinates (``bind``) and uses linearity,
    scores ``X (W_kᵀ q) + b_k·q`` and mixed values ``W_v (Σ a_j x_j) + (Σ a_j) b_v``, so
    one cache serves every op over the same history."""

    def __init__(self, op: Attention, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.mode = op.mode
        self.beta = float(op.beta)
        self.is_self = op.is_self
        self.source = op.source
        rows = op.value_rows()
        self.dk, self.dv = op.key_width, int(rows.size)
        for name, t in op.tensors().items():
            self._add_tensor(name, t, dtype)
        self.register_buffer("rows", torch.from_numpy(rows), persistent=False)
        self.has_v = bool(op.wv.nnz and np.any(op.wv.vals != 0))
        self.has_bv = bool(np.any(op.bv[rows] != 0))
        self.has_nv = bool(np.any(op.null_value[rows] != 0))
        if self.is_self:
            self.bind(op.memory_columns())

    def bind(self, cols: np.ndarray) -> None:
        """Read histories of the coordinates ``cols`` of the attended value (a superset of
        the op's :meth:`~tm2nn.nets.Attention.memory_columns`)."""
        idx = torch.from_numpy(np.asarray(cols, dtype=np.int64))
        self.register_buffer("cols", idx, persistent=False)
        self._invalidate()

    def extra_repr(self) -> str:
        kind = "self" if self.is_self else "cross"
        beta = f", beta={self.beta:g}" if self.mode == "softmax" else ""
        return self._repr(f"{kind}, mode={self.mode}{beta}, dk={self.dk}, dv={self.dv}")

    def _build(self) -> _AttentionForm:
        f = _AttentionForm()
        rows = self._buffers["rows"]
        f.rows = rows
        f.wq = self.dense_tensor("wq")
        f.bq = self.dense_tensor("bq").unsqueeze(1)                                # [dk, 1]
        f.wk = self.dense_tensor("wk")
        f.bk = self.dense_tensor("bk")
        f.wv = self.dense_tensor("wv").index_select(0, rows)                       # [dv, w]
        f.bv = self.dense_tensor("bv").index_select(0, rows)
        f.null_key = self.dense_tensor("null_key")
        f.null_value = self.dense_tensor("null_value").index_select(0, rows)
        f.cols = f.wk_c_t = f.wv_c = None
        if self.is_self:
            cols = self._buffers["cols"]
            f.cols = cols
            f.wk_c_t = f.wk.index_select(1, cols).t().contiguous()                 # [c, dk]
            f.wv_c = f.wv.index_select(1, cols).contiguous()                       # [dv, c]
        return f

    def keys_values(self, mem: torch.Tensor, f: _AttentionForm | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``[L, w, B]`` memory -> keys ``[B, 1 + L, dk]`` and values ``[B, 1 + L, dv]``
        (slot 0: the null key/value)."""
        f = f or self._runtime()
        m = mem.permute(2, 0, 1)                                     # [B, L, w]
        k = torch.matmul(m, f.wk.t()) + f.bk
        v = torch.matmul(m, f.wv.t()) + f.bv
        b = m.shape[0]
        k = torch.cat([f.null_key.expand(b, 1, -1), k], 1)
        v = torch.cat([f.null_value.expand(b, 1, -1), v], 1)
        return k, v

    def weights(self, logits: torch.Tensor) -> torch.Tensor:
        """``[B, n]`` scores -> attention weights (ties averaged under hard-max)."""
        if self.mode == "hardmax":
            a = (logits == logits.amax(1, keepdim=True)).to(logits.dtype)
            return a / a.sum(1, keepdim=True)
        return torch.softmax(self.beta * logits, dim=1)

    def attend(self, h: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor,
               rows: torch.Tensor) -> torch.Tensor:
        """``q`` ``[dk, B]`` against ``keys`` ``[B, n, dk]``; returns ``h`` plus the
        attended values on ``rows``."""
        a = self.weights(torch.bmm(keys, q.t().unsqueeze(2))[:, :, 0])             # [B, n]
        if _PROBE is not None:
            _PROBE.setdefault(self.op_name, []).append(a.detach().cpu().numpy().copy())
        out_v = torch.bmm(a.unsqueeze(1), vals)[:, 0]                              # [B, dv]
        return h.index_add(0, rows, out_v.t())

    def attend_history(self, h: torch.Tensor, q: torch.Tensor, x: torch.Tensor, f: _AttentionForm) -> torch.Tensor:
        """``q`` ``[dk, B]`` against the history ``x`` ``[B, c, n]`` (see the class doc).

        Hard-max needs no weight vector: with ``s'_j = x_j·(W_kᵀq)`` (the common ``b_k·q``
        left out, it does not move the argmax), the items that win are ``s'_j = max s'``
        when ``max s' + b_k·q >= τ_0``, and the null wins when ``τ_0 >= max s' + b_k·q``."""
        qc = torch.mm(f.wk_c_t, q).t().unsqueeze(1)                                # [B, 1, c]
        s = torch.bmm(qc, x)[:, 0]                                                 # [B, n]
        qb = torch.mv(q.t(), f.bk)[:, None]                                        # [B, 1]
        s0 = torch.mv(q.t(), f.null_key)[:, None]                                  # [B, 1]
        if self.dv == 0:
            return h
        if self.mode == "hardmax":
            top = s.amax(1, keepdim=True)
            best = top + qb
            a0 = (s0 >= best).to(s.dtype)                                          # [B, 1]
            live = (best >= s0).to(s.dtype)                                        # items can win
            if self.has_v:
                win = (s == top).to(s.dtype) * live                                # [B, n]
                n_items = win.sum(1, keepdim=True)
            elif s.is_meta or bool((a0 * live).any()):  # a tie between the null and the items: count them
                win = None
                n_items = (s == top).sum(1, keepdim=True).to(s.dtype) * live
            else:  # only the items' share matters, and it is 0 or 1: no O(n) count
                win, n_items = None, live
            inv = 1.0 / (n_items + a0)
            items, a0 = n_items * inv, a0 * inv
            ai = None if win is None else win * inv
        else:
            a = torch.softmax(self.beta * torch.cat([s0, s + qb], 1), dim=1)
            a0, ai = a[:, :1], a[:, 1:]
            items = ai.sum(1, keepdim=True)
        if _PROBE is not None:  # the full weight vector, null first (the hard-max path skips it)
            full = ai if ai is not None else (s == top).to(s.dtype) * live * inv
            _PROBE.setdefault(self.op_name, []).append(torch.cat([a0, full], 1).detach().cpu().numpy().copy())
        out_v = None
        if self.has_v:
            out_v = torch.mm(torch.bmm(x, ai.unsqueeze(2))[:, :, 0], f.wv_c.t())   # [B, dv]
        if self.has_bv:
            t = items * f.bv
            out_v = t if out_v is None else out_v + t
        if self.has_nv:
            t = a0 * f.null_value
            out_v = t if out_v is None else out_v + t
        if out_v is None:
            return h
        return h.index_add(0, f.rows, out_v.t())

    def fm(self, h: torch.Tensor, mem: torch.Tensor | None = None, ctx: dict | None = None) -> torch.Tensor:
        f = self._runtime()
        q = torch.addmm(f.bq, f.wq, h)                                             # [dk, B]
        if not self.is_self:
            cross = ctx.setdefault("cross", {}) if ctx is not None else {}
            kv = cross.get(self.op_name)
            if kv is None or kv[0] is not mem:
                kv = cross[self.op_name] = (mem, *self.keys_values(mem, f))
            return self.attend(h, q, kv[1], kv[2], f.rows)
        src = h if mem is None else mem
        hist = ctx["history"].get(self.source) if ctx is not None and "history" in ctx else None
        if hist is None:  # no decode: the history is the current vector alone
            return self.attend_history(h, q, src.index_select(0, f.cols).t().unsqueeze(2), f)
        return self.attend_history(h, q, hist.extend(src, ctx["step"]), f)

    def forward(self, h: torch.Tensor, mem: torch.Tensor | None = None, ctx: dict | None = None) -> torch.Tensor:
        """Batch-major: ``h`` ``[B, w]``, ``mem`` ``[B, L, w]`` (cross-attention) or
        ``[B, w]`` (a history source)."""
        if mem is not None:
            mem = _fm(mem, self.in_kinds[1])
        return self.fm(_fm(h, "vector"), mem, ctx=ctx).t()


def _add_positions(mod: OpModule, positions, dtype: torch.dtype) -> None:
    """The Parameter ``positions``: a table, or a computed code's placement (module doc).
    A table over :data:`MAX_POSITION_ENTRIES` entries is refused with its size."""
    n = int(positions.shape[0]) * int(positions.shape[1])
    if n > MAX_POSITION_ENTRIES:
        raise OptionError(f"the torch module of {mod.op_name!r} would materialise a positional table of {n:,} "
                          f"entries ({positions.shape[0]:,} x {positions.shape[1]}, about {n * 4 / 2**20:,.0f} MiB "
                          f"in float32; limit {MAX_POSITION_ENTRIES:,}): lower {{steps}}, or run the model with the "
                          "index engine (--engine index), which needs no table", "steps")
    if isinstance(positions, BinaryPositions):
        mod._add_tensor("positions", positions.placement(), dtype)
        n = np.arange(positions.length, dtype=np.int64) + positions.offset
        code = ((n[:, None] // positions.powers()[None, :]) % 2).astype(np.float64)
        mod.register_buffer("positions_code", torch.from_numpy(code.reshape(positions.length, positions.bits)).to(dtype),
                            persistent=False)
        mod.binary_positions = positions
    else:
        mod._add_tensor("positions", positions, dtype)
        mod.binary_positions = None


def _position_table(mod: OpModule) -> torch.Tensor:
    p = mod.dense_tensor("positions")
    if mod.binary_positions is None:
        return p
    return torch.mm(mod._buffers["positions_code"], p.t())                        # [length, width]


@torch_emitter(Embed)
class EmbedModule(OpModule):
    """Encoder embedding: token ids ``[B, L]`` -> ``E[:, x_k] + β(k)``."""

    def __init__(self, op: Embed, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.max_len = op.max_len
        self.n_tokens, self.width = op.table.shape
        self._add_tensor("table", op.table, dtype)
        _add_positions(self, op.positions, dtype)

    def extra_repr(self) -> str:
        return self._repr(f"tokens={self.n_tokens}, width={self.width}, max_len={self.max_len}")

    def _build(self):
        return self.dense_tensor("table"), _position_table(self)

    def fm(self, tokens: torch.Tensor) -> torch.Tensor:
        table, positions = self._runtime()
        tokens = tokens[:, : self.max_len]
        e = table[tokens] + positions[: tokens.shape[1]][None]                     # [B, L, w]
        return e.permute(1, 2, 0).contiguous()


@torch_emitter(Decode)
class DecodeModule(OpModule):
    """The decoder loop (see :class:`tm2nn.nets.Decode`), incremental: one history per
    attended body value (``Decode.histories()``; their columns are the buffers
    ``history<k>``), so step ``i`` costs O(i).

    Without gradients the histories are written in place (:class:`_History`).  When grad
    is enabled and a weight or the memory requires grad, the decode is functional
    (:class:`_GradHistory`): ``loss.backward()`` reaches every weight through all T steps.
    Autograd then keeps every step's values and each step's stacked history, O(T²): the
    decode measures what steps 2 and 3 keep, extrapolates to T steps and refuses before
    the fourth when that is over the memory limit (:meth:`_refuse_backward`,
    :func:`tm2nn.limits.check_memory`).  With :attr:`checkpoint` set each step is
    recomputed in backward (``torch.utils.checkpoint``, the same operations on the same
    values, so the same gradient) and only the steps' inputs and history columns are kept
    (:meth:`checkpointed_bytes`, checked up front)."""

    def __init__(self, op: Decode, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.steps = int(op.steps)
        # the per-step layers run on the inputs decoded together (tm2nn.emit.STEP_BATCH)
        self.prologue = NetModule(op.prologue, dtype, STEP_BATCH)
        self.body = NetModule(op.body, dtype, STEP_BATCH)
        self._add_tensor("init", op.init, dtype)
        _add_positions(self, op.positions, dtype)
        #: the attended body values, in order; history ``k``'s columns are buffer ``history<k>``
        self.history_sources = tuple(op.histories())
        for k, cols in enumerate(op.histories().values()):
            self.register_buffer(f"history{k}", torch.from_numpy(np.asarray(cols, dtype=np.int64)), persistent=False)
        for a in op.body.nodes:
            if isinstance(a, Attention) and a.is_self:
                self.body.op(a.name).bind(op.histories()[a.source])
        self.tap_width = len(op.body.spaces[op.body.outputs[1]])
        self.width = len(op.body.spaces[op.body.outputs[0]])
        #: ``progress(i, steps)``, called about 100 times per decode (for progress bars).
        self.progress = None
        #: Recompute each step in backward instead of keeping its values (see the class doc).
        self.checkpoint = False

    @property
    def histories(self) -> dict[str, torch.Tensor]:
        """Attended body value -> the columns its history keeps (on the module's device)."""
        return {src: self._buffers[f"history{k}"] for k, src in enumerate(self.history_sources)}

    def extra_repr(self) -> str:
        return self._repr(f"steps={self.steps}, histories={len(self.history_sources)}")

    def _build(self):
        return self.dense_tensor("init"), _position_table(self)

    def _nested(self) -> dict:
        return {"prologue": self.prologue.to_net(), "body": self.body.to_net()}

    def new_context(self, batch: int, capacity: int | None = None) -> dict:
        """Empty in-place histories for a decode of ``capacity`` steps (default: ``steps``)."""
        cap = max(1, self.steps if capacity is None else capacity)
        dtype = self._parameters["init"].dtype
        return {"step": 0, "cross": {},
                "history": {src: _History(cols, cap, batch, dtype) for src, cols in self.histories.items()}}

    def start(self, mem: torch.Tensor, ctx: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(o_0, tap_0)``: the prologue on the initial decoder input."""
        init = self._runtime()[0]
        x = init[:, None].expand(-1, mem.shape[2]).contiguous()
        o, tap = _net_fm(self.prologue, (x, mem), ctx={})
        return o, tap

    def step(self, i: int, o: torch.Tensor, mem: torch.Tensor, ctx: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(o_i, tap_i) = body(o_{i-1} + β(i), memory)``, appending to the histories in ``ctx``."""
        ctx["step"] = i
        x = o + self._runtime()[1][i - 1][:, None]
        return tuple(_net_fm(self.body, (x, mem), ctx=ctx))

    def differentiable(self, mem: torch.Tensor) -> bool:
        """Whether this decode must be one autograd can differentiate."""
        return torch.is_grad_enabled() and (mem.requires_grad or any(p.requires_grad for p in self.parameters()))

    def checkpointed_bytes(self, batch: int) -> int:
        """Estimated bytes a checkpointed backward pass (:attr:`checkpoint`) through the
        decode of ``batch`` inputs keeps: each step's input, output and tap and the
        histories' columns (O(T)), and one step recomputed at a time with its stacked
        history and attention weights."""
        t = self.steps
        item = self._parameters["init"].element_size()
        values = sum(len(self.body.net.spaces[v]) for v in self.body.net.spaces)
        cols = sum(int(c.numel()) for c in self.histories.values())
        n_att = sum(isinstance(a, Attention) and a.is_self for a in self.body.net.nodes)
        return int(t * (2 * self.width + self.tap_width + cols) + 4 * values + t * (cols + n_att)) * batch * item

    def _refuse_backward(self, i: int, kept_i: int, kept_next: int, batch: int) -> None:
        """Refuse a decode whose backward would not fit, from what steps ``i`` and ``i + 1``
        kept: step ``j`` keeps about ``a + b·j`` bytes (its values, and its stacked history
        and attention weights, which grow with ``j``), so T steps keep ``T·a + b·T(T+1)/2``.
        (Step 1 also computes the memory's keys and values, once for all steps: the
        decoder measures steps 2 and 3.)"""
        b = max(kept_next - kept_i, 0)
        a = max(kept_i - b * i, 0)
        t = self.steps
        check_memory(t * a + b * t * (t + 1) // 2, f"a backward pass through {t:,} decoder steps of {batch:,} "
                     "input(s) (set the decoder's .checkpoint = True to recompute each step in backward, about "
                     f"{self.checkpointed_bytes(batch):,} bytes)", ("steps",))

    def fm(self, mem: torch.Tensor, progress=None) -> torch.Tensor:
        progress = progress or self.progress
        if self.differentiable(mem):
            return self._fm_grad(mem, progress)
        batch = mem.shape[2]
        ctx = self.new_context(batch)
        taps = torch.empty((self.steps + 1, self.tap_width, batch), dtype=self._parameters["init"].dtype,
                           device=mem.device)
        o, taps[0] = self.start(mem, ctx)
        every = max(1, self.steps // 100)
        for i in range(1, self.steps + 1):
            o, taps[i] = self.step(i, o, mem, ctx)
            if progress is not None and (i % every == 0 or i == self.steps):
                progress(i, self.steps)
            if interrupt.requested() and i < self.steps:  # Ctrl-C (interrupt.graceful): taps so far
                raise interrupt.Interrupted(i, self.steps, what="decoder steps",
                                            partial=_batch_major(taps[:i + 1], "sequence"))
        return taps

    def _grad_step(self, i: int, o: torch.Tensor, mem: torch.Tensor, prior: dict, cross: dict | None = None):
        """One differentiable step: a pure function of ``o``, ``mem`` and the earlier
        columns ``prior`` (so checkpointing may recompute it); returns ``(o_i, tap_i)``
        and each history's new column, in :attr:`history_sources` order.  ``cross``: the
        memory's keys and values, shared by the steps (None: computed in this step, as a
        recomputed step must)."""
        hist = {src: _GradHistory(cols, prior[src]) for src, cols in self.histories.items()}
        o, tap = self.step(i, o, mem, {"step": i, "cross": {} if cross is None else cross, "history": hist})
        return (o, tap, *(hist[src].new for src in self.history_sources))

    def _fm_grad(self, mem: torch.Tensor, progress) -> torch.Tensor:
        """The decode autograd differentiates (class doc), refused up front when its
        backward would not fit."""
        batch = mem.shape[2]
        if self.checkpoint:
            check_memory(self.checkpointed_bytes(batch), f"a checkpointed backward pass through {self.steps:,} "
                         f"decoder steps of {batch:,} input(s)", ("steps",))
        o, tap0 = self.start(mem, {})
        taps = [tap0]
        prior: dict = {src: () for src in self.history_sources}
        kept = [0, 0]
        cross: dict = {}
        every = max(1, self.steps // 100)
        for i in range(1, self.steps + 1):
            if self.checkpoint:
                snapshot = dict(prior)
                out = checkpoint(lambda o_, m_, i=i, p=snapshot: self._grad_step(i, o_, m_, p), o, mem,
                                 use_reentrant=False)
            elif i in (2, 3) and self.steps > 3:  # measure what steps 2 and 3 keep (_refuse_backward)
                out, kept[i - 2] = saved_bytes(lambda i=i, o=o: self._grad_step(i, o, mem, prior, cross))
                if i == 3:
                    self._refuse_backward(2, kept[0], kept[1], batch)
            else:
                out = self._grad_step(i, o, mem, prior, cross)
            o, tap, *new = out
            taps.append(tap)
            for src, col in zip(self.history_sources, new):
                prior[src] = (*prior[src], col)
            if progress is not None and (i % every == 0 or i == self.steps):
                progress(i, self.steps)
            if interrupt.requested() and i < self.steps:
                raise interrupt.Interrupted(i, self.steps, what="decoder steps",
                                            partial=_batch_major(torch.stack(taps), "sequence"))
        return torch.stack(taps)
