"""``tm2nn info`` rows for the transformer: our sizes next to Theorem 4.1's
``w ≳ k|A| + log T``, ``d ≈ log T``, ``α = ‖θ‖₁ = poly(k, |A|, log T)``."""

from __future__ import annotations

from tm2nn.backends.transformer.layout import Layout
from tm2nn.ir.machine import Machine
from tm2nn.nets import Decode, Net


def size_report(m: Machine, lay: Layout, net: Net) -> list[tuple[str, str, str]]:
    dec = next(op for op in net.nodes if isinstance(op, Decode))
    body = dec.body.info()
    k, a = len(lay.states), len(lay.alphabet)
    w_scr = 2 * a + lay.w_pos + 5
    att = body.get("attention_layers", 0)
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
    ]
