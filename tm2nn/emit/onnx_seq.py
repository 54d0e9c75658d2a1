"""The ONNX emitters of the sequence ops (:mod:`tm2nn.nets.ops`: Wei, Chen & Ma §4.1 and
App. C), one table entry each (:func:`~tm2nn.emit.onnx_graph.onnx_emitter`; conventions in
:mod:`tm2nn.emit.onnx_graph`).

``Attention`` ``X`` (cross): the query, key and value maps are affine maps in the same
three forms (initializers ``X.wq``/``X.bq``, ``X.wk``/``X.bk``, ``X.wv``/``X.bv``; an ELL
map ``X.wq`` has ``X.wq.cols.<j>`` and ``X.wq.<j>``), applied to a sequence ``[L, w, B]``
with ``Gather`` axis 1 or an ``Einsum`` (onnxruntime's broadcasting ``MatMul`` rejects
an empty sequence).  Values are computed only on the rows ``op.value_rows()`` (``dv`` of
them; ``X.wv``, ``X.bv`` and ``X.null_value`` hold those rows only).  Scores are
``ReduceSum(K * q)`` ``[L, B]``, with the null key's score ``MatMul(X.null_key, q)``
concatenated in front; ``hardmax`` takes ``Equal(score, ReduceMax(score))`` (exact, ties
averaged by dividing by the count), ``softmax`` a ``Softmax`` over axis 0 of
``beta * score``.  The weighted values ``[dv, B]`` are added to ``h``'s rows with
``GatherND`` / ``Add`` / ``ScatterND`` (indices ``X.rows`` ``[dv, 1]``; a plain ``Add``
when the rows are all of ``h``), so the output costs ``O(width)``.

``Attention`` ``X`` (self, over the history of ``src``: its own input or ``inputs[1]``):
no keys or values are stored.  The history holds the coordinates ``cols`` of ``src``
that K and V read (``Decode.histories()``: one history per ``src``, shared by every op
over it), at every step so far, in one or two parts ``H_p`` ``[B, c_p, n]``
(:func:`_history_parts`): the columns some op's keys read, then (where that saves at
least :data:`SPLIT_MIN_READS` reads per column and step) those only values read.  The
first op over ``src`` in a step appends ``src[cols_p]`` to each part (``X/history``,
``X/history.v``: a ``Concat`` on axis 2, initializers ``X.cols``, ``X.cols.v``); every op
of the step reads those values directly.  Scores are ``MatMul((W_k[:, cols_0]ᵀ q)ᵀ, H_0)``
(``X.wk_t``: the keys read the first part only), plus ``b_k·q`` (``X.bk``), which only
matters against the null's score.  Hard-max: the items with the top score win
when it is at least the null's, the null wins when its score is at least theirs.  When V
reads the history (``X.wv`` ``[dv, c_p]`` per part it reads) the winners' mask ``[B, n]``
is counted and ``MatMul(H_p, mask)`` is scaled by the items' share.  Otherwise only the
items' share is needed: it is ``live`` (0 or 1) unless the null's score equals the best
item's in some batch row, and only then does an ``If`` (``X/n_items``) count the ties
(``Equal``, ``Cast``, ``ReduceSum``: the one O(n) step it skips), as the torch emitter
does.  Per step and op the O(n) work is the scores ``MatMul`` and ``ReduceMax``; per step
and history, one ``Concat`` (onnxruntime writes no loop-carried buffer in place: a
``ScatterND`` into a preallocated ``[B, c, steps]`` history copies all of it every step,
which measured slower).  Outside a decoder body the history is the current ``src`` alone.

``Embed`` ``X``: ``Slice`` the tokens to ``max_len``, ``Gather`` rows of ``X.table``, add
the first ``L`` rows of ``X.positions`` and transpose to ``[L, w, B]``.

``Decode`` ``X``: the prologue runs on ``Expand(X.init)``; then one ONNX ``Loop``
``X`` with trip count ``X.steps`` whose body adds ``β(iter + 1)`` to the carried ``o`` and
runs the body net.  ``β`` is a table row (``Gather`` on ``X.positions``) or, for a
:class:`~tm2nn.nets.BinaryPositions`, computed from the iteration number: ``Div`` by
powers of two, ``Mod 2``, and a ``[w, bits]`` placement matrix (the same for ``Embed``).
The loop carries ``o`` and each part of each attended history, starting empty
(``ConstantOfShape`` ``[B, c_p, 0]``).  The taps are the loop's scan output, with ``tap_0``
concatenated in front: ``[steps + 1, tap_w, B]``.  The keys and values of the body's
cross-attention over the decoder memory are computed once, before the loop.  With binary
positions nothing in the model depends on ``steps`` but the trip count.
:func:`tm2nn.emit.onnx_model.to_onnx_step` emits one body step on its own, for callers that drive the decoding
themselves.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tm2nn.emit import STEP_BATCH
from tm2nn.emit.onnx_graph import (
    _INT64_MAX,
    BATCH,
    _DecodeCtx,
    _Emitter,
    _fm_info,
    _matrix_form,
    matrix_bytes,
    onnx_emitter,
    weight_bytes,
)
from tm2nn.nets import Attention, BinaryPositions, Decode, Embed, NetIRError, SparseMatrix


def _value_map(op: Attention) -> tuple[np.ndarray, SparseMatrix, np.ndarray, np.ndarray]:
    """``(rows, wv, bv, null_value)`` restricted to ``op.value_rows()``."""
    rows = op.value_rows()
    remap = np.full(op.wv.shape[0], -1, dtype=np.int64)
    remap[rows] = np.arange(rows.size)
    w = op.wv
    wv = SparseMatrix((rows.size, w.shape[1]), remap[w.rows], w.cols, w.vals)
    return rows, wv, op.bv[rows], op.null_value[rows]


#: Name suffixes of a history's parts (:func:`_history_parts`): the columns some key reads,
#: then those only values read.
_PART_TAGS = ("", ".v")


def _part_tag(p: int) -> str:
    return _PART_TAGS[p]


#: Split a history into parts (:func:`_history_parts`) where that saves at least this many
#: float reads per history column and step: a part costs four small nodes per step
#: (gather, transpose, unsqueeze, append), about 2 µs in onnxruntime, which this many
#: reads per column pay for at about a thousand past steps.
SPLIT_MIN_READS = 32


def _history_parts(decode: Decode) -> dict[str, list[np.ndarray]]:
    """Each attended history's columns (``Decode.histories()``) in parts, each carried as
    its own ``[B, c_p, n]`` value: the columns some op's keys read, then those only values
    read, so that scoring reads no value-only column and values that read only those read
    no key column.  One part where there is nothing to split or the split saves fewer than
    :data:`SPLIT_MIN_READS` reads per history column and step.  Depends on the weights
    only (not on ``steps``)."""
    out: dict[str, list[np.ndarray]] = {}
    for src, cols in decode.histories().items():
        ops = [op for op in decode.body.nodes if isinstance(op, Attention) and op.is_self and op.source == src]
        keyed = {int(c) for op in ops for c in op.wk.cols[op.wk.vals != 0]}
        k = np.array([c for c in cols if c in keyed], dtype=np.int64)
        v = np.array([c for c in cols if c not in keyed], dtype=np.int64)
        saved = 0
        for op in ops:
            if not op.value_rows().size:  # an identity: reads nothing
                continue
            saved += v.size  # its scores read the key part only
            vcols = {int(c) for c in op.wv.cols[op.wv.vals != 0]}
            if vcols and not vcols & keyed:
                saved += k.size  # its values read the value part only
        out[src] = [k, v] if k.size and v.size and saved >= SPLIT_MIN_READS else [cols]
    return out


def _attention_bytes(op: Attention, batch: int) -> int:
    _, wv, _, _ = _value_map(op)
    dk, dv = op.key_width, wv.shape[0]
    if op.is_self:  # wq; wk_t [c, dk], bk, wv [dv, c], bv; null key/value; cols, rows
        c = op.memory_columns().size
        return (matrix_bytes(op.wq, _matrix_form(op.wq, batch)) + 4 * dk
                + 4 * (c * dk + dk + dv * c + dv) + 4 * (dk + dv) + 8 * (c + dv))
    total = sum(matrix_bytes(w, _matrix_form(w, batch)) + 4 * w.shape[0] for w in (op.wq, op.wk, wv))  # + the bias
    return total + 4 * dk + 12 * dv  # null key, null value, rows


def _position_entries(p) -> int:
    return p.placement().size if isinstance(p, BinaryPositions) else p.size


def _decode_bytes(op: Decode, batch: int) -> int:
    return (4 * (op.init.size + _position_entries(op.positions))
            + weight_bytes(op.prologue, STEP_BATCH) + weight_bytes(op.body, STEP_BATCH))


def memory_kv(em: _Emitter, op: Attention, out: list, mem: str, base: str) -> tuple[str, str]:
    """Keys ``[L, dk, B]`` and values ``[L, dv, B]`` of a cross-attention's memory."""
    _, wv, bv, _ = _value_map(op)
    ks = em.matrix_steps(op.wk, op.bk, mem, base, _matrix_form(op.wk, em.batch), ("wk", "wk.cols", "bk"), "k.", axis=1)
    vs = em.matrix_steps(wv, bv, mem, base, _matrix_form(wv, em.batch), ("wv", "wv.cols", "bv"), "v.", axis=1)
    got = em.steps(out, base, None, ks + vs, op.cite, bare=False)
    return got[ks[-1][0]], got[vs[-1][0]]


