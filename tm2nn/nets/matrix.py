"""Sparse weight matrices (COO), the storage of every affine map in the network IR.

The constructions are extremely sparse (a gate reads two coordinates), and the
large circuits are thousands of units wide, so dense storage would be quadratic.
Values are float64 exactly as the paper gives them; the emitters choose the
runtime form (a gather of a few columns per row, or a dense matmul).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True, eq=False)
class SparseMatrix:
    shape: tuple[int, int]
    rows: np.ndarray  # int64 (nnz,)
    cols: np.ndarray  # int64 (nnz,)
    vals: np.ndarray  # float64 (nnz,)

    def __post_init__(self) -> None:
        r = np.asarray(self.rows, dtype=np.int64)
        c = np.asarray(self.cols, dtype=np.int64)
        v = np.asarray(self.vals, dtype=np.float64)
        if not (r.shape == c.shape == v.shape and r.ndim == 1):
            raise ValueError("rows, cols and vals must be 1-D arrays of one length")
        n_out, n_in = self.shape
        if r.size and (r.min() < 0 or r.max() >= n_out or c.min() < 0 or c.max() >= n_in):
            raise ValueError(f"an entry lies outside the {n_out}x{n_in} matrix")
        keep = v != 0
        r, c, v = r[keep], c[keep], v[keep]
        if r.size > 1:
            same_row = r[1:] == r[:-1]
            if not np.all((r[1:] > r[:-1]) | (same_row & (c[1:] > c[:-1]))):  # not already in order
                order = np.lexsort((c, r))
                r, c, v = r[order], c[order], v[order]
                if np.any((r[1:] == r[:-1]) & (c[1:] == c[:-1])):
                    raise ValueError("duplicate (row, col) entry")
        object.__setattr__(self, "rows", r)
        object.__setattr__(self, "cols", c)
        object.__setattr__(self, "vals", v)
        object.__setattr__(self, "shape", (int(n_out), int(n_in)))

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_entries(cls, shape, entries) -> "SparseMatrix":
        """From an iterable of (row, col, value)."""
        ent = list(entries)
        if not ent:
            return cls(shape, np.zeros(0), np.zeros(0), np.zeros(0))
        r, c, v = zip(*ent)
        return cls(shape, np.array(r), np.array(c), np.array(v, dtype=np.float64))

    @classmethod
    def from_dense(cls, dense) -> "SparseMatrix":
        d = np.asarray(dense, dtype=np.float64)
        r, c = np.nonzero(d)
        return cls(d.shape, r, c, d[r, c])

    @classmethod
    def diagonal(cls, values) -> "SparseMatrix":
        v = np.asarray(values, dtype=np.float64)
        i = np.arange(v.size)
        return cls((v.size, v.size), i, i, v)

    # -- views ----------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return int(self.vals.size)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, dtype=np.float64)
        out[self.rows, self.cols] = self.vals
        return out

    @cached_property
    def max_row_nnz(self) -> int:
        if self.nnz == 0:
            return 0
        return int(np.bincount(self.rows, minlength=self.shape[0]).max())

    def ell(self) -> tuple[np.ndarray, np.ndarray]:
        """Padded per-row form: (cols, vals), each (n_out, k) with k = max_row_nnz.

        Row i computes sum_j vals[i, j] * x[cols[i, j]]; padding has value 0, column 0.
        """
        n_out = self.shape[0]
        k = max(1, self.max_row_nnz)
        cols = np.zeros((n_out, k), dtype=np.int64)
        vals = np.zeros((n_out, k), dtype=np.float64)
        if self.nnz:
            slot = self.ell_slots()
            cols[self.rows, slot] = self.cols
            vals[self.rows, slot] = self.vals
        return cols, vals

    def ell_slots(self) -> np.ndarray:
        """Each stored entry's column in :meth:`ell`'s padded form: its rank within its row
        (the entries are stored in row-major order)."""
        counts = np.bincount(self.rows, minlength=self.shape[0])
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return np.arange(self.nnz) - starts[self.rows]

    @property
    def is_diagonal(self) -> bool:
        return self.shape[0] == self.shape[1] and bool(np.all(self.rows == self.cols))

    def l1(self) -> float:
        return float(np.abs(self.vals).sum())
