"""All-layer margin of the transformer backend (Wei, Chen & Ma §4, App. C and D): score
gaps read off the built weights, a certified lower bound on the per-layer margin, and
the report that puts it next to the attacks of :mod:`.perturbed_decode`.
The derivation is docs/transformer_margin.md (next to the circuit one, docs/relu_circuit.md).

* :func:`score_gaps` / :func:`check_score_gaps` — for every hard-max attention op, from
  the built ``Wq, bq, Wk, bk, K_0``: how far the best item's score is above the null's
  (``gap_above``) and the null's above the next best item's (``gap_below``), minimised
  over every query the bits allow.  The construction has 1 on each side (the proof of
  Theorem 4.1: "the largest attention score is always greater than the second largest by
  a margin of 1").  A query or key that is not of the separable ±1-bit form is refused.
* :func:`certified_radius` — the largest ε (found by bisection) for which our bound
  proves: moving every parameter block by ≤ ε in ℓ2 (dense) changes no decoded field
  (state, head, symbol read, symbol written) of any decoder step 0..T on any input.
  Proven for independent perturbations of the blocks at every decoder step, which covers
  the shared one (Definition D.5).
* :func:`margin_report` / :func:`margin_table` — certified radius and both attacks, with
  and without the Prop. 3.4 corrections (what ``tm2nn margin --backend transformer``
  prints).
* :func:`margin` and :func:`certified_margin` — the backend's ``margin`` and
  ``certified_margin`` analyses.

The bound rests on the construction's invariant (the paper's proof of Theorem 4.1: "all
of the intermediate layers are sparse binary vectors"): in the exact run every value an
affine or attention op reads is a 0/1 vector, except the hidden layer of a round
correction, and every ReLU and attention output lies in [0, 1]
(tests/backends/transformer/test_transformer_margin.py checks it on reference runs).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from tm2nn.backends.protocol import Table
from tm2nn.backends.transformer.certify import (
    SAMPLES,
    MarginError,
    _is_round,
    general_certificate,
    input_texts,
    is_construction,
    is_zero_attention,
)
from tm2nn.backends.transformer.model import Options, check_source, options
from tm2nn.backends.transformer.model import compile as compile_model
from tm2nn.backends.transformer.perturbed_decode import (
    UnsupportedNet,
    attack,
    net_of,
    transformer_parts,
)
from tm2nn.errors import OptionError
from tm2nn.limits import check_float, check_int, check_seed
from tm2nn.nets import Affine, Attention, BinaryPositions, Concat, ReLU, Slice
from tm2nn.nets.round import ROUND_RADIUS as SIGMA  # round is exact within SIGMA of a bit
from tm2nn.verify.check import InputSpace

# The margin toolkit, shared with the circuit margin so that there is one copy: ``_lin`` (an
# affine layer's ‖W‖_op by Schur's bound) and ``_sup`` (bisection on log ε).
from tm2nn.verify.margin_toolkit import affine_bounds as _lin
from tm2nn.verify.margin_toolkit import not_certified
from tm2nn.verify.margin_toolkit import sup_log as _sup
from tm2nn.verify.runs import EXHAUSTIVE_CELLS, EXHAUSTIVE_TAPES

#: a decoded coordinate (argmax of a one-hot group, or a bit > 1/2) keeps its value while
#: its error stays below this
TAP_LIMIT = 0.5


class ScoreGapError(MarginError):
    """A non-separable score, or a score gap below the required one."""


# ---------------------------------------------------------------------------------------------
# A. Score gaps from the weights
# ---------------------------------------------------------------------------------------------
@dataclass
class _Sep:
    """One side (query or key) of a separable score: row r is ``coef_r·(2h_col - 1)``
    (a ±1 bit) when ``bit[r]``, else the constant ``coef_r``."""

    bit: np.ndarray
    col: np.ndarray
    coef: np.ndarray


def _separable(W, b: np.ndarray, what: str) -> _Sep:
    n = W.shape[0]
    keep = W.vals != 0
    rows, cols, vals = W.rows[keep], W.cols[keep], W.vals[keep]
    count = np.bincount(rows, minlength=n)
    many = np.flatnonzero(count > 1)
    if many.size:
        r = int(many[0])
        raise ScoreGapError(f"{what} {r} reads {count[r]} coordinates: not a ±1 bit or a constant, so the "
                            "score is not separable and its gaps cannot be read off the weights")
    w = np.zeros(n)
    col = np.full(n, -1, dtype=np.int64)
    w[rows], col[rows] = vals, cols
    bit = count == 1
    off = np.flatnonzero(bit & (b != -w / 2))
    if off.size:
        r = int(off[0])
        raise ScoreGapError(f"{what} {r} is {w[r]:g}·h + {b[r]:g}, not a ±1 bit (w/2)(2h - 1) = w·h - w/2: "
                            "the score is not separable")
    return _Sep(bit, col, np.where(bit, w / 2, b))


def _op_gaps(op: Attention) -> dict:
    """Gaps of one attention op (docs/transformer_margin.md, "Score gaps").

    With query signs σ (its bit rows) and key signs τ, the score is
    ``Σ_r q_r k_r``.  The best key takes τ_r = sign of ``q_r``'s coefficient times its own
    on every key bit row and scores ``Σ_{key bits} |q_r k_r| + Σ_{key constants} q_r d_r``;
    any other key loses at least ``2 m``, ``m = min |q_r k_r|`` over the key bit rows; the
    null scores ``q·K_0``.  ``best - null`` is affine in σ; its minimum over σ is
    ``gap_above``, and ``gap_below = 2m - max_σ (best - null)``."""
    q = _separable(op.wq, op.bq, f"attention {op.name!r}: query row")
    k = _separable(op.wk, op.bk, f"attention {op.name!r}: key row")
    k0 = np.asarray(op.null_key, dtype=np.float64)
    prod = np.abs(q.coef * k.coef)
    kb = k.bit & (prod > 0)
    cc = ~q.bit & ~k.bit
    above = float(prod[k.bit].sum() + (q.coef * k.coef)[cc].sum() - (q.coef * k0)[~q.bit].sum())
    sig = q.coef * (np.where(k.bit, 0.0, k.coef) - k0)
    spread = float(np.abs(sig[q.bit]).sum())
    m = float(prod[kb].min()) if kb.any() else math.inf
    return {"op": op.name, "kind": "self" if op.is_self else "cross", "mode": op.mode,
            "gap_above": above - spread, "gap_below": 2 * m - (above + spread) if math.isfinite(m) else math.inf,
            "min_product": m, "key_columns": sorted(set(k.col[kb].tolist())),
            "query_columns": sorted(set(q.col[q.bit & (np.abs(q.coef) > 0)].tolist()))}


def _attention_ops(compiled):
    """Every attention op but §4.1's all-zero ones (identity slots, not parameter blocks)."""
    _, dec = transformer_parts(net_of(compiled))
    return [(part, op) for part, sub in (("prologue", dec.prologue), ("body", dec.body))
            for op in sub.nodes if isinstance(op, Attention) and not is_zero_attention(op)]


