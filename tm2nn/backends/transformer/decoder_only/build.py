"""Wei, Chen & Ma's App. C as a decoder-only transformer in TransformerLens's TL-native form
(issue 37; the derivation is docs/transformer_lens.md).

The sequence is the prompt ``<bos> x_0 .. x_{M-1} <go>`` followed by one outcome token per
machine step (:mod:`.tokens`).  The position of step i's token (``<go>`` is step 0) computes
step i+1's outcome from the tokens alone, in constant depth:

====  ==========================================================================================
L0    head (a): uniform attention averages the moves m_j, ``hp:avg = l_i/(p+1)``;
      MLP (b): multiplies back by the count p+1, known from Bin(p) in ``pos.weight``
L1    MLP (c): triangle hats per integer value write Bin(l_i + T) (``loc``), and Bin(p) of
      each step token (``sbit``)
L2    Lemma C.7 (head 0): the prompt cell at l_i; MLP: its round, and (c) again for
      Bin(l_{i-1} + T) of each step token (``wloc``, the cell it wrote)
L3    Claim C.4 (head 0), Claim C.5 bit 0 (head 1); MLP: Prop. 3.4 round of both
L3+j  Claim C.5 bit j (head 0), round                                  (j = 1 .. W-1)
L3+W  Claim C.6 (head 0); MLP: its round
L4+W  MLP: Lemma C.8 (the symbol read: written, else input, else blank)
L5+W  MLP: Lemma C.1 (the transition table: one outcome dimension per token)
====  ==========================================================================================

``head.weight`` maps each outcome dimension to its token's logit, and ``tok:halt`` (the
``<halt>`` token itself) to ``<halt>``.  Every weight is written by label; every residual
dimension has one; ``components`` records where each piece lives (the ground truth).
"""

from __future__ import annotations

import math

from tm2nn.backends.transformer.attention import pm_bits
from tm2nn.backends.transformer.decoder_only.tokens import (
    HALT,
    SPECIAL,
    Contract,
    outcome_table,
    parse_outcome,
)
from tm2nn.backends.transformer.layout import symbol_label
from tm2nn.errors import Tm2nnError
from tm2nn.ir.machine import GridMachine, Machine
from tm2nn.limits import check_memory
from tm2nn.nets.native import NativeTransformer, zero_weights
from tm2nn.nets.round import ROUND_HI, ROUND_LO, ROUND_SCALE
from tm2nn.options import OptionError

PAPER = ("Wei, Chen & Ma (2022), Statistically Meaningful Approximation: a theoretical analysis for "
         "approximating Turing machines with transformers, §4.1 and App. C")
CONSTRUCTION = "decoder-only form of App. C (tm2nn docs/transformer_lens.md)"
#: the default longest input (capped at T + 1: no run of T steps reads a cell past T)
DEFAULT_MAX_INPUT = 8
#: ``hp:l`` holds ``l + SNAP``: in float32 (ulp 1 on [2^23, 2^24)) the add rounds l to the
#: nearest integer, so the hats of L1 compute on exact integers (docs: "Exactness").
SNAP = 1.5 * 2.0 ** 23
FLOAT32_INT = 2.0 ** 24  # float32 holds every integer below this exactly
U32, U64 = 2.0 ** -24, 2.0 ** -53  # unit roundoff

CITE_A = "tm2nn's head position (a) for Wei, Chen & Ma Lemma C.2: uniform attention averages the moves"
CITE_B = "tm2nn's head position (b) for Lemma C.2: l_i = (p+1)·avg, the count selected from Bin(p)"
CITE_C = "tm2nn's head position (c) for Lemma C.2: Bin(l + T) by one triangle hat per integer value"
CITE_C4 = "Wei, Chen & Ma, Claim C.4: does a past step write at l_i (null key -> <bos> sink)"
CITE_C5 = "Wei, Chen & Ma, Claim C.5: bit j of i', the last step writing at l_i"
CITE_C6 = "Wei, Chen & Ma, Claim C.6: attend to step i', copy the symbol it wrote"
CITE_C7 = "Wei, Chen & Ma, Lemma C.7: attention to the prompt cell at l_i (encoder-decoder attention)"
CITE_C8 = "Wei, Chen & Ma, Lemma C.8: a_i = written | input | blank"
CITE_C1 = "Wei, Chen & Ma, Lemma C.1: the transition S(z, a), one-hot of (z, a) -> outcome"
CITE_R = "Wei, Chen & Ma, Prop. 3.4: round(z) = 3φ(z - 1/3) - 3φ(z - 2/3)"
FIELDS = ["state", "write", "move", "halt"]


