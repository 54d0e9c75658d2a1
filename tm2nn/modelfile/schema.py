"""What a model file must hold, checked when it is loaded (docs/api.md, "Loading models").

* **Metadata**: every ``tm2nn.*`` key has a kind (:data:`KINDS`): a string, a JSON
  object or list, a hex sha256, a known backend or source format.  :data:`REQUIRED` and
  :data:`OPTIONAL` list every model's keys; a backend names the ones its ``rebuild`` and
  decoding read in :attr:`~tm2nn.backends.protocol.Backend.model_keys`.  A key is
  ``tm2nn.name`` or a path into its JSON, ``tm2nn.name/field/field``.
  :func:`parse_metadata` returns the values parsed (JSON decoded), or raises one
  :class:`~tm2nn.errors.Tm2nnError` naming the first bad or missing key.
* **Promises**: the encodings the file records must be the ones its source compiles to
  (:func:`check_encodings`), and an ONNX graph's inputs and outputs (names, element
  types, ranks, fixed dimensions) those of the construction's own ONNX
  (:func:`check_signature`).
* **Weights**: :func:`onnx_edit` and :func:`state_dict_edit` say where a file's weights
  first differ from the construction's (None when they do not), so a model edited on
  purpose loads, flagged as edited, and ``tm2nn eval`` checks its answers.

Errors name the file (``Tm2nnError(..., file=path)`` renders ``MODEL: error: ...``).
"""

from __future__ import annotations

import io
import json
import re

from tm2nn import backends
from tm2nn.errors import Tm2nnError
from tm2nn.nets import Net, Space, SparseMatrix
from tm2nn.syntax import FORMATS

#: what a key's value must be: a test and the words for it.  Top-level values are
#: strings; "object", "list" and "table" are JSON text; "int", "number" and "bool" are
#: kinds of fields inside a JSON value.
KINDS: dict[str, tuple] = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "sha256": (lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None,
               "a hex sha256 (64 digits 0-9a-f)"),
    "flag": (lambda v: v in ("true", "false"), "'true' or 'false'"),
    "backend": (lambda v: isinstance(v, str) and v in _backend_names(), "a known backend"),
    "format": (lambda v: isinstance(v, str) and v in _formats(), "a known source format"),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    "list": (lambda v: isinstance(v, list), "a JSON list"),
    "table": (lambda v: isinstance(v, list) and all(isinstance(r, list) for r in v), "a JSON list of rows"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
}
JSON_KINDS = frozenset({"object", "list", "table"})

#: every model's keys (what load_model reads)
REQUIRED: dict[str, str] = {
    "tm2nn.version": "string",
    "tm2nn.backend": "backend",
    "tm2nn.source_sha256": "sha256",
    "tm2nn.source": "string",
    "tm2nn.source_format": "format",
    "tm2nn.input_encoding": "object",
    "tm2nn.input_encoding/kind": "string",
    "tm2nn.output_encoding": "object",
    "tm2nn.output_encoding/kind": "string",
    "tm2nn.tables": "object",
    "tm2nn.build": "object",
    "tm2nn.build/options": "object",
    "tm2nn.weights_sha256": "sha256",
}
#: keys a model may carry (checked when present)
OPTIONAL: dict[str, str] = {
    "tm2nn.source_name": "string",
    "tm2nn.options": "object",
    "tm2nn.info": "object",
    "tm2nn.bounds": "table",
    "tm2nn.trained": "object",
    "tm2nn.weights_edited": "flag",
}


def _backend_names() -> list[str]:
    return backends.names()


def _formats() -> dict:
    return FORMATS


#: a key one side of a comparison lacks
ABSENT = object()


def _shown(v, width: int = 60) -> str:
    """A value in an error message, cut to ``width`` characters."""
    if v is ABSENT:
        return "nothing"
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    s = repr(s) if isinstance(v, str) else s
    return s if len(s) <= width else s[:width - 3] + "..."


