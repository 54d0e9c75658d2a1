"""NetIR -> ``torch.nn.Module``.

:func:`to_torch` builds a :class:`NetModule` with one submodule per op, registered under
the op's name (sanitised to an attribute name), so ``print(module)`` and
``state_dict()`` read like the net: ``layer3_and.weight``, ``loop.body.step.bias``.  Each
submodule's ``extra_repr`` ends with the op's citation (``op.cite``).

Parameters
----------
Every tensor of every op (:meth:`tm2nn.nets.Op.tensors`: an affine's ``weight`` and
``bias``, an attention's ``wq`` .. ``null_value``, an embedding's ``table`` and
``positions``, a decoder's ``init`` and ``positions``, a memory layer's ``weight``, a
param's ``value``) is one :class:`torch.nn.Parameter` named ``<op attribute>.<tensor>``,
so that ``sum(p.numel() for p in module.parameters()) == net.info()["params_nonzero"]``
(nested nets included):

* a *fixed* tensor (the construction's, ``requires_grad=False``) holds exactly its nonzero
  entries: the whole tensor in its IR shape when it has no zero, else a ``[nnz]`` vector in
  row-major order (a :class:`~tm2nn.nets.SparseMatrix`'s own order, so ``weight[e]`` is
  the IR's ``weight.vals[e]``) with an int64 buffer ``<tensor>_index`` holding each
  entry's flat row-major position in the IR tensor (``row * n_in + col``);
* a *trainable* tensor (``requires_grad=True``: an ``Affine(trainable=True)``'s weight,
  and its bias unless ``train_bias=False``; a :class:`~tm2nn.nets.Param`'s value; a
  trainable :class:`~tm2nn.nets.MemoryGrid`'s W) has every entry as a free parameter: the
  whole tensor in its IR shape, except a sparse trainable weight, whose parameters are its
  ``[nnz]`` stored entries (with ``weight_index``; only existing edges train, see
  :func:`tm2nn.emit.affine_form`);
* a computed positional code (:class:`~tm2nn.nets.positions.BinaryPositions`) is not a
  weight: the Parameter ``positions`` is its placement matrix (``[width, bits]``, one 1 per
  bit, packed as above) and the code itself is the buffer ``positions_code``
  (``[length, bits]``); the position table is ``positions_code @ placementᵀ``.

Buffers (index vectors, the ELL column table ``cols``, a scatter affine's ``rows`` and
``cols``, a slice's ``index``) are structure, not weights, and not persistent:
``state_dict()`` holds the parameters and nothing else.  :meth:`OpModule.dense_tensor`
(``AffineModule.dense_weight()``, ``dense_bias()``) gives any tensor in its IR shape.

Runtime
-------
Each submodule materialises the runtime form of its fixed tensors once (an affine weight as
dense, diagonal, ELL (``[k, n_out]``: output ``i`` is ``sum_j w[j, i] * x[cols[j, i]]``) or
scatter, as :func:`tm2nn.emit.affine_form` chose (``module.<op>.form``); attention
matrices restricted to the rows and columns they use; position tables, ...) and caches it.
The cache is rebuilt when a parameter it reads changes: its identity, ``_version`` and
storage are checked, so ``load_state_dict``, ``with torch.no_grad(): p.mul_(2)`` and
``p.data = t`` are all seen.  When grad is enabled and a fixed parameter requires grad
(after ``requires_grad_(True)``), the form is materialised differentiably on every call,
so gradients reach the packed values.  Trainable tensors are used as they are.

Layout and hooks
----------------
The net runs feature-major (``[width, batch]``) inside; :meth:`NetModule.forward` takes
and returns ``[batch, width]`` (a sequence ``[batch, length, width]``, a grid
``[batch, height, width]``).  Each op submodule's own ``forward`` is batch-major too, so
a submodule can be called on its own.  The net calls a submodule's feature-major ``fm``
directly, unless the submodule has forward, pre-forward or backward hooks (its own, or
torch's global ones) or its ``forward`` was replaced on the instance (as interpretability
tools such as nnsight do): then it calls ``module(...)`` with batch-major values
(transposed in and out), so the hooks see ``[batch, width]`` values and a hook's return
value replaces the output.  Inside loop and decoder bodies that happens once per trip or
step (a hook on the body net itself fires once per trip too).  :meth:`NetModule.trace`
gives every intermediate value.

:meth:`NetModule.to_net` writes the module's current parameter values back into a copy of
the IR net (nested bodies included), which the ONNX emitter can then export.
"""

