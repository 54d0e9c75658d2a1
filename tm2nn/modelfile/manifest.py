"""``.safetensors`` models: the weights as safetensors plus a JSON manifest that describes
the network completely (docs/manifest.md; schema: docs/manifest.schema.json).

The manifest holds every op in order (kind, inputs, the labelled space of its output,
its tensors' shapes and safetensors keys, the paper's lemma it implements), the encodings
and how each reported field is decoded from which dimensions (its codec's ``describe``), the source and its sha256, and the sizes next
to the paper's bounds.  It lives in the safetensors header's metadata under
``tm2nn.manifest``; one too large for a header (over :data:`HEADER_MANIFEST_MAX` bytes,
a circuit of millions of gates) is written beside the weights as
``NAME.manifest.HASH.json``, and the header records its name and sha256.

* :func:`build_manifest` / :func:`save_safetensors`: a compiled model -> the manifest /
  the file;
* :func:`read_safetensors`: a file -> ``(manifest, arrays)``, checked;
* :func:`load_net` / :func:`load_module`: the network IR / the torch module, rebuilt from
  the manifest and arrays alone (no source, no backend);
* :func:`flat_metadata`: the manifest as the ``tm2nn.*`` metadata an ``.onnx`` carries,
  so :func:`tm2nn.modelfile.load.load_model` checks every format with one schema.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import struct
from pathlib import Path

from tm2nn import backends
from tm2nn.emit.torch_emit import to_torch
from tm2nn.errors import Tm2nnError
from tm2nn.fileio import folder_lock, output_target, read_input, write_atomic
from tm2nn.limits import check_memory
from tm2nn.modelfile import MAX_MODEL_BYTES
from tm2nn.modelfile.metadata import metadata, net_of
from tm2nn.nets import NetIRError
from tm2nn.nets.serial import SpaceTable, net_from_json, net_to_json, space_from_json

#: what the manifest's ``manifest`` field says, and the schema version it follows
MANIFEST_KIND = "tm2nn.manifest"
SCHEMA_VERSION = 1
#: the largest manifest kept in the safetensors header (the format's readers refuse
#: headers of 100 MB and more); a larger one goes beside the file
HEADER_MANIFEST_MAX = 64 << 20

#: the flat metadata key, where it sits in the manifest, and whether it is JSON there
#: (one table both ways: :func:`build_manifest` and :func:`flat_metadata`)
FLAT_KEYS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("tm2nn.version", ("tm2nn_version",), False),
    ("tm2nn.backend", ("backend",), False),
    ("tm2nn.source_name", ("source", "name"), False),
    ("tm2nn.source_format", ("source", "format"), False),
    ("tm2nn.source_sha256", ("source", "sha256"), False),
    ("tm2nn.source", ("source", "text"), False),
    ("tm2nn.tables", ("source", "tables"), True),
    ("tm2nn.input_encoding", ("encodings", "input"), True),
    ("tm2nn.output_encoding", ("encodings", "output"), True),
    ("tm2nn.build", ("build",), True),
    ("tm2nn.options", ("options",), True),
    ("tm2nn.info", ("sizes", "info"), True),
    ("tm2nn.bounds", ("sizes", "bounds"), True),
    ("tm2nn.weights_sha256", ("weights", "sha256"), False),
    ("tm2nn.trained", ("weights", "trained"), True),
)


def build_manifest(compiled, net=None) -> tuple[dict, dict]:
    """``(manifest, arrays)`` of a compiled model: the manifest's network is ``net``
    (default: the weights the model runs, :func:`tm2nn.modelfile.metadata.net_of`)."""
    net = net_of(compiled) if net is None else net
    flat = metadata(compiled, net)
    m: dict = {"manifest": MANIFEST_KIND, "schema_version": SCHEMA_VERSION}
    for key, path, is_json in FLAT_KEYS:
        if key in flat:
            _put(m, path, json.loads(flat[key]) if is_json else flat[key])
    spec = backends.get(compiled.backend)
    m["paper"] = spec.paper or spec.summary  # a backend of a user's may name no paper
    m["decoding"] = spec.codec.describe(compiled)
    m["weights"]["edited"] = flat.get("tm2nn.weights_edited") == "true"
    arrays: dict = {}
    spaces = SpaceTable()
    m["net"] = net_to_json(net, arrays, spaces)
    _inherit_cites(m["net"], m["paper"])
    m["spaces"] = spaces.rows
    m["weights"].update({"dtype": "float64", "arrays": len(arrays),
                         "bytes": int(sum(a.nbytes for a in arrays.values()))})
    return m, arrays


def _inherit_cites(net: dict, outer: str) -> None:
    """Give every op of the manifest a ``cite``: an op without one of its own (a ReLU after
    its affine layer, a slice or concat that routes values) is part of what the op it reads
    first implements, or, reading a net input, what the op holding the net implements;
    ``cite_inherited`` marks these."""
    cites: dict[str, str] = {}
    for op in net["ops"]:
        if not op["cite"]:
            op["cite"] = next((cites[i] for i in op["inputs"] if i in cites), outer)
            op["cite_inherited"] = True
        cites[op["name"]] = op["cite"]
        for sub in op.get("nets", {}).values():
            _inherit_cites(sub, op["cite"])


def _put(d: dict, path: tuple[str, ...], value) -> None:
    for p in path[:-1]:
        d = d.setdefault(p, {})
    d[path[-1]] = value


def flat_metadata(m: dict) -> dict[str, str]:
    """The manifest as ``tm2nn.*`` metadata strings (what an ``.onnx`` of the same model
    carries in ``metadata_props``): the root net's own metadata, then :data:`FLAT_KEYS`."""
    own = m["net"].get("metadata") if isinstance(m.get("net"), dict) else None
    out = {str(k): str(v) for k, v in own.items()} if isinstance(own, dict) else {}
    for key, path, is_json in FLAT_KEYS:
        d = m
        for p in path:
            d = d.get(p) if isinstance(d, dict) else None
        if d is not None:
            out[key] = json.dumps(d, sort_keys=True) if is_json else d
    if isinstance(m.get("weights"), dict) and m["weights"].get("edited") is True:
        out["tm2nn.weights_edited"] = "true"
    return out


