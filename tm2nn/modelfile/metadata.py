"""What a model file records: ARCHITECTURE.md's metadata (``tm2nn.version``,
``tm2nn.backend``, ``tm2nn.source_sha256``, the encodings, the symbol and port tables) plus
what rebuilds the model: the source as tm2nn text (``tm2nn.source``), the validated compile
options (``tm2nn.build``), the trained tensors of a trained net (``tm2nn.trained``, exact
float64) and a hash of every weight (``tm2nn.weights_sha256``).

Everything here reads a :class:`~tm2nn.backends.protocol.Model` (the user's handle is one).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json

import numpy as np

from tm2nn import backends
from tm2nn._version import __version__
from tm2nn.emit.torch_emit import to_torch
from tm2nn.errors import Tm2nnError
from tm2nn.ir import Circuit, Machine
from tm2nn.nets import Affine, Net, Param, SparseMatrix
from tm2nn.syntax import native_format, native_text


def source_tables(ir) -> dict:
    """The machine's or circuit's symbol and port tables, for the model's metadata."""
    if isinstance(ir, Circuit):
        return {"inputs": list(ir.inputs), "outputs": list(ir.outputs)}
    if isinstance(ir, Machine):
        return {"alphabet": list(ir.alphabet), "blank": ir.blank, "states": list(ir.states),
                "start": ir.start, "halting": ir.halting, "tape": ir.tape_kind, "convention": ir.convention}
    return {"inputs": list(getattr(ir, "net_inputs", ())), "memory": list(getattr(ir, "memory", ())),
            "outputs": ["out"]}


def _tensor_bytes(t) -> list[bytes]:
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
    return isinstance(op, Param) or (isinstance(op, Affine) and op.trainable)


def _b64(a) -> str:
    return base64.b64encode(np.ascontiguousarray(np.asarray(a, dtype=np.float64)).tobytes()).decode()


def trained_tensors(net) -> dict:
    """The trainable ops' tensors (the ones training changes), exact, as JSON."""
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


def torch_module(model, dtype=None, device=None):
    """The model's network as a torch module: the construction's weights, or a loaded
    ``.pt``'s state dict in their place (a new module per call, in eval mode), on
    ``device`` (a ``torch.device``; default: the CPU)."""
    import torch

    if dtype is None:
        dtype = torch.float64 if model.options.get("dtype") == "float64" else torch.float32
    module = to_torch(model.net, dtype, device)
    if model.state_dict is not None:
        try:
            module.load_state_dict(model.state_dict, strict=True)
        except RuntimeError as e:
            raise Tm2nnError(f"the saved weights do not fit this {model.backend} network: "
                             f"{str(e).splitlines()[0]}", file=model.path) from None
    module.eval()
    return module


def net_of(model):
    """The net a file holds: the compiled one, or the torch module's weights when a
    state dict replaced them (a loaded ``.pt``)."""
    if model.state_dict is None:
        return model.net
    return torch_module(model).to_net()


def metadata(compiled, net=None) -> dict[str, str]:
    """ARCHITECTURE.md's ``metadata_props`` for a model (see the module doc); ``net`` is
    :func:`net_of` when the caller has it already.  The handle's cached info and source
    text are used when ``compiled`` is one."""
    net = net_of(compiled) if net is None else net
    info = compiled.info() if hasattr(compiled, "info") else backends.model_info(compiled, compiled.net_info)
    text = compiled.source_text() if hasattr(compiled, "source_text") else native_text(compiled.source)
    meta = {
        **{k: str(v) for k, v in net.metadata.items()},
        "tm2nn.version": __version__,
        "tm2nn.backend": compiled.backend,
        "tm2nn.source_sha256": compiled.source_sha256 or hashlib.sha256(text.encode()).hexdigest(),
        "tm2nn.source_name": compiled.source.name,
        "tm2nn.source": text,
        "tm2nn.source_format": native_format(compiled.source),
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


