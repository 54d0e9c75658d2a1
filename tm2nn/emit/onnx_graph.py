"""NetIR -> ONNX graph nodes, built with ``onnx.helper``: the emitter's state and helpers
(:class:`_Emitter`) and its table, op type -> emitter (:data:`ONNX_EMITTERS`, filled with
:func:`onnx_emitter` beside each op's emitter: :mod:`tm2nn.emit.onnx_ops` (vector ops),
:mod:`tm2nn.emit.onnx_seq` (attention, embedding, decoder), :mod:`tm2nn.emit.onnx_grid`
(grid ops)).  :mod:`tm2nn.emit.onnx_model` assembles the model; :mod:`tm2nn.emit.onnx_runtime`
runs it.

Inside the graph values are feature-major: a vector is ``[width, batch]`` and a sequence
``[length, width, batch]`` (one ``Transpose`` per graph input and per output), because
onnxruntime gathers contiguous rows (``Gather`` axis 0) about nine times faster than
columns; token ids stay ``[batch, length]`` (only ``Embed`` reads them).  The value
computed by op ``X`` is named ``X`` (``X/fm`` when ``X`` is also a graph output, whose
batch-major copy takes the name ``X``); its nodes are named ``X`` or ``X/<step>``, its
initializers ``X.weight``, ``X.bias``, ``X.cols.<j>``, ...; a loop body's values, nodes
and initializers are prefixed with ``<loop>/``, a decoder's with ``<decode>/prologue/``
and ``<decode>/body/``.  Affine forms (:meth:`_Emitter.matrix_steps`, chosen by
:func:`tm2nn.emit.affine_form`):

* ``diagonal``: ``Mul(x, d[:, None])`` then ``Add(bias)``;
* ``ell``:      per slot ``j``: ``Gather(x, X.cols.j, axis=0)``, ``Mul(X.weight.j)``,
  summed with ``Add``, then ``Add(bias)``;
* ``scatter``:  ``Gather`` the ``nnz`` inputs, ``Mul`` by the values, ``ScatterND`` (add)
  into the bias expanded over the batch;
* ``dense``:    ``MatMul(W, x)`` then ``Add(bias)``.

The bias ``Add`` is left out when the bias is zero.  Every float tensor has the model's
float type, chosen in one place (``_Emitter.dtype``).

An emitter is ``fn(em, op, out, ins, base, final, ctx)``: it appends the nodes computing
``op`` to the list ``out``, reading the ONNX values ``ins`` (one per ``op.inputs``), and
writes the value ``final``; ``base`` prefixes its node and initializer names, and ``ctx``
is a decoder body's attention state (:class:`_DecodeCtx`, None elsewhere).  With it the
table holds ``weight_bytes(op, batch)``, the bytes of the op's initializers, counted
before any is built (:func:`weight_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tm2nn.emit import BULK_BATCH, affine_form
from tm2nn.nets import Net, NetIRError, Op, SparseMatrix

DEFAULT_OPSET = 18
BATCH = "batch"
_INT64_MAX = np.iinfo(np.int64).max


class _Names:
    """Unique names in one namespace; a taken name gets a ``#n`` suffix."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def reserve(self, name: str) -> str:
        if name in self.used:
            raise NetIRError(f"ONNX name {name!r} is used twice")
        self.used.add(name)
        return name

    def fresh(self, base: str) -> str:
        cand, i = base, 1
        while cand in self.used:
            i += 1
            cand = f"{base}#{i}"
        self.used.add(cand)
        return cand


def _fill_tensor(t: onnx.TensorProto, array: np.ndarray, name: str) -> None:
    """``numpy_helper.from_array(array, name)``, written into ``t`` (no copy of the
    message); the emitter's arrays are numbers and booleans."""
    if array.dtype.kind not in "biuf":  # pragma: no cover - the emitter makes none
        t.CopyFrom(numpy_helper.from_array(array, name))
        return
    t.dims.extend(array.shape)
    if name:
        t.name = name
    t.raw_data = numpy_helper.tobytes_little_endian(array)
    t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)


