"""Programs for the fused engine (:mod:`.layered_engine`): a layered ReLU net read as rows
``y = act(b + Σ_k w_k x_k)`` over registers, for :func:`.layered_kernel.run_program`.

A *layered ReLU net* is what the relu-circuit backend builds (Wei, Chen & Ma, Lemma 3.2 /
B.1 with the Prop. 3.4 corrections, and the machines unrolled through it): one input,
then affine maps each reading the one before, each optionally followed by a ReLU, then
a slice of the last (the outputs).  :func:`layers` reads one; any other net is refused.

Two programs, both running the net's own weights:

* :func:`float_program` (``--engine fused-float``): every row of every layer, in the
  model's float type; registers are two banks of the widest layer (a layer reads one and
  writes the other).  For real-valued inputs and perturbations (the margin attacks).
* :func:`integer_program` (``--engine fused``): exact integer arithmetic on 0/1 inputs.
  ReLU is positively homogeneous, ``φ(s·z) = s·φ(z)`` for ``s > 0``, so multiplying the
  input and every bias by ``s`` multiplies every unit of the net by ``s``; with ``s`` the
  least common denominator of the biases (3 for the Prop. 3.4 constants 1/3 and 2/3) and
  integer weights, every unit is an integer (docs/relu_circuit.md, "The fused engine").
  The analysis below then skips the rows that provably copy a value.

**Which rows the integer program runs.**  Every unit ``u`` is described as ``f_u(o)``: a
function, given as a table, of one *materialised* unit ``o`` (an input, or a row the
program runs), over the finite set ``V(o)`` of integers ``o`` can take on 0/1 inputs
(computed exactly: the values a row can give are those of ``act(b + Σ w_k v_k)`` over the
values ``v_k`` its inputs can give).  A row whose inputs are all functions of one ``o``
is a function of ``o`` too; its table is the row itself, run on each entry of ``V(o)``
(the net's weights, bias and ReLU, in integers).  Nothing runs for it yet:

* if its table is the identity on ``V(o)`` (an identity unit that strict layering adds,
  the gate layer after an AND, every round correction after a 0/1 value: Prop. 3.4's round
  is the identity on {0, 1}), the unit *is* ``o``;
* if another unit already has the same table over the same ``o`` (a NOT's value carried
  by identity units), the unit *is* that one.

A row that reads functions of two or more units runs, after the units it reads are made
(a unit not yet made is made by running its own row, on units made the same way).  Units
no output depends on are never made.  So the program runs each row of the net that
computes a value not computed before, on every input, with the net's weights; every row
it skips is one whose value was shown, by running the row on every value its inputs can
take, to equal a value already computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.engines import EngineRefused
from tm2nn.engines.chain import Layer, layers
from tm2nn.nets import Net

#: The integer mode's largest bias denominator (the construction's is 3; beyond it: refused)
MAX_SCALE = 64
#: A unit that can take more values than this is not described by a table: the rows that
#: read it run (sound: they compute it).
MAX_VALUES = 16
#: Combinations of input values enumerated for one row's value set (beyond: an interval)
MAX_COMBOS = 4096
#: The integer mode's register types, and the magnitude below which each holds every
#: integer exactly: float32 when every sum of every row stays below 2^24, else float64.
#: Float registers, not integer ones: numba widens int8/int16/int32 arithmetic to 64 bits,
#: so float32 lanes are the narrowest it computes in (c6288's program, one thread, tiles of
#: 2048: float32 1.17e6 inputs/s, int8 5.0e5, int16 5.7e5, int32 5.5e5;
#: bench/bench_relu_circuit.py, ``bench_register_types``).
EXACT_TYPES = ((np.float32, 2 ** 24), (np.float64, 2 ** 53))
#: The made value 0 is the constant 0 (the origin of rows with no inputs); inputs follow
CONST, INPUT0 = 0, 1


@dataclass
class Program:
    """Rows ``dst[r] = act(bias[r] + Σ w[k] * reg[col[k]])`` for ``k`` in
    ``ptr[r]:ptr[r + 1]`` (``act`` = ReLU where ``relu[r]``), input ``in_idx[i]`` loaded
    into register ``in_reg[i]``, outputs read from ``out_reg``; ``scale`` is the factor
    every unit carries (1 in the float mode)."""

    in_idx: np.ndarray
    in_reg: np.ndarray
    out_reg: np.ndarray
    ptr: np.ndarray
    col: np.ndarray
    w: np.ndarray
    bias: np.ndarray
    relu: np.ndarray
    dst: np.ndarray
    n_regs: int
    scale: int
    dtype: np.dtype
    #: rows of the net, and how many of them the program runs
    net_rows: int = 0
    #: the float program's layers: layer ``L`` is rows ``lay_row[L] .. lay_row[L + 1]``,
    #: reading registers ``lay_src[L] .. + lay_width[L]`` (for the perturbed runs)
    lay_row: np.ndarray | None = None
    lay_src: np.ndarray | None = None
    lay_width: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.bias.size)

    def arrays(self) -> tuple:
        """The kernel's arguments after ``x`` (unsigned indices, the register type)."""
        u = np.uint64
        return (self.in_idx.astype(u), self.in_reg.astype(u), self.out_reg.astype(u), self.ptr.astype(u), self.col.astype(u),
                self.w.astype(self.dtype), self.bias.astype(self.dtype), self.relu.astype(np.bool_),
                self.dst.astype(u), self.n_regs)


