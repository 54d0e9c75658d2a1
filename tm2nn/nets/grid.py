"""Grid ops of the network IR: the pieces of Goel, Kakade, Kalai & Zhang's RCNN
(Definition 5): the memory layer, the shared 3×3 filter applied at every cell, and the
pixel-wise head summed over the grid.

A ``grid`` value is one number per cell of a ``[height, width]`` grid per batch row
(its space has one label, the cell's meaning); height and width are the data's, not the
net's.  ``grids`` is a sequence of grids (a :class:`~tm2nn.nets.Loop` with ``scan``:
the state after every trip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from tm2nn.nets.ops import NetIRError, Op
from tm2nn.nets.space import Space

if TYPE_CHECKING:
    from tm2nn.nets.net import Net

#: The 3×3 window, row-major: (row offset, column offset) of patch coordinate k.
PATCH_OFFSETS = tuple((di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1))


def patch_space(prefix: str = "patch") -> Space:
    """The body input of a :class:`PatchMap`: ``patch:(di,dj)`` in row-major order."""
    return Space(tuple(f"{prefix}:({di},{dj})" for di, dj in PATCH_OFFSETS))


def _check_cell(space: Space, what: str) -> None:
    if len(space) != 1:
        raise NetIRError(f"{what}: a grid holds one number per cell, got a space of {len(space)} dims")


@dataclass(frozen=True, eq=False)
class PatchMap(Op):
    """``y[i, j] = body(vec(x[i-1..i+1, j-1..j+1]))`` at every cell, with cells outside
    the grid read as ``pad`` (Goel et al., Def. 5: f_Conv2D applied on the 3×3 grid
    centred at each coordinate, padding p).  ``body`` maps a 9-dim vector (see
    :func:`patch_space`) to the cell's 1-dim space; its weights are shared by all cells."""

    body: "Net" = None  # type: ignore[assignment]
    pad: float = 0.0
    cite: str = ""
    kind: ClassVar[str] = "patch_map"
    out_kind: ClassVar[str] = "grid"

    def in_kinds(self) -> tuple[str, ...]:
        return ("grid",)

    def out_space(self, ins: list[Space]) -> Space:
        _check_cell(ins[0], f"patch map {self.name!r}")
        b = self.body
        if len(b.inputs) != 1 or len(b.outputs) != 1 or b.inputs[0].kind != "vector":
            raise NetIRError(f"patch map {self.name!r}: the body maps one vector to one vector")
        if len(b.inputs[0].space) != 9:
            raise NetIRError(f"patch map {self.name!r}: the body reads a 3x3 patch (9 dims)")
        if b.spaces[b.outputs[0]] != ins[0]:
            raise NetIRError(f"patch map {self.name!r}: the body must output the grid's cell space")
        if not np.isfinite(self.pad):
            raise NetIRError(f"patch map {self.name!r}: the padding must be a finite number")
        return ins[0]


@dataclass(frozen=True, eq=False)
class MemoryGrid(Op):
    """Goel et al.'s memory layer, ``f_mem(z) = [W diag(z)  1_{d_mem × ones}]``: the
    vector ``z`` (``d_in``) becomes a ``d_mem × (d_in + ones)`` grid whose cell
    ``(a, b)`` is ``W[a, b] z[b]`` for ``b < d_in`` and 1 after.  ``W`` is the layer
    Algorithm 1 trains (``trainable``: a torch Parameter).  ``left`` (``[d_mem, k]``
    constants, or None) is written left of ``W diag(z)``: the learner's frame of edge
    markers (docs/rcnn.md "The frame"), fixed like the ones."""

    weight: np.ndarray = None  # type: ignore[assignment]
    ones: int = 0
    left: np.ndarray | None = None
    out: Space = None  # type: ignore[assignment]
    trainable: bool = True
    cite: str = ""
    kind: ClassVar[str] = "memory_grid"
    out_kind: ClassVar[str] = "grid"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "weight", np.asarray(self.weight, dtype=np.float64))
        if self.left is not None:
            object.__setattr__(self, "left", np.asarray(self.left, dtype=np.float64))

    @property
    def frame(self) -> int:
        """Columns of constants left of ``W diag(z)``."""
        return 0 if self.left is None else self.left.shape[1]

    @property
    def shape(self) -> tuple[int, int]:
        """The grid's (height, width)."""
        return self.weight.shape[0], self.frame + self.weight.shape[1] + self.ones

    def out_space(self, ins: list[Space]) -> Space:
        _check_cell(self.out, f"memory grid {self.name!r}")
        if self.weight.ndim != 2 or self.weight.shape[1] != len(ins[0]):
            raise NetIRError(f"memory grid {self.name!r}: W must be [d_mem, {len(ins[0])}]")
        if self.ones < 0:
            raise NetIRError(f"memory grid {self.name!r}: negative number of ones columns")
        if self.left is not None and (self.left.ndim != 2 or self.left.shape[0] != self.weight.shape[0]
                                      or not np.all(np.isfinite(self.left))):
            raise NetIRError(f"memory grid {self.name!r}: the left columns must be finite, "
                             f"[{self.weight.shape[0]}, k]")
        return self.out

    def tensors(self):
        return {"weight": self.weight} if self.left is None else {"weight": self.weight, "left": self.left}


@dataclass(frozen=True, eq=False)
class GridReadout(Op):
    """``Σ_cells body(x[cell])`` over column ``column`` of the grid, or over the
    ``width`` columns from ``start`` (the input region of Goel et al.'s learner, right of
    its frame, see docs/rcnn.md "Learner mode"), or every cell when both are None: Goel
    et al.'s ``sum(f_head(·_{:, d_in}))``, with ``body`` the pixel-wise head (a 1-dim
    vector to the output space)."""

    body: "Net" = None  # type: ignore[assignment]
    column: int | None = None
    width: int | None = None
    start: int = 0
    cite: str = ""
    kind: ClassVar[str] = "grid_readout"

    def in_kinds(self) -> tuple[str, ...]:
        return ("grid",)

    def out_space(self, ins: list[Space]) -> Space:
        _check_cell(ins[0], f"grid readout {self.name!r}")
        b = self.body
        if len(b.inputs) != 1 or len(b.outputs) != 1 or b.inputs[0].kind != "vector":
            raise NetIRError(f"grid readout {self.name!r}: the body maps one vector to one vector")
        if b.inputs[0].space != ins[0]:
            raise NetIRError(f"grid readout {self.name!r}: the body must read the grid's cell space")
        if self.column is not None and self.width is not None:
            raise NetIRError(f"grid readout {self.name!r}: give a column or a width, not both")
        if self.width is not None and self.width < 1:
            raise NetIRError(f"grid readout {self.name!r}: the width must be >= 1")
        if self.start < 0 or (self.start and self.width is None):
            raise NetIRError(f"grid readout {self.name!r}: a start column (>= 0) goes with a width")
        return b.spaces[b.outputs[0]]
