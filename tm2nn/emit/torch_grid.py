"""Torch modules for the grid ops (:mod:`tm2nn.nets.grid`).

A ``grid`` value is ``[batch, height, width]`` (the same inside the net and outside);
``grids`` is ``[steps + 1, batch, height, width]`` inside and batch-major outside.  The
filter of a :class:`~tm2nn.nets.PatchMap` runs on all patches at once: the nine shifted
views of the padded grid are stacked into one feature-major ``[9, batch·height·width]``
matrix and the body net runs on it, so there is no Python loop over cells.  The modules follow
:mod:`tm2nn.emit.torch_net`'s conventions (Parameters, caches, hooks, ``to_op``).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from tm2nn.emit import BULK_BATCH
from tm2nn.emit.torch_net import NetModule, OpModule, _net_fm, torch_emitter
from tm2nn.nets.grid import PATCH_OFFSETS, GridReadout, MemoryGrid, PatchMap


def patches(x: torch.Tensor, pad: float) -> torch.Tensor:
    """``[B, H, W]`` -> ``[9, B·H·W]``: row k is the (di, dj) = PATCH_OFFSETS[k]
    neighbour of every cell, ``pad`` outside the grid."""
    b, h, w = x.shape
    xp = F.pad(x, (1, 1, 1, 1), value=pad)
    return torch.stack([xp[:, 1 + di: 1 + di + h, 1 + dj: 1 + dj + w] for di, dj in PATCH_OFFSETS]).reshape(9, -1)


@torch_emitter(PatchMap)
class PatchMapModule(OpModule):
    """Goel et al.'s filter applied at every cell (Def. 5)."""

    def __init__(self, op: PatchMap, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.pad = float(op.pad)
        self.body = NetModule(op.body, dtype)

    def extra_repr(self) -> str:
        return self._repr(f"3x3, pad={self.pad:g}")

    def _nested(self) -> dict:
        return {"body": self.body.to_net()}

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        y = _net_fm(self.body, (patches(x, self.pad),))[0]                   # [1, B·H·W]
        return y.reshape(x.shape)


@torch_emitter(MemoryGrid)
class MemoryGridModule(OpModule):
    """``[W diag(z)  1]``; ``W`` is a trainable Parameter when the construction trains it
    (every entry free), else a fixed one holding its nonzero entries
    (:mod:`tm2nn.emit.torch_net`'s layout)."""

    def __init__(self, op: MemoryGrid, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.ones = int(op.ones)
        self.trainable = bool(op.trainable)
        self.d_mem, self.d_in = op.weight.shape
        self.frame = op.frame
        self._add_tensor("weight", op.weight, dtype, trainable=self.trainable)
        if op.left is not None:
            self._add_tensor("left", op.left, dtype)

    def extra_repr(self) -> str:
        s = f"d_mem={self.d_mem}, d_in={self.d_in}, ones={self.ones}" + (f", frame={self.frame}" if self.frame else "")
        return self._repr(s + (", trainable=True" if self.trainable else ""))

    def _build(self):
        return None if self.trainable else self.dense_tensor("weight")

    def fm(self, z: torch.Tensor) -> torch.Tensor:
        """Feature-major ``z`` ``[d_in, B]`` -> ``[B, d_mem, d_in + ones]``."""
        w = self._parameters["weight"] if self.trainable else self._runtime()
        g = w.unsqueeze(0) * z.t().unsqueeze(1)
        if self.frame:
            g = torch.cat([self.dense_tensor("left").unsqueeze(0).expand(g.shape[0], -1, -1).to(g.dtype), g], 2)
        if self.ones:
            g = torch.cat([g, g.new_ones(g.shape[0], g.shape[1], self.ones)], 2)
        return g


@torch_emitter(GridReadout)
class GridReadoutModule(OpModule):
    """``Σ body(cell)`` over one column, ``width`` columns from ``start``, or every cell."""

    def __init__(self, op: GridReadout, dtype: torch.dtype = torch.float32, batch: int = BULK_BATCH) -> None:
        super().__init__(op)
        self.column = op.column
        self.width = op.width
        self.start = int(op.start)
        self.body = NetModule(op.body, dtype)

    def extra_repr(self) -> str:
        return self._repr(f"column={self.column}" if self.width is None
                          else f"width={self.width}" + (f", start={self.start}" if self.start else ""))

    def _nested(self) -> dict:
        return {"body": self.body.to_net()}

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, W]`` -> feature-major ``[k, B]``."""
        if self.column is not None:
            cells = x[:, :, self.column]
        elif self.width is not None:
            cells = x[:, :, self.start:self.start + self.width].reshape(x.shape[0], -1)
        else:
            cells = x.reshape(x.shape[0], -1)
        b, n = cells.shape
        y = _net_fm(self.body, (cells.reshape(1, -1),))[0]                 # [k, B·n]
        return y.reshape(y.shape[0], b, n).sum(2)