def float_program(net: Net, dtype=np.float32) -> Program:
    """Every row of every layer, in ``dtype``.  Registers ``[0, n_in)`` hold the input; the
    layers alternate between two banks of the widest layer's width after it."""
    n_in, lays, indices = layers(net)
    width = max([lay.n_out for lay in lays], default=0)
    ptr, cols, ws, biases, relus, dsts = [np.zeros(1, np.int64)], [], [], [], [], []
    src, nnz = 0, 0
    lay_row, lay_src, lay_width = [0], [], []
    for k, lay in enumerate(lays):
        lay_src.append(src)
        lay_width.append(n_in if k == 0 else lays[k - 1].n_out)
        lay_row.append(lay_row[-1] + lay.n_out)
        dst = n_in + (k % 2) * width
        cols.append(lay.cols + src)
        ws.append(lay.vals)
        ptr.append(lay.ptr[1:] + nnz)
        nnz += int(lay.ptr[-1])
        biases.append(lay.bias)
        relus.append(np.full(lay.n_out, lay.relu))
        dsts.append(dst + np.arange(lay.n_out))
        src = dst
    return Program(np.arange(n_in), np.arange(n_in), src + indices, _cat(ptr, np.int64), _cat(cols, np.int64), _cat(ws, np.float64),
                   _cat(biases, np.float64), _cat(relus, bool), _cat(dsts, np.int64), n_in + 2 * width, 1,
                   np.dtype(dtype), net_rows=sum(lay.n_out for lay in lays), lay_row=np.asarray(lay_row, np.uint64),
                   lay_src=np.asarray(lay_src, np.uint64), lay_width=np.asarray(lay_width, np.uint64))


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def scale_of(lays: list[Layer]) -> int:
    """The integer mode's scale ``s``: the least ``s <= MAX_SCALE`` that makes every bias an
    integer (each read as the rational ``p/s`` it is within 1e-9 of: 1/3 and 2/3 for the
    float64 values of Prop. 3.4's constants).  Every weight must be an integer."""
    for lay in lays:
        bad = lay.vals != np.round(lay.vals)
        if bad.any():
            raise EngineRefused(f"layer {lay.name!r} has a weight that is not an integer "
                                f"({lay.vals[bad][0]!r}): run it with the fused-float engine")
    b = np.unique(np.concatenate([lay.bias for lay in lays])) if lays else np.zeros(0)
    for s in range(1, MAX_SCALE + 1):
        sb = s * b
        if np.all(np.abs(sb - np.round(sb)) <= 1e-9 * np.maximum(1.0, np.abs(sb))):
            return s
    raise EngineRefused(f"no denominator up to {MAX_SCALE} makes every bias an integer: run it with the "
                        "fused-float engine")


class _Column:
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


class _Analysis:
    """The integer program's builder (module doc).

    *Values* are what the program makes (an input, or a row it runs): ``v_vals`` their
    possible values, sorted (padded with 0 to :data:`MAX_VALUES`; ``v_len`` 0 when there
    are more), ``v_bound`` their largest magnitude, ``v_key`` the key that is the value
    itself.  *Keys* describe units: ``k_origin`` the value a unit is a function of,
    ``k_table`` its values over the origin's (``k_abs`` their largest magnitude),
    ``k_made`` the value it was made as (-1: not yet), and ``k_row`` the (layer, row) of
    the net that makes it."""

    def __init__(self) -> None:
        mv = (MAX_VALUES,)
        self.v_vals, self.v_len, self.v_bound, self.v_key = _Column(mv), _Column(), _Column(), _Column()
        self.k_origin, self.k_table, self.k_abs, self.k_made = _Column(), _Column(mv), _Column(), _Column()
        self.k_row: list[tuple[int, int]] = []
        self.index: dict[tuple[int, bytes], int] = {}
        self.layers: list[tuple[Layer, np.ndarray, np.ndarray, np.ndarray]] = []  # layer, input keys, w, b
        self.rows: list[tuple[int, list[int], list[int], int, bool]] = []  # value, inputs, weights, bias, relu
        self.max_sum = 0

    def new_value(self, vals: np.ndarray | None, bound: int) -> int:
        """A made value (``vals`` None: too many to list) and its key; returns the value."""
        v = self.v_vals.n
        row = np.zeros(MAX_VALUES, dtype=np.int64)
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
        """A row of the program, writing a new value."""
        bounds = self.v_bound.a
        self.max_sum = max(self.max_sum, abs(b) + sum(abs(w) * int(bounds[i]) for i, w in zip(ins, ws)))
        v = self.new_value(vals, bound)
        self.rows.append((v, ins, ws, b, relu))
        return v

    def value_set(self, ins: list[int], ws: list[int], b: int, relu: bool) -> tuple[np.ndarray | None, int]:
        """The values ``act(b + Σ w_k u_k)`` can take, ``u_k`` over the values of key
        ``ins[k]`` (None past :data:`MAX_VALUES`), and a bound on their magnitude."""
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
            return (vals if vals.size <= MAX_VALUES else None), int(np.abs(vals).max())
        if relu:
            lo, hi = max(lo, 0), max(hi, 0)
        return None, int(max(abs(lo), abs(hi)))


