"""A compiled transformer's network IR as flat programs for the index engine's kernels
(:mod:`.decode_kernel`): the decoder body and its prologue, their weights in two pools,
and the hard-max indexes their attention ops query.

Nothing is re-derived here: every number in the pools is a weight, bias, key, value or
null entry of the network IR (Wei, Chen & Ma §4.1 / App. C as built by
:mod:`tm2nn.backends.transformer.build`), laid out for the kernel.  The layout choices:

* every value of a net gets its own slot of the workspace; an Affine read only by the
  ReLU after it runs as one instruction (the ReLU's value is the Affine's slot); an
  Affine → ReLU → Affine block whose every output depends on one input coordinate
  (Prop. 3.4's round) is one instruction that looks its value up at inputs 0 and 1,
  precomputed with the kernel's own operations, and computes it at any other input;
* the attention ops over one source (the decoder memory, or one history) are grouped in
  *chains* whose key supports are nested (Claim C.4 reads ``pos2``, Claim C.5's layer j
  ``pos2`` and the first j + 1 bits of ``pos1``, Claim C.6 all of ``pos2, pos1``): one
  index per chain, its key bits ordered so that every op's support is a prefix.  Ops
  that do not nest get an index of their own (correct either way, only more inserts);
* an op's support is the set of source coordinates its key map reads (``W_k``'s nonzero
  columns), so its score is a weighted sum of those bits alone.

A model the engine cannot run exactly is refused here, with the reason: softmax
attention, a key support over 64 bits, an op the kernels do not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tm2nn.backends.transformer.engines import decode_kernel as K
from tm2nn.backends.transformer.engines.decode_kernel import (
    A_WIDTH,
    OP_AFFINE,
    OP_ATTN,
    OP_GATHER,
    OP_INSERT,
    OP_RELU,
    PROG_WIDTH,
)
from tm2nn.backends.transformer.engines.hardmax_index import (
    IM_CAP,
    IM_D,
    IM_HIST,
    IM_KEYCOLS,
    IM_LEAF0,
    IM_NODE0,
    IM_NV,
    IM_VALCOLS,
    IM_VSL0,
    IM_VSN0,
    IM_WIDTH,
    MAX_KEY_BITS,
)
from tm2nn.engines import EngineRefused
from tm2nn.nets import Affine, Attention, Concat, Decode, Embed, Net, ReLU, Slice
from tm2nn.nets.positions import BinaryPositions

#: the history id of an index over the decoder memory (``IndexSpec.hist``)
MEMORY = -1


@dataclass
class IndexSpec:
    """One hard-max index: over the decoder ``memory`` or the history of ``source``."""

    source: str                 # "memory" or a body value
    hist: int                   # history id, or MEMORY
    key_cols: list[int]         # source coordinates, bit position p = key_cols[p]
    val_cols: list[int]         # source coordinates whose sums the index keeps
    ops: list[str] = field(default_factory=list)


@dataclass
class NetProgram:
    """One net (body or prologue) as kernel instructions."""

    iprog: np.ndarray           # [n, PROG_WIDTH] uint64
    x_off: int
    o_off: int
    tap_off: int
    tap_w: int
    w: int                      # width of x (and o)
    #: value -> (offset, width) for the values that hold their slot at the end of a run
    #: (an Affine fused with its ReLU, or an h updated in place, gives its slot to the later value)
    slots: dict = field(default_factory=dict)


@dataclass
class DecodeProgram:
    """Everything the driver needs (:class:`.index_engine.IndexEngine`)."""

    body: NetProgram
    prologue: NetProgram
    fdata: np.ndarray
    idata: np.ndarray
    ameta: np.ndarray           # [n_attn, A_WIDTH] uint64
    attn_names: list[str]
    indexes: list[IndexSpec]
    ws_size: int
    steps: int
    init: np.ndarray
    pos_kind: int               # 1 binary code, 2 table
    pos_offset: int
    pos_cols: np.ndarray
    pos_table: np.ndarray       # [steps, w] (pos_kind 2) or [1, 1]
    embed: Embed
    key_cols_off: list[int]     # idata offsets of each index's key / value columns
    val_cols_off: list[int]


class _Pool:
    """One growing pool (weights: float64, indices: int64); ``add`` returns the offset."""

    def __init__(self, dtype) -> None:
        self.dtype = dtype
        self.parts: list[np.ndarray] = []
        self.size = 0

    def add(self, a) -> int:
        a = np.asarray(a, dtype=self.dtype).ravel()
        self.parts.append(a)
        self.size += a.size
        return self.size - a.size

    def array(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(1, dtype=self.dtype)


class _Pools:
    """The program's two pools: ``fdata`` (float64) and ``idata`` (indices)."""

    def __init__(self) -> None:
        self.f, self.i = _Pool(np.float64), _Pool(np.int64)
        self.fadd, self.iadd = self.f.add, self.i.add

    def separable(self, a: Affine, b: Affine, rows: list, relu: bool) -> tuple[int, int]:
        """A separable block (:func:`_separable`): per output row ``(input column, number of
        terms, offset of [b_B, (b_A, w_A, w_B) per term])`` in ``idata``, and its values at
        inputs 0 and 1 (computed as the kernel computes them, :func:`separable_value`) in
        ``fdata``: the kernel looks those up, and computes any other input."""
        a_bias, a_w = a.bias, np.zeros(a.weight.shape[0])
        a_w[a.weight.rows] = a.weight.vals
        desc, table = [], []
        start = np.searchsorted(b.weight.rows, np.arange(b.weight.shape[0] + 1))
        for r, (c, js) in enumerate(rows):
            wbs = b.weight.vals[start[r]:start[r + 1]]
            terms = [(float(a_bias[j]), float(a_w[j]), float(w)) for j, w in zip(js, wbs)]
            desc += [c, len(terms), self.fadd([b.bias[r], *[v for t in terms for v in t]])]
            table += [separable_value(b.bias[r], terms, 0.0, relu), separable_value(b.bias[r], terms, 1.0, relu)]
        return self.iadd(desc), self.fadd(table)

    def row_groups(self, m) -> tuple[int, int]:
        """A sparse matrix as groups of rows with the same number of entries ``k``: per
        group ``(k, n, rows, cols, vals)`` (offsets), the entries of each row in column
        order.  Returns the groups' descriptor offset and their count."""
        order = np.lexsort((m.cols, m.rows))
        rows, cols, vals = m.rows[order], m.cols[order], m.vals[order]
        counts = np.bincount(rows, minlength=m.shape[0])
        start = np.concatenate([[0], np.cumsum(counts)])
        desc: list[int] = []
        for k in sorted(set(counts.tolist())):
            rs = np.flatnonzero(counts == k)
            idx = (start[rs][:, None] + np.arange(k)[None, :]).ravel()
            desc += [k, rs.size, self.iadd(rs if rs.size else [0]), self.iadd(cols[idx] if idx.size else [0]),
                     self.fadd(vals[idx] if idx.size else [0.0])]
        return self.iadd(desc if desc else [0]), len(desc) // 5

    def csr(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n_rows: int) -> tuple[int, int, int]:
        """Row-major entries: per row ``r``, columns and values from ``ptr[r]`` to
        ``ptr[r + 1]``, columns ascending (the order each row sums its terms in)."""
        order = np.lexsort((cols, rows))
        rows, cols, vals = rows[order], cols[order], vals[order]
        ptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.add.at(ptr, rows + 1, 1)
        return self.iadd(np.cumsum(ptr)), self.iadd(cols if cols.size else [0]), self.fadd(vals if vals.size else [0.0])


