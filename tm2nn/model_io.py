"""Model files: ``.onnx`` (self-contained ONNX) and ``.pt`` (a torch state dict plus the
metadata), written from a :class:`~tm2nn.backends.base.Compiled` and read back into one.

Every file carries ARCHITECTURE.md's metadata (``tm2nn.version``, ``tm2nn.backend``,
``tm2nn.source_sha256``, the encodings, the symbol and port tables) plus what rebuilds
the model: the source as tm2nn text (``tm2nn.source``), the validated compile options
(``tm2nn.build``), the trained tensors of a trained net (``tm2nn.trained``, exact
float64) and a hash of every weight (``tm2nn.weights_sha256``).  :func:`load_model`
recompiles the source with those options, puts the trained tensors back and checks the
hash, so the object it returns is the one that was saved, for every backend; a ``.pt``'s
state dict (which a user may have edited) then replaces the torch module's weights, and a
loaded ``.onnx`` runs in onnxruntime as the file is.

A ``.pt`` holds only tensors and strings: ``torch.load(path, weights_only=True)`` reads
it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
from pathlib import Path

import numpy as np

from tm2nn.errors import Tm2nnError

SUFFIXES = (".onnx", ".pt")


def check_model_path(path, what: str = "output") -> Path:
    """A model file to write: ``.onnx`` or ``.pt`` in an existing folder, checked before
    any work is done (so a long compile or training never ends in a failed write)."""
    out = Path(path)
    if out.suffix not in SUFFIXES:
        raise Tm2nnError(f"{what} must name a .onnx or .pt file, got {out.name!r}")
    if not out.parent.is_dir():
        raise Tm2nnError(f"{what}: folder {str(out.parent)!r} does not exist")
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


def with_trained(net, trained: dict):
    """``net`` with the trainable ops' tensors replaced by ``trained`` (from a file)."""
    from tm2nn.nets import Net, Param, SparseMatrix

    def arr(s):
        return np.frombuffer(base64.b64decode(s), dtype=np.float64).copy()
    nodes = []
    for op in net.nodes:
        if op.name in trained:
            t = trained[op.name]
            if isinstance(op, Param):
                value = arr(t["value"])
                if value.shape != op.value.shape:
                    raise Tm2nnError(f"the saved trained tensor of {op.name!r} does not fit the network")
                op = dataclasses.replace(op, value=value)
            else:
                vals, bias = arr(t["weight"]), arr(t["bias"])
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
    text = source_text(compiled.source)
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
    if compiled.state_dict is not None:  # weights from a state dict, maybe edited by hand
        meta["tm2nn.weights_edited"] = "true"
    return meta


def onnx_model(compiled):
    """The compiled net as an ONNX model with its metadata, plus what the backend adds to
    the graph (:meth:`~tm2nn.backends.base.Backend.finish_onnx`)."""
    from tm2nn.emit.onnx_emit import to_onnx

    net = _net_of(compiled)
    model = to_onnx(net, metadata(compiled, net))
    return compiled.spec.finish_onnx(model, compiled)


def save(compiled, out) -> Path:
    """Write ``.onnx`` (self-contained) or ``.pt`` (``{"state_dict", "metadata"}``)."""
    from tm2nn.fileio import write_atomic

    out = check_model_path(out)
    if out.suffix == ".onnx":
        from tm2nn.emit.onnx_emit import save_onnx

        save_onnx(onnx_model(compiled), out)
        return out
    import torch

    module = compiled.torch()
    buf = io.BytesIO()
    torch.save({"state_dict": module.state_dict(), "metadata": metadata(compiled)}, buf)
    write_atomic(out, buf.getvalue())
    return out


# -- reading back -------------------------------------------------------------------------------
def read_metadata(path) -> tuple[dict, bytes | None, dict | None]:
    """``(metadata, ONNX bytes or None, state dict or None)`` of a model file."""
    p = Path(path)
    if not p.is_file():
        raise Tm2nnError(f"no such file: {p}")
    if p.suffix == ".onnx":
        from tm2nn.emit.onnx_emit import onnx_metadata

        blob = p.read_bytes()
        try:
            meta = onnx_metadata(blob)
        except Exception as e:  # a corrupt or foreign file
            raise Tm2nnError(f"{p}: not a readable ONNX model ({type(e).__name__})") from None
        return meta, blob, None
    if p.suffix == ".pt":
        import torch

        try:
            saved = torch.load(p, weights_only=True)
            meta, state = dict(saved["metadata"]), saved["state_dict"]
        except Exception as e:
            raise Tm2nnError(f"{p}: not a model saved by tm2nn ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
        return meta, None, state
    raise Tm2nnError(f"{p.name}: a model file ends in .onnx or .pt")


def load_model(path):
    """The :class:`~tm2nn.backends.base.Compiled` a model file holds (see the module doc)."""
    from tm2nn.backends import get
    from tm2nn.backends.base import loaded_info
    from tm2nn.syntax import parse_text, select

    meta, blob, state = read_metadata(path)
    if "tm2nn.backend" not in meta:
        raise Tm2nnError(f"{path}: no tm2nn metadata (was it written by tm2nn compile?)")
    if "tm2nn.source" not in meta or "tm2nn.build" not in meta:
        raise Tm2nnError(f"{path} was written by an older tm2nn ({meta.get('tm2nn.version', '?')}) and does not "
                         "record its source: compile it again")
    backend = get(meta["tm2nn.backend"])
    items = parse_text(meta["tm2nn.source"], meta["tm2nn.source_format"], f"{path} (its source)")
    ir = select(items, meta.get("tm2nn.source_name"), str(path))
    build = json.loads(meta["tm2nn.build"])
    compiled = backend.rebuild(ir, build)
    if "tm2nn.trained" in meta:
        compiled.net = with_trained(compiled.net, json.loads(meta["tm2nn.trained"]))
    want = meta.get("tm2nn.weights_sha256")
    edited = meta.get("tm2nn.weights_edited") == "true"
    if want is not None and state is None and not edited and weights_sha256(compiled.net) != want:
        raise Tm2nnError(f"{path}: its weights differ from the {backend.name} construction of its source "
                         f"(tm2nn {meta.get('tm2nn.version', '?')} wrote it): compile it again")
    compiled.build = build
    compiled.source_sha256 = meta.get("tm2nn.source_sha256")
    compiled.onnx_bytes = blob
    compiled.state_dict = state
    loaded_info(compiled, meta)
    return compiled
