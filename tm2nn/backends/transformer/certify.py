"""A certificate for any weights of the transformer construction's shape (issue 38, Deliver 2).

The tight certificate (:func:`.margin.tight_radius`) reads the construction's invariants off
its weights: separable ±1-bit scores with gaps of 1, binary intermediate values, ties only
between equal values.  Trained or edited weights of the same shapes keep none of them, so
this one reads what it needs from the net's *actual* forward pass over an input space
(derivation: docs/transformer_margin.md, "A certificate for any weights"):

* :func:`reference_run` — the inputs (the verifier's input space: every tape when it is
  small, else a seeded sample), the exact float64 forward pass with every value recorded
  (:class:`.perturbed_decode.PerturbedTransformer` at δ = 0, the emitted module's
  arithmetic), and the precondition: every decoded step against the interpreter's trace
  (:class:`.reference.TraceChecker`).  A net wrong on k of n inputs is not certified.
* :class:`GeneralBound` — per input row and decoder step, Lipschitz propagation of the
  per-block perturbations (every affine's (W, b), every attention's (Wq, bq, Wk, bk, Wv,
  bv, K_0, V_0), E, h_0 moving by ≤ ε in ℓ2) through the actual weights, with the actual
  norms, the actual score gaps of each hard-max attention (best score minus the best score
  of an item whose value differs from the winners'), and the actual distance of each
  decoded tap coordinate from its threshold.  Prop. 3.4 corrections with the
  construction's weights restart the error where the reference is within 1/3 of bits.
* §4.1's all-zero attention layers (every parameter 0: the residual passthrough that "sets
  the unused modules to implement the identity") are identity slots, not parameter
  blocks: both certificates skip them (:func:`is_zero_attention`, :func:`insert_zero_layers`).
"""

from __future__ import annotations

import dataclasses
import random
import time

import numpy as np

from tm2nn.backends.transformer.model import Options, options
from tm2nn.backends.transformer.model import compile as compile_model
from tm2nn.backends.transformer.paper_layers import paper_layers
from tm2nn.backends.transformer.perturbed_decode import (
    PerturbedTransformer,
    net_of,
    transformer_parts,
)
from tm2nn.backends.transformer.reference import TraceChecker
from tm2nn.backends.transformer.runtime import encode
from tm2nn.errors import Tm2nnError
from tm2nn.limits import check_memory
from tm2nn.nets import Affine, Attention, Concat, ReLU, Slice, SparseMatrix
from tm2nn.nets.round import ROUND_HI, ROUND_LO, ROUND_SCALE
from tm2nn.verify.margin_toolkit import (
    Coordinatewise,
    same_parameters,
    spectral_norm,
    sup_log_decades,
)


class MarginError(Tm2nnError, ValueError):
    """A net the certificate does not cover (softmax, a score that is not a sum of ±1
    bits, a tie between different values, an op it does not know)."""


def _is_round(A: Affine, B: Affine) -> bool:
    """Whether ``φ(B φ(A g + a) + b)`` is Prop. 3.4's round on every coordinate of g."""
    a, bm = A.weight, B.weight
    if bm.shape[0] != a.shape[1] or bm.shape[1] != a.shape[0] or np.any(B.bias != 0):
        return False
    ka = a.vals != 0
    ra, ca, va = a.rows[ka], a.cols[ka], a.vals[ka]
    if ra.size != a.shape[0] or np.any(np.bincount(ra, minlength=a.shape[0]) != 1) or np.any(va != 1.0):
        return False
    src = np.empty(a.shape[0], dtype=np.int64)
    src[ra] = ca
    low, high = A.bias == -ROUND_LO, A.bias == -ROUND_HI
    if not np.all(low | high):
        return False
    kb = bm.vals != 0
    r, c, v = bm.rows[kb], bm.cols[kb], bm.vals[kb]
    if np.any(np.bincount(r, minlength=bm.shape[0]) != 2):
        return False
    ok = np.where(v == ROUND_SCALE, low[c], np.where(v == -ROUND_SCALE, high[c], False)) & (src[c] == r)
    plus = np.bincount(r, weights=(v == ROUND_SCALE).astype(np.float64), minlength=bm.shape[0])
    return bool(ok.all() and np.all(plus == 1))


