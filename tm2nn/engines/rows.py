"""Rows over exact integer registers, described by value sets: the analysis the fused
engines share (relu-circuit's integer program, :mod:`tm2nn.backends.relu_circuit.layered_program`,
whose module doc explains it; the transformer's program engine,
:mod:`tm2nn.backends.transformer.engines.step_program`).

Every unit of a net is described as a table over the exact value set of one *made*
value (an input, or a row the program runs); a row whose inputs are all functions of one
made value gets its table by running the row itself on every value that origin can take
(the net's weights, bias and ReLU, in integers).  A unit whose table is the identity *is*
its origin; two units with the same table over the same origin are one.  A row reading
functions of two or more made values runs (:meth:`Analysis.make`).  Every unit carries the
factor ``scale`` (:func:`scale_of`): ReLU is positively homogeneous, so scaling the inputs
and every bias by ``s`` scales every unit by ``s``, and makes Prop. 3.4's 1/3 and 2/3
integers.
"""

from __future__ import annotations

import numpy as np

from tm2nn.engines import EngineRefused
from tm2nn.engines.chain import Layer

#: The integer mode's largest bias denominator (the construction's is 3; beyond it: refused)
MAX_SCALE = 64
#: A unit that can take more values than this is not described by a table: the rows that
#: read it run (sound: they compute it).
MAX_VALUES = 16
#: Combinations of input values enumerated for one row's value set (beyond: an interval)
MAX_COMBOS = 4096
#: The made value 0 is the constant 0 (the origin of rows with no inputs); inputs follow
CONST, INPUT0 = 0, 1


def scale_of(lays: list[Layer], fallback: str = "the fused-float engine") -> int:
    """The integer mode's scale ``s``: the least ``s <= MAX_SCALE`` that makes every bias an
    integer (each read as the rational ``p/s`` it is within 1e-9 of: 1/3 and 2/3 for the
    float64 values of Prop. 3.4's constants).  Every weight must be an integer."""
    for lay in lays:
        bad = lay.vals != np.round(lay.vals)
        if bad.any():
            raise EngineRefused(f"layer {lay.name!r} has a weight that is not an integer "
                                f"({lay.vals[bad][0]!r}): run it with {fallback}")
    b = np.unique(np.concatenate([lay.bias for lay in lays])) if lays else np.zeros(0)
    for s in range(1, MAX_SCALE + 1):
        sb = s * b
        if np.all(np.abs(sb - np.round(sb)) <= 1e-9 * np.maximum(1.0, np.abs(sb))):
            return s
    raise EngineRefused(f"no denominator up to {MAX_SCALE} makes every bias an integer: run it with {fallback}")


class Column:
    """A numpy array that grows at its end (doubling)."""

    def __init__(self, tail: tuple = (), dtype=np.int64) -> None:
        self.a = np.zeros((1024, *tail), dtype=dtype)
        self.n = 0

    def add(self, block) -> int:
        """Append ``block`` (rows); returns the index of its first row."""
        block = np.asarray(block)
        k = block.shape[0]
        if self.n + k > self.a.shape[0]:
            grown = np.zeros((max(2 * self.a.shape[0], self.n + k), *self.a.shape[1:]), dtype=self.a.dtype)
            grown[:self.n] = self.a[:self.n]
            self.a = grown
        self.a[self.n:self.n + k] = block
        self.n += k
        return self.n - k


