"""The fused grid engine's kernels (numba): the RCNN filter of a compiled network, its
five affine maps and two ReLUs evaluated on a tile of cells in one loop nest, and the
filter loop over a batch of grids.

A filter is a chain of layers built by :mod:`.grid_engine` from the network IR's ``Affine``
ops (Goel, Kakade, Kalai & Zhang, Def. 5: ``f_Conv2D = V5 σ(V4 V3 σ(V2 V1 vec(z)))``):
``meta`` holds one row per layer (``M_*`` below), the weights are CSR rows in the pools
``indptr``, ``cols``, ``vals`` (the model's dtype) and ``bias``.  Each layer's value is a
``[width, tile]`` block, cells along the fast axis, so one row of a layer is a short
vector loop over the tile and the tile's hidden values stay in cache through all five
layers (the torch and onnxruntime paths stream a ``[width, cells]`` matrix per layer).

The sums (docs/rcnn.md, "The fused engine"): each row is ``w_0 x_{c_0}``, then ``+ w_k
x_{c_k}`` in increasing column order, then ``+ b``, each operation rounded in the
model's dtype (no fused multiply-add: numba does not contract without ``fastmath``, and
the compiled kernels hold none), then ``max(·, 0)`` where a ReLU follows.  A cell's
operations do not depend on its tile, its lane in the tile or its thread, so the filter
is a function of the patch cells it reads, bit for bit: that is what makes the
incremental trips exact.

Every index is unsigned (``uint64``): numba checks a signed index for wrap-around.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# meta columns (one row per layer): rows, offset into indptr, offset into bias, relu after
M_ROWS, M_PTR, M_BIAS, M_RELU = 0, 1, 2, 3
M_WIDTH = 4

_0, _1, _2 = np.uint64(0), np.uint64(1), np.uint64(2)


@njit(cache=True)
def filter_tile(grid, qs, q0, n, pad, meta, indptr, cols, vals, bias, a, b, out):
    """``out[t] = f(patch of cell qs[q0 + t])`` for ``t < n`` (``n`` at most the tile width
    ``a.shape[1]``), the cells flat indices ``i·W + j`` of ``grid`` ``[H, W]``, ``pad``
    outside it.  ``a`` and ``b`` are scratch blocks of at least the widest layer's rows."""
    h, w = np.uint64(grid.shape[0]), np.uint64(grid.shape[1])
    n = np.uint64(n)
    for t in range(n):  # the 3x3 patch, row-major (tm2nn.nets.grid.PATCH_OFFSETS)
        q = np.uint64(qs[q0 + t])
        i, j = q // w, q % w
        k = _0
        for ii in range(i, i + np.uint64(3)):          # padded row ii = i - 1 + di
            for jj in range(j, j + np.uint64(3)):
                if ii >= _1 and ii <= h and jj >= _1 and jj <= w:
                    a[k, t] = grid[ii - _1, jj - _1]
                else:
                    a[k, t] = pad
                k += _1
    zero = pad - pad  # +0 in the model's dtype (the padding is finite: PatchMap checks it)
    src, dst = a, b
    for layer in range(np.uint64(meta.shape[0])):
        rows, p0, b0 = meta[layer, M_ROWS], meta[layer, M_PTR], meta[layer, M_BIAS]
        relu = meta[layer, M_RELU] != _0
        for r in range(rows):
            s, e = indptr[p0 + r], indptr[p0 + r + _1]
            bb = bias[b0 + r]
            k = e - s
            # one pass over the tile for rows of at most 3 entries (most rows of the
            # filter), else a pass per entry; the same sums in the same order either way
            if k == _0:
                for t in range(n):
                    dst[r, t] = bb
            elif k == _1:
                c0, w0 = cols[s], vals[s]
                for t in range(n):
                    dst[r, t] = w0 * src[c0, t] + bb
            elif k == _2:
                c0, w0, c1, w1 = cols[s], vals[s], cols[s + _1], vals[s + _1]
                for t in range(n):
                    dst[r, t] = (w0 * src[c0, t] + w1 * src[c1, t]) + bb
            elif k == np.uint64(3):
                c0, w0, c1, w1 = cols[s], vals[s], cols[s + _1], vals[s + _1]
                c2, w2 = cols[s + _2], vals[s + _2]
                for t in range(n):
                    dst[r, t] = ((w0 * src[c0, t] + w1 * src[c1, t]) + w2 * src[c2, t]) + bb
            else:
                c0, w0, c1, w1 = cols[s], vals[s], cols[s + _1], vals[s + _1]
                for t in range(n):
                    dst[r, t] = w0 * src[c0, t] + w1 * src[c1, t]
                for j in range(s + _2, e):
                    c0, w0 = cols[j], vals[j]
                    for t in range(n):
                        dst[r, t] += w0 * src[c0, t]
                for t in range(n):
                    dst[r, t] += bb
            if relu:  # max(v, 0) as torch.relu: a NaN stays NaN
                for t in range(n):
                    v = dst[r, t]
                    dst[r, t] = zero if v < zero else v
        src, dst = dst, src
    for t in range(n):
        out[t] = src[0, t]