#: the inputs a sampled (not exhaustive) input space certifies
SAMPLES = 256
_ATTN_ARRAYS = ("bq", "bk", "bv", "null_key", "null_value")


def is_zero_attention(op) -> bool:
    """An attention op whose every parameter is 0: ``h + 0`` whatever it attends to (§4.1's
    unused module set to the identity), so not a parameter block of the construction."""
    return (isinstance(op, Attention) and not (np.any(op.wq.vals) or np.any(op.wk.vals) or np.any(op.wv.vals))
            and not any(np.any(getattr(op, a)) for a in _ATTN_ARRAYS))


def _zero_attention(name: str, inputs: tuple, w: int, w_src: int, history: bool = False) -> Attention:
    z = SparseMatrix((1, w), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    return Attention(name, inputs, wq=z, bq=np.zeros(1),
                     wk=SparseMatrix((1, w_src), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)),
                     bk=np.zeros(1), wv=SparseMatrix((w, w_src), np.zeros(0, np.int64), np.zeros(0, np.int64),
                                                     np.zeros(0)),
                     bv=np.zeros(w), null_key=np.zeros(1), null_value=np.zeros(w), history=history,
                     cite="Wei, Chen & Ma, proof of Theorem 4.1: an unused attention module set to the identity "
                          "(all parameters 0)")


def _with_zero_slots(net):
    """``net`` (a decoder body or the prologue) with every paper transformer layer's empty
    attention slots (:func:`.paper_layers.paper_layers`) filled by all-zero attention ops
    reading the layer's input, which the layer's first op then reads."""
    mem = net.inputs[1].name
    w_mem = len(net.inputs[1].space)
    body = any(isinstance(op, Attention) and op.is_self for op in net.nodes)
    firsts = {}
    for layer in paper_layers(net):
        first = layer.self_attn or layer.cross_attn or (layer.ff[0] if layer.ff else None)
        if first is not None and not (layer.self_attn and layer.cross_attn):
            firsts[first] = layer
    nodes = []
    for op in net.nodes:
        if op.name in firsts:
            layer, cur = firsts[op.name], op.inputs[0]
            w = len(net.spaces[cur])
            if body and not layer.self_attn:
                nodes.append(_zero_attention(f"{op.name}.zero_self", (cur,), w, w))
                cur = f"{op.name}.zero_self"
            if not layer.cross_attn and not (layer.self_attn and op.name == layer.self_attn):
                nodes.append(_zero_attention(f"{op.name}.zero_cross", (cur, mem), w, w_mem))
                cur = f"{op.name}.zero_cross"
            op = dataclasses.replace(op, inputs=(cur, *op.inputs[1:]))
        nodes.append(op)
    return dataclasses.replace(net, nodes=tuple(nodes))


def insert_zero_layers(compiled):
    """``compiled`` with §4.1's all-zero attention modules inserted where the build leaves
    them out (every paper layer's empty self- and encoder-decoder attention slot; the
    prologue has no self-attention): the same function, more parameter blocks, all zero."""
    net = net_of(compiled)
    embed, dec = transformer_parts(net)
    dec2 = dataclasses.replace(dec, prologue=_with_zero_slots(dec.prologue), body=_with_zero_slots(dec.body))
    nodes = tuple(dec2 if op is dec else op for op in net.nodes)
    return dataclasses.replace(compiled, net=dataclasses.replace(net, nodes=nodes))


def input_texts(compiled, samples: int = SAMPLES, seed: int = 0) -> tuple[list[str], str]:
    """The verifier's input space: every tape when small, else ``samples`` seeded ones."""
    space = TraceChecker(compiled).space()
    texts, how, _ = space.pick(samples, seed)
    if len(texts) > samples and how != "exhaustive":
        texts = random.Random(seed).sample(texts, samples)
    return texts, (f"all {len(texts)} tapes" if how == "exhaustive" else f"{len(texts)} random tapes (seed {seed})")


def reference_bytes(compiled, rows: int) -> int:
    """Bytes the recorded reference run holds: every value of every decoder step for every
    row, twice (torch, then numpy), plus a self-attention's history stack per step."""
    _, dec = transformer_parts(net_of(compiled))
    T = int(dec.steps)
    per_step = sum(len(dec.body.spaces[op.name]) for op in dec.body.nodes)
    width = len(dec.body.inputs[0].space)
    return 8 * rows * ((T + 1) * per_step * 2 + T * width * 3)


