"""``tm2nn info`` rows for the transformer, the function class F_{w,d,α,T} of Wei, Chen
& Ma §4.1 that a compiled model belongs to, and the paper's quantities checked from the
weights.

Theorem 4.1: for Turing machines with k states, alphabet A and time bound T, the class
F_{w,d,α,T} with ``w ≳ k|A| + log T``, ``d ≈ log T`` and ``α = poly(k, |A|, log T)``
SM-approximates them with sample complexity poly(k, |A|, log T)·Õ(log(wd)/ε²).

* :func:`function_class` reads w, d, α (and more) off a built network;
* :func:`step_l1_bound` is ‖θ‖₁ of one decoder step as the lemmas build it, a
  polynomial of degree 2 in w_pos (so O(log² T)) with coefficients in k and |A|;
* :func:`check_paper_quantities` asserts both from a compiled model's weights: depth
  exactly ``D_CONST + D_PER_BIT·w_pos`` paper layers per step, and ‖θ‖₁ per step within
  the bound.  A weight that grows with T, or layers that do, fail it (tested).
"""

from __future__ import annotations

import math

import numpy as np

from tm2nn.backends.transformer.layout import Layout
from tm2nn.backends.transformer.paper_layers import decoder, is_cls_readout, paper_layers
from tm2nn.ir.machine import Machine
from tm2nn.nets import Attention, Embed, Net, SparseMatrix

#: Paper transformer layers (:mod:`.paper_layers`) of one decoder step:
#: Lemma C.1 2 (pair, next) + Lemma C.2 3 (carry, xor, out) + Claim C.4 1 + Claim C.6 1
#: + Lemma C.7 with C.8's first ReLU layer 1 + C.8's two further ReLU layers 2 = 10,
#: and Claim C.5's one layer per bit of w_pos.  The correction placement does not change
#: the count: a correction is the end of a layer, not a layer.
D_CONST = 10
D_PER_BIT = 1
#: The prologue (o_0 from h_0): Lemma C.7 with C.8's first layer, and C.8's other two.
D_PROLOGUE = 3


class PaperQuantityError(AssertionError):
    """A compiled transformer whose depth or weights are not what the construction gives."""


def _l1(t) -> float:
    return t.l1() if isinstance(t, SparseMatrix) else float(np.abs(np.asarray(t, dtype=np.float64)).sum())


def op_l1(op) -> float:
    """‖θ‖₁ of one op's parameters.  Positional encodings (``positions``: Bin(i), a fixed
    function, not a parameter) are left out.  A softmax attention counts its queries
    β-scaled: softmax(β·Q(h)ᵀK) is the attention with W_q, b_q scaled by β."""
    total = sum(_l1(t) for name, t in op.tensors().items() if name != "positions")
    if isinstance(op, Attention) and op.mode == "softmax":
        total += (op.beta - 1.0) * (op.wq.l1() + _l1(op.bq))
    return total


def _widths(net: Net) -> list[int]:
    out = [len(s) for v, s in net.spaces.items() if net.kinds[v] == "vector"]
    return out + [op.key_width for op in net.nodes if isinstance(op, Attention)]


def dense_layer_params(w: int) -> int:
    """Parameters of one dense transformer layer of width w (§4.1): two attention
    modules, each W_q, W_k, W_v (w×w) with b_q, b_k, b_v and the null K_0, V_0 (w each),
    and the feed-forward block φ(W3 φ(W2 φ(W1 h + b1) + b2) + b3) (3 × (w² + w)): 9w² + 13w."""
    return 2 * (3 * w * w + 5 * w) + 3 * (w * w + w)


