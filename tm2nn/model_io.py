"""Model files: ``.onnx`` (self-contained ONNX), ``.pt`` (a torch state dict plus the
metadata) and ``.safetensors`` (the network IR's arrays plus a JSON manifest,
:mod:`tm2nn.manifest`), written from a :class:`~tm2nn.backends.base.Compiled` and read
back into one.

Every file carries ARCHITECTURE.md's metadata (``tm2nn.version``, ``tm2nn.backend``,
``tm2nn.source_sha256``, the encodings, the symbol and port tables) plus what rebuilds
the model: the source as tm2nn text (``tm2nn.source``), the validated compile options
(``tm2nn.build``), the trained tensors of a trained net (``tm2nn.trained``, exact
float64) and a hash of every weight (``tm2nn.weights_sha256``).  :func:`load_model`
checks the metadata against its schema (:mod:`tm2nn.model_schema`), recompiles the source
with those options, puts the trained tensors back and checks the hash, so the object it
returns is the one that was saved, for every backend; a ``.pt``'s state dict then replaces
the torch module's weights, a loaded ``.onnx`` runs in onnxruntime as the file is, and a
loaded ``.safetensors``'s network (rebuilt from its manifest) replaces the construction's.
The file's graph signature (or state dict's names and shapes) must be the construction's;
weights that differ from the construction's (edited on purpose, or damaged) load, with
:attr:`~tm2nn.backends.base.Compiled.edited` saying where, and ``tm2nn eval`` checks what
they compute against the reference.  Every failure names the file, in one line.

A ``.pt`` holds only tensors and strings: ``torch.load(path, weights_only=True)`` reads
it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import warnings
from pathlib import Path

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.nets.serial import with_readouts_of

SUFFIXES = (".onnx", ".pt", ".safetensors")
#: The largest model file read (protobuf's own limit for a self-contained ONNX model).
MAX_MODEL_BYTES = 2 << 30


def check_model_path(path, what: str = "output") -> Path:
    """A model file to write: ``.onnx``, ``.pt`` or ``.safetensors`` in an existing folder,
    checked before any work is done (so a long compile or training never ends in a failed
    write)."""
    from tm2nn.fileio import output_target

    out = Path(path)
    if out.suffix not in SUFFIXES:
        raise Tm2nnError(f"{what} must name a .onnx, .pt or .safetensors file, got {out.name!r}")
    output_target(out, what)  # a regular file in a folder for files (docs/limits.md)
    return out


# -- what a file records ------------------------------------------------------------------------
def source_format(ir) -> str:
    from tm2nn.ir import Machine

    return "tm" if isinstance(ir, Machine) else "circ"


def source_text(ir) -> str:
    from tm2nn.syntax import dump

    return dump(ir, source_format(ir))


def source_tables(ir) -> dict:
    """The machine's or circuit's symbol and port tables, for the model's metadata."""
    from tm2nn.ir import Circuit, Machine

    if isinstance(ir, Circuit):
        return {"inputs": list(ir.inputs), "outputs": list(ir.outputs)}
    if isinstance(ir, Machine):
        return {"alphabet": list(ir.alphabet), "blank": ir.blank, "states": list(ir.states),
                "start": ir.start, "halting": ir.halting, "tape": ir.tape_kind, "convention": ir.convention}
    return {"inputs": list(getattr(ir, "net_inputs", ())), "memory": list(getattr(ir, "memory", ())),
            "outputs": ["out"]}


def _tensor_bytes(t) -> list[bytes]:
    from tm2nn.nets import SparseMatrix

    if isinstance(t, SparseMatrix):
        return [repr(t.shape).encode(), t.rows.tobytes(), t.cols.tobytes(), t.vals.tobytes()]
    a = np.ascontiguousarray(np.asarray(t, dtype=np.float64))
    return [repr(a.shape).encode(), a.tobytes()]


def weights_sha256(net) -> str:
    """A hash of every weight of ``net`` (nested nets included once), in op order."""
    h = hashlib.sha256()
    for op in net.all_ops():
        for name, t in sorted(op.tensors().items()):
            h.update(f"{op.name}.{name}".encode())
            for b in _tensor_bytes(t):
                h.update(b)
    return h.hexdigest()


