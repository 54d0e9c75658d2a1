"""Binary positional encodings, computed instead of stored.

Wei, Chen & Ma §4.1 and (C.1): the position vector of time/cell ``n`` is ``Bin(n)``
on the ``pos1`` coordinates and zero elsewhere.  A table of those rows grows with the
number of steps T; :class:`BinaryPositions` describes the same table by its columns and
offset, so the emitters compute ``Bin(i + offset)`` from ``i`` (the ONNX model's size
then does not depend on T, only on the bit width).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class PositionsError(ValueError):
    """A malformed positional code (a bug in a backend)."""


@dataclass(frozen=True)
class BinaryPositions:
    """Row ``i`` (``0 <= i < length``) is ``Bin(i + offset)`` on ``columns`` (most
    significant bit first) of a ``width``-wide vector, zero elsewhere.  Behaves like the
    ``[length, width]`` float64 array it stands for under ``shape``, ``len`` and
    integer/slice indexing."""

    width: int
    columns: tuple[int, ...]
    offset: int
    length: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(int(c) for c in self.columns))
        bits = len(self.columns)
        if self.length < 0 or self.offset < 0:
            raise PositionsError("positions: negative length or offset")
        if len(set(self.columns)) != bits or any(not 0 <= c < self.width for c in self.columns):
            raise PositionsError(f"positions: columns must be distinct indices below {self.width}")
        if self.length and self.offset + self.length - 1 >= (1 << bits):
            raise PositionsError(f"positions: {self.offset + self.length - 1} does not fit in {bits} bits")

    @property
    def bits(self) -> int:
        return len(self.columns)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.length, self.width)

    @property
    def ndim(self) -> int:
        return 2

    def __len__(self) -> int:
        return self.length

    def placement(self) -> np.ndarray:
        """``[width, bits]``: column ``k`` puts bit ``k`` (MSB first) on its coordinate."""
        p = np.zeros((self.width, self.bits))
        p[list(self.columns), np.arange(self.bits)] = 1.0
        return p

    def powers(self) -> np.ndarray:
        """``2^(bits-1) .. 1``: bit k of n is ``(n // powers[k]) % 2``."""
        return np.array([1 << k for k in range(self.bits - 1, -1, -1)], dtype=np.int64)

    def rows(self, idx) -> np.ndarray:
        """Rows ``idx`` (an int array) as a ``[len(idx), width]`` float64 array."""
        n = np.asarray(idx, dtype=np.int64) + self.offset
        out = np.zeros((n.size, self.width))
        out[:, list(self.columns)] = (n.reshape(-1, 1) // self.powers()) % 2
        return out

    def dense(self) -> np.ndarray:
        return self.rows(np.arange(self.length))

    def __array__(self, dtype=None, copy=None):
        d = self.dense()
        return d if dtype is None else d.astype(dtype)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            i = int(key) + (self.length if key < 0 else 0)
            if not 0 <= i < self.length:
                raise IndexError(key)
            return self.rows([i])[0]
        if isinstance(key, slice):
            return self.rows(np.arange(self.length)[key])
        return self.dense()[key]

    def to_json(self) -> dict:
        return {"kind": "binary", "width": self.width, "columns": list(self.columns),
                "offset": self.offset, "length": self.length}


def as_positions(p) -> "np.ndarray | BinaryPositions":
    """A positional table as given: a :class:`BinaryPositions` stays, anything else
    becomes a float64 array."""
    return p if isinstance(p, BinaryPositions) else np.asarray(p, dtype=np.float64)
