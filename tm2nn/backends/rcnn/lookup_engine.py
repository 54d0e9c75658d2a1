"""A fast exact engine for the RCNN's filter loop: the network's own filter, memoised.

Goel et al.'s RCNN (Definition 5) applies one 3×3 filter ``f_Conv2D`` at every cell,
``L`` times.  The emitted module evaluates the 5-layer filter net (width ``d_rc``, about
``80s``) on every cell at every trip, although a grid holds few distinct values (B.1.1
cells: ``O(s)`` of them, docs/rcnn.md "Reachability") and the filter's first layer ``V1``
reads only 5 of the 9 patch cells.  So the filter's output is a function of a short key,
and after the first trips almost every key has been seen.

:class:`LookupEngine` keeps each grid as small integers (an id per distinct float value),
builds every cell's key from the ids of the cells ``V1`` reads, and looks the key up in a
table of the filter's outputs.  A key not in the table is evaluated **by the emitted
filter net itself** (the :class:`~tm2nn.emit.torch_grid.PatchMapModule`'s body, on the
patch with the unread cells set to the padding value), and its output value is stored.
So every output is the value the network computes for that patch: the engine computes
the network's function, not a re-implementation of B.2.  The unread cells cannot change
the output because ``V1``'s columns for them are zero (checked when the engine is built)
and every cell value is finite (checked: a non-finite value, or more distinct values
than :data:`MAX_VALUES`, raises :class:`Degenerate`; callers fall back to the module).

Like the module's ``Loop(until_fixed=True)`` it stops at the first trip that leaves
every grid unchanged: the filter is a function, so later trips would too.
``tests/backends/rcnn/test_rcnn_learner_scale.py`` checks it against the module's grids, bit for bit.
"""

from __future__ import annotations

import numpy as np
import torch

from tm2nn.emit.torch_net import _net_fm
from tm2nn.nets import Affine
from tm2nn.nets.grid import PATCH_OFFSETS

#: More distinct cell values than this: not a B.1.1 code (e.g. a random filter's grid).
MAX_VALUES = 4096
_BITS = 12  # bits per id in a key (MAX_VALUES = 2**12)


class Degenerate(Exception):
    """The grid's values are not a small finite set: use the module instead."""


