"""NetIR -> ``torch.nn.Module``.

:func:`to_torch` builds a :class:`NetModule` with one submodule per op, registered under
the op's name (sanitised to an attribute name), so ``print(module)`` and
``state_dict()`` read like the net: ``layer3_and.weight``, ``loop.body.step.bias``.

Weights are buffers, or :class:`torch.nn.Parameter` for ``Affine(trainable=True)``.
Each affine op keeps the runtime form :func:`tm2nn.emit.affine_form` chose for it
(``module.<op>.form``), and its state_dict entries depend on the form:

* ``dense``:    ``weight`` ``[n_out, n_in]``, ``bias`` ``[n_out]``;
* ``diagonal``: ``weight`` ``[n]`` (the diagonal), ``bias`` ``[n]``;
* ``ell``:      ``cols`` (int64) and ``weight``, both ``[k, n_out]``: output ``i`` is
  ``sum_j weight[j, i] * x[cols[j, i]] + bias[i]`` (padding has weight 0);
* ``scatter``:  ``rows``, ``cols`` (int64) and ``weight``, all ``[nnz]``: entry ``e``
  adds ``weight[e] * x[cols[e]]`` to output ``rows[e]``.  Entries are in the order of the
  op's :class:`~tm2nn.nets.SparseMatrix` (row-major), so ``weight[e]`` is the IR's
  ``weight.vals[e]``.  This is also the form of a *sparse trainable* affine: its
  Parameter is the ``[nnz]`` ``weight`` (only existing edges have gradients), ``rows``
  and ``cols`` are buffers.

A trainable op's ``bias`` is a Parameter unless the op says ``train_bias=False``.
:meth:`NetModule.to_net` writes the module's current (e.g. trained) weights back into a
copy of the IR net, which the ONNX emitter can then export.

The net runs feature-major (``[width, batch]``) inside; :meth:`NetModule.forward` takes
and returns ``[batch, width]``.  Each op submodule's own ``forward`` is batch-major too,
so a submodule can be called on its own; the net calls their feature-major ``fm``
directly, so forward hooks on submodules do not fire: use :meth:`NetModule.trace` to see
every intermediate value.
"""

from __future__ import annotations

import contextlib
import keyword
import re

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tm2nn.emit import affine_form
from tm2nn.emit.torch_grid import GridReadoutModule, MemoryGridModule, PatchMapModule
from tm2nn.nets import (
    Activation,
    Affine,
    Attention,
    BinaryPositions,
    Concat,
    Decode,
    Embed,
    GridReadout,
    Loop,
    MemoryGrid,
    Mul,
    Net,
    NetIRError,
    Op,
    Param,
    PatchMap,
    ReLU,
    Slice,
    StopGradient,
)

#: Refuse a dense weight bigger than this (it would not be a construction of this project).
DENSE_MAX_BYTES = 4 << 30