@onnx_emitter(Attention, weight_bytes=_attention_bytes)
def emit_attention(em: _Emitter, op: Attention, out: list, ins: list[str], base: str, final: str,
                   ctx: _DecodeCtx | None) -> None:
    if op.is_self:
        history_attention(em, op, out, ins, base, final, ctx)
        return
    h = ins[0]
    width = op.wv.shape[0]
    rows, wv, bv, nv = _value_map(op)
    dv = rows.size
    if dv == 0:  # no value can change anything
        em.steps(out, base, final, [("identity", "Identity", [h], {})], op.cite)
        return
    if ctx is not None and op.name in ctx.cross:
        keys, vals = ctx.cross[op.name]
    else:
        keys, vals = memory_kv(em, op, out, ins[1], base)
    s: list = []
    s += em.matrix_steps(op.wq, op.bq, h, base, _matrix_form(op.wq, em.batch), ("wq", "wq.cols", "bq"), "q.")
    q = "@" + s[-1][0]
    s.append(("scores.mul", "Mul", [keys, q], {}))
    s.append(em.reduce("scores", "ReduceSum", "@scores.mul", base, 1, 0))                 # [L, B]
    s.append(("null_score", "MatMul", [em.init(f"{base}.null_key", em.floats(op.null_key[None, :])), q], {}))
    s.append(("logits", "Concat", ["@null_score", "@scores"], {"axis": 0}))                 # [1 + L, B]
    if op.mode == "hardmax":
        s.append(em.reduce("max", "ReduceMax", "@logits", base, 0, 1))
        s.append(("argmax", "Equal", ["@logits", "@max"], {}))
        s.append(("mask", "Cast", ["@argmax"], {"to": em.elem}))
        s.append(em.reduce("count", "ReduceSum", "@mask", base, 0, 1))
        s.append(("weights", "Div", ["@mask", "@count"], {}))
    else:
        s.append(("scaled", "Mul", ["@logits", em.init(f"{base}.beta", em.scalar(op.beta))], {}))
        s.append(("weights", "Softmax", ["@scaled"], {"axis": 0}))
    zero, one = em.ints(base, 0), em.ints(base, 1)
    s.append(("item_weights", "Slice", ["@weights", one, em.ints(base, _INT64_MAX), zero], {}))
    s.append(("item_weights.unsqueeze", "Unsqueeze", ["@item_weights", one], {}))  # [L, 1, B]
    s.append(("mix.mul", "Mul", [vals, "@item_weights.unsqueeze"], {}))
    s.append(em.reduce("mix", "ReduceSum", "@mix.mul", base, 0, 0))                     # [dv, B]
    delta = "@mix"
    if np.any(nv != 0):
        s.append(("null_weight", "Slice", ["@weights", zero, one, zero], {}))
        s.append(("null_mix", "Mul", [em.init(f"{base}.null_value", em.floats(nv[:, None])), "@null_weight"], {}))
        s.append(("delta", "Add", ["@mix", "@null_mix"], {}))
        delta = "@delta"
    s += residual(em, h, delta, rows, width, base)
    em.steps(out, base, final, s, op.cite, bare=False)