def score_gaps(compiled) -> list[dict]:
    """Per attention op (prologue and decoder body): ``gap_above`` = best score − null
    score and ``gap_below`` = null score − next best score, each minimised over every
    query the bits allow, computed from the built weights; ``min_product`` is the
    smallest ``|q_r k_r|`` over the key bit rows.  Raises :class:`ScoreGapError` for a
    query or key row that is neither a ±1 bit nor a constant."""
    out = []
    for part, op in _attention_ops(compiled):
        row = _op_gaps(op)
        out.append({"part": part, **{k: v for k, v in row.items() if not k.endswith("_columns")}})
    return out


def check_score_gaps(compiled, min_gap: float = 1.0) -> list[dict]:
    """:func:`score_gaps`, raising :class:`ScoreGapError` naming the op when a gap is
    below ``min_gap`` (the construction's is 1)."""
    rows = score_gaps(compiled)
    for r in rows:
        for side in ("gap_above", "gap_below"):
            if not r[side] >= min_gap:
                raise ScoreGapError(f"attention {r['op']!r} ({r['part']}): {side.replace('_', ' ')} = {r[side]:.6g} "
                                    f"< {min_gap:g} (best − null and null − next best must both be ≥ {min_gap:g})")
    return rows


# ---------------------------------------------------------------------------------------------
# Ties: only between equal values (the remark in the proof of Theorem 4.1)
# ---------------------------------------------------------------------------------------------
_UNK, _CONST = -2, -1


def _track_affine(W, bias, t):
    """Two-point tracking: a coordinate is unknown, a constant, or a function of one
    positional bit k (its values at bit 0 and 1); an affine row of one bit stays one."""
    var, v0, v1 = t
    n = W.shape[0]
    keep = W.vals != 0
    r, c, w = W.rows[keep], W.cols[keep], W.vals[keep]
    unk = np.bincount(r, weights=(var[c] == _UNK).astype(np.float64), minlength=n) > 0
    big = np.iinfo(np.int64).max
    hi = np.full(n, _CONST, dtype=np.int64)
    np.maximum.at(hi, r, var[c])
    lo = np.full(n, big, dtype=np.int64)
    np.minimum.at(lo, r, np.where(var[c] >= 0, var[c], big))
    out = np.where(hi >= 0, hi, _CONST)
    out[unk | ((lo != big) & (lo != hi))] = _UNK
    z0 = np.where(var[c] == _UNK, 0.0, v0[c])
    z1 = np.where(var[c] == _UNK, 0.0, v1[c])
    a0 = bias + np.bincount(r, weights=w * z0, minlength=n)
    a1 = bias + np.bincount(r, weights=w * z1, minlength=n)
    out[(out >= 0) & (a0 == a1)] = _CONST
    return out, a0, a1


def _track(net, tracks: dict) -> dict:
    for op in net.nodes:
        if isinstance(op, Affine):
            tracks[op.name] = _track_affine(op.weight, op.bias, tracks[op.inputs[0]])
        elif isinstance(op, ReLU):
            var, v0, v1 = tracks[op.inputs[0]]
            v0, v1 = np.maximum(v0, 0.0), np.maximum(v1, 0.0)
            var = np.where((var >= 0) & (v0 == v1), _CONST, var)
            tracks[op.name] = (var, v0, v1)
        elif isinstance(op, Attention):
            var, v0, v1 = (a.copy() for a in tracks[op.inputs[0]])
            var[op.value_rows()] = _UNK  # h + attended values; other rows are h
            tracks[op.name] = (var, v0, v1)
        elif isinstance(op, Slice):
            idx = list(op.indices)
            tracks[op.name] = tuple(a[idx] for a in tracks[op.inputs[0]])
        elif isinstance(op, Concat):
            tracks[op.name] = tuple(np.concatenate([tracks[i][j] for i in op.inputs]) for j in range(3))
    return tracks


