"""The program engine's kernel (numba): decoder steps of a :class:`.step_program.StepProgram`.

A step is ``x = o_{i-1} + β(i)`` into the input registers (each coordinate checked to be
0 or 1: the value sets of the program assume it), then the instructions in order:

* ``I_ROWS a b``: rows ``a .. b-1``, ``reg[dst] = act(bias + Σ w·reg[col])``, exact integers
  in float64 (every sum below 2^40, checked when the program was built).  Event-driven
  after the first step: each row's sum is kept, a register that changes adds ``w·Δ`` to
  the sums of the rows that read it, so a row's value is its kept sum (through its ReLU):
  the multiply-adds run only for the inputs that changed, and a row whose value did not
  change tells no reader;
* ``I_INSERT t``: this step's source vector into index ``ins_index[t]``: its key coordinates
  as bits (each register 0 or ``s``, else refused), its value coordinates as 0/1;
* ``I_ATTN t``: the lookup (:func:`.hardmax_index.index_query` with ``u`` and the null's
  margin θ from registers) and its Δ registers: the null's value when no item reaches θ,
  ``b_v + W_v x_{j*}`` when items win (the index engine's attention table, the net's
  weights).  A tie with the null (the output would mix both) and several winners averaged
  into a value are refused at the step they happen: the index engine runs those.

then ``o`` (kept scaled for the next step) and the tap, ``int8``, checked to be -1, 0 or 1.

The kernels are compiled without numba's reference counting (``_nrt=False``: they
allocate nothing): with it, every inlined helper's array arguments were counted in and
out with atomic operations, over half of a step's time.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tm2nn.backends.transformer.engines.decode_kernel import (
    A_BV,
    A_DOP,
    A_FLAGS,
    A_INDEX,
    A_NROWS,
    A_NULLV,
    A_WV_PTR,
    A_WV_SLOT,
    A_WV_VALS,
    ERR_FULL,
    ERR_HISTORY,
    ERR_TAP,
    FLAG_V,
)
from tm2nn.backends.transformer.engines.hardmax_index import (
    IM_D,
    IM_NV,
    index_insert,
    index_prefix,
    index_query,
)
from tm2nn.backends.transformer.engines.step_program import (
    AI_BASE,
    AI_CHECK,
    AI_DELTA,
    AI_FROM,
    AI_META,
    AI_THR,
    AI_U,
    I_ATTN,
    I_INSERT,
    I_ROWS,
    NO_BASE,
)

#: error codes past the index engine's: an input coordinate not 0/1, a tie with the null, several winners read
ERR_INPUT, ERR_TIE, ERR_MULTI = 5, 6, 7
#: not an error: the attention at instruction ``err_i[2]`` needs :func:`slow_attend`
NEED_QUERY = 8
#: ``geo`` columns (G_PREFIX: 1 to answer the queries that allow it by the prefix lookup)
G_SCALE, G_W, G_POS_KIND, G_POS_OFFSET, G_POS_BITS, G_TAP_W, G_PREFIX = range(7)

_0, _1, _2, _4, _63 = np.uint64(0), np.uint64(1), np.uint64(2), np.uint64(4), np.uint64(63)


@njit(cache=True, inline="always")
def _rows(a, b, ptr, col, w, bias, relu, dst, regs, pre):
    """Rows ``a .. b-1`` in full: each sum from its terms (the first step of a run)."""
    for r in range(a, b):
        y = bias[r]
        for e in range(ptr[r], ptr[r + _1]):
            y += w[e] * regs[col[e]]
        pre[r] = y
        if relu[r] and y < 0.0:
            y = 0.0
        regs[dst[r]] = y


@njit(cache=True, inline="always")
def _rows_changed(a, b, relu, dst, regs, fptr, frow, fw, pre):
    """Rows ``a .. b-1`` from their kept sums: each sum was kept from the last step and
    told of every change of an input, so a row whose inputs did not change gives its value
    again (a load and a compare: cheaper than marking and testing which rows changed) and
    tells no reader.  Exact: every partial sum is an integer below
    the analysis's bound |b| + Σ |w| max|x| < 2^40."""
    for r in range(a, b):
        y = pre[r]
        if relu[r] and y < 0.0:
            y = 0.0
        v = dst[r]
        d = y - regs[v]
        if d != 0.0:
            regs[v] = y
            for e in range(fptr[v], fptr[v + _1]):
                q = frow[e]
                pre[q] += fw[e] * d