# -- metadata -------------------------------------------------------------------------------------
def parse_metadata(raw: dict, path) -> dict:
    """The ``tm2nn.*`` values of ``raw`` (a file's metadata strings) checked against
    :data:`REQUIRED` and :data:`OPTIONAL`, JSON kinds decoded."""
    _check_is_tm2nn(raw, path)
    parsed: dict = {}
    for key, kind in REQUIRED.items():
        _check_key(raw, parsed, key, kind, True, path)
    for key, kind in OPTIONAL.items():
        _check_key(raw, parsed, key, kind, False, path)
    return parsed


def parse_backend_keys(raw: dict, parsed: dict, backend, path) -> dict:
    """The keys ``backend`` declares (:attr:`~tm2nn.backends.protocol.Backend.model_keys`),
    checked; ``parsed`` holds the values :func:`parse_metadata` decoded."""
    out = dict(parsed)
    for key, kind in backend.model_keys.items():
        _check_key(raw, out, key, kind, True, path, backend.name)
    return {k: v for k, v in out.items() if k not in parsed}


def _check_is_tm2nn(raw: dict, path) -> None:
    """A file with no tm2nn metadata, or one from before models recorded their source."""
    if "tm2nn.backend" not in raw:
        raise Tm2nnError("no tm2nn metadata (was it written by tm2nn compile?)", file=str(path))
    if "tm2nn.source" not in raw and "tm2nn.build" not in raw:
        raise Tm2nnError(f"written by an older tm2nn ({_shown(raw.get('tm2nn.version', '?'))}), which did not "
                         "record the source: compile it again", file=str(path))


def _bad(path, key: str, what: str) -> Tm2nnError:
    return Tm2nnError(f"metadata key {key} {what}", file=str(path))


def _check_key(raw: dict, parsed: dict, key: str, kind: str, required: bool, path, who: str = "") -> None:
    """Check one key (``tm2nn.name`` or ``tm2nn.name/field/...``) and store its value."""
    test, words = KINDS[kind]
    reader = f", which the {who} backend reads" if who else ""
    name, *fields = key.split("/")
    if name not in raw:
        if required:
            raise _bad(path, key, f"is missing ({words}{reader})")
        return
    if name not in parsed:
        parsed[name] = _top_value(raw[name], name, kind if not fields else "object", path)
    value = parsed[name]
    for i, f in enumerate(fields):
        if not isinstance(value, dict):
            raise _bad(path, "/".join([name, *fields[:i]]), f"is not a JSON object: {_shown(value)}")
        if f not in value:
            raise _bad(path, key, f"is missing ({words}{reader})")
        value = value[f]
    if not test(value):
        raise _bad(path, key, f"is not {words}{reader}: {_shown(value)}"
                   + (f" (known: {', '.join(_backend_names())})" if kind == "backend" else ""))


def _top_value(text, name: str, kind: str, path):
    """A metadata string, JSON decoded for a JSON kind."""
    if not isinstance(text, str):
        raise _bad(path, name, f"is not a string but {type(text).__name__}")
    if kind not in JSON_KINDS:
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad(path, name, f"is not JSON ({e.msg} at character {e.pos}): {_shown(text)}") from None
    except RecursionError:
        raise _bad(path, name, "is not JSON this reader takes (nested too deep)") from None


# -- what the metadata promises ---------------------------------------------------------------------
def first_difference(a, b, where: str = ""):
    """``(where, a's value, b's value)`` at the first place two JSON values differ, or None."""
    if json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True):
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}/{k}", a.get(k, ABSENT), b.get(k, ABSENT)
            d = first_difference(a[k], b[k], f"{where}/{k}")
            if d is not None:
                return d
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{where}/{i}")
            if d is not None:
                return d
    return where, a, b