def _distinct(positions) -> bool:
    if isinstance(positions, BinaryPositions):
        return True  # Bin(n + offset) of distinct n, validated to fit in its bits
    p = np.asarray(positions)
    return len(np.unique(p, axis=0)) == len(p)


def _position_columns(positions) -> list[int] | None:
    return list(positions.columns) if isinstance(positions, BinaryPositions) else None


def tie_reasons(compiled) -> dict[str, str | None]:
    """Why the items that tie for the best score of each attention op have equal values
    (None: not shown).  Exact hard-max averages tied items, so a perturbation that
    breaks a tie changes nothing only when the tied values are equal:

    * ``constant values``: ``W_v = 0`` (Claims C.4, C.5: the value is a bias);
    * ``values read key bits``: ``W_v`` reads only key bit columns, which tied items share;
    * ``unique keys``: the key bit rows read every coordinate of a positional code
      (β(t) of the step, decoder histories; β(k) of the cell, the encoder) that the
      attended vectors carry unchanged, so no two items tie (Claim C.6, Lemma C.7).
      For decoder histories this is shown by tracking the positional bits through the
      body from the weights (``o`` must come out with zeros there, so that
      ``x = o + β(i)`` holds β(i))."""
    embed, dec = transformer_parts(net_of(compiled))
    w = len(dec.body.inputs[0].space)
    cols = _position_columns(dec.positions)
    body_ok = False
    tracks = None
    if cols is not None and _distinct(dec.positions):
        init = np.asarray(dec.init, dtype=np.float64)
        pro = _track(dec.prologue, {"x": (np.full(w, _CONST), init.copy(), init.copy()),
                                    dec.prologue.inputs[1].name: (np.full(w, _UNK), np.zeros(w), np.zeros(w))})
        var = np.full(w, _UNK)
        var[cols] = np.arange(len(cols))
        v1 = np.zeros(w)
        v1[cols] = 1.0
        x = (var, np.zeros(w), v1)
        tracks = _track(dec.body, {dec.body.inputs[0].name: x,
                                   dec.body.inputs[1].name: (np.full(w, _UNK), np.zeros(w), np.zeros(w))})

        def zero_at_cols(t):
            var, a0, a1 = t
            return bool(np.all(var[cols] == _CONST) and np.all(a0[cols] == 0) and np.all(a1[cols] == 0))

        body_ok = zero_at_cols(pro[dec.prologue.outputs[0]]) and zero_at_cols(tracks[dec.body.outputs[0]])
    enc_cols = _position_columns(embed.positions)
    enc_ok = (enc_cols is not None and _distinct(embed.positions)
              and not np.any(np.asarray(embed.table)[:, enc_cols]))
    out = {}
    for _part, op in _attention_ops(compiled):
        g = _op_gaps(op)
        keycols = set(g["key_columns"])
        wv = op.wv
        vcols = set(wv.cols[wv.vals != 0].tolist())
        if not vcols:
            out[op.name] = "constant values"
        elif vcols <= keycols:
            out[op.name] = "values read key bits"
        elif op.is_self and body_ok and op.source in tracks:
            var, a0, a1 = tracks[op.source]
            ok = all(any(var[c] == k and a0[c] != a1[c] for c in keycols) for k in range(len(cols)))
            out[op.name] = "unique keys" if ok else None
        elif not op.is_self and enc_ok and set(enc_cols) <= keycols:
            out[op.name] = "unique keys"
        else:
            out[op.name] = None
    return out


# ---------------------------------------------------------------------------------------------
# B. The certified radius
# ---------------------------------------------------------------------------------------------
def _box_map(W, b, lo, hi):
    """The range of ``W h + b`` for h in the box [lo, hi] (interval arithmetic)."""
    n = W.shape[0]
    r, c, w = W.rows, W.cols, W.vals
    wp, wn = np.maximum(w, 0.0), np.minimum(w, 0.0)
    out_lo = b + np.bincount(r, weights=wp * lo[c] + wn * hi[c], minlength=n)
    out_hi = b + np.bincount(r, weights=wp * hi[c] + wn * lo[c], minlength=n)
    return out_lo, out_hi


def _box_norm(box) -> float:
    """max ‖h‖₂ over the box: (i) of the derivation, λ from the weights."""
    lo, hi = box
    return float(np.sqrt(np.sum(np.maximum(np.abs(lo), np.abs(hi)) ** 2)))


def _unit(box):
    """Intersect with [0, 1] (the invariant: ReLU and attention outputs lie there)."""
    return np.clip(box[0], 0.0, 1.0), np.clip(box[1], 0.0, 1.0)


#: matrices up to this many entries get their exact spectral norm (an SVD of a few ms)
EXACT_NORM_ENTRIES = 1 << 20