@njit(cache=True, inline="always")
def _insert(t, ins_index, ins_key, ins_val, s, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs,
            nrep, regs, vbits, fpath, err_i, err_f):
    k = ins_index[t]
    key = _0
    for p in range(imeta[k, IM_D]):
        x = regs[ins_key[t, p]]
        if x == s:
            key |= _1 << (_63 - np.uint64(p))
        elif x != 0.0:
            err_i[0], err_i[3] = ERR_HISTORY, p
            err_f[0] = x / s
            return ERR_HISTORY
    for v in range(imeta[k, IM_NV]):
        x = regs[ins_val[t, v]]
        if x == s:
            vbits[v] = 1
        elif x == 0.0:
            vbits[v] = 0
        else:
            err_i[0], err_i[3] = ERR_HISTORY, v
            err_f[0] = x / s
            return ERR_HISTORY
    if index_insert(imeta, istate, k, key, vbits, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep):
        err_i[0] = ERR_FULL
        return ERR_FULL
    fpath[k, 0] = _0  # the finger's walk is stale
    return 0


@njit(cache=True, inline="always")
def _deliver(t, top, count, thr, a_regs, s, ameta, fdata, idata, regs, vs_out, fptr, frow, fw, pre, cache, err_i, err_f):
    """An attention's output from its lookup (the top item score, the items at it, their
    value sums): Δ = the null's value when no item reaches θ, ``b_v + W_v x`` when items
    win; a tie with the null and several winners read are refused (module doc).  Δ is a
    function of (whether items win, their value sums) alone: when both are the last
    step's (``cache[t]``: 0 unknown, 1 the null, 2 items, then the sums), its registers
    keep their values and nothing is computed."""
    am = a_regs[t, AI_META]
    live = count > 0
    if live and top == thr:
        err_i[0], err_i[2] = ERR_TIE, t
        err_f[0] = top / s
        return ERR_TIE
    if live and count != 1 and (ameta[am, A_FLAGS] & FLAG_V) != _0:
        err_i[0], err_i[2] = ERR_MULTI, t
        err_f[0] = count
        return ERR_MULTI
    nv = cache.shape[1] - 1
    if live:
        same = cache[t, 0] == 2
        for v in range(nv):
            if cache[t, v + 1] != vs_out[v]:
                same = False
                cache[t, v + 1] = vs_out[v]
        if same:
            return 0
        cache[t, 0] = 2
    else:
        if cache[t, 0] == 1:
            return 0
        cache[t, 0] = 1
    nrows = ameta[am, A_NROWS]
    if not live:
        nullv = ameta[am, A_NULLV]
        for j in range(nrows):
            v = a_regs[t, AI_DELTA + j]
            y = s * fdata[nullv + j]
            d = y - regs[v]
            if d != 0.0:
                regs[v] = y
                for e in range(fptr[v], fptr[v + _1]):
                    q = frow[e]
                    pre[q] += fw[e] * d
        return 0
    ptr, slot, vals, bv = ameta[am, A_WV_PTR], ameta[am, A_WV_SLOT], ameta[am, A_WV_VALS], ameta[am, A_BV]
    for j in range(nrows):
        d = fdata[bv + j]
        for e in range(idata[ptr + j], idata[ptr + j + _1]):
            d += fdata[vals + e] * vs_out[idata[slot + e]]
        v = a_regs[t, AI_DELTA + j]
        y = s * d
        d = y - regs[v]
        if d != 0.0:
            regs[v] = y
            for e in range(fptr[v], fptr[v + _1]):
                q = frow[e]
                pre[q] += fw[e] * d
    return 0