def bitlen(n: int) -> int:
    return max(1, int(n).bit_length())


def bits_of(n: int, width: int) -> list[int]:
    """Bin(n), most significant bit first."""
    return [(n >> k) & 1 for k in range(width - 1, -1, -1)]


def sizes(steps: int, max_input: int) -> dict:
    """The widths a build at ``steps`` and ``max_input`` has (before any weight exists)."""
    n_ctx = max_input + 2 + steps
    w_pos = bitlen(n_ctx - 1)               # Bin(p), p < n_ctx
    w_loc = bitlen(max(2 * steps, steps + max_input - 1))  # Bin(cell + T), cells in [-T, max(T, M-1)]
    return {"n_ctx": n_ctx, "w_pos": w_pos, "w_loc": w_loc}


def error_bounds(steps: int, max_input: int, dtype: str) -> dict:
    """Bounds of docs/transformer_lens.md ("Exactness") at T = ``steps``: ``err_l`` on
    |l_est - l| after (a)+(b), and, in float64, ``err_bits`` on the hats' bits (float32 snaps
    to the integer and its hats are exact: ``err_bits`` 0 while ``exact``)."""
    s = sizes(steps, max_input)
    n, w, wl, T = s["n_ctx"], s["w_pos"], s["w_loc"], steps
    C = n + 1
    u = U32 if dtype == "float32" else U64
    err_l = 2 * n * n * u + (w + 2) * u * (C * (w + 1) + n)
    if dtype == "float32":
        exact = err_l < 0.25 and 2 * (2 * T + 1) * (2 * T + 2) < FLOAT32_INT and SNAP + 3 * T + 3 + gate(T) < FLOAT32_INT
        return {"err_l": err_l, "err_bits": 0.0 if exact else math.inf, "exact": exact}
    err_bits = err_l + 2 ** -29 + 6 * (2 * T + 1) * u * 2 * (2 * T + 1) * (2 * T + 2)
    return {"err_l": err_l, "err_bits": err_bits, "exact": 4 * (wl + w + 1) * err_bits < 0.25}


def exact_T(max_input: int) -> dict:
    """The largest T each dtype is exact for, by :func:`error_bounds`:
    ``{"float32": int, "float64": int}``."""
    out = {}
    for dtype in ("float32", "float64"):
        lo, hi = 0, 1
        while error_bounds(hi, max_input, dtype)["exact"] and hi < 1 << 40:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if error_bounds(mid, max_input, dtype)["exact"] else (lo, mid)
        out[dtype] = lo
    return out


def gate(steps: int) -> float:
    """G of the gated hats: G > 2T + 2 kills every hat of a position that is not a step."""
    return float(2 * steps + 3)


def beta_for(n_ctx: int) -> float:
    """Softmax inverse temperature: every selecting head's best score beats the rest by 1, and
    float error moves a score by at most 1/4, so the mass off the best is at most
    n_ctx·e^{-β/2} = 1/8, inside Prop. 3.4's radius 1/3."""
    return 2.0 * math.log(8.0 * n_ctx)