def _trainable(op) -> bool:
    from tm2nn.nets import Affine, Param

    return isinstance(op, Param) or (isinstance(op, Affine) and op.trainable)


def _b64(a) -> str:
    return base64.b64encode(np.ascontiguousarray(np.asarray(a, dtype=np.float64)).tobytes()).decode()


def trained_tensors(net) -> dict:
    """The trainable ops' tensors (the ones training changes), exact, as JSON."""
    from tm2nn.nets import Param

    out = {}
    for op in net.nodes:
        if not _trainable(op):
            continue
        out[op.name] = ({"value": _b64(op.value)} if isinstance(op, Param)
                        else {"weight": _b64(op.weight.vals), "bias": _b64(op.bias)})
    return out


def _trained_array(op, t, part: str) -> np.ndarray:
    """One saved trained tensor (base64 of float64 bytes) of ``op``."""
    try:
        return np.frombuffer(base64.b64decode(t[part], validate=True), dtype=np.float64).copy()
    except (KeyError, TypeError, ValueError):
        raise Tm2nnError(f"the saved trained tensor {op.name}.{part} is not base64 float64 data") from None


def with_trained(net, trained: dict):
    """``net`` with the trainable ops' tensors replaced by ``trained`` (from a file)."""
    from tm2nn.nets import Net, Param, SparseMatrix

    names = {op.name for op in net.nodes if _trainable(op)}
    unknown = sorted(set(trained) - names)
    if unknown:
        raise Tm2nnError(f"the saved trained tensors name {unknown[0]!r}, which is no trainable op of the network")
    nodes = []
    for op in net.nodes:
        if op.name in trained:
            t = trained[op.name]
            if isinstance(op, Param):
                value = _trained_array(op, t, "value")
                if value.shape != op.value.shape:
                    raise Tm2nnError(f"the saved trained tensor of {op.name!r} does not fit the network")
                op = dataclasses.replace(op, value=value)
            else:
                vals, bias = _trained_array(op, t, "weight"), _trained_array(op, t, "bias")
                w = op.weight
                if vals.size != w.nnz or bias.shape != np.asarray(op.bias).shape:
                    raise Tm2nnError(f"the saved trained tensors of {op.name!r} do not fit the network")
                op = dataclasses.replace(op, weight=SparseMatrix(w.shape, w.rows, w.cols, vals), bias=bias)
        nodes.append(op)
    return Net(net.name, net.inputs, tuple(nodes), net.outputs, dict(net.metadata))


def _net_of(compiled):
    """The net a file holds: the compiled one, or the torch module's weights when a
    state dict replaced them (a loaded ``.pt``)."""
    if compiled.state_dict is None:
        return compiled.net
    return compiled.torch().to_net()


def metadata(compiled, net=None) -> dict[str, str]:
    """ARCHITECTURE.md's ``metadata_props`` for a compiled model (see the module doc);
    ``net`` is :func:`_net_of` when the caller has it already."""
    from tm2nn import __version__

    net = _net_of(compiled) if net is None else net
    info = compiled.info()
    text = compiled.source_text()
    meta = {
        **{k: str(v) for k, v in net.metadata.items()},
        "tm2nn.version": __version__,
        "tm2nn.backend": compiled.backend,
        "tm2nn.source_sha256": compiled.source_sha256 or hashlib.sha256(text.encode()).hexdigest(),
        "tm2nn.source_name": compiled.source.name,
        "tm2nn.source": text,
        "tm2nn.source_format": source_format(compiled.source),
        "tm2nn.input_encoding": json.dumps(compiled.input_encoding, sort_keys=True),
        "tm2nn.output_encoding": json.dumps(compiled.output_encoding, sort_keys=True),
        "tm2nn.tables": json.dumps(source_tables(compiled.source), sort_keys=True),
        "tm2nn.options": json.dumps(compiled.options, sort_keys=True, default=str),
        "tm2nn.build": json.dumps(compiled.build, sort_keys=True),
        "tm2nn.info": json.dumps(info["info"], sort_keys=True, default=str),
        "tm2nn.bounds": json.dumps(info["bounds"], default=str),
        "tm2nn.weights_sha256": weights_sha256(net),
    }
    trained = trained_tensors(net)
    if trained:
        meta["tm2nn.trained"] = json.dumps(trained, sort_keys=True)
    if compiled.state_dict is not None or compiled.edited is not None:  # weights a user may have edited
        meta["tm2nn.weights_edited"] = "true"
    return meta