def _omega(W) -> float:
    """‖W‖_op: Schur's bound sqrt(max row ℓ1 · max column ℓ1) (margin.py's ``_lin``), or
    the exact spectral norm when the matrix is small enough to densify (all of ours)."""
    schur = _lin(SimpleNamespace(name="", weight=W), 0.0).omega
    if not np.any(W.vals) or W.shape[0] * W.shape[1] > EXACT_NORM_ENTRIES:
        return schur
    return min(schur, float(np.linalg.norm(W.dense(), 2)) * (1 + 1e-12))  # a hair up: SVD rounding


class _Program:
    """One net (prologue or body) as a list of error-bound instructions with their
    constants, built once from the weights and the reference boxes."""

    def __init__(self, part: str, net, boxes: dict, gaps: dict):
        self.part, self.net = part, net
        self.x, self.mem = net.inputs[0].name, net.inputs[1].name
        self.o, self.tap = net.outputs
        self.ins: list[tuple] = []
        uses: dict[str, int] = {}
        for op in net.nodes:
            for i in op.inputs:
                uses[i] = uses.get(i, 0) + 1
        for o in net.outputs:
            uses[o] = uses.get(o, 0) + 1
        nodes = list(net.nodes)
        i = 0
        while i < len(nodes):
            op = nodes[i]
            if isinstance(op, Affine):
                if (i + 3 < len(nodes) and isinstance(nodes[i + 1], ReLU) and isinstance(nodes[i + 2], Affine)
                        and isinstance(nodes[i + 3], ReLU) and nodes[i + 1].inputs == (op.name,)
                        and nodes[i + 2].inputs == (nodes[i + 1].name,) and nodes[i + 3].inputs == (nodes[i + 2].name,)
                        and all(uses.get(nodes[j].name, 0) == 1 for j in range(i, i + 3))
                        and _is_round(op, nodes[i + 2])):
                    B = nodes[i + 2]
                    # (iv) round: exact when the input is within SIGMA of its 0/1 reference
                    self.ins.append(("round", nodes[i + 3].name, op.inputs[0], _omega(op.weight),
                                     _omega(B.weight), _box_norm(boxes[op.inputs[0]]),
                                     _box_norm(boxes[nodes[i + 1].name]), op.name.rsplit(".round_a", 1)[0]))
                    i += 4
                    continue
                # (ii) affine: ‖W‖_op e + ε sqrt((λ + e)² + 1)
                self.ins.append(("affine", op.name, op.inputs[0], _omega(op.weight), _box_norm(boxes[op.inputs[0]])))
            elif isinstance(op, (ReLU, Slice)) or is_zero_attention(op):
                # an all-zero attention (§4.1's unused module) is h + 0: an identity slot
                self.ins.append(("copy", op.name, op.inputs[0]))
            elif isinstance(op, Concat):
                self.ins.append(("concat", op.name, tuple(op.inputs)))
            elif isinstance(op, Attention):
                if op.mode != "hardmax":
                    raise MarginError(f"attention {op.name!r} is {op.mode}: the certificate is for hard-max "
                                      "attention (compile with attention='hardmax')")
                g = gaps[op.name]
                half = 0.5 * min(g["gap_above"], g["gap_below"])
                h, src = op.inputs[0], op.source
                qbox = _box_map(op.wq, op.bq, *boxes[h])
                kbox = _box_map(op.wk, op.bk, *boxes[src])
                c = SimpleNamespace(
                    wq=_omega(op.wq), wk=_omega(op.wk), wv=_omega(op.wv), lam_h=_box_norm(boxes[h]),
                    lam_x=_box_norm(boxes[src]), qbar=_box_norm(qbox), kbar=_box_norm(kbox),
                    k0=float(np.linalg.norm(op.null_key)), half=half)
                # (iii) attention: scores move by < gap/2, so the attended set stays in the winners
                self.ins.append(("attn", op.name, h, src, op.is_self, c))
            else:
                raise MarginError(f"{part} op {op.name!r}: the certificate does not know {op.kind} ops")
            i += 1

    def run(self, e: dict, hist: dict, eps: float, step: int, fail: list, ratios: dict | None) -> bool:
        """Push the error bounds ``e`` ({value: (ℓ2, ℓ∞)}) through the net at ``eps``;
        ``hist`` holds each attended history's error (the max over past steps).  Returns
        False at the first failing check (appended to ``fail``), unless ``ratios``
        collects every check's value/limit instead."""
        hyp = math.hypot
        for ins in self.ins:
            kind = ins[0]
            if kind == "affine":
                _, out, inp, om, lam = ins
                e_in = e[inp][0]
                v = om * e_in + eps * hyp(lam + e_in, 1.0)
                e[out] = (v, v)
            elif kind == "copy":
                e[ins[1]] = e[ins[2]]
            elif kind == "concat":
                parts = [e[i] for i in ins[2]]
                e[ins[1]] = (math.sqrt(sum(p[0] * p[0] for p in parts)), max(p[1] for p in parts))
            elif kind == "round":
                _, out, inp, om_a, om_b, lam_g, lam_r, name = ins
                if not self._check(e[inp][0], SIGMA, True, step, "round input", name, fail, ratios):
                    return False
                # the unperturbed round returns the exact 0/1 vector on the perturbed input;
                # the two perturbed layers add: ‖B‖ ε X_a + ε X_b (the input error ≤ SIGMA)
                xa = hyp(lam_g + SIGMA, 1.0)
                xb = hyp(lam_r + om_a * SIGMA + eps * xa, 1.0)
                v = eps * (om_b * xa + xb)
                e[out] = (v, v)
            else:  # attention
                _, out, h, src, is_self, c = ins
                e_h = e[h][0]
                if is_self:
                    e_x = hist[src] = max(hist.get(src, 0.0), e[src][0])
                else:
                    e_x = e[src][0]
                dq = c.wq * e_h + eps * hyp(c.lam_h + e_h, 1.0)
                xx = hyp(c.lam_x + e_x, 1.0)
                dk = c.wk * e_x + eps * xx
                ds = max(dq * c.kbar + c.qbar * dk + dq * dk, dq * c.k0 + c.qbar * eps + dq * eps)
                if not self._check(ds, c.half, False, step, "attention score", out, fail, ratios):
                    return False
                v = e_h + max(c.wv * e_x + eps * xx, eps)
                e[out] = (v, v)
        return self._check(e[self.tap][1], TAP_LIMIT, False, step, "decoded tap", self.tap, fail, ratios)

    @staticmethod
    def _check(value, limit, closed, step, what, name, fail, ratios) -> bool:
        if ratios is not None:
            key = (what, name)
            r = value / limit if limit > 0 else math.inf
            r = r if r == r else math.inf
            ratios[key] = max(ratios.get(key, 0.0), r)
            return True
        ok = value <= limit if closed else value < limit
        if not ok:
            fail.append({"step": step, "op": name, "check": what, "value": value, "limit": limit})
        return ok