class _Builder:
    """Labelled residual dimensions and the native weights written by label."""

    def __init__(self, labels: list[str], vocab: list[str], n_layers: int, n_heads: int, d_head: int,
                 d_mlp: int, n_ctx: int, beta: float):
        self.labels, self.vocab = labels, vocab
        self.ix = {lab: i for i, lab in enumerate(labels)}
        self.tix = {t: i for i, t in enumerate(vocab)}
        self.d_head, self.n_heads, self.beta = d_head, n_heads, beta
        self.qscale = beta * math.sqrt(d_head)  # TransformerLens divides scores by sqrt(d_head)
        self.w = zero_weights(len(vocab), len(labels), n_layers, n_heads, d_head, d_mlp, n_ctx)
        self.used = [0] * n_layers  # MLP neurons placed per layer
        self.components: dict[str, dict] = {}

    def i(self, lab: str) -> int:
        return self.ix[lab]

    def head(self, layer: int, h: int, q_rows: list, k_rows: list, values: dict) -> None:
        """One attention head: ``q_rows``/``k_rows`` as ``({label: w}, bias)`` per coordinate
        (App. C's Q(h), K(h)), the score scaled by β; ``values``: ``{(out, in): w}``."""
        if len(q_rows) != len(k_rows) or len(q_rows) > self.d_head:
            raise ValueError("query and key widths differ or exceed d_head")
        p, base = f"layers.{layer}.attn.", h * self.d_head
        for r, ((qw, qb), (kw, kb)) in enumerate(zip(q_rows, k_rows)):
            for lab, v in qw.items():
                self.w[p + "q.weight"][base + r, self.i(lab)] += self.qscale * v
            self.w[p + "q.bias"][base + r] = self.qscale * qb
            for lab, v in kw.items():
                self.w[p + "k.weight"][base + r, self.i(lab)] += v
            self.w[p + "k.bias"][base + r] = kb
        outs = list(dict.fromkeys(o for o, _ in values))
        if len(outs) > self.d_head:
            raise ValueError("more values than d_head")
        for (o, src), v in values.items():
            r = outs.index(o)
            self.w[p + "v.weight"][base + r, self.i(src)] = v
            self.w[p + "o.weight"][self.i(o), base + r] = 1.0

    def neurons(self, layer: int, rows: list[tuple[dict, float, dict]]) -> list[int]:
        """MLP neurons ``relu(Σ w·in + b)`` writing ``{out: w}``; returns ``[first, stop]``."""
        p, a = f"layers.{layer}.mlp.", self.used[layer]
        for n, (ins, b, outs) in enumerate(rows):
            for lab, v in ins.items():
                self.w[p + "fc_in.weight"][a + n, self.i(lab)] += v
            self.w[p + "fc_in.bias"][a + n] = b
            for lab, v in outs.items():
                self.w[p + "fc_out.weight"][self.i(lab), a + n] += v
        self.used[layer] = a + len(rows)
        return [a, a + len(rows)]

    def round(self, layer: int, pairs: list[tuple[str, str]]) -> list[int]:
        """Prop. 3.4 on each ``(raw, clean)``: clean = 3φ(raw - 1/3) - 3φ(raw - 2/3)."""
        rows = []
        for raw, clean in pairs:
            rows.append(({raw: 1.0}, -ROUND_LO, {clean: ROUND_SCALE}))
            rows.append(({raw: 1.0}, -ROUND_HI, {clean: -ROUND_SCALE}))
        return self.neurons(layer, rows)

    def note(self, name: str, layer: int, *, cite: str, writes: list[str], heads=(), neurons=None,
             when: str = "all", determines=FIELDS) -> None:
        self.components[name] = {"layer": layer, "heads": list(heads), "neurons": neurons, "writes": list(writes),
                                 "determines": list(determines), "when": when, "cite": cite}


def _labels(m: Machine, outs: list[str], w_pos: int, w_loc: int) -> list[str]:
    syms = [symbol_label(a) for a in m.alphabet]
    pb = [f"b{k}" for k in range(w_pos - 1, -1, -1)]
    lb = [f"b{k}" for k in range(w_loc - 1, -1, -1)]
    return ["tok:bos", "tok:go", "tok:halt", "tok:step", "tok:move"] + [f"st:{q}" for q in m.states] \
        + [f"wr:{a}" for a in syms] + [f"inp:{a}" for a in syms] \
        + [f"pos:{b}" for b in pb] + [f"cell:{b}" for b in lb] + ["cell:input"] \
        + ["hp:avg", "hp:l"] + [f"loc:{b}" for b in lb] + [f"wloc:{b}" for b in lb] + [f"sbit:{b}" for b in pb] \
        + ["c4:raw", "c4:any"] + [f"c5raw:{b}" for b in pb] + [f"c5:{b}" for b in pb] \
        + [f"c6raw:{a}" for a in syms] + [f"c6:{a}" for a in syms] \
        + [f"c7raw:{a}" for a in syms] + ["c7raw:input"] + [f"c7:{a}" for a in syms] + ["c7:input"] \
        + [f"sym:{a}" for a in syms] + [f"out:{t}" for t in outs]