def reference_run(compiled, texts: list[str]):
    """(taps [R, T'+1, w], every value ``{(step, part, name): [R, n]}``, the encoder
    memory [R, L, w], wrong: a bool per input) of the exact float64 forward pass."""
    import torch

    P = PerturbedTransformer(compiled)
    tokens = encode(compiled, texts)
    rec: dict = {}
    with torch.no_grad():
        taps = P.run(tokens, record=rec)
        mem = P._encode(torch.as_tensor(tokens, dtype=torch.int64), None)
    taps = taps.numpy()
    checker = TraceChecker(compiled)
    div, _ = checker.compare(taps, texts, checker.prepare(texts))
    wrong = np.array([d is not None for d in div], dtype=bool)
    rec = {k: v.numpy() for k, v in rec.items()}
    dec = P.dec  # the decoder inputs: h_0, then o_(i-1) + β(i) (the evaluator's own sums)
    rec[(0, "prologue", dec.prologue.inputs[0].name)] = np.broadcast_to(
        np.asarray(P.params["init"]["init"].numpy()), (len(texts), len(dec.init))).copy()
    pos = P.dec_pos.numpy()
    for i in range(1, P.steps + 1):
        prev = (i - 1, "prologue" if i == 1 else "body", (dec.prologue if i == 1 else dec.body).outputs[0])
        rec[(i, "body", dec.body.inputs[0].name)] = rec[prev] + pos[i - 1]
    return taps, rec, mem.numpy(), wrong, P


def _norm(a: np.ndarray) -> np.ndarray:
    return np.sqrt((a * a).sum(-1))


