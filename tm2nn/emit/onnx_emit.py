"""NetIR -> ONNX, built with ``onnx.helper``; plus saving, running and metadata.

The model is one self-contained file: float32 weights are initializers (float64 with
``to_onnx(..., dtype="float64")``: every float tensor, constant, ``Cast`` and value info
then has that type, chosen in one place, ``_Emitter.dtype``), a ``Loop`` op is
an ONNX ``Loop`` (its body weights are outer-scope initializers, so the model does not
grow with the trip count), and so is a ``Decode`` op's step loop.

Graph inputs and outputs are named after the net's input ports and outputs and are
batch-major, by value kind: a ``vector`` is ``[batch, width]`` float32, a ``sequence``
``[batch, length, width]`` float32 and ``tokens`` ``[batch, length]`` int64.

Inside, values are feature-major: a vector is ``[width, batch]`` and a sequence
``[length, width, batch]`` (one ``Transpose`` per input and per output), because
onnxruntime gathers contiguous rows (``Gather`` axis 0) about nine times faster than
columns; token ids stay ``[batch, length]`` (only ``Embed`` reads them).  The value
computed by op ``X`` is named ``X`` (``X/fm`` when ``X`` is also a graph output, whose
batch-major copy takes the name ``X``); its nodes are named ``X`` or ``X/<step>``, its
initializers ``X.weight``, ``X.bias``, ``X.cols.<j>``, ...; a loop body's values, nodes
and initializers are prefixed with ``<loop>/``, a decoder's with ``<decode>/prologue/``
and ``<decode>/body/``.  Affine forms:

* ``diagonal``: ``Mul(x, d[:, None])`` then ``Add(bias)``;
* ``ell``:      per slot ``j``: ``Gather(x, X.cols.j, axis=0)``, ``Mul(X.weight.j)``,
  summed with ``Add``, then ``Add(bias)``;
* ``dense``:    ``MatMul(W, x)`` then ``Add(bias)``.

The bias ``Add`` is left out when the bias is zero.

``Attention`` ``X`` (cross): the query, key and value maps are affine maps in the same
three forms (initializers ``X.wq``/``X.bq``, ``X.wk``/``X.bk``, ``X.wv``/``X.bv``; an ELL
map ``X.wq`` has ``X.wq.cols.<j>`` and ``X.wq.<j>``), applied to a sequence ``[L, w, B]``
with ``Gather`` axis 1 or an ``Einsum`` (onnxruntime's broadcasting ``MatMul`` rejects
an empty sequence).  Values are computed only on the rows ``op.value_rows()`` (``dv`` of
them; ``X.wv``, ``X.bv`` and ``X.null_value`` hold those rows only).  Scores are
``ReduceSum(K * q)`` ``[L, B]``, with the null key's score ``MatMul(X.null_key, q)``
concatenated in front; ``hardmax`` takes ``Equal(score, ReduceMax(score))`` (exact, ties
averaged by dividing by the count), ``softmax`` a ``Softmax`` over axis 0 of
``beta * score``.  The weighted values ``[dv, B]`` are added to ``h``'s rows with
``GatherND`` / ``Add`` / ``ScatterND`` (indices ``X.rows`` ``[dv, 1]``; a plain ``Add``
when the rows are all of ``h``), so the output costs ``O(width)``.

``Attention`` ``X`` (self, over the history of ``src``: its own input or ``inputs[1]``):
no keys or values are stored.  The history holds the coordinates ``cols`` of ``src``
that K and V read (``Decode.histories()``: one history per ``src``, shared by every op
over it), at every step so far, in one or two parts ``H_p`` ``[B, c_p, n]``
(:func:`_history_parts`): the columns some op's keys read, then (where that saves at
least :data:`SPLIT_MIN_READS` reads per column and step) those only values read.  The
first op over ``src`` in a step appends ``src[cols_p]`` to each part (``X/history``,
``X/history.v``: a ``Concat`` on axis 2, initializers ``X.cols``, ``X.cols.v``); every op
of the step reads those values directly.  Scores are ``MatMul((W_k[:, cols_0]ᵀ q)ᵀ, H_0)``
(``X.wk_t``: the keys read the first part only), plus ``b_k·q`` (``X.bk``), which only
matters against the null's score.  Hard-max: the items with the top score win
when it is at least the null's, the null wins when its score is at least theirs.  When V
reads the history (``X.wv`` ``[dv, c_p]`` per part it reads) the winners' mask ``[B, n]``
is counted and ``MatMul(H_p, mask)`` is scaled by the items' share.  Otherwise only the
items' share is needed: it is ``live`` (0 or 1) unless the null's score equals the best
item's in some batch row, and only then does an ``If`` (``X/n_items``) count the ties
(``Equal``, ``Cast``, ``ReduceSum``: the one O(n) step it skips), as the torch emitter
does.  Per step and op the O(n) work is the scores ``MatMul`` and ``ReduceMax``; per step
and history, one ``Concat`` (onnxruntime writes no loop-carried buffer in place: a
``ScatterND`` into a preallocated ``[B, c, steps]`` history copies all of it every step,
which measured slower).  Outside a decoder body the history is the current ``src`` alone.

``Embed`` ``X``: ``Slice`` the tokens to ``max_len``, ``Gather`` rows of ``X.table``, add
the first ``L`` rows of ``X.positions`` and transpose to ``[L, w, B]``.

``Decode`` ``X``: the prologue runs on ``Expand(X.init)``; then one ONNX ``Loop``
``X`` with trip count ``X.steps`` whose body adds ``β(iter + 1)`` to the carried ``o`` and
runs the body net.  ``β`` is a table row (``Gather`` on ``X.positions``) or, for a
:class:`~tm2nn.nets.BinaryPositions`, computed from the iteration number: ``Div`` by
powers of two, ``Mod 2``, and a ``[w, bits]`` placement matrix (the same for ``Embed``).
The loop carries ``o`` and each part of each attended history, starting empty
(``ConstantOfShape`` ``[B, c_p, 0]``).  The taps are the loop's scan output, with ``tap_0``
concatenated in front: ``[steps + 1, tap_w, B]``.  The keys and values of the body's
cross-attention over the decoder memory are computed once, before the loop.  With binary
positions nothing in the model depends on ``steps`` but the trip count.
:func:`to_onnx_step` emits one body step on its own, for callers that drive the decoding
themselves.

Emission is deterministic: the same Net gives byte-identical ``SerializeToString()``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tm2nn._version import __version__
from tm2nn.emit import BULK_BATCH, STEP_BATCH, affine_form, onnx_grid
from tm2nn.nets import (
    Activation,
    Affine,
    BinaryPositions,
    Concat,
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
from tm2nn.nets.ops import Attention, Decode, Embed

DEFAULT_OPSET = 18
MIN_OPSET = 13
#: protobuf cannot serialise a message of 2 GiB or more.
PROTO_MAX_BYTES = (2 << 30) - 1
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


def _value_map(op: Attention) -> tuple[np.ndarray, SparseMatrix, np.ndarray, np.ndarray]:
    """``(rows, wv, bv, null_value)`` restricted to ``op.value_rows()``."""
    rows = op.value_rows()
    remap = np.full(op.wv.shape[0], -1, dtype=np.int64)
    remap[rows] = np.arange(rows.size)
    w = op.wv
    wv = SparseMatrix((rows.size, w.shape[1]), remap[w.rows], w.cols, w.vals)
    return rows, wv, op.bv[rows], op.null_value[rows]


#: Name suffixes of a history's parts (:func:`_history_parts`): the columns some key reads,
#: then those only values read.
_PART_TAGS = ("", ".v")


def _part_tag(p: int) -> str:
    return _PART_TAGS[p]


#: Split a history into parts (:func:`_history_parts`) where that saves at least this many
#: float reads per history column and step: a part costs four small nodes per step
#: (gather, transpose, unsqueeze, append), about 2 µs in onnxruntime, which this many
#: reads per column pay for at about a thousand past steps.
SPLIT_MIN_READS = 32


def _history_parts(decode: Decode) -> dict[str, list[np.ndarray]]:
    """Each attended history's columns (``Decode.histories()``) in parts, each carried as
    its own ``[B, c_p, n]`` value: the columns some op's keys read, then those only values
    read, so that scoring reads no value-only column and values that read only those read
    no key column.  One part where there is nothing to split or the split saves fewer than
    :data:`SPLIT_MIN_READS` reads per history column and step.  Depends on the weights
    only (not on ``steps``)."""
    out: dict[str, list[np.ndarray]] = {}
    for src, cols in decode.histories().items():
        ops = [op for op in decode.body.nodes if isinstance(op, Attention) and op.is_self and op.source == src]
        keyed = {int(c) for op in ops for c in op.wk.cols[op.wk.vals != 0]}
        k = np.array([c for c in cols if c in keyed], dtype=np.int64)
        v = np.array([c for c in cols if c not in keyed], dtype=np.int64)
        saved = 0
        for op in ops:
            if not op.value_rows().size:  # an identity: reads nothing
                continue
            saved += v.size  # its scores read the key part only
            vcols = {int(c) for c in op.wv.cols[op.wv.vals != 0]}
            if vcols and not vcols & keyed:
                saved += k.size  # its values read the value part only
        out[src] = [k, v] if k.size and v.size and saved >= SPLIT_MIN_READS else [cols]
    return out


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

    def affine(self, op: Affine, out: list, x: str, base: str, final: str) -> None:
        self.steps(out, base, final, self.matrix_steps(op.weight, op.bias, x, base, affine_form(op, self.batch)),
                   op.cite)

    def loop(self, op: Loop, out: list, x: str, base: str, final: str) -> None:
        body = op.body
        port = body.inputs[0]
        width = len(port.space)
        info = (lambda name: _grid_info(name, self.elem)) if port.kind == "grid" else \
            (lambda name, _w=width: _fm_info(name, _w, self.elem))
        trips = self.init(f"{base}.trips", np.array(op.trips, dtype=np.int64))
        it = self.values.fresh(f"{base}/iter")
        cond_in = self.values.fresh(f"{base}/cond_in")
        cond_out = self.values.fresh(f"{base}/cond_out")
        carried = self.values.fresh(f"{base}/{port.name}")
        nodes: list = []
        env = self.net_ops(body, nodes, {port.name: carried}, prefix=f"{base}/")
        result = env[body.outputs[0]]
        if result == carried:  # an identity body
            result = self.values.fresh(f"{base}/{port.name}/out")
            self.steps(nodes, f"{base}/identity", result, [("identity", "Identity", [carried], {})])
        if op.until_fixed:  # go on while some element changed (Loop.until_fixed)
            self.steps(nodes, f"{base}/cond", cond_out, [
                ("same", "Equal", [result, carried], {}),
                ("changed", "Not", ["@same"], {}),
                ("count", "Cast", ["@changed"], {"to": TensorProto.INT32}),
                ("any", "ReduceMax", ["@count"], {"keepdims": 0}),  # over every axis
                ("cond", "Cast", ["@any"], {"to": TensorProto.BOOL}),
            ], bare=False)
        else:
            self.steps(nodes, f"{base}/cond", cond_out, [("cond", "Identity", [cond_in], {})])
        outs = [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), info(result)]
        scanned = None
        if op.scan:  # every state after a trip, as a scan output
            scanned = self.values.fresh(f"{base}/{port.name}/scan")
            self.steps(nodes, f"{base}/scan", scanned, [("scan", "Identity", [result], {})])
            outs.append(info(scanned))
        graph = helper.make_graph(
            nodes, f"{base}/body",
            [helper.make_tensor_value_info(it, TensorProto.INT64, []),
             helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []), info(carried)], outs)
        # The loop's own condition input must be given for the body's to count (ONNX Loop).
        cond = self.init(f"{base}.cond", np.array(True)) if op.until_fixed else ""
        if not op.scan:
            out.append(helper.make_node("Loop", [trips, cond, x], [final], name=self.nodes.fresh(base), body=graph))
            return
        last, states = self.values.fresh(f"{base}/last"), self.values.fresh(f"{base}/states")
        out.append(helper.make_node("Loop", [trips, cond, x], [last, states], name=self.nodes.fresh(base), body=graph))
        tail = []
        if op.until_fixed:  # the trips not run would each give `last` again
            tail = [
                ("last_shape", "Shape", [last], {}),
                ("done", "Shape", [states], {"start": 0, "end": 1}),
                ("left", "Sub", [self.ints(base, op.trips), "@done"], {}),
                ("shape", "Concat", ["@left", "@last_shape"], {"axis": 0}),
                ("last1", "Unsqueeze", [last, self.ints(base, 0)], {}),
                ("rest", "Expand", ["@last1", "@shape"], {}),
            ]
        self.steps(out, base, final, [  # x_0 in front of x_1 .. x_trips
            *tail,
            ("first", "Unsqueeze", [x, self.ints(base, 0)], {}),
            ("states", "Concat", ["@first", states, *(["@rest"] if tail else [])], {"axis": 0}),
        ], bare=False)

    def activation(self, op: Activation, out: list, x: str, base: str, final: str) -> None:
        """The registry's ONNX formula for ``op.fn``; its scalar constants are float
        initializers ``<op>.<tag>`` (one per tag)."""
        from tm2nn.nets.activations import get

        consts: dict[str, str] = {}

        def const(tag: str, value: float) -> str:
            if tag not in consts:
                consts[tag] = self.init(f"{base}.{tag}", self.scalar(value))
            return consts[tag]

        self.steps(out, base, final, get(op.fn).onnx(x, const), op.cite or get(op.fn).cite, bare=False)

    def memory_kv(self, op: Attention, out: list, mem: str, base: str) -> tuple[str, str]:
        """Keys ``[L, dk, B]`` and values ``[L, dv, B]`` of a cross-attention's memory."""
        _, wv, bv, _ = _value_map(op)
        ks = self.matrix_steps(op.wk, op.bk, mem, base, _matrix_form(op.wk, self.batch), ("wk", "wk.cols", "bk"), "k.", axis=1)
        vs = self.matrix_steps(wv, bv, mem, base, _matrix_form(wv, self.batch), ("wv", "wv.cols", "bv"), "v.", axis=1)
        got = self.steps(out, base, None, ks + vs, op.cite, bare=False)
        return got[ks[-1][0]], got[vs[-1][0]]

    def attention(self, op: Attention, out: list, env: dict[str, str], base: str, final: str,
                  ctx: _DecodeCtx | None) -> None:
        if op.is_self:
            self.history_attention(op, out, env, base, final, ctx)
            return
        h = env[op.inputs[0]]
        width = op.wv.shape[0]
        rows, wv, bv, nv = _value_map(op)
        dv = rows.size
        if dv == 0:  # no value can change anything
            self.steps(out, base, final, [("identity", "Identity", [h], {})], op.cite)
            return
        if ctx is not None and op.name in ctx.cross:
            keys, vals = ctx.cross[op.name]
        else:
            keys, vals = self.memory_kv(op, out, env[op.inputs[1]], base)
        s: list = []
        s += self.matrix_steps(op.wq, op.bq, h, base, _matrix_form(op.wq, self.batch), ("wq", "wq.cols", "bq"), "q.")
        q = "@" + s[-1][0]
        s.append(("scores.mul", "Mul", [keys, q], {}))
        s.append(self.reduce("scores", "ReduceSum", "@scores.mul", base, 1, 0))                 # [L, B]
        s.append(("null_score", "MatMul", [self.init(f"{base}.null_key", self.floats(op.null_key[None, :])), q], {}))
        s.append(("logits", "Concat", ["@null_score", "@scores"], {"axis": 0}))                 # [1 + L, B]
        if op.mode == "hardmax":
            s.append(self.reduce("max", "ReduceMax", "@logits", base, 0, 1))
            s.append(("argmax", "Equal", ["@logits", "@max"], {}))
            s.append(("mask", "Cast", ["@argmax"], {"to": self.elem}))
            s.append(self.reduce("count", "ReduceSum", "@mask", base, 0, 1))
            s.append(("weights", "Div", ["@mask", "@count"], {}))
        else:
            s.append(("scaled", "Mul", ["@logits", self.init(f"{base}.beta", self.scalar(op.beta))], {}))
            s.append(("weights", "Softmax", ["@scaled"], {"axis": 0}))
        zero, one = self.ints(base, 0), self.ints(base, 1)
        s.append(("item_weights", "Slice", ["@weights", one, self.ints(base, _INT64_MAX), zero], {}))
        s.append(("item_weights.unsqueeze", "Unsqueeze", ["@item_weights", one], {}))  # [L, 1, B]
        s.append(("mix.mul", "Mul", [vals, "@item_weights.unsqueeze"], {}))
        s.append(self.reduce("mix", "ReduceSum", "@mix.mul", base, 0, 0))                     # [dv, B]
        delta = "@mix"
        if np.any(nv != 0):
            s.append(("null_weight", "Slice", ["@weights", zero, one, zero], {}))
            s.append(("null_mix", "Mul", [self.init(f"{base}.null_value", self.floats(nv[:, None])), "@null_weight"], {}))
            s.append(("delta", "Add", ["@mix", "@null_mix"], {}))
            delta = "@delta"
        s += self.residual(h, delta, rows, width, base)
        self.steps(out, base, final, s, op.cite, bare=False)

    def residual(self, h: str, delta: str, rows: np.ndarray, width: int, base: str) -> list:
        """Steps adding ``delta`` ``[dv, B]`` to ``h``'s ``rows`` (all of them: a plain Add)."""
        if rows.size == width:  # value_rows() is sorted, so these are all of h's rows in order
            return [("residual", "Add", [h, delta], {})]
        idx = self.init(f"{base}.rows", rows[:, None].astype(np.int64))
        return [("rows", "GatherND", [h, idx], {}),
                ("rows.add", "Add", ["@rows", delta], {}),
                ("scatter", "ScatterND", [h, idx, "@rows.add"], {})]

    def history_attention(self, op: Attention, out: list, env: dict[str, str], base: str, final: str,
                          ctx: _DecodeCtx | None) -> None:
        """Self-attention over the history of ``op.source`` (see the module docstring): the
        history is one or more parts ``[B, c_p, n]``; the keys read the parts their
        columns are in, the values theirs."""
        h, src = env[op.inputs[0]], env[op.source]
        width = op.wv.shape[0]
        rows, _wv, _bv, nv = _value_map(op)
        bv = op.bv[rows]
        has_v = bool(op.wv.nnz and np.any(op.wv.vals != 0))
        cached = ctx is not None and op.source in ctx.histories
        parts = ctx.parts[op.source] if cached else [op.memory_columns()]
        got: dict[str, str] = {}

        def emit(steps: list, value: str | None = None) -> None:
            got.update(self.steps(out, base, value, steps, op.cite, bare=False, known=got))

        if not (has_v or np.any(bv != 0) or np.any(nv != 0)):  # no value can change anything
            if cached and op.source not in ctx.new_histories:
                ctx.new_histories[op.source] = self.append_history(op.source, parts, src, base, emit, got, ctx)
            emit([("identity", "Identity", [h], {})], final)
            return
        if cached and op.source in ctx.new_histories:
            hist = ctx.new_histories[op.source]
        else:
            hist = self.append_history(op.source if cached else None, parts, src, base, emit, got, ctx)
            if cached:
                ctx.new_histories[op.source] = hist
        wk = op.wk.dense()
        # Constants are made where a step reads them: an initializer no node reads is
        # dead weight that onnxruntime warns about (tests/test_onnx_clean.py).
        one = self.ints(base, 1)
        s = self.matrix_steps(op.wq, op.bq, h, base, _matrix_form(op.wq, self.batch), ("wq", "wq.cols", "bq"), "q.")
        q = "@" + s[-1][0]                                                                        # [dk, B]
        # scores s'_j = x_j · (W_kᵀq) over the parts the keys read (a part no key reads is skipped)
        kparts = [p for p, cols in enumerate(parts) if np.any(wk[:, cols] != 0)] or [0]
        scores = ""
        for p in kparts:
            t = _part_tag(p)
            s += [(f"qc{t}", "MatMul", [self.init(f"{base}.wk_t{t}", self.floats(wk[:, parts[p]].T)), q], {}),  # [c_p, B]
                  (f"qc{t}.t", "Transpose", [f"@qc{t}"], {"perm": [1, 0]}),
                  (f"qc{t}.b", "Unsqueeze", [f"@qc{t}.t", one], {}),                           # [B, 1, c_p]
                  (f"scores{t}", "MatMul", [f"@qc{t}.b", hist[p]], {})]                        # [B, 1, n]
            if scores:
                s.append((f"scores{t}.sum", "Add", [scores, f"@scores{t}"], {}))
                scores = f"@scores{t}.sum"
            else:
                scores = f"@scores{t}"
        s += [("null_score", "MatMul", [self.init(f"{base}.null_key", self.floats(op.null_key[None, :])), q], {}),
              ("null_score.b", "Reshape", ["@null_score", self.ints(base, -1, 1, 1)], {})]      # [B, 1, 1]
        shift = None
        if np.any(op.bk != 0):
            s += [("key_bias", "MatMul", [self.init(f"{base}.bk", self.floats(op.bk[None, :])), q], {}),
                  ("key_bias.b", "Reshape", ["@key_bias", self.ints(base, -1, 1, 1)], {})]
            shift = "@key_bias.b"
        need_items, need_null = bool(np.any(bv != 0)), bool(np.any(nv != 0))
        if op.mode == "hardmax":
            # max s' + b_k·q against τ_0: items win where s' = max s' (see the torch emitter)
            s.append(self.reduce("top", "ReduceMax", scores, base, 2, 1))
            best = "@top"
            if shift:
                s.append(("best", "Add", ["@top", shift], {}))
                best = "@best"
            s += [("null_wins", "GreaterOrEqual", ["@null_score.b", best], {}),
                  ("items_live", "GreaterOrEqual", [best, "@null_score.b"], {}),
                  ("a0", "Cast", ["@null_wins"], {"to": self.elem}),
                  ("live", "Cast", ["@items_live"], {"to": self.elem})]
            if has_v:  # the winners' weights: every tie counts
                s += [("argmax", "Equal", [scores, "@top"], {}),
                      ("mask", "Cast", ["@argmax"], {"to": self.elem}),
                      self.reduce("ties", "ReduceSum", "@mask", base, 2, 1),
                      ("n_items", "Mul", ["@ties", "@live"], {})]                             # [B, 1, 1]
            else:
                # Only the items' share matters.  It is `live` (0 or 1) unless the null key
                # ties with the best items somewhere in the batch: then count the ties, O(n).
                s += [("tie", "Mul", ["@a0", "@live"], {}),
                      ("tie.any", "ReduceMax", ["@tie"], {"keepdims": 0}),                   # over every axis
                      ("tie.cond", "Cast", ["@tie.any"], {"to": TensorProto.BOOL})]
                emit(s)
                s = [("n_items", "If", [got["tie.cond"]], self.tie_branches(base, got[scores[1:]], got["top"],
                                                                              got["live"]))]
            s += [("count", "Add", ["@n_items", "@a0"], {}),
                  ("inv", "Reciprocal", ["@count"], {})]
            if need_items:
                s.append(("items", "Mul", ["@n_items", "@inv"], {}))
            if need_null:
                s.append(("null_weight", "Mul", ["@a0", "@inv"], {}))
            if has_v:  # the winners' weights are mask · share: the share is applied after Σ_j
                s.append(("item_share", "Mul", ["@live", "@inv"], {}))                         # [B, 1, 1]
        else:
            logits = scores
            if shift:
                s.append(("logits", "Add", [scores, shift], {}))
                logits = "@logits"
            two = self.ints(base, 2)
            s += [("all", "Concat", ["@null_score.b", logits], {"axis": 2}),
                  ("scaled", "Mul", ["@all", self.init(f"{base}.beta", self.scalar(op.beta))], {}),
                  ("weights", "Softmax", ["@scaled"], {"axis": 2})]
            if need_null:
                s.append(("null_weight", "Slice", ["@weights", self.ints(base, 0), one, two], {}))
            if has_v or need_items:
                s.append(("item_weights", "Slice", ["@weights", one, self.ints(base, _INT64_MAX), two], {}))
            if need_items:
                s.append(self.reduce("items", "ReduceSum", "@item_weights", base, 2, 1))
        terms = []
        if has_v:
            # Σ_j a_j x_j as a matrix-vector product per part the values read: [B, c_p, n]·[B, n, 1]
            # (the weights turned into a column by Squeeze/Unsqueeze: no copy, no transposed
            # MatMul); hard-max multiplies the winners' sum by their share afterwards
            wv = op.wv.dense()[rows]
            vparts = [p for p, cols in enumerate(parts) if np.any(wv[:, cols] != 0)]
            w = "@mask" if op.mode == "hardmax" else "@item_weights"
            s += [("item_weights.row", "Squeeze", [w, one], {}),                                # [B, n]
                  ("item_weights.col", "Unsqueeze", ["@item_weights.row", self.ints(base, 2)], {})]  # [B, n, 1]
            for p in vparts:
                t = _part_tag(p)
                s.append((f"mix{t}", "MatMul", [hist[p], "@item_weights.col"], {}))            # [B, c_p, 1]
                mix = f"@mix{t}"
                if op.mode == "hardmax":
                    s.append((f"mix{t}.share", "Mul", [mix, "@item_share"], {}))
                    mix = f"@mix{t}.share"
                s += [(f"mix{t}.fm", "Transpose", [mix], {"perm": [1, 0, 2]}),                 # [c_p, B, 1]
                      (f"mix{t}.2d", "Reshape", [f"@mix{t}.fm", self.ints(base, len(parts[p]), -1)], {}),  # [c_p, B]
                      (f"values{t}", "MatMul", [self.init(f"{base}.wv{t}", self.floats(wv[:, parts[p]])),
                                                f"@mix{t}.2d"], {})]
                terms.append(f"@values{t}")
        if need_items:
            s += [("items.row", "Reshape", ["@items", self.ints(base, 1, -1)], {}),                 # [1, B]
                  ("value_bias", "Mul", [self.init(f"{base}.bv", self.floats(bv[:, None])), "@items.row"], {})]
            terms.append("@value_bias")
        if need_null:
            s += [("null_weight.row", "Reshape", ["@null_weight", self.ints(base, 1, -1)], {}),
                  ("null_mix", "Mul", [self.init(f"{base}.null_value", self.floats(nv[:, None])), "@null_weight.row"], {})]
            terms.append("@null_mix")
        if not terms:  # pragma: no cover - a value row with all-zero weights
            s.append(("identity", "Identity", [h], {}))
        else:
            delta = terms[0]
            for j, term in enumerate(terms[1:]):
                s.append((f"delta.{j}", "Add", [delta, term], {}))
                delta = f"@delta.{j}"
            s += self.residual(h, delta, rows, width, base)
        emit(s, final)

    def append_history(self, source: str | None, parts: list[np.ndarray], src: str, base: str, emit,
                       got: dict[str, str], ctx: _DecodeCtx | None) -> list[str]:
        """This step's coordinates of ``src``, one ``[B, c_p, 1]`` column per part,
        appended to the carried history of ``source`` (``X/history``, ``X/history.v``: a
        ``Concat`` on axis 2); without ``source`` (outside a decoder body) the history is
        the column alone.  Returns the parts' values."""
        two = self.ints(base, 2)
        hist = []
        for p, cols in enumerate(parts):
            t = _part_tag(p)
            s = [(f"x{t}.gather", "Gather", [src, self.init(f"{base}.cols{t}", cols.astype(np.int64))], {"axis": 0}),
                 (f"x{t}.transpose", "Transpose", [f"@x{t}.gather"], {"perm": [1, 0]}),
                 (f"x{t}.new", "Unsqueeze", [f"@x{t}.transpose", two], {})]                            # [B, c_p, 1]
            if source is not None:
                s.append((f"history{t}", "Concat", [ctx.histories[source][p], f"@x{t}.new"], {"axis": 2}))
            emit(s)
            hist.append(got[s[-1][0]])
        return hist

    def tie_branches(self, base: str, scores: str, top: str, live: str) -> dict:
        """The ``If`` branches giving the items' count ``n_items`` ``[B, 1, 1]`` of a
        hard-max self-attention without values: where the null key ties with the best
        items (``then``), the number of items with the top score times ``live``; else
        ``live`` itself (the count cancels in the items' share)."""
        then: list = []
        got = self.steps(then, base, None, [
            ("ties.argmax", "Equal", [scores, top], {}),
            ("ties.mask", "Cast", ["@ties.argmax"], {"to": self.elem}),
            self.reduce("ties.count", "ReduceSum", "@ties.mask", base, 2, 1),
            ("ties.items", "Mul", ["@ties.count", live], {}),
        ], bare=False)
        other: list = []
        alone = self.steps(other, base, None, [("ties.live", "Identity", [live], {})], bare=False)
        shape = [BATCH, 1, 1]
        return {"then_branch": helper.make_graph(then, f"{base}/ties.then", [], [
                    helper.make_tensor_value_info(got["ties.items"], self.elem, shape)]),
                "else_branch": helper.make_graph(other, f"{base}/ties.else", [], [
                    helper.make_tensor_value_info(alone["ties.live"], self.elem, shape)])}

    def embed(self, op: Embed, out: list, tokens: str, base: str, final: str) -> None:
        zero, one = self.ints(base, 0), self.ints(base, 1)
        table = self.init(f"{base}.table", self.floats(op.table))
        steps = [("truncate", "Slice", [tokens, zero, self.ints(base, op.max_len), one], {}),   # [B, L]
                 ("shape", "Shape", ["@truncate"], {}),
                 ("length", "Gather", ["@shape", one], {"axis": 0})]
        if isinstance(op.positions, BinaryPositions):
            steps += [("index", "Range", [self.init(f"{base}.zero", np.array(0, np.int64)), "@length",
                                          self.init(f"{base}.one", np.array(1, np.int64))], {}),
                      ("index.col", "Unsqueeze", ["@index", one], {})]                          # [L, 1]
            steps += self.binary_code(op.positions, "@index.col", base, "positions", rows=True)   # [L, w]
        else:
            positions = self.init(f"{base}.positions", self.floats(op.positions))
            steps.append(("positions", "Slice", [positions, zero, "@length", zero], {}))          # [L, w]
        steps += [("lookup", "Gather", [table, "@truncate"], {"axis": 0}),                        # [B, L, w]
                  ("add", "Add", ["@lookup", "@positions"], {}),
                  ("feature_major", "Transpose", ["@add"], {"perm": [1, 2, 0]})]                  # [L, w, B]
        self.steps(out, base, final, steps, op.cite, bare=False)

    def binary_code(self, code: BinaryPositions, n: str, base: str, step: str, rows: bool) -> list:
        """Steps computing positional vectors from int64 indices ``n``: ``[L, 1]`` -> rows
        ``[L, w]`` (``rows``), or a scalar -> a column ``[w, 1]``.  Bit ``k`` of
        ``n + offset`` is ``(n + offset) / 2^(bits-1-k) mod 2`` (Wei, Chen & Ma (C.1): Bin)."""
        place = code.placement()                                                       # [w, bits]
        s = [(f"{step}.n", "Add", [n, self.init(f"{base}.{step}.offset", np.array(code.offset, np.int64))], {}),
             (f"{step}.shift", "Div", [f"@{step}.n", self.init(f"{base}.{step}.powers", code.powers())], {}),
             (f"{step}.bit", "Mod", [f"@{step}.shift", self.init(f"{base}.{step}.two", np.array(2, np.int64))], {}),
             (f"{step}.float", "Cast", [f"@{step}.bit"], {"to": self.elem})]          # [L, bits] | [bits]
        if rows:
            s.append((step, "MatMul", [f"@{step}.float", self.init(f"{base}.{step}.place_t", self.floats(place.T))], {}))
        else:
            s += [(f"{step}.col", "Unsqueeze", [f"@{step}.float", self.ints(base, 1)], {}),      # [bits, 1]
                  (step, "MatMul", [self.init(f"{base}.{step}.place", self.floats(place)), f"@{step}.col"], {})]
        return s

    def body_graph_outputs(self, nodes: list, base: str, values: list[str]) -> list[str]:
        """``values`` as distinct values made by ``nodes`` (an ``Identity`` where not)."""
        made = {o for n in nodes for o in n.output}
        got: list[str] = []
        for v in values:
            if v not in made or v in got:
                v = self.steps(nodes, f"{base}/identity", None, [("identity", "Identity", [v], {})])["identity"]
            got.append(v)
        return got

    def decode(self, op: Decode, out: list, mem: str, base: str, final: str) -> None:
        outer, self.batch = self.batch, STEP_BATCH  # the per-step layers' forms
        try:
            self._decode(op, out, mem, base, final)
        finally:
            self.batch = outer

    def _decode(self, op: Decode, out: list, mem: str, base: str, final: str) -> None:
        pro, body = op.prologue, op.body
        for part, net in (("prologue", pro), ("body", body)):
            if any(net.kinds[o] != "vector" for o in net.outputs):
                raise NetIRError(f"decode {op.name!r}: the {part}'s outputs (o, tap) must be vectors")
        w0, w = len(pro.inputs[0].space), len(body.inputs[0].space)
        tap_w = len(body.spaces[body.outputs[1]])
        got = self.steps(out, base, None, [
            ("shape", "Shape", [mem], {}),
            ("batch", "Gather", ["@shape", self.ints(base, 2)], {"axis": 0}),
            ("x0.shape", "Concat", [self.ints(base, w0), "@batch"], {"axis": 0}),
            ("x0", "Expand", [self.init(f"{base}.init", self.floats(op.init[:, None])), "@x0.shape"], {}),
        ], op.cite, bare=False)
        batch = got["batch"]
        penv = self.net_ops(pro, out, {pro.inputs[0].name: got["x0"], pro.inputs[1].name: mem},
                            prefix=f"{base}/prologue/")
        o0, tap0 = penv[pro.outputs[0]], penv[pro.outputs[1]]
        if op.steps == 0:
            self.steps(out, base, final, [("taps", "Unsqueeze", [tap0, self.ints(base, 0)], {})], bare=False)
            return
        first = self.steps(out, base, None, [("tap0", "Unsqueeze", [tap0, self.ints(base, 0)], {})],
                           bare=False)["tap0"]
        bprefix = f"{base}/body/"
        ctx = _DecodeCtx()
        for a in body.nodes:  # cross-attention over the decoder memory: keys/values once
            if isinstance(a, Attention) and not a.is_self and a.inputs[1] == body.inputs[1].name \
                    and a.value_rows().size:
                ctx.cross[a.name] = self.memory_kv(a, out, mem, bprefix + a.name)
        hists = _history_parts(op)
        empty: list[str] = []
        for src, parts in hists.items():
            for p, cols in enumerate(parts):
                empty.append(self.steps(out, f"{base}/history.{src}{_part_tag(p)}", None, [
                    ("shape", "Concat", [batch, self.ints(base, len(cols), 0)], {"axis": 0}),
                    ("empty", "ConstantOfShape", ["@shape"],
                     {"value": helper.make_tensor("value", self.elem, [1], [0.0])}),
                ], bare=False)["empty"])
        # the loop body
        it = self.values.fresh(f"{base}/iter")
        cond_in = self.values.fresh(f"{base}/cond_in")
        cond_out = self.values.fresh(f"{base}/cond_out")
        o_prev = self.values.fresh(f"{base}/o")
        hist_in: list[onnx.ValueInfoProto] = []
        for src, parts in hists.items():
            ctx.parts[src] = parts
            ctx.histories[src] = [self.values.fresh(f"{base}/history.{src}{_part_tag(p)}") for p in range(len(parts))]
            hist_in += [helper.make_tensor_value_info(v, self.elem, [BATCH, len(c), None])
                        for v, c in zip(ctx.histories[src], parts)]
        nodes: list = []
        self.steps(nodes, f"{base}/cond", cond_out, [("cond", "Identity", [cond_in], {})])
        if isinstance(op.positions, BinaryPositions):  # β(i) = row i - 1 = the loop's iteration
            pos = self.binary_code(op.positions, it, base, "position", rows=False)
        else:
            positions = self.init(f"{base}.positions", self.floats(op.positions[:, :, None]))
            pos = [("position", "Gather", [positions, it], {"axis": 0})]                  # [w, 1]
        x = self.steps(nodes, base, None, pos + [("x", "Add", [o_prev, "@position"], {})], bare=False)["x"]
        benv = self.net_ops(body, nodes, {body.inputs[0].name: x, body.inputs[1].name: mem},
                            prefix=bprefix, ctx=ctx)
        new = [v for src in hists for v in ctx.new_histories[src]]
        widths = [len(c) for parts in hists.values() for c in parts]
        o, tap, *new = self.body_graph_outputs(nodes, base, [benv[body.outputs[0]], benv[body.outputs[1]], *new])
        hist_out = [helper.make_tensor_value_info(v, self.elem, [BATCH, c, None]) for v, c in zip(new, widths)]
        graph = helper.make_graph(
            nodes, f"{base}/body",
            [helper.make_tensor_value_info(it, TensorProto.INT64, []),
             helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []),
             _fm_info(o_prev, w, self.elem), *hist_in],
            [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), _fm_info(o, w, self.elem), *hist_out,
             _fm_info(tap, tap_w, self.elem)])
        trips = self.init(f"{base}.steps", np.array(op.steps, dtype=np.int64))
        finals = [self.values.fresh(f"{base}/o.final")]
        finals += [self.values.fresh(f"{base}/history.{src}{_part_tag(p)}.final")
                   for src, parts in hists.items() for p in range(len(parts))]
        taps = self.values.fresh(f"{base}/taps")
        out.append(helper.make_node("Loop", [trips, "", o0, *empty], [*finals, taps],
                                    name=self.nodes.fresh(base), body=graph))
        self.steps(out, base, final, [("concat", "Concat", [first, taps], {"axis": 0})], bare=False)

    def op(self, op: Op, out: list, env: dict[str, str], base: str, final: str,
           ctx: _DecodeCtx | None = None) -> None:
        ins = [env[i] for i in op.inputs]
        if isinstance(op, Affine):
            self.affine(op, out, ins[0], base, final)
        elif isinstance(op, ReLU):
            self.steps(out, base, final, [("relu", "Relu", ins, {})])
        elif isinstance(op, Activation):
            self.activation(op, out, ins[0], base, final)
        elif isinstance(op, Concat):
            self.steps(out, base, final, [("concat", "Concat", ins, {"axis": 0})])
        elif isinstance(op, Param):  # [n, 1] initializer expanded to [n, batch]
            self.steps(out, base, final, [
                ("batch", "Shape", [ins[0]], {"start": 1}),
                ("shape", "Concat", [self.ints(base, op.value.size), "@batch"], {"axis": 0}),
                ("expand", "Expand", [self.init(f"{base}.value", self.floats(op.value[:, None])), "@shape"], {}),
            ], op.cite, bare=False)
        elif isinstance(op, StopGradient):
            self.steps(out, base, final, [("identity", "Identity", ins, {})])
        elif isinstance(op, Mul):
            self.steps(out, base, final, [("mul", "Mul", ins, {})])
        elif isinstance(op, Slice):
            idx = self.init(f"{base}.indices", np.array(op.indices, dtype=np.int64))
            self.steps(out, base, final, [("gather", "Gather", [ins[0], idx], {"axis": 0})])
        elif isinstance(op, Loop):
            self.loop(op, out, ins[0], base, final)
        elif isinstance(op, Attention):
            self.attention(op, out, env, base, final, ctx)
        elif isinstance(op, Embed):
            self.embed(op, out, ins[0], base, final)
        elif isinstance(op, Decode):
            self.decode(op, out, ins[0], base, final)
        elif isinstance(op, PatchMap):
            onnx_grid.patch_map(self, op, out, ins[0], base, final)
        elif isinstance(op, MemoryGrid):
            onnx_grid.memory_grid(self, op, out, ins[0], base, final)
        elif isinstance(op, GridReadout):
            onnx_grid.grid_readout(self, op, out, ins[0], base, final)
        else:
            raise NetIRError(f"the ONNX emitter does not know {op.kind} op {op.name!r}")

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