def build_native(machine: Machine, steps: int, max_input: int | None = None) -> NativeTransformer:
    """The decoder-only transformer that emits ``machine``'s run for up to ``steps`` steps
    from the prompt of any input of at most ``max_input`` symbols (default
    ``min(8, steps + 1)``); see the module docstring and docs/transformer_lens.md."""
    if isinstance(machine, GridMachine) or not isinstance(machine, Machine):
        raise Tm2nnError("the decoder-only transformer takes a one-tape line machine")
    if not isinstance(steps, int) or steps < 1:
        raise OptionError(f"{{steps}} must be an integer >= 1, got {steps!r}", "steps")
    if max_input is None:
        max_input = min(DEFAULT_MAX_INPUT, steps + 1)
    if not isinstance(max_input, int) or max_input < 0:
        raise OptionError(f"{{max_input}} must be an integer >= 0, got {max_input!r}", "max_input")
    m, T, M = machine, steps, max_input
    contract = Contract.of(m, M)
    vocab = list(contract.vocab)
    outs = [t for t in vocab[len(SPECIAL) + len(m.alphabet):]] + [HALT]
    s = sizes(T, M)
    n_ctx, W, WL = s["n_ctx"], s["w_pos"], s["w_loc"]
    syms = [symbol_label(a) for a in m.alphabet]
    A = len(syms)
    labels = _labels(m, outs, W, WL)
    n_layers, n_heads = W + 6, 2
    d_head = math.isqrt(max(WL + W + 1, A + 1) - 1) + 1
    d_head *= d_head  # a perfect square: sqrt(d_head), TransformerLens's scale, is exact
    d_mlp = max(2 * n_ctx, 3 * (2 * T + 1) + max(W, 2 * (A + 1)), 2 * A, 2 * A + 1, len(m.states) * A)
    d = len(labels)
    params = 2 * len(vocab) * d + n_ctx * d + n_layers * (4 * n_heads * d_head * (d + 1) + d_mlp * (2 * d + 1) + d)
    check_memory(params * 8 * 3, f"a decoder-only transformer of {params:,} parameters ({T:,} steps)", ("steps",))
    beta = beta_for(n_ctx)
    B = _Builder(labels, vocab, n_layers, n_heads, d_head, d_mlp, n_ctx, beta)
    pb = [f"b{k}" for k in range(W - 1, -1, -1)]
    lb = [f"b{k}" for k in range(WL - 1, -1, -1)]
    _embeddings(B, m, contract, M, T, n_ctx, pb, lb)
    _head_position(B, T, n_ctx, pb, lb)
    _binary_search(B, W, pb, lb)
    _read(B, m, W, syms, lb)
    _transition(B, m, W, syms, outs)
    meta = {"paper": PAPER, "construction": CONSTRUCTION, "machine": m.name, "blank": m.blank,
            "max_input": M, "steps": T, "beta": beta, "attn_scale_folded": math.sqrt(d_head),
            "exact_T": (ex := exact_T(M)), "exact": {k: T <= v for k, v in ex.items()}, "exact_reason": EXACT_REASON, "snap": SNAP, "gate": gate(T),
            "w_pos": W, "w_loc": WL, "offset": T, "tokens": contract.to_json(),
            "layers": {"head_position": [0, 2], "c7": 2, "c4": 3, "c5": [3, 2 + W], "c6": 3 + W, "c8": 4 + W,
                       "c1": 5 + W}}
    return NativeTransformer(vocab=vocab, residual_labels=labels, n_layers=n_layers, n_heads=n_heads,
                             d_head=d_head, d_mlp=d_mlp, n_ctx=n_ctx, weights=B.w, attn_scale=-1.0,
                             components=B.components, meta=meta)


