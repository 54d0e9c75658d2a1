"""NetIR -> an ONNX model: :func:`to_onnx` (and :func:`to_onnx_step`, one decoder step)
assemble the graph the op emitters write (:mod:`tm2nn.emit.onnx_graph`, whose table the
modules imported here fill) into a model with its metadata and opset, and the model files:
:func:`save_onnx`, :func:`onnx_metadata`, :func:`serialize`.

The model is one self-contained file: float32 weights are initializers (float64 with
``to_onnx(..., dtype="float64")``: every float tensor, constant, ``Cast`` and value info
then has that type, chosen in one place, ``_Emitter.dtype``), a ``Loop`` op is
an ONNX ``Loop`` (its body weights are outer-scope initializers, so the model does not
grow with the trip count), and so is a ``Decode`` op's step loop.

Graph inputs and outputs are named after the net's input ports and outputs and are
batch-major, by value kind: a ``vector`` is ``[batch, width]`` float32, a ``sequence``
``[batch, length, width]`` float32 and ``tokens`` ``[batch, length]`` int64.  Inside,
values are feature-major (:mod:`tm2nn.emit.onnx_graph`): one ``Transpose`` per input and
per output.  ``metadata_props`` holds the net's metadata, the caller's and
``tm2nn.version``, sorted by key.

Emission is deterministic: the same Net gives byte-identical ``SerializeToString()``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from tm2nn._version import __version__
from tm2nn.emit import STEP_BATCH, onnx_grid, onnx_ops, onnx_seq  # noqa: F401 - their emitters fill the table
from tm2nn.emit.onnx_graph import BATCH, DEFAULT_OPSET, _DecodeCtx, _Emitter, weight_bytes
from tm2nn.fileio import write_atomic
from tm2nn.gc_pause import gc_paused
from tm2nn.nets import BinaryPositions, Decode, Net, NetIRError

MIN_OPSET = 13
#: protobuf cannot serialise a message of 2 GiB or more.
PROTO_MAX_BYTES = (2 << 30) - 1


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
    with gc_paused():  # tens of thousands of protobuf messages, no cycles
        return _to_onnx(net, metadata, opset, dtype)


def _to_onnx(net: Net, metadata: dict[str, str] | None, opset: int, dtype: str = "float32") -> onnx.ModelProto:
    _check_opset(opset)
    if len(set(net.outputs)) != len(net.outputs):
        raise NetIRError(f"net {net.name!r}: ONNX graph outputs must be distinct, got {list(net.outputs)}")
    size = weight_bytes(net) * (2 if dtype == "float64" else 1)  # a bound: the int64 ones are counted twice
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
    size = weight_bytes(body, STEP_BATCH)
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


# -- files and metadata ---------------------------------------------------------------------
def serialize(model: onnx.ModelProto) -> bytes:
    """``model`` serialised; a model of 2 GiB or more is refused (no reader takes it)."""
    # Serialised, then measured: ByteSize() serialises the whole model too (upb), and a
    # model of 2 GiB or more serialises, but no reader takes it.
    data = model.SerializeToString()
    if len(data) > PROTO_MAX_BYTES:
        raise ValueError(f"the model takes {len(data) / 2**30:.2f} GiB, more than one ONNX file can hold")
    return data


def save_onnx(model: onnx.ModelProto, path) -> Path:
    """Write ``model`` to ``path`` atomically (:func:`tm2nn.fileio.write_atomic`): a
    failure leaves no partial file, and any old file intact."""
    path = Path(path)
    write_atomic(path, serialize(model))
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