# -- writing ------------------------------------------------------------------------------------
#: a sidecar's name: ``NAME.manifest.HASH.json``, HASH the first 16 hex digits of its
#: sha256 (older files wrote ``NAME.manifest.json``; their header names it, and it reads)
_SIDECAR = r"\.manifest\.[0-9a-f]{16}\.json"


def sidecar_path(path, digest: str) -> Path:
    """Where a manifest too large for the header goes: ``NAME.manifest.HASH.json``
    beside ``path``, named after its content (``digest``: its sha256), so a new one
    never overwrites the one an older file beside it still reads."""
    p = Path(path)
    return p.with_name(f"{p.stem}.manifest.{digest[:16]}.json")


def save_safetensors(compiled, out: Path) -> Path:
    """Write ``out`` (and, for a manifest over :data:`HEADER_MANIFEST_MAX`, its sidecar).

    The pair is written so that a reader finds the old pair or the new one, never a mix
    (docs/manifest.md, "How a file is written and read"): the sidecar is named after its
    sha256 and written first, the main file replaces the old one last, and only then is
    the sidecar the old file read removed.  Writers of the same folder take turns
    (:func:`tm2nn.fileio.folder_lock`); an interrupted write removes its new sidecar."""
    from safetensors.numpy import save

    if compiled.edited is not None and compiled.onnx_bytes is not None:
        raise Tm2nnError(f"its weights are not the construction's ({compiled.edited}) and live in its ONNX "
                         "graph, which a .safetensors network cannot hold: save it as .onnx", file=compiled.path)
    m, arrays = build_manifest(compiled)
    text = json.dumps(m, sort_keys=True, separators=(",", ":"))
    side = data = None
    if len(text) <= HEADER_MANIFEST_MAX:
        header = {"tm2nn.manifest": text}
    else:
        data = text.encode()
        digest = hashlib.sha256(data).hexdigest()
        side = sidecar_path(out, digest)
        header = {"tm2nn.manifest_file": side.name, "tm2nn.manifest_sha256": digest}
    blob = save(arrays, metadata={"format": "np", **header})
    out = Path(out)
    output_target(out)  # checked before the lock is taken
    with folder_lock(out.parent):
        old = _sidecar_named(out)
        new = side is not None and not side.exists()
        try:
            if side is not None:
                write_atomic(side, data)
            write_atomic(out, blob)
        except BaseException:
            if new and _sidecar_named(out) != side.name:  # the old pair stays whole; the new sidecar goes
                side.unlink(missing_ok=True)
            raise
        _remove_stale_sidecars(out, old, None if side is None else side.name)
    return out


