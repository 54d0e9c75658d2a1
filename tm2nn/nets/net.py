"""The network IR: a small typed graph of labelled ops (ARCHITECTURE.md, "The network IR").

A :class:`Net` is SSA-like: its input ports and every op's output are named values;
ops are listed in an order where each reads only values defined before it.
Validation lives in ``__post_init__`` (once), and :meth:`Net.info` gives the size
report that ``tm2nn info`` prints next to each paper's bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tm2nn.nets.grid import GridReadout, MemoryGrid, PatchMap
from tm2nn.nets.matrix import SparseMatrix
from tm2nn.nets.ops import (
    Activation,
    Affine,
    Attention,
    Decode,
    Loop,
    Mul,
    NetIRError,
    Op,
    Param,
    Port,
    ReLU,
)
from tm2nn.nets.space import Space


@dataclass(frozen=True, eq=False)
class Net:
    name: str
    inputs: tuple[Port, ...]
    nodes: tuple[Op, ...]
    outputs: tuple[str, ...]
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        spaces: dict[str, Space] = {}
        kinds: dict[str, str] = {}
        for p in self.inputs:
            if p.name in spaces:
                raise NetIRError(f"net {self.name!r}: input {p.name!r} declared twice")
            spaces[p.name] = p.space
            kinds[p.name] = p.kind
        for op in self.nodes:
            if op.name in spaces:
                raise NetIRError(f"net {self.name!r}: value {op.name!r} defined twice")
            missing = [i for i in op.inputs if i not in spaces]
            if missing:
                raise NetIRError(f"net {self.name!r}: {op.kind} {op.name!r} reads undefined {missing[0]!r}")
            want = op.in_kinds()
            got = tuple(kinds[i] for i in op.inputs)
            if got != want:
                raise NetIRError(f"net {self.name!r}: {op.kind} {op.name!r} reads {list(got)}, expects {list(want)}")
            spaces[op.name] = op.out_space([spaces[i] for i in op.inputs])
            kinds[op.name] = op.out_kind
        for o in self.outputs:
            if o not in spaces:
                raise NetIRError(f"net {self.name!r}: output {o!r} is not defined")
        object.__setattr__(self, "spaces", spaces)
        object.__setattr__(self, "kinds", kinds)

    spaces: dict[str, Space] = field(default=None, init=False, repr=False)  # type: ignore[assignment]
    kinds: dict[str, str] = field(default=None, init=False, repr=False)  # type: ignore[assignment]

    def node(self, name: str) -> Op:
        for op in self.nodes:
            if op.name == name:
                return op
        raise KeyError(name)

    # -- reports --------------------------------------------------------------------------
    def subnets(self) -> list["Net"]:
        """Nets nested in this one's ops (loop bodies, decoder prologue and body, the
        patch map's filter and the grid readout's head)."""
        out: list[Net] = []
        for op in self.nodes:
            if isinstance(op, (Loop, PatchMap, GridReadout)):
                out.append(op.body)
            elif isinstance(op, Decode):
                out += [op.prologue, op.body]
        return out

    def all_ops(self) -> list[Op]:
        """Every op, nested nets included once (their weights are shared between trips)."""
        out: list[Op] = list(self.nodes)
        for sub in self.subnets():
            out += sub.all_ops()
        return out

    def affine_layers(self) -> list[Affine]:
        """Every affine op, loop and decoder bodies included once."""
        return [op for op in self.all_ops() if isinstance(op, Affine)]

    def attention_layers(self) -> list[Attention]:
        return [op for op in self.all_ops() if isinstance(op, Attention)]

    def depth(self) -> dict[str, int]:
        """Longest path in affine, ReLU, other activation, attention and product layers (a loop
        counts ``trips`` times, a decoder its prologue plus ``steps`` bodies)."""
        keys = ("affine", "relu", "activation", "attention", "mul")
        d: dict[str, dict[str, int]] = {p.name: dict.fromkeys(keys, 0) for p in self.inputs}
        for op in self.nodes:
            cur = {k: max((d[i][k] for i in op.inputs), default=0) for k in keys}
            if isinstance(op, Affine):
                cur["affine"] += 1
            elif isinstance(op, ReLU):
                cur["relu"] += 1
            elif isinstance(op, Activation):
                cur["activation"] += 1
            elif isinstance(op, Attention):
                cur["attention"] += 1
            elif isinstance(op, Mul):
                cur["mul"] += 1
            elif isinstance(op, Loop):
                inner = op.body.depth()
                for k in keys:
                    cur[k] += op.trips * inner[k]
            elif isinstance(op, (PatchMap, GridReadout)):
                inner = op.body.depth()
                for k in keys:
                    cur[k] += inner[k]
            elif isinstance(op, Decode):
                pro, body = op.prologue.depth(), op.body.depth()
                for k in keys:
                    cur[k] += pro[k] + op.steps * body[k]
            d[op.name] = cur
        return {k: max(d[o][k] for o in self.outputs) for k in keys}

    def info(self) -> dict:
        """Widths, depth, parameter counts, l1 norm, distinct weight values (every op's
        tensors: affine weights, attention Q/K/V and null key/value, embeddings, positional
        tables, decoder inputs, memory layers, params; nested nets counted once).

        ``params_dense`` counts every entry of every tensor.  ``params_nonzero`` counts the
        parameters of the emitted torch module (``sum(p.numel() for p in
        to_torch(net).parameters())``):

        * a fixed tensor (the construction's) counts its nonzero entries;
        * a trainable tensor counts in full, since a trained zero is still a free
          parameter: every stored entry of a sparse trainable affine weight (every entry
          when it stores none, :func:`tm2nn.emit.affine_form`), every entry of a
          trainable bias (``train_bias``), of a :class:`Param` value and of a trainable
          :class:`MemoryGrid` W;
        * a computed positional code (:class:`~tm2nn.nets.positions.BinaryPositions`)
          counts its placement's entries (one per bit), not the table it computes.
        """
        layers = self.affine_layers()
        values: list[np.ndarray] = []
        dense = nonzero = 0
        l1 = 0.0
        for op in self.all_ops():
            for name, t in op.tensors().items():
                free = _trainable_tensor(op, name)
                if isinstance(t, SparseMatrix):
                    full = t.shape[0] * t.shape[1]
                    dense += full
                    nonzero += (t.nnz if 0 < t.nnz < full else full) if free else t.nnz
                    l1 += t.l1()
                    values.append(np.unique(t.vals))  # each tensor's distinct values: few
                else:
                    a = np.asarray(t, dtype=np.float64).ravel()
                    dense += a.size
                    nonzero += a.size if free else int(np.count_nonzero(a))
                    l1 += float(np.abs(a).sum())
                    values.append(np.unique(a[a != 0]))
        allv = np.concatenate(values) if values else np.zeros(0)
        widths = [len(op.out) for op in layers]
        out = {
            "inputs": {p.name: len(p.space) for p in self.inputs},
            "outputs": {o: len(self.spaces[o]) for o in self.outputs},
            "affine_layers": len(layers),
            "depth": self.depth(),
            "max_width": max(widths, default=0),
            "widths": widths,
            "params_dense": dense,
            "params_nonzero": nonzero,
            "l1_norm": l1,
            "distinct_weight_values": int(np.unique(allv).size),
        }
        att = self.attention_layers()
        if att:
            out["attention_layers"] = len(att)
        acts: dict[str, int] = {}
        for op in self.all_ops():
            if isinstance(op, Activation):
                acts[op.fn] = acts.get(op.fn, 0) + 1
        if acts:
            out["activations"] = dict(sorted(acts.items()))
        return out


def _trainable_tensor(op: Op, name: str) -> bool:
    """Whether the construction trains tensor ``name`` of ``op`` (every entry is then a
    parameter, :meth:`Net.info`)."""
    if isinstance(op, Affine):
        return bool(op.trainable) and (name == "weight" or (name == "bias" and bool(op.train_bias)))
    if isinstance(op, Param):
        return True
    if isinstance(op, MemoryGrid):
        return bool(op.trainable) and name == "weight"  # its frame (``left``) is fixed
    return False