def onnx_model(compiled):
    """The compiled net as an ONNX model with its metadata, plus what the backend adds to
    the graph (:meth:`~tm2nn.backends.base.Backend.finish_onnx`).  The model computes in
    the float type its input encoding names (``"dtype"``, float32 by default: the rcnn
    backend's float64 machines)."""
    from tm2nn.emit.onnx_model import to_onnx

    net = _net_of(compiled)
    model = to_onnx(net, metadata(compiled, net), dtype=(compiled.input_encoding or {}).get("dtype", "float32"))
    return compiled.spec.finish_onnx(model, compiled)


def save(compiled, out) -> Path:
    """Write ``.onnx`` (self-contained), ``.pt`` (``{"state_dict", "metadata"}``) or
    ``.safetensors`` (arrays and manifest)."""
    from tm2nn.fileio import write_atomic

    out = check_model_path(out)
    if out.suffix == ".safetensors":
        from tm2nn.manifest import save_safetensors

        return save_safetensors(compiled, out)
    if out.suffix == ".onnx":
        from tm2nn.emit.onnx_model import save_onnx

        save_onnx(compiled.onnx(), out)  # a loaded .onnx as the file is (edited weights too)
        return out
    import torch

    module = compiled.torch()
    buf = io.BytesIO()
    torch.save({"state_dict": module.state_dict(), "metadata": metadata(compiled)}, buf)
    write_atomic(out, buf.getvalue())
    return out


# -- reading back -------------------------------------------------------------------------------
def read_metadata(path) -> tuple[dict, bytes | None, object]:
    """``(metadata, ONNX bytes or None, what else holds the weights)`` of a model file:
    a ``.pt``'s state dict, for a ``.safetensors`` a function that rebuilds its network
    from the manifest (called once the metadata is checked, so its errors come first), or
    None for an ``.onnx``."""
    from tm2nn.fileio import read_input

    p = Path(path)
    if p.suffix not in SUFFIXES:
        raise Tm2nnError("a model file ends in .onnx, .pt or .safetensors", file=str(path))
    blob = read_input(p, "model", limit=MAX_MODEL_BYTES)  # a regular file, of at most 2 GiB
    if p.suffix == ".safetensors":
        from tm2nn.manifest import flat_metadata, net_of, read_safetensors

        manifest, arrays = read_safetensors(path, blob)
        return flat_metadata(manifest), None, lambda: net_of(manifest, arrays, path)
    if p.suffix == ".onnx":
        from tm2nn.emit.onnx_model import onnx_metadata

        try:
            meta = onnx_metadata(blob)
        except Exception as e:  # a corrupt or foreign file
            raise Tm2nnError(f"not a readable ONNX model ({type(e).__name__})", file=str(path)) from None
        return meta, blob, None
    import torch

    try:
        with warnings.catch_warnings():  # torch warns about a foreign pickle's protocol: it is refused anyway
            warnings.simplefilter("ignore")
            saved = torch.load(io.BytesIO(blob), weights_only=True)  # tensors and strings only: no code runs
    except Exception as e:  # not a torch file, or one holding more than tensors and strings
        raise Tm2nnError(f"not a torch file of tensors and strings ({type(e).__name__})", file=str(path)) from None
    if not (isinstance(saved, dict) and "state_dict" in saved and isinstance(saved.get("metadata"), dict)):
        raise Tm2nnError("not a model saved by tm2nn (a .pt model is {'state_dict': ..., 'metadata': {...}})",
                         file=str(path))
    return dict(saved["metadata"]), None, saved["state_dict"]


