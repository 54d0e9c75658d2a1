"""NetIR -> ONNX, built with ``onnx.helper``; plus saving, running and metadata.

The model is one self-contained file: float32 weights are initializers, a ``Loop`` op is
an ONNX ``Loop`` (its body weights are outer-scope initializers, so the model does not
grow with the trip count).  Inputs and outputs are ``[batch, width]`` float32, named after
the net's input ports and outputs.

Inside, values are feature-major ``[width, batch]`` (one ``Transpose`` per input and per
output), because onnxruntime gathers contiguous rows (``Gather`` axis 0) about nine times
faster than columns.  The value computed by op ``X`` is named ``X`` (``X/fm`` when ``X`` is
also a graph output, whose batch-major copy takes the name ``X``); its nodes are named
``X`` or ``X/<step>``, its initializers ``X.weight``, ``X.bias``, ``X.cols.<j>``, ...; a
loop body's values, nodes and initializers are prefixed with ``<loop>/``.  Affine forms:

* ``diagonal``: ``Mul(x, d[:, None])`` then ``Add(bias)``;
* ``ell``:      per slot ``j``: ``Gather(x, X.cols.j, axis=0)``, ``Mul(X.weight.j)``,
  summed with ``Add``, then ``Add(bias)``;
* ``dense``:    ``MatMul(W, x)`` then ``Add(bias)``.

The bias ``Add`` is left out when the bias is zero.  Emission is deterministic: the same
Net gives byte-identical ``SerializeToString()``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tm2nn import __version__
from tm2nn.emit import affine_form
from tm2nn.nets import Affine, Concat, Loop, Net, NetIRError, Op, ReLU, Slice

DEFAULT_OPSET = 18
MIN_OPSET = 13
#: protobuf cannot serialise a message of 2 GiB or more.
PROTO_MAX_BYTES = (2 << 30) - 1
BATCH = "batch"


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


def _f32(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _fm_info(name: str, width: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [width, BATCH])


class _Emitter:
    def __init__(self) -> None:
        self.values = _Names()  # values and initializers share one namespace
        self.nodes = _Names()
        self.initializers: list[onnx.TensorProto] = []

    def init(self, name: str, array: np.ndarray) -> str:
        name = self.values.fresh(name)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def steps(self, out: list, base: str, final: str, steps: list, doc: str = "") -> None:
        """Append ``steps`` ``(step, op_type, inputs, attrs)`` as nodes; ``inputs`` may name
        an earlier step as ``"@step"``.  The last step writes ``final``."""
        produced: dict[str, str] = {}
        for i, (step, op_type, inputs, attrs) in enumerate(steps):
            last = i == len(steps) - 1
            value = final if last else self.values.fresh(f"{base}/{step}")
            node_name = self.nodes.fresh(base if len(steps) == 1 else f"{base}/{step}")
            ins = [produced[x[1:]] if x.startswith("@") else x for x in inputs]
            node = helper.make_node(op_type, ins, [value], name=node_name, **attrs)
            if doc:
                node.doc_string = doc
            out.append(node)
            produced[step] = value

    # -- ops -------------------------------------------------------------------------------
    def affine(self, op: Affine, out: list, x: str, base: str, final: str) -> None:
        w = op.weight
        form = affine_form(op)
        steps: list = []
        if form == "diagonal":
            d = np.zeros(w.shape[0])
            d[w.rows] = w.vals
            steps.append(("mul", "Mul", [x, self.init(f"{base}.weight", _f32(d[:, None]))], {}))
            last = "@mul"
        elif form == "ell":
            cols, vals = w.ell()
            for j in range(cols.shape[1]):
                c = self.init(f"{base}.cols.{j}", np.ascontiguousarray(cols[:, j], dtype=np.int64))
                v = self.init(f"{base}.weight.{j}", _f32(vals[:, j, None]))
                steps.append((f"gather.{j}", "Gather", [x, c], {"axis": 0}))
                steps.append((f"mul.{j}", "Mul", [f"@gather.{j}", v], {}))
                if j:
                    prev = "@mul.0" if j == 1 else f"@sum.{j - 1}"
                    steps.append((f"sum.{j}", "Add", [prev, f"@mul.{j}"], {}))
            last = "@" + steps[-1][0]
        else:
            steps.append(("matmul", "MatMul", [self.init(f"{base}.weight", _f32(w.dense())), x], {}))
            last = "@matmul"
        if np.any(op.bias != 0):
            steps.append(("bias", "Add", [last, self.init(f"{base}.bias", _f32(op.bias[:, None]))], {}))
        self.steps(out, base, final, steps, op.cite)

    def loop(self, op: Loop, out: list, x: str, base: str, final: str) -> None:
        body = op.body
        port = body.inputs[0]
        width = len(port.space)
        trips = self.init(f"{base}.trips", np.array(op.trips, dtype=np.int64))
        it = self.values.fresh(f"{base}/iter")
        cond_in = self.values.fresh(f"{base}/cond_in")
        cond_out = self.values.fresh(f"{base}/cond_out")
        carried = self.values.fresh(f"{base}/{port.name}")
        nodes: list = []
        self.steps(nodes, f"{base}/cond", cond_out, [("cond", "Identity", [cond_in], {})])
        env = self.net_ops(body, nodes, {port.name: carried}, prefix=f"{base}/")
        result = env[body.outputs[0]]
        if result == carried:  # an identity body
            result = self.values.fresh(f"{base}/{port.name}/out")
            self.steps(nodes, f"{base}/identity", result, [("identity", "Identity", [carried], {})])
        graph = helper.make_graph(
            nodes, f"{base}/body",
            [helper.make_tensor_value_info(it, TensorProto.INT64, []),
             helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []),
             _fm_info(carried, width)],
            [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), _fm_info(result, width)])
        node = helper.make_node("Loop", [trips, "", x], [final], name=self.nodes.fresh(base), body=graph)
        out.append(node)

    def op(self, op: Op, out: list, env: dict[str, str], base: str, final: str) -> None:
        ins = [env[i] for i in op.inputs]
        if isinstance(op, Affine):
            self.affine(op, out, ins[0], base, final)
        elif isinstance(op, ReLU):
            self.steps(out, base, final, [("relu", "Relu", ins, {})])
        elif isinstance(op, Concat):
            self.steps(out, base, final, [("concat", "Concat", ins, {"axis": 0})])
        elif isinstance(op, Slice):
            idx = self.init(f"{base}.indices", np.array(op.indices, dtype=np.int64))
            self.steps(out, base, final, [("gather", "Gather", [ins[0], idx], {"axis": 0})])
        elif isinstance(op, Loop):
            self.loop(op, out, ins[0], base, final)
        else:
            raise NetIRError(f"the ONNX emitter does not know {op.kind} op {op.name!r}")

    def net_ops(self, net: Net, out: list, env: dict[str, str], prefix: str = "",
                finals: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(env)
        for op in net.nodes:
            base = prefix + op.name
            final = finals[op.name] if finals else self.values.fresh(base)
            self.op(op, out, env, base, final)
            env[op.name] = final
        return env


def _weight_bytes(net: Net) -> int:
    """The bytes the initializers of ``net`` will take (counted before building them)."""
    total = 0
    for op in net.nodes:
        if isinstance(op, Affine):
            form = affine_form(op)
            n_out, n_in = op.weight.shape
            if form == "dense":
                total += 4 * n_out * n_in
            elif form == "ell":
                total += 12 * n_out * max(1, op.weight.max_row_nnz)
            total += 8 * n_out
        elif isinstance(op, Slice):
            total += 8 * len(op.indices)
        elif isinstance(op, Loop):
            total += _weight_bytes(op.body)
    return total


def _props(net: Net, metadata: dict | None) -> dict[str, str]:
    props = {**net.metadata, **(metadata or {})}
    props.setdefault("tm2nn.version", __version__)
    out = {}
    for k, v in props.items():
        if not isinstance(k, str):
            raise TypeError(f"metadata keys must be strings, got {k!r}")
        out[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return out


def to_onnx(net: Net, metadata: dict[str, str] | None = None, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """Emit ``net`` as a self-contained ONNX model (see the module docstring).

    ``metadata`` (after ``net.metadata``, and ``tm2nn.version`` unless given) goes into
    ``metadata_props`` sorted by key; a value that is not a string is stored as JSON.
    """
    if opset < MIN_OPSET:
        raise ValueError(f"opset must be at least {MIN_OPSET}, got {opset}")
    if len(set(net.outputs)) != len(net.outputs):
        raise NetIRError(f"net {net.name!r}: ONNX graph outputs must be distinct, got {list(net.outputs)}")
    size = _weight_bytes(net)
    if size > PROTO_MAX_BYTES:
        raise NetIRError(f"net {net.name!r}: the weights would take {size / 2**30:.2f} GiB, "
                         "more than one ONNX file can hold (2 GiB)")
    em = _Emitter()
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
        env[p.name] = em.values.fresh(f"{p.name}/fm")
        em.steps(nodes, f"{p.name}/transpose", env[p.name],
                 [("transpose", "Transpose", [p.name], {"perm": [1, 0]})])
    env = em.net_ops(net, nodes, env, finals=finals)
    for o in net.outputs:
        if o not in inputs:
            em.steps(nodes, f"{o}/transpose", o, [("transpose", "Transpose", [env[o]], {"perm": [1, 0]})])

    def io(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [BATCH, len(net.spaces[name])])

    graph = helper.make_graph(nodes, net.name or "net", [io(p.name) for p in net.inputs],
                              [io(o) for o in net.outputs], initializer=em.initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="tm2nn",
                              producer_version=__version__,
                              ir_version=helper.find_min_ir_version_for(opsets))
    model.doc_string = net.name
    props = _props(net, metadata)
    for k in sorted(props):
        entry = model.metadata_props.add()
        entry.key, entry.value = k, props[k]
    return model


# -- files, running, metadata -------------------------------------------------------------
def _serialize(model: onnx.ModelProto) -> bytes:
    size = model.ByteSize()
    if size > PROTO_MAX_BYTES:
        raise ValueError(f"the model takes {size / 2**30:.2f} GiB, more than one ONNX file can hold")
    return model.SerializeToString()


def save_onnx(model: onnx.ModelProto, path) -> Path:
    """Write ``model`` to ``path`` atomically: a temporary file in the same directory is
    renamed over ``path``, so a failure leaves no partial file (and any old file intact)."""
    path = Path(path)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(_serialize(model))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
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


def run_onnx(model_or_path_or_bytes, *arrays, batch_size: int = 4096):
    """Run numpy ``[n, width]`` arrays (one per graph input, in order) through onnxruntime
    on the CPU, ``batch_size`` rows at a time.  Returns a float32 array, or a tuple of
    them when the model has several outputs."""
    import onnxruntime as ort

    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    src = model_or_path_or_bytes
    if isinstance(src, onnx.ModelProto):
        src = _serialize(src)
    elif not isinstance(src, (bytes, bytearray)):
        src = os.fspath(src)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    if len(arrays) != len(names):
        raise TypeError(f"the model takes {len(names)} input(s) {names}, got {len(arrays)}")
    arrs = [np.asarray(a, dtype=np.float32) for a in arrays]
    lengths = {a.shape[0] if a.ndim else -1 for a in arrs}
    if len(lengths) > 1 or -1 in lengths:
        raise ValueError(f"input arrays must be [n, width] with one n, got shapes {[a.shape for a in arrs]}")
    n = lengths.pop() if lengths else 0
    chunks = []
    for s in range(0, max(n, 1), batch_size):
        feed = {name: np.ascontiguousarray(a[s:s + batch_size]) for name, a in zip(names, arrs)}
        chunks.append(sess.run(None, feed))
    outs = [c[0] if len(chunks) == 1 else np.concatenate(c) for c in zip(*chunks)]
    return outs[0] if len(outs) == 1 else tuple(outs)
