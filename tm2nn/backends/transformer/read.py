"""Lemmas C.7 and C.8 (Wei, Chen & Ma, App. C.2): the symbol under the new head.

* Lemma C.7 — encoder–decoder attention to the input cell at l_i: ``scr2`` gets its
  symbol and ``scr4:2`` = 1(l_i is an input cell); the null position wins otherwise.
* Lemma C.8 — three ReLU layers choose the last written symbol (i' > 0), else the
  input symbol, else the blank, into ``sym1``; ``pos3`` moves to ``pos2`` and every
  other coordinate is cleared, giving o_i in the form (C.2).
"""

from __future__ import annotations

from tm2nn.backends.transformer.attention import attention, pm_bits
from tm2nn.backends.transformer.ff import copy, group, relu_layer
from tm2nn.backends.transformer.layout import Layout, symbol_label
from tm2nn.nets import Op, Space

CITE_C7 = "Wei, Chen & Ma, Lemma C.7: encoder-decoder attention, x_{l_i} into scr2"
CITE_C8 = "Wei, Chen & Ma, Lemma C.8: a_i = u_{i'} | x_{l_i} | blank, into sym1"


def read_input(lay: Layout, x: str, enc: str, prefix: str, *, mode: str, beta: float) -> tuple[list[Op], str]:
    """Lemma C.7: Q = (2 pos3 - 1, 1), K(e) = (2 e^{pos1} - 1, 0), K_0 = (0, w_pos - 1),
    V(e)^{scr2} = e^{sym1}, V(e)^{scr4_2} = 1."""
    h, w = lay.space, lay.w_pos
    msb = lay.bits_msb_first
    vals = {(f"scr2:{symbol_label(a)}", f"sym1:{symbol_label(a)}"): 1.0 for a in lay.alphabet}
    op = attention(f"{prefix}.c7", (x, enc), h, h, pm_bits([f"pos3:b{k}" for k in msb]) + [({}, 1.0)],
                   pm_bits([f"pos1:b{k}" for k in msb]) + [({}, 0.0)], vals, {"scr4:2": 1.0},
                   [0.0] * w + [w - 1.0], mode=mode, beta=beta, cite=CITE_C7)
    return [op], op.name


def combine(lay: Layout, x: str, prefix: str) -> tuple[list[Op], str]:
    """Lemma C.8: v = (1(i'>0), 1(i'=0)·1(l_i ≤ m), 1(i'=0)·1(l_i > m)), then
    ``sym1 = v1·scr1 + v2·scr2 + v3·1_blank`` (ANDs as in Prop. B.2)."""
    h = lay.space
    syms = [symbol_label(a) for a in lay.alphabet]
    keep = group(h, "st") + group(h, "pos3")
    s1 = Space(tuple(keep + group(h, "scr1") + group(h, "scr2") + ["v:1", "v:2", "v:3"]))
    w1 = copy(keep + group(h, "scr1") + group(h, "scr2"), {})
    w1[("v:1", "scr4:1")] = 1.0
    w1[("v:2", "scr4:2")] = 1.0
    w1[("v:2", "scr4:1")] = -1.0
    w1[("v:3", "scr4:1")] = -1.0
    w1[("v:3", "scr4:2")] = -1.0
    ops = relu_layer(f"{prefix}.c8.case", x, h, s1, w1, {"v:3": 1.0}, CITE_C8)
    s2 = Space(tuple(keep + [f"t1:{a}" for a in syms] + [f"t2:{a}" for a in syms] + ["t3:blank"]))
    w2, b2 = copy(keep, {}), {}
    for a in syms:
        w2[(f"t1:{a}", f"scr1:{a}")] = 1.0
        w2[(f"t1:{a}", "v:1")] = 1.0
        b2[f"t1:{a}"] = -1.0
        w2[(f"t2:{a}", f"scr2:{a}")] = 1.0
        w2[(f"t2:{a}", "v:2")] = 1.0
        b2[f"t2:{a}"] = -1.0
    w2[("t3:blank", "v:3")] = 1.0
    ops += relu_layer(f"{prefix}.c8.and", f"{prefix}.c8.case", s1, s2, w2, b2, CITE_C8)
    w3 = copy(group(h, "st"), {})
    for k in range(lay.w_pos):
        w3[(f"pos2:b{k}", f"pos3:b{k}")] = 1.0
    for a in syms:
        w3[(f"sym1:{a}", f"t1:{a}")] = 1.0
        w3[(f"sym1:{a}", f"t2:{a}")] = 1.0
    w3[(f"sym1:{symbol_label(lay.blank)}", "t3:blank")] = 1.0
    ops += relu_layer(f"{prefix}.c8.out", f"{prefix}.c8.and", s2, h, w3, None, CITE_C8)
    return ops, f"{prefix}.c8.out"