def function_class(net: Net) -> dict:
    """The smallest F_{w,d,α,T} of Wei, Chen & Ma §4.1 that holds this model:

    * ``w``: the widest hidden vector of the prologue and the decoder step (an attention's
      key width included), so that every layer embeds in width w by zero padding
      (``w_tm`` is App. C's w_TM, the width of the decoder value h);
    * ``d``: paper transformer layers per decoder step (:func:`.paper_layers.count`),
      ``d_prologue`` those of the prologue, ``d_total = d·T' + d_prologue``: the proof's
      "very deep network" of Theorem D.6, depth O(T log T) (T' = ``decoder_steps``);
    * ``alpha``: ‖θ‖₁ of all parameters — the encoder table E, h_0, every weight and bias
      of the prologue and of the decoder step (shared by all steps: counted once), and
      θ_cls when present (its prologue copy included); Bin(i) is fixed, not counted;
      softmax β is folded into the queries (:func:`op_l1`); ``alpha_per_step`` the
      decoder step's share;
    * ``p``: the parameters of the dense architecture of width w with d + d_prologue
      layers (:func:`dense_layer_params` each), plus E (|A|·w), h_0 (w) and θ_cls (w,
      when present) — what a learner of F_{w,d,T} would fit;
    * ``beta``: the softmax β, or None for hard-max."""
    dec = decoder(net)
    body, pro = dec.body, dec.prologue
    enc = [op for op in net.nodes if isinstance(op, Embed)]
    layers = paper_layers(body)
    d, d_pro = len(layers), len(paper_layers(pro))
    w = max(_widths(body) + _widths(pro) + [len(op.out) for op in enc])
    step = sum(op_l1(op) for op in body.nodes)
    alpha = step + sum(op_l1(op) for op in pro.nodes) + sum(op_l1(op) for op in enc) + op_l1(dec)
    has_cls = any(is_cls_readout(op) for op in body.nodes)
    betas = {op.beta for op in body.nodes + pro.nodes if isinstance(op, Attention) and op.mode == "softmax"}
    n_sym = sum(len(p.space) for p in net.inputs if p.kind == "tokens")
    p = (d + d_pro) * dense_layer_params(w) + n_sym * w + w + (w if has_cls else 0)
    return {"w": int(w), "w_tm": len(body.inputs[0].space), "d": d, "d_prologue": d_pro,
            "d_total": d * dec.steps + d_pro, "decoder_steps": dec.steps,
            "corrected_layers": sum(layer.corrected for layer in layers),
            "alpha": float(alpha), "alpha_per_step": float(step), "p": int(p),
            "beta": float(max(betas)) if betas else None}


# -- ‖θ‖₁ of one decoder step, lemma by lemma ------------------------------------------------
def function_class_of(compiled) -> dict:
    """The backend's ``function_class`` analysis: Theorem 4.1's F_{w,d,α,T} for this model
    (:func:`function_class`): ``w``, ``d`` (paper layers per decoder step), ``d_total``,
    ``alpha`` (‖θ‖₁ of all parameters, softmax β folded into the queries),
    ``alpha_per_step``, ``p`` (dense parameters of that width and depth) and ``beta``; and
    Theorem 4.1's statement (``theorem``, ``order``, ``scaling``)."""
    fc = function_class(compiled.net)
    lay = Layout.from_json(compiled.output_encoding["layout"])
    T = int(compiled.output_encoding["source_steps"])
    return {**fc, "theorem": "Theorem 4.1", "order": "poly(k, |A|, log T) log(wd) / eps^2",
            "scaling": {"k": len(lay.states), "|A|": len(lay.alphabet), "T": T, "log T": math.log2(T)},
            "scaling_how": "k: states of the stay-free machine the decoder runs (passes/stay.py); "
                           "T: the source step bound (the decoder runs T' = decoder_steps)",
            "how": {"w": "the widest vector (corrections: 2 w_TM, a round doubles what it corrects)",
                    "d": "paper transformer layers per decoder step (paper_layers.py): 10 + w_pos",
                    "alpha": "||theta||_1 of E, h_0, the prologue, one decoder step (shared), theta_cls; "
                             "softmax: beta folded into W_q, b_q",
                    "p": "(d + 3)(9w^2 + 13w) + |A| w + w: dense attention and feed-forward blocks of width w"}}