def _matrix_bytes(w: SparseMatrix, form: str) -> int:
    n_out, n_in = w.shape
    if form == "dense":
        return 4 * n_out * n_in
    if form == "ell":
        return 12 * n_out * max(1, w.max_row_nnz)
    if form == "scatter":
        return 20 * w.nnz
    return 4 * n_out


def _position_entries(p) -> int:
    return p.placement().size if isinstance(p, BinaryPositions) else p.size


def _weight_bytes(net: Net, batch: int = BULK_BATCH) -> int:
    """The bytes the initializers of ``net`` will take (counted before building them)."""
    total = 0
    for op in net.nodes:
        if isinstance(op, Affine):
            form = affine_form(op, batch)
            n_out, n_in = op.weight.shape
            if form == "dense":
                total += 4 * n_out * n_in
            elif form == "ell":
                total += 12 * n_out * max(1, op.weight.max_row_nnz)
            elif form == "scatter":
                total += 20 * op.weight.nnz
            total += 8 * n_out
        elif isinstance(op, Slice):
            total += 8 * len(op.indices)
        elif isinstance(op, Param):
            total += 4 * op.value.size
        elif isinstance(op, Activation):
            total += 4 * 16  # its scalar constants (at most 16)
        elif isinstance(op, Loop):
            total += _weight_bytes(op.body, batch)
        elif isinstance(op, Attention):
            _, wv, _, _ = _value_map(op)
            dk, dv = op.key_width, wv.shape[0]
            if op.is_self:  # wq; wk_t [c, dk], bk, wv [dv, c], bv; null key/value; cols, rows
                c = op.memory_columns().size
                total += _matrix_bytes(op.wq, _matrix_form(op.wq, batch)) + 4 * dk
                total += 4 * (c * dk + dk + dv * c + dv) + 4 * (dk + dv) + 8 * (c + dv)
            else:
                for w in (op.wq, op.wk, wv):
                    total += _matrix_bytes(w, _matrix_form(w, batch)) + 4 * w.shape[0]  # + the bias
                total += 4 * dk + 12 * dv  # null key, null value, rows
        elif isinstance(op, Embed):
            total += 4 * (op.table.size + _position_entries(op.positions))
        elif isinstance(op, Decode):
            total += 4 * (op.init.size + _position_entries(op.positions))
            total += _weight_bytes(op.prologue, STEP_BATCH) + _weight_bytes(op.body, STEP_BATCH)
        elif isinstance(op, (PatchMap, GridReadout)):
            total += 64 + _weight_bytes(op.body, batch)  # + offsets, padding, column
        elif isinstance(op, MemoryGrid):
            total += 4 * op.weight.size + 32
    return total


