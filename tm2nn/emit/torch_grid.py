"""Torch modules for the grid ops (:mod:`tm2nn.nets.grid`).

A ``grid`` value is ``[batch, height, width]`` (the same inside the net and outside);
``grids`` is ``[steps + 1, batch, height, width]`` inside and batch-major outside.  The
filter of a :class:`~tm2nn.nets.PatchMap` runs on all patches at once: the nine shifted
views of the padded grid are stacked into one feature-major ``[9, batch·height·width]``
matrix and the body net runs on it, so there is no Python loop over cells.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tm2nn.nets.grid import PATCH_OFFSETS, GridReadout, MemoryGrid, PatchMap


def patches(x: torch.Tensor, pad: float) -> torch.Tensor:
    """``[B, H, W]`` -> ``[9, B·H·W]``: row k is the (di, dj) = PATCH_OFFSETS[k]
    neighbour of every cell, ``pad`` outside the grid."""
    b, h, w = x.shape
    xp = F.pad(x, (1, 1, 1, 1), value=pad)
    return torch.stack([xp[:, 1 + di: 1 + di + h, 1 + dj: 1 + dj + w] for di, dj in PATCH_OFFSETS]).reshape(9, -1)


class PatchMapModule(nn.Module):
    """Goel et al.'s filter applied at every cell (Def. 5)."""

    def __init__(self, op: PatchMap, dtype: torch.dtype) -> None:
        super().__init__()
        from tm2nn.emit.torch_emit import NetModule

        self.op_name = op.name
        self.cite = op.cite
        self.pad = float(op.pad)
        self.body = NetModule(op.body, dtype)

    def extra_repr(self) -> str:
        return f"3x3, pad={self.pad:g}"

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body._run_fm((patches(x, self.pad),))[0]                    # [1, B·H·W]
        return y.reshape(x.shape)

    forward = fm


class MemoryGridModule(nn.Module):
    """``[W diag(z)  1]``; ``W`` is a Parameter when the construction trains it."""

    def __init__(self, op: MemoryGrid, dtype: torch.dtype) -> None:
        super().__init__()
        self.op_name = op.name
        self.cite = op.cite
        self.ones = int(op.ones)
        w = torch.from_numpy(np.ascontiguousarray(op.weight)).to(dtype)
        if op.trainable:
            self.weight = nn.Parameter(w)
        else:
            self.register_buffer("weight", w)

    def extra_repr(self) -> str:
        d_mem, d_in = self.weight.shape
        return f"d_mem={d_mem}, d_in={d_in}, ones={self.ones}"

    def fm(self, z: torch.Tensor) -> torch.Tensor:
        """Feature-major ``z`` ``[d_in, B]`` -> ``[B, d_mem, d_in + ones]``."""
        g = self.weight.unsqueeze(0) * z.t().unsqueeze(1)
        if self.ones:
            g = torch.cat([g, g.new_ones(g.shape[0], g.shape[1], self.ones)], 2)
        return g

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.fm(z.t())


class GridReadoutModule(nn.Module):
    """``Σ body(cell)`` over one column, the first ``width`` columns, or every cell."""

    def __init__(self, op: GridReadout, dtype: torch.dtype) -> None:
        super().__init__()
        from tm2nn.emit.torch_emit import NetModule

        self.op_name = op.name
        self.cite = op.cite
        self.column = op.column
        self.width = op.width
        self.body = NetModule(op.body, dtype)

    def extra_repr(self) -> str:
        return f"column={self.column}" if self.width is None else f"width={self.width}"

    def fm(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, W]`` -> feature-major ``[k, B]``."""
        if self.column is not None:
            cells = x[:, :, self.column]
        elif self.width is not None:
            cells = x[:, :, :self.width].reshape(x.shape[0], -1)
        else:
            cells = x.reshape(x.shape[0], -1)
        b, n = cells.shape
        y = self.body._run_fm((cells.reshape(1, -1),))[0]                  # [k, B·n]
        return y.reshape(y.shape[0], b, n).sum(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fm(x).t()