class _Plan:
    """Everything the certificate reads off a compiled transformer, once."""

    def __init__(self, compiled):
        try:
            self.embed, self.dec = transformer_parts(net_of(compiled))
        except UnsupportedNet as e:
            raise MarginError(str(e)) from None
        gaps = {}
        for _part, op in _attention_ops(compiled):
            if op.mode != "hardmax":
                raise MarginError(f"attention {op.name!r} is {op.mode}: the certificate is for hard-max "
                                  "attention (compile with attention='hardmax')")
            gaps[op.name] = _op_gaps(op)
        self.gaps = gaps
        self.ties = tie_reasons(compiled)
        bad = [n for n, r in self.ties.items() if r is None]
        if bad:
            raise MarginError(f"attention {bad[0]!r}: items may tie with different values (values read coordinates "
                              "the key does not, and the keys are not shown unique), so hard-max under a "
                              "perturbation could average different values")
        self.steps = int(self.dec.steps)
        self._boxes()
        self.pro = _Program("prologue", self.dec.prologue, self.pro_boxes, gaps)
        self.body = _Program("body", self.dec.body, self.body_boxes, gaps)

    def _boxes(self):
        """(i) Reference ranges of every value over every input and step, from the
        weights, intersected with [0, 1] where the invariant puts them."""
        dec, embed = self.dec, self.embed
        table = np.asarray(embed.table, dtype=np.float64)
        pos = np.asarray(embed.positions.placement().sum(1) if isinstance(embed.positions, BinaryPositions)
                         else np.asarray(embed.positions).max(0))
        pos_lo = 0.0 if isinstance(embed.positions, BinaryPositions) else np.asarray(embed.positions).min(0)
        mem = (table.min(0) + pos_lo, table.max(0) + pos)
        init = np.asarray(dec.init, dtype=np.float64)
        self.pro_boxes = self._net_boxes(dec.prologue, (init, init), mem)
        if isinstance(dec.positions, BinaryPositions):
            b_lo, b_hi = np.zeros(len(init)), dec.positions.placement().sum(1)
        else:
            b_lo, b_hi = np.asarray(dec.positions).min(0), np.asarray(dec.positions).max(0)
        x = (np.zeros(len(init)), np.ones(len(init)))  # any 0/1 vector, then tightened
        o_pro = self.pro_boxes[dec.prologue.outputs[0]]
        for _ in range(2):
            boxes = self._net_boxes(dec.body, x, mem)
            o = boxes[dec.body.outputs[0]]
            x = _unit((np.minimum(o[0], o_pro[0]) + b_lo, np.maximum(o[1], o_pro[1]) + b_hi))
        self.body_boxes = self._net_boxes(dec.body, x, mem)
        self.lam_mem = _box_norm(mem)

    @staticmethod
    def _net_boxes(net, x, mem) -> dict:
        boxes = {net.inputs[0].name: x, net.inputs[1].name: mem}
        for op in net.nodes:
            if isinstance(op, Affine):
                boxes[op.name] = _box_map(op.weight, op.bias, *boxes[op.inputs[0]])
            elif isinstance(op, ReLU):
                boxes[op.name] = _unit(boxes[op.inputs[0]])
            elif isinstance(op, Slice):
                idx = list(op.indices)
                boxes[op.name] = (boxes[op.inputs[0]][0][idx], boxes[op.inputs[0]][1][idx])
            elif isinstance(op, Concat):
                boxes[op.name] = tuple(np.concatenate([boxes[i][j] for i in op.inputs]) for j in range(2))
            elif isinstance(op, Attention):
                vlo, vhi = _box_map(op.wv, op.bv, *boxes[op.source])
                v0 = np.asarray(op.null_value)
                h = boxes[op.inputs[0]]
                boxes[op.name] = _unit((h[0] + np.minimum(vlo, v0), h[1] + np.maximum(vhi, v0)))
        return boxes

    def run(self, eps: float, horizon: int, ratios: dict | None = None, errors: dict | None = None) -> dict | None:
        """The first failing check at ``eps`` within decoder steps 0..horizon (None: all
        pass).  Stops early when a step's incoming errors equal the previous step's:
        every later step is then the same computation.  ``errors``: filled with each
        step's bounds ``{step: {value: (ℓ2, ℓ∞)}}`` (the steps computed)."""
        fail: list = []
        hist: dict = {}
        e = {self.pro.x: (eps, eps), self.pro.mem: (eps, eps)}  # h_0 and E move by ≤ ε
        ok = self.pro.run(e, hist, eps, 0, fail, ratios)
        if errors is not None:
            errors[0] = dict(e)
        if not ok:
            return fail[0]
        e_o = e[self.pro.o]
        prev = None
        for i in range(1, horizon + 1):
            state = (e_o, tuple(sorted(hist.items())))
            if state == prev:
                break
            prev = state
            e = {self.body.x: e_o, self.body.mem: (eps, eps)}  # β(i) is exact
            ok = self.body.run(e, hist, eps, i, fail, ratios)
            if errors is not None:
                errors[i] = dict(e)
            if not ok:
                return fail[0]
            e_o = e[self.body.o]
        return None