from __future__ import annotations

import contextlib
import dataclasses
import keyword
import math
import re

import numpy as np
import torch
from torch import nn
from torch.nn.modules import module as _torch_module

from tm2nn import interrupt
from tm2nn.emit import BULK_BATCH, STEP_BATCH, affine_form
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
    SparseMatrix,
    StopGradient,
)

#: Refuse a dense weight bigger than this (it would not be a construction of this project).
DENSE_MAX_BYTES = 4 << 30
#: The torch module materialises a decoder's positional tables (``[steps, w]``, and the
#: encoder's ``[max_len, w]``); it refuses beyond this many entries.  The ONNX model
#: computes positions from the loop counter, and the index engine needs no table.
MAX_POSITION_ENTRIES = 50_000_000


# -- layouts and hooks ---------------------------------------------------------------------
def _bm(x: torch.Tensor, kind: str) -> torch.Tensor:
    """A feature-major value as a batch-major view (the layout hooks see)."""
    if kind == "vector":
        return x.t()
    if kind == "sequence":
        return x.permute(2, 0, 1)
    if kind == "grids":
        return x.transpose(0, 1)
    return x  # tokens and grids are batch-major inside too


def _fm(x: torch.Tensor, kind: str) -> torch.Tensor:
    """A batch-major value as a contiguous feature-major tensor."""
    if kind == "vector":
        return x.t().contiguous()
    if kind == "sequence":
        return x.permute(1, 2, 0).contiguous()
    if kind == "grids":
        return x.transpose(0, 1).contiguous()
    return x


def _global_hooks() -> bool:
    m = _torch_module
    return bool(m._global_forward_hooks or m._global_forward_pre_hooks
                or m._global_backward_hooks or m._global_backward_pre_hooks)


def _hooked(d: dict) -> bool:
    """Whether the module whose ``__dict__`` is ``d`` must be called as ``module(...)``."""
    return bool(d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"]
                or d["_backward_pre_hooks"] or "forward" in d)


def _call_hooked(mod: "OpModule", xs: list, ctx: dict | None) -> torch.Tensor:
    """Call ``mod`` through ``nn.Module.__call__`` on batch-major values (hooks fire)."""
    args = [_bm(x, k) for x, k in zip(xs, mod.in_kinds)]
    y = mod(*args) if ctx is None else mod(*args, ctx=ctx)
    return _fm(y, mod.out_kind)


def _net_fm(net: "NetModule", xs, ctx: dict | None = None) -> list[torch.Tensor]:
    """Run a nested net on feature-major values: its fast path, or ``net(...)`` when the
    net itself is hooked (once per loop trip or decoder step)."""
    if _global_hooks() or _hooked(net.__dict__):
        args = [_bm(x, k) for x, k in zip(xs, net.input_kinds)]
        ys = net(*args) if ctx is None else net(*args, ctx=ctx)
        if len(net.output_kinds) == 1:
            ys = (ys,)
        return [_fm(y, k) for y, k in zip(ys, net.output_kinds)]
    return net._run_fm(xs) if ctx is None else net._run_fm(xs, ctx=ctx)


# -- packed tensors ------------------------------------------------------------------------
def _flat_entries(t) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """``(values, flat row-major positions, shape)`` of an IR tensor's nonzero entries."""
    if isinstance(t, SparseMatrix):
        return t.vals, t.rows * t.shape[1] + t.cols, tuple(t.shape)
    a = np.asarray(t, dtype=np.float64)
    flat = np.flatnonzero(a)
    return a.reshape(-1)[flat], flat, tuple(a.shape)


def _dense_np(t) -> np.ndarray:
    return t.dense() if isinstance(t, SparseMatrix) else np.asarray(t, dtype=np.float64)


