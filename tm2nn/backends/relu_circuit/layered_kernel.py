"""The fused engine's kernels (numba): a layered ReLU net on a batch, the batch being the
vector dimension.

A program (:mod:`.layered_program`) is a list of rows ``y = act(b + Σ_k w_k x_k)``, each
reading registers written before it and writing one register; ``act`` is the ReLU or the
identity.  Registers are the rows of one ``[n_regs, tile]`` array per tile of inputs, so
every row is a loop over ``tile`` contiguous values that LLVM vectorises, and a tile's
registers stay in cache through the whole net (the emitted modules stream a
``[width, batch]`` matrix through memory per layer).  Tiles are independent: ``prange``
runs them on the threads numba is given.

Rows with one or two terms (almost every row of Wei-Chen-Ma's construction) have loops of
their own; a row adds its bias, then its terms in the program's order (increasing column),
in the register type: exact integers in the integer mode, the model's float type in the
float mode.  Every index is unsigned: numba checks a signed index for wrap-around.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True)
def _tile(x, lo, n, in_idx, in_reg, out_reg, ptr, col, w, bias, relu, dst, n_regs, out,
          lay_row, lay_src, lay_width, a, eps):
    """The program on inputs ``lo .. lo + n`` (see :func:`run_program`)."""
    one, two = np.uint64(1), np.uint64(2)
    perturbed = lay_row.shape[0] > 0
    regs = np.zeros((n_regs, n), dtype=x.dtype)
    for i in range(in_reg.shape[0]):
        regs[in_reg[i], :n] = x[in_idx[i], lo:lo + n]
    scale = np.empty(n if perturbed else 0, dtype=x.dtype)
    lay = 0
    for r in range(bias.shape[0]):
        if perturbed and r == lay_row[lay]:  # a layer starts: eps * sqrt(|h|^2 + 1) of its input
            scale[:] = 1.0
            for c in range(lay_src[lay], lay_src[lay] + lay_width[lay]):
                h = regs[c]
                for j in range(n):
                    scale[j] += h[j] * h[j]
            for j in range(n):
                scale[j] = eps[lo + j] * np.sqrt(scale[j])
            lay += 1
        k0, k1 = ptr[r], ptr[r + one]
        o = regs[dst[r]]
        b = bias[r]
        rl = relu[r] and not perturbed  # perturbed: the ReLU comes after the perturbation
        if k1 - k0 == one:
            a0, w0 = regs[col[k0]], w[k0]
            if rl:
                for j in range(n):
                    v = b + w0 * a0[j]
                    o[j] = v if v > 0 else 0
            else:
                for j in range(n):
                    o[j] = b + w0 * a0[j]
        elif k1 - k0 == two:
            a0, w0, a1, w1 = regs[col[k0]], w[k0], regs[col[k0 + one]], w[k0 + one]
            if rl:
                for j in range(n):
                    v = b + w0 * a0[j] + w1 * a1[j]
                    o[j] = v if v > 0 else 0
            else:
                for j in range(n):
                    o[j] = b + w0 * a0[j] + w1 * a1[j]
        else:
            acc = np.full(n, b, dtype=x.dtype)
            for k in range(k0, k1):
                ak, wk = regs[col[k]], w[k]
                for j in range(n):
                    acc[j] += wk * ak[j]
            if rl:
                for j in range(n):
                    o[j] = acc[j] if acc[j] > 0 else 0
            else:
                o[:] = acc
        if perturbed:
            p = a[r]
            if relu[r]:
                for j in range(n):
                    v = o[j] + p[lo + j] * scale[j]
                    o[j] = v if v > 0 else 0
            else:
                for j in range(n):
                    o[j] += p[lo + j] * scale[j]
    for k in range(out_reg.shape[0]):
        out[k, lo:lo + n] = regs[out_reg[k], :n]


@njit(cache=True, parallel=True)
def run_program(x, in_idx, in_reg, out_reg, ptr, col, w, bias, relu, dst, n_regs, tile, out,
                lay_row, lay_src, lay_width, a, eps):
    """``out[:, i] = program(x[:, i])`` for every input ``i``.

    ``x`` is ``[n_in, batch]`` in the register type; input ``in_idx[i]`` is loaded into
    register ``in_reg[i]``; rows ``r`` write register ``dst[r]``; ``out[k]`` is read from
    register ``out_reg[k]``.  ``tile`` inputs at a time, tiles in parallel.

    With ``lay_row`` not empty (a float program: layer ``L`` is rows ``lay_row[L] ..
    lay_row[L + 1]``, reading registers ``lay_src[L] .. + lay_width[L]``), Wei-Chen-Ma's
    all-layer perturbation is added to every affine output before its ReLU, as
    :class:`tm2nn.backends.relu_circuit.attacks._Perturbed` adds it in torch: row ``r`` on input ``i``
    gets ``a[r, i] * eps[i] * sqrt(|h|^2 + 1)``, ``h`` the layer's input."""
    batch = x.shape[1]
    n_tiles = (batch + tile - 1) // tile
    for t in prange(n_tiles):
        lo = t * tile
        _tile(x, lo, min(lo + tile, batch) - lo, in_idx, in_reg, out_reg, ptr, col, w, bias, relu, dst, n_regs, out,
              lay_row, lay_src, lay_width, a, eps)