class AffineModule(nn.Module):
    """``y = W x + b`` in the form chosen by :func:`tm2nn.emit.affine_form`."""

    def __init__(self, op: Affine, dtype: torch.dtype) -> None:
        super().__init__()
        w = op.weight
        self.op_name = op.name
        self.form = affine_form(op)
        self.trainable = bool(op.trainable)
        self.cite = op.cite
        self.n_out, self.n_in = w.shape
        self.nnz = w.nnz
        self.k = 0
        rows = torch.from_numpy(w.rows)
        cols = torch.from_numpy(w.cols)
        vals = torch.from_numpy(w.vals).to(dtype)
        if self.form == "dense":
            nbytes = self.n_out * self.n_in * torch.empty(0, dtype=dtype).element_size()
            if nbytes > DENSE_MAX_BYTES:
                raise NetIRError(f"affine {op.name!r}: a dense {self.n_out}x{self.n_in} weight "
                                 f"would take {nbytes / 2**30:.1f} GiB")
            weight = torch.zeros((self.n_out, self.n_in), dtype=dtype)
            weight[rows, cols] = vals
        elif self.form == "diagonal":
            weight = torch.zeros(self.n_out, dtype=dtype)
            weight[rows] = vals
        elif self.form == "scatter":
            self.register_buffer("rows", rows.to(torch.int64))
            self.register_buffer("cols", cols.to(torch.int64))
            weight = vals
        else:
            ell_cols, ell_vals = w.ell()
            self.k = ell_cols.shape[1]
            self.register_buffer("cols", torch.from_numpy(np.ascontiguousarray(ell_cols.T)))
            weight = torch.from_numpy(np.ascontiguousarray(ell_vals.T)).to(dtype)
        bias = torch.from_numpy(np.array(op.bias, dtype=np.float64)).to(dtype)
        if self.trainable:
            self.weight = nn.Parameter(weight)
            if op.train_bias:
                self.bias = nn.Parameter(bias)
            else:
                self.register_buffer("bias", bias)
        else:
            self.register_buffer("weight", weight)
            self.register_buffer("bias", bias)

    def extra_repr(self) -> str:
        s = f"{self.n_in} -> {self.n_out}, form={self.form}, nnz={self.nnz}"
        if self.form == "ell":
            s += f", k={self.k}"
        if self.trainable:
            s += ", trainable=True"
        return s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Batch-major: ``x`` is ``[batch, n_in]``."""
        if self.form == "ell":
            cols, w = self.cols, self.weight
            acc = torch.addcmul(self.bias, x.index_select(1, cols[0]), w[0])
            for j in range(1, self.k):
                acc = acc.addcmul(x.index_select(1, cols[j]), w[j])
            return acc
        if self.form == "diagonal":
            return torch.addcmul(self.bias, x, self.weight)
        if self.form == "scatter":
            g = x.index_select(1, self.cols) * self.weight
            return self.bias.expand(x.shape[0], self.n_out).clone().index_add_(1, self.rows, g)
        return F.linear(x, self.weight, self.bias)

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        """Feature-major: ``x`` is ``[n_in, batch]``."""
        b = self.bias.unsqueeze(1)
        if self.form == "ell":
            # Accumulate in place into the fresh gathered tensor: allocating large outputs
            # costs more than the arithmetic.  Autograd-safe, since ELL weights are never
            # trainable, index_select does not save its output, and neither mul_ nor
            # addcmul_ needs the value they overwrite to differentiate with respect to x.
            cols, w = self.cols, self.weight
            acc = x.index_select(0, cols[0]).mul_(w[0].unsqueeze(1))
            for j in range(1, self.k):
                acc.addcmul_(x.index_select(0, cols[j]), w[j].unsqueeze(1))
            return acc.add_(b)
        if self.form == "diagonal":
            return x.mul(self.weight.unsqueeze(1)).add_(b)
        if self.form == "scatter":
            g = x.index_select(0, self.cols)
            # in place only when the weight is a buffer: autograd needs the gathered x for
            # the gradient of a trainable weight
            g = g * self.weight.unsqueeze(1) if self.trainable else g.mul_(self.weight.unsqueeze(1))
            return b.expand(self.n_out, x.shape[1]).clone().index_add_(0, self.rows, g)
        return torch.addmm(b, self.weight, x)


class ReLUModule(nn.Module):
    def __init__(self, op: ReLU) -> None:
        super().__init__()
        self.op_name = op.name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    fm = forward


class ActivationModule(nn.Module):
    """Elementwise ``fn(x)`` (:class:`tm2nn.nets.Activation`), the registry's torch code:
    autograd gives the function's derivative (see :mod:`tm2nn.nets.activations`)."""

    def __init__(self, op: Activation) -> None:
        super().__init__()
        from tm2nn.nets.activations import get

        self.op_name = op.name
        self.fn = op.fn
        self.cite = op.cite
        self._impl = get(op.fn).torch

    def extra_repr(self) -> str:
        return f"fn={self.fn}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._impl(x)

    fm = forward


class ParamModule(nn.Module):
    """A free trainable vector (:class:`tm2nn.nets.Param`), the same for every batch row."""

    def __init__(self, op: Param, dtype: torch.dtype) -> None:
        super().__init__()
        self.op_name = op.name
        self.cite = op.cite
        self.value = nn.Parameter(torch.from_numpy(op.value.copy()).to(dtype))

    def extra_repr(self) -> str:
        return f"n={self.value.numel()}, trainable=True"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.value.unsqueeze(0).expand(x.shape[0], -1)

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return self.value.unsqueeze(1).expand(-1, x.shape[1])


class StopGradientModule(nn.Module):
    """``detach``: the value passes, the derivative is 0 (Welper's stop-gradient)."""

    def __init__(self, op: StopGradient) -> None:
        super().__init__()
        self.op_name = op.name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.detach()

    fm = forward


