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
from tm2nn.engines.chain import layers
from tm2nn.engines.rows import CONST, INPUT0, scale_of
from tm2nn.engines.rows import Analysis as _Analysis
from tm2nn.engines.rows import layer_keys as _layer
from tm2nn.nets import Net

#: The integer mode's register types, and the magnitude below which each holds every
#: integer exactly: float32 when every sum of every row stays below 2^24, else float64.
#: Float registers, not integer ones: numba widens int8/int16/int32 arithmetic to 64 bits,
#: so float32 lanes are the narrowest it computes in (c6288's program, one thread, tiles of
#: 2048: float32 1.17e6 inputs/s, int8 5.0e5, int16 5.7e5, int32 5.5e5;
#: bench/bench_relu_circuit.py, ``bench_register_types``).
EXACT_TYPES = ((np.float32, 2 ** 24), (np.float64, 2 ** 53))


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