def _separable(a: Affine, b: Affine) -> list[tuple[int, list[int]]] | None:
    """``B ∘ ReLU ∘ A`` as one function per output coordinate: for each row of B, the one
    input coordinate of A that all the A rows it reads read, and those A rows (in B's
    column order).  None unless every A row has exactly one entry and no B row mixes two
    input coordinates.  Prop. 3.4's round is such a block: ``round(z) = 3φ(z − 1/3) −
    3φ(z − 2/3)`` per coordinate."""
    wa, wb = a.weight, b.weight
    if np.any(np.bincount(wa.rows, minlength=wa.shape[0]) != 1):
        return None
    col = np.empty(wa.shape[0], dtype=np.int64)
    col[wa.rows] = wa.cols
    out = []
    start = np.searchsorted(wb.rows, np.arange(wb.shape[0] + 1))
    for r in range(wb.shape[0]):
        js = wb.cols[start[r]:start[r + 1]]
        cs = set(col[js].tolist())
        if len(cs) > 1:
            return None
        out.append((cs.pop() if cs else 0, js.tolist()))
    return out


def separable_value(bias_b: float, terms: list[tuple[float, float, float]], x: float, relu: bool) -> float:
    """One output of a separable block at input ``x``, with the kernel's operations in the
    kernel's order (float64, no fused multiply-add): ``y = b_B``, then for each term
    ``y += w_B · φ(b_A + w_A x)``, then ``φ(y)`` when fused."""
    y = np.float64(bias_b)
    for ba, wa, wb in terms:
        t = np.float64(ba) + np.float64(wa) * np.float64(x)
        t = np.float64(0.0) if t < 0.0 else t
        y = y + np.float64(wb) * t
    if relu and y < 0.0:
        y = np.float64(0.0)
    return float(y)