def step_l1_terms(k: int, a: int, w_pos: int, *, corrections: bool = True, placement: str = "groups",
                  cls: bool = False, beta: float = 1.0) -> dict[str, float]:
    """An upper bound on ‖θ‖₁ of each lemma's ops in one decoder step, counted from the
    builders (k = |Z| of the stay-free machine, a = |A|, W = w_pos, w = w_TM = k + 4a +
    4W + 5, P = k·a pairs).  Exact except where marked: a transition writes a move for
    at most every pair, and θ_cls has at most k nonzero entries.

    * Lemma C.1: layer 1 ``2P`` + biases ``P`` + copies ``2W``; layer 2 ≤ ``3P`` + ``2W``;
    * Lemma C.2: three copy blocks of ``k + a + 2W``, carry ``2W + 3W(W-1)/2``, xor ``6W``,
      out ``2W``;
    * Claim C.4: ``7W + 1``; Claim C.5, bit j: ``7(W + j) + 6`` and a ReLU layer copying
      h (``w``); Claim C.6: ``14W + a`` and its ReLU layer ``w - W``;
    * Lemma C.7 ``7W + a + 1``; Lemma C.8 ``3k + 3W + 10a + 8``;
    * a Prop. 3.4 round on n coordinates: ``2n + n·(1/3 + 2/3) + 6n = 9n``; ``groups``:
      on h (n = w) after C.1, C.2, C.4, each C.5 bit, C.6 and C.8; ``layers``: after
      every paper layer, on that layer's output;
    * softmax: the queries (C.4 ``3W + 1``, C.5 ``3(W + j) + 2``, C.6 ``6W + 1``, C.7
      ``3W + 1``) count β times."""
    W, P = w_pos, k * a
    w = k + 4 * a + 4 * W + 5
    keep = k + a + 2 * W
    queries = (3 * W + 1) + sum(3 * (W + j) + 2 for j in range(W)) + (6 * W + 1) + (3 * W + 1)
    t = {
        "Lemma C.1": 3 * P + 2 * W + 3 * P + 2 * W,
        "Lemma C.2": 3 * keep + 2 * W + 1.5 * W * (W - 1) + 6 * W + 2 * W,
        "Claims C.4-C.6": (7 * W + 1) + sum(7 * (W + j) + 6 + w for j in range(W)) + (14 * W + a) + (w - W),
        "Lemmas C.7-C.8": (7 * W + a + 1) + (3 * k + 3 * W + 10 * a + 8),
        "softmax beta on the queries": (beta - 1.0) * queries,
    }
    if corrections and placement == "groups":
        t["Prop. 3.4 corrections"] = 9 * w * (W + 5)
    elif corrections:
        outs = [P + 2 * W, w, k + a + 4 * W, k + a + 4 * W, w, w, *[w] * W, w, k + W + 2 * a + 3,
                k + W + 2 * a + 1, w]
        t["Prop. 3.4 corrections"] = 9 * sum(outs)
    if cls:
        t["theta_cls"] = k
    return t


def step_l1_bound(k: int, a: int, w_pos: int, **kw) -> float:
    """The sum of :func:`step_l1_terms`."""
    return float(sum(step_l1_terms(k, a, w_pos, **kw).values()))


def l1_constant(k: int, a: int, **kw) -> float:
    """C with ``step_l1_bound(w_pos) ≤ C·w_pos²`` for every w_pos ≥ 1, independent of T:
    the bound is c2·W² + c1·W + c0 (w_TM is linear in W), and for W ≥ 1 that is at most
    (c2 + max(c1, 0) + max(c0, 0))·W²."""
    f0, f1, f2 = (step_l1_bound(k, a, W, **kw) for W in (0, 1, 2))
    c2 = (f2 - 2 * f1 + f0) / 2
    c1 = f1 - f0 - c2
    return c2 + max(c1, 0.0) + max(f0, 0.0)


def check_paper_quantities(compiled) -> dict:
    """Assert Theorem 4.1's quantities from a compiled transformer's weights (raises
    :class:`PaperQuantityError`):

    * depth: paper layers per decoder step = ``D_CONST + D_PER_BIT·w_pos`` exactly, and
      ``D_PROLOGUE`` in the prologue — d = O(log T);
    * ‖θ‖₁ of a decoder step ≤ :func:`step_l1_bound` (k, |A|, w_pos) ≤ C·w_pos² with C
      from :func:`l1_constant`, which does not depend on T — ‖θ‖₁ = O(log² T).

    Returns the function class with the expected values beside it."""
    lay = Layout.from_json(compiled.output_encoding["layout"])
    opts = {**compiled.build.get("options", {}), **compiled.options}
    fc = function_class(compiled.net)
    W = lay.w_pos
    d_want = D_CONST + D_PER_BIT * W
    if fc["d"] != d_want or fc["d_prologue"] != D_PROLOGUE:
        raise PaperQuantityError(
            f"depth: {fc['d']} paper transformer layers per decoder step and {fc['d_prologue']} in the prologue; "
            f"the construction has {D_CONST} + {D_PER_BIT}·w_pos = {d_want} (w_pos = {W}, T' = {lay.steps}) "
            f"and {D_PROLOGUE}: some layers do not come from the lemmas")
    kw = {"corrections": bool(opts.get("corrections", True)),
          "placement": opts.get("correction_placement", "groups"), "cls": bool(opts.get("cls_readout", False)),
          "beta": fc["beta"] or 1.0}
    k, a = len(lay.states), len(lay.alphabet)
    bound = step_l1_bound(k, a, W, **kw)
    C = l1_constant(k, a, **kw)
    if bound > C * W * W + 1e-9:  # pragma: no cover - a wrong l1_constant
        raise PaperQuantityError(f"l1_constant: {bound} > {C}·{W}²")
    if fc["alpha_per_step"] > bound + 1e-6 * bound:
        raise PaperQuantityError(
            f"‖θ‖₁ of a decoder step is {fc['alpha_per_step']:.6g}, above the construction's "
            f"{bound:.6g} (k = {k}, |A| = {a}, w_pos = {W}; ≤ C·w_pos² = {C:g}·{W}² = {C * W * W:.6g}): "
            f"a weight that the lemmas do not build, growing with T = {lay.steps}?")
    return {**fc, "d_expected": d_want, "alpha_per_step_bound": bound, "C": C, "w_pos": W}