@njit(cache=True)
def _changed(prev, cur, qs, n, out):
    """The cells among ``qs[:n]`` whose bits differ between the flat grids ``prev`` and
    ``cur`` (unsigned views) into ``out``; their number."""
    m = _0
    for t in range(np.uint64(n)):
        q = qs[t]
        if prev[q] != cur[q]:
            out[m] = q
            m += _1
    return m


@njit(cache=True, nogil=True)
def grid_trips(states, bits, base, first, last, pad, meta, indptr, cols, vals, bias, reads, tile, width, changed,
               nchanged, mark, fixed_at, evaluated, every):
    """Trips ``first .. last`` (inclusive) of one grid: ``states[t - base] = f(states[t - 1 - base])``
    for ``states`` ``[L + 1, H, W]`` with ``base = 0`` (``bits`` is the same buffer viewed
    unsigned), or a window of them: ``states[0]`` is the grid after trip ``base`` and the
    buffer holds ``last - base + 1`` grids (the streamed run, :meth:`.grid_engine.GridEngine.stream`).

    Trip 1 evaluates every cell (every trip does, with ``every``: the dense baseline).  A
    later trip evaluates only the cells whose patch changed: cell ``c`` when a cell
    ``c + o`` it reads changed in the trip before, for
    ``o`` = (di, dj) of ``reads`` ``[n, 2]`` (the patch positions the first layer reads,
    as di + 1, dj + 1).  Every other cell's patch is bit for bit the one it had a trip
    before, so its value is copied (the filter is a function of the patch).
    ``changed[:nchanged[0]]`` holds the cells trip ``first - 1`` changed and is updated;
    a grid with no changed cell is at a fixed point from trip ``fixed_at[0]`` on (0: not
    yet) and its later states are copies.  ``evaluated[0]`` counts the filter evaluations."""
    _steps, h, w = states.shape
    base = np.uint64(base)
    cells = np.uint64(h * w)
    tile = np.uint64(tile)
    wu, hu = np.uint64(w), np.uint64(h)
    nr = np.uint64(reads.shape[0])
    a = np.empty((width, tile), dtype=states.dtype)
    b = np.empty((width, tile), dtype=states.dtype)
    y = np.empty(tile, dtype=states.dtype)
    dirty = np.empty(cells, dtype=np.uint64)
    for tt in range(np.uint64(first), np.uint64(last) + _1):
        cur = states[tt - base].reshape(-1)
        prev_grid = states[tt - base - _1]
        prev = prev_grid.reshape(-1)
        for q in range(cells):  # (a loop: a slice assignment costs 1.7 s more to compile)
            cur[q] = prev[q]
        if fixed_at[0] != 0:
            continue
        nd = _0
        if tt == _1 or every:  # the input is not an output of the filter: every cell
            for q in range(cells):
                dirty[q] = q
            nd = cells
        for e in range(_0 if nd else np.uint64(nchanged[0])):
            q = changed[e]
            i1, j1 = q // wu + _1, q % wu + _1  # 1-based: cell (i, j) reads (i + di, j + dj)
            for r in range(nr):
                ii, jj = i1 - reads[r, 0], j1 - reads[r, 1]
                if ii < hu and jj < wu:  # (below 0 wraps around)
                    p = ii * wu + jj
                    if mark[p] != tt:
                        mark[p] = tt
                        dirty[nd] = p
                        nd += _1
        for q0 in range(_0, nd, tile):
            n = min(tile, nd - q0)
            filter_tile(prev_grid, dirty, q0, n, pad, meta, indptr, cols, vals, bias, a, b, y)
            for t in range(n):
                cur[dirty[q0 + t]] = y[t]
        evaluated[0] += nd
        nchanged[0] = _changed(bits[tt - base - _1].reshape(-1), bits[tt - base].reshape(-1), dirty, nd, changed)
        if nchanged[0] == 0:
            fixed_at[0] = tt


@njit(cache=True, nogil=True)
def run_trips(states, bits, base, first, last, pad, meta, indptr, cols, vals, bias, reads, tile, width, changed,
              nchanged, mark, fixed_at, evaluated, every, grids):
    """:func:`grid_trips` for the grids ``grids`` of ``states`` ``[B, L + 1, H, W]`` (or a window, ``base``)
    (``changed``, ``mark`` ``[B, H·W]``; ``nchanged``, ``fixed_at``, ``evaluated`` ``[B]``),
    without the GIL: :mod:`.grid_engine` runs one call per thread on disjoint grids.
    (Python threads, not ``prange``: numba's parallel compilation would add 2 s to the
    first run on a fresh machine, for the same split.)"""
    for k in range(np.uint64(grids.shape[0])):
        g = grids[k]
        grid_trips(states[g], bits[g], base, first, last, pad, meta, indptr, cols, vals, bias, reads, tile, width,
                   changed[g], nchanged[g:g + _1], mark[g], fixed_at[g:g + _1], evaluated[g:g + _1], every)