def residual(em: _Emitter, h: str, delta: str, rows: np.ndarray, width: int, base: str) -> list:
    """Steps adding ``delta`` ``[dv, B]`` to ``h``'s ``rows`` (all of them: a plain Add)."""
    if rows.size == width:  # value_rows() is sorted, so these are all of h's rows in order
        return [("residual", "Add", [h, delta], {})]
    idx = em.init(f"{base}.rows", rows[:, None].astype(np.int64))
    return [("rows", "GatherND", [h, idx], {}),
            ("rows.add", "Add", ["@rows", delta], {}),
            ("scatter", "ScatterND", [h, idx, "@rows.add"], {})]


def history_attention(em: _Emitter, op: Attention, out: list, ins: list[str], base: str, final: str,
                      ctx: _DecodeCtx | None) -> None:
    """Self-attention over the history of ``op.source`` (see the module docstring): the
    history is one or more parts ``[B, c_p, n]``; the keys read the parts their
    columns are in, the values theirs."""
    h, src = ins[0], ins[-1]  # op.source is the last input
    width = op.wv.shape[0]
    rows, _wv, _bv, nv = _value_map(op)
    bv = op.bv[rows]
    has_v = bool(op.wv.nnz and np.any(op.wv.vals != 0))
    cached = ctx is not None and op.source in ctx.histories
    parts = ctx.parts[op.source] if cached else [op.memory_columns()]
    got: dict[str, str] = {}

    def emit(steps: list, value: str | None = None) -> None:
        got.update(em.steps(out, base, value, steps, op.cite, bare=False, known=got))

    if not (has_v or np.any(bv != 0) or np.any(nv != 0)):  # no value can change anything
        if cached and op.source not in ctx.new_histories:
            ctx.new_histories[op.source] = append_history(em, op.source, parts, src, base, emit, got, ctx)
        emit([("identity", "Identity", [h], {})], final)
        return
    if cached and op.source in ctx.new_histories:
        hist = ctx.new_histories[op.source]
    else:
        hist = append_history(em, op.source if cached else None, parts, src, base, emit, got, ctx)
        if cached:
            ctx.new_histories[op.source] = hist
    wk = op.wk.dense()
    # Constants are made where a step reads them: an initializer no node reads is
    # dead weight that onnxruntime warns about (tests/core/emit/test_onnx_clean.py).
    one = em.ints(base, 1)
    s = em.matrix_steps(op.wq, op.bq, h, base, _matrix_form(op.wq, em.batch), ("wq", "wq.cols", "bq"), "q.")
    q = "@" + s[-1][0]                                                                        # [dk, B]
    # scores s'_j = x_j · (W_kᵀq) over the parts the keys read (a part no key reads is skipped)
    kparts = [p for p, cols in enumerate(parts) if np.any(wk[:, cols] != 0)] or [0]
    scores = ""
    for p in kparts:
        t = _part_tag(p)
        s += [(f"qc{t}", "MatMul", [em.init(f"{base}.wk_t{t}", em.floats(wk[:, parts[p]].T)), q], {}),  # [c_p, B]
              (f"qc{t}.t", "Transpose", [f"@qc{t}"], {"perm": [1, 0]}),
              (f"qc{t}.b", "Unsqueeze", [f"@qc{t}.t", one], {}),                           # [B, 1, c_p]
              (f"scores{t}", "MatMul", [f"@qc{t}.b", hist[p]], {})]                        # [B, 1, n]
        if scores:
            s.append((f"scores{t}.sum", "Add", [scores, f"@scores{t}"], {}))
            scores = f"@scores{t}.sum"
        else:
            scores = f"@scores{t}"
    s += [("null_score", "MatMul", [em.init(f"{base}.null_key", em.floats(op.null_key[None, :])), q], {}),
          ("null_score.b", "Reshape", ["@null_score", em.ints(base, -1, 1, 1)], {})]      # [B, 1, 1]
    shift = None
    if np.any(op.bk != 0):
        s += [("key_bias", "MatMul", [em.init(f"{base}.bk", em.floats(op.bk[None, :])), q], {}),
              ("key_bias.b", "Reshape", ["@key_bias", em.ints(base, -1, 1, 1)], {})]
        shift = "@key_bias.b"
    need_items, need_null = bool(np.any(bv != 0)), bool(np.any(nv != 0))
    if op.mode == "hardmax":
        # max s' + b_k·q against τ_0: items win where s' = max s' (see the torch emitter)
        s.append(em.reduce("top", "ReduceMax", scores, base, 2, 1))
        best = "@top"
        if shift:
            s.append(("best", "Add", ["@top", shift], {}))
            best = "@best"
        s += [("null_wins", "GreaterOrEqual", ["@null_score.b", best], {}),
              ("items_live", "GreaterOrEqual", [best, "@null_score.b"], {}),
              ("a0", "Cast", ["@null_wins"], {"to": em.elem}),
              ("live", "Cast", ["@items_live"], {"to": em.elem})]
        if has_v:  # the winners' weights: every tie counts
            s += [("argmax", "Equal", [scores, "@top"], {}),
                  ("mask", "Cast", ["@argmax"], {"to": em.elem}),
                  em.reduce("ties", "ReduceSum", "@mask", base, 2, 1),
                  ("n_items", "Mul", ["@ties", "@live"], {})]                             # [B, 1, 1]
        else:
            # Only the items' share matters.  It is `live` (0 or 1) unless the null key
            # ties with the best items somewhere in the batch: then count the ties, O(n).
            s += [("tie", "Mul", ["@a0", "@live"], {}),
                  ("tie.any", "ReduceMax", ["@tie"], {"keepdims": 0}),                   # over every axis
                  ("tie.cond", "Cast", ["@tie.any"], {"to": TensorProto.BOOL})]
            emit(s)
            s = [("n_items", "If", [got["tie.cond"]], tie_branches(em, base, got[scores[1:]], got["top"],
                                                                   got["live"]))]
        s += [("count", "Add", ["@n_items", "@a0"], {}),
              ("inv", "Reciprocal", ["@count"], {})]
        if need_items:
            s.append(("items", "Mul", ["@n_items", "@inv"], {}))
        if need_null:
            s.append(("null_weight", "Mul", ["@a0", "@inv"], {}))
        if has_v:  # the winners' weights are mask · share: the share is applied after Σ_j
            s.append(("item_share", "Mul", ["@live", "@inv"], {}))                         # [B, 1, 1]
    else:
        logits = scores
        if shift:
            s.append(("logits", "Add", [scores, shift], {}))
            logits = "@logits"
        two = em.ints(base, 2)
        s += [("all", "Concat", ["@null_score.b", logits], {"axis": 2}),
              ("scaled", "Mul", ["@all", em.init(f"{base}.beta", em.scalar(op.beta))], {}),
              ("weights", "Softmax", ["@scaled"], {"axis": 2})]
        if need_null:
            s.append(("null_weight", "Slice", ["@weights", em.ints(base, 0), one, two], {}))
        if has_v or need_items:
            s.append(("item_weights", "Slice", ["@weights", one, em.ints(base, _INT64_MAX), two], {}))
        if need_items:
            s.append(em.reduce("items", "ReduceSum", "@item_weights", base, 2, 1))
    terms = []
    if has_v:
        # Σ_j a_j x_j as a matrix-vector product per part the values read: [B, c_p, n]·[B, n, 1]
        # (the weights turned into a column by Squeeze/Unsqueeze: no copy, no transposed
        # MatMul); hard-max multiplies the winners' sum by their share afterwards
        wv = op.wv.dense()[rows]
        vparts = [p for p, cols in enumerate(parts) if np.any(wv[:, cols] != 0)]
        w = "@mask" if op.mode == "hardmax" else "@item_weights"
        s += [("item_weights.row", "Squeeze", [w, one], {}),                                # [B, n]
              ("item_weights.col", "Unsqueeze", ["@item_weights.row", em.ints(base, 2)], {})]  # [B, n, 1]
        for p in vparts:
            t = _part_tag(p)
            s.append((f"mix{t}", "MatMul", [hist[p], "@item_weights.col"], {}))            # [B, c_p, 1]
            mix = f"@mix{t}"
            if op.mode == "hardmax":
                s.append((f"mix{t}.share", "Mul", [mix, "@item_share"], {}))
                mix = f"@mix{t}.share"
            s += [(f"mix{t}.fm", "Transpose", [mix], {"perm": [1, 0, 2]}),                 # [c_p, B, 1]
                  (f"mix{t}.2d", "Reshape", [f"@mix{t}.fm", em.ints(base, len(parts[p]), -1)], {}),  # [c_p, B]
                  (f"values{t}", "MatMul", [em.init(f"{base}.wv{t}", em.floats(wv[:, parts[p]])),
                                            f"@mix{t}.2d"], {})]
            terms.append(f"@values{t}")
    if need_items:
        s += [("items.row", "Reshape", ["@items", em.ints(base, 1, -1)], {}),                 # [1, B]
              ("value_bias", "Mul", [em.init(f"{base}.bv", em.floats(bv[:, None])), "@items.row"], {})]
        terms.append("@value_bias")
    if need_null:
        s += [("null_weight.row", "Reshape", ["@null_weight", em.ints(base, 1, -1)], {}),
              ("null_mix", "Mul", [em.init(f"{base}.null_value", em.floats(nv[:, None])), "@null_weight.row"], {})]
        terms.append("@null_mix")
    if not terms:  # pragma: no cover - a value row with all-zero weights
        s.append(("identity", "Identity", [h], {}))
    else:
        delta = terms[0]
        for j, term in enumerate(terms[1:]):
            s.append((f"delta.{j}", "Add", [delta, term], {}))
            delta = f"@delta.{j}"
        s += residual(em, h, delta, rows, width, base)
    emit(s, final)