def _props(net: Net, metadata: dict | None, extra: dict | None = None) -> dict[str, str]:
    props = {**net.metadata, **(metadata or {})}
    props.setdefault("tm2nn.version", __version__)
    for k, v in (extra or {}).items():
        props.setdefault(k, v)
    out = {}
    for k, v in props.items():
        if not isinstance(k, str):
            raise TypeError(f"metadata keys must be strings, got {k!r}")
        out[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return out


def _check_opset(opset: int) -> None:
    if opset < MIN_OPSET:
        raise ValueError(f"opset must be at least {MIN_OPSET}, got {opset}")


def _model(graph: onnx.GraphProto, opset: int, doc: str, props: dict[str, str],
           model: onnx.ModelProto | None = None) -> onnx.ModelProto:
    """The model of ``graph`` (``helper.make_model``); given ``model`` whose graph is
    ``graph`` already, the same fields are set on it (nothing is copied)."""
    opsets = [helper.make_opsetid("", opset)]
    if model is None:
        model = helper.make_model(graph, opset_imports=opsets, producer_name="tm2nn",
                                  producer_version=__version__,
                                  ir_version=helper.find_min_ir_version_for(opsets))
    else:
        if model.graph is not graph:  # pragma: no cover - a caller's mistake
            raise ValueError("the model does not hold this graph")
        model.opset_import.extend(opsets)
        model.producer_name, model.producer_version = "tm2nn", __version__
        model.ir_version = helper.find_min_ir_version_for(opsets)
    model.doc_string = doc
    for k in sorted(props):
        entry = model.metadata_props.add()
        entry.key, entry.value = k, props[k]
    return model


#: Internal -> batch-major permutation by value kind (tokens and grids are never
#: transposed: a grid is ``[B, H, W]`` inside too).
_TO_BATCH_MAJOR = {"vector": [1, 0], "sequence": [2, 0, 1], "grids": [1, 0, 2, 3]}
_TO_FEATURE_MAJOR = {"vector": [1, 0], "sequence": [1, 2, 0]}


def to_onnx(net: Net, metadata: dict[str, str] | None = None, opset: int = DEFAULT_OPSET,
            dtype: str = "float32") -> onnx.ModelProto:
    """Emit ``net`` as a self-contained ONNX model (see the module docstring).

    ``metadata`` (after ``net.metadata``, and ``tm2nn.version`` unless given) goes into
    ``metadata_props`` sorted by key; a value that is not a string is stored as JSON.
    ``dtype`` (``"float32"`` or ``"float64"``) is the type of every float input, output,
    weight and constant.
    """
    from tm2nn.gc_pause import gc_paused

    with gc_paused():  # tens of thousands of protobuf messages, no cycles
        return _to_onnx(net, metadata, opset, dtype)


def _to_onnx(net: Net, metadata: dict[str, str] | None, opset: int, dtype: str = "float32") -> onnx.ModelProto:
    _check_opset(opset)
    if len(set(net.outputs)) != len(net.outputs):
        raise NetIRError(f"net {net.name!r}: ONNX graph outputs must be distinct, got {list(net.outputs)}")
    size = _weight_bytes(net) * (2 if dtype == "float64" else 1)  # a bound: the int64 ones are counted twice
    if size > PROTO_MAX_BYTES:
        raise NetIRError(f"net {net.name!r}: the weights would take {size / 2**30:.2f} GiB, "
                         "more than one ONNX file can hold (2 GiB)")
    model = onnx.ModelProto()
    em = _Emitter(opset, model, dtype)
    inputs = {p.name for p in net.inputs}
    for p in net.inputs:
        em.values.reserve(p.name)
    for o in net.outputs:
        if o not in inputs:
            em.values.reserve(o)
    finals = {}
    for op in net.nodes:
        if op.name not in net.outputs:
            finals[op.name] = em.values.reserve(op.name)
    for op in net.nodes:
        if op.name in net.outputs:
            finals[op.name] = em.values.fresh(f"{op.name}/fm")

    nodes: list = []
    env: dict[str, str] = {}
    for p in net.inputs:
        if p.kind in ("tokens", "grid"):  # used as given
            env[p.name] = p.name
            continue
        env[p.name] = em.values.fresh(f"{p.name}/fm")
        em.steps(nodes, f"{p.name}/transpose", env[p.name],
                 [("transpose", "Transpose", [p.name], {"perm": _TO_FEATURE_MAJOR[p.kind]})])
    env = em.net_ops(net, nodes, env, finals=finals)
    for o in net.outputs:
        if o in inputs:
            continue
        if net.kinds[o] in _TO_BATCH_MAJOR:
            em.steps(nodes, f"{o}/transpose", o,
                     [("transpose", "Transpose", [env[o]], {"perm": _TO_BATCH_MAJOR[net.kinds[o]]})])
        else:
            em.steps(nodes, f"{o}/identity", o, [("identity", "Identity", [env[o]], {})])

    ports = {p.name: p for p in net.inputs}

    def io(name: str) -> onnx.ValueInfoProto:
        kind, width = net.kinds[name], len(net.spaces[name])
        if kind == "vector":
            return helper.make_tensor_value_info(name, em.elem, [BATCH, width])
        if kind == "grid":
            return helper.make_tensor_value_info(name, em.elem, [BATCH, "height", "width"])
        if kind == "grids":
            return helper.make_tensor_value_info(name, em.elem, [BATCH, "states", "height", "width"])
        if name in ports:
            length: str | int | None = f"{name}.length"
        else:
            op = net.node(name)
            length = op.steps + 1 if isinstance(op, Decode) else None
        if kind == "tokens":
            return helper.make_tensor_value_info(name, TensorProto.INT64, [BATCH, length])
        return helper.make_tensor_value_info(name, em.elem, [BATCH, length, width])

    graph = model.graph  # helper.make_graph's fields; the initializers are there already
    graph.node.extend(nodes)
    graph.name = net.name or "net"
    graph.input.extend([io(p.name) for p in net.inputs])
    graph.output.extend([io(o) for o in net.outputs])
    return _model(graph, opset, net.name, _props(net, metadata), model)


def to_onnx_step(decode: Decode, metadata: dict[str, str] | None = None,
                 opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """One step of ``decode``'s body as a model, for callers that drive the decoding
    (and keep the histories) themselves.

    Inputs, in this order (all float32):

    * ``x`` ``[batch, w]``: the body input ``o_{i-1} + β(i)`` (the caller adds the
      position, ``Bin(i)`` on the columns in ``tm2nn.decode.positions`` when that holds a
      binary code; ``o_0`` comes from the prologue, e.g. the ``Decode`` of a net with
      ``steps=0``);
    * ``memory`` ``[batch, L, w_mem]``: the decoder memory (the encoder outputs);
    * per attended history ``src`` of the body (``Decode.histories()``, in order):
      ``history.<src>`` ``[batch, c, n]``, the columns ``cols`` of ``src`` at steps
      ``1 .. i-1`` (``n = i - 1``; ``np.zeros((batch, c, 0))`` on the first step).

    Outputs: ``o`` ``[batch, w]``, ``tap`` ``[batch, tap_w]`` and, per history,
    ``history.<src>.out`` ``[batch, c, n + 1]`` (this step appended), to feed to the next
    step.  ``metadata_props`` holds ``tm2nn.decode.histories`` (the JSON ``{src: cols}``),
    ``tm2nn.decode.steps`` and ``tm2nn.decode.positions`` besides ``metadata``.  Values
    inside are named after the body's ops (without a prefix).
    """
    _check_opset(opset)
    body = decode.body
    size = _weight_bytes(body, STEP_BATCH)
    if size > PROTO_MAX_BYTES:
        raise NetIRError(f"decode {decode.name!r}: the weights would take {size / 2**30:.2f} GiB, "
                         "more than one ONNX file can hold (2 GiB)")
    if any(body.kinds[o] != "vector" for o in body.outputs):
        raise NetIRError(f"decode {decode.name!r}: the body's outputs (o, tap) must be vectors")
    hists = decode.histories()
    em = _Emitter(opset)
    em.batch = STEP_BATCH
    hist_names = [f"history.{src}" for src in hists]
    names = ["x", "memory"] + hist_names
    outs = ["o", "tap"] + [f"{n}.out" for n in hist_names]
    for n in names + outs:
        em.values.reserve(n)
    nodes: list = []
    fm = {}
    for n, kind in zip(names[:2], ["vector", "sequence"]):
        fm[n] = em.values.fresh(f"{n}/fm")
        em.steps(nodes, f"{n}/transpose", fm[n], [("transpose", "Transpose", [n], {"perm": _TO_FEATURE_MAJOR[kind]})])
    ctx = _DecodeCtx(histories={src: [n] for src, n in zip(hists, hist_names)},
                     parts={src: [c] for src, c in hists.items()})  # one part: the interface's columns
    env = em.net_ops(body, nodes, {body.inputs[0].name: fm["x"], body.inputs[1].name: fm["memory"]}, ctx=ctx)
    for n, v in zip(outs[:2], [env[body.outputs[0]], env[body.outputs[1]]]):
        em.steps(nodes, f"{n}/transpose", n, [("transpose", "Transpose", [v], {"perm": _TO_BATCH_MAJOR["vector"]})])
    for n, src in zip(outs[2:], hists):  # already batch-major
        em.steps(nodes, f"{n}/identity", n, [("identity", "Identity", [ctx.new_histories[src][0]], {})])

    w, tap_w = len(body.inputs[0].space), len(body.spaces[body.outputs[1]])
    w_mem = len(body.inputs[1].space)
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("x", f, [BATCH, w]),
           helper.make_tensor_value_info("memory", f, [BATCH, "memory.length", w_mem])]
    outputs = [helper.make_tensor_value_info("o", f, [BATCH, w]),
               helper.make_tensor_value_info("tap", f, [BATCH, tap_w])]
    for n, cols in zip(hist_names, hists.values()):
        ins.append(helper.make_tensor_value_info(n, f, [BATCH, len(cols), "history.length"]))
        outputs.append(helper.make_tensor_value_info(f"{n}.out", f, [BATCH, len(cols), "history.length.out"]))
    graph = helper.make_graph(nodes, f"{decode.name}/step", ins, outputs, initializer=em.initializers)
    pos = decode.positions
    extra = {"tm2nn.decode.histories": {src: c.tolist() for src, c in hists.items()},
             "tm2nn.decode.steps": str(decode.steps),
             "tm2nn.decode.positions": pos.to_json() if isinstance(pos, BinaryPositions) else {"kind": "table"}}
    return _model(graph, opset, f"{decode.name}/step", _props(body, metadata, extra))


# -- files, running, metadata -------------------------------------------------------------
def _serialize(model: onnx.ModelProto) -> bytes:
    # Serialised, then measured: ByteSize() serialises the whole model too (upb), and a
    # model of 2 GiB or more serialises, but no reader takes it.
    data = model.SerializeToString()
    if len(data) > PROTO_MAX_BYTES:
        raise ValueError(f"the model takes {len(data) / 2**30:.2f} GiB, more than one ONNX file can hold")
    return data


def save_onnx(model: onnx.ModelProto, path) -> Path:
    """Write ``model`` to ``path`` atomically (:func:`tm2nn.fileio.write_atomic`): a
    failure leaves no partial file, and any old file intact."""
    from tm2nn.fileio import write_atomic

    path = Path(path)
    write_atomic(path, _serialize(model))
    return path


def _load(model_or_path) -> onnx.ModelProto:
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (bytes, bytearray)):
        return onnx.load_model_from_string(bytes(model_or_path))
    return onnx.load(os.fspath(model_or_path), load_external_data=False)