class LookupEngine:
    """The filter loop of an emitted RCNN module (a :class:`~tm2nn.emit.torch_grid.PatchMapModule`
    ``patch_map`` inside a loop of ``trips``), memoised (module doc)."""

    def __init__(self, patch_map, trips: int, dtype: torch.dtype) -> None:
        self.pm = patch_map
        self.trips = int(trips)
        self.dtype = dtype
        self.pad = float(patch_map.pad)
        first = patch_map.ir_op.body.nodes[0]
        if not isinstance(first, Affine):
            raise Degenerate("the filter does not start with an affine map")
        read = np.unique(first.weight.cols[first.weight.vals != 0])
        if read.size * _BITS > 63:
            raise Degenerate("the filter reads too many cells for a 64-bit key")
        self.read = [int(k) for k in read]  # positions of PATCH_OFFSETS the filter reads
        self.values: list[float] = [self.pad]
        self.ids: dict[float, int] = {self.pad: 0}
        self.keys = np.zeros(0, dtype=np.int64)       # sorted
        self.out = np.zeros(0, dtype=np.int64)        # output id per key
        self.evaluated = 0                            # patches the network evaluated

    # -- values <-> ids ---------------------------------------------------------------------
    def _id_of(self, v: float) -> int:
        i = self.ids.get(v)
        if i is None:
            if not np.isfinite(v):
                raise Degenerate(f"a non-finite cell value ({v})")
            if len(self.values) >= MAX_VALUES:
                raise Degenerate(f"more than {MAX_VALUES} distinct cell values")
            i = self.ids[v] = len(self.values)
            self.values.append(v)
        return i

    def encode(self, grids: np.ndarray) -> np.ndarray:
        """Float grids ``[B, H, W]`` -> id grids (int64)."""
        uniq, inv = np.unique(grids, return_inverse=True)
        table = np.array([self._id_of(float(v)) for v in uniq], dtype=np.int64)
        return table[inv].reshape(grids.shape)

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """Id grids -> the float values (float64, exactly the network's)."""
        return np.asarray(self.values, dtype=np.float64)[ids]

    # -- one trip -----------------------------------------------------------------------------
    def _keys(self, ids: np.ndarray) -> np.ndarray:
        b, h, w = ids.shape
        p = np.pad(ids, ((0, 0), (1, 1), (1, 1)), constant_values=0)  # id 0 is the padding
        key = np.zeros((b, h, w), dtype=np.int64)
        for k in self.read:
            di, dj = PATCH_OFFSETS[k]
            key = (key << _BITS) | p[:, 1 + di:1 + di + h, 1 + dj:1 + dj + w]
        return key

    def _learn(self, new_keys: np.ndarray) -> None:
        """Evaluate the network on the patches of ``new_keys`` and add them to the table."""
        n = new_keys.size
        patch = np.full((9, n), self.pad, dtype=np.float64)
        vals = np.asarray(self.values, dtype=np.float64)
        shift = _BITS * (len(self.read) - 1)
        for k in self.read:
            patch[k] = vals[(new_keys >> shift) & (MAX_VALUES - 1)]
            shift -= _BITS
        device = next((t.device for t in (*self.pm.parameters(), *self.pm.buffers())), None)  # the filter's
        with torch.no_grad():
            y = _net_fm(self.pm.body, (torch.as_tensor(patch, dtype=self.dtype, device=device),))[0]
        outs = np.array([self._id_of(float(v)) for v in y.reshape(-1).to(torch.float64).cpu().numpy()],
                        dtype=np.int64)
        keys = np.concatenate([self.keys, new_keys])
        order = np.argsort(keys, kind="stable")
        self.keys, self.out = keys[order], np.concatenate([self.out, outs])[order]
        self.evaluated += n

    def _lookup(self, flat: np.ndarray) -> np.ndarray:
        """The output id of every key in ``flat`` (new keys evaluated by the network)."""
        pos = np.searchsorted(self.keys, flat)
        hit = pos < self.keys.size
        hit[hit] = self.keys[pos[hit]] == flat[hit]
        if not hit.all():
            self._learn(np.unique(flat[~hit]))
            pos = np.searchsorted(self.keys, flat)
        return self.out[pos]

    def step(self, ids: np.ndarray) -> np.ndarray:
        """One application of the filter at every cell of every grid."""
        return self._lookup(self._keys(ids).reshape(-1)).reshape(ids.shape)

    def run(self, grids: np.ndarray, progress=None, incremental: bool = True) -> tuple[np.ndarray, int]:
        """``(last grids, trips run)``: ``trips`` filter steps from float ``grids``
        ``[B, H, W]`` (fewer when every grid reached a fixed point: the rest would repeat
        it).  ``progress(i, trips)`` about 100 times.  ``incremental`` (the default)
        re-evaluates after the first trip only the cells whose read cells changed in the
        trip before (:meth:`_run_incremental`); ``False`` applies the filter at every
        cell of every trip (:meth:`step`).  Both give the same grids, bit for bit."""
        ids = self.encode(np.asarray(grids, dtype=np.float64))
        if incremental:
            return self._run_incremental(ids, progress)
        every = max(1, self.trips // 100)
        for i in range(1, self.trips + 1):
            nxt = self.step(ids)
            fixed = np.array_equal(nxt, ids)
            ids = nxt
            if progress is not None and (fixed or i % every == 0 or i == self.trips):
                progress(self.trips if fixed else i, self.trips)
            if fixed:
                return self.decode(ids), i
        return self.decode(ids), self.trips

    def _run_incremental(self, ids: np.ndarray, progress=None) -> tuple[np.ndarray, int]:
        """:meth:`run` touching only the cells that can change.  Trip ``i + 1`` writes
        ``T[key(c, grid_i)]`` at cell ``c`` and trip ``i`` wrote ``T[key(c, grid_{i−1})]``,
        so where no cell the filter reads (``self.read``) changed in trip ``i`` the key and
        the output are the same: only the cells within a read offset of a changed cell
        are looked up.  A learner machine changes a few cells a step, so a trip costs
        ``O(batch)`` lookups instead of ``O(batch · H · W)``.  The grids live in one
        padded flat array (the padding, id 0, is never written)."""
        b, h, w = ids.shape
        padded = np.zeros((b, h + 2, w + 2), dtype=np.int64)
        padded[:, 1:-1, 1:-1] = ids
        flat = padded.reshape(-1)
        inside = np.zeros(padded.shape, dtype=bool)
        inside[:, 1:-1, 1:-1] = True
        inside = inside.reshape(-1)
        deltas = np.array([PATCH_OFFSETS[k][0] * (w + 2) + PATCH_OFFSETS[k][1] for k in self.read], dtype=np.int64)
        cells = np.flatnonzero(inside)  # the first trip: every cell
        every = max(1, self.trips // 100)
        for i in range(1, self.trips + 1):
            key = np.zeros(cells.size, dtype=np.int64)
            for d in deltas:  # the same key layout as _keys
                key = (key << _BITS) | flat[cells + d]
            new = self._lookup(key)
            moved = new != flat[cells]
            changed = cells[moved]
            flat[changed] = new[moved]
            fixed = changed.size == 0
            if progress is not None and (fixed or i % every == 0 or i == self.trips):
                progress(self.trips if fixed else i, self.trips)
            if fixed:
                return self.decode(padded[:, 1:-1, 1:-1]), i
            near = (changed[None, :] - deltas[:, None]).reshape(-1)  # cells whose patch reads a changed one
            cells = np.unique(near[inside[near]])
        return self.decode(padded[:, 1:-1, 1:-1]), self.trips