class GeneralBound:
    """The general certificate's constants, read once from the reference run; :meth:`passes`
    evaluates the bound at one ε for every input row at once."""

    def __init__(self, compiled, rec: dict, mem: np.ndarray, P: PerturbedTransformer):
        self.embed, self.dec = transformer_parts(net_of(compiled))
        self.T = int(self.dec.steps)
        self.rec = rec
        self.norms: dict = {}
        cols = P.threshold_columns()
        self.tap_gap = []
        for i in range(self.T + 1):
            part, net = self._part(i)
            tap = rec[(i, part, net.outputs[1])]
            g = np.abs(tap - 0.5)
            other = np.setdiff1d(np.arange(tap.shape[1]), cols)
            g[:, other] = 0.5 - np.abs(tap[:, other] - np.rint(tap[:, other]))
            self.tap_gap.append(g.min(1) if g.shape[1] else np.full(len(tap), np.inf))
        self.progs = {}
        for part, net in (("prologue", self.dec.prologue), ("body", self.dec.body)):
            ins, nodes, i = [], list(net.nodes), 0
            uses: dict = {}
            for name in [j for op in nodes for j in op.inputs] + list(net.outputs):
                uses[name] = uses.get(name, 0) + 1
            while i < len(nodes):
                op = nodes[i]
                form = self._correction(nodes, i, uses)
                if form is not None:
                    A, B = nodes[i], nodes[i + 2]
                    ins.append(("cw", nodes[i + 3].name, A.inputs[0], nodes[i + 1].name, form,
                                spectral_norm(A.weight), spectral_norm(B.weight)))
                    i += 4
                    continue
                if isinstance(op, Affine):
                    ins.append(("affine", op.name, op.inputs[0], spectral_norm(op.weight)))
                elif isinstance(op, (ReLU, Slice)) or is_zero_attention(op):
                    ins.append(("copy", op.name, op.inputs[0]))
                elif isinstance(op, Concat):
                    ins.append(("concat", op.name, tuple(op.inputs)))
                elif isinstance(op, Attention):
                    if op.mode != "hardmax":
                        raise MarginError(f"attention {op.name!r} is {op.mode}: the certificate is for hard-max "
                                          "attention")
                    ins.append(("attn", op.name, op.inputs[0], op.source, op.is_self,
                                (spectral_norm(op.wq), spectral_norm(op.wk), spectral_norm(op.wv)),
                                self._attn_stats(op, part, mem)))
                else:
                    raise MarginError(f"{part} op {op.name!r}: the certificate does not know {op.kind} ops")
                i += 1
            self.progs[part] = ins

    def norm(self, i: int, part: str, name: str) -> np.ndarray:
        """‖value‖₂ per row in the reference run (cached)."""
        key = (i, part, name)
        if key not in self.norms:
            self.norms[key] = _norm(self.rec[key])
        return self.norms[key]

    @staticmethod
    def _correction(nodes, i, uses):
        """The :class:`Coordinatewise` form of ops i..i+3 when they are a correction's shape
        (Affine, ReLU, Affine, ReLU in a chain; Prop. 3.4's round with any weights of its
        sparsity), else None."""
        if not (i + 3 < len(nodes) and isinstance(nodes[i], Affine) and isinstance(nodes[i + 1], ReLU)
                and isinstance(nodes[i + 2], Affine) and isinstance(nodes[i + 3], ReLU)
                and nodes[i + 1].inputs == (nodes[i].name,) and nodes[i + 2].inputs == (nodes[i + 1].name,)
                and nodes[i + 3].inputs == (nodes[i + 2].name,)
                and all(uses.get(nodes[j].name, 0) == 1 for j in range(i, i + 3))):
            return None
        A, B = nodes[i], nodes[i + 2]
        return Coordinatewise.of(A.weight, A.bias, B.weight, B.bias)

    def _part(self, i):
        return ("prologue", self.dec.prologue) if i == 0 else ("body", self.dec.body)

    def _attn_stats(self, op: Attention, part: str, mem: np.ndarray) -> dict:
        """Per step: (half the score gap, ‖q‖, max ‖k_j‖, max ‖m_j‖) per row, from the
        reference run; the gap is the winners' score minus the best score of an item (or
        the null) whose value differs from theirs (∞ when every value is the same)."""
        steps = [0] if part == "prologue" else range(1, self.T + 1)
        wq, wk, wv = op.wq.dense(), op.wk.dense(), op.wv.dense()
        k0n = float(np.linalg.norm(op.null_key))
        out = {}
        for i in steps:
            h = self.rec[(i, part, op.inputs[0])]
            if op.is_self:
                m = np.stack([self.rec[(j, part, op.source)] for j in range(1, i + 1)], 1)
            else:
                m = mem if op.source == self.dec.prologue.inputs[1].name or op.source == self.dec.body.inputs[1].name \
                    else np.stack([self.rec[(i, part, op.source)]], 1)
            q = h @ wq.T + op.bq
            k = m @ wk.T + op.bk
            s = np.einsum("rtk,rk->rt", k, q)
            s0 = q @ op.null_key
            v = m @ wv.T + op.bv
            allv = np.concatenate([op.null_value[None, None, :].repeat(len(h), 0), v], 1)
            alls = np.concatenate([s0[:, None], s], 1)
            top = alls.max(1)
            win = alls == top[:, None]
            first = np.argmax(win, 1)
            vstar = allv[np.arange(len(h)), first]
            same = np.all(allv == vstar[:, None, :], axis=2)
            mixed = np.any(win & ~same, 1)
            other = np.where(same, -np.inf, alls).max(1)
            gap = np.where(mixed, 0.0, top - other)
            out[i] = (0.5 * gap, _norm(q), _norm(k).max(1), _norm(m).max(1), k0n)
        return out

    def passes(self, eps: float, horizon: int | None = None, why: list | None = None) -> bool:
        """Whether moving every block by ≤ ``eps`` keeps every decoded field of decoder steps
        0..horizon (default T) on every input; ``why`` gets the first failing check."""
        T = self.T if horizon is None else horizon
        hyp = np.hypot
        hist: dict = {}
        e_o = None
        for i in range(T + 1):
            part, net = self._part(i)
            x = net.inputs[0].name
            n_rows = len(self.tap_gap[i])
            e = {x: np.full(n_rows, eps) if i == 0 else e_o, net.inputs[1].name: np.full(n_rows, eps)}
            for ins in self.progs[part]:
                kind = ins[0]
                if kind == "affine":
                    _, out, inp, om = ins
                    e[out] = om * e[inp] + eps * hyp(self.norm(i, part, inp) + e[inp], 1.0)
                elif kind == "copy":
                    e[ins[1]] = e[ins[2]]
                elif kind == "concat":
                    e[ins[1]] = np.sqrt(sum(e[j] ** 2 for j in ins[2]))
                elif kind == "cw":
                    _, out, inp, mid, form, om_a, om_b = ins
                    e_in = e[inp]
                    xa = hyp(self.norm(i, part, inp) + e_in, 1.0)
                    xb = hyp(self.norm(i, part, mid) + om_a * e_in + eps * xa, 1.0)
                    osc = form.oscillation(self.rec[(i, part, inp)], e_in, self.rec[(i, part, out)])
                    e[out] = np.sqrt((osc * osc).sum(1)) + eps * (om_b * xa + xb)
                else:
                    _, out, h, src, is_self, (wq, wk, wv), stats = ins
                    half, qn, kmax, mmax, k0n = stats[i]
                    e_h = e[h]
                    if is_self:
                        e_x = hist[src] = np.maximum(hist.get(src, 0.0), e[src])
                    else:
                        e_x = e[src]
                    dq = wq * e_h + eps * hyp(self.norm(i, part, h) + e_h, 1.0)
                    dk = wk * e_x + eps * hyp(mmax + e_x, 1.0)
                    ds = np.maximum(dq * kmax + qn * dk + dq * dk, dq * k0n + qn * eps + dq * eps)
                    if np.any(~(ds < half)):
                        return self._fail(why, i, out, "attention score")
                    e[out] = e_h + np.maximum(wv * e_x + eps * hyp(mmax + e_x, 1.0), eps)
            if np.any(~(e[net.outputs[1]] < self.tap_gap[i])):
                return self._fail(why, i, net.outputs[1], "decoded tap")
            e_o = e[net.outputs[0]]
        return True

    @staticmethod
    def _fail(why, step, op, check) -> bool:
        if why is not None:
            why.append({"step": step, "op": op, "check": check})
        return False

    def radius(self, horizon: int | None = None) -> tuple[float, dict | None]:
        r = sup_log_decades(lambda e: self.passes(e, horizon))
        why: list = []
        self.passes(r * (1 + 1e-6) if r > 0 else 1e-300, horizon, why)
        return r, (why[0] if why else None)


