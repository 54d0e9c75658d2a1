"""The program engine's per-step program (``--engine program``): a compiled transformer's
decoder step as the rows that compute a new value, over exact integer registers.

The decoder body of Wei, Chen & Ma §4.1 / App. C (as :mod:`tm2nn.backends.transformer.build`
builds it) is read from the network IR, op by op, into the value-set analysis the fused
engines share (:mod:`tm2nn.engines.rows`):

* every Affine (with the ReLU after it, when that ReLU is its only reader) is a layer of
  rows ``act(b + Σ w x)`` with the net's weights; each unit is described by a table over
  the exact value set of one made value, **built by running the row itself on every value
  its origin can take**.  A unit whose table is the identity (Prop. 3.4's round after a
  0/1 value, an identity unit) is its origin and runs nothing; two units with the same
  table over the same origin are one; a row reading two or more made values runs (Lemma
  C.1's transition table ``S(z, a)``, Lemma C.2's adder, Lemma C.8's choice);
* every unit carries the factor ``s`` (3: Prop. 3.4's 1/3 and 2/3, :func:`~tm2nn.engines.rows.scale_of`),
  so every register holds an integer and every row is exact;
* a hard-max attention (Claims C.4-C.6, Lemma C.7) is three parts: its query ``q = W_q h + b_q``
  and from it the key-bit weights ``u_p = Σ_r W_k[r, key_p] q_r`` and the null's margin
  ``θ = Σ_r (K_0 - b_k)_r q_r`` (rows of the same program, with the same weights); the
  lookup in the index engine's key index (:mod:`.hardmax_index`), which returns the top
  item score among those with ``Σ u_p bit_p >= θ``, their count and value sums; and its
  output ``h + Δ``, ``Δ = V_0`` when no item reaches the null and ``b_v + W_v x_{j*}``
  when items win (one winner where ``W_v`` reads it), each Δ a made value whose exact set is
  enumerated from the weights;
* the history insert packs the source's key coordinates, each checked to be ``0`` or ``s``.

Rows no output, query or insert depends on are dropped.  What the analysis cannot make
exact is refused here (:class:`~tm2nn.engines.EngineRefused`): a weight that is not an
integer (a bias not a multiple of ``1/s``), a sum past 2^40, an op the program does not
know.  What only a run can show (a tie with the null, several winners averaged into a
value, an input or tap coordinate that is not 0 or 1) is refused by the kernel
(:mod:`.step_kernel`) at the step where it happens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.backends.transformer.engines import decode_kernel as K
from tm2nn.backends.transformer.engines.decode_program import DecodeProgram, decode_ops
from tm2nn.engines import EngineRefused
from tm2nn.engines.chain import Layer, layer_of
from tm2nn.engines.rows import Analysis, layer_keys, scale_of
from tm2nn.nets import Affine, Attention, Concat, Net, ReLU, Slice
from tm2nn.nets.matrix import SparseMatrix

#: every sum of every row (and so every score) stays below this: exact in float64
SUM_LIMIT = 2 ** 40
#: values a unit's set lists (rows.Analysis): a next-state unit of Lemma C.1 sums every pair
#: that enters its state, 0..|pairs| as far as the rows alone show (one pair is active, but
#: no row says so); listing them keeps Prop. 3.4's round of it a table (0/1), where a bound
#: alone would grow threefold through every round
MAX_VALUES = 256
#: instruction kinds: run rows [a, b); attention a; insert into index a
I_ROWS, I_ATTN, I_INSERT = 0, 1, 2
#: ``a_regs`` columns: the index engine's ameta row, θ's register, the base attention (or
#: NO_BASE), the positions it gives, which of its two checkpoints (0: after its last
#: position, 1: before it); then the registers of u_p from AI_U, of Δ from AI_DELTA
AI_META, AI_THR, AI_BASE, AI_FROM, AI_CHECK, AI_U = range(6)
AI_DELTA = AI_U + 64
NO_BASE = 2 ** 32
FALLBACK = "the index engine (--engine index) or torch"


@dataclass
class StepProgram:
    """Kernel arrays (:mod:`.step_kernel`).  Registers are the analysis's values: ``CONST``
    (0), then the body input ``x`` (``1 .. w``), then what rows and attentions make."""

    scale: int
    n_regs: int
    instr: np.ndarray        # [n, 3] uint64: kind, a, b
    ptr: np.ndarray          # rows (CSR): ptr, col, w; bias, relu, dst per row
    col: np.ndarray
    w: np.ndarray
    bias: np.ndarray
    relu: np.ndarray
    dst: np.ndarray
    a_regs: np.ndarray       # [n_attn, AI_DELTA + max rows] (AI_* above; Δ: the op's value rows, in order)
    ins_index: np.ndarray    # [n_ins] index k
    ins_key: np.ndarray      # [n_ins, 64] registers of the key coordinates
    ins_val: np.ndarray      # [n_ins, max] registers of the value coordinates
    o_reg: np.ndarray        # registers of o (the next step's x before β)
    tap_reg: np.ndarray
    net_rows: int            # rows of the body's affine maps and queries
    rows_run: int            # rows the program runs per step
    attn_names: list[str]


def _relu_fused(part: Net) -> dict[str, str]:
    """Affine -> the ReLU that is its only reader (one layer of rows with ``act = φ``)."""
    readers: dict[str, int] = {}
    for op in part.nodes:
        for i in op.inputs:
            readers[i] = readers.get(i, 0) + 1
    outs = set(part.outputs)
    by_name = {op.name: op for op in part.nodes}
    return {op.name: op.inputs[0] for op in part.nodes
            if isinstance(op, ReLU) and isinstance(by_name.get(op.inputs[0]), Affine)
            and readers[op.inputs[0]] == 1 and op.inputs[0] not in outs}


def _attention_layers(op: Attention, key_cols: list[int]) -> tuple[Layer, Layer]:
    """Claim C.4-C.6 / Lemma C.7's query as two layers of rows: ``q = W_q h + b_q``, then
    ``[u_0 .. u_{d-1}, θ]`` from ``q``: ``u_p = Σ_r W_k[r, key_cols[p]] q_r`` (the weight of
    key bit p in an item's score ``τ_j - q·b_k``) and ``θ = (K_0 - b_k)·q`` (the null's
    score ``τ_0 = q·K_0`` on the same scale).  Every entry is a weight of the op."""
    dk = op.wq.shape[0]
    lq = layer_of(op.wq, op.bq, False, f"{op.name}.q")
    pos = {c: p for p, c in enumerate(key_cols)}
    keep = np.array([int(c) in pos for c in op.wk.cols], dtype=bool)
    rows = [np.array([pos[int(c)] for c in op.wk.cols[keep]], dtype=np.int64)]
    cols, vals = [op.wk.rows[keep]], [op.wk.vals[keep]]
    margin = op.null_key - op.bk
    nz = np.flatnonzero(margin)
    rows.append(np.full(nz.size, len(key_cols), dtype=np.int64))
    cols.append(nz)
    vals.append(margin[nz])
    m = SparseMatrix((len(key_cols) + 1, dk), np.concatenate(rows), np.concatenate(cols), np.concatenate(vals))
    return lq, layer_of(m, np.zeros(len(key_cols) + 1), False, f"{op.name}.scores")


def _delta_values(op: Attention, rows: np.ndarray, s: int) -> list[tuple[np.ndarray | None, int]]:
    """Each value row's Δ over every outcome the program allows (module doc): ``s·V_0[r]``
    (the null wins) and ``s·(b_v[r] + Σ_c W_v[r, c] x_c)`` over every 0/1 ``x`` (one item
    wins); the exact sorted set (None past MAX_VALUES) and its largest magnitude."""
    out = []
    for r in rows:
        m = op.wv.rows == r
        ws = op.wv.vals[m]
        acc = {0.0}
        for w in ws.tolist():
            acc |= {a + w for a in acc}
        vals = {s * op.null_value[r]} | {s * (op.bv[r] + a) for a in acc}
        bound = int(s * (abs(op.null_value[r]) + abs(op.bv[r]) + float(np.abs(ws).sum())))
        arr = np.array(sorted(vals), dtype=np.int64)
        out.append((arr if arr.size <= MAX_VALUES else None, bound))
    return out


def _integral(name: str, *arrays) -> None:
    for a in arrays:
        a = np.asarray(a, dtype=np.float64)
        if np.any(a != np.round(a)):
            raise EngineRefused(f"attention {name!r} has a weight that is not an integer "
                                f"({a[a != np.round(a)][0]!r}): the program engine runs integer weights; run it "
                                f"with {FALLBACK}")


def build_step_program(net: Net, base: DecodeProgram) -> StepProgram:
    """The decoder body of a compiled transformer as a :class:`StepProgram` (module doc);
    ``base`` is the index engine's program (its indexes, attention table and prologue)."""
    _embed, dec = decode_ops(net)
    body = dec.body
    fused = _relu_fused(body)
    fused_src = set(fused.values())
    key_cols = {name: base.indexes[int(base.ameta[a, K.A_INDEX])].key_cols[:int(base.ameta[a, K.A_DOP])]
                for a, name in enumerate(base.attn_names)}
    # the scale: every affine map's and every attention's weights
    lays = []
    for op in body.nodes:
        if isinstance(op, Affine):
            lays.append(layer_of(op.weight, op.bias, False, op.name))
        elif isinstance(op, Attention):
            _integral(op.name, op.wk.vals, op.bk, op.null_key, op.wv.vals, op.bv, op.null_value)
            lays += list(_attention_layers(op, key_cols[op.name]))
        elif not isinstance(op, (ReLU, Slice, Concat)):
            raise EngineRefused(f"the program engine does not run {op.kind} ops ({op.name!r}); run it with {FALLBACK}")
    s = scale_of(lays, FALLBACK)
    an = Analysis(shared_rows=True, max_values=MAX_VALUES)
    an.new_value(np.zeros(1, np.int64), 0)  # CONST
    x = body.inputs[0]
    w = len(x.space)
    bits = np.array([0, s], dtype=np.int64)
    keys: dict[str, np.ndarray] = {x.name: an.v_key.a[np.array([an.new_value(bits, s) for _ in range(w)])]}
    ops: list[tuple] = []  # (rows made before it, kind, ...) for the attentions and inserts
    a_of = {name: a for a, name in enumerate(base.attn_names)}
    inserted: set[str] = set()
    net_rows = 0
    for op in body.nodes:
        if isinstance(op, Affine):
            relu = op.name in fused_src
            lay = layer_of(op.weight, op.bias, relu, op.name)
            out = layer_keys(an, lay, keys[op.inputs[0]], s)
            net_rows += lay.n_out
            keys[op.name] = out
            if relu:
                keys[next(r for r, a in fused.items() if a == op.name)] = out
        elif isinstance(op, ReLU):
            if op.name in fused:
                continue
            n = len(body.spaces[op.name])
            eye = SparseMatrix((n, n), np.arange(n), np.arange(n), np.ones(n))
            keys[op.name] = layer_keys(an, layer_of(eye, np.zeros(n), True, op.name), keys[op.inputs[0]], s)
        elif isinstance(op, Slice):
            keys[op.name] = keys[op.inputs[0]][np.asarray(op.indices, dtype=np.int64)]
        elif isinstance(op, Concat):
            keys[op.name] = np.concatenate([keys[i] for i in op.inputs])
        elif isinstance(op, Attention):
            a = a_of[op.name]
            if op.is_self and op.source not in inserted:
                inserted.add(op.source)
                for k, ix in enumerate(base.indexes):
                    if ix.source == op.source:
                        src = keys[op.source]
                        kv = [an.make(int(c)) for c in src[ix.key_cols]]
                        vv = [an.make(int(c)) for c in src[ix.val_cols]]
                        ops.append((len(an.rows), I_INSERT, k, kv, vv))  # after the rows that make them
            h = keys[op.inputs[0]]
            lq, lu = _attention_layers(op, key_cols[op.name])
            net_rows += lq.n_out + lu.n_out
            scores = layer_keys(an, lu, layer_keys(an, lq, h, s), s)
            made = [an.make(int(k)) for k in scores]
            rows = op.value_rows()
            deltas = [an.new_value(vals, bound) for vals, bound in _delta_values(op, rows, s)]
            ops.append((len(an.rows), I_ATTN, a, made[:-1], made[-1], deltas))
            out = h.copy()
            if rows.size:
                n = rows.size
                m = SparseMatrix((n, h.size + n), np.repeat(np.arange(n), 2),
                                 np.stack([rows, h.size + np.arange(n)], axis=1).ravel(), np.ones(2 * n))
                dkeys = an.v_key.a[np.array(deltas, dtype=np.int64)]
                out[rows] = layer_keys(an, layer_of(m, np.zeros(n), False, f"{op.name}.residual"),
                                       np.concatenate([h, dkeys]), s)
            keys[op.name] = out
    o_name, tap_name = body.outputs
    o_vals = [an.make(int(k)) for k in keys[o_name]]
    tap_vals = [an.make(int(k)) for k in keys[tap_name]]
    if an.max_sum >= SUM_LIMIT:
        raise EngineRefused(f"a row's sum can reach {an.max_sum:,} (scaled by {s}), past the exact scores "
                            f"(2^40): run it with {FALLBACK}")
    return _layout(an, ops, o_vals, tap_vals, s, base, net_rows)