class MulModule(nn.Module):
    def __init__(self, op: Mul) -> None:
        super().__init__()
        self.op_name = op.name

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b

    fm = forward


class ConcatModule(nn.Module):
    def __init__(self, op: Concat) -> None:
        super().__init__()
        self.op_name = op.name
        self.n_inputs = len(op.inputs)

    def extra_repr(self) -> str:
        return f"n_inputs={self.n_inputs}"

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat(xs, dim=-1)

    def fm(self, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat(xs, dim=0)


class SliceModule(nn.Module):
    def __init__(self, op: Slice) -> None:
        super().__init__()
        self.op_name = op.name
        self.register_buffer("index", torch.tensor(op.indices, dtype=torch.int64), persistent=False)

    def extra_repr(self) -> str:
        return f"n={self.index.numel()}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(1, self.index)

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, self.index)


class LoopModule(nn.Module):
    """Apply ``body`` ``trips`` times (weights shared between iterations); with
    ``scan``, return every state stacked on a new first axis (feature-major inside)."""

    def __init__(self, op: Loop, dtype: torch.dtype) -> None:
        super().__init__()
        self.op_name = op.name
        self.trips = int(op.trips)
        self.scan = bool(op.scan)
        self.until_fixed = bool(op.until_fixed)
        self.body = NetModule(op.body, dtype)
        #: ``progress(i, trips)``, called about 100 times per run (for progress bars).
        self.progress = None

    def extra_repr(self) -> str:
        return (f"trips={self.trips}" + (", scan=True" if self.scan else "")
                + (", until_fixed=True" if self.until_fixed else ""))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.body.input_kinds[0] == "vector":
            y = self.fm(x.t())
            return y.t() if not self.scan else y.permute(2, 0, 1)
        y = self.fm(x)
        return y.transpose(0, 1) if self.scan else y

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        states = [x] if self.scan else None
        every = max(1, self.trips // 100)
        for i in range(1, self.trips + 1):
            y = self.body._run_fm((x,))[0]
            fixed = self.until_fixed and torch.equal(y, x)
            x = y
            if states is not None:
                states.append(x)
            if self.progress is not None and (fixed or i % every == 0 or i == self.trips):
                self.progress(self.trips if fixed else i, self.trips)
            if fixed:  # every later trip gives x again (Loop.until_fixed)
                if states is not None:
                    states.extend([x] * (self.trips - i))
                break
        return torch.stack(states) if states is not None else x


def _dense(m, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(m.dense() if hasattr(m, "dense") else m)).to(dtype)


class _History:
    """One attended history during a decode: the columns ``cols`` of a body value
    ``src`` at steps 1..i, in a preallocated feature-major ``[batch, c, capacity]``
    buffer (a score is then one long row per coordinate: faster than ``[n, c]`` rows of
    a few floats), so appending step ``i`` is O(1) and attending is O(i)
    (ARCHITECTURE.md: earlier steps' representations never change).  Every
    self-attention op over ``src`` reads it."""

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


class AttentionModule(nn.Module):
    """Hard-max (ties averaged) or softmax attention with a null key/value (see
    :class:`tm2nn.nets.Attention`).  Values are computed only on ``value_rows``.

    Cross-attention precomputes the memory's keys and values, batch-major ``[B, 1 + L, d]``
    with the null in slot 0.  Self-attention keeps no keys: it reads the history ``X``
    ``[B, c, n]`` of the attended coordinates (``bind``) and uses linearity,
    scores ``X (W_kᵀ q) + b_k·q`` and mixed values ``W_v (Σ a_j x_j) + (Σ a_j) b_v``, so
    one cache serves every op over the same history."""

    def __init__(self, op: Attention, dtype: torch.dtype) -> None:
        super().__init__()
        self.op_name = op.name
        self.cite = op.cite
        self.mode = op.mode
        self.beta = float(op.beta)
        self.is_self = op.is_self
        self.source = op.source
        rows = op.value_rows()
        self.dk, self.dv = op.key_width, int(rows.size)
        self.register_buffer("wq", _dense(op.wq, dtype))
        self.register_buffer("bq", _dense(op.bq, dtype))
        self.register_buffer("wk", _dense(op.wk, dtype))
        self.register_buffer("bk", _dense(op.bk, dtype))
        self.register_buffer("wv", _dense(op.wv.dense()[rows], dtype))
        self.register_buffer("bv", _dense(op.bv[rows], dtype))
        self.register_buffer("null_key", _dense(op.null_key, dtype))
        self.register_buffer("null_value", _dense(op.null_value[rows], dtype))
        self.register_buffer("rows", torch.from_numpy(rows))
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
        self.register_buffer("wk_c_t", self.wk[:, idx].t().contiguous(), persistent=False)   # [c, dk]
        self.register_buffer("wv_c", self.wv[:, idx].contiguous(), persistent=False)         # [dv, c]

    def extra_repr(self) -> str:
        kind = "self" if self.is_self else "cross"
        beta = f", beta={self.beta:g}" if self.mode == "softmax" else ""
        return f"{kind}, mode={self.mode}{beta}, dk={self.dk}, dv={self.dv}"

    def keys_values(self, mem: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[L, w, B]`` memory -> keys ``[B, 1 + L, dk]`` and values ``[B, 1 + L, dv]``
        (slot 0: the null key/value)."""
        m = mem.permute(2, 0, 1)                                     # [B, L, w]
        k = torch.matmul(m, self.wk.t()) + self.bk
        v = torch.matmul(m, self.wv.t()) + self.bv
        b = m.shape[0]
        k = torch.cat([self.null_key.expand(b, 1, -1), k], 1)
        v = torch.cat([self.null_value.expand(b, 1, -1), v], 1)
        return k, v

    def weights(self, logits: torch.Tensor) -> torch.Tensor:
        """``[B, n]`` scores -> attention weights (ties averaged under hard-max)."""
        if self.mode == "hardmax":
            a = (logits == logits.amax(1, keepdim=True)).to(logits.dtype)
            return a / a.sum(1, keepdim=True)
        return torch.softmax(self.beta * logits, dim=1)

    def attend(self, h: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
        """``q`` ``[dk, B]`` against ``keys`` ``[B, n, dk]``; returns ``h`` plus the
        attended values on ``rows``."""
        a = self.weights(torch.bmm(keys, q.t().unsqueeze(2))[:, :, 0])             # [B, n]
        if _PROBE is not None:
            _PROBE.setdefault(self.op_name, []).append(a.detach().cpu().numpy().copy())
        out_v = torch.bmm(a.unsqueeze(1), vals)[:, 0]                              # [B, dv]
        return h.index_add(0, self.rows, out_v.t())

    def attend_history(self, h: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``q`` ``[dk, B]`` against the history ``x`` ``[B, c, n]`` (see the class doc).

        Hard-max needs no weight vector: with ``s'_j = x_j·(W_kᵀq)`` (the common ``b_k·q``
        left out, it does not move the argmax), the items that win are ``s'_j = max s'``
        when ``max s' + b_k·q >= τ_0``, and the null wins when ``τ_0 >= max s' + b_k·q``."""
        qc = torch.mm(self.wk_c_t, q).t().unsqueeze(1)                             # [B, 1, c]
        s = torch.bmm(qc, x)[:, 0]                                                 # [B, n]
        qb = torch.mv(q.t(), self.bk)[:, None]                                     # [B, 1]
        s0 = torch.mv(q.t(), self.null_key)[:, None]                               # [B, 1]
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
            elif bool((a0 * live).any()):  # a tie between the null and the items: count them
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
            out_v = torch.mm(torch.bmm(x, ai.unsqueeze(2))[:, :, 0], self.wv_c.t())  # [B, dv]
        if self.has_bv:
            t = items * self.bv
            out_v = t if out_v is None else out_v + t
        if self.has_nv:
            t = a0 * self.null_value
            out_v = t if out_v is None else out_v + t
        if out_v is None:
            return h
        return h.index_add(0, self.rows, out_v.t())

    def fm(self, h: torch.Tensor, mem: torch.Tensor | None = None, ctx: dict | None = None) -> torch.Tensor:
        q = torch.addmm(self.bq[:, None], self.wq, h)                              # [dk, B]
        if not self.is_self:
            cross = ctx.setdefault("cross", {}) if ctx is not None else {}
            kv = cross.get(self.op_name)
            if kv is None or kv[0] is not mem:
                kv = cross[self.op_name] = (mem, *self.keys_values(mem))
            return self.attend(h, q, kv[1], kv[2])
        src = h if mem is None else mem
        hist = ctx["history"].get(self.source) if ctx is not None and "history" in ctx else None
        if hist is None:  # no decode: the history is the current vector alone
            return self.attend_history(h, q, src.index_select(0, self.cols).t().unsqueeze(2))
        return self.attend_history(h, q, hist.extend(src, ctx["step"]))

    def forward(self, h: torch.Tensor, mem: torch.Tensor | None = None) -> torch.Tensor:
        """Batch-major: ``h`` ``[B, w]``, ``mem`` ``[B, L, w]`` (cross-attention) or
        ``[B, w]`` (a history source)."""
        if mem is not None:
            mem = mem.t() if self.is_self else mem.permute(1, 2, 0)
        return self.fm(h.t(), mem).t()


class EmbedModule(nn.Module):
    """Encoder embedding: token ids ``[B, L]`` -> ``E[:, x_k] + β(k)``."""

    def __init__(self, op: Embed, dtype: torch.dtype) -> None:
        super().__init__()
        self.op_name = op.name
        self.cite = op.cite
        self.max_len = op.max_len
        self.register_buffer("table", _dense(op.table, dtype))
        self.register_buffer("positions", _dense(op.positions, dtype),
                             persistent=not isinstance(op.positions, BinaryPositions))

    def extra_repr(self) -> str:
        return f"tokens={self.table.shape[0]}, width={self.table.shape[1]}, max_len={self.max_len}"

    def fm(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens[:, : self.max_len]
        e = self.table[tokens] + self.positions[: tokens.shape[1]][None]    # [B, L, w]
        return e.permute(1, 2, 0).contiguous()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.fm(tokens).permute(2, 0, 1)


class DecodeModule(nn.Module):
    """The decoder loop (see :class:`tm2nn.nets.Decode`), incremental: one
    :class:`_History` per attended body value (``Decode.histories()``), so step ``i``
    costs O(i)."""

    def __init__(self, op: Decode, dtype: torch.dtype) -> None:
        super().__init__()
        self.op_name = op.name
        self.cite = op.cite
        self.steps = int(op.steps)
        self.prologue = NetModule(op.prologue, dtype)
        self.body = NetModule(op.body, dtype)
        self.register_buffer("init", _dense(op.init, dtype))
        # A computed code (BinaryPositions) is materialised here but not saved.
        self.register_buffer("positions", _dense(op.positions, dtype),
                             persistent=not isinstance(op.positions, BinaryPositions))
        self.histories = {src: torch.from_numpy(cols) for src, cols in op.histories().items()}
        for a in op.body.nodes:
            if isinstance(a, Attention) and a.is_self:
                self.body.op(a.name).bind(self.histories[a.source].numpy())
        self.tap_width = len(op.body.spaces[op.body.outputs[1]])
        #: ``progress(i, steps)``, called about 100 times per decode (for progress bars).
        self.progress = None

    def extra_repr(self) -> str:
        return f"steps={self.steps}, histories={len(self.histories)}"

    def new_context(self, batch: int, capacity: int | None = None) -> dict:
        """Empty histories for a decode of ``capacity`` steps (default: ``steps``)."""
        cap = max(1, self.steps if capacity is None else capacity)
        return {"step": 0, "cross": {},
                "history": {src: _History(cols, cap, batch, self.init.dtype) for src, cols in self.histories.items()}}

    def start(self, mem: torch.Tensor, ctx: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(o_0, tap_0)``: the prologue on the initial decoder input."""
        x = self.init[:, None].expand(-1, mem.shape[2]).contiguous()
        o, tap = self.prologue._run_fm((x, mem), ctx={})
        return o, tap

    def step(self, i: int, o: torch.Tensor, mem: torch.Tensor, ctx: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(o_i, tap_i) = body(o_{i-1} + β(i), memory)``, appending to the histories in ``ctx``."""
        ctx["step"] = i
        x = o + self.positions[i - 1][:, None]
        return tuple(self.body._run_fm((x, mem), ctx=ctx))

    def fm(self, mem: torch.Tensor, progress=None) -> torch.Tensor:
        progress = progress or self.progress
        batch = mem.shape[2]
        ctx = self.new_context(batch)
        taps = torch.empty((self.steps + 1, self.tap_width, batch), dtype=self.init.dtype, device=mem.device)
        o, taps[0] = self.start(mem, ctx)
        every = max(1, self.steps // 100)
        for i in range(1, self.steps + 1):
            o, taps[i] = self.step(i, o, mem, ctx)
            if progress is not None and (i % every == 0 or i == self.steps):
                progress(i, self.steps)
        return taps

    def forward(self, mem: torch.Tensor) -> torch.Tensor:
        """Batch-major: ``mem`` ``[B, L, w]`` -> taps ``[B, steps + 1, tap_w]``."""
        return self.fm(mem.permute(1, 2, 0)).permute(2, 0, 1)


def _emit_op(op: Op, dtype: torch.dtype) -> nn.Module:
    if isinstance(op, Affine):
        return AffineModule(op, dtype)
    if isinstance(op, ReLU):
        return ReLUModule(op)
    if isinstance(op, Activation):
        return ActivationModule(op)
    if isinstance(op, Concat):
        return ConcatModule(op)
    if isinstance(op, Param):
        return ParamModule(op, dtype)
    if isinstance(op, StopGradient):
        return StopGradientModule(op)
    if isinstance(op, Mul):
        return MulModule(op)
    if isinstance(op, Slice):
        return SliceModule(op)
    if isinstance(op, Loop):
        return LoopModule(op, dtype)
    if isinstance(op, Attention):
        return AttentionModule(op, dtype)
    if isinstance(op, Embed):
        return EmbedModule(op, dtype)
    if isinstance(op, Decode):
        return DecodeModule(op, dtype)
    if isinstance(op, PatchMap):
        return PatchMapModule(op, dtype)
    if isinstance(op, MemoryGrid):
        return MemoryGridModule(op, dtype)
    if isinstance(op, GridReadout):
        return GridReadoutModule(op, dtype)
    raise NetIRError(f"the torch emitter does not know {op.kind} op {op.name!r}")


_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]")

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


def _attr_name(name: str, taken: set[str], owner: nn.Module) -> str:
    """A valid, unused attribute name for an op name (deterministic given the op order)."""
    base = _NOT_IDENT.sub("_", name) or "_"
    if base[0].isdigit():
        base = "_" + base
    if keyword.iskeyword(base):
        base += "_"
    cand, i = base, 1
    while cand in taken or hasattr(owner, cand):
        i += 1
        cand = f"{base}_{i}"
    taken.add(cand)
    return cand


class NetModule(nn.Module):
    """A :class:`~tm2nn.nets.Net` as a torch module (see the module docstring)."""

    def __init__(self, net: Net, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating point type, not {dtype}")
        self.net = net
        self.net_name = net.name
        self.input_names = tuple(p.name for p in net.inputs)
        self.input_widths = tuple(len(p.space) for p in net.inputs)
        self.input_kinds = tuple(p.kind for p in net.inputs)
        self.output_kinds = tuple(net.kinds[o] for o in net.outputs)
        self.output_names = tuple(net.outputs)
        self.output_widths = tuple(len(net.spaces[o]) for o in net.outputs)
        self.op_attrs: dict[str, str] = {}
        self.register_buffer("_dtype_probe", torch.empty(0, dtype=dtype), persistent=False)

        outputs = set(net.outputs)
        last_use: dict[str, int] = {}
        for i, op in enumerate(net.nodes):
            for v in op.inputs:
                last_use[v] = i
        slot = {name: i for i, name in enumerate(self.input_names)}
        owned: set[str] = set()  # values this net allocated itself (safe to overwrite)
        taken: set[str] = set()
        plan = []
        for i, op in enumerate(net.nodes):
            mod = _emit_op(op, dtype)
            attr = _attr_name(op.name, taken, self)
            self.add_module(attr, mod)
            self.op_attrs[op.name] = attr
            slot[op.name] = len(slot)
            ins = tuple(slot[v] for v in op.inputs)
            wants_ctx = isinstance(op, Attention)
            relu_inplace = (isinstance(op, ReLU) and op.inputs[0] in owned
                            and last_use[op.inputs[0]] == i and op.inputs[0] not in outputs)
            dead = {v for v in op.inputs if last_use[v] == i and v not in outputs}
            if op.name not in last_use and op.name not in outputs:
                dead.add(op.name)
            frees = tuple(sorted(slot[v] for v in dead))
            plan.append((mod, ins, slot[op.name], frees, relu_inplace, wants_ctx))
            if isinstance(op, Loop) and not op.scan:  # 0 trips return the input itself:
                owned.difference_update(op.inputs)    # neither may be overwritten in place
            elif isinstance(op, (Param, StopGradient)):  # views of a parameter / of the input
                pass
            else:
                owned.add(op.name)
        self._plan = plan
        self._n_slots = len(slot)
        self._slots = slot
        self._out_slots = tuple(slot[o] for o in net.outputs)

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype_probe.dtype

    def op(self, name: str) -> nn.Module:
        """The submodule emitted for the op called ``name``."""
        return getattr(self, self.op_attrs[name])

    def to_net(self) -> Net:
        """A copy of the IR net with this module's current affine weights and biases and param values (after
        training, say), ready for :func:`tm2nn.emit.onnx_emit.to_onnx`.  A sparse trainable
        op keeps its pattern (its stored entries, in their order: ``scatter`` form);
        a dense one is read back entry by entry (zeros dropped).  Ops inside nested nets
        (loop bodies) must not be trainable."""
        import dataclasses

        from tm2nn.nets import SparseMatrix

        nodes = []
        for op in self.net.nodes:
            if isinstance(op, Affine):
                mod = self.op(op.name)
                w = mod.weight.detach().to(torch.float64).cpu().numpy()
                b = mod.bias.detach().to(torch.float64).cpu().numpy().copy()
                if mod.form == "scatter":
                    sm = SparseMatrix(op.weight.shape, op.weight.rows, op.weight.cols, w.copy())
                    if sm.nnz != op.weight.nnz:
                        raise ValueError(f"affine {op.name!r}: a trained weight became 0; the sparse "
                                         "pattern would change")
                elif mod.form == "dense":
                    sm = SparseMatrix.from_dense(w)
                elif mod.form == "diagonal":
                    sm = SparseMatrix.diagonal(w)
                else:
                    sm = op.weight  # ELL ops are never trainable
                op = dataclasses.replace(op, weight=sm, bias=b)
            elif isinstance(op, Param):
                op = dataclasses.replace(op, value=self.op(op.name).value.detach().to(torch.float64).cpu().numpy().copy())
            elif any(isinstance(o, Affine) and o.trainable for sub in getattr(op, "body", None) and [op.body] or []
                     for o in sub.all_ops()):
                raise NotImplementedError(f"op {op.name!r}: trainable ops in nested nets are not written back")
            nodes.append(op)
        return Net(self.net.name, self.net.inputs, tuple(nodes), self.net.outputs, dict(self.net.metadata))

    def extra_repr(self) -> str:
        ins = ", ".join(f"{n}[{w}]" for n, w in zip(self.input_names, self.input_widths))
        outs = ", ".join(f"{n}[{w}]" for n, w in zip(self.output_names, self.output_widths))
        return f"name={self.net_name!r}, inputs=({ins}), outputs=({outs})"

    # -- running ---------------------------------------------------------------------------
    def _prepare(self, inputs) -> list[torch.Tensor]:
        if len(inputs) != len(self.input_names):
            raise TypeError(f"net {self.net_name!r} takes {len(self.input_names)} input(s) "
                            f"{list(self.input_names)}, got {len(inputs)}")
        xs = []
        for name, width, kind, x in zip(self.input_names, self.input_widths, self.input_kinds, inputs):
            if not isinstance(x, torch.Tensor):
                x = torch.as_tensor(x)
            if kind == "tokens":
                if x.dim() != 2 or x.is_floating_point():
                    raise ValueError(f"input {name!r}: expected integer token ids [batch, length], got {x.dtype} {list(x.shape)}")
                if x.numel() and (int(x.min()) < 0 or int(x.max()) >= width):
                    raise ValueError(f"input {name!r}: token ids must lie in [0, {width})")
                xs.append(x.to(torch.int64))
                continue
            if kind == "grid":
                if x.dim() != 3:
                    raise ValueError(f"input {name!r}: expected a grid [batch, height, width], got {list(x.shape)}")
                xs.append(x.to(self.dtype).contiguous())
                continue
            if kind == "sequence":
                if x.dim() != 3 or x.shape[2] != width:
                    raise ValueError(f"input {name!r}: expected shape [batch, length, {width}], got {list(x.shape)}")
                xs.append(x.to(self.dtype).permute(1, 2, 0).contiguous())
                continue
            if x.dim() != 2 or x.shape[1] != width:
                raise ValueError(f"input {name!r}: expected shape [batch, {width}], got {list(x.shape)}")
            if not x.is_floating_point():
                x = x.to(self.dtype)
            xs.append(x.t().contiguous())
        return xs

    def _run_fm(self, xs, keep: bool = False, ctx: dict | None = None) -> list[torch.Tensor]:
        """Run feature-major values; ``ctx`` holds the attention caches of a decode."""
        vals: list = [None] * self._n_slots
        vals[: len(xs)] = xs
        inplace = not keep and not torch.is_grad_enabled()
        for mod, ins, out, frees, relu_inplace, wants_ctx in self._plan:
            if relu_inplace and inplace:
                vals[out] = vals[ins[0]].relu_()
            elif wants_ctx:
                vals[out] = mod.fm(*[vals[i] for i in ins], ctx=ctx)
            else:
                vals[out] = mod.fm(*[vals[i] for i in ins])
            if not keep:
                for f in frees:
                    vals[f] = None
        if keep:
            return vals
        return [vals[s] for s in self._out_slots]

    def forward(self, *inputs: torch.Tensor):
        """One ``[batch, width]`` tensor per input port; returns the output tensor, or a
        tuple in ``net.outputs`` order when the net has several outputs."""
        outs = tuple(_batch_major(o, k) for o, k in zip(self._run_fm(self._prepare(inputs)), self.output_kinds))
        return outs[0] if len(outs) == 1 else outs

    def trace(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every value of the net (inputs and op outputs, by name), ``[batch, width]`` each.
        A loop's value is the one after its last trip."""
        vals = self._run_fm(self._prepare(inputs), keep=True)
        kinds = {**{p.name: p.kind for p in self.net.inputs}, **self.net.kinds}
        return {name: _batch_major(vals[s], kinds[name]) for name, s in self._slots.items()}


def _batch_major(x: torch.Tensor, kind: str) -> torch.Tensor:
    """Feature-major ``[w, B]`` / ``[L, w, B]`` -> ``[B, w]`` / ``[B, L, w]``; grids are
    batch-major already, ``grids`` ``[T, B, H, W]`` -> ``[B, T, H, W]``; tokens stay."""
    if kind in ("tokens", "grid"):
        return x
    if kind == "grids":
        return x.transpose(0, 1).contiguous()
    return x.t().contiguous() if x.dim() == 2 else x.permute(2, 0, 1).contiguous()


def to_torch(net: Net, dtype: torch.dtype = torch.float32) -> NetModule:
    """Emit ``net`` as a :class:`NetModule` whose weights have ``dtype``."""
    return NetModule(net, dtype)


def _module_dtype(module: nn.Module) -> torch.dtype:
    if isinstance(module, NetModule):
        return module.dtype
    for t in (*module.parameters(), *module.buffers()):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def run_torch(net_or_module: Net | nn.Module, *arrays, batch_size: int = 4096):
    """Run numpy ``[n, width]`` arrays through the module (emitted in float32 if given a
    Net) under ``no_grad``, ``batch_size`` rows at a time.  Returns a numpy array, or a
    tuple of them when the net has several outputs."""
    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    module = to_torch(net_or_module) if isinstance(net_or_module, Net) else net_or_module
    dtype = _module_dtype(module)
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    arrs = [np.asarray(a) for a in arrays]
    lengths = {a.shape[0] if a.ndim else -1 for a in arrs}
    if len(lengths) > 1 or -1 in lengths:
        raise ValueError(f"input arrays must be [n, width] with one n, got shapes {[a.shape for a in arrs]}")
    n = lengths.pop() if lengths else 0
    chunks: list[list[np.ndarray]] = []
    with torch.no_grad():
        for s in range(0, max(n, 1), batch_size):
            xs = [torch.from_numpy(np.ascontiguousarray(a[s:s + batch_size], dtype=np_dtype)) for a in arrs]
            y = module(*xs)
            ys = (y,) if isinstance(y, torch.Tensor) else tuple(y)
            chunks.append([t.detach().cpu().numpy() for t in ys])
    outs = [c[0] if len(chunks) == 1 else np.concatenate(c) for c in zip(*chunks)]
    return outs[0] if len(outs) == 1 else tuple(outs)