def onnx_metadata(model_or_path) -> dict[str, str]:
    """``metadata_props`` of a model (a ModelProto, serialized bytes or a path) as a dict."""
    return {p.key: p.value for p in _load(model_or_path).metadata_props}


def onnx_session(model_or_path_or_bytes, threads: int | None = None):
    """An onnxruntime session on the CPU for a model (a ModelProto, serialized bytes or a
    path); build it once and pass it to :func:`run_onnx` to run many batches.  ``threads``
    sets onnxruntime's intra-op threads (default: its own choice, one per core); a
    transformer decode of batch 1 is a chain of small ops, fastest on one."""
    import onnxruntime as ort

    src = model_or_path_or_bytes
    if isinstance(src, onnx.ModelProto):
        src = _serialize(src)
    elif not isinstance(src, (bytes, bytearray)):
        src = os.fspath(src)
    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # fatal only: a failure is raised (and reported once) by the caller
    if threads is not None:
        opts.intra_op_num_threads = int(threads)
    return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])


def _run_session(sess, feed: dict):
    """``sess.run`` on one batch; under :func:`tm2nn.interrupt.graceful` it runs in a
    worker thread, so Ctrl-C stops it through ``RunOptions.terminate`` (a Loop of many
    steps is one call, and Python handles no signal until it returns)."""
    import onnxruntime as ort

    from tm2nn import interrupt

    if not interrupt.active():
        return sess.run(None, feed)
    ro = ort.RunOptions()
    return interrupt.run_blocking(lambda: sess.run(None, feed, ro), lambda: setattr(ro, "terminate", True))


