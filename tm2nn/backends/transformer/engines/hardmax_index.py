"""An exact, sublinear hard-max lookup: a crit-bit tree over binary keys, queried by
branch-and-bound on the score ``q·k`` (docs/transformer.md, "The index engine").

Wei, Chen & Ma's hard-max attention (§4.1; Claims C.4–C.6, Lemma C.7) attends to the
items of top score ``τ_j = Q(h)ᵀK(h_j)``, ties averaged, against a null key.  Its keys are
affine in coordinates that are 0 or 1 (binary positions, one-hot groups), so with the
query fixed an item's score is ``Σ_p u_p · bit_p(key_j) + const``: a weighted sum of the
key's bits.  This module keeps the items' keys (up to 64 bits, bit position ``p`` = bit
``63 - p`` of a ``uint64``) in a crit-bit tree (a PATRICIA trie: one internal node per
branching, so ``n`` distinct keys take ``n`` leaves and ``n - 1`` nodes), with, at every
node, the number of items below it and the sums of their value bits.  A query walks the
tree depth first and prunes a subtree when its upper bound (the score so far plus every
positive ``u_p`` still to come) is below the best score found or below a threshold (the
null key's score: items below it cannot win).  It returns the exact top score, the
number of items at that score and the sums of their value bits: what hard-max attention
with ties averaged needs, and nothing is approximated.  Scores must be exact in float64
(the caller checks that ``u`` is integral, see :mod:`.decode_kernel`), so the order of
summation cannot change a tie.

Arrays are pools shared by several indexes; index ``k``'s row of ``imeta`` gives its
bases (``IM_*``), ``istate[k]`` its root and sizes (``IS_*``).  A child or root is a
``uint32``/``uint64`` reference: internal node ``c``, or leaf ``c`` with :data:`LEAF` set
(both local to the index).  Every index is unsigned: numba wraps negative indices, and
that check costs more than the arithmetic in these loops.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# imeta columns
IM_D, IM_NV, IM_LEAF0, IM_CAP, IM_NODE0, IM_VSL0, IM_VSN0, IM_KEYCOLS, IM_VALCOLS, IM_HIST = (
    np.uint64(i) for i in range(10))
IM_WIDTH = 10
# istate columns
IS_ROOT, IS_LEAVES, IS_NODES = (np.uint64(i) for i in range(3))
IS_WIDTH = 3
#: the most key bits an index holds (one uint64)
MAX_KEY_BITS = 64
#: depth-first stack per query: a crit-bit tree is at most MAX_KEY_BITS + 1 levels deep
STACK = 2 * (MAX_KEY_BITS + 2)
#: a reference with this bit set is a leaf
LEAF = np.uint64(1 << 31)
LEAF32 = np.uint32(1 << 31)

_0, _1, _63, _64 = np.uint64(0), np.uint64(1), np.uint64(63), np.uint64(64)


@njit(cache=True, inline="always")
def key_bit(key, p):
    """Bit position ``p`` (0 = first) of a key."""
    return (key >> (_63 - p)) & _1


@njit(cache=True, inline="always")
def first_difference(a, b):
    """The first bit position where two keys differ, or 64 when equal (the leading zeros
    of ``a ^ b``, by halving: six tests, not a loop over the bits)."""
    x = a ^ b
    if x == _0:
        return _64
    p = _0
    for half in (32, 16, 8, 4, 2, 1):
        h = np.uint64(half)
        if (x >> (_64 - h)) == _0:
            p += h
            x = x << h
    return p


@njit(cache=True, inline="always")
def _child(key, c, nbit, nc0, nc1, N0):
    i = N0 + c
    return np.uint64(nc1[i]) if key_bit(key, np.uint64(nbit[i])) else np.uint64(nc0[i])


@njit(cache=True, inline="always")
def index_insert(imeta, istate, k, key, vbits, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep):
    """Add one item (``key``, value bits ``vbits``) to index ``k``.  Returns 0, or 1 when
    the index is full (its capacity is the number of items planned)."""
    nv = imeta[k, IM_NV]
    L0, cap, N0 = imeta[k, IM_LEAF0], imeta[k, IM_CAP], imeta[k, IM_NODE0]
    VL0, VN0 = imeta[k, IM_VSL0], imeta[k, IM_VSN0]
    nl = istate[k, IS_LEAVES]
    if nl == _0:
        leaf_key[L0] = key
        leaf_cnt[L0] = 1
        for v in range(nv):
            leaf_vs[VL0 + v] = vbits[v]
        istate[k, IS_ROOT] = LEAF
        istate[k, IS_LEAVES] = _1
        return 0
    root = istate[k, IS_ROOT]
    c = root
    while (c & LEAF) == _0:
        c = _child(key, c, nbit, nc0, nc1, N0)
    near = c ^ LEAF
    crit = first_difference(leaf_key[L0 + near], key)
    if crit >= imeta[k, IM_D]:  # the same key: one more item on its leaf and every node above
        c = root
        while (c & LEAF) == _0:
            ncnt[N0 + c] += 1
            for v in range(nv):
                nvs[VN0 + c * nv + v] += vbits[v]
            c = _child(key, c, nbit, nc0, nc1, N0)
        leaf_cnt[L0 + near] += 1
        for v in range(nv):
            leaf_vs[VL0 + near * nv + v] += vbits[v]
        return 0
    if nl >= cap:
        return 1
    leaf_key[L0 + nl] = key
    leaf_cnt[L0 + nl] = 1
    for v in range(nv):
        leaf_vs[VL0 + nl * nv + v] = vbits[v]
    istate[k, IS_LEAVES] = nl + _1
    nn = istate[k, IS_NODES]
    istate[k, IS_NODES] = nn + _1
    # walk down to where the new node goes (the first node branching after crit)
    parent, side, c = _0, _0, root
    has_parent = False
    while (c & LEAF) == _0 and np.uint64(nbit[N0 + c]) < crit:
        ncnt[N0 + c] += 1
        for v in range(nv):
            nvs[VN0 + c * nv + v] += vbits[v]
        parent, has_parent = c, True
        side = key_bit(key, np.uint64(nbit[N0 + c]))
        c = np.uint64(nc1[N0 + c]) if side else np.uint64(nc0[N0 + c])
    nbit[N0 + nn] = crit
    new_leaf = np.uint32(nl | LEAF)
    if key_bit(key, crit):
        nc0[N0 + nn], nc1[N0 + nn] = np.uint32(c), new_leaf
    else:
        nc0[N0 + nn], nc1[N0 + nn] = new_leaf, np.uint32(c)
    if (c & LEAF) == _0:
        ncnt[N0 + nn] = ncnt[N0 + c] + 1
        for v in range(nv):
            nvs[VN0 + nn * nv + v] = nvs[VN0 + c * nv + v] + vbits[v]
    else:
        lf = c ^ LEAF
        ncnt[N0 + nn] = leaf_cnt[L0 + lf] + 1
        for v in range(nv):
            nvs[VN0 + nn * nv + v] = leaf_vs[VL0 + lf * nv + v] + vbits[v]
    nrep[N0 + nn] = nl  # the new key shares every bit before crit with the subtree
    if not has_parent:
        istate[k, IS_ROOT] = nn
    elif side:
        nc1[N0 + parent] = nn
    else:
        nc0[N0 + parent] = nn
    return 0


@njit(cache=True, inline="always")
def index_query(imeta, istate, k, u, dop, thr, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep,
                suf, st_node, st_s, st_d, vs_out):
    """The items of index ``k`` with the top score ``Σ_{p<dop} u[p]·bit_p(key)``, among
    those scoring at least ``thr``: returns ``(top, count)`` and the sums of their value
    bits in ``vs_out`` (``top = -inf``, ``count = 0`` when no item reaches ``thr``).
    Positions ``p >= dop`` do not score (every key of a subtree whose branching starts
    there ties).  ``suf``, ``st_*``: scratch (``MAX_KEY_BITS + 1``, ``STACK``)."""
    nv = imeta[k, IM_NV]
    L0, N0 = imeta[k, IM_LEAF0], imeta[k, IM_NODE0]
    VL0, VN0 = imeta[k, IM_VSL0], imeta[k, IM_VSN0]
    for v in range(nv):
        vs_out[v] = 0
    best = -np.inf
    count = 0
    if istate[k, IS_LEAVES] == _0:
        return best, count
    suf[dop] = 0.0
    p = dop
    while p > _0:
        p -= _1
        suf[p] = suf[p + _1] + (u[p] if u[p] > 0.0 else 0.0)
    sp = _1
    st_node[0] = istate[k, IS_ROOT]
    st_s[0] = 0.0
    st_d[0] = _0
    while sp > _0:
        sp -= _1
        c, s, d = st_node[sp], st_s[sp], st_d[sp]
        lim = best if best > thr else thr
        if s + suf[d] < lim:
            continue
        leaf = (c & LEAF) != _0
        if leaf:
            p = _64
            rep = leaf_key[L0 + (c ^ LEAF)]
        else:
            p = np.uint64(nbit[N0 + c])
            rep = leaf_key[L0 + np.uint64(nrep[N0 + c])]
        e = p if p < dop else dop
        for b in range(d, e):  # bits every key below c shares
            if key_bit(rep, b):
                s += u[b]
        if p >= dop:  # every item below c scores s
            if s < thr or s < best:
                continue
            if s > best:
                best = s
                count = 0
                for v in range(nv):
                    vs_out[v] = 0
            if leaf:
                lf = c ^ LEAF
                count += leaf_cnt[L0 + lf]
                for v in range(nv):
                    vs_out[v] += leaf_vs[VL0 + lf * nv + v]
            else:
                count += ncnt[N0 + c]
                for v in range(nv):
                    vs_out[v] += nvs[VN0 + c * nv + v]
            continue
        if s + suf[p] < lim:
            continue
        up = u[p]
        c0, c1 = np.uint64(nc0[N0 + c]), np.uint64(nc1[N0 + c])
        # push the less promising child first, so the better one is explored first
        if up >= 0.0:
            st_node[sp], st_s[sp], st_d[sp] = c0, s, p + _1
            st_node[sp + _1], st_s[sp + _1], st_d[sp + _1] = c1, s + up, p + _1
        else:
            st_node[sp], st_s[sp], st_d[sp] = c1, s + up, p + _1
            st_node[sp + _1], st_s[sp + _1], st_d[sp + _1] = c0, s, p + _1
        sp += np.uint64(2)
    return best, count


#: a finger per index (:func:`index_prefix`): ``fpath[k]`` = (path length, last pattern, the
#: references from the root the last lookup walked)
FINGER_DEPTH = MAX_KEY_BITS + 4
_2 = np.uint64(2)


@njit(cache=True, inline="always")
def index_prefix(imeta, istate, k, pat, dop, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep, fpath,
                 vs_out):
    """The items of index ``k`` whose first ``dop`` key bits are those of ``pat``: their
    count, and the sums of their value bits in ``vs_out``.  A crit-bit lookup: at every
    node branching before ``dop`` follow ``pat``'s bit (every key with that prefix lies on
    that side), then compare the subtree's representative's first ``dop`` bits.  The walk
    starts from the deepest node of the last walk (``fpath``) that every key with prefix
    ``pat`` also passes: one whose parents all branch before the first bit where ``pat``
    and the last pattern differ (and before ``dop``).  The caller clears ``fpath[k, 0]``
    when the index changes."""
    nv = imeta[k, IM_NV]
    L0, N0 = imeta[k, IM_LEAF0], imeta[k, IM_NODE0]
    VL0, VN0 = imeta[k, IM_VSL0], imeta[k, IM_VSN0]
    if istate[k, IS_LEAVES] == _0:
        for v in range(nv):
            vs_out[v] = 0
        return 0
    m = fpath[k, 0]
    if m == _0:
        fpath[k, 2] = istate[k, IS_ROOT]
        d = _0
    else:
        lim = first_difference(pat, fpath[k, 1])
        lim = lim if lim < dop else dop
        d = m - _1
        while d > _0 and np.uint64(nbit[N0 + fpath[k, d + _1]]) >= lim:
            d -= _1
    c = fpath[k, d + _2]
    while (c & LEAF) == _0:
        p = np.uint64(nbit[N0 + c])
        if p >= dop:
            break
        c = np.uint64(nc1[N0 + c]) if key_bit(pat, p) else np.uint64(nc0[N0 + c])
        d += _1
        fpath[k, d + _2] = c
    fpath[k, 0] = d + _1
    fpath[k, 1] = pat
    leaf = (c & LEAF) != _0
    rep = leaf_key[L0 + (c ^ LEAF)] if leaf else leaf_key[L0 + np.uint64(nrep[N0 + c])]
    if dop > _0 and ((rep ^ pat) >> (_64 - dop)) != _0:
        for v in range(nv):
            vs_out[v] = 0
        return 0
    if leaf:
        lf = c ^ LEAF
        for v in range(nv):
            vs_out[v] = leaf_vs[VL0 + lf * nv + v]
        return leaf_cnt[L0 + lf]
    for v in range(nv):
        vs_out[v] = nvs[VN0 + c * nv + v]
    return ncnt[N0 + c]
