"""The network IR as JSON plus named arrays: what a ``.safetensors`` model's manifest
holds (docs/manifest.md), and back.

:func:`net_to_json` walks a :class:`~tm2nn.nets.Net` (nested loop, decoder, filter and
head nets included) and gives a JSON object for the structure and a ``{key: array}``
dict for the weights:

* an op is ``{"name", "kind", "inputs", "out_kind", "space", "cite", "attrs", "tensors",
  "nets"}``; ``space`` indexes the shared table of labelled spaces, so every dimension of
  every value has its label, written once however many ops share the space;
* a dense tensor is ``{"layout": "dense", "key", "shape"}`` (float64, exact); a sparse
  matrix ``{"layout": "coo", "shape", "nnz", "rows", "cols", "vals"}`` (int32 rows and
  columns, int64 for a matrix over 2^31 wide, and float64 values; row-major order); a computed positional code ``{"layout": "binary_positions",
  ...}`` (its columns and offset, no array);
* a space is its labels, or ``{"prefixes", "names"}`` for one made by
  :meth:`~tm2nn.nets.space.Space.prefixed` (a 10^6-gate circuit's labels stay compact).

:func:`net_from_json` rebuilds the net from those two alone, through the ops' own
constructors (so a manifest gets the same validation as a net a backend builds), and
reads nothing else: no source, no backend.  The rebuilt net is equal to the written one
value for value, so the torch module emitted from it computes bit-identically.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tm2nn.nets import BinaryPositions, Net, NetIRError, Op, Port, Space, SparseMatrix
from tm2nn.nets.ops import network_outputs


def _op_classes(cls: type = Op) -> list[type]:
    """Every concrete op class (the ones with a kind of their own), found by subclassing, so
    an op added to the IR is written and read without a change here."""
    out = []
    for sub in cls.__subclasses__():
        out += ([sub] if sub.kind != cls.kind else []) + _op_classes(sub)
    return out


#: every op class, by the ``kind`` a manifest names it with
OP_KINDS: dict[str, type] = {c.kind: c for c in _op_classes()}
#: the fields every op has (written as ``name`` and ``inputs``)
_COMMON = ("name", "inputs", "cite")


class SpaceTable:
    """Spaces written once each (by identity: ops pass their input's space on), as JSON."""

    def __init__(self) -> None:
        self.rows: list = []
        self._index: dict[int, int] = {}
        self._keep: list[Space] = []  # the ids above stay valid while the table lives

    def add(self, space: Space) -> int:
        i = self._index.get(id(space))
        if i is None:
            i = self._index[id(space)] = len(self.rows)
            self._keep.append(space)
            parts = space._parts  # made by Space.prefixed, labels not yet read: keep it compact
            self.rows.append({"prefixes": list(parts[0]), "names": list(parts[1])} if parts is not None
                             else list(space.labels))
        return i


def net_to_json(net: Net, tensors: dict, spaces: SpaceTable, prefix: str = "") -> dict:
    """``net`` as JSON (see the module doc); its arrays go into ``tensors`` under keys
    that start with ``prefix``."""
    ops = []
    for op in net.nodes:
        d: dict = {"name": op.name, "kind": op.kind, "inputs": list(op.inputs), "out_kind": net.kinds[op.name],
                   "space": spaces.add(net.spaces[op.name]), "cite": getattr(op, "cite", ""),
                   "attrs": {}, "tensors": {}, "nets": {}, "spaces": {}}
        for f in dataclasses.fields(op):
            if f.name in _COMMON or not f.init:
                continue
            v = getattr(op, f.name)
            key = f"{prefix}{op.name}.{f.name}"
            if isinstance(v, Net):
                d["nets"][f.name] = net_to_json(v, tensors, spaces, f"{prefix}{op.name}/{f.name}/")
            elif isinstance(v, Space):
                d["spaces"][f.name] = spaces.add(v)
            elif isinstance(v, SparseMatrix):
                index = np.int32 if max(v.shape) < 1 << 31 else np.int64  # a third smaller, where it fits
                tensors[key + ".rows"], tensors[key + ".cols"] = v.rows.astype(index), v.cols.astype(index)
                tensors[key + ".vals"] = v.vals
                d["tensors"][f.name] = {"layout": "coo", "shape": list(v.shape), "nnz": int(v.nnz),
                                        "rows": key + ".rows", "cols": key + ".cols", "vals": key + ".vals"}
            elif isinstance(v, BinaryPositions):
                d["tensors"][f.name] = {"layout": "binary_positions", **v.to_json()}
            elif isinstance(v, np.ndarray):
                tensors[key] = np.ascontiguousarray(v, dtype=np.float64)
                d["tensors"][f.name] = {"layout": "dense", "key": key, "shape": list(v.shape)}
            else:
                d["attrs"][f.name] = _plain(v, f"{op.kind} {op.name!r} field {f.name!r}")
        ops.append({k: v for k, v in d.items() if v != {} or k == "attrs"})
    return {"name": net.name,
            "inputs": [{"name": p.name, "kind": p.kind, "space": spaces.add(p.space),
                        **({"meta": _plain(p.meta, f"port {p.name!r}")} if p.meta else {})} for p in net.inputs],
            "ops": ops, "outputs": list(net.outputs), "metadata": {k: str(v) for k, v in net.metadata.items()}}


def _plain(v, what: str):
    """A field value as JSON (numbers, strings, booleans, None and lists of them)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    if isinstance(v, (tuple, list)):
        return [_plain(x, what) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x, what) for k, x in v.items()}
    raise NetIRError(f"{what}: a {type(v).__name__} has no JSON form")


def space_from_json(row) -> Space:
    """A space table row back as a :class:`Space` (labels checked distinct)."""
    if isinstance(row, dict):
        prefixes, names = row["prefixes"], row["names"]
        if not all(isinstance(s, str) for s in [*prefixes, *names]) or len(set(names)) != len(names):
            raise NetIRError("a prefixed space needs distinct string names and string prefixes")
        space = Space.prefixed(prefixes, names)
        if len(prefixes) > 1:
            Space(space.labels)  # the prefixes could make two labels equal: check them
        return space
    if not isinstance(row, list) or not all(isinstance(s, str) for s in row):
        raise NetIRError("a space is a list of labels or {'prefixes', 'names'}")
    return Space(row)


def net_from_json(d: dict, tensors: dict, spaces: list[Space]) -> Net:
    """The net :func:`net_to_json` wrote, from its JSON and arrays (``spaces`` is the
    table's rows already made into :class:`Space`\\ s).  A malformed manifest raises
    :class:`NetIRError`, ``KeyError``, ``TypeError``, ``ValueError`` or ``IndexError``
    (the caller words it)."""
    ports = tuple(Port(p["name"], _space(spaces, p["space"]), dict(p.get("meta", {})), p["kind"])
                  for p in d["inputs"])
    nodes = []
    for o in d["ops"]:
        cls = OP_KINDS.get(o["kind"])
        if cls is None:
            raise NetIRError(f"op {o.get('name')!r}: unknown kind {o['kind']!r} (known: {', '.join(OP_KINDS)})")
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        kw: dict = {"name": o["name"], "inputs": tuple(o["inputs"])}
        if "cite" in names:
            kw["cite"] = o.get("cite", "")
        kw.update(o.get("attrs", {}))
        for f, i in o.get("spaces", {}).items():
            kw[f] = _space(spaces, i)
        for f, t in o.get("tensors", {}).items():
            kw[f] = _tensor(t, tensors, f"{o['name']}.{f}")
        for f, sub in o.get("nets", {}).items():
            kw[f] = net_from_json(sub, tensors, spaces)
        unknown = sorted(set(kw) - names)
        if unknown:
            raise NetIRError(f"{o['kind']} {o['name']!r} has no field {unknown[0]!r}")
        op: Op = cls(**kw)
        nodes.append(op)
    net = Net(d["name"], ports, tuple(nodes), tuple(d["outputs"]), dict(d.get("metadata", {})))
    for o, op in zip(d["ops"], net.nodes):
        if net.spaces[op.name] != _space(spaces, o["space"]) or net.kinds[op.name] != o["out_kind"]:
            raise NetIRError(f"{op.kind} {op.name!r}: the recorded output space or kind is not what the op computes")
    return net


def _space(spaces: list[Space], i) -> Space:
    if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(spaces):
        raise NetIRError(f"space index {i!r} is not in the table of {len(spaces)} spaces")
    return spaces[i]


def _tensor(t: dict, tensors: dict, what: str):
    """One tensor of an op from its JSON entry and the file's arrays."""
    layout = t["layout"]
    if layout == "binary_positions":
        return BinaryPositions(int(t["width"]), tuple(t["columns"]), int(t["offset"]), int(t["length"]))
    if layout == "dense":
        a = _array(tensors, t["key"], what)
        if list(a.shape) != list(t["shape"]):
            raise NetIRError(f"tensor {what}: shape {list(a.shape)}, the manifest says {t['shape']}")
        return a.astype(np.float64, copy=False)
    if layout == "coo":
        rows, cols, vals = (_array(tensors, t[k], what) for k in ("rows", "cols", "vals"))
        if rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu":
            raise NetIRError(f"tensor {what}: rows and cols must be integer arrays, not {rows.dtype}/{cols.dtype}")
        if not (rows.shape == cols.shape == vals.shape == (t["nnz"],)):
            raise NetIRError(f"tensor {what}: rows, cols and vals must each hold the manifest's {t['nnz']} entries")
        shape = tuple(t["shape"])
        if len(shape) != 2:
            raise NetIRError(f"tensor {what}: a sparse matrix has two dimensions")
        return SparseMatrix(shape, rows.astype(np.int64, copy=False), cols.astype(np.int64, copy=False),
                            vals.astype(np.float64, copy=False))
    raise NetIRError(f"tensor {what}: unknown layout {layout!r} (dense, coo, binary_positions)")


def _array(tensors: dict, key, what: str) -> np.ndarray:
    if key not in tensors:
        raise NetIRError(f"tensor {what}: the file has no array {key!r}")
    return tensors[key]


def with_readouts_of(net: Net, built: Net) -> Net:
    """``net`` as a manifest written before readouts were ops of the net holds it (no
    readout, :mod:`tm2nn.nets.ops`), with ``built``'s readouts appended and their outputs
    in ``built``'s order; any other ``net`` as it is.  A readout holds no weights: it is
    the construction's, whatever file the weights came from."""
    readouts = [op for op in built.nodes if op.readout]
    if not readouts or any(op.readout for op in net.nodes) or tuple(net.outputs) != network_outputs(built):
        return net
    return Net(net.name, net.inputs, (*net.nodes, *readouts), tuple(built.outputs), dict(net.metadata))