def check_encodings(meta: dict, compiled, path) -> None:
    """The input and output encodings the file records are the ones its source compiles
    to (the loaded model is driven by the construction's; a file promising others is not
    the model its metadata describes)."""
    for key, built in (("tm2nn.input_encoding", compiled.input_encoding),
                       ("tm2nn.output_encoding", compiled.output_encoding)):
        d = first_difference(meta[key], json.loads(json.dumps(built, sort_keys=True)), key)
        if d is not None:
            raise _bad(path, d[0], f"differs from the {compiled.backend} construction of the file's source: "
                       f"the file has {_shown(d[1], 40)}, the construction {_shown(d[2], 40)}")


# -- the ONNX graph -------------------------------------------------------------------------------------
def _dims(vi) -> tuple:
    """A value's element type and dimensions (an int, or ``"?"`` for a symbolic one)."""
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return ("not a tensor",)
    dims = tuple(d.dim_value if d.HasField("dim_value") else "?" for d in t.shape.dim) if t.HasField("shape") else None
    return t.elem_type, dims


def _describe(role: str, i: int, vi) -> str:
    from onnx import TensorProto

    kind = _dims(vi)
    if len(kind) == 1:
        return f"{role} {i} {vi.name!r}: {kind[0]}"
    dtype = TensorProto.DataType.Name(kind[0]).lower() if kind[0] in TensorProto.DataType.values() else kind[0]
    shape = "unranked" if kind[1] is None else "[" + ", ".join(map(str, kind[1])) + "]"
    return f"{role} {i} {vi.name!r} {dtype} {shape}"


def check_signature(file_model, built_model, path, backend: str) -> None:
    """The file's graph inputs and outputs (names, element types, ranks and fixed
    dimensions) are the construction's; the first difference is an error."""
    for role, mine, theirs in (("input", file_model.graph.input, built_model.graph.input),
                               ("output", file_model.graph.output, built_model.graph.output)):
        if len(mine) != len(theirs):
            raise Tm2nnError(f"its graph has {len(mine)} {role}(s), the {backend} construction of its source "
                             f"{len(theirs)}", file=str(path))
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if a.name != b.name or _dims(a) != _dims(b):
                raise Tm2nnError(f"its graph's {_describe(role, i, a)} is not the {backend} construction's "
                                 f"{_describe(role, i, b)}", file=str(path))


def check_self_contained(model, path) -> None:
    """No weight of the file lives in another file (ONNX external data): a tm2nn model is
    one self-contained file, and loading it reads nothing else.  Every tensor of every
    graph and subgraph is checked: initializers, sparse initializers (values and
    indices), and the tensors nodes carry as attributes (a Constant's ``value`` or
    ``sparse_value``, any tensor or list of tensors)."""
    from onnx import TensorProto

    for where, name, t in _tensors(model.graph):
        if t.data_location == TensorProto.EXTERNAL or len(t.external_data):
            raise Tm2nnError(f"its weight {where}{name!r} is stored outside the file (ONNX external data); "
                             "a tm2nn model is one self-contained file", file=str(path))


def _tensors(graph):
    """``(where, name, TensorProto)`` for every tensor a graph and its subgraphs hold."""
    from onnx import AttributeProto

    for where, g in _graphs(graph):
        for t in g.initializer:
            yield where, t.name, t
        for sp in g.sparse_initializer:
            yield where, sp.values.name, sp.values
            yield where, sp.values.name + " (indices)", sp.indices
        for n in g.node:
            for a in n.attribute:
                label = f"{n.name or n.op_type}.{a.name}"
                if a.type == AttributeProto.TENSOR:
                    yield where, label, a.t
                elif a.type == AttributeProto.TENSORS:
                    yield from ((where, f"{label}[{k}]", t) for k, t in enumerate(a.tensors))
                elif a.type == AttributeProto.SPARSE_TENSOR:
                    yield where, label, a.sparse_tensor.values
                    yield where, label + " (indices)", a.sparse_tensor.indices
                elif a.type == AttributeProto.SPARSE_TENSORS:
                    for k, sp in enumerate(a.sparse_tensors):
                        yield where, f"{label}[{k}]", sp.values
                        yield where, f"{label}[{k}] (indices)", sp.indices