def _support(m) -> list[int]:
    """The input coordinates a sparse map reads (nonzero columns), ascending."""
    return sorted({int(c) for c in m.cols[m.vals != 0]})


def _value_cols(op: Attention) -> list[int]:
    rows = op.value_rows()
    keep = np.isin(op.wv.rows, rows) & (op.wv.vals != 0)
    return sorted({int(c) for c in op.wv.cols[keep]})


def _chains(ops: list[Attention]) -> list[list[Attention]]:
    """Group ops whose key supports nest (each a superset of the one before)."""
    chains: list[list[Attention]] = []
    for op in sorted(ops, key=lambda o: len(_support(o.wk))):
        s = set(_support(op.wk))
        for ch in chains:
            if set(_support(ch[-1].wk)) <= s:
                ch.append(op)
                break
        else:
            chains.append([op])
    return chains


def _key_order(chain: list[Attention]) -> list[int]:
    """Key bits: each op's new support coordinates after the previous op's, ascending."""
    order: list[int] = []
    for op in chain:
        order += [c for c in _support(op.wk) if c not in order]
    return order


def decode_ops(net: Net) -> tuple[Embed, Decode]:
    """The encoder and decoder of a compiled transformer (``Embed`` -> ``Decode``)."""
    ops = list(net.nodes)
    if (len(ops) != 2 or not isinstance(ops[0], Embed) or not isinstance(ops[1], Decode)
            or ops[1].inputs != (ops[0].name,) or tuple(net.outputs) != (ops[1].name,)):
        raise EngineRefused("the index engine runs an encoder-decoder transformer (an Embed feeding a Decode, "
                            f"as the transformer backend builds it); net {net.name!r} is not one")
    return ops[0], ops[1]