#: numpy type of each onnxruntime input type (any other input is fed as float32)
_INPUT_TYPES = {"tensor(int64)": np.int64, "tensor(double)": np.float64}


def run_onnx(model_or_path_or_bytes, *arrays, batch_size: int = 4096):
    """Run numpy arrays (one per graph input, in order, batch first: ``[n, width]``,
    ``[n, length, width]`` or token ids ``[n, length]``) through onnxruntime on the CPU,
    ``batch_size`` rows at a time (``model_or_path_or_bytes`` may be an
    :func:`onnx_session`).  Each array is cast to its input's type (float32, float64 for a
    model emitted in float64, or int64 for token ids).  Returns an array of the output's
    type, or a tuple of them when the model has several outputs."""
    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    src = model_or_path_or_bytes
    sess = src if hasattr(src, "get_inputs") else onnx_session(src)
    names = [i.name for i in sess.get_inputs()]
    if len(arrays) != len(names):
        raise TypeError(f"the model takes {len(names)} input(s) {names}, got {len(arrays)}")
    types = [_INPUT_TYPES.get(i.type, np.float32) for i in sess.get_inputs()]
    arrs = [np.asarray(a, dtype=t) for a, t in zip(arrays, types)]
    lengths = {a.shape[0] if a.ndim else -1 for a in arrs}
    if len(lengths) > 1 or -1 in lengths:
        raise ValueError(f"input arrays must be [n, ...] with one n, got shapes {[a.shape for a in arrs]}")
    n = lengths.pop() if lengths else 0
    chunks = []
    for s in range(0, max(n, 1), batch_size):
        feed = {name: np.ascontiguousarray(a[s:s + batch_size]) for name, a in zip(names, arrs)}
        chunks.append(_run_session(sess, feed))
    outs = [c[0] if len(chunks) == 1 else np.concatenate(c) for c in zip(*chunks)]
    return outs[0] if len(outs) == 1 else tuple(outs)
