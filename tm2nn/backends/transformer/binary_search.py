"""Lemma C.3 (Wei, Chen & Ma, App. C.2): find i' = max{t ≤ i : l_{t-1} = l_i}, the last
step that wrote the cell the head moves to, and copy the symbol u_{i'} it wrote.

* Claim C.4 — one self-attention: does any past step write at l_i?  (``scr4:1``)
* Claim C.5 — w_pos self-attention layers, each revealing the next most significant
  bit of i' (``scr4:3``), which a ReLU layer moves into ``scr3``;
* Claim C.6 — one self-attention that attends to step i' exactly and copies its
  written symbol ``sym2`` into ``scr1``; a ReLU layer clears ``scr3``.

Keys use Bin(l_{t-1}) (pos2) and Bin(t) (pos1) of each past step's representation at
the same layer, so each layer's key/value cache is filled once per step.
Scores are integers; the null key sits exactly between the best and the next best
possible score, which is what makes hard-max (and cold softmax) exact.
"""

from __future__ import annotations

from tm2nn.backends.transformer.attention import attention, pm_bits
from tm2nn.backends.transformer.ff import copy, relu_layer
from tm2nn.backends.transformer.layout import Layout
from tm2nn.nets import Op

CITE_C4 = "Wei, Chen & Ma, Claim C.4: self-attention, 1(i' > 0) into scr4_1"
CITE_C5 = "Wei, Chen & Ma, Claim C.5: self-attention, bit j+1 of i' into scr4_3"
CITE_C5_FF = "Wei, Chen & Ma, Claim C.5: ReLU layer, scr4_3 -> scr3 bit j+1, clear scr4_3"
CITE_C6 = "Wei, Chen & Ma, Claim C.6: self-attention to step i', copy u_{i'} into scr1"
CITE_C6_FF = "Wei, Chen & Ma, Claim C.6: ReLU layer clearing scr3"


def binary_search(lay: Layout, x: str, prefix: str, *, mode: str, beta: float,
                  corrections, shared_history: bool = True) -> tuple[list[Op], str]:
    """Claims C.4–C.6 on value ``x`` (form C.5); output in form (C.6).  ``corrections``
    is a function ``(ops, value, prefix) -> value`` inserting Prop. 3.4's round (or not).

    Every layer here attends with keys/values read from ``pos1``, ``pos2`` and ``sym2``
    only, and no layer here writes those groups (C.5's and C.6's ReLU layers write only
    ``scr3``/``scr4``), so at every past step they hold the same values in each layer's
    input as in ``x``.  With ``shared_history`` the C.5/C.6 layers therefore attend over
    ``x``'s history (one cache for the whole search, docs/transformer.md); without it,
    each over its own input's, literally as in the claims.  Both give the same net
    function (tested)."""
    h, w = lay.space, lay.w_pos
    msb = lay.bits_msb_first
    pos1 = [f"pos1:b{k}" for k in msb]
    pos2 = [f"pos2:b{k}" for k in msb]
    pos3 = [f"pos3:b{k}" for k in msb]
    scr3 = [f"scr3:b{k}" for k in msb]
    ops: list[Op] = []
    # Claim C.4: Q = (2 pos3 - 1, 1), K = (2 pos2 - 1, 0), K_0 = (0, w_pos - 1), V = e_{scr4_1}.
    name = f"{prefix}.c4"
    ops.append(attention(name, (x,), h, h, pm_bits(pos3) + [({}, 1.0)], pm_bits(pos2) + [({}, 0.0)],
                         {}, {"scr4:1": 1.0}, [0.0] * w + [w - 1.0], mode=mode, beta=beta, cite=CITE_C4))
    cur = corrections(ops, name, name)
    # Claim C.5, for j = 0 .. w_pos - 1: the (j+1)-th most significant bit of i'.
    for j in range(w):
        name = f"{prefix}.c5.{j}"
        q = pm_bits(pos3) + pm_bits(scr3[:j]) + [({}, 1.0), ({}, 1.0)]
        k = pm_bits(pos2) + pm_bits(pos1[: j + 1]) + [({}, 0.0)]
        k0 = [0.0] * (w + j + 1) + [w + j]
        ops.append(attention(name, (cur, x) if shared_history else (cur,), h, h, q, k, {}, {"scr4:3": 1.0}, k0,
                             mode=mode, beta=beta, cite=CITE_C5, history=shared_history))
        wts = copy([lab for lab in h.labels if lab != "scr4:3"], {})
        wts[(scr3[j], "scr4:3")] = 1.0
        ops += relu_layer(f"{name}.ff", name, h, h, wts, None, CITE_C5_FF)
        cur = corrections(ops, f"{name}.ff", f"{name}.ff")
    # Claim C.6: Q = (2 pos3 - 1, 2 scr3 - 1, 1), K = (2 pos2 - 1, 2 pos1 - 1, 0),
    # K_0 = (0, .., 2 w_pos - 1), V(h)^{scr1} = h^{sym2}.
    name = f"{prefix}.c6"
    vals = {(f"scr1:{s.split(':', 1)[1]}", s): 1.0 for s in (h.labels[i] for i in h.groups["sym2"])}
    ops.append(attention(name, (cur, x) if shared_history else (cur,), h, h,
                         pm_bits(pos3) + pm_bits(scr3) + [({}, 1.0)],
                         pm_bits(pos2) + pm_bits(pos1) + [({}, 0.0)], vals, {},
                         [0.0] * (2 * w) + [2 * w - 1.0], mode=mode, beta=beta, cite=CITE_C6,
                         history=shared_history))
    wts = copy([lab for lab in h.labels if not lab.startswith("scr3:")], {})
    ops += relu_layer(f"{name}.ff", name, h, h, wts, None, CITE_C6_FF)
    return ops, f"{name}.ff"