EXACT_REASON = ("float32: hp:l snaps l to an integer (ulp 1 at 1.5·2^23) when the average and the "
                "product err by < 1/4, and the hats then sum integers below 2^24, exactly; "
                "float64: no snap, the hats' rounding keeps every attention score within 1/4 of "
                "its integer (docs/transformer_lens.md, Exactness)")


def _embeddings(B: _Builder, m: Machine, contract: Contract, M: int, T: int, n_ctx: int, pb, lb) -> None:
    """Token embedding: the token's own facts (App. C.1's st, the written symbol u_i of
    (C.2), the move q_i as m ∈ {-1, 0, 1}); positional: Bin(p) (β(i) of §4.1) and, for the
    prompt's cells, Bin(k + T) (the encoder's β(k) of (C.1), with tm2nn's two-way offset)."""
    E, P = B.w["tok_embed.weight"], B.w["pos.weight"]
    t = B.tix
    E[t["<bos>"], B.i("tok:bos")] = 1.0
    E[t["<go>"], B.i("tok:go")] = 1.0
    E[t["<go>"], B.i(f"st:{m.start}")] = 1.0
    E[t[HALT], B.i("tok:halt")] = 1.0
    for a in m.alphabet:
        E[t[a], B.i(f"inp:{symbol_label(a)}")] = 1.0
    for tok in B.vocab[len(SPECIAL) + len(m.alphabet):]:
        z, u, mv = parse_outcome(tok)
        E[t[tok], B.i("tok:step")] = 1.0
        E[t[tok], B.i("tok:move")] = {"L": -1.0, "S": 0.0, "R": 1.0}[mv]
        E[t[tok], B.i(f"st:{z}")] = 1.0
        E[t[tok], B.i(f"wr:{symbol_label(u)}")] = 1.0
    for p in range(n_ctx):
        for b, v in zip(pb, bits_of(p, len(pb))):
            P[p, B.i(f"pos:{b}")] = v
    for k in range(M):  # cell k of the input at position k + 1
        P[k + 1, B.i("cell:input")] = 1.0
        for b, v in zip(lb, bits_of(k + T, len(lb))):
            P[k + 1, B.i(f"cell:{b}")] = v


