"""Model files read back: :func:`load_model` checks the metadata against its schema
(:mod:`.schema`), recompiles the source with the recorded options, puts the trained
tensors back and checks the hash, so the model it returns is the one that was saved, for
every backend; a ``.pt``'s state dict then replaces the torch module's weights, a loaded
``.onnx`` runs in onnxruntime as the file is, and a loaded ``.safetensors``'s network
(rebuilt from its manifest) replaces the construction's.  The file's graph signature (or
state dict's names and shapes) must be the construction's; weights that differ from the
construction's (edited on purpose, or damaged) load, with ``edited`` saying where, and
``tm2nn eval`` checks what they compute against the reference.  Every failure names the
file, in one line.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

from tm2nn import backends, limits
from tm2nn._version import __version__
from tm2nn.emit.onnx_model import onnx_metadata
from tm2nn.errors import Tm2nnError
from tm2nn.fileio import read_input
from tm2nn.modelfile import MAX_MODEL_BYTES, SUFFIXES, schema
from tm2nn.modelfile.formats import onnx_model
from tm2nn.modelfile.manifest import flat_metadata, manifest_net, read_safetensors
from tm2nn.modelfile.metadata import torch_module, weights_sha256, with_trained
from tm2nn.nets.serial import with_readouts_of
from tm2nn.options import OptionError
from tm2nn.syntax import parse_text, select


def read_metadata(path) -> tuple[dict, bytes | None, object]:
    """``(metadata, ONNX bytes or None, what else holds the weights)`` of a model file:
    a ``.pt``'s archive, read as far as its metadata (:class:`_TorchFile`), for a
    ``.safetensors`` a function that rebuilds its network from the manifest (called once
    the metadata is checked, so its errors come first), or an ``.onnx``'s parsed
    ``ModelProto``."""
    p = Path(path)
    if p.suffix not in SUFFIXES:
        raise Tm2nnError("a model file ends in .onnx, .pt or .safetensors", file=str(path))
    blob = read_input(p, "model", limit=MAX_MODEL_BYTES)  # a regular file, of at most 2 GiB
    if p.suffix == ".safetensors":
        manifest, arrays = read_safetensors(path, blob)
        return flat_metadata(manifest), None, lambda: manifest_net(manifest, arrays, path)
    if p.suffix == ".onnx":
        import onnx

        try:
            model = onnx.load_model_from_string(blob)  # parsed once: 10^6 nodes take seconds
            meta = onnx_metadata(model)
        except Exception as e:  # a corrupt or foreign file
            raise Tm2nnError(f"not a readable ONNX model ({type(e).__name__})", file=str(path)) from None
        return meta, blob, model
    members = schema.archive_members(blob, path)  # declared sizes, before anything is decompressed
    saved = _torch_load(blob, path, "meta")  # the metadata, and the tensors' shapes only: no tensor is read
    if not (isinstance(saved, dict) and "state_dict" in saved and isinstance(saved.get("metadata"), dict)):
        raise Tm2nnError("not a model saved by tm2nn (a .pt model is {'state_dict': ..., 'metadata': {...}})",
                         file=str(path))
    return dict(saved["metadata"]), None, _TorchFile(blob, members, saved["state_dict"])


class _TorchFile:
    """A ``.pt`` read as far as its metadata: the archive's members (their declared
    sizes) and the state dict's tensors on the meta device (names, dtypes and shapes,
    no data).  :meth:`state_dict` reads the tensors once both are checked against the
    construction's."""

    def __init__(self, blob: bytes, members: dict, shapes):
        self.blob, self.members, self.shapes = blob, members, shapes

    def state_dict(self, reference: dict, path, backend: str) -> dict:
        schema.check_state_dict(self.shapes, reference, path, backend)
        schema.check_archive_sizes(self.members, self.shapes, path, backend)
        return _torch_load(self.blob, path)["state_dict"]


def _torch_load(blob: bytes, path, map_location=None):
    """``torch.load`` of a file's bytes, tensors and strings only (no code runs); on the
    meta device, no tensor's data is read."""
    import torch

    try:
        with warnings.catch_warnings():  # torch warns about a foreign pickle's protocol: it is refused anyway
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(blob), weights_only=True, map_location=map_location)
    except Exception as e:  # not a torch file, or one holding more than tensors and strings
        raise Tm2nnError(f"not a torch file of tensors and strings ({type(e).__name__})", file=str(path)) from None


