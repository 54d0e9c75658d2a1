"""Operations of the network IR.  Each op names its output value (``name``) and the
values it reads (``inputs``); ``out_space`` validates the input spaces and returns
the output's labelled space.  Later constructions add ops here (attention,
patch-MLPs, stop-gradient) and register them with both emitters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from tm2nn.nets.matrix import SparseMatrix
from tm2nn.nets.space import Space

if TYPE_CHECKING:
    from tm2nn.nets.net import Net


class NetIRError(ValueError):
    """A malformed network (a bug in a backend, not a user error)."""


@dataclass(frozen=True, eq=False)
class Op:
    name: str
    inputs: tuple[str, ...]
    kind: ClassVar[str] = "op"
    arity: ClassVar[int | None] = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if self.arity is not None and len(self.inputs) != self.arity:
            raise NetIRError(f"{self.kind} {self.name!r} takes {self.arity} input(s), got {len(self.inputs)}")

    def out_space(self, ins: list[Space]) -> Space:
        """Validate the input spaces and return the output's; every concrete op overrides this."""
        raise NetIRError(f"op kind {self.kind!r} ({type(self).__name__}) does not define its output space")

    def tensors(self) -> dict[str, np.ndarray | SparseMatrix]:
        """The op's weights, by name (for size reports, pictures and the emitters)."""
        return {}


@dataclass(frozen=True, eq=False)
class Affine(Op):
    """``y = W x + b``.  ``trainable`` marks weights a construction trains (emitted as
    torch Parameters); everything else is a buffer."""

    weight: SparseMatrix = None  # type: ignore[assignment]
    bias: np.ndarray = None  # type: ignore[assignment]
    out: Space = None  # type: ignore[assignment]
    trainable: bool = False
    cite: str = ""
    kind: ClassVar[str] = "affine"

    def __post_init__(self) -> None:
        super().__post_init__()
        b = np.zeros(len(self.out)) if self.bias is None else np.asarray(self.bias, dtype=np.float64)
        object.__setattr__(self, "bias", b)

    def out_space(self, ins: list[Space]) -> Space:
        n_out, n_in = self.weight.shape
        if n_in != len(ins[0]):
            raise NetIRError(f"affine {self.name!r}: weight has {n_in} columns, input has {len(ins[0])} dims")
        if n_out != len(self.out) or self.bias.shape != (n_out,):
            raise NetIRError(f"affine {self.name!r}: weight rows / bias / output labels disagree")
        return self.out

    def tensors(self):
        return {"weight": self.weight, "bias": self.bias}


@dataclass(frozen=True, eq=False)
class ReLU(Op):
    """Elementwise max(0, x); the output keeps the input's labels."""

    kind: ClassVar[str] = "relu"

    def out_space(self, ins: list[Space]) -> Space:
        return ins[0]


@dataclass(frozen=True, eq=False)
class Concat(Op):
    kind: ClassVar[str] = "concat"
    arity: ClassVar[int | None] = None

    def out_space(self, ins: list[Space]) -> Space:
        if not ins:
            raise NetIRError(f"concat {self.name!r} has no inputs")
        return Space.concat(*ins)


@dataclass(frozen=True, eq=False)
class Slice(Op):
    """Select dimensions by index (any order, no repeats)."""

    indices: tuple[int, ...] = ()
    kind: ClassVar[str] = "slice"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "indices", tuple(int(i) for i in self.indices))

    def out_space(self, ins: list[Space]) -> Space:
        n = len(ins[0])
        if any(not 0 <= i < n for i in self.indices):
            raise NetIRError(f"slice {self.name!r}: index out of range for {n} dims")
        return Space(tuple(ins[0].labels[i] for i in self.indices))


@dataclass(frozen=True, eq=False)
class Loop(Op):
    """Apply ``body`` (one input, one output, same space) ``trips`` times; the weights
    are shared between iterations.  Emitted as a Python loop in torch and an ONNX
    ``Loop``, so the model does not grow with ``trips``."""

    body: "Net" = None  # type: ignore[assignment]
    trips: int = 1
    kind: ClassVar[str] = "loop"

    def out_space(self, ins: list[Space]) -> Space:
        b = self.body
        if len(b.inputs) != 1 or len(b.outputs) != 1:
            raise NetIRError(f"loop {self.name!r}: the body must have one input and one output")
        if b.inputs[0].space != ins[0] or b.spaces[b.outputs[0]] != ins[0]:
            raise NetIRError(f"loop {self.name!r}: body input, body output and loop input spaces differ")
        if self.trips < 0:
            raise NetIRError(f"loop {self.name!r}: negative trip count")
        return ins[0]


@dataclass(frozen=True)
class Port:
    name: str
    space: Space
    meta: dict = field(default_factory=dict, compare=False)