#: an edited graph may be at most this many times its construction's size (nodes, weight
#: bytes), plus :data:`NODE_SLACK` nodes and :data:`BYTES_SLACK` bytes
GRAPH_GROWTH, NODE_SLACK, BYTES_SLACK = 2, 64, 1 << 20


def graph_size(model) -> tuple[int, int]:
    """``(nodes, weight bytes)`` of an ONNX model: the nodes of every graph and subgraph,
    and the bytes of its initializers and Constant nodes' tensors."""
    from onnx import AttributeProto

    nodes = size = 0
    for _, g in _graphs(model.graph):
        nodes += len(g.node)
        size += sum(t.ByteSize() for t in g.initializer) + sum(t.ByteSize() for t in g.sparse_initializer)
        size += sum(a.t.ByteSize() for n in g.node for a in n.attribute if a.type == AttributeProto.TENSOR)
    return nodes, size


def check_graph_size(file_model, built_model, path, backend: str) -> None:
    """The file's graph is not far larger than the construction's (:data:`GRAPH_GROWTH`):
    an onnxruntime session of a graph of 10^6 nodes takes minutes and gigabytes to build,
    so such a graph is refused, with both sizes, before one is."""
    n0, b0 = graph_size(built_model)
    top = len(file_model.graph.node)  # a lower bound, without walking 10^6 nodes' attributes in Python
    n, b = ((top, sum(t.ByteSize() for t in file_model.graph.initializer)) if top > GRAPH_GROWTH * n0 + NODE_SLACK
            else graph_size(file_model))
    if n > GRAPH_GROWTH * n0 + NODE_SLACK or b > GRAPH_GROWTH * b0 + BYTES_SLACK:
        raise Tm2nnError(f"its graph has {n:,} nodes and {b:,} bytes of weights; the {backend} construction its "
                         f"metadata describes has {n0:,} nodes and {b0:,} bytes, and an edited model may have at most "
                         f"{GRAPH_GROWTH} times as many (plus {NODE_SLACK} nodes and {BYTES_SLACK >> 20} MiB): refused "
                         "before onnxruntime builds a session", file=str(path))


def _loops(model) -> list[tuple[str, object, int | None]]:
    """``(name, node, trip count)`` of every Loop node of the model, nested ones named
    ``outer/...``; the trip count is the scalar integer constant (an initializer or a
    Constant node's value) its first input names, or None (no trip count, or one the
    graph computes)."""
    from onnx import AttributeProto, numpy_helper

    graphs = list(_graphs(model.graph))
    consts = {}
    for _, g in graphs:
        tensors = [(t.name, t) for t in g.initializer]
        tensors += [(n.output[0], a.t) for n in g.node if n.op_type == "Constant" and n.output
                    for a in n.attribute if a.name == "value" and a.type == AttributeProto.TENSOR]
        for name, t in tensors:
            if len(t.dims) <= 1 and (not t.dims or t.dims[0] == 1):
                try:
                    v = numpy_helper.to_array(t).reshape(-1)
                except Exception:  # noqa: BLE001 - a corrupt tensor: not a constant trip count
                    continue
                if v.size == 1 and v.dtype.kind in "iu":
                    consts[name] = int(v[0])
    return [(f"{where}{n.name}", n, consts.get(n.input[0]) if n.input and n.input[0] else None)
            for where, g in graphs for n in g.node if n.op_type == "Loop"]


