"""The network IR: a small typed graph of labelled ops (ARCHITECTURE.md, "The network IR").

A :class:`Net` is SSA-like: its input ports and every op's output are named values;
ops are listed in an order where each reads only values defined before it.
Validation lives in ``__post_init__`` (once), and :meth:`Net.info` gives the size
report that ``tm2nn info`` prints next to each paper's bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tm2nn.nets.matrix import SparseMatrix
from tm2nn.nets.ops import Affine, Loop, NetIRError, Op, Port, ReLU
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
        for p in self.inputs:
            if p.name in spaces:
                raise NetIRError(f"net {self.name!r}: input {p.name!r} declared twice")
            spaces[p.name] = p.space
        for op in self.nodes:
            if op.name in spaces:
                raise NetIRError(f"net {self.name!r}: value {op.name!r} defined twice")
            missing = [i for i in op.inputs if i not in spaces]
            if missing:
                raise NetIRError(f"net {self.name!r}: {op.kind} {op.name!r} reads undefined {missing[0]!r}")
            spaces[op.name] = op.out_space([spaces[i] for i in op.inputs])
        for o in self.outputs:
            if o not in spaces:
                raise NetIRError(f"net {self.name!r}: output {o!r} is not defined")
        object.__setattr__(self, "spaces", spaces)

    spaces: dict[str, Space] = field(default=None, init=False, repr=False)  # type: ignore[assignment]

    def node(self, name: str) -> Op:
        for op in self.nodes:
            if op.name == name:
                return op
        raise KeyError(name)

    # -- reports --------------------------------------------------------------------------
    def affine_layers(self) -> list[Affine]:
        """Every affine op, loop bodies included once (their weights are shared)."""
        out: list[Affine] = []
        for op in self.nodes:
            if isinstance(op, Affine):
                out.append(op)
            elif isinstance(op, Loop):
                out.extend(op.body.affine_layers())
        return out

    def depth(self) -> dict[str, int]:
        """Longest path in affine layers and in ReLU layers (a loop counts ``trips`` times)."""
        d_aff: dict[str, int] = {p.name: 0 for p in self.inputs}
        d_relu: dict[str, int] = {p.name: 0 for p in self.inputs}
        for op in self.nodes:
            a = max((d_aff[i] for i in op.inputs), default=0)
            r = max((d_relu[i] for i in op.inputs), default=0)
            if isinstance(op, Affine):
                a += 1
            elif isinstance(op, ReLU):
                r += 1
            elif isinstance(op, Loop):
                inner = op.body.depth()
                a += op.trips * inner["affine"]
                r += op.trips * inner["relu"]
            d_aff[op.name], d_relu[op.name] = a, r
        return {"affine": max(d_aff[o] for o in self.outputs), "relu": max(d_relu[o] for o in self.outputs)}

    def info(self) -> dict:
        """Widths, depth, parameter counts, l1 norm, distinct weight values."""
        layers = self.affine_layers()
        values: list[np.ndarray] = []
        dense = nonzero = 0
        l1 = 0.0
        for op in layers:
            w: SparseMatrix = op.weight
            dense += w.shape[0] * w.shape[1] + w.shape[0]
            nonzero += w.nnz + int(np.count_nonzero(op.bias))
            l1 += w.l1() + float(np.abs(op.bias).sum())
            values += [w.vals, op.bias[op.bias != 0]]
        allv = np.concatenate(values) if values else np.zeros(0)
        widths = [len(op.out) for op in layers]
        return {
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
