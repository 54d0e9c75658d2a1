"""The torch module of a net: :class:`NetModule`, the base of every op's module
(:class:`OpModule`), and the torch emitter's table (:data:`TORCH_MODULES`, filled with
:func:`torch_emitter` beside each op's module class).

:func:`tm2nn.emit.torch_emit.to_torch` builds a :class:`NetModule` with one submodule per op, registered under
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

Moving
------
Every tensor a module reads is a Parameter or a buffer (:func:`hidden_tensors` lists any
other), so ``.to(device)``, ``.to(dtype)``, ``.double()`` and ``.half()`` move it all; a move
drops the caches (:meth:`OpModule._apply`), and a change of dtype rounds the construction's
float64 values once into the new dtype (edited entries keep theirs).  Inputs are moved to
the module's device and dtype.  A loop or decoder run under grad measures what autograd
keeps in its first trips (:func:`saved_bytes`) and refuses a backward pass that would not
fit before going on.

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

from tm2nn import threads
from tm2nn.emit import BULK_BATCH
from tm2nn.nets import Attention, Loop, Net, NetIRError, Op, Param, ReLU, SparseMatrix, StopGradient
from tm2nn.nets.ops import READOUT_KINDS, network_outputs, readout_split


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

    def __init__(self, op: Op, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        """Every op module is built as ``cls(op, dtype, batch)`` (:func:`emit_module`): the
        weights' dtype, and the batch :func:`tm2nn.emit.affine_form` plans for; a module
        reads what it needs of them."""
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
        self.__dict__.pop("_batched", None)

    # -- moving ----------------------------------------------------------------------------
    def _apply(self, fn, recurse: bool = True):
        """``.to(device)``, ``.to(dtype)``, ``.double()``, ``.half()``: torch moves the
        Parameters and buffers (every tensor a module reads is one, see
        :func:`hidden_tensors`); the cached runtime form is dropped and rebuilt there.  A
        tensor whose dtype changed gets the construction's values rounded once into the new
        dtype (:meth:`_recast`), so ``module.double()`` is exact like ``to_torch(net,
        torch.float64)`` rather than float32-rounded."""
        before = {n: p.dtype for n, p in self._parameters.items() if p is not None}
        out = super()._apply(fn, recurse)
        self._invalidate()
        for name, p in self._parameters.items():
            if name in self._shapes and p.dtype != before.get(name) and p.is_floating_point() \
                    and p.device.type != "meta":
                self._recast(name, before[name])
        return out

    def _recast(self, name: str, old: torch.dtype) -> None:
        """Entries of tensor ``name`` that hold the construction's value as ``old`` rounds
        it take the construction's float64 value rounded to the new dtype; trained or edited
        entries keep the cast value."""
        p = self._parameters[name]
        ref = self.ir_op.tensors()[name]
        ref = _flat_entries(ref)[0] if self._packed[name] else _dense_np(ref).reshape(-1)
        ref = torch.from_numpy(np.ascontiguousarray(ref, dtype=np.float64))
        cur = p.detach().reshape(-1).to("cpu", torch.float64)
        if ref.shape != cur.shape:  # a trained module with another pattern: nothing to restore
            return
        same = ref.to(old).to(torch.float64) == cur
        if bool(same.any()):
            with torch.no_grad():
                p.copy_(torch.where(same, ref, cur).to(p.dtype).view(p.shape))

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_rt"] = state["_rt_key"] = None  # caches are rebuilt, never saved or copied
        state.pop("_batched", None)
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


# -- every tensor moves ---------------------------------------------------------------------
#: Attributes that may hold tensors outside the Parameters and buffers: the cached runtime
#: form, derived from the Parameters and dropped on every move (:meth:`OpModule._apply`).
CACHE_ATTRIBUTES = frozenset({"_rt", "_rt_key", "_batched"})


def hidden_tensors(module: nn.Module) -> list[str]:
    """Every tensor a module or its submodules hold outside their Parameters, buffers and
    caches (in attributes, dicts, lists or tuples), as ``"path.attr"``: what ``.to()``
    would leave behind.  An emitted module has none (tests/core/emit/test_devices.py)."""
    found: list[str] = []
    own = {id(vars(m)) for m in module.modules()}  # a plan's reference to a module's own dict

    def walk(value, where: str, depth: int) -> None:
        if id(value) in own:
            return
        if isinstance(value, torch.Tensor):
            found.append(where)
        elif depth < 4 and isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{where}[{k!r}]", depth + 1)
        elif depth < 4 and isinstance(value, (list, tuple, set, frozenset)):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]", depth + 1)

    for path, mod in module.named_modules():
        for attr, value in vars(mod).items():
            if attr in ("_parameters", "_buffers", "_modules") or attr in CACHE_ATTRIBUTES:
                continue
            walk(value, f"{path + '.' if path else ''}{attr}", 0)
    return found


def saved_bytes(fn) -> tuple:
    """``(fn(), bytes of the tensors autograd saved for backward while it ran)``: how a
    loop or a decoder measures its first trips before refusing a backward pass that would
    not fit (views of one storage count once each: an upper bound)."""
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn()
    return y, total


# -- the table: op type -> module class ----------------------------------------------------
#: The torch emitter's table: each op type's :class:`OpModule` subclass, filled by
#: :func:`torch_emitter` beside the class (:mod:`tm2nn.emit.torch_ops`,
#: :mod:`tm2nn.emit.torch_seq`, :mod:`tm2nn.emit.torch_grid`; :mod:`tm2nn.emit.torch_emit`
#: imports them all).  A new op is one new entry.
TORCH_MODULES: dict[type, type[OpModule]] = {}


def torch_emitter(op_type: type):
    """Class decorator: ``@torch_emitter(Affine)`` makes the decorated :class:`OpModule`
    subclass the module emitted for every ``Affine`` op.  The class is called as
    ``cls(op, dtype, batch)`` (``batch``: :func:`tm2nn.emit.affine_form`'s)."""
    def register(cls: type[OpModule]) -> type[OpModule]:
        if op_type in TORCH_MODULES:
            raise ValueError(f"the torch emitter has a module for {op_type.__name__} already "
                             f"({TORCH_MODULES[op_type].__name__})")
        TORCH_MODULES[op_type] = cls
        return cls
    return register


def emit_module(op: Op, dtype: torch.dtype, batch: int = BULK_BATCH) -> OpModule:
    """The module :data:`TORCH_MODULES` holds for ``op``'s type (or the nearest base type)."""
    for t in type(op).__mro__:
        cls = TORCH_MODULES.get(t)
        if cls is not None:
            return cls(op, dtype, batch)
    raise NetIRError(f"the torch emitter has no module for {type(op).__name__} ({op.kind} op {op.name!r}); "
                     f"register one with @torch_emitter({type(op).__name__}) (tm2nn.emit.torch_net) in a module "
                     "that tm2nn.emit.torch_emit imports")


_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]")


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
        threads.use_torch()  # torch's thread count for tm2nn's small per-step graphs (tm2nn.threads)
        self.net = net
        self.net_name = net.name
        self.input_names = tuple(p.name for p in net.inputs)
        self.input_widths = tuple(len(p.space) for p in net.inputs)
        self.input_kinds = tuple(p.kind for p in net.inputs)
        network, readouts = readout_split(net)
        #: what ``forward`` returns: the outputs that are not readouts (:meth:`outputs` has all)
        self.output_names = network_outputs(net)
        self.output_kinds = tuple(net.kinds[o] for o in self.output_names)
        self.output_widths = tuple(len(net.spaces[o]) for o in self.output_names)
        #: the net's outputs that readouts compute (:mod:`tm2nn.nets.ops`): :meth:`outputs`
        self.readout_names = tuple(o for o in net.outputs if o not in self.output_names)
        self.op_attrs: dict[str, str] = {}
        self.register_buffer("_dtype_probe", torch.empty(0, dtype=dtype), persistent=False)

        outputs = set(net.outputs)
        last_use: dict[str, int] = {}
        for i, op in enumerate(network):
            for v in op.inputs:
                last_use[v] = i
        slot = {name: i for i, name in enumerate(self.input_names)}
        owned: set[str] = set()  # values this net allocated itself (safe to overwrite)
        taken: set[str] = set()
        plan = []
        readout_plan = []
        for op in net.nodes:  # the modules in the net's order; the readouts run after the rest
            mod = emit_module(op, dtype, batch)
            attr = _attr_name(op.name, taken, self)
            self.add_module(attr, mod)
            self.op_attrs[op.name] = attr
            if op.readout:
                readout_plan.append((mod, op.inputs, op.name))
                continue
            i = len(plan)  # the op's place among the network's ops
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
        self._readout_plan = readout_plan
        self._n_slots = len(slot)
        self._slots = slot
        self._out_slots = tuple(slot[o] for o in self.output_names)

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype_probe.dtype

    def op(self, name: str) -> nn.Module:
        """The submodule emitted for the op called ``name``."""
        return getattr(self, self.op_attrs[name])

    def to_net(self) -> Net:
        """A copy of the IR net with this module's current parameter values (after training
        or editing, say), nested nets included, ready for
        :func:`tm2nn.emit.onnx_model.to_onnx`.  Entries equal to the IR's (in the module's
        dtype) keep the IR's float64 values, so an unedited module gives the net back; a
        sparse trainable weight keeps its pattern (a trained entry that became 0 is an
        error), other tensors drop the entries that became 0."""
        nodes = tuple(self.op(op.name).to_op() for op in self.net.nodes)
        return Net(self.net.name, self.net.inputs, nodes, self.net.outputs, dict(self.net.metadata))

    def extra_repr(self) -> str:
        ins = ", ".join(f"{n}[{w}]" for n, w in zip(self.input_names, self.input_widths))
        outs = ", ".join(f"{n}[{w}]" for n, w in zip(self.output_names, self.output_widths))
        extra = ", ".join(f"{n}[{len(self.net.spaces[n])}]" for n in self.readout_names)
        return f"name={self.net_name!r}, inputs=({ins}), outputs=({outs})" + (f", readouts=({extra})" if extra else "")

    # -- running ---------------------------------------------------------------------------
    def _prepare(self, inputs) -> list[torch.Tensor]:
        if len(inputs) != len(self.input_names):
            raise TypeError(f"net {self.net_name!r} takes {len(self.input_names)} input(s) "
                            f"{list(self.input_names)}, got {len(inputs)}")
        xs = []
        device = self._dtype_probe.device
        for name, width, kind, x in zip(self.input_names, self.input_widths, self.input_kinds, inputs):
            # inputs come to the module's device and dtype (numpy arrays, CPU tensors)
            x = torch.as_tensor(x).to(device)
            if kind == "tokens":
                if x.dim() != 2 or x.is_floating_point():
                    raise ValueError(f"input {name!r}: expected integer token ids [batch, length], got {x.dtype} {list(x.shape)}")
                if x.numel() and x.device.type != "meta" and (int(x.min()) < 0 or int(x.max()) >= width):
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
            xs.append(x.to(self.dtype).t().contiguous())
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

    def outputs(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every output of the net by name, in ``net.outputs`` order, batch-major: what
        :meth:`forward` returns (through ``self(...)``, so hooks fire) and the readouts'
        values (:mod:`tm2nn.nets.ops`: the decoded report fields the ONNX model outputs too),
        computed from them by the readout submodules."""
        ys = self(*inputs)
        ys = (ys,) if len(self.output_names) == 1 else tuple(ys)
        env = dict(zip(self.output_names, ys))
        return self._readouts(env, inputs, list(self.net.outputs))

    def _readouts(self, env: dict, inputs, names: list[str]) -> dict[str, torch.Tensor]:
        """Run the readout submodules on the batch-major values ``env`` (the net's inputs
        added from ``inputs``); returns ``names``' values."""
        if self._readout_plan:
            for p, x in zip(self.net.inputs, self._prepare(inputs)):
                env.setdefault(p.name, _batch_major(x, p.kind))
            for mod, ins, name in self._readout_plan:
                env[name] = mod(*[env[v] for v in ins])
        return {n: env[n] for n in names}

    def trace(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every value of the net (inputs, op outputs and readouts, by name), ``[batch,
        width]`` each.  A loop's value is the one after its last trip."""
        vals = self._run_fm(self._prepare(inputs), keep=True)
        kinds = {**{p.name: p.kind for p in self.net.inputs}, **self.net.kinds}
        env = {name: _batch_major(vals[s], kinds[name]) for name, s in self._slots.items()}
        return self._readouts(env, inputs, [*self._slots, *(r[2] for r in self._readout_plan)])


def _batch_major(x: torch.Tensor, kind: str) -> torch.Tensor:
    """Feature-major ``[w, B]`` / ``[L, w, B]`` -> ``[B, w]`` / ``[B, L, w]``; grids are
    batch-major already, ``grids`` ``[T, B, H, W]`` -> ``[B, T, H, W]``; tokens and
    readouts' values stay."""
    if kind in ("tokens", "grid") or kind in READOUT_KINDS:
        return x
    if kind == "grids":
        return x.transpose(0, 1).contiguous()
    return x.t().contiguous() if x.dim() == 2 else x.permute(2, 0, 1).contiguous()