def integer_program(net: Net) -> Program:
    """The integer mode's program (module doc): inputs are 0/1, every unit carries the
    factor ``scale``."""
    n_in, lays, indices = layers(net)
    s = scale_of(lays)
    an = _Analysis()
    an.new_value(np.zeros(1, np.int64), 0)  # CONST: the origin of the rows that read nothing
    bits = np.array([0, s], dtype=np.int64)
    inputs = [an.new_value(bits, s) for _ in range(n_in)]
    keys = an.v_key.a[np.asarray(inputs, dtype=np.int64)]
    for lay in lays:
        keys = _layer(an, lay, keys, s)
    outs = [an.make(int(k)) for k in keys[indices]]
    return _allocate(an, n_in, outs, s, sum(lay.n_out for lay in lays))


def _layer(an: _Analysis, lay: Layer, keys: np.ndarray, s: int) -> np.ndarray:
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
    z = np.zeros((n, MAX_VALUES), dtype=np.int64)
    if starts.size:
        z[full] = np.add.reduceat(an.k_table.a[ek] * w[:, None], starts, axis=0)
    z += b[:, None]
    if lay.relu:
        np.maximum(z, 0, out=z)
    z[np.arange(MAX_VALUES)[None, :] >= an.v_len.a[origin][:, None]] = 0  # past the origin's values
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


def _allocate(an: _Analysis, n_in: int, outs: list[int], s: int, net_rows: int) -> Program:
    """The rows the outputs depend on, in order, with their values in registers: a register
    is reused once the last row reading its value has run (a row may write the register
    of a value it reads last: it reads each coordinate before writing it)."""
    need = set(outs)
    keep = []
    for row in reversed(an.rows):
        if row[0] in need:
            keep.append(row)
            need.update(row[1])
    keep.reverse()
    last: dict[int, int] = {}
    for r, (_v, ins, _w, _b, _relu) in enumerate(keep):
        for i in ins:
            last[i] = r
    final = len(keep)
    for o in outs:
        last[o] = final
    reg: dict[int, int] = {CONST: 0}  # register 0 is never written: every tile starts at 0
    free: list[int] = []
    n_regs = 1
    for i in range(n_in):
        v = INPUT0 + i
        if v in last:
            reg[v] = n_regs
            n_regs += 1
    ptr, col, w, bias, relu, dst = [0], [], [], [], [], []
    for r, (v, ins, ws, b, rl) in enumerate(keep):
        col += [reg[i] for i in ins]
        w += ws
        ptr.append(len(col))
        bias.append(b)
        relu.append(rl)
        for i in set(ins):
            if last[i] == r and i != CONST:
                free.append(reg[i])
        if free:
            reg[v] = free.pop()
        else:
            reg[v] = n_regs
            n_regs += 1
        dst.append(reg[v])
    exact = [t for t, limit in EXACT_TYPES if an.max_sum < limit]
    if not exact:
        raise EngineRefused(f"a row's sum can reach {an.max_sum:,}, past the integers float64 holds exactly: "
                            "run it with the fused-float engine")
    dtype = exact[0]
    used = [i for i in range(n_in) if INPUT0 + i in reg]
    return Program(np.asarray(used, np.int64), np.asarray([reg[INPUT0 + i] for i in used], np.int64),
                   np.asarray([reg[o] for o in outs], np.int64),
                   np.asarray(ptr, np.int64), np.asarray(col, np.int64), np.asarray(w, np.int64),
                   np.asarray(bias, np.int64), np.asarray(relu, bool), np.asarray(dst, np.int64),
                   n_regs, s, np.dtype(dtype), net_rows=net_rows)
