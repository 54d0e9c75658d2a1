"""Model files written: ``.onnx`` (self-contained ONNX, weights inside, the metadata in
``metadata_props``), ``.pt`` (a torch state dict plus the metadata; ``torch.load(path,
weights_only=True)`` reads it) and ``.safetensors`` (the network IR's arrays plus a JSON
manifest, :mod:`.manifest`)."""

from __future__ import annotations

import io
from pathlib import Path

from tm2nn.emit.onnx_model import save_onnx, to_onnx
from tm2nn.fileio import write_atomic
from tm2nn.modelfile import check_model_path
from tm2nn.modelfile.manifest import save_safetensors
from tm2nn.modelfile.metadata import metadata, net_of, torch_module


def onnx_model(compiled):
    """The compiled net as an ONNX model with its metadata (the net's readouts, such as the
    transformer's decoded run, are graph outputs: :mod:`tm2nn.nets.ops`).  The model
    computes in the float type its input encoding names (``"dtype"``, float32 by default:
    the rcnn backend's float64 machines)."""
    net = net_of(compiled)
    return to_onnx(net, metadata(compiled, net), dtype=(compiled.input_encoding or {}).get("dtype", "float32"))


def save(compiled, out) -> Path:
    """Write ``.onnx`` (self-contained), ``.pt`` (``{"state_dict", "metadata"}``) or
    ``.safetensors`` (arrays and manifest)."""
    out = check_model_path(out)
    if out.suffix == ".safetensors":
        return save_safetensors(compiled, out)
    if out.suffix == ".onnx":
        save_onnx(onnx_of(compiled), out)  # a loaded .onnx as the file is (edited weights too)
        return out
    import torch

    module = torch_module(compiled)
    buf = io.BytesIO()
    torch.save({"state_dict": module.state_dict(), "metadata": metadata(compiled)}, buf)
    write_atomic(out, buf.getvalue())
    return out




def onnx_of(compiled):
    """The model's ``onnx.ModelProto``: a loaded ``.onnx`` as the file is (edited weights
    too), else the emitted one."""
    import onnx

    if compiled.onnx_bytes is not None:
        return onnx.load_model_from_string(compiled.onnx_bytes)
    return onnx_model(compiled)
