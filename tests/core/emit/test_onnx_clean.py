"""Every backend's ONNX model is clean: each initializer is read by some node (a Loop
body's outer-scope reads count), ``onnx.checker`` accepts it, and onnxruntime logs no
warning when it builds a session on it (it warns about, and drops, an initializer no
node reads)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tm2nn.compiler import compile
from tm2nn.handle import Compiled

from ...conftest import EXAMPLES


def _graphs(graph: onnx.GraphProto):
    """``graph`` and every subgraph inside it (Loop and If bodies, at any depth)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for g in attr.graphs:
                yield from _graphs(g)


def unused_initializers(model: onnx.ModelProto) -> list[str]:
    """The initializers (of the main graph or of a subgraph) that no node reads and no
    graph returns.  A subgraph reads outer-scope values by name, so a name read anywhere
    in the tree counts as read (the emitter's names are unique across the model)."""
    reads: set[str] = set()
    inits: list[str] = []
    for g in _graphs(model.graph):
        inits += [t.name for t in g.initializer]
        reads.update(o.name for o in g.output)
        for node in g.node:
            reads.update(node.input)
    return [name for name in inits if name not in reads]


def ort_warnings(model: onnx.ModelProto, capfd) -> list[str]:
    """The warning and error lines onnxruntime logs (to fd 2, from C++) while it builds a
    CPU session on ``model``."""
    capfd.readouterr()
    opts = ort.SessionOptions()
    opts.log_severity_level = 1  # info and up; info lines are filtered out below
    ort.InferenceSession(model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    out, err = capfd.readouterr()
    return [line for line in (out + err).splitlines() if "[W:onnxruntime" in line or "[E:onnxruntime" in line]


def _abbe_sandon():
    """The float64 Abbe–Sandon net G_n of the 4-bit parity learner, as exported
    (``tests/backends/abbe_sandon/test_abbe_sandon_torch.py``: ``model(...)``, saved)."""
    from tm2nn.backends.abbe_sandon.backend import model
    from tm2nn.backends.abbe_sandon.ir_net import build_ir_net
    from tm2nn.learners.examples import parity_learner

    return Compiled.of(model(build_ir_net(parity_learner(4))))


MODELS = {
    "relu-circuit/full_adder": lambda: compile(EXAMPLES / "full_adder.circ", "relu-circuit"),
    "relu-circuit/binary_increment": lambda: compile(EXAMPLES / "binary_increment.tm", "relu-circuit", steps=10),
    "transformer/bb3": lambda: compile(EXAMPLES / "bb3.tm", "transformer", steps=30),
    "transformer/bb3-softmax": lambda: compile(EXAMPLES / "bb3.tm", "transformer", steps=12, attention="softmax"),
    "transformer/bb3-own-histories": lambda: compile(EXAMPLES / "bb3.tm", "transformer", steps=12,
                                                     shared_history=False),
    "rcnn/bb3": lambda: compile(EXAMPLES / "bb3.tm", "rcnn", steps=25, max_input=2),
    "gd-trace/bb3": lambda: compile(EXAMPLES / "bb3.tm", "gd-trace", steps=25, max_input=2),
    "abbe-sandon/parity4-float64": _abbe_sandon,
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request) -> onnx.ModelProto:
    """The model ``Compiled.onnx()`` gives (what ``tm2nn compile -o x.onnx`` writes)."""
    return MODELS[request.param]().onnx()


def test_every_initializer_is_read(model):
    assert unused_initializers(model) == []


def test_checker_accepts(model):
    onnx.checker.check_model(model, full_check=True)


def test_onnxruntime_logs_no_warning(model, capfd):
    assert ort_warnings(model, capfd) == []


def test_the_checks_see_an_unused_initializer(capfd):
    """The detectors are not vacuous: a Loop body's outer-scope read counts as a read, a
    dead initializer is found, and onnxruntime's warning about it is captured."""
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "step"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", f, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", f, [1])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)], "g",
        [helper.make_tensor_value_info("x", f, [1])], [helper.make_tensor_value_info("y", f, [1])],
        initializer=[numpy_helper.from_array(np.array(3, np.int64), "trips"),
                     numpy_helper.from_array(np.ones(1, np.float32), "step"),  # read in the body only
                     numpy_helper.from_array(np.zeros(1, np.float32), "dead")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(model)
    assert unused_initializers(model) == ["dead"]
    warned = ort_warnings(model, capfd)
    assert len(warned) == 1 and "'dead'" in warned[0]