def check_loops(file_model, built_model, path, backend: str, build: dict) -> None:
    """Every Loop of the file runs at most as many iterations as the construction its
    metadata describes runs (``build``: the recorded options, e.g. ``steps``): a Loop
    of the construction's name at most its trip count, another at most the largest; a
    Loop with no fixed trip count only where the construction's has none either.  An
    edited trip count of 10^9 would run for hours: it is refused, with the estimate,
    before anything runs."""
    theirs = {name: (node, trip) for name, node, trip in _loops(built_model)}
    most = max((t for _, t in theirs.values() if t is not None), default=0)
    opts = build.get("options", build) if isinstance(build, dict) else {}
    counts = sorted(opts.items(), key=lambda kv: not (isinstance(kv[1], int) and not isinstance(kv[1], bool)))
    text = ", ".join(f"{k}={v}" for k, v in counts)
    said = f" (tm2nn.build: {text if len(text) <= 100 else text[:97] + '...'})" if counts else ""
    for name, node, trip in _loops(file_model):
        ref_node, bound = theirs.get(name, (None, most))
        if trip is None:
            if ref_node is not None and bound is None and list(node.input[:1]) == list(ref_node.input[:1]):
                continue  # the construction's own computed count
            raise Tm2nnError(f"its Loop {name!r} has no fixed trip count, so its run has no bound; the {backend} "
                             f"construction its metadata describes{said} fixes every loop's: refused before it runs",
                             file=str(path))
        if bound is not None and trip > max(bound, 0):
            ratio = f", {trip / bound:,.0f} times as many" if bound > 0 else ""
            raise Tm2nnError(f"its Loop {name!r} runs {trip:,} iterations; the {backend} construction its metadata "
                             f"describes{said} runs {bound:,}{ratio}: an edited model runs at most its construction's "
                             "iterations, and this one is refused before it runs", file=str(path))


def _graphs(graph, where: str = ""):
    """``(where, graph)`` for a graph and every subgraph (loop bodies), in order."""
    from onnx import AttributeProto

    yield where, graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                yield from _graphs(a.g, f"{where}{node.name}.{a.name}/")
            elif a.type == AttributeProto.GRAPHS:
                for k, g in enumerate(a.graphs):
                    yield from _graphs(g, f"{where}{node.name}.{a.name}[{k}]/")


def _tensor_edit(what: str, a, b) -> str | None:
    """How two same-named weight tensors differ, in words (None: the same values)."""
    import numpy as np

    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return f"{what}: {a.dtype} {list(a.shape)} instead of {b.dtype} {list(b.shape)}"
    diff = ~((a == b) | (np.isnan(a) & np.isnan(b))) if a.dtype.kind == "f" else a != b
    n = int(diff.sum())
    if not n:
        return None
    with np.errstate(invalid="ignore"):
        delta = np.abs(a[diff].astype(np.float64) - b[diff].astype(np.float64))
    nan = int(np.isnan(delta).sum())
    by = f", by up to {np.nanmax(delta):.3g}" if nan < n else ""
    return f"{what}: {n} of {a.size} values differ{by}" + (f" ({nan} NaN)" if nan else "")


def _weights_edit(where: str, mine, theirs) -> str | None:
    """Where one graph's weights (initializers) first differ from the construction's."""
    from onnx import numpy_helper

    have = {t.name: t for t in mine.initializer}
    for t in theirs.initializer:
        if t.name not in have:
            return f"weight {where}{t.name!r} is missing"
        if have[t.name].SerializeToString() != t.SerializeToString():
            try:
                a = numpy_helper.to_array(have[t.name])
            except Exception as e:  # a corrupt tensor: onnxruntime will say more when it runs
                return f"weight {where}{t.name!r} does not read as a tensor ({type(e).__name__})"
            d = _tensor_edit(f"weight {where}{t.name!r}", a, numpy_helper.to_array(t))
            if d is not None:
                return d
    extra = sorted(set(have) - {t.name for t in theirs.initializer}) + [t.values.name for t in mine.sparse_initializer]
    return f"weight {where}{extra[0]!r} is not the construction's" if extra else None


