"""The torch modules of the vector ops (:mod:`tm2nn.nets.ops`): affine maps, ReLU and the
registered activations, params, stop-gradient, products, concatenation, slices and loops.
Each class is the torch emitter's entry for its op (:func:`~tm2nn.emit.torch_net.torch_emitter`)
and follows :mod:`tm2nn.emit.torch_net`'s conventions (Parameters, caches, hooks, ``to_op``).
"""

from __future__ import annotations

import numpy as np
import torch

from tm2nn import interrupt
from tm2nn.emit import BULK_BATCH, affine_form
from tm2nn.emit.torch_loop_grad import FixedPointTail, run_checkpointed, tail_allowed
from tm2nn.emit.torch_net import (
    NetModule,
    OpModule,
    _batch_major,
    _net_fm,
    saved_bytes,
    torch_emitter,
)
from tm2nn.limits import check_memory
from tm2nn.nets import (
    Activation,
    Affine,
    Concat,
    Loop,
    Mul,
    NetIRError,
    Param,
    ReLU,
    Slice,
    StopGradient,
)
from tm2nn.nets.activations import get as get_activation

#: Refuse a dense weight bigger than this (it would not be a construction of this project).
DENSE_MAX_BYTES = 4 << 30


# -- ops -----------------------------------------------------------------------------------
@torch_emitter(Affine)
class AffineModule(OpModule):
    """``y = W x + b`` in the form chosen by :func:`tm2nn.emit.affine_form`."""

    def __init__(self, op: Affine, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        w = op.weight
        self.form = affine_form(op, batch)
        self.trainable = bool(op.trainable)
        self.n_out, self.n_in = w.shape
        self.nnz = w.nnz
        self.k = 0
        #: How an ELL weight gathers its inputs: ``"loop"`` (one gather per slot, accumulated
        #: in place: the fastest on a CPU), ``"batched"`` (one gather of all ``k`` slots and a
        #: sum: ``[k, n_out, B]`` of memory, 3 kernels instead of ``3k``), or None: batched
        #: on a GPU, the loop elsewhere.  The same products; the sum's order may differ.
        self.gather = None
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
            # each stored entry's place in the [k, n_out] ELL weights (row r's j-th entry:
            # j * n_out + r; the entries are in row-major order), fixed by the pattern
            self.register_buffer("ell_slot", torch.from_numpy((w.ell_slots() * self.n_out + w.rows).astype(np.int64)),
                                 persistent=False)
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
            w = vals.new_zeros(self.k * self.n_out).index_put_((self._buffers["ell_slot"],), vals)
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
            if self.gather == "batched" or (self.gather is None and x.is_cuda and len(ws) > 1):
                # one gather of every slot (k kernels -> 3): a GPU is launch-bound on the loop
                wk, ck = self._runtime_batched(rt)
                return (x[ck] * wk).sum(0) + b if diff else x[ck].mul_(wk).sum(0).add_(b)
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

    def _runtime_batched(self, rt) -> tuple[torch.Tensor, torch.Tensor]:
        """The ELL weights ``[k, n_out, 1]`` and columns ``[k, n_out]`` as single tensors (the
        batched gather's; cached with the runtime form it is built from)."""
        ws, cs = rt[0], rt[1]
        cached = getattr(self, "_batched", None)
        if cached is not None and cached[0] is ws[0]:
            return cached[1], cached[2]
        wk, ck = torch.stack(ws), torch.stack(cs)
        if not rt[3]:  # a differentiable form is rebuilt on every call: never cached
            self._batched = (ws[0], wk, ck)
        return wk, ck

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


@torch_emitter(ReLU)
class ReLUModule(OpModule):
    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # elementwise: any layout
        return torch.relu(x)


@torch_emitter(Activation)
class ActivationModule(OpModule):
    """Elementwise ``fn(x)`` (:class:`tm2nn.nets.Activation`), the registry's torch code:
    autograd gives the function's derivative (see :mod:`tm2nn.nets.activations`)."""

    def __init__(self, op: Activation, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.fn = op.fn
        self._impl = get_activation(op.fn).torch

    def extra_repr(self) -> str:
        return self._repr(f"fn={self.fn}")

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return self._impl(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # elementwise: any layout
        return self._impl(x)


@torch_emitter(Param)
class ParamModule(OpModule):
    """A free trainable vector (:class:`tm2nn.nets.Param`), the same for every batch row."""

    def __init__(self, op: Param, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self._add_tensor("value", op.value, dtype, trainable=True)

    def extra_repr(self) -> str:
        return self._repr(f"n={self._parameters['value'].numel()}, trainable=True")

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return self._parameters["value"].unsqueeze(1).expand(-1, x.shape[1])


@torch_emitter(StopGradient)
class StopGradientModule(OpModule):
    """``detach``: the value passes, the derivative is 0 (Welper's stop-gradient)."""

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return x.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # elementwise: any layout
        return x.detach()


@torch_emitter(Mul)
class MulModule(OpModule):
    def fm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # elementwise
        return a * b


@torch_emitter(Concat)
class ConcatModule(OpModule):
    def __init__(self, op: Concat, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.n_inputs = len(op.inputs)

    def extra_repr(self) -> str:
        return f"n_inputs={self.n_inputs}"

    def fm(self, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat(xs, dim=0)


@torch_emitter(Slice)
class SliceModule(OpModule):
    def __init__(self, op: Slice, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.register_buffer("index", torch.tensor(op.indices, dtype=torch.int64), persistent=False)

    def extra_repr(self) -> str:
        return f"n={self._buffers['index'].numel()}"

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, self._buffers["index"])


@torch_emitter(Loop)
class LoopModule(OpModule):
    """Apply ``body`` ``trips`` times (weights shared between iterations); with
    ``scan``, return every state stacked on a new first axis (feature-major inside)."""

    def __init__(self, op: Loop, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
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
        states = [x] if self.scan else None
        every = max(1, self.trips // 100)
        body = self.body
        tail = tail_allowed(body)
        grad = torch.is_grad_enabled() and (x.requires_grad or not tail)
        if grad and self.checkpoint and states is None:
            return run_checkpointed(lambda t: _net_fm(body, (t,))[0], x, self.trips, self.until_fixed,
                                    self.progress, tail=tail)
        # every trip is kept for backward (no fixed-point tail can end it early): measure what
        # autograd saves in the first, and refuse up front what all of them would need
        measure = grad and self.trips > 1 and not (self.until_fixed and tail and states is None)
        for i in range(1, self.trips + 1):
            if measure and i == 1:
                y, per_trip = saved_bytes(lambda x=x: _net_fm(body, (x,))[0])
                check_memory(per_trip * self.trips, f"a backward pass through {self.trips:,} trips of loop "
                             f"{self.op_name!r} ({per_trip:,} bytes kept a trip" + (
                                 "; set its .checkpoint = True to keep about 2√trips of them)" if states is None
                                 else ", every state returned)"))
            else:
                y = _net_fm(body, (x,))[0]
            fixed = self.until_fixed and not y.is_meta and torch.equal(y, x)  # meta: shapes only
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