def load_model(path):
    """The :class:`~tm2nn.backends.base.Compiled` a model file holds (see the module doc),
    checked (:mod:`tm2nn.model_schema`): its metadata, what it promises, and its weights
    against the construction's (``.edited`` says where they first differ)."""
    from tm2nn import model_schema as schema
    from tm2nn.backends import get
    from tm2nn.backends.base import loaded_info

    raw, blob, weights = read_metadata(path)
    meta = schema.parse_metadata(raw, path)
    net = weights() if callable(weights) else None  # a .safetensors' network
    backend = get(meta["tm2nn.backend"])
    meta.update(schema.parse_backend_keys(raw, meta, backend, path))
    compiled = _located(path, lambda: _rebuild(backend, meta, path))
    schema.check_encodings(meta, compiled, path)
    state = None if net is not None else weights
    if net is not None:  # a .safetensors: its network replaces the construction's
        net = with_readouts_of(net, compiled.net)  # a file from before readouts were ops
        compiled.edited = schema.net_edit(net, compiled.net, path, compiled.backend)
        compiled.net = net
    else:
        compiled.edited = _edit(compiled, blob, state, path)
    compiled.build = meta["tm2nn.build"]
    compiled.source_sha256 = meta["tm2nn.source_sha256"]
    compiled.onnx_bytes = blob
    compiled.state_dict = state
    compiled.path = str(path)
    loaded_info(compiled, meta)
    return compiled


def _located(path, make):
    """``make()``, its errors naming the model file, in one line."""
    try:
        return make()
    except Tm2nnError as e:
        if e.file == str(path):
            raise
        where = f" ({e.file}, line {e.line})" if e.line is not None else ""
        raise Tm2nnError(f"{e.message}{where}", file=str(path)) from None


def _rebuild(backend, meta: dict, path):
    """The construction the metadata describes: its source compiled with the recorded
    options, the trained tensors put back, the weights' hash checked."""
    from tm2nn.options import OptionError
    from tm2nn.syntax import parse_text, select

    try:
        items = parse_text(meta["tm2nn.source"], meta["tm2nn.source_format"], "tm2nn.source")
        ir = select(items, meta.get("tm2nn.source_name"), "tm2nn.source") if items else None
    except Tm2nnError as e:
        where = f" (line {e.line}, column {e.col or 1})" if e.line is not None else ""
        raise Tm2nnError(f"metadata key tm2nn.source does not load{where}: {e.message}") from None
    if ir is None:
        raise Tm2nnError("metadata key tm2nn.source holds no machine or circuit")
    try:
        backend.check_source(ir)
        compiled = backend.rebuild(ir, meta["tm2nn.build"])
    except OptionError as e:
        raise Tm2nnError(f"metadata key tm2nn.build does not rebuild the model: {e.message}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a build the backend cannot read
        raise Tm2nnError(f"metadata key tm2nn.build does not rebuild the model ({type(e).__name__}: {e})") from None
    if "tm2nn.trained" in meta:
        compiled.net = with_trained(compiled.net, meta["tm2nn.trained"])
    edited = meta.get("tm2nn.weights_edited") == "true"  # then the hash is the edited weights'
    if not edited and weights_sha256(compiled.net) != meta["tm2nn.weights_sha256"]:
        from tm2nn import __version__

        if meta["tm2nn.version"] != __version__:
            raise Tm2nnError(f"its weights are not this tm2nn's {backend.name} construction of its source (tm2nn "
                             f"{meta['tm2nn.version']} wrote it; this is {__version__}): compile it again")
        raise Tm2nnError(f"metadata key tm2nn.weights_sha256 is not the hash of the {backend.name} construction "
                         "its metadata describes (tm2nn.source, tm2nn.build): the metadata was altered")
    return compiled


def _edit(compiled, blob: bytes | None, state, path) -> str | None:
    """Where the file's weights first differ from the construction's (None: they do not).
    An ONNX graph's inputs and outputs must be the construction's, and a state dict's
    names and shapes; anything else is an error."""
    from tm2nn import model_schema as schema

    if blob is not None:
        import onnx

        mine = onnx.load_model_from_string(blob)
        built = onnx_model(compiled)
        schema.check_self_contained(mine, path)
        schema.check_signature(mine, built, path, compiled.backend)
        return schema.onnx_edit(mine, built)
    return schema.state_dict_edit(state, compiled.torch().state_dict(), path, compiled.backend)