def _nodes_edit(where: str, mine, theirs) -> str | None:
    """Where one graph's nodes first differ from the construction's."""
    for k, (a, b) in enumerate(zip(mine.node, theirs.node)):
        if a.SerializeToString() != b.SerializeToString():
            return f"node {where}{a.name or k!r} ({a.op_type}) differs"
    if len(mine.node) != len(theirs.node):
        return f"graph {where or 'main'!r} has {len(mine.node)} nodes, the construction {len(theirs.node)}"
    return None


def onnx_edit(file_model, built_model) -> str | None:
    """Where the file's graph first differs from the construction's ONNX (a weight's
    values, then a node), or None when they compute the same (re-encoded weights, type
    annotations and doc strings aside)."""
    if file_model.graph.SerializeToString() == built_model.graph.SerializeToString():
        return None
    mine, theirs = dict(_graphs(file_model.graph)), dict(_graphs(built_model.graph))
    for where, g in theirs.items():
        if where not in mine:
            return f"subgraph {where!r} is missing"
        d = _weights_edit(where, mine[where], g)
        if d is not None:
            return d
    for where, g in theirs.items():
        d = _nodes_edit(where, mine[where], g)
        if d is not None:
            return d
    return None


# -- the .pt archive ----------------------------------------------------------------------------------
#: the itemsize of the widest dtype a state dict's tensor may hold (float64, int64)
MAX_ITEMSIZE = 8