def append_history(em: _Emitter, source: str | None, parts: list[np.ndarray], src: str, base: str, emit,
                   got: dict[str, str], ctx: _DecodeCtx | None) -> list[str]:
    """This step's coordinates of ``src``, one ``[B, c_p, 1]`` column per part,
    appended to the carried history of ``source`` (``X/history``, ``X/history.v``: a
    ``Concat`` on axis 2); without ``source`` (outside a decoder body) the history is
    the column alone.  Returns the parts' values."""
    two = em.ints(base, 2)
    hist = []
    for p, cols in enumerate(parts):
        t = _part_tag(p)
        s = [(f"x{t}.gather", "Gather", [src, em.init(f"{base}.cols{t}", cols.astype(np.int64))], {"axis": 0}),
             (f"x{t}.transpose", "Transpose", [f"@x{t}.gather"], {"perm": [1, 0]}),
             (f"x{t}.new", "Unsqueeze", [f"@x{t}.transpose", two], {})]                            # [B, c_p, 1]
        if source is not None:
            s.append((f"history{t}", "Concat", [ctx.histories[source][p], f"@x{t}.new"], {"axis": 2}))
        emit(s)
        hist.append(got[s[-1][0]])
    return hist


def tie_branches(em: _Emitter, base: str, scores: str, top: str, live: str) -> dict:
    """The ``If`` branches giving the items' count ``n_items`` ``[B, 1, 1]`` of a
    hard-max em-attention without values: where the null key ties with the best
    items (``then``), the number of items with the top score times ``live``; else
    ``live`` itself (the count cancels in the items' share)."""
    then: list = []
    got = em.steps(then, base, None, [
        ("ties.argmax", "Equal", [scores, top], {}),
        ("ties.mask", "Cast", ["@ties.argmax"], {"to": em.elem}),
        em.reduce("ties.count", "ReduceSum", "@ties.mask", base, 2, 1),
        ("ties.items", "Mul", ["@ties.count", live], {}),
    ], bare=False)
    other: list = []
    alone = em.steps(other, base, None, [("ties.live", "Identity", [live], {})], bare=False)
    shape = [BATCH, 1, 1]
    return {"then_branch": helper.make_graph(then, f"{base}/ties.then", [], [
                helper.make_tensor_value_info(got["ties.items"], em.elem, shape)]),
            "else_branch": helper.make_graph(other, f"{base}/ties.else", [], [
                helper.make_tensor_value_info(alone["ties.live"], em.elem, shape)])}