class OpModule(nn.Module):
    """Base of the op submodules: the op's tensors as Parameters (see the module doc), the
    cached runtime form (:meth:`_runtime`, built by the subclass's ``_build``), a
    batch-major ``forward`` around the feature-major ``fm``, and :meth:`to_op`."""

    def __init__(self, op: Op) -> None:
        super().__init__()
        self.op_name = op.name
        self.cite = getattr(op, "cite", "") or ""
        self.in_kinds = tuple(op.in_kinds())
        self.out_kind = op.out_kind
        #: the IR op this module was emitted from (:meth:`to_op` writes into a copy)
        self.ir_op = op
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._packed: dict[str, bool] = {}
        self._trainable: set[str] = set()
        self._rt = None
        self._rt_key = None

    # -- tensors -------------------------------------------------------------------------
    def _add_tensor(self, name: str, t, dtype: torch.dtype, trainable: bool = False) -> None:
        """Register the IR tensor ``t`` as the Parameter ``name`` (module doc's layout)."""
        vals, flat, shape = _flat_entries(t)
        n = math.prod(shape)
        if trainable:
            packed = isinstance(t, SparseMatrix) and 0 < vals.size < n
        else:
            packed = vals.size < n
        # copies: a Parameter never shares memory with the IR's arrays (training or editing
        # the module must not change the net it came from)
        if packed:
            data = torch.from_numpy(np.ascontiguousarray(vals)).to(dtype=dtype, copy=True)
            self.register_buffer(f"{name}_index", torch.from_numpy(flat.astype(np.int64)), persistent=False)
        else:
            data = torch.from_numpy(np.ascontiguousarray(_dense_np(t)).reshape(shape)).to(dtype=dtype, copy=True)
        self.register_parameter(name, nn.Parameter(data, requires_grad=trainable))
        self._shapes[name] = shape
        self._packed[name] = packed
        if trainable:
            self._trainable.add(name)

    def dense_tensor(self, name: str) -> torch.Tensor:
        """The tensor ``name`` in its IR shape, zeros filled in (differentiable with respect
        to the Parameter when grad is enabled and it requires grad)."""
        p = self._parameters[name]
        if not self._packed[name]:
            return p
        idx = self._buffers[f"{name}_index"]
        return p.new_zeros(math.prod(self._shapes[name])).index_put_((idx,), p).view(self._shapes[name])

    def _entries(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(values, flat row-major positions)`` of the stored entries of tensor ``name``."""
        p = self._parameters[name]
        if self._packed[name]:
            return p, self._buffers[f"{name}_index"]
        return p.reshape(-1), torch.arange(p.numel(), device=p.device)

    # -- the cached runtime form ---------------------------------------------------------
    def _build(self):
        """The runtime form of the fixed tensors (subclasses; trainable ones are read
        directly, never through the cache)."""
        return None

    def _runtime(self):
        """The cached :meth:`_build`, rebuilt when a fixed parameter changed (identity,
        ``_version``, storage) or requires grad while grad is enabled."""
        key = self._rt_key
        if key is not None:
            ps = self._parameters
            for name, p, ver, ptr, _alias in key:
                q = ps[name]
                if (q is not p or q._version != ver or q.data_ptr() != ptr
                        or (q.requires_grad and torch.is_grad_enabled())):
                    break
            else:
                return self._rt
        return self._refresh()

    def _refresh(self):
        ps = self._parameters
        fixed = [n for n in ps if n not in self._trainable]
        diff = torch.is_grad_enabled() and any(ps[n].requires_grad for n in fixed)
        with contextlib.ExitStack() as stack:
            if torch.is_inference_mode_enabled():  # a cache must be usable outside it
                stack.enter_context(torch.inference_mode(False))
            if not diff:
                stack.enter_context(torch.no_grad())
            rt = self._build()
        if diff:  # differentiable: rebuilt on every call, never cached
            self._rt = self._rt_key = None
            return rt
        # the alias keeps the old storage alive, so a new one cannot reuse its address
        self._rt_key = tuple((n, ps[n], ps[n]._version, ps[n].data_ptr(), ps[n].detach()) for n in fixed)
        self._rt = rt
        return rt

    def _invalidate(self) -> None:
        self._rt = self._rt_key = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_rt"] = state["_rt_key"] = None  # caches are rebuilt, never saved or copied
        return state

    # -- running -------------------------------------------------------------------------
    def fm(self, *xs: torch.Tensor) -> torch.Tensor:  # pragma: no cover - every op overrides
        raise NotImplementedError

    def forward(self, *xs: torch.Tensor, **kw) -> torch.Tensor:
        """Batch-major: ``[batch, width]`` vectors, ``[batch, length, width]`` sequences,
        ``[batch, height, width]`` grids."""
        return _bm(self.fm(*[_fm(x, k) for x, k in zip(xs, self.in_kinds)], **kw), self.out_kind)

    # -- writing back --------------------------------------------------------------------
    def ir_value(self, name: str):
        """The current value of tensor ``name`` as the IR stores it (a SparseMatrix or a
        float64 array; an unchanged tensor is the IR's own object, and an entry equal to the
        IR's value cast to the module's dtype keeps the IR's float64 value)."""
        orig_field = getattr(self.ir_op, name)
        orig = self.ir_op.tensors()[name]
        p = self._parameters[name].detach().cpu()
        shape = self._shapes[name]
        if self._packed[name]:
            ref, flat, _ = _flat_entries(orig)
            flat = self._buffers[f"{name}_index"].cpu().numpy()
        else:
            ref = _dense_np(orig).reshape(-1)
            flat = np.arange(ref.size)
        cur = p.reshape(-1)
        same = (torch.from_numpy(np.ascontiguousarray(ref)).to(p.dtype) == cur).numpy()
        if same.all():
            return orig_field
        vals = np.where(same, ref, cur.to(torch.float64).numpy())
        if name == "positions" and getattr(self, "binary_positions", None) is not None:
            placement = np.zeros(math.prod(shape))
            placement[flat] = vals
            code = self._buffers["positions_code"].detach().to(torch.float64).cpu().numpy()
            return code @ placement.reshape(shape).T
        if isinstance(orig, SparseMatrix):
            if name in self._trainable and self._packed[name] and np.any(vals == 0):
                raise ValueError(f"{self.ir_op.kind} {self.op_name!r}: a trained {name} entry became 0; "
                                 "the sparse pattern would change")
            n_in = shape[1]
            return SparseMatrix(shape, flat // n_in, flat % n_in, vals)
        out = np.zeros(math.prod(shape))
        out[flat] = vals
        return out.reshape(shape)

    def _nested(self) -> dict:
        """Nested nets written back (loop, patch-map, readout bodies; decoder nets)."""
        return {}

    def to_op(self) -> Op:
        """The IR op with this module's current parameter values."""
        changes = {}
        for name in self._shapes:
            v = self.ir_value(name)
            if v is not getattr(self.ir_op, name):
                changes[name] = v
        changes.update(self._nested())
        return dataclasses.replace(self.ir_op, **changes) if changes else self.ir_op

    def _repr(self, s: str) -> str:
        """``extra_repr`` text with the op's citation appended."""
        if not self.cite:
            return s
        return f"{s}, cite={self.cite!r}" if s else f"cite={self.cite!r}"


# -- ops -----------------------------------------------------------------------------------
class AffineModule(OpModule):
    """``y = W x + b`` in the form chosen by :func:`tm2nn.emit.affine_form`."""

    def __init__(self, op: Affine, dtype: torch.dtype, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        w = op.weight
        self.form = affine_form(op, batch)
        self.trainable = bool(op.trainable)
        self.n_out, self.n_in = w.shape
        self.nnz = w.nnz
        self.k = 0
        if self.form == "dense":
            nbytes = self.n_out * self.n_in * torch.empty(0, dtype=dtype).element_size()
            if nbytes > DENSE_MAX_BYTES:
                raise NetIRError(f"affine {op.name!r}: a dense {self.n_out}x{self.n_in} weight "
                                 f"would take {nbytes / 2**30:.1f} GiB")
        self._add_tensor("weight", w, dtype, trainable=self.trainable)
        self._add_tensor("bias", op.bias, dtype, trainable=self.trainable and bool(op.train_bias))
        if self.form == "ell":
            ell_cols, _ = w.ell()
            self.k = ell_cols.shape[1]
            self.register_buffer("cols", torch.from_numpy(np.ascontiguousarray(ell_cols.T)), persistent=False)
        elif self.form == "scatter":
            self.register_buffer("rows", torch.from_numpy(w.rows.astype(np.int64)), persistent=False)
            self.register_buffer("cols", torch.from_numpy(w.cols.astype(np.int64)), persistent=False)

    def extra_repr(self) -> str:
        s = f"{self.n_in} -> {self.n_out}, form={self.form}, nnz={self.nnz}"
        if self.form == "ell":
            s += f", k={self.k}"
        if self.trainable:
            s += ", trainable=True"
        return self._repr(s)

    def dense_weight(self) -> torch.Tensor:
        """``W`` as a dense ``[n_out, n_in]`` tensor (differentiable when it requires grad)."""
        return self.dense_tensor("weight")

    def dense_bias(self) -> torch.Tensor:
        """``b`` as a dense ``[n_out]`` tensor."""
        return self.dense_tensor("bias")

    def _build(self):
        diff = torch.is_grad_enabled()  # _refresh enables grad only for a differentiable build
        b = None if "bias" in self._trainable else self.dense_tensor("bias").unsqueeze(1)
        if self.trainable:
            return (b,)
        form = self.form
        if form == "dense":
            return (self.dense_tensor("weight"), b)
        vals, flat = self._entries("weight")
        if form == "diagonal":
            d = vals.new_zeros(self.n_out).index_put_((flat // self.n_in,), vals)
            return (d.unsqueeze(1), b)
        if form == "ell":
            rows = flat // self.n_in
            counts = torch.bincount(rows, minlength=self.n_out)
            slot = torch.arange(rows.numel(), device=rows.device) - (counts.cumsum(0) - counts)[rows]
            w = vals.new_zeros(self.k * self.n_out).index_put_((slot * self.n_out + rows,), vals)
            w = w.view(self.k, self.n_out)
            cols = self._buffers["cols"]
            return (tuple(w[j].unsqueeze(1) for j in range(self.k)),
                    tuple(cols[j] for j in range(self.k)), b, diff)
        return (vals.unsqueeze(1), self._buffers["rows"], self._buffers["cols"], b, diff)

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        """Feature-major: ``x`` is ``[n_in, batch]``."""
        rt = self._runtime()
        if self.trainable:
            return self._fm_trainable(x, rt[0])
        form = self.form
        if form == "ell":
            ws, cs, b, diff = rt
            if diff:  # the weights require grad: no in-place products
                acc = x.index_select(0, cs[0]) * ws[0]
                for j in range(1, len(ws)):
                    acc = acc + x.index_select(0, cs[j]) * ws[j]
                return acc + b
            # Accumulate in place into the fresh gathered tensor: allocating large outputs
            # costs more than the arithmetic.  Autograd-safe for x: index_select does not
            # save its output, and neither mul_ nor addcmul_ needs the value they overwrite
            # to differentiate with respect to x.
            acc = x.index_select(0, cs[0]).mul_(ws[0])
            for j in range(1, len(ws)):
                acc.addcmul_(x.index_select(0, cs[j]), ws[j])
            return acc.add_(b)
        if form == "dense":
            w, b = rt
            return torch.addmm(b, w, x)
        if form == "diagonal":
            d, b = rt
            return x.mul(d).add_(b)
        vals, rows, cols, b, diff = rt
        g = x.index_select(0, cols)
        g = g * vals if diff else g.mul_(vals)
        return b.expand(self.n_out, x.shape[1]).clone().index_add_(0, rows, g)

    def _fm_trainable(self, x: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        w = self._parameters["weight"]
        if b is None:
            b = self._parameters["bias"].unsqueeze(1)
        if self.form == "scatter":
            # out of place: autograd needs the gathered x for the weight's gradient.
            # scatter_add_ (not index_add_): same sums, ~2.5x faster on CPU for wide batches.
            g = x.index_select(0, self._buffers["cols"]) * w.unsqueeze(1)
            idx = self._buffers["rows"].unsqueeze(1).expand_as(g)
            return b.expand(self.n_out, x.shape[1]).clone().scatter_add_(0, idx, g)
        return torch.addmm(b, w, x)


class ReLUModule(OpModule):
    def __init__(self, op: ReLU) -> None:
        super().__init__(op)

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # elementwise: any layout
        return torch.relu(x)


class ActivationModule(OpModule):
    """Elementwise ``fn(x)`` (:class:`tm2nn.nets.Activation`), the registry's torch code:
    autograd gives the function's derivative (see :mod:`tm2nn.nets.activations`)."""

    def __init__(self, op: Activation) -> None:
        super().__init__(op)
        from tm2nn.nets.activations import get

        self.fn = op.fn
        self._impl = get(op.fn).torch

    def extra_repr(self) -> str:
        return self._repr(f"fn={self.fn}")

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return self._impl(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # elementwise: any layout
        return self._impl(x)


class ParamModule(OpModule):
    """A free trainable vector (:class:`tm2nn.nets.Param`), the same for every batch row."""

    def __init__(self, op: Param, dtype: torch.dtype) -> None:
        super().__init__(op)
        self._add_tensor("value", op.value, dtype, trainable=True)

    def extra_repr(self) -> str:
        return self._repr(f"n={self._parameters['value'].numel()}, trainable=True")

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return self._parameters["value"].unsqueeze(1).expand(-1, x.shape[1])


class StopGradientModule(OpModule):
    """``detach``: the value passes, the derivative is 0 (Welper's stop-gradient)."""

    def __init__(self, op: StopGradient) -> None:
        super().__init__(op)

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return x.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # elementwise: any layout
        return x.detach()


class MulModule(OpModule):
    def __init__(self, op: Mul) -> None:
        super().__init__(op)

    def fm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # elementwise
        return a * b


class ConcatModule(OpModule):
    def __init__(self, op: Concat) -> None:
        super().__init__(op)
        self.n_inputs = len(op.inputs)

    def extra_repr(self) -> str:
        return f"n_inputs={self.n_inputs}"

    def fm(self, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat(xs, dim=0)


class SliceModule(OpModule):
    def __init__(self, op: Slice) -> None:
        super().__init__(op)
        self.register_buffer("index", torch.tensor(op.indices, dtype=torch.int64), persistent=False)

    def extra_repr(self) -> str:
        return f"n={self._buffers['index'].numel()}"

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, self._buffers["index"])


class LoopModule(OpModule):
    """Apply ``body`` ``trips`` times (weights shared between iterations); with
    ``scan``, return every state stacked on a new first axis (feature-major inside)."""

    def __init__(self, op: Loop, dtype: torch.dtype, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.trips = int(op.trips)
        self.scan = bool(op.scan)
        self.until_fixed = bool(op.until_fixed)
        self.body = NetModule(op.body, dtype, batch)
        #: ``progress(i, trips)``, called about 100 times per run (for progress bars).
        self.progress = None
        #: With grad enabled, run the trips in checkpointed segments of ~√trips
        #: (:mod:`tm2nn.emit.torch_loop_grad`): exact gradients, ~2√trips trips stored.
        self.checkpoint = False

    def extra_repr(self) -> str:
        return (f"trips={self.trips}" + (", scan=True" if self.scan else "")
                + (", until_fixed=True" if self.until_fixed else ""))

    def _nested(self) -> dict:
        return {"body": self.body.to_net()}

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        from tm2nn.emit.torch_loop_grad import FixedPointTail, run_checkpointed, tail_allowed

        states = [x] if self.scan else None
        every = max(1, self.trips // 100)
        body = self.body
        tail = tail_allowed(body)
        grad = torch.is_grad_enabled() and (x.requires_grad or not tail)
        if grad and self.checkpoint and states is None:
            return run_checkpointed(lambda t: _net_fm(body, (t,))[0], x, self.trips, self.until_fixed,
                                    self.progress, tail=tail)
        for i in range(1, self.trips + 1):
            y = _net_fm(body, (x,))[0]
            fixed = self.until_fixed and torch.equal(y, x)
            if fixed and grad and i < self.trips:  # the later trips' backward, exactly
                if states is not None or not tail:
                    fixed = False  # a scan, or a body with its own gradients: run every trip
                else:
                    y = FixedPointTail.apply(y, lambda t: _net_fm(body, (t,))[0], self.trips - i)
            x = y
            if states is not None:
                states.append(x)
            if self.progress is not None and (fixed or i % every == 0 or i == self.trips):
                self.progress(self.trips if fixed else i, self.trips)
            if interrupt.requested() and not fixed and i < self.trips:  # Ctrl-C (interrupt.graceful)
                raise interrupt.Interrupted(i, self.trips, what="network steps", partial=_loop_partial(x, states))
            if fixed:  # every later trip gives x again (Loop.until_fixed)
                if states is not None:
                    states.extend([x] * (self.trips - i))
                break
        return torch.stack(states) if states is not None else x


def _loop_partial(x: torch.Tensor, states: list | None) -> torch.Tensor:
    """A loop's value so far, batch-major as its output would be: the states stacked
    (``scan``) or the current one; grid states are ``[B, H, W]``, vectors ``[w, B]``."""
    grid = x.dim() == 3
    if states is None:
        return _batch_major(x, "grid" if grid else "vector")
    return _batch_major(torch.stack(states), "grids" if grid else "sequence")


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


class _AttentionForm:
    """The runtime tensors of an attention op (:meth:`AttentionModule._build`)."""

    __slots__ = ("wq", "bq", "wk", "bk", "wv", "bv", "null_key", "null_value", "rows", "cols",
                 "wk_c_t", "wv_c")


class AttentionModule(OpModule):
    """Hard-max (ties averaged) or softmax attention with a null key/value (see
    :class:`tm2nn.nets.Attention`).  Values are computed only on ``value_rows``.

    Cross-attention precomputes the memory's keys and values, batch-major ``[B, 1 + L, d]``
    with the null in slot 0.  Self-attention keeps no keys: it reads the history ``X``
    ``[B, c, n]`` of the attended coordinates (``bind``) and uses linearity,
    scores ``X (W_kᵀ q) + b_k·q`` and mixed values ``W_v (Σ a_j x_j) + (Σ a_j) b_v``, so
    one cache serves every op over the same history."""

    def __init__(self, op: Attention, dtype: torch.dtype) -> None:
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
        from tm2nn.options import OptionError

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


class EmbedModule(OpModule):
    """Encoder embedding: token ids ``[B, L]`` -> ``E[:, x_k] + β(k)``."""

    def __init__(self, op: Embed, dtype: torch.dtype) -> None:
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


class DecodeModule(OpModule):
    """The decoder loop (see :class:`tm2nn.nets.Decode`), incremental: one
    :class:`_History` per attended body value (``Decode.histories()``), so step ``i``
    costs O(i)."""

    def __init__(self, op: Decode, dtype: torch.dtype) -> None:
        super().__init__(op)
        self.steps = int(op.steps)
        # the per-step layers run on the inputs decoded together (tm2nn.emit.STEP_BATCH)
        self.prologue = NetModule(op.prologue, dtype, STEP_BATCH)
        self.body = NetModule(op.body, dtype, STEP_BATCH)
        self._add_tensor("init", op.init, dtype)
        _add_positions(self, op.positions, dtype)
        self.histories = {src: torch.from_numpy(cols) for src, cols in op.histories().items()}
        for a in op.body.nodes:
            if isinstance(a, Attention) and a.is_self:
                self.body.op(a.name).bind(self.histories[a.source].numpy())
        self.tap_width = len(op.body.spaces[op.body.outputs[1]])
        #: ``progress(i, steps)``, called about 100 times per decode (for progress bars).
        self.progress = None

    def extra_repr(self) -> str:
        return self._repr(f"steps={self.steps}, histories={len(self.histories)}")

    def _build(self):
        return self.dense_tensor("init"), _position_table(self)

    def _nested(self) -> dict:
        return {"prologue": self.prologue.to_net(), "body": self.body.to_net()}

    def new_context(self, batch: int, capacity: int | None = None) -> dict:
        """Empty histories for a decode of ``capacity`` steps (default: ``steps``)."""
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

    def fm(self, mem: torch.Tensor, progress=None) -> torch.Tensor:
        progress = progress or self.progress
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


def _emit_op(op: Op, dtype: torch.dtype, batch: int) -> nn.Module:
    if isinstance(op, Affine):
        return AffineModule(op, dtype, batch)
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
        return LoopModule(op, dtype, batch)
    if isinstance(op, Attention):
        return AttentionModule(op, dtype)
    if isinstance(op, Embed):
        return EmbedModule(op, dtype)
    if isinstance(op, Decode):
        return DecodeModule(op, dtype)
    if isinstance(op, (PatchMap, MemoryGrid, GridReadout)):
        from tm2nn.emit.torch_grid import GridReadoutModule, MemoryGridModule, PatchMapModule

        cls = {PatchMap: PatchMapModule, MemoryGrid: MemoryGridModule, GridReadout: GridReadoutModule}[type(op)]
        return cls(op, dtype)
    raise NetIRError(f"the torch emitter does not know {op.kind} op {op.name!r}")


def __getattr__(name: str):
    # the grid modules live in torch_grid (which imports this module)
    if name in ("PatchMapModule", "MemoryGridModule", "GridReadoutModule"):
        from tm2nn.emit import torch_grid

        return getattr(torch_grid, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    if base not in taken and hasattr(owner, base):  # a module attribute (``trace``, ``forward``)
        base += "_op"
    cand, i = base, 1
    while cand in taken or hasattr(owner, cand):
        i += 1
        cand = f"{base}_{i}"
    taken.add(cand)
    return cand


class NetModule(nn.Module):
    """A :class:`~tm2nn.nets.Net` as a torch module (see the module docstring); ``batch``
    is the batch its affine ops are expected to run at (:func:`tm2nn.emit.affine_form`)."""

    def __init__(self, net: Net, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
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
            mod = _emit_op(op, dtype, batch)
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
            plan.append((mod, mod.__dict__, ins, slot[op.name], frees, relu_inplace, wants_ctx))
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
        """A copy of the IR net with this module's current parameter values (after training
        or editing, say), nested nets included, ready for
        :func:`tm2nn.emit.onnx_emit.to_onnx`.  Entries equal to the IR's (in the module's
        dtype) keep the IR's float64 values, so an unedited module gives the net back; a
        sparse trainable weight keeps its pattern (a trained entry that became 0 is an
        error), other tensors drop the entries that became 0."""
        nodes = tuple(self.op(op.name).to_op() for op in self.net.nodes)
        return Net(self.net.name, self.net.inputs, nodes, self.net.outputs, dict(self.net.metadata))

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
        """Run feature-major values; ``ctx`` holds the attention caches of a decode.  A
        hooked submodule is called as ``module(...)`` on batch-major values (module doc)."""
        vals: list = [None] * self._n_slots
        vals[: len(xs)] = xs
        inplace = not keep and not torch.is_grad_enabled()
        hooks = _global_hooks()
        protected = None  # values a hook has seen: never overwritten in place
        for mod, d, ins, out, frees, relu_inplace, wants_ctx in self._plan:
            if hooks or d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"] \
                    or d["_backward_pre_hooks"] or "forward" in d:
                vals[out] = _call_hooked(mod, [vals[i] for i in ins], ctx if wants_ctx else None)
                if protected is None:
                    protected = set()
                protected.update(ins)
                protected.add(out)
            elif relu_inplace and inplace and (protected is None or ins[0] not in protected):
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

    def forward(self, *inputs: torch.Tensor, ctx: dict | None = None):
        """One ``[batch, width]`` tensor per input port; returns the output tensor, or a
        tuple in ``net.outputs`` order when the net has several outputs.  (``ctx``: the
        attention caches when a decoder body is called this way.)"""
        outs = tuple(_batch_major(o, k) for o, k in zip(self._run_fm(self._prepare(inputs), ctx=ctx),
                                                          self.output_kinds))
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


@contextlib.contextmanager
def loop_progress(module: nn.Module, progress):
    """Within the block, every loop and decoder of ``module`` calls ``progress(i, total)``
    about 100 times per run (for progress bars); nothing when ``progress`` is None."""
    loops = ([m for m in module.modules() if isinstance(m, (LoopModule, DecodeModule))]
             if progress and module is not None else [])
    for m in loops:
        m.progress = progress
    try:
        yield
    finally:
        for m in loops:
            m.progress = None


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