#: The float types a model may compute in, and their ONNX element types.
FLOAT_TYPES = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE}


def _fm_info(name: str, width: int, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [width, BATCH])


def _grid_info(name: str, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [BATCH, "height", "width"])


def _matrix_form(w: SparseMatrix, batch: int) -> str:
    """:func:`affine_form` of a (never trainable) weight matrix that is not an Affine op's
    (an attention's maps, applied along a sequence: no scatter form there)."""
    form = affine_form(SimpleNamespace(weight=w, trainable=False), batch)  # type: ignore[arg-type]
    return "dense" if form == "scatter" else form


# -- the table: op type -> emitter ---------------------------------------------------------
@dataclass(frozen=True)
class OnnxEmitter:
    """One entry of :data:`ONNX_EMITTERS`: the op's emitter and its initializers' size."""

    emit: Callable[..., None]
    weight_bytes: Callable[[Op, int], int]


#: The ONNX emitter's table, filled by :func:`onnx_emitter` beside each op's emitter
#: (:mod:`tm2nn.emit.onnx_model` imports those modules).  A new op is one new entry.
ONNX_EMITTERS: dict[type, OnnxEmitter] = {}


def _no_weights(op: Op, batch: int) -> int:
    return 0


def onnx_emitter(op_type: type, weight_bytes: Callable[[Op, int], int] = _no_weights):
    """Decorator: ``@onnx_emitter(Affine, weight_bytes=...)`` makes the decorated function
    the emitter of every ``Affine`` op (see the module doc); ``weight_bytes(op, batch)``
    bounds the bytes of the initializers it makes (default: none)."""
    def register(fn: Callable[..., None]) -> Callable[..., None]:
        if op_type in ONNX_EMITTERS:
            raise ValueError(f"the ONNX emitter has an entry for {op_type.__name__} already "
                             f"({ONNX_EMITTERS[op_type].emit.__name__})")
        ONNX_EMITTERS[op_type] = OnnxEmitter(fn, weight_bytes)
        return fn
    return register


def emitter_of(op: Op) -> OnnxEmitter:
    """The entry :data:`ONNX_EMITTERS` holds for ``op``'s type (or the nearest base type)."""
    for t in type(op).__mro__:
        entry = ONNX_EMITTERS.get(t)
        if entry is not None:
            return entry
    raise NetIRError(f"the ONNX emitter has no entry for {type(op).__name__} ({op.kind} op {op.name!r}); "
                     f"register one with @onnx_emitter({type(op).__name__}) (tm2nn.emit.onnx_graph) in a module "
                     "that tm2nn.emit.onnx_model imports")


@dataclass
class _DecodeCtx:
    """What a decoder body's attention ops see: each attended history's parts
    (``parts[src]``, the source columns each holds) and their input values
    (``histories[src]``, ``[B, c_p, n]`` each), the extended parts the step produces
    (``new_histories``, set by the first op over ``src``) and the precomputed keys/values
    of cross-attention ops (``cross[name] = (K, V)``)."""

    histories: dict[str, list[str]] = field(default_factory=dict)
    parts: dict[str, list[np.ndarray]] = field(default_factory=dict)
    new_histories: dict[str, list[str]] = field(default_factory=dict)
    cross: dict[str, tuple[str, str]] = field(default_factory=dict)


