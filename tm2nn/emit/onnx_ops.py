"""The ONNX emitters of the vector ops (:mod:`tm2nn.nets.ops`), one table entry each
(:func:`~tm2nn.emit.onnx_graph.onnx_emitter`; conventions in :mod:`tm2nn.emit.onnx_graph`):

* ``Affine``: the form :func:`tm2nn.emit.affine_form` chose (``_Emitter.matrix_steps``);
* ``ReLU``: ``Relu``; ``Activation``: the registry's ONNX formula
  (:mod:`tm2nn.nets.activations`), its scalar constants initializers ``<op>.<tag>``;
* ``Concat``: ``Concat`` on axis 0; ``Slice``: ``Gather`` of ``X.indices`` on axis 0;
* ``Param``: the ``[n, 1]`` initializer ``X.value`` expanded over the batch;
* ``StopGradient``: ``Identity`` (ONNX models are not differentiated); ``Mul``: ``Mul``;
* ``Loop``: an ONNX ``Loop`` whose body weights are outer-scope initializers, so the model
  does not grow with the trip count; with ``scan`` the states are its scan output, with
  ``x_0`` in front; with ``until_fixed`` the body's condition is "some element changed",
  and the trips not run are copies of the last state.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tm2nn.emit import affine_form
from tm2nn.emit.onnx_graph import (
    _DecodeCtx,
    _Emitter,
    _fm_info,
    _grid_info,
    matrix_bytes,
    onnx_emitter,
    weight_bytes,
)
from tm2nn.nets import Activation, Affine, Concat, Loop, Mul, Param, ReLU, Slice, StopGradient
from tm2nn.nets.activations import get as get_activation


def _affine_bytes(op: Affine, batch: int) -> int:
    form = affine_form(op, batch)
    return (0 if form == "diagonal" else matrix_bytes(op.weight, form)) + 8 * op.weight.shape[0]


@onnx_emitter(Affine, weight_bytes=_affine_bytes)
def emit_affine(em: _Emitter, op: Affine, out: list, ins: list[str], base: str, final: str,
                ctx: _DecodeCtx | None) -> None:
    em.steps(out, base, final, em.matrix_steps(op.weight, op.bias, ins[0], base, affine_form(op, em.batch)),
             op.cite)


@onnx_emitter(ReLU)
def emit_relu(em: _Emitter, op: ReLU, out: list, ins: list[str], base: str, final: str,
              ctx: _DecodeCtx | None) -> None:
    em.steps(out, base, final, [("relu", "Relu", ins, {})])


@onnx_emitter(Activation, weight_bytes=lambda op, batch: 4 * 16)  # its scalar constants (at most 16)
def emit_activation(em: _Emitter, op: Activation, out: list, ins: list[str], base: str, final: str,
                    ctx: _DecodeCtx | None) -> None:
    """The registry's ONNX formula for ``op.fn``; its scalar constants are float
    initializers ``<op>.<tag>`` (one per tag)."""
    x = ins[0]
    consts: dict[str, str] = {}

    def const(tag: str, value: float) -> str:
        if tag not in consts:
            consts[tag] = em.init(f"{base}.{tag}", em.scalar(value))
        return consts[tag]

    fn = get_activation(op.fn)
    em.steps(out, base, final, fn.onnx(x, const), op.cite or fn.cite, bare=False)


@onnx_emitter(Concat)
def emit_concat(em: _Emitter, op: Concat, out: list, ins: list[str], base: str, final: str,
                ctx: _DecodeCtx | None) -> None:
    em.steps(out, base, final, [("concat", "Concat", ins, {"axis": 0})])


@onnx_emitter(Param, weight_bytes=lambda op, batch: 4 * op.value.size)
def emit_param(em: _Emitter, op: Param, out: list, ins: list[str], base: str, final: str,
               ctx: _DecodeCtx | None) -> None:
    """The ``[n, 1]`` initializer expanded to ``[n, batch]``."""
    em.steps(out, base, final, [
        ("batch", "Shape", [ins[0]], {"start": 1}),
        ("shape", "Concat", [em.ints(base, op.value.size), "@batch"], {"axis": 0}),
        ("expand", "Expand", [em.init(f"{base}.value", em.floats(op.value[:, None])), "@shape"], {}),
    ], op.cite, bare=False)


@onnx_emitter(StopGradient)
def emit_stop_gradient(em: _Emitter, op: StopGradient, out: list, ins: list[str], base: str, final: str,
                       ctx: _DecodeCtx | None) -> None:
    em.steps(out, base, final, [("identity", "Identity", ins, {})])


@onnx_emitter(Mul)
def emit_mul(em: _Emitter, op: Mul, out: list, ins: list[str], base: str, final: str,
             ctx: _DecodeCtx | None) -> None:
    em.steps(out, base, final, [("mul", "Mul", ins, {})])


@onnx_emitter(Slice, weight_bytes=lambda op, batch: 8 * len(op.indices))
def emit_slice(em: _Emitter, op: Slice, out: list, ins: list[str], base: str, final: str,
               ctx: _DecodeCtx | None) -> None:
    idx = em.init(f"{base}.indices", np.array(op.indices, dtype=np.int64))
    em.steps(out, base, final, [("gather", "Gather", [ins[0], idx], {"axis": 0})])


@onnx_emitter(Loop, weight_bytes=lambda op, batch: weight_bytes(op.body, batch))
def emit_loop(em: _Emitter, op: Loop, out: list, ins: list[str], base: str, final: str,
              ctx: _DecodeCtx | None) -> None:
    x = ins[0]
    body = op.body
    port = body.inputs[0]
    width = len(port.space)
    info = (lambda name: _grid_info(name, em.elem)) if port.kind == "grid" else \
        (lambda name, _w=width: _fm_info(name, _w, em.elem))
    trips = em.init(f"{base}.trips", np.array(op.trips, dtype=np.int64))
    it = em.values.fresh(f"{base}/iter")
    cond_in = em.values.fresh(f"{base}/cond_in")
    cond_out = em.values.fresh(f"{base}/cond_out")
    carried = em.values.fresh(f"{base}/{port.name}")
    nodes: list = []
    env = em.net_ops(body, nodes, {port.name: carried}, prefix=f"{base}/")
    result = env[body.outputs[0]]
    if result == carried:  # an identity body
        result = em.values.fresh(f"{base}/{port.name}/out")
        em.steps(nodes, f"{base}/identity", result, [("identity", "Identity", [carried], {})])
    if op.until_fixed:  # go on while some element changed (Loop.until_fixed)
        em.steps(nodes, f"{base}/cond", cond_out, [
            ("same", "Equal", [result, carried], {}),
            ("changed", "Not", ["@same"], {}),
            ("count", "Cast", ["@changed"], {"to": TensorProto.INT32}),
            ("any", "ReduceMax", ["@count"], {"keepdims": 0}),  # over every axis
            ("cond", "Cast", ["@any"], {"to": TensorProto.BOOL}),
        ], bare=False)
    else:
        em.steps(nodes, f"{base}/cond", cond_out, [("cond", "Identity", [cond_in], {})])
    outs = [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), info(result)]
    scanned = None
    if op.scan:  # every state after a trip, as a scan output
        scanned = em.values.fresh(f"{base}/{port.name}/scan")
        em.steps(nodes, f"{base}/scan", scanned, [("scan", "Identity", [result], {})])
        outs.append(info(scanned))
    graph = helper.make_graph(
        nodes, f"{base}/body",
        [helper.make_tensor_value_info(it, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []), info(carried)], outs)
    # The loop's own condition input must be given for the body's to count (ONNX Loop).
    cond = em.init(f"{base}.cond", np.array(True)) if op.until_fixed else ""
    if not op.scan:
        out.append(helper.make_node("Loop", [trips, cond, x], [final], name=em.nodes.fresh(base), body=graph))
        return
    last, states = em.values.fresh(f"{base}/last"), em.values.fresh(f"{base}/states")
    out.append(helper.make_node("Loop", [trips, cond, x], [last, states], name=em.nodes.fresh(base), body=graph))
    tail = []
    if op.until_fixed:  # the trips not run would each give `last` again
        tail = [
            ("last_shape", "Shape", [last], {}),
            ("done", "Shape", [states], {"start": 0, "end": 1}),
            ("left", "Sub", [em.ints(base, op.trips), "@done"], {}),
            ("shape", "Concat", ["@left", "@last_shape"], {"axis": 0}),
            ("last1", "Unsqueeze", [last, em.ints(base, 0)], {}),
            ("rest", "Expand", ["@last1", "@shape"], {}),
        ]
    em.steps(out, base, final, [  # x_0 in front of x_1 .. x_trips
        *tail,
        ("first", "Unsqueeze", [x, em.ints(base, 0)], {}),
        ("states", "Concat", ["@first", states, *(["@rest"] if tail else [])], {"axis": 0}),
    ], bare=False)
