"""The index engine's kernels (numba): one decoder step of a compiled network, every op
of it in one compiled loop, and the loop over steps.

A net (the decoder body or its prologue) is a flat program built by
:mod:`.decode_program`: rows of ``iprog`` (``OP_*`` below), with the weights in one
float64 pool ``fdata`` and the indices in one int64 pool ``idata``.  Values live in one
float64 workspace ``ws`` at the offsets the program gives.  The ops are the network IR's
own, evaluated in float64 with the network's weights:

* ``OP_AFFINE`` ``y = b + W x`` (then ``max(y, 0)`` when the next ReLU is fused), row by
  row from the stored entries: the bias, then the terms in increasing column order.  Rows
  are grouped by their number of entries k (one tight loop per group: most rows of this
  construction have k = 1 or 2), which changes no sum;
* ``OP_SEPARABLE``: ``φ(B φ(A x + a) + b)`` where each output reads one input coordinate
  (Prop. 3.4's round): the value at an input of 0 or 1 is looked up (precomputed with these
  same operations in this order), any other input is computed;
* ``OP_RELU``, ``OP_GATHER`` (Slice, and the parts of a Concat);
* ``OP_INSERT`` appends this step's vector to a history: its key and value coordinates go
  into every index over that history (:mod:`.hardmax_index`), after checking that each is 0
  or 1 (the keys are stored as bits);
* ``OP_ATTN``: hard-max attention with a null key (Wei, Chen & Ma §4.1) by the index:
  ``q = W_q h + b_q``, then ``u_p = Σ_r W_k[r, col_p] q_r`` on the index's key bits, the
  keys' bias term ``b_k·q`` and the null's score ``K_0·q``; the index returns the top item
  score, how many items reach it and the sums of their value bits, and the output is formed
  exactly as the torch module's ``AttentionModule.attend_history`` forms it (the same
  branches: the items' count is used only where the dense path uses it).

Every index is unsigned (``uint64``): numba checks a signed index for wrap-around, which
costs more than the arithmetic of these loops (3.5× on the affine rows).

Exactness (docs/transformer.md, "The index engine"): every query's ``u``, ``b_k·q`` and
``K_0·q`` must be integers of magnitude < 2^40 (checked at every query, error 2), so every
score is an exact integer in float64 and the index's top and ties are those of the dense
scan in any order of summation.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tm2nn.backends.transformer.engines.hardmax_index import (
    IM_D,
    IM_HIST,
    IM_KEYCOLS,
    IM_NV,
    IM_VALCOLS,
    index_insert,
    index_query,
)

OP_AFFINE, OP_RELU, OP_GATHER, OP_ATTN, OP_INSERT, OP_SEPARABLE = 1, 2, 3, 4, 5, 6
PROG_WIDTH = 10

# ameta columns (one row per attention op)
(A_INDEX, A_DOP, A_DK, A_WQ_PTR, A_WQ_COLS, A_WQ_VALS, A_BQ, A_WK_PTR, A_WK_Q, A_WK_VALS, A_BK, A_K0,
 A_NROWS, A_ROWS, A_WV_PTR, A_WV_SLOT, A_WV_VALS, A_BV, A_NULLV, A_FLAGS) = range(20)
A_WIDTH = 20
FLAG_V, FLAG_BV, FLAG_NV = np.uint64(1), np.uint64(2), np.uint64(4)

# error codes (err_i[0]); err_i[1] = step, err_i[2] = instruction (or attention), err_i[3] = column
ERR_HISTORY, ERR_SCORE, ERR_TAP, ERR_FULL = 1, 2, 3, 4
#: scores are exact integers below this (docs/transformer.md)
SCORE_LIMIT = 2.0 ** 40
#: probe columns per attention op and step: items' top score + b_k·q, the null's score,
#: items at the top (0 when they lose to the null), the null's weight
PROBE_WIDTH = 4

_0, _1, _2, _5, _63 = np.uint64(0), np.uint64(1), np.uint64(2), np.uint64(5), np.uint64(63)


@njit(cache=True, inline="always")
def _integral(x):
    return x == np.floor(x) and -SCORE_LIMIT < x < SCORE_LIMIT


@njit(cache=True, inline="always")
def _attend(a, h_off, w, out_off, ameta, fdata, idata, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0,
            nc1, ncnt, nvs, nrep, ws, q, u, suf, st_node, st_s, st_d, vs_out, probe, err_i, err_f):
    """Hard-max attention op ``a`` on ``h`` (see the module doc); 0 or an error code."""
    k = ameta[a, A_INDEX]
    dop, dk = ameta[a, A_DOP], ameta[a, A_DK]
    # q = W_q h + b_q (per row: the bias, then the terms in column order)
    bq = ameta[a, A_BQ]
    ptr, cols, vals = ameta[a, A_WQ_PTR], ameta[a, A_WQ_COLS], ameta[a, A_WQ_VALS]
    for r in range(dk):
        y = fdata[bq + r]
        for e in range(idata[ptr + r], idata[ptr + r + _1]):
            y += fdata[vals + e] * ws[h_off + idata[cols + e]]
        q[r] = y
    # u on the index's key bits, b_k·q, K_0·q
    ptr, rows, vals = ameta[a, A_WK_PTR], ameta[a, A_WK_Q], ameta[a, A_WK_VALS]
    for p in range(dop):
        s = 0.0
        for e in range(idata[ptr + p], idata[ptr + p + _1]):
            s += fdata[vals + e] * q[idata[rows + e]]
        u[p] = s
        if not _integral(s):
            err_i[0], err_i[2], err_i[3] = ERR_SCORE, a, p
            err_f[0] = s
            return ERR_SCORE
    qb = 0.0
    s0 = 0.0
    bk, k0 = ameta[a, A_BK], ameta[a, A_K0]
    for r in range(dk):
        qb += fdata[bk + r] * q[r]
        s0 += fdata[k0 + r] * q[r]
    if not (_integral(qb) and _integral(s0)):
        err_i[0], err_i[2], err_i[3] = ERR_SCORE, a, -1
        err_f[0] = qb if not _integral(qb) else s0
        return ERR_SCORE
    top, count = index_query(imeta, istate, k, u, dop, s0 - qb, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1,
                             ncnt, nvs, nrep, suf, st_node, st_s, st_d, vs_out)
    # the dense path: best = top + b_k·q; the null wins when τ_0 >= best, the items when best >= τ_0
    live = count > 0
    best = top + qb
    a0 = 1.0 if (not live or s0 >= best) else 0.0
    flags = ameta[a, A_FLAGS]
    has_v = (flags & FLAG_V) != _0
    if live:
        n_items = float(count) if (has_v or a0 > 0.0) else 1.0
    else:
        n_items = 0.0
    inv = 1.0 / (n_items + a0)
    items = n_items * inv
    a0w = a0 * inv
    if probe.shape[0] > 0:
        probe[a, 0] = best if live else -np.inf
        probe[a, 1] = s0
        probe[a, 2] = float(count) if live else 0.0
        probe[a, 3] = a0w
    if out_off != h_off:  # (the program updates h in place when nothing else reads it)
        for c in range(w):
            ws[out_off + c] = ws[h_off + c]
    nrows = ameta[a, A_NROWS]
    rows, ptr, slot, vals = ameta[a, A_ROWS], ameta[a, A_WV_PTR], ameta[a, A_WV_SLOT], ameta[a, A_WV_VALS]
    bv, nullv = ameta[a, A_BV], ameta[a, A_NULLV]
    share = inv if live else 0.0  # each winner's weight
    has_bv, has_nv = (flags & FLAG_BV) != _0, (flags & FLAG_NV) != _0
    for j in range(nrows):
        d = 0.0
        if has_v:
            for e in range(idata[ptr + j], idata[ptr + j + _1]):
                d += fdata[vals + e] * (vs_out[idata[slot + e]] * share)
        if has_bv:
            d = d + items * fdata[bv + j] if has_v else items * fdata[bv + j]
        if has_nv:
            d = d + a0w * fdata[nullv + j]
        r = idata[rows + j]
        ws[out_off + r] = ws[h_off + r] + d
    return 0


@njit(cache=True, inline="always")
def _pack(src, off, imeta, k, idata, vbits, err_i, err_f):
    """Index ``k``'s key of the vector ``src[off:]`` (its key coordinates as bits, bit
    position p = bit 63 - p) and its value bits into ``vbits``: ``(0, key)``, or
    ``(ERR_HISTORY, 0)`` when a coordinate is not exactly 0 or 1 (``err_i[3]`` its column)."""
    key = _0
    kc = imeta[k, IM_KEYCOLS]
    for p in range(imeta[k, IM_D]):
        col = idata[kc + p]
        x = src[off + col]
        if x == 1.0:
            key |= _1 << (_63 - p)
        elif x != 0.0:
            err_i[0], err_i[3] = ERR_HISTORY, col
            err_f[0] = x
            return ERR_HISTORY, _0
    vc = imeta[k, IM_VALCOLS]
    for v in range(imeta[k, IM_NV]):
        col = idata[vc + v]
        x = src[off + col]
        if x == 1.0:
            vbits[v] = 1
        elif x == 0.0:
            vbits[v] = 0
        else:
            err_i[0], err_i[3] = ERR_HISTORY, col
            err_f[0] = x
            return ERR_HISTORY, _0
    return 0, key


@njit(cache=True, inline="always")
def _add(src, off, k, imeta, istate, idata, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep, vbits,
         err_i, err_f):
    """The vector ``src[off:]`` into index ``k`` (:func:`_pack`, then the tree); 0 or an
    error code."""
    status, key = _pack(src, off, imeta, k, idata, vbits, err_i, err_f)
    if status:
        return status
    if index_insert(imeta, istate, k, key, vbits, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep):
        err_i[0] = ERR_FULL
        return ERR_FULL
    return 0


@njit(cache=True, inline="always")
def _insert(src_off, hist, imeta, istate, idata, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep,
            ws, vbits, err_i, err_f):
    """This step's ``src`` into every index over history ``hist``; 0 or an error code."""
    for kk in range(imeta.shape[0]):
        k = np.uint64(kk)
        if imeta[k, IM_HIST] != hist + _1:
            continue
        status = _add(ws, src_off, k, imeta, istate, idata, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs,
                      nrep, vbits, err_i, err_f)
        if status:
            return status
    return 0