class Analysis:
    """The integer program's builder (module doc).

    *Values* are what the program makes (an input, or a row it runs): ``v_vals`` their
    possible values, sorted (padded with 0 to ``max_values``; ``v_len`` 0 when there
    are more), ``v_bound`` their largest magnitude, ``v_key`` the key that is the value
    itself.  *Keys* describe units: ``k_origin`` the value a unit is a function of,
    ``k_table`` its values over the origin's (``k_abs`` their largest magnitude),
    ``k_made`` the value it was made as (-1: not yet), and ``k_row`` the (layer, row) of
    the net that makes it."""

    def __init__(self, shared_rows: bool = False, max_values: int = MAX_VALUES) -> None:
        #: ``shared_rows``: a row with the same terms and bias as a row already run (the
        #: same made values, so the same integer) is that row's value, not run again
        self.seen: dict | None = {} if shared_rows else None
        #: the most values a value set lists (beyond: only a bound is kept)
        self.max_values = max_values
        mv = (max_values,)
        self.v_vals, self.v_len, self.v_bound, self.v_key = Column(mv), Column(), Column(), Column()
        self.k_origin, self.k_table, self.k_abs, self.k_made = Column(), Column(mv), Column(), Column()
        self.k_row: list[tuple[int, int]] = []
        self.index: dict[tuple[int, bytes], int] = {}
        self.layers: list[tuple[Layer, np.ndarray, np.ndarray, np.ndarray]] = []  # layer, input keys, w, b
        self.rows: list[tuple[int, list[int], list[int], int, bool]] = []  # value, inputs, weights, bias, relu
        self.max_sum = 0

    def new_value(self, vals: np.ndarray | None, bound: int) -> int:
        """A made value (``vals`` None: too many to list) and its key; returns the value."""
        v = self.v_vals.n
        row = np.zeros(self.max_values, dtype=np.int64)
        n = 0 if vals is None else vals.size
        row[:n] = vals if vals is not None else 0
        self.v_vals.add(row[None])
        self.v_len.add([n])
        self.v_bound.add([bound])
        self.v_key.add([self.k_origin.n])
        self.k_origin.add([v])
        self.k_table.add(row[None])
        self.k_abs.add([bound])
        self.k_made.add([v])
        self.k_row.append((-1, -1))
        return v

    def lazy_key(self, o: int, table: np.ndarray, where: tuple[int, int]) -> int:
        """The key of ``table`` (not the identity) over value ``o``: an existing one if any."""
        ident = (o, table.tobytes())
        k = self.index.get(ident)
        if k is None:
            k = self.k_origin.add([o])
            self.index[ident] = k
            self.k_table.add(table[None])
            self.k_abs.add([int(np.abs(table).max(initial=0))])
            self.k_made.add([-1])
            self.k_row.append(where)
        return k

    def recipe(self, k: int) -> tuple[list[int], list[int], int, bool]:
        li, r = self.k_row[k]
        lay, keys, w, b = self.layers[li]
        k0, k1 = lay.ptr[r], lay.ptr[r + 1]
        return keys[lay.cols[k0:k1]].tolist(), w[k0:k1].tolist(), int(b[r]), lay.relu

    def make(self, k: int) -> int:
        """The value of key ``k``, made by running its row (and first the rows it reads)."""
        made = self.k_made.a
        stack = [k]
        while stack:
            top = stack[-1]
            if made[top] >= 0:
                stack.pop()
                continue
            ins, ws, b, relu = self.recipe(top)
            todo = [i for i in ins if made[i] < 0]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            n = int(self.v_len.a[self.k_origin.a[top]])
            vals = np.unique(self.k_table.a[top, :n])
            v = self.run_row([int(made[i]) for i in ins], ws, b, relu, vals, int(self.k_abs.a[top]))
            made = self.k_made.a  # run_row may have grown it
            made[top] = v
        return int(made[k])

    def run_row(self, ins: list[int], ws: list[int], b: int, relu: bool, vals, bound: int) -> int:
        """A row of the program, writing a new value (or, with ``shared_rows``, the value
        of the same row run before: integer sums do not depend on the order of the terms)."""
        if self.seen is not None:
            ident = (tuple(sorted(zip(ins, ws))), b, relu)
            if ident in self.seen:
                return self.seen[ident]
        bounds = self.v_bound.a
        self.max_sum = max(self.max_sum, abs(b) + sum(abs(w) * int(bounds[i]) for i, w in zip(ins, ws)))
        v = self.new_value(vals, bound)
        self.rows.append((v, ins, ws, b, relu))
        if self.seen is not None:
            self.seen[ident] = v
        return v

    def value_set(self, ins: list[int], ws: list[int], b: int, relu: bool) -> tuple[np.ndarray | None, int]:
        """The values ``act(b + Σ w_k u_k)`` can take, ``u_k`` over the values of key
        ``ins[k]`` (None past ``max_values``), and a bound on their magnitude."""
        acc: set[int] | None = {b}  # Python sets: these are a few small integers
        lo = hi = b
        for k, w in zip(ins, ws):
            n = int(self.v_len.a[self.k_origin.a[k]])
            m = int(self.k_abs.a[k])
            lo, hi = lo - abs(w) * m, hi + abs(w) * m
            if acc is not None and n and len(acc) * n <= MAX_COMBOS:
                vk = set(self.k_table.a[k, :n].tolist())
                acc = {a + w * v for a in acc for v in vk}
            else:
                acc = None
        if acc is not None:
            vals = np.array(sorted({max(a, 0) for a in acc} if relu else acc), dtype=np.int64)
            return (vals if vals.size <= self.max_values else None), int(np.abs(vals).max())
        if relu:
            lo, hi = max(lo, 0), max(hi, 0)
        return None, int(max(abs(lo), abs(hi)))