@onnx_emitter(Embed, weight_bytes=lambda op, batch: 4 * (op.table.size + _position_entries(op.positions)))
def emit_embed(em: _Emitter, op: Embed, out: list, ins: list[str], base: str, final: str,
               ctx: _DecodeCtx | None) -> None:
    tokens = ins[0]
    zero, one = em.ints(base, 0), em.ints(base, 1)
    table = em.init(f"{base}.table", em.floats(op.table))
    steps = [("truncate", "Slice", [tokens, zero, em.ints(base, op.max_len), one], {}),   # [B, L]
             ("shape", "Shape", ["@truncate"], {}),
             ("length", "Gather", ["@shape", one], {"axis": 0})]
    if isinstance(op.positions, BinaryPositions):
        steps += [("index", "Range", [em.init(f"{base}.zero", np.array(0, np.int64)), "@length",
                                      em.init(f"{base}.one", np.array(1, np.int64))], {}),
                  ("index.col", "Unsqueeze", ["@index", one], {})]                          # [L, 1]
        steps += binary_code(em, op.positions, "@index.col", base, "positions", rows=True)   # [L, w]
    else:
        positions = em.init(f"{base}.positions", em.floats(op.positions))
        steps.append(("positions", "Slice", [positions, zero, "@length", zero], {}))          # [L, w]
    steps += [("lookup", "Gather", [table, "@truncate"], {"axis": 0}),                        # [B, L, w]
              ("add", "Add", ["@lookup", "@positions"], {}),
              ("feature_major", "Transpose", ["@add"], {"perm": [1, 2, 0]})]                  # [L, w, B]
    em.steps(out, base, final, steps, op.cite, bare=False)