def general_certificate(compiled, samples: int = SAMPLES, seed: int = 0) -> dict:
    """The precondition, then the general radius: ``{"certified", "wrong", "n", "space",
    "radius_general", "general_binding", "seconds"}`` (``certified`` False: no radius)."""
    t0 = time.perf_counter()
    texts, space = input_texts(compiled, samples, seed)
    check_memory(reference_bytes(compiled, len(texts)), f"the recorded reference run of {len(texts):,} tapes",
                 ("samples",))
    _, rec, mem, wrong, P = reference_run(compiled, texts)
    out = {"certified": not wrong.any(), "wrong": int(wrong.sum()), "n": len(texts), "space": space}
    if wrong.any():
        return {**out, "first_wrong": [texts[j] for j in np.flatnonzero(wrong)[:8]]}
    r, why = GeneralBound(compiled, rec, mem, P).radius()
    return {**out, "radius_general": r, "general_binding": why, "seconds": time.perf_counter() - t0}


def is_construction(compiled) -> bool:
    """Whether the weights are exactly those the construction builds for the source and
    options (§4.1's all-zero attention layers ignored: they are identity slots)."""
    names = {f.name for f in dataclasses.fields(Options)}
    opts = {k: v for k, v in compiled.options.items() if k in names and v is not None}
    built = compile_model(compiled.source, options(**opts))
    return same_parameters(_strip_zero(net_of(compiled)), net_of(built))


def _strip_zero(net):
    """``net`` without its all-zero attention ops (their readers read their input)."""
    embed, dec = transformer_parts(net)

    def strip(sub):
        rename, nodes = {}, []
        for op in sub.nodes:
            op = dataclasses.replace(op, inputs=tuple(rename.get(i, i) for i in op.inputs)) \
                if any(i in rename for i in op.inputs) else op
            if is_zero_attention(op):
                rename[op.name] = op.inputs[0]
                continue
            nodes.append(op)
        return dataclasses.replace(sub, nodes=tuple(nodes), outputs=tuple(rename.get(o, o) for o in sub.outputs))

    dec2 = dataclasses.replace(dec, prologue=strip(dec.prologue), body=strip(dec.body))
    return dataclasses.replace(net, nodes=tuple(dec2 if op is dec else op for op in net.nodes))