def load_model(path):
    """The :class:`~tm2nn.backends.protocol.Model` a model file holds (see the module doc),
    checked (:mod:`tm2nn.model_schema`): its metadata, what it promises, and its weights
    against the construction's (``.edited`` says where they first differ)."""
    raw, blob, weights = read_metadata(path)
    meta = schema.parse_metadata(raw, path)
    net = weights() if callable(weights) else None  # a .safetensors' network
    backend = backends.get(meta["tm2nn.backend"])
    meta.update(schema.parse_backend_keys(raw, meta, backend, path))
    with _rebuild_budget(Path(path).stat().st_size, path):
        compiled = _located(path, lambda: _rebuild(backend, meta, path))
    schema.check_encodings(meta, compiled, path)
    state = None
    if net is not None:  # a .safetensors: its network replaces the construction's
        net = with_readouts_of(net, compiled.net)  # a file from before readouts were ops
        compiled.edited = schema.net_edit(net, compiled.net, path, compiled.backend)
        compiled.net = net
    elif blob is not None:
        compiled.edited = _edit(compiled, weights, path, meta["tm2nn.build"])
    else:  # a .pt: its tensors are read once their names and declared sizes are the construction's
        reference = torch_module(compiled).state_dict()
        state = weights.state_dict(reference, path, compiled.backend)
        compiled.edited = schema.state_dict_edit(state, reference, path, compiled.backend)
    compiled.build = meta["tm2nn.build"]
    compiled.source_sha256 = meta["tm2nn.source_sha256"]
    compiled.onnx_bytes = blob
    compiled.state_dict = state
    compiled.path = str(path)
    if "tm2nn.info" in meta:  # the info the file records (no recomputation)
        compiled.recorded_info = {"backend": compiled.backend, "info": meta["tm2nn.info"],
                                  "bounds": meta.get("tm2nn.bounds", [])}
    return compiled


#: the memory a rebuild may plan: this many times the model file's bytes, plus
#: :data:`REBUILD_SLACK` (measured: a relu-circuit line machine's rebuild estimates 37-40
#: times its ``.pt``, the most compact format; 92 MiB for 2.5 MB, 1.4 GiB for 36 MB)
REBUILD_FACTOR, REBUILD_SLACK = 64, 256 << 20


@contextlib.contextmanager
def _rebuild_budget(nbytes: int, path):
    """While the metadata's construction is rebuilt, the memory limit is at most what a
    file of ``nbytes`` can describe (:data:`REBUILD_FACTOR`): a few kilobytes of
    metadata asking for a construction of gigabytes (a line machine unrolled for more
    steps) is refused by the backend's own estimate, before it is built, not after
    seconds of compiling and a hash that does not match."""
    outer = limits.memory_limit()
    budget = min(outer, REBUILD_FACTOR * nbytes + REBUILD_SLACK)
    saved = limits.set_memory_limit(budget)  # restored as it was: the CLI's --max-memory, or none
    try:
        yield
    except Tm2nnError as e:
        if budget >= outer or ", over the limit of " not in e.message:
            raise
        need = e.message.split(", over the limit of ")[0]
        raise Tm2nnError(f"{need}, more than a model file of {nbytes:,} bytes describes (a rebuild may plan "
                         f"{REBUILD_FACTOR} times the file plus {REBUILD_SLACK >> 20} MiB, {limits.human(budget)}): "
                         "refused before it is built", file=str(path)) from None
    finally:
        limits.set_memory_limit(saved)


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
        if meta["tm2nn.version"] != __version__:
            raise Tm2nnError(f"its weights are not this tm2nn's {backend.name} construction of its source (tm2nn "
                             f"{meta['tm2nn.version']} wrote it; this is {__version__}): compile it again")
        raise Tm2nnError(f"metadata key tm2nn.weights_sha256 is not the hash of the {backend.name} construction "
                         "its metadata describes (tm2nn.source, tm2nn.build): the metadata was altered")
    return compiled


def _edit(compiled, mine, path, build: dict) -> str | None:
    """Where the ONNX file's weights (``mine``, its parsed model) first differ from the construction's (None: they
    do not).  Its graph's inputs and outputs must be the construction's, its size near
    the construction's and its loops no longer (what ``build``, the recorded options,
    makes them); anything else is an error, before onnxruntime sees the graph."""
    built = onnx_model(compiled)
    schema.check_graph_size(mine, built, path, compiled.backend)
    schema.check_self_contained(mine, path)
    schema.check_signature(mine, built, path, compiled.backend)
    schema.check_loops(mine, built, path, compiled.backend, build)
    return schema.onnx_edit(mine, built)