@njit(cache=True, inline="always")
def _attend(t, a_regs, a_state, a_pat, prefix, ameta, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1,
            ncnt, nvs, nrep, regs, vs_out, fpath):
    """Attention ``t``'s lookup by the prefix walk: ``(count, top, θ)`` for :func:`_deliver`,
    or count -1 when its ``u`` and θ do not allow it (then :func:`slow_attend`, called
    apart: its branch-and-bound code inside this loop slowed every query by a third).
    (Few arguments: numba does not inline a function of about 31 or more.)"""
    am = a_regs[t, AI_META]
    k, dop = ameta[am, A_INDEX], ameta[am, A_DOP]
    thr = regs[a_regs[t, AI_THR]]
    # every key bit scores (u_p != 0) and θ lies above every score but the top one: only
    # keys with the top pattern (bit p = [u_p > 0]) can reach it, a prefix lookup.  The
    # pattern, Σ max(u_p, 0), the least |u_p| and whether some u_p is 0 extend those of
    # the base attention at a checkpoint (step_program._base: the same registers there);
    # a_state[t] keeps them after the last position (0..3) and before it (4..7)
    b = a_regs[t, AI_BASE]
    first = _0
    umax, gap, zero, pat = 0.0, np.inf, 0.0, _0
    if b != NO_BASE:
        first = a_regs[t, AI_FROM]
        c = _4 * a_regs[t, AI_CHECK]
        umax, gap, zero, pat = a_state[b, c], a_state[b, c + _1], a_state[b, c + _2], a_pat[b, a_regs[t, AI_CHECK]]
    for p in range(first, dop):
        if p + _1 == dop:
            a_state[t, 4], a_state[t, 5], a_state[t, 6], a_pat[t, 1] = umax, gap, zero, pat
        up = regs[a_regs[t, AI_U + p]]
        if up > 0.0:
            umax += up
            pat |= _1 << (_63 - np.uint64(p))
            gap = up if up < gap else gap
        elif up < 0.0:
            gap = -up if -up < gap else gap
        else:
            zero = 1.0
    a_state[t, 0], a_state[t, 1], a_state[t, 2], a_pat[t, 0] = umax, gap, zero, pat
    if not (prefix and zero == 0.0 and thr > umax - gap):
        return -1, umax, thr
    count = 0
    if thr <= umax:
        count = index_prefix(imeta, istate, k, pat, dop, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep,
                             fpath, vs_out)
    return count, umax, thr


@njit(cache=True, _nrt=False)
def slow_attend(t, a_regs, s, ameta, fdata, idata, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt,
                nvs, nrep, regs, u, suf, st_node, st_s, st_d, vs_out, inc, err_i, err_f):
    """Attention ``t`` by the branch-and-bound lookup (:func:`.hardmax_index.index_query`:
    any integer ``u`` and θ); 0 or an error code."""
    am = a_regs[t, AI_META]
    k, dop = ameta[am, A_INDEX], ameta[am, A_DOP]
    for p in range(dop):
        u[p] = regs[a_regs[t, AI_U + p]]
    thr = regs[a_regs[t, AI_THR]]
    top, count = index_query(imeta, istate, k, u, dop, thr, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs,
                             nrep, suf, st_node, st_s, st_d, vs_out)
    return _deliver(t, top, count, thr, a_regs, s, ameta, fdata, idata, regs, vs_out, inc[0], inc[1], inc[2], inc[3],
                    inc[4], err_i, err_f)