def _report_steps(T: int) -> list[int]:
    s = {0, 1, 2, 3, T}
    k = 4
    while k <= T:
        s |= {k, k * 3 // 2}
        k *= 2
    return sorted(x for x in s if x <= T)


def certified_radius(compiled, *, per_step: bool = True, budgets: bool | None = None,
                     samples: int = SAMPLES, seed: int = 0, general: bool = False) -> dict:
    """The certificate for any weights of the construction's shape (issue 38, Deliver 2).

    Weights exactly the construction's (§4.1's all-zero attention layers ignored,
    :func:`.certify.is_construction`): the tight bound (:func:`tight_radius`, valid on every
    input); the net's correctness is the construction's, which its reference check
    establishes (``tm2nn verify``; not rerun here: at T = 1024 it would cost minutes).
    ``general=True`` adds ``radius_general`` and runs the precondition below.

    Any other weights (trained, edited): first the precondition
    (:func:`.certify.general_certificate`): every decoded step right on the verifier's input
    space (every tape when small, else ``samples`` seeded ones), otherwise
    ``{"certified": False, "radius": 0, "wrong": k, "n": n, "message": "not certified: wrong
    on k of n inputs"}``; then the general bound (:class:`.certify.GeneralBound`, valid on
    that input space) is ``radius``, and ``radius_tight`` is None."""
    if is_construction(compiled):
        tight = tight_radius(compiled, per_step=per_step, budgets=budgets)
        out = {**tight, "certified": True, "weights": "the construction's", "radius_tight": tight["radius"],
               "radius_general": None, "precondition": "the construction's (its reference check, tm2nn verify)"}
        if general:
            gen = general_certificate(compiled, samples, seed)
            if not gen["certified"]:  # the construction wrong: a bug the verifier would report too
                return not_certified(gen["wrong"], gen["n"], gen["space"], first_wrong=gen["first_wrong"])
            out.update({k: gen[k] for k in ("radius_general", "general_binding", "wrong", "n", "space")})
        return out
    gen = general_certificate(compiled, samples, seed)
    if not gen["certified"]:
        return not_certified(gen["wrong"], gen["n"], gen["space"], first_wrong=gen["first_wrong"])
    return {**gen, "weights": "not the construction's: the general bound", "radius": gen["radius_general"],
            "radius_tight": None, "binding": gen["general_binding"], "per_step": [], "budgets": None, "ties": None,
            "corrections": bool(compiled.options.get("corrections", True)),
            "decoder_steps": int(transformer_parts(net_of(compiled))[1].steps), "gaps": None}


def tight_radius(compiled, *, per_step: bool = True, budgets: bool | None = None) -> dict:
    """A certified lower bound on the per-layer all-layer margin of a hard-max
    transformer: if every parameter block (each affine's (W, b), each attention's
    (Wq, bq, Wk, bk, Wv, bv, K_0, V_0), the encoder table E, h_0) moves by at most
    ``radius`` in ℓ2 (dense), independently at every decoder step (so also when shared),
    no decoded field of any decoder step 0..T changes, on any input.

    Returns ``radius`` (0.0: below 1e-300, the bisection's floor); ``binding`` (the
    check that fails just above it: step, op, kind);
    ``per_step`` (``[{"step": i, "radius": r_i}]``, r_i for "steps 0..i decode right",
    at steps 0, 1, 2, 3, 4, 6, 8, 12, ..., T; nonincreasing, so r_j ≥ r_i for j ≤ i);
    ``budgets`` (per check: the ε at which it alone would fail, the error formulas carried
    on past other failing checks; their minimum is the radius; with corrections, or for
    T ≤ 64); ``gaps`` and ``ties``;
    ``seconds``.  Raises :class:`MarginError` for softmax attention and for nets the
    certificate does not cover."""
    t0 = time.perf_counter()
    plan = _Plan(compiled)
    T = plan.steps
    corr = any(ins[0] == "round" for ins in plan.body.ins)  # read off the net, as everything here

    def passes(horizon):
        return lambda eps: plan.run(eps, horizon) is None

    radius = _sup(passes(T))
    binding = plan.run(radius * (1 + 1e-6) if radius > 0 else 1e-300, T)
    steps = []
    if per_step:
        for i in _report_steps(T):
            steps.append({"step": i, "radius": radius if i == T else _sup(passes(i))})
    budget_rows = None
    if budgets if budgets is not None else (corr or T <= 64):
        keys = {}
        plan.run(radius if radius > 0 else 1e-300, T, ratios=keys)

        def ratio(key):
            def ok(eps):
                rs: dict = {}
                plan.run(eps, T, ratios=rs)
                r = rs.get(key, 0.0)
                return r <= 1.0 if key[0] == "round input" else r < 1.0
            return ok
        budget_rows = sorted(({"check": k[0], "op": k[1], "usage_at_radius": v, "budget": _sup(ratio(k))}
                              for k, v in keys.items()), key=lambda r: r["budget"])
    return {
        "corrections": corr,
        "decoder_steps": T,
        "width": len(plan.dec.body.inputs[0].space),
        "radius": radius,
        "binding": binding,
        "per_step": steps,
        "budgets": budget_rows,
        "gaps": score_gaps(compiled),
        "ties": plan.ties,
        "seconds": time.perf_counter() - t0,
    }


# ---------------------------------------------------------------------------------------------
# D. Report
# ---------------------------------------------------------------------------------------------
def margin_report(machine, texts: list[str], *, steps: int, corrections=(True, False), seed: int = 0,
                  trials: int = 8, attack_steps: int = 30, attention: str = "hardmax",
                  eps_max: float = 1.0, device=None, budget: float | None = None, **compile_options) -> list[dict]:
    """One row per corrections setting: ``machine`` (a line Machine, or a compiled
    transformer whose source is recompiled) compiled with ``steps``, ``corrections``,
    ``attention`` and ``compile_options`` (other options of
    :class:`.model.Options`; a correction placement applies to the rows
    with corrections only); the certified radius (None for softmax, which it does not cover)
    and its binding check; the random attack (``trials`` directions per input) and the
    gradient attack (``max(1, trials // 4)`` starts per input, ``attack_steps`` steps,
    from the random attack's ε); the smallest flipping ε and where it flipped (input,
    decoder step, field, tap coordinate).  The attacks refuse, before allocating, what
    would not fit in memory (:func:`tm2nn.limits.check_memory`).  The attacks run on
    ``device`` (default: the CPU); the certified radius is computed on the CPU.

    ``budget``: seconds for all the attacks (None: no limit), shared equally by the rows,
    half of a row's to the random attack; an attack past its share stops (the inputs and
    the bisections or gradient steps it did are in the row's ``attacked``: what the
    budget cut).  The certified radius is not budgeted (it takes a fraction of a second)."""
    trials = check_int("trials", trials, 1)
    attack_steps = check_int("attack_steps", attack_steps, 0)
    seed = check_seed("seed", seed)
    texts = list(texts)
    if not texts:
        raise ValueError("margin_report needs at least one input")
    source = machine.source if hasattr(machine, "net") else machine  # a Compiled: its source machine
    if isinstance(corrections, bool):
        corrections = (corrections,)
    if budget is not None:
        budget = check_float("budget", budget, 0.0, open_low=True)
    rows = []
    t_start = time.perf_counter()
    for i, corr in enumerate(corrections):
        opts = {k: v for k, v in compile_options.items() if corr or k != "correction_placement"}
        comp = compile_model(source, options(steps=steps, corrections=bool(corr), attention=attention, **opts))
        cert = certified_radius(comp) if attention == "hardmax" else None
        row_end = row_mid = None
        if budget is not None:  # this row's share of what is left, half of it to the random attack
            now = time.perf_counter()
            row_end = now + (t_start + budget - now) / (len(corrections) - i)
            row_mid = now + (row_end - now) / 2
        rnd = attack(comp, texts, eps_max, "random", trials, seed=seed, device=device, deadline=row_mid)
        grd = attack(comp, texts, eps_max, "gradient", max(1, trials // 4), steps=attack_steps, seed=seed,
                     eps0=rnd["eps"], device=device, deadline=row_end)
        best = min((rnd, grd), key=lambda r: r["eps"])
        rows.append({
            "machine": source.name, "steps": int(steps), "decoder_steps": comp.options["decoder_steps"],
            "corrections": bool(corr), "attention": attention, "width": comp.options["width"],
            "w_pos": comp.options["w_pos"], "inputs": len(texts),
            "certified": None if cert is None else cert["radius"],
            "binding": None if cert is None else cert["binding"],
            "certified_per_step": None if cert is None else cert["per_step"],
            "layer_budgets": None if cert is None else cert["budgets"],
            "eps_random": rnd["eps"], "eps_gradient": grd["eps"], "eps_min": best["eps"],
            "flip": None if not math.isfinite(best["eps"]) else
            {k: best[k] for k in ("method", "input", "step", "field", "coordinate")},
            "seconds": {"certified": None if cert is None else cert["seconds"], "random": rnd["seconds"],
                        "gradient": grd["seconds"]},
            "budget": budget,
            "attacked": {m: {k: r[k] for k in ("inputs_done", "inputs", "trials", "iterations_done", "iterations")}
                         for m, r in (("random", rnd), ("gradient", grd))},
            "complete": all(r["inputs_done"] == r["inputs"] and r["iterations_done"] == r["iterations"]
                            for r in (rnd, grd)),
        })
    return rows


def _num(x) -> str:
    if x is None:
        return "-"
    return "inf" if x == math.inf else f"{x:.3g}"


def margin_table(rows: list[dict]):
    """:func:`margin_report` rows as a :class:`~tm2nn.backends.protocol.Table` (the CLI's)."""
    def where(r):
        b = r["binding"]
        return "-" if not b else f"{b['check']} {b['op']} (step {b['step']})"

    def flip(r):
        f = r["flip"]
        return "-" if not f else f"{f['input']!r} step {f['step']}: {f['field']} ({f['method']})"

    def tightest(r):
        b = r.get("layer_budgets") or []
        return "; ".join(f"{x['op']} {_num(x['budget'])}" for x in b[:3]) or "-"

    def attacked(r):
        a = r.get("attacked")
        if not a:
            return "-"
        return "; ".join(f"{m[:3]} {x['inputs_done']}/{x['inputs']} inputs"
                         + ("" if x["iterations_done"] == x["iterations"] else
                            f", {x['iterations_done']}/{x['iterations']} {'bisections' if m == 'random' else 'steps'}")
                         for m, x in a.items())

    n = rows[0]["inputs"] if rows else 0
    budget = rows[0].get("budget") if rows else None
    cut = [r for r in rows if not r.get("complete", True)]
    title = (f"per-layer parameter perturbation margin (l2 per block, shared across decoder steps), "
             f"{n} inputs; the rows '<= i' certify decoder steps 0..i"
             + (f"; the {budget:g} s budget cut the attacks (column 'attacked'): raise --budget" if cut else ""))
    out = []
    for r in rows:
        out.append(["on" if r["corrections"] else "off", str(r["decoder_steps"]), _num(r["certified"]), where(r),
                    tightest(r), _num(r["eps_gradient"]), _num(r["eps_random"]), flip(r), attacked(r)])
        for s in r.get("certified_per_step") or []:
            if s["step"] < r["decoder_steps"]:
                out.append(["", f"<= {s['step']}", _num(s["radius"]), "", "", "", "", "", ""])
    return Table(title, ["corrections", "decoder steps", "certified (lower bound)", "binds at",
                         "tightest layer budgets", "gradient attack (upper)", "random directions (upper)",
                         "first flip", "attacked"], out, json=rows)


# ---------------------------------------------------------------------------------------------
# E. The backend's analyses
# ---------------------------------------------------------------------------------------------
def certified_margin(compiled) -> dict:
    """The certified per-layer all-layer margin (:func:`certified_radius`, derived in
    docs/transformer_margin.md): Lemma 2.3's γ for :mod:`tm2nn.verify.statistics`."""
    r = certified_radius(compiled, per_step=False, budgets=False)
    return {**r, "kind": "per-layer: every parameter block moves by <= radius (l2) at every decoder step; "
                         "a lower bound on rho (docs/transformer_margin.md)"}


def margin(ir, opts: Options, *, samples: int, trials: int, seed: int, engines=None, device=None,
           budget: float | None = None) -> Table:
    """Wei-Chen-Ma's all-layer margin of the transformer: the certified lower bound and two
    attacks (:func:`margin_report`), on ``samples`` tapes of the verifier's input space; with
    and without corrections (only without, for ``--no-corrections``); the attacks on
    ``device`` (default: the CPU)."""
    if engines and set(engines) != {"torch"}:
        raise OptionError("the transformer's margin attacks run in torch (they need its gradients): "
                          "{engines} takes only torch", "engines")
    samples, trials = check_int("samples", samples, 1), check_int("trials", trials, 1)
    seed = check_seed("seed", seed)
    check_source(ir)
    space = InputSpace(ir.alphabet, 0, min(EXHAUSTIVE_CELLS, opts.steps + 1), EXHAUSTIVE_TAPES)
    texts = space.pick(samples, seed)[0]
    if len(texts) > samples:  # an exhaustive space larger than asked: a seeded sample of it
        texts = random.Random(seed).sample(texts, samples)
    rows = margin_report(ir, texts, steps=opts.steps, corrections=(True, False) if opts.corrections else (False,),
                         seed=seed, trials=trials, attention=opts.attention,
                         correction_placement=opts.correction_placement, device=device, budget=budget)
    return margin_table(rows)


def margin_attack(compiled, *, samples: int = 64, trials: int = 8, seed: int = 0, deadline=None,
                  device=None) -> dict:
    """The ``margin_attack`` analysis: the random-direction attack (:func:`.perturbed_decode.attack`)
    on these weights, on ``samples`` tapes of the certificate's input space: an upper bound
    next to the certified radius of a loaded or trained model."""
    texts, _ = input_texts(compiled, samples, seed)
    r = attack(compiled, texts[:samples], 1.0, "random", trials, seed=seed, device=device, deadline=deadline)
    return {"eps": r["eps"], "method": "random", "inputs": len(texts[:samples])}