def binary_code(em: _Emitter, code: BinaryPositions, n: str, base: str, step: str, rows: bool) -> list:
    """Steps computing positional vectors from int64 indices ``n``: ``[L, 1]`` -> rows
    ``[L, w]`` (``rows``), or a scalar -> a column ``[w, 1]``.  Bit ``k`` of
    ``n + offset`` is ``(n + offset) / 2^(bits-1-k) mod 2`` (Wei, Chen & Ma (C.1): Bin)."""
    place = code.placement()                                                       # [w, bits]
    s = [(f"{step}.n", "Add", [n, em.init(f"{base}.{step}.offset", np.array(code.offset, np.int64))], {}),
         (f"{step}.shift", "Div", [f"@{step}.n", em.init(f"{base}.{step}.powers", code.powers())], {}),
         (f"{step}.bit", "Mod", [f"@{step}.shift", em.init(f"{base}.{step}.two", np.array(2, np.int64))], {}),
         (f"{step}.float", "Cast", [f"@{step}.bit"], {"to": em.elem})]          # [L, bits] | [bits]
    if rows:
        s.append((step, "MatMul", [f"@{step}.float", em.init(f"{base}.{step}.place_t", em.floats(place.T))], {}))
    else:
        s += [(f"{step}.col", "Unsqueeze", [f"@{step}.float", em.ints(base, 1)], {}),      # [bits, 1]
              (step, "MatMul", [em.init(f"{base}.{step}.place", em.floats(place)), f"@{step}.col"], {})]
    return s