def _head_position(B: _Builder, T: int, n_ctx: int, pb, lb) -> None:
    """The head position l_i = Σ_{j≤i} m_j at every position, in constant depth (the decoder-only
    replacement of Lemma C.2's Bin(l_{i-1}) -> Bin(l_i), which reads the previous output)."""
    # (a) one head, equal scores: hp:avg = Σ_{j≤p} m_j / (p + 1)
    B.head(0, 0, [], [], {("hp:avg", "tok:move"): 1.0})
    B.note("head position (a): average of the moves", 0, cite=CITE_A, heads=[0], writes=["hp:avg"])
    # (b) g_n(p) = Σ_k s_nk b_k(p) - w_n is 0 iff p = n, ≤ -1 otherwise; C > n_ctx ≥ (n+1)|avg|
    C = float(n_ctx + 1)
    rows = []
    for n in range(n_ctx):
        bits = bits_of(n, len(pb))
        g = {f"pos:{b}": C * (1.0 if v else -1.0) for b, v in zip(pb, bits)}
        w = -C * sum(bits)
        rows.append(({"hp:avg": n + 1.0, **g}, w, {"hp:l": 1.0}))
        rows.append(({"hp:avg": -(n + 1.0), **g}, w, {"hp:l": -1.0}))
    nb = B.neurons(0, rows)
    B.w["layers.0.mlp.fc_out.bias"][B.i("hp:l")] = SNAP
    B.note("head position (b): times the count p + 1", 0, cite=CITE_B, neurons=nb, writes=["hp:l"])
    # (c) triangle hats on x = hp:l - SNAP: φ(x-v+1) - 2φ(x-v) + φ(x-v-1) is 1 at x = v, 0 at other integers
    G = gate(T)
    loc, wloc = [], []
    for v in range(-T, T + 1):
        bits = bits_of(v + T, len(lb))
        for c, o in ((1.0, 1.0), (0.0, -2.0), (-1.0, 1.0)):
            loc.append(({"hp:l": 1.0}, -SNAP - v + c, {f"loc:{b}": o for b, x in zip(lb, bits) if x}))
            wloc.append(({"hp:l": 1.0, "tok:move": -1.0, "tok:step": G}, -SNAP - v + c - G,
                         {f"wloc:{b}": o for b, x in zip(lb, bits) if x}))
    n1 = B.neurons(1, loc)
    B.note("head position (c): Bin(l_i + T), the cell to read", 1, cite=CITE_C, neurons=n1,
           writes=[f"loc:{b}" for b in lb])
    n2 = B.neurons(2, wloc)  # layer 2's MLP: halves d_mlp for one more layer (docs: "Sizes")
    B.note("head position (c): Bin(l_{i-1} + T), the cell each step wrote", 2, cite=CITE_C, neurons=n2,
           writes=[f"wloc:{b}" for b in lb], when="revisit")
    n3 = B.neurons(1, [({f"pos:{b}": 1.0, "tok:step": 1.0}, -1.0, {f"sbit:{b}": 1.0}) for b in pb])
    B.note("step positions: Bin(p) of each step token", 1, cite=CITE_C5, neurons=n3,
           writes=[f"sbit:{b}" for b in pb], when="revisit")


def _gated(labels: list[str]) -> list:
    """Key rows ``2·h_lab - tok:step``: ±1 bits at a step token, 0 at any other position."""
    return [({lab: 2.0, "tok:step": -1.0}, 0.0) for lab in labels]


def _binary_search(B: _Builder, W: int, pb, lb) -> None:
    """Claims C.4 and C.5 over the step positions: i' = the last step position whose written
    cell is l_i.  Keys Bin(l_{t-1} + T) and Bin(p) of step tokens (gated to 0 elsewhere), the
    null key a ``<bos>`` coordinate one below the best score; a Prop. 3.4 round after each."""
    loc = [f"loc:{b}" for b in lb]
    wl = len(lb)
    B.head(3, 0, pm_bits(loc) + [({}, 1.0)], _gated([f"wloc:{b}" for b in lb]) + [({"tok:bos": wl - 1.0}, 0.0)],
           {("c4:raw", "tok:step"): 1.0})
    B.note("C.4: some past step wrote l_i", 3, cite=CITE_C4, heads=[0], writes=["c4:raw"], when="revisit")
    n = B.round(3, [("c4:raw", "c4:any")])
    B.note("Prop. 3.4 round after C.4", 3, cite=CITE_R, neurons=n, writes=["c4:any"], when="revisit")
    for j in range(W):
        layer, h = (3, 1) if j == 0 else (3 + j, 0)
        found = [f"c5:{b}" for b in pb[:j]]
        q = pm_bits(loc) + pm_bits(found) + [({}, 1.0), ({}, 1.0)]
        k = _gated([f"wloc:{b}" for b in lb]) + _gated([f"sbit:{b}" for b in pb[:j + 1]]) \
            + [({"tok:bos": wl + j + 0.0}, 0.0)]
        B.head(layer, h, q, k, {(f"c5raw:{pb[j]}", "tok:step"): 1.0})
        B.note(f"C.5 bit {j}: bit {pb[j]} of i'", layer, cite=CITE_C5, heads=[h], writes=[f"c5raw:{pb[j]}"],
               when="revisit")
        n = B.round(layer, [(f"c5raw:{pb[j]}", f"c5:{pb[j]}")])
        B.note(f"Prop. 3.4 round after C.5 bit {j}", layer, cite=CITE_R, neurons=n, writes=[f"c5:{pb[j]}"],
               when="revisit")