def _sidecar_named(path: Path) -> str | None:
    """The sidecar name the ``.safetensors`` at ``path`` records (its header alone is
    read), or None (no file, no sidecar, or not one tm2nn reads)."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > HEADER_MANIFEST_MAX + (1 << 20):
                return None
            name = json.loads(f.read(n)).get("__metadata__", {}).get("tm2nn.manifest_file")
    except (OSError, ValueError, struct.error, AttributeError, RecursionError):
        return None
    return name if isinstance(name, str) else None


def _remove_stale_sidecars(out: Path, old: str | None, keep: str | None) -> None:
    """Remove the sidecars beside ``out`` that it no longer reads: ``old``, the one the
    file it replaced recorded, and those named after its content
    (``NAME.manifest.HASH.json``) left by an interrupted write, all but ``keep`` (the one
    the file just written records)."""
    hashed = re.compile(re.escape(out.stem) + _SIDECAR)
    stale = {p.name for p in out.parent.glob(f"{glob.escape(out.stem)}.manifest.*.json") if hashed.fullmatch(p.name)}
    if old is not None and Path(old).name == old and old not in ("", ".", ".."):
        stale.add(old)
    for name in stale - {keep}:
        p = out.parent / name
        if p.is_file() and not p.is_symlink():
            p.unlink(missing_ok=True)


# -- reading ------------------------------------------------------------------------------------
def _header(blob: bytes, path) -> dict:
    """The safetensors header (JSON after an 8-byte little-endian length), checked."""
    if len(blob) < 8:
        raise Tm2nnError("not a safetensors file (shorter than its 8-byte header length)", file=str(path))
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise Tm2nnError(f"not a safetensors file (its header length {n} exceeds the file)", file=str(path))
    check_json_memory(n, "its header", path)
    try:
        header = json.loads(blob[8:8 + n])
    except (ValueError, RecursionError):
        raise Tm2nnError("not a safetensors file (its header is not JSON)", file=str(path)) from None
    if not isinstance(header, dict):
        raise Tm2nnError("not a safetensors file (its header is not a JSON object)", file=str(path))
    return header


#: bytes a value of each safetensors dtype takes
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
            "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}


def check_header_tensors(blob: bytes, header: dict, path) -> None:
    """Before any array is read: each tensor the header declares has a known dtype, a
    shape whose size at that dtype is its ``data_offsets`` span, and a span inside the
    data section, overlapping no other."""
    (n,) = struct.unpack("<Q", blob[:8])
    room = len(blob) - 8 - n
    spans = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        shape, offs = (e.get("shape"), e.get("data_offsets")) if isinstance(e, dict) else (None, None)
        item = ITEMSIZE.get(e.get("dtype")) if isinstance(e, dict) else None
        ints = lambda v, k: isinstance(v, list) and len(v) in k and all(  # noqa: E731
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
        if item is None or not ints(shape, range(64)) or not ints(offs, (2,)) or offs[0] > offs[1]:
            raise Tm2nnError(f"its header's tensor {_shown(name)} is not a dtype, shape and data_offsets safetensors "
                             "reads", file=str(path))
        size = item
        for d in shape:
            size *= d
        if size != offs[1] - offs[0] or offs[1] > room:
            raise Tm2nnError(f"its header's tensor {_shown(name)} declares {e['dtype']} {shape} ({size:,} bytes) at "
                             f"bytes {offs[0]:,} to {offs[1]:,} of a data section of {room:,}", file=str(path))
        spans.append((offs[0], offs[1], name))
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise Tm2nnError(f"its header's tensors {_shown(a)} and {_shown(b)} overlap", file=str(path))


def check_header_against_manifest(header: dict, m: dict, path) -> None:
    """The arrays the header declares are the ones the manifest's network reads, with
    the shapes it gives them (checked before any array is read; the manifest's network
    is then checked against the construction)."""
    want: dict[str, list | None] = {}
    try:
        for _, op in walk(m):
            for t in (op.get("tensors") or {}).values():
                if t.get("layout") == "dense":
                    want[t["key"]] = list(t["shape"])
                elif t.get("layout") == "coo":
                    want.update({t[k]: [t["nnz"]] for k in ("rows", "cols", "vals")})
    except (KeyError, TypeError, AttributeError):
        return  # a malformed network: manifest_net says where
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if name not in want:
            raise Tm2nnError(f"its header declares the array {_shown(name)}, which its manifest's network does not "
                             "read", file=str(path))
        if want[name] != e["shape"]:
            raise Tm2nnError(f"its header's array {_shown(name)} has shape {e['shape']}, its manifest's network "
                             f"{_shown(want[name])}", file=str(path))


def _shown(v, width: int = 60) -> str:
    s = repr(v) if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= width else s[:width - 3] + "..."


def read_safetensors(path, blob: bytes) -> tuple[dict, dict]:
    """``(manifest, arrays)`` of a ``.safetensors`` model (``blob``: the file's bytes);
    the header's tensors are checked against its offsets, the file and the manifest
    before any array is read."""
    from safetensors.numpy import load

    header = _header(blob, path)
    meta = header.get("__metadata__") or {}
    if "tm2nn.manifest" in meta:
        text = meta["tm2nn.manifest"]
    elif "tm2nn.manifest_file" in meta:
        text = _sidecar(path, meta)
    else:
        raise Tm2nnError("no tm2nn manifest in its metadata (was it written by tm2nn compile?)", file=str(path))
    if not isinstance(text, str):
        raise Tm2nnError("its manifest is not JSON text", file=str(path))
    check_json_memory(len(text), "its manifest", path)
    try:
        m = json.loads(text)
    except (ValueError, TypeError, RecursionError) as e:
        raise Tm2nnError(f"its manifest is not JSON ({type(e).__name__})", file=str(path)) from None
    check_manifest(m, path)
    check_manifest_sizes(m, path)
    check_header_tensors(blob, header, path)
    check_header_against_manifest(header, m, path)
    try:
        arrays = load(blob)
    except Exception as e:  # a damaged data section: the library's own error, in one line
        raise Tm2nnError(f"its arrays do not load ({type(e).__name__}: {str(e).splitlines()[0][:200]})",
                         file=str(path)) from None
    return m, arrays


def _sidecar(path, meta: dict) -> str:
    """The manifest text of the sidecar the header names, checked before it is read: a
    plain file name beside the model, a regular file (a symbolic link only to a file
    beside the model's own target, named ``*.json``), of a size the memory limit
    allows; then its sha256 must be the one the header records."""
    name = meta["tm2nn.manifest_file"]
    if not isinstance(name, str) or name in ("", ".", "..") or "\x00" in name or Path(name).name != name:
        raise Tm2nnError(f"its manifest file {_shown(name)} is not a file name beside it", file=str(path))
    side = Path(path).with_name(name)
    if not side.exists():
        raise Tm2nnError(f"its manifest {name} is not beside it (the two files travel together)", file=str(path))
    if side.is_symlink():
        target = Path(os.path.realpath(side))
        if target.parent != Path(os.path.realpath(path)).parent or target.suffix != ".json":
            raise Tm2nnError(f"its manifest {name} is a symbolic link to {str(target)!r}, not to a .json file beside "
                             "the model: refused before it is read", file=str(path))
    try:
        size = side.stat().st_size
    except OSError as e:
        raise Tm2nnError(f"cannot read its manifest {name}: {e.strerror or e}", file=str(path)) from None
    check_json_memory(size, f"its manifest {name}", path)
    data = read_input(side, "manifest", limit=MAX_MODEL_BYTES)
    if hashlib.sha256(data).hexdigest() != meta.get("tm2nn.manifest_sha256"):
        raise Tm2nnError(f"{name} is not the manifest written with it (its sha256 differs)", file=str(path))
    return data.decode("utf-8", errors="replace")


#: Python objects a JSON text becomes take up to this many times its bytes (measured
#: with tracemalloc: 25x for a list of ``{"a":1}`` or of ``{}``, the worst found; 5x for
#: a manifest tm2nn writes): the estimate checked before any JSON a model holds is parsed
JSON_PARSE_FACTOR = 26
#: nets nested in ops (a loop's body) at most this deep; tm2nn's constructions nest 2
MAX_NET_DEPTH = 16
#: bytes a label of a space takes once built, beyond its characters (a str, a tuple slot,
#: the set entry of the distinctness check)
LABEL_BYTES = 128


def check_json_memory(nbytes: int, what: str, path) -> None:
    """Refuse JSON of ``nbytes`` whose parse could pass the memory limit
    (:data:`JSON_PARSE_FACTOR`), before it is parsed."""
    _checked(nbytes * JSON_PARSE_FACTOR, f"parsing {what} ({nbytes:,} bytes of JSON)", path)


def _checked(nbytes: float, what: str, path) -> None:
    try:
        check_memory(nbytes, what)
    except Tm2nnError as e:
        raise Tm2nnError(str(e).replace("tm2nn: error: ", ""), file=str(path)) from None


def check_manifest_sizes(m: dict, path) -> None:
    """What the manifest's network would build, checked before it is built: nets nest at
    most :data:`MAX_NET_DEPTH` deep, and the labels of its spaces (a prefixed space
    declares ``len(prefixes) x len(names)`` of them in a few bytes) fit the memory
    limit."""
    stack = [(m["net"], 1)]
    while stack:
        net, depth = stack.pop()
        if depth > MAX_NET_DEPTH:
            raise Tm2nnError(f"its manifest's network nests nets more than {MAX_NET_DEPTH} deep (tm2nn's "
                             "constructions nest 2)", file=str(path))
        ops = net.get("ops") if isinstance(net, dict) else None
        for op in ops if isinstance(ops, list) else ():
            nets = op.get("nets") if isinstance(op, dict) else None
            stack += [(sub, depth + 1) for sub in (nets.values() if isinstance(nets, dict) else ())]
    labels = chars = 0
    for row in m["spaces"]:
        if isinstance(row, dict) and isinstance(row.get("prefixes"), list) and isinstance(row.get("names"), list):
            p, n = row["prefixes"], row["names"]
            labels += len(p) * len(n)
            chars += len(n) * sum(len(x) for x in p if isinstance(x, str)) + len(p) * sum(
                len(x) for x in n if isinstance(x, str))
        elif isinstance(row, list):
            labels += len(row)
    _checked(labels * LABEL_BYTES + chars, f"the {labels:,} labels its manifest's spaces declare", path)


@contextlib.contextmanager
def _bounded(path):
    """Turn what a hostile file can still provoke past the checks (a recursion too
    deep for Python, an allocation the estimates missed) into one error naming it."""
    try:
        yield
    except RecursionError:
        raise Tm2nnError("its manifest's network is nested too deep for this reader", file=str(path)) from None
    except MemoryError:
        raise Tm2nnError("its manifest's network does not fit in memory (out of memory while building it; "
                         "--max-memory sets how much tm2nn may plan to use)", file=str(path)) from None


#: the manifest's top-level fields and their JSON types (the full schema, with every
#: nested field, is docs/manifest.schema.json; this is what the loader relies on)
TOP_LEVEL: dict[str, type | tuple] = {
    "manifest": str, "schema_version": int, "tm2nn_version": str, "backend": str, "paper": str,
    "source": dict, "encodings": dict, "decoding": dict, "build": dict, "sizes": dict, "weights": dict,
    "net": dict, "spaces": list,
}


def check_manifest(m, path) -> None:
    """The manifest's kind, version and top-level fields (one error naming the first bad one)."""
    if not isinstance(m, dict) or m.get("manifest") != MANIFEST_KIND:
        raise Tm2nnError(f"its manifest does not say \"manifest\": \"{MANIFEST_KIND}\"", file=str(path))
    if m.get("schema_version") != SCHEMA_VERSION:
        raise Tm2nnError(f"its manifest follows schema version {m.get('schema_version')!r}; this tm2nn reads "
                         f"version {SCHEMA_VERSION}", file=str(path))
    for key, kind in TOP_LEVEL.items():
        if not isinstance(m.get(key), kind) or isinstance(m.get(key), bool):
            what = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise Tm2nnError(f"manifest field {key!r} is {'missing' if key not in m else 'not a JSON ' + what}",
                             file=str(path))


def manifest_net(m: dict, arrays: dict, path):
    """The network IR the manifest and arrays describe, or one error naming the file.  The
    backend the manifest names is loaded first (through the backend registry): a
    construction registers its own activations (:func:`tm2nn.nets.activations.register`)
    when it is imported, and its net may use them."""
    if m["backend"] in backends.names():
        backends.get(m["backend"])
    try:
        with _bounded(path):
            spaces = [space_from_json(row) for row in m["spaces"]]
            return net_from_json(m["net"], arrays, spaces)
    except (NetIRError, KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        what = f"no field {e}" if isinstance(e, KeyError) else str(e).splitlines()[0][:300]
        raise Tm2nnError(f"its manifest's network does not build: {what}", file=str(path)) from None


def _read(path) -> tuple[dict, dict]:
    return read_safetensors(path, read_input(Path(path), "model", limit=MAX_MODEL_BYTES))


def load_manifest(path) -> dict:
    """The manifest of a ``.safetensors`` model (checked at the top level)."""
    return _read(path)[0]


def load_net(path):
    """The network IR of a ``.safetensors`` model, from its manifest and arrays alone."""
    m, arrays = _read(path)
    return manifest_net(m, arrays, path)


def load_module(path, dtype=None):
    """The torch module of a ``.safetensors`` model, from its manifest and arrays alone:
    no source is parsed and no backend compiles (``tm2nn.load_model`` does both, to check
    the file against the construction).  ``dtype``: the encodings' (float32 unless the
    model records float64)."""
    import torch

    m, arrays = _read(path)
    net = manifest_net(m, arrays, path)
    if dtype is None:
        float64 = (m["encodings"].get("input") or {}).get("dtype") == "float64" \
            or (m.get("options") or {}).get("dtype") == "float64"
        dtype = torch.float64 if float64 else torch.float32
    with _bounded(path):
        module = to_torch(net, dtype)
    module.eval()
    return module


def walk(m: dict):
    """``(value, op)`` for every op of the manifest's network in order, nested nets
    included, the values of nested ones named ``"op/field/name"``."""
    def ops(net: dict, path: str):
        for op in net["ops"]:
            yield path + op["name"], op
            for field, sub in op.get("nets", {}).items():
                yield from ops(sub, f"{path}{op['name']}/{field}/")
    return ops(m["net"], "")


def find_ops(m: dict, kind: str | None = None, cite: str = "") -> list[str]:
    """The values of the ops of ``kind`` (any, for None) whose ``cite`` contains ``cite``:
    find a construction's pieces by the lemma they implement, not by name."""
    return [v for v, op in walk(m) if (kind is None or op["kind"] == kind) and cite in op["cite"]]


def module_path(module, value: str) -> str:
    """The attribute path of a value's submodule in the torch module built from the
    manifest (``"trace/body/S.c6"`` -> ``"trace_op.body.S_c6"``); the same path reaches
    it in a wrapper that mirrors the module's attributes (``nnsight.NNsight(module)``)."""
    *outer, name = value.split("/")
    parts = []
    for op, field in zip(outer[::2], outer[1::2]):
        parts += [module.op_attrs[op], field]
        module = getattr(module.op(op), field)
    return ".".join(parts + [module.op_attrs[name]])


def value_labels(m: dict, value: str) -> list[str]:
    """The labels of the dimensions of ``value`` in a manifest: an input port or op of the
    root net, or of a nested one as ``"op/field/name"`` (``"dec/body/S.tap"``)."""
    *outer, name = value.split("/")
    net = m["net"]
    for op_name, field in zip(outer[::2], outer[1::2]):
        op = next((o for o in net["ops"] if o["name"] == op_name), None)
        if op is None or field not in op.get("nets", {}):
            raise KeyError(f"{value!r}: no nested net {op_name}/{field}")
        net = op["nets"][field]
    for entry in [*net["inputs"], *net["ops"]]:
        if entry["name"] == name:
            return list(space_from_json(m["spaces"][entry["space"]]).labels)
    raise KeyError(f"{value!r}: no such value in the manifest's network")