def body_graph_outputs(em: _Emitter, nodes: list, base: str, values: list[str]) -> list[str]:
    """``values`` as distinct values made by ``nodes`` (an ``Identity`` where not)."""
    made = {o for n in nodes for o in n.output}
    got: list[str] = []
    for v in values:
        if v not in made or v in got:
            v = em.steps(nodes, f"{base}/identity", None, [("identity", "Identity", [v], {})])["identity"]
        got.append(v)
    return got


@onnx_emitter(Decode, weight_bytes=_decode_bytes)
def emit_decode(em: _Emitter, op: Decode, out: list, ins: list[str], base: str, final: str,
                ctx: _DecodeCtx | None) -> None:
    mem = ins[0]
    outer, em.batch = em.batch, STEP_BATCH  # the per-step layers' forms
    try:
        _decode(em, op, out, mem, base, final)
    finally:
        em.batch = outer


def _decode(em: _Emitter, op: Decode, out: list, mem: str, base: str, final: str) -> None:
    pro, body = op.prologue, op.body
    for part, net in (("prologue", pro), ("body", body)):
        if any(net.kinds[o] != "vector" for o in net.outputs):
            raise NetIRError(f"decode {op.name!r}: the {part}'s outputs (o, tap) must be vectors")
    w0, w = len(pro.inputs[0].space), len(body.inputs[0].space)
    tap_w = len(body.spaces[body.outputs[1]])
    got = em.steps(out, base, None, [
        ("shape", "Shape", [mem], {}),
        ("batch", "Gather", ["@shape", em.ints(base, 2)], {"axis": 0}),
        ("x0.shape", "Concat", [em.ints(base, w0), "@batch"], {"axis": 0}),
        ("x0", "Expand", [em.init(f"{base}.init", em.floats(op.init[:, None])), "@x0.shape"], {}),
    ], op.cite, bare=False)
    batch = got["batch"]
    penv = em.net_ops(pro, out, {pro.inputs[0].name: got["x0"], pro.inputs[1].name: mem},
                      prefix=f"{base}/prologue/")
    o0, tap0 = penv[pro.outputs[0]], penv[pro.outputs[1]]
    if op.steps == 0:
        em.steps(out, base, final, [("taps", "Unsqueeze", [tap0, em.ints(base, 0)], {})], bare=False)
        return
    first = em.steps(out, base, None, [("tap0", "Unsqueeze", [tap0, em.ints(base, 0)], {})],
                     bare=False)["tap0"]
    bprefix = f"{base}/body/"
    ctx = _DecodeCtx()
    for a in body.nodes:  # cross-attention over the decoder memory: keys/values once
        if isinstance(a, Attention) and not a.is_self and a.inputs[1] == body.inputs[1].name \
                and a.value_rows().size:
            ctx.cross[a.name] = memory_kv(em, a, out, mem, bprefix + a.name)
    hists = _history_parts(op)
    empty: list[str] = []
    for src, parts in hists.items():
        for p, cols in enumerate(parts):
            empty.append(em.steps(out, f"{base}/history.{src}{_part_tag(p)}", None, [
                ("shape", "Concat", [batch, em.ints(base, len(cols), 0)], {"axis": 0}),
                ("empty", "ConstantOfShape", ["@shape"],
                 {"value": helper.make_tensor("value", em.elem, [1], [0.0])}),
            ], bare=False)["empty"])
    # the loop body
    it = em.values.fresh(f"{base}/iter")
    cond_in = em.values.fresh(f"{base}/cond_in")
    cond_out = em.values.fresh(f"{base}/cond_out")
    o_prev = em.values.fresh(f"{base}/o")
    hist_in: list[onnx.ValueInfoProto] = []
    for src, parts in hists.items():
        ctx.parts[src] = parts
        ctx.histories[src] = [em.values.fresh(f"{base}/history.{src}{_part_tag(p)}") for p in range(len(parts))]
        hist_in += [helper.make_tensor_value_info(v, em.elem, [BATCH, len(c), None])
                    for v, c in zip(ctx.histories[src], parts)]
    nodes: list = []
    em.steps(nodes, f"{base}/cond", cond_out, [("cond", "Identity", [cond_in], {})])
    if isinstance(op.positions, BinaryPositions):  # β(i) = row i - 1 = the loop's iteration
        pos = binary_code(em, op.positions, it, base, "position", rows=False)
    else:
        positions = em.init(f"{base}.positions", em.floats(op.positions[:, :, None]))
        pos = [("position", "Gather", [positions, it], {"axis": 0})]                  # [w, 1]
    x = em.steps(nodes, base, None, pos + [("x", "Add", [o_prev, "@position"], {})], bare=False)["x"]
    benv = em.net_ops(body, nodes, {body.inputs[0].name: x, body.inputs[1].name: mem},
                      prefix=bprefix, ctx=ctx)
    new = [v for src in hists for v in ctx.new_histories[src]]
    widths = [len(c) for parts in hists.values() for c in parts]
    o, tap, *new = body_graph_outputs(em, nodes, base, [benv[body.outputs[0]], benv[body.outputs[1]], *new])
    hist_out = [helper.make_tensor_value_info(v, em.elem, [BATCH, c, None]) for v, c in zip(new, widths)]
    graph = helper.make_graph(
        nodes, f"{base}/body",
        [helper.make_tensor_value_info(it, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []),
         _fm_info(o_prev, w, em.elem), *hist_in],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), _fm_info(o, w, em.elem), *hist_out,
         _fm_info(tap, tap_w, em.elem)])
    trips = em.init(f"{base}.steps", np.array(op.steps, dtype=np.int64))
    finals = [em.values.fresh(f"{base}/o.final")]
    finals += [em.values.fresh(f"{base}/history.{src}{_part_tag(p)}.final")
               for src, parts in hists.items() for p in range(len(parts))]
    taps = em.values.fresh(f"{base}/taps")
    out.append(helper.make_node("Loop", [trips, "", o0, *empty], [*finals, taps],
                                name=em.nodes.fresh(base), body=graph))
    em.steps(out, base, final, [("concat", "Concat", [first, taps], {"axis": 0})], bare=False)