@njit(cache=True)
def exec_net(iprog, fdata, idata, ameta, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs,
             nrep, ws, q, u, suf, st_node, st_s, st_d, vs_out, vbits, probe, step, err_i, err_f):
    """Run one net's program once (see the module doc); 0 or an error code."""
    for t in range(iprog.shape[0]):
        op = iprog[t, 0]
        if op == OP_AFFINE:
            in_off, out_off, n_groups, groups = iprog[t, 1], iprog[t, 3], iprog[t, 4], iprog[t, 5]
            bias, relu = iprog[t, 8], iprog[t, 9] != _0
            for g in range(n_groups):
                d = groups + _5 * g
                k, n, ro, co, vo = idata[d], idata[d + _1], idata[d + _2], idata[d + np.uint64(3)], \
                    idata[d + np.uint64(4)]
                if k == _1:
                    for j in range(n):
                        r = idata[ro + j]
                        y = fdata[bias + r] + fdata[vo + j] * ws[in_off + idata[co + j]]
                        ws[out_off + r] = 0.0 if (relu and y < 0.0) else y
                elif k == _2:
                    for j in range(n):
                        r = idata[ro + j]
                        e = _2 * j
                        y = fdata[bias + r] + fdata[vo + e] * ws[in_off + idata[co + e]]
                        y = y + fdata[vo + e + _1] * ws[in_off + idata[co + e + _1]]
                        ws[out_off + r] = 0.0 if (relu and y < 0.0) else y
                else:
                    for j in range(n):
                        r = idata[ro + j]
                        y = fdata[bias + r]
                        for e in range(k * j, k * j + k):
                            y += fdata[vo + e] * ws[in_off + idata[co + e]]
                        ws[out_off + r] = 0.0 if (relu and y < 0.0) else y
        elif op == OP_SEPARABLE:
            in_off, n, out_off, desc, table = iprog[t, 1], iprog[t, 2], iprog[t, 3], iprog[t, 4], iprog[t, 5]
            relu = iprog[t, 9] != _0
            for r in range(n):
                d = desc + np.uint64(3) * r
                x = ws[in_off + idata[d]]
                if x == 0.0:
                    y = fdata[table + _2 * r]
                elif x == 1.0:
                    y = fdata[table + _2 * r + _1]
                else:
                    to = idata[d + _2]
                    y = fdata[to]
                    for e in range(idata[d + _1]):
                        o = to + _1 + np.uint64(3) * e
                        a = fdata[o] + fdata[o + _1] * x
                        a = 0.0 if a < 0.0 else a
                        y = y + fdata[o + _2] * a
                    if relu and y < 0.0:
                        y = 0.0
                ws[out_off + r] = y
        elif op == OP_RELU:
            in_off, w, out_off = iprog[t, 1], iprog[t, 2], iprog[t, 3]
            for r in range(w):
                x = ws[in_off + r]
                ws[out_off + r] = 0.0 if x < 0.0 else x
        elif op == OP_GATHER:
            in_off, n, out_off, idx = iprog[t, 1], iprog[t, 2], iprog[t, 3], iprog[t, 4]
            for j in range(n):
                ws[out_off + j] = ws[in_off + idata[idx + j]]
        elif op == OP_ATTN:
            status = _attend(iprog[t, 4], iprog[t, 1], iprog[t, 2], iprog[t, 3], ameta, fdata, idata, imeta,
                             istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep, ws, q, u, suf,
                             st_node, st_s, st_d, vs_out, probe, err_i, err_f)
            if status:
                err_i[1] = step
                return status
        elif op == OP_INSERT:
            status = _insert(iprog[t, 1], iprog[t, 2], imeta, istate, idata, leaf_key, leaf_cnt, leaf_vs, nbit,
                             nc0, nc1, ncnt, nvs, nrep, ws, vbits, err_i, err_f)
            if status:
                err_i[1], err_i[2] = step, t
                return status
    return 0