def build_program(net: Net, separable: bool = True) -> DecodeProgram:
    """The programs, pools and index plan of a compiled transformer (see the module doc).
    ``separable=False`` runs Prop. 3.4's corrections as their two affine layers (every
    intermediate in the workspace, for tests) instead of one looked-up instruction."""
    embed, dec = decode_ops(net)
    for part in (dec.prologue, dec.body):
        for op in part.nodes:
            if isinstance(op, Attention) and op.mode != "hardmax":
                raise EngineRefused(f"the index engine runs hard-max attention; {op.name!r} uses softmax "
                                    f"(beta {op.beta:g}): run this model with the torch or onnxruntime engine")
            if not isinstance(op, (Affine, ReLU, Attention, Slice, Concat)):
                raise EngineRefused(f"the index engine does not run {op.kind} ops ({op.name!r}); "
                                    "run this model with the torch or onnxruntime engine")
    pools = _Pools()
    ws = [0]

    def slot(width: int) -> int:
        off = ws[0]
        ws[0] += int(width)
        return off

    # the indexes: memory chains over the prologue's and body's cross-attention, one set of
    # chains per history source of the body
    mem_name_p, mem_name_b = dec.prologue.inputs[1].name, dec.body.inputs[1].name
    cross = [op for net_, mname in ((dec.prologue, mem_name_p), (dec.body, mem_name_b))
             for op in net_.nodes if isinstance(op, Attention) and not op.is_self]
    for op in cross:
        if op.source not in (mem_name_p, mem_name_b):
            raise EngineRefused(f"the index engine attends over the decoder memory only; {op.name!r} attends "
                                f"over {op.source!r}")
    indexes: list[IndexSpec] = []
    op_index: dict[str, int] = {}

    def add_chains(ops: list[Attention], source: str, hist: int) -> None:
        for ch in _chains(ops):
            keys = _key_order(ch)
            if len(keys) > MAX_KEY_BITS:
                raise EngineRefused(f"the index engine keeps keys of at most {MAX_KEY_BITS} bits; attention "
                                    f"{ch[-1].name!r} reads {len(keys)} coordinates")
            vals = sorted({c for op in ch for c in _value_cols(op)})
            indexes.append(IndexSpec(source, hist, keys, vals, [op.name for op in ch]))
            for op in ch:
                op_index[op.name] = len(indexes) - 1

    add_chains(cross, "memory", MEMORY)
    sources: list[str] = []
    for op in dec.body.nodes:
        if isinstance(op, Attention) and op.is_self and op.source not in sources:
            sources.append(op.source)
    for h, src in enumerate(sources):
        add_chains([op for op in dec.body.nodes if isinstance(op, Attention) and op.is_self and op.source == src],
                   src, h)
    key_off = [pools.iadd(ix.key_cols) for ix in indexes]
    val_off = [pools.iadd(ix.val_cols if ix.val_cols else [0]) for ix in indexes]

    ameta: list[np.ndarray] = []
    names: list[str] = []

    def attention(op: Attention) -> int:
        ix = indexes[op_index[op.name]]
        dk, w = op.wq.shape
        row = np.zeros(A_WIDTH, dtype=np.int64)
        dop = len(_support(op.wk))
        row[K.A_INDEX], row[K.A_DOP], row[K.A_DK] = op_index[op.name], dop, dk
        row[K.A_WQ_PTR], row[K.A_WQ_COLS], row[K.A_WQ_VALS] = pools.csr(op.wq.rows, op.wq.cols, op.wq.vals, dk)
        row[K.A_BQ] = pools.fadd(op.bq)
        # W_k by key position: u_p = Σ_r W_k[r, key_cols[p]] q_r
        pos = {c: p for p, c in enumerate(ix.key_cols[:dop])}
        keep = np.array([int(c) in pos for c in op.wk.cols], dtype=bool)
        kp = np.array([pos[int(c)] for c in op.wk.cols[keep]], dtype=np.int64)
        row[K.A_WK_PTR], row[K.A_WK_Q], row[K.A_WK_VALS] = pools.csr(kp, op.wk.rows[keep], op.wk.vals[keep], dop)
        row[K.A_BK] = pools.fadd(op.bk)
        row[K.A_K0] = pools.fadd(op.null_key)
        rows = op.value_rows()
        row[K.A_NROWS] = rows.size
        row[K.A_ROWS] = pools.iadd(rows if rows.size else [0])
        slot_of = {c: v for v, c in enumerate(ix.val_cols)}
        ptr, slots, vals = [0], [], []
        for r in rows:
            m = (op.wv.rows == r) & (op.wv.vals != 0)
            for c, v in zip(op.wv.cols[m], op.wv.vals[m]):
                slots.append(slot_of[int(c)])
                vals.append(float(v))
            ptr.append(len(slots))
        row[K.A_WV_PTR] = pools.iadd(ptr)
        row[K.A_WV_SLOT] = pools.iadd(slots if slots else [0])
        row[K.A_WV_VALS] = pools.fadd(vals if vals else [0.0])
        row[K.A_BV] = pools.fadd(op.bv[rows] if rows.size else [0.0])
        row[K.A_NULLV] = pools.fadd(op.null_value[rows] if rows.size else [0.0])
        has_v = bool(op.wv.nnz and np.any(op.wv.vals != 0))
        row[K.A_FLAGS] = ((K.FLAG_V if has_v else 0) | (K.FLAG_BV if np.any(op.bv[rows] != 0) else 0)
                          | (K.FLAG_NV if np.any(op.null_value[rows] != 0) else 0))
        ameta.append(row)
        names.append(op.name)
        return len(ameta) - 1

    def program(part: Net, x_width: int, hist_ids: dict[str, int] | None) -> NetProgram:
        at: dict[str, tuple[int, int]] = {}
        x = part.inputs[0].name
        at[x] = (slot(x_width), x_width)
        readers: dict[str, int] = {}
        for op in part.nodes:
            for i in op.inputs:
                readers[i] = readers.get(i, 0) + 1
        outs = set(part.outputs)
        fused: dict[str, str] = {}  # ReLU value -> the Affine whose slot it shares
        for k, op in enumerate(part.nodes[:-1]):
            nxt = part.nodes[k + 1]
            if (isinstance(op, Affine) and isinstance(nxt, ReLU) and nxt.inputs == (op.name,)
                    and readers.get(op.name, 0) == 1 and op.name not in outs):
                fused[nxt.name] = op.name
        fused_affines = set(fused.values())
        # Affine A -> ReLU -> Affine B where each row of B depends on one coordinate of A's
        # input (Prop. 3.4's round): one instruction, no intermediate (see _separable)
        blocks: dict[str, tuple[Affine, list]] = {}
        k = 0
        while separable and k + 2 < len(part.nodes):
            op, r, b = part.nodes[k], part.nodes[k + 1], part.nodes[k + 2]
            rows = None
            if (op.name in fused_affines and r.name in fused and isinstance(b, Affine)
                    and b.inputs == (r.name,) and readers.get(r.name, 0) == 1 and r.name not in outs):
                rows = _separable(op, b)
            if rows is not None:
                blocks[b.name] = (op, rows)
                k += 3  # blocks do not overlap: B is evaluated, never folded into the next block
            else:
                k += 1
        skip = {n for a, _rows in blocks.values() for n in (a.name, *[f for f, g in fused.items() if g == a.name])}
        inserted: set[str] = set()
        prog: list[list[int]] = []
        for op in part.nodes:
            width = len(part.spaces[op.name])
            if op.name in skip:
                continue
            if op.name in fused:
                at[op.name] = at[fused[op.name]]
                continue
            h = op.inputs[0]
            if isinstance(op, Attention) and readers.get(h, 0) == 1 and h not in outs and h != x:
                at[op.name] = at[h]  # nothing else reads h: add the attended values in place
            else:
                at[op.name] = (slot(width), width)
            out = at[op.name][0]
            if op.name in blocks:
                a, rows = blocks[op.name]
                relu = op.name in fused_affines
                desc, table = pools.separable(a, op, rows, relu)
                prog.append([K.OP_SEPARABLE, at[a.inputs[0]][0], width, out, desc, table, 0, 0, 0, int(relu)])
            elif isinstance(op, Affine):
                i_off, i_w = at[op.inputs[0]]
                groups, n_groups = pools.row_groups(op.weight)
                prog.append([OP_AFFINE, i_off, i_w, out, n_groups, groups, 0, 0, pools.fadd(op.bias),
                             int(op.name in fused_affines)])
            elif isinstance(op, ReLU):
                prog.append([OP_RELU, at[op.inputs[0]][0], width, out])
            elif isinstance(op, Slice):
                prog.append([OP_GATHER, at[op.inputs[0]][0], width, out, pools.iadd(op.indices or [0])])
            elif isinstance(op, Concat):
                o = out
                for i in op.inputs:
                    i_off, i_w = at[i]
                    prog.append([OP_GATHER, i_off, i_w, o, pools.iadd(np.arange(max(1, i_w)))])
                    o += i_w
            elif isinstance(op, Attention):
                h_off, h_w = at[op.inputs[0]]
                if op.is_self:
                    if op.source not in inserted:  # this step's vector joins the history
                        prog.append([OP_INSERT, at[op.source][0], hist_ids[op.source]])
                        inserted.add(op.source)
                prog.append([OP_ATTN, h_off, h_w, out, attention(op)])
        iprog = np.zeros((len(prog), PROG_WIDTH), dtype=np.uint64)
        for t, row in enumerate(prog):
            iprog[t, :len(row)] = row
        o_name, tap_name = part.outputs
        owner = {off: name for name, (off, _w) in at.items()}  # the last value written to each slot
        slots = {name: at[name] for name in owner.values()}
        return NetProgram(iprog, at[x][0], at[o_name][0], at[tap_name][0], at[tap_name][1], x_width, slots)

    w = len(dec.body.inputs[0].space)
    prologue = program(dec.prologue, len(dec.init), None)
    body = program(dec.body, w, {src: h for h, src in enumerate(sources)})
    if isinstance(dec.positions, BinaryPositions):
        p = dec.positions
        pos_kind, pos_offset, pos_cols, table = 1, p.offset, np.array(p.columns, dtype=np.uint64), np.zeros((1, 1))
    else:
        pos_kind, pos_offset, pos_cols = 2, 0, np.zeros(1, dtype=np.uint64)
        table = np.ascontiguousarray(dec.positions, dtype=np.float64)
    fdata, idata = pools.f.array(), pools.i.array().astype(np.uint64)
    am = (np.stack(ameta) if ameta else np.zeros((0, A_WIDTH), dtype=np.int64)).astype(np.uint64)
    return DecodeProgram(body, prologue, fdata, idata, am, names, indexes, ws[0], int(dec.steps), dec.init,
                         pos_kind, int(pos_offset), pos_cols, table, embed, key_off, val_off)


def imeta_for(prog: DecodeProgram, memory_length: int, steps: int) -> tuple[np.ndarray, dict]:
    """``imeta`` for one input (capacities: the memory's length, or one item per decoder
    step) and the pool sizes it needs."""
    im = np.zeros((len(prog.indexes), IM_WIDTH), dtype=np.uint64)
    leaves = nodes = vsl = vsn = 0
    for k, ix in enumerate(prog.indexes):
        cap = max(1, memory_length if ix.hist == MEMORY else steps)
        nv = len(ix.val_cols)
        im[k, IM_D], im[k, IM_NV], im[k, IM_CAP], im[k, IM_HIST] = len(ix.key_cols), nv, cap, ix.hist + 1
        im[k, IM_LEAF0], im[k, IM_NODE0], im[k, IM_VSL0], im[k, IM_VSN0] = leaves, nodes, vsl, vsn
        im[k, IM_KEYCOLS], im[k, IM_VALCOLS] = prog.key_cols_off[k], prog.val_cols_off[k]
        leaves += cap
        nodes += cap
        vsl += cap * nv
        vsn += cap * nv
    return im, {"leaves": leaves, "nodes": nodes, "vs": max(1, vsl), "vsn": max(1, vsn)}