class _Emitter:
    """Emits ops into node lists.  ``dtype`` (``"float32"`` or ``"float64"``) is the one
    place the model's float type is chosen: every float initializer, scalar constant,
    ``Cast`` and value info of the graph takes it (:meth:`floats`, :meth:`scalar`,
    :attr:`elem`)."""

    def __init__(self, opset: int = DEFAULT_OPSET, model: onnx.ModelProto | None = None,
                 dtype: str = "float32") -> None:
        if dtype not in FLOAT_TYPES:
            raise ValueError(f"an ONNX model computes in {' or '.join(FLOAT_TYPES)}, not {dtype!r}")
        self.opset = opset
        #: numpy and ONNX element type of every float tensor
        self.dtype, self.elem = np.dtype(dtype), FLOAT_TYPES[dtype]
        self.values = _Names()  # values and initializers share one namespace
        self.nodes = _Names()
        # Initializers go straight into ``model``'s graph when there is one: onnx.helper's
        # make_graph and make_model copy every message they are given, and a large net's
        # weights are hundreds of megabytes.
        self.initializers = (onnx.GraphProto() if model is None else model.graph).initializer
        self._consts: dict[tuple[str, tuple[int, ...]], str] = {}
        #: the batch the ops being emitted run at (:func:`tm2nn.emit.affine_form`): a
        #: decoder's prologue and body run per step
        self.batch = BULK_BATCH

    def init(self, name: str, array: np.ndarray) -> str:
        name = self.values.fresh(name)
        array = np.asarray(array)  # (ascontiguousarray would make a scalar 1-d)
        _fill_tensor(self.initializers.add(), np.ascontiguousarray(array) if array.ndim else array, name)
        return name

    def floats(self, a) -> np.ndarray:
        """``a`` as a contiguous array of the model's float type."""
        return np.ascontiguousarray(a, dtype=self.dtype)

    def scalar(self, value: float) -> np.ndarray:
        """A 0-d array of the model's float type."""
        return np.array(value, dtype=self.dtype)

    def ints(self, base: str, *values: int) -> str:
        """An int64 vector initializer ``<base>.const.<values>`` (one per op and value)."""
        key = (base, tuple(int(v) for v in values))
        if key not in self._consts:
            label = "_".join("end" if v == _INT64_MAX else str(v) for v in key[1])
            self._consts[key] = self.init(f"{base}.const.{label}", np.array(key[1], dtype=np.int64))
        return self._consts[key]

    def steps(self, out: list, base: str, final: str | None, steps: list, doc: str = "",
              bare: bool = True, known: dict[str, str] | None = None) -> dict[str, str]:
        """Append ``steps`` ``(step, op_type, inputs, attrs)`` as nodes; ``inputs`` may name
        an earlier step as ``"@step"`` (of this call, or of ``known``: the values an earlier
        call returned).  The last step writes ``final`` (unless None); the others write
        ``<base>/<step>``.  Nodes are named ``<base>/<step>``, or ``<base>`` for a single
        step when ``bare``.  Returns the value of each step."""
        produced: dict[str, str] = {}
        known = known or {}
        for i, (step, op_type, inputs, attrs) in enumerate(steps):
            last = i == len(steps) - 1
            value = final if last and final is not None else self.values.fresh(f"{base}/{step}")
            node_name = self.nodes.fresh(base if len(steps) == 1 and bare else f"{base}/{step}")
            ins = [(produced[x[1:]] if x[1:] in produced else known[x[1:]]) if x.startswith("@") else x
                   for x in inputs]
            node = helper.make_node(op_type, ins, [value], name=node_name, **attrs)
            if doc:
                node.doc_string = doc
            out.append(node)
            produced[step] = value
        return produced

    def reduce(self, step: str, op_type: str, x: str, base: str, axis: int, keepdims: int) -> tuple:
        """A ``Reduce*`` step over one axis (axes are an input from opset 18, or 13 for ReduceSum)."""
        if op_type == "ReduceSum" or self.opset >= 18:
            return (step, op_type, [x, self.ints(base, axis)], {"keepdims": keepdims})
        return (step, op_type, [x], {"axes": [axis], "keepdims": keepdims})

    # -- ops -------------------------------------------------------------------------------
    def matrix_steps(self, w: SparseMatrix, bias: np.ndarray, x: str, base: str, form: str,
                     names: tuple[str, str, str] = ("weight", "cols", "bias"), step: str = "",
                     axis: int = 0) -> list:
        """Steps computing ``W x + b`` along ``axis`` of ``x`` (0 for a vector ``[n, B]``, 1
        for a sequence ``[L, n, B]``, where a dense ``W`` is an ``Einsum``).  ``names`` are
        the initializer suffixes of the weight, the ELL columns and the bias; ``step``
        prefixes the step names."""
        wname, cname, bname = names
        steps: list = []
        if form == "diagonal":
            d = np.zeros(w.shape[0])
            d[w.rows] = w.vals
            steps.append((f"{step}mul", "Mul", [x, self.init(f"{base}.{wname}", self.floats(d[:, None]))], {}))
        elif form == "ell":
            cols, vals = w.ell()
            for j in range(cols.shape[1]):
                c = self.init(f"{base}.{cname}.{j}", np.ascontiguousarray(cols[:, j], dtype=np.int64))
                v = self.init(f"{base}.{wname}.{j}", self.floats(vals[:, j, None]))
                steps.append((f"{step}gather.{j}", "Gather", [x, c], {"axis": axis}))
                steps.append((f"{step}mul.{j}", "Mul", [f"@{step}gather.{j}", v], {}))
                if j:
                    prev = f"@{step}mul.0" if j == 1 else f"@{step}sum.{j - 1}"
                    steps.append((f"{step}sum.{j}", "Add", [prev, f"@{step}mul.{j}"], {}))
        elif form == "scatter" and axis == 0:  # the bias is the scatter's starting value
            return [
                (f"{step}batch", "Shape", [x], {"start": 1}),
                (f"{step}shape", "Concat", [self.ints(base, w.shape[0]), f"@{step}batch"], {"axis": 0}),
                (f"{step}start", "Expand", [self.init(f"{base}.{bname}", self.floats(bias[:, None])), f"@{step}shape"], {}),
                (f"{step}gather", "Gather", [x, self.init(f"{base}.{cname}", w.cols.astype(np.int64))], {"axis": 0}),
                (f"{step}mul", "Mul", [f"@{step}gather", self.init(f"{base}.{wname}", self.floats(w.vals[:, None]))], {}),
                (f"{step}scatter", "ScatterND", [f"@{step}start", self.init(f"{base}.rows", w.rows.astype(np.int64)[:, None]),
                                                 f"@{step}mul"], {"reduction": "add"}),
            ]
        elif axis == 0:
            steps.append((f"{step}matmul", "MatMul", [self.init(f"{base}.{wname}", self.floats(w.dense())), x], {}))
        else:  # onnxruntime's broadcasting MatMul fails on an empty sequence; Einsum does not
            steps.append((f"{step}einsum", "Einsum", [self.init(f"{base}.{wname}", self.floats(w.dense())), x],
                          {"equation": "nw,lwb->lnb"}))
        if np.any(bias != 0):
            steps.append((f"{step}bias", "Add", ["@" + steps[-1][0], self.init(f"{base}.{bname}", self.floats(bias[:, None]))], {}))
        return steps


    def op(self, op: Op, out: list, env: dict[str, str], base: str, final: str,
           ctx: _DecodeCtx | None = None) -> None:
        """Emit ``op`` (its table entry, :func:`emitter_of`) reading the values ``env``."""
        emitter_of(op).emit(self, op, out, [env[i] for i in op.inputs], base, final, ctx)

    def net_ops(self, net: Net, out: list, env: dict[str, str], prefix: str = "",
                finals: dict[str, str] | None = None, ctx: _DecodeCtx | None = None) -> dict[str, str]:
        """Emit ``net``'s ops; ``ctx`` is given for a decoder body (its self-attention
        caches).  Nets nested in ``net``'s ops get no ``ctx``."""
        env = dict(env)
        for op in net.nodes:
            base = prefix + op.name
            final = finals[op.name] if finals else self.values.fresh(base)
            self.op(op, out, env, base, final, ctx)
            env[op.name] = final
        return env


def matrix_bytes(w: SparseMatrix, form: str) -> int:
    """The bytes of a weight matrix's initializers in ``form`` (before building them)."""
    n_out, n_in = w.shape
    if form == "dense":
        return 4 * n_out * n_in
    if form == "ell":
        return 12 * n_out * max(1, w.max_row_nnz)
    if form == "scatter":
        return 20 * w.nnz
    return 4 * n_out


def weight_bytes(net: Net, batch: int = BULK_BATCH) -> int:
    """The bytes the initializers of ``net`` will take (counted before building them,
    from each op's table entry)."""
    return sum(emitter_of(op).weight_bytes(op, batch) for op in net.nodes)