def _read(B: _Builder, m: Machine, W: int, syms: list[str], lb) -> None:
    """Claim C.6 (after the search) and Lemma C.7 (layer 2, as soon as ``loc`` exists), their
    rounds, then Lemma C.8."""
    pb = [f"b{k}" for k in range(W - 1, -1, -1)]
    loc = [f"loc:{b}" for b in lb]
    wl, L = len(lb), 3 + W
    B.head(L, 0, pm_bits(loc) + pm_bits([f"c5:{b}" for b in pb]) + [({}, 1.0)],
           _gated([f"wloc:{b}" for b in lb]) + _gated([f"sbit:{b}" for b in pb]) + [({"tok:bos": wl + W - 1.0}, 0.0)],
           {(f"c6raw:{a}", f"wr:{a}"): 1.0 for a in syms})
    B.note("C.6: the symbol step i' wrote", L, cite=CITE_C6, heads=[0], writes=[f"c6raw:{a}" for a in syms],
           when="revisit")
    n = B.round(L, [(f"c6raw:{a}", f"c6:{a}") for a in syms])
    B.note("Prop. 3.4 round after C.6", L, cite=CITE_R, neurons=n, writes=[f"c6:{a}" for a in syms], when="revisit")
    vals = {(f"c7raw:{a}", f"inp:{a}"): 1.0 for a in syms}
    vals[("c7raw:input", "cell:input")] = 1.0
    B.head(2, 0, pm_bits(loc) + [({}, 1.0)],
           [({f"cell:{b}": 2.0, "cell:input": -1.0}, 0.0) for b in lb] + [({"tok:bos": wl - 1.0}, 0.0)], vals)
    B.note("C.7: the input symbol at l_i", 2, cite=CITE_C7, heads=[0],
           writes=[f"c7raw:{a}" for a in syms] + ["c7raw:input"], when="input")
    n = B.round(2, [(f"c7raw:{a}", f"c7:{a}") for a in syms] + [("c7raw:input", "c7:input")])
    B.note("Prop. 3.4 round after C.7", 2, cite=CITE_R, neurons=n, writes=[f"c7:{a}" for a in syms] + ["c7:input"],
           when="input")
    # Lemma C.8: v1 = c4, v2 = (1 - c4)·c7:input, v3 = (1 - c4)(1 - c7:input); ANDs of bits are one ReLU each
    blank = symbol_label(m.blank)
    rows = [({f"c6:{a}": 1.0, "c4:any": 1.0}, -1.0, {f"sym:{a}": 1.0}) for a in syms]
    rows += [({f"c7:{a}": 1.0, "c7:input": 1.0, "c4:any": -1.0}, -1.0, {f"sym:{a}": 1.0}) for a in syms]
    rows.append(({"c4:any": -1.0, "c7:input": -1.0}, 1.0, {f"sym:{blank}": 1.0}))
    n = B.neurons(L + 1, rows)
    B.note("C.8: the symbol under the head", L + 1, cite=CITE_C8, neurons=n, writes=[f"sym:{a}" for a in syms])


def _transition(B: _Builder, m: Machine, W: int, syms: list[str], outs: list[str]) -> None:
    """Lemma C.1: pair(z, a) = φ(st_z + sym_a - 1) one-hot, written to the dimension of the
    outcome token S(z, a) (``<halt>`` for a halting state or a missing rule); ``head.weight``
    reads each outcome dimension into its token's logit."""
    L = 5 + W
    table = outcome_table(m)
    rows = [({f"st:{z}": 1.0, f"sym:{symbol_label(a)}": 1.0}, -1.0, {f"out:{table[(z, a)]}": 1.0})
            for z in m.states for a in m.alphabet]
    n = B.neurons(L, rows)
    B.note("C.1: the transition table", L, cite=CITE_C1, neurons=n, writes=[f"out:{t}" for t in outs])
    H = B.w["head.weight"]
    for t in outs:
        H[B.tix[t], B.i(f"out:{t}")] = 1.0
    H[B.tix[HALT], B.i("tok:halt")] = 1.0  # after <halt>, <halt>
