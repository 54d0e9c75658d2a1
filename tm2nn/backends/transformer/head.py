"""Lemma C.2 (Wei, Chen & Ma, App. C.2): Bin(l_i) = Bin(l_{i-1} - v1 + v2) by ReLU layers.

The lemma builds the binary adder as a depth-O(w_pos) circuit.  We use a carry-lookahead
form of the same adder, which needs 3 ReLU layers whatever w_pos is, with ‖θ‖₁ =
O(w_pos²) (the lemma allows O(w_pos(|Z|+|A|+w_pos))).  In the paper's units that is 3
transformer layers (:mod:`.paper_layers`): §4.1's feed-forward block has 3 ReLU layers,
but the proof of Theorem 4.1 reserves its last 2 for the correction, so each lemma
layer takes one transformer layer (with identity attention).  The adder:

* bit k of l ± 1 flips iff every lower bit is 1 (increment) or 0 (decrement), so
  ``inc_k = φ(v2 + Σ_{e<k} b_e - k)`` and ``dec_k = φ(v1 - Σ_{e<k} b_e)`` (ANDs as in
  Prop. B.2), and ``f_k = inc_k + dec_k`` (v1, v2 are never both 1);
* ``b'_k = b_k XOR f_k = φ(b_k - f_k) + φ(f_k - b_k)``.

The output (C.5) holds st, sym2, pos1, pos2 and the new ``pos3``; the movement bits
are cleared.
"""

from __future__ import annotations

from tm2nn.backends.transformer.ff import copy, group, relu_layer
from tm2nn.backends.transformer.layout import Layout
from tm2nn.nets import Op, Space

CITE = "Wei, Chen & Ma, Lemma C.2: Bin(l_i) from Bin(l_{i-1}) and q_i (carry-lookahead adder)"


def head_move(lay: Layout, x: str, prefix: str) -> tuple[list[Op], str]:
    h = lay.space
    keep = group(h, "st") + group(h, "sym2") + group(h, "pos1") + group(h, "pos2")
    ks = range(lay.w_pos)
    a_space = Space(tuple(keep + [f"inc:b{k}" for k in ks] + [f"dec:b{k}" for k in ks]))
    wa, ba = copy(keep, {}), {}
    for k in ks:
        wa[(f"inc:b{k}", "mv:R")] = 1.0
        wa[(f"dec:b{k}", "mv:L")] = 1.0
        for e in range(k):
            wa[(f"inc:b{k}", f"pos2:b{e}")] = 1.0
            wa[(f"dec:b{k}", f"pos2:b{e}")] = -1.0
        ba[f"inc:b{k}"] = -float(k)
    # Layer B reads pos2 again, so layer A copies it (already in keep).
    ops = relu_layer(f"{prefix}.carry", x, h, a_space, wa, ba, CITE)
    b_space = Space(tuple(keep + [f"xa:b{k}" for k in ks] + [f"xb:b{k}" for k in ks]))
    wb = copy(keep, {})
    for k in ks:
        wb[(f"xa:b{k}", f"pos2:b{k}")] = 1.0
        wb[(f"xa:b{k}", f"inc:b{k}")] = -1.0
        wb[(f"xa:b{k}", f"dec:b{k}")] = -1.0
        wb[(f"xb:b{k}", f"pos2:b{k}")] = -1.0
        wb[(f"xb:b{k}", f"inc:b{k}")] = 1.0
        wb[(f"xb:b{k}", f"dec:b{k}")] = 1.0
    ops += relu_layer(f"{prefix}.xor", f"{prefix}.carry", a_space, b_space, wb, None, CITE)
    wc = copy(keep, {})
    for k in ks:
        wc[(f"pos3:b{k}", f"xa:b{k}")] = 1.0
        wc[(f"pos3:b{k}", f"xb:b{k}")] = 1.0
    ops += relu_layer(f"{prefix}.out", f"{prefix}.xor", b_space, h, wc, None, CITE)
    return ops, f"{prefix}.out"