def _base(base: DecodeProgram, op: tuple, done: np.ndarray) -> tuple[int, int, int]:
    """An earlier attention of the step on the same index whose ``u`` registers over its
    positions, or over all but its last, are a prefix of this one's (the longest such):
    its pattern, ``Σ max(u_p, 0)`` and least ``|u_p|`` there (kept by the kernel at those
    two checkpoints) are this query's over those positions too, since a register is
    written once per step.  Claim C.5's layer j shares all but the bit it tests with layer
    j - 1, and the location bits with Claim C.4.  ``(NO_BASE, 0, 0)`` when there is none."""
    k = int(base.ameta[op[2], K.A_INDEX])
    best = (NO_BASE, 0, 0)
    for t in range(done.shape[0]):
        m = int(done[t, AI_META])
        if int(base.ameta[m, K.A_INDEX]) != k:
            continue
        n = int(base.ameta[m, K.A_DOP])
        for check, length in ((0, n), (1, n - 1)):
            if best[1] < length < len(op[3]) and list(done[t, AI_U:AI_U + length]) == list(op[3][:length]):
                best = (t, length, check)
    return best


def _layout(an: Analysis, ops: list[tuple], o_vals: list[int], tap_vals: list[int], s: int, base: DecodeProgram,
            net_rows: int) -> StepProgram:
    """The rows the outputs, queries and inserts depend on, in order, interleaved with the
    attentions and inserts; every made value keeps its own register (a few hundred
    float64: the whole state of a step stays in L1)."""
    need = set(o_vals) | set(tap_vals)
    for op in ops:
        need.update(op[3])
        if op[1] == I_INSERT:
            need.update(op[4])
        else:
            need.add(op[4])
    keep = []
    for r in range(len(an.rows) - 1, -1, -1):
        v, ins = an.rows[r][0], an.rows[r][1]
        if v in need:
            keep.append(r)
            need.update(ins)
    keep.reverse()
    ptr, col, wt, bias, relu, dst = [0], [], [], [], [], []
    instr: list[list[int]] = []
    n_attn = len(base.attn_names)
    a_regs = np.zeros((n_attn, AI_DELTA + max([1, *(len(op[5]) for op in ops if op[1] == I_ATTN)])), dtype=np.int64)
    ins_index, ins_key, ins_val = [], [], []
    n_v = max([1, *(len(op[4]) for op in ops if op[1] == I_INSERT)])
    attn_names = []
    pending = sorted(ops, key=lambda op: op[0])
    q = 0

    def flush_rows(upto: int) -> None:
        nonlocal q
        first = len(bias)
        while q < len(keep) and keep[q] < upto:
            v, ins, ws, b, rl = an.rows[keep[q]]
            col.extend(ins)
            wt.extend(ws)
            ptr.append(len(col))
            bias.append(b)
            relu.append(rl)
            dst.append(v)
            q += 1
        if len(bias) > first:
            instr.append([I_ROWS, first, len(bias)])

    for op in pending:
        flush_rows(op[0])
        if op[1] == I_ATTN:
            t = len(attn_names)
            a_regs[t, AI_META], a_regs[t, AI_THR] = op[2], op[4]
            a_regs[t, AI_BASE], a_regs[t, AI_FROM], a_regs[t, AI_CHECK] = _base(base, op, a_regs[:t])
            a_regs[t, AI_U:AI_U + len(op[3])] = op[3]
            a_regs[t, AI_DELTA:AI_DELTA + len(op[5])] = op[5]
            attn_names.append(base.attn_names[op[2]])
            instr.append([I_ATTN, t, 0])
        else:
            row_k = np.zeros(64, dtype=np.int64)
            row_k[:len(op[3])] = op[3]
            row_v = np.zeros(n_v, dtype=np.int64)
            row_v[:len(op[4])] = op[4]
            instr.append([I_INSERT, len(ins_index), 0])
            ins_index.append(op[2])
            ins_key.append(row_k)
            ins_val.append(row_v)
    flush_rows(len(an.rows))
    u = np.uint64
    n_t = len(attn_names)
    return StepProgram(
        s, int(an.v_vals.n), np.asarray(instr, dtype=u).reshape(-1, 3), np.asarray(ptr, dtype=u),
        np.asarray(col, dtype=u), np.asarray(wt, dtype=np.float64), np.asarray(bias, dtype=np.float64),
        np.asarray(relu, dtype=np.bool_), np.asarray(dst, dtype=u), a_regs[:n_t].astype(u), np.asarray(ins_index, dtype=u),
        np.asarray(ins_key, dtype=u).reshape(-1, 64), np.asarray(ins_val, dtype=u).reshape(-1, n_v),
        np.asarray(o_vals, dtype=u), np.asarray(tap_vals, dtype=u), net_rows, len(bias), attn_names)