def archive_members(blob: bytes, path) -> dict[str, int]:
    """A ``.pt``'s zip members and the sizes they declare (uncompressed), read from its
    directory before anything is decompressed.  ``torch.save`` stores every member
    uncompressed, so no member can declare more bytes than the file holds: one that does
    is a compressed one (a zip bomb's tensor) and is refused here.  Not a zip archive
    (a legacy torch file): an empty dict, and ``torch.load`` says what it is."""
    import zipfile

    try:
        infos = zipfile.ZipFile(io.BytesIO(blob)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return {}
    members: dict[str, int] = {}
    for i in infos:
        if i.file_size > len(blob):
            raise Tm2nnError(f"its archive member {_shown(i.filename, 80)} declares {i.file_size:,} bytes, more than "
                             f"the whole file's {len(blob):,}: a compressed member (torch.save stores them "
                             "uncompressed), refused before it is decompressed", file=str(path))
        members[i.filename] = members.get(i.filename, 0) + i.file_size
    return members


def check_archive_sizes(members: dict[str, int], state: dict, path, backend: str) -> None:
    """The tensor data a ``.pt`` archive declares (its ``data/KEY`` members) is at most
    what the construction's state dict (``state``: the file's tensors on the meta device,
    their names and shapes checked already) holds at :data:`MAX_ITEMSIZE` bytes a value;
    checked before any tensor is read."""
    data = {n: size for n, size in members.items() if "/data/" in n and not n.endswith("/data.pkl")}
    most = sum(t.numel() for t in state.values()) * MAX_ITEMSIZE
    if len(data) > len(state) or sum(data.values()) > most:
        big = max(data, key=data.get)
        raise Tm2nnError(f"its archive holds {len(data)} tensor record(s) of {sum(data.values()):,} bytes (the largest "
                         f"{_shown(big, 60)}, {data[big]:,}); the {backend} construction's state dict has {len(state)} "
                         f"tensor(s), at most {most:,} bytes", file=str(path))
    wide = [n for n, t in state.items() if t.element_size() > MAX_ITEMSIZE]
    if wide:
        raise Tm2nnError(f"its state_dict entry {wide[0]!r} is {state[wide[0]].dtype}, not a real number type",
                         file=str(path))


def check_state_dict(state, reference: dict, path, backend: str) -> None:
    """A ``.pt``'s state dict (its tensors may be on the meta device: no data is read)
    has the construction's torch module's names and shapes (``reference``), else an
    error naming the first difference."""
    import torch

    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise Tm2nnError(f"its state_dict is not a dict of named tensors but {type(state).__name__}", file=str(path))
    for name in (*reference, *state):
        if name not in state or name not in reference:
            what = "lacks" if name not in state else "has a tensor the construction does not:"
            raise Tm2nnError(f"its state_dict {what} {name!r} (the {backend} construction of its source)",
                             file=str(path))
        t, ref = state[name], reference[name]
        if not isinstance(t, torch.Tensor):
            raise Tm2nnError(f"its state_dict entry {name!r} is not a tensor but {type(t).__name__}", file=str(path))
        if tuple(t.shape) != tuple(ref.shape):
            raise Tm2nnError(f"its state_dict entry {name!r} has shape {list(t.shape)}, the {backend} "
                             f"construction's {list(ref.shape)}", file=str(path))


def state_dict_edit(state, reference: dict, path, backend: str) -> str | None:
    """Check a ``.pt``'s state dict against the construction's torch module's
    (``reference``): the same names and shapes, else an error; returns where the values
    first differ, or None."""
    import torch

    check_state_dict(state, reference, path, backend)
    for name, ref in reference.items():
        t = state[name].detach().to(ref.dtype)
        if not torch.equal(t, ref):
            d = _tensor_edit(f"parameter {name!r}", t.cpu().numpy(), ref.detach().cpu().numpy())
            if d is not None:
                return d
    return None


def net_edit(mine, built, path, backend: str, where: str = "") -> str | None:
    """Check a ``.safetensors``' network (rebuilt from its manifest) against the
    construction's: the same ops, inputs, fields and labelled spaces, else an error;
    returns where the weights first differ, or None."""
    import dataclasses

    import numpy as np

    def wrong(what: str) -> Tm2nnError:
        return Tm2nnError(f"its manifest's network is not the {backend} construction of its source: {what}",
                          file=str(path))

    ours = [(p.name, p.kind, p.space) for p in mine.inputs]
    if ours != [(p.name, p.kind, p.space) for p in built.inputs] or mine.outputs != built.outputs:
        raise wrong(f"{where or 'the network'}'s inputs or outputs differ")
    if len(mine.nodes) != len(built.nodes):
        raise wrong(f"{where or 'the network'} has {len(mine.nodes)} ops, the construction {len(built.nodes)}")
    edit = None
    for a, b in zip(mine.nodes, built.nodes):
        at = f"{where}{b.name}"
        if type(a) is not type(b) or a.name != b.name or a.inputs != b.inputs:
            raise wrong(f"op {at!r} ({b.kind} of {list(b.inputs)}) is {a.kind} {a.name!r} of {list(a.inputs)}")
        for f in dataclasses.fields(b):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(y, Net):
                edit = edit or net_edit(x, y, path, backend, f"{at}/{f.name}/")
            elif isinstance(y, SparseMatrix):
                if x.shape != y.shape:
                    raise wrong(f"op {at!r} {f.name} is {list(x.shape)}, the construction's {list(y.shape)}")
                if edit is None and not (np.array_equal(x.rows, y.rows) and np.array_equal(x.cols, y.cols)
                                         and np.array_equal(x.vals, y.vals)):
                    small = x.shape[0] * x.shape[1] <= 1 << 24  # else the stored entries, in words
                    edit = (_tensor_edit(f"op {at!r} {f.name}", x.dense(), y.dense()) if small else
                            f"op {at!r} {f.name}: {x.nnz} stored entries, not the construction's {y.nnz}")
            elif isinstance(y, np.ndarray):
                if not isinstance(x, np.ndarray) or x.shape != y.shape:
                    raise wrong(f"op {at!r} {f.name} has shape {list(np.shape(x))}, the construction's {list(y.shape)}")
                edit = edit or _tensor_edit(f"op {at!r} {f.name}", x, y)
            elif isinstance(y, Space) or isinstance(x, Space):
                if x != y:
                    raise wrong(f"op {at!r} {f.name}'s labels differ")
            elif f.name != "cite" and x != y:
                raise wrong(f"op {at!r} {f.name} is {_shown(x, 40)}, the construction's {_shown(y, 40)}")
    return edit