@njit(cache=True, _nrt=False)
def run_steps(instr, ptr, col, w, bias, relu, dst, a_regs, a_state, a_pat, ins_index, ins_key, ins_val, o_reg,
              tap_reg, ameta, fdata, idata, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep,
              regs, obuf, vs_out, vbits, fpath, inc, geo, pos_cols, pos_table, first, n, resume, taps, err_i, err_f):
    """Decoder steps ``first .. first + n - 1`` (module doc); ``obuf`` holds ``s·o_{first-1}``
    and is left holding ``s·o`` of the last step run.  ``resume`` > 0: step ``first`` is
    already under way, from its instruction ``resume`` on (after a :func:`slow_attend`).
    ``inc``: the rows' kept sums (``fptr, frow, fw``: who reads each register; ``pre``; the
    attentions' last outcomes; ``inc[5][0]``: 1 once a whole step has run,
    before that every row runs in full).  Returns ``(steps run, 0 or a code)``:
    NEED_QUERY when an attention needs the branch-and-bound lookup (``err_i[1]`` the step,
    ``err_i[2]`` the instruction)."""
    s = float(geo[G_SCALE])
    prefix = geo[G_PREFIX] != _0
    width, pos_kind, pos_offset, pos_bits, tap_w = geo[G_W], geo[G_POS_KIND], geo[G_POS_OFFSET], geo[G_POS_BITS], \
        geo[G_TAP_W]
    fptr, frow, fw, pre, cache, kept = inc[0], inc[1], inc[2], inc[3], inc[4], inc[5]
    for j in range(n):
        i = first + np.uint64(j)
        t0 = resume if j == 0 else _0
        full = kept[0] == _0
        if t0 == _0:
            # x = o_{i-1} + β(i), into obuf, then each coordinate checked and set
            if pos_kind == _1:
                m = i - _1 + pos_offset
                for b in range(pos_bits):
                    if (m >> (pos_bits - _1 - b)) & _1:
                        obuf[pos_cols[b]] += s
            else:
                for c in range(width):
                    obuf[c] += s * pos_table[i - _1, c]
            for c in range(width):
                x = obuf[c]
                if x != 0.0 and x != s:
                    err_i[0], err_i[1], err_i[3] = ERR_INPUT, i, c
                    err_f[0] = x / s
                    return j, ERR_INPUT
                v = c + _1
                d = x - regs[v]
                if d != 0.0:
                    regs[v] = x
                    if full:
                        continue
                    for e in range(fptr[v], fptr[v + _1]):
                        q = frow[e]
                        pre[q] += fw[e] * d
        for t in range(t0, instr.shape[0]):
            kind, a = instr[t, 0], instr[t, 1]
            if kind == I_ROWS:
                if full:
                    _rows(a, instr[t, 2], ptr, col, w, bias, relu, dst, regs, pre)
                else:
                    _rows_changed(a, instr[t, 2], relu, dst, regs, fptr, frow, fw, pre)
            elif kind == I_ATTN:
                count, top, thr = _attend(a, a_regs, a_state, a_pat, prefix, ameta, imeta, istate, leaf_key, leaf_cnt,
                                          leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep, regs, vs_out, fpath)
                if count < 0:
                    status = NEED_QUERY
                else:
                    status = _deliver(a, top, count, thr, a_regs, s, ameta, fdata, idata, regs, vs_out, fptr, frow, fw,
                                      pre, cache, err_i, err_f)
                if status:
                    err_i[1] = i
                    if status == NEED_QUERY:
                        err_i[2] = t
                    return j, status
            elif kind == I_INSERT:
                status = _insert(a, ins_index, ins_key, ins_val, s, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit,
                                 nc0, nc1, ncnt, nvs, nrep, regs, vbits, fpath, err_i, err_f)
                if status:
                    err_i[1], err_i[2] = i, a
                    return j, status
        if full:  # every sum is kept now (what this step pushed before a row ran in full was overwritten)
            kept[0] = _1
        for c in range(width):
            obuf[c] = regs[o_reg[c]]
        for c in range(tap_w):
            x = regs[tap_reg[c]]
            if x == s:
                taps[i, c] = 1
            elif x == 0.0:
                taps[i, c] = 0
            elif x == -s:
                taps[i, c] = -1
            else:
                err_i[0], err_i[1], err_i[3] = ERR_TAP, i, c
                err_f[0] = x / s
                return j, ERR_TAP
    return n, 0
