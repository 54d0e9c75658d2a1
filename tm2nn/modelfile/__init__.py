"""Model files, one job a module:

* :mod:`.metadata`: what every file records (the ``tm2nn.*`` metadata, the weights' hash,
  a trained net's tensors);
* :mod:`.formats`: the files written (``.onnx``, ``.pt``, and ``.safetensors`` through
  :mod:`.manifest`);
* :mod:`.manifest`: the ``.safetensors`` format and its JSON manifest;
* :mod:`.schema`: the metadata's schema and the checks of a file against the construction;
* :mod:`.load`: a file read back, checked, into a model (through the backend registry).

The package sits above the backends and below the handle (:mod:`tm2nn.handle`): it reads
and writes :class:`~tm2nn.backends.protocol.Model` values.
"""

from __future__ import annotations

from pathlib import Path

from tm2nn.errors import Tm2nnError
from tm2nn.fileio import output_target

#: the model files tm2nn writes and reads
SUFFIXES = (".onnx", ".pt", ".safetensors")
#: The largest model file read (protobuf's own limit for a self-contained ONNX model).
MAX_MODEL_BYTES = 2 << 30


def check_model_path(path, what: str = "output") -> Path:
    """A model file to write: ``.onnx``, ``.pt`` or ``.safetensors`` in an existing folder,
    checked before any work is done (so a long compile or training never ends in a failed
    write)."""
    out = Path(path)
    if out.suffix not in SUFFIXES:
        raise Tm2nnError(f"{what} must name a .onnx, .pt or .safetensors file, got {out.name!r}")
    output_target(out, what)  # a regular file in a folder for files (docs/limits.md)
    return out