def layer_keys(an: Analysis, lay: Layer, keys: np.ndarray, s: int) -> np.ndarray:
    """The keys of ``lay``'s units, from the keys of the units it reads (module doc):
    vectorised over the rows that are functions of one value, a row at a time for the
    others (they run)."""
    n = lay.n_out
    b = np.round(lay.bias * s).astype(np.int64)
    w = lay.vals.astype(np.int64)
    li = len(an.layers)
    an.layers.append((lay, keys, w, b))
    ek = keys[lay.cols]
    eo = an.k_origin.a[ek]
    fan = np.diff(lay.ptr)
    full = fan > 0
    starts = lay.ptr[:-1][full]
    origin = np.full(n, CONST, dtype=np.int64)
    single = np.ones(n, dtype=bool)
    if starts.size:
        lo, hi = np.minimum.reduceat(eo, starts), np.maximum.reduceat(eo, starts)
        wide = np.maximum.reduceat((an.v_len.a[eo] == 0).astype(np.int8), starts)
        origin[full] = lo
        single[full] = (lo == hi) & (wide == 0)
        # every sum of every row: |b| + Σ |w| max|u|, for the register type
        sums = np.abs(b[full]) + np.add.reduceat(np.abs(w) * an.k_abs.a[ek], starts)
        an.max_sum = max(an.max_sum, int(sums.max()))
    z = np.zeros((n, an.max_values), dtype=np.int64)
    if starts.size:
        z[full] = np.add.reduceat(an.k_table.a[ek] * w[:, None], starts, axis=0)
    z += b[:, None]
    if lay.relu:
        np.maximum(z, 0, out=z)
    z[np.arange(an.max_values)[None, :] >= an.v_len.a[origin][:, None]] = 0  # past the origin's values
    out = np.empty(n, dtype=np.int64)
    ident = single & np.all(z == an.v_vals.a[origin], axis=1)
    out[ident] = an.v_key.a[origin[ident]]
    for r in np.flatnonzero(single & ~ident).tolist():
        out[r] = an.lazy_key(int(origin[r]), z[r], (li, r))
    for r in np.flatnonzero(~single).tolist():
        k0, k1 = lay.ptr[r], lay.ptr[r + 1]
        ins, ws = ek[k0:k1].tolist(), w[k0:k1].tolist()
        vals, bound = an.value_set(ins, ws, int(b[r]), lay.relu)
        v = an.run_row([an.make(i) for i in ins], ws, int(b[r]), lay.relu, vals, bound)
        out[r] = an.v_key.a[v]
    return out