# -- info rows ------------------------------------------------------------------------------------
def size_report(m: Machine, lay: Layout, net: Net, *, corrections: bool = True, placement: str = "groups",
                cls: bool = False) -> list[tuple[str, str, str]]:
    """Our sizes next to Theorem 4.1's ``w ≳ k|A| + log T``, ``d ≈ log T``,
    ``α = ‖θ‖₁ = poly(k, |A|, log T)``; the keywords are the compile options
    :func:`step_l1_terms` reads."""
    dec = decoder(net)
    body = dec.body.info()
    k, a = len(lay.states), len(lay.alphabet)
    w_scr = 2 * a + lay.w_pos + 5
    att = body.get("attention_layers", 0)
    fc = function_class(net)
    W = lay.w_pos
    C = l1_constant(k, a, corrections=corrections, placement=placement, cls=cls, beta=fc["beta"] or 1.0)
    return [
        ("width w", f"{lay.width} = |Z| {k} + 2|A| {2 * a} + 3·w_pos {3 * lay.w_pos} + w_scr {w_scr}",
         f"w ≳ k|A| + log T = {k * a + lay.w_pos} (App. C: w_TM = |Z| + 2|A| + 3 w_pos + w_scr)"),
        ("w_pos", f"{lay.w_pos} (times 1..{lay.steps}, cells -{lay.offset}..{lay.offset})",
         f"⌈log2 T⌉ = {max(1, (lay.steps - 1).bit_length())} (+1 for the two-way tape)"),
        ("decoder layers per step", f"{att} self/cross-attention, {body['depth']['relu']} ReLU",
         f"d ≈ log T: w_pos + 2 = {lay.w_pos + 2} self-attention (Claims C.4–C.6) + 1 cross (Lemma C.7)"),
        ("widest hidden layer", str(body["max_width"]), f"|Z||A| + w_TM = {k * a + lay.width} (Lemma C.1)"),
        ("‖θ‖₁ (decoder step)", f"{body['l1_norm']:.0f}",
         "poly(k, |A|, log T); Lemma C.3 alone O(w_pos(|Z|+|A|+w_pos))"),
        ("decoder steps", str(lay.steps), "T (stay moves cost two steps)"),
        ("F_{w,d,α,T}: w", f"{fc['w']} (widest vector of any layer; w_TM = {fc['w_tm']})",
         f"w ≳ k|A| + log T = {k * a + W} (Theorem 4.1)"),
        ("F_{w,d,α,T}: d", f"{fc['d']} paper transformer layers per step = {D_CONST} + w_pos "
         f"({fc['corrected_layers']} end in a round correction); prologue {fc['d_prologue']}",
         f"d ≈ log T (Theorem 4.1): w_pos = {W}"),
        ("depth as one network", f"d·T' + prologue = {fc['d_total']:,}",
         "O(T log T) (proof of Theorem 4.1, the view of Theorem D.6)"),
        ("F_{w,d,α,T}: α = ‖θ‖₁", f"{fc['alpha']:.0f} (decoder step {fc['alpha_per_step']:.0f}; Bin(i) fixed, "
         "not counted" + (f"; β = {fc['beta']:g} folded into the queries" if fc["beta"] else "") + ")",
         f"α = poly(k, |A|, log T); a step ≤ {C:.0f}·w_pos² (check_paper_quantities)"),
        ("dense parameters p", f"{fc['p']:,} = (d + {fc['d_prologue']})(9w² + 13w) + E, h_0"
         + (", θ_cls" if cls else ""),
         "sample complexity poly(k, |A|, log T)·Õ(log(wd)/ε²) (Theorem 4.1)"),
    ]