@njit(cache=True)
def write_tap(ws, tap_off, tap_w, row, step, err_i, err_f):
    """Store a tap as ``int8`` (every tap value of the construction is 0 or 1, and θ_cls's
    column -1, 0 or 1; checked)."""
    for c in range(tap_w):
        x = ws[tap_off + c]
        if x == 1.0:
            row[c] = 1
        elif x == 0.0:
            row[c] = 0
        elif x == -1.0:
            row[c] = -1
        else:
            err_i[0], err_i[1], err_i[3] = ERR_TAP, step, c
            err_f[0] = x
            return ERR_TAP
    return 0


@njit(cache=True)
def run_steps(iprog, fdata, idata, ameta, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs,
              nrep, ws, q, u, suf, st_node, st_s, st_d, vs_out, vbits, geo, pos_cols, pos_table, first, n, taps,
              probes, dumps, err_i, err_f):
    """Decoder steps ``first .. first + n - 1`` of one input: ``x = o_{i-1} + β(i)``, the
    body, ``tap_i`` into ``taps[i]`` (int8).  ``geo`` = (x_off, o_off, tap_off, tap_w, w,
    pos_kind, pos_offset, pos_bits): ``pos_kind`` 1 is Bin(i - 1 + pos_offset) on
    ``pos_cols`` (MSB first), 2 a table ``pos_table[i - 1]``.  ``probes[i - first]`` /
    ``dumps[i - first]`` get the attention probe and the whole workspace (pass arrays of
    shape ``(1, 0, ...)`` for none).  Returns the number of steps done and an error code."""
    x_off, o_off, tap_off, tap_w, w = geo[0], geo[1], geo[2], geo[3], geo[4]
    pos_kind, pos_offset, pos_bits = geo[5], geo[6], geo[7]
    for j in range(n):
        i = first + j
        for c in range(w):
            ws[x_off + c] = ws[o_off + c]
        if pos_kind == _1:
            m = i - _1 + pos_offset
            for b in range(pos_bits):
                if (m >> (pos_bits - _1 - b)) & _1:
                    ws[x_off + pos_cols[b]] += 1.0
        elif pos_kind == _2:
            for c in range(w):
                ws[x_off + c] += pos_table[i - _1, c]
        probe = probes[j] if probes.shape[1] > 0 else probes[0]
        status = exec_net(iprog, fdata, idata, ameta, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1,
                          ncnt, nvs, nrep, ws, q, u, suf, st_node, st_s, st_d, vs_out, vbits, probe, i, err_i,
                          err_f)
        if status:
            return j, status
        status = write_tap(ws, tap_off, tap_w, taps[i], i, err_i, err_f)
        if status:
            return j, status
        if dumps.shape[1] > 0:
            dumps[j, :] = ws
    return n, 0


@njit(cache=True)
def insert_rows(imeta, istate, k, rows, idata, vbits, err_i, err_f, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt,
                nvs, nrep):
    """Every row of a sequence (the decoder memory ``[L, w]``) into index ``k``, packed as
    a step's vector is (:func:`_pack`); 0 or an error code (``err_i[1]``: the row)."""
    for j in range(rows.shape[0]):
        status = _add(rows[j], _0, k, imeta, istate, idata, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs,
                      nrep, vbits, err_i, err_f)
        if status:
            err_i[1] = j
            return status
    return 0
