"""Lemma C.1 (Wei, Chen & Ma, App. C.2): the transition S(z, a) as two feed-forward
ReLU layers (after Pérez et al. 2019, Lemma B.2).

In the paper's units these are 2 transformer layers (App. C.2: "we will simulate this
using two transformer layers where the attention parameters are all 0").

Layer 1 one-hot encodes the (state, symbol) pair, ``φ(st_z + sym1_a - 1)``, and copies
pos1, pos2.  Layer 2 writes the next state ``st``, the written symbol ``sym2`` and the
movement one-hot ``mv:L`` (v1) / ``mv:R`` (v2), and copies pos1, pos2 (C.4).

Halting is absorbing (App. C.1: "the transformer will loop in that state until it hits
a computation time T"): a halting state, or a pair with no rule, maps to itself, writes
the symbol it read and does not move (v1 = v2 = 0; Lemma C.2 then keeps l_i = l_{i-1}).
"""

from __future__ import annotations

from tm2nn.backends.transformer.ff import copy, group, relu_layer
from tm2nn.backends.transformer.layout import Layout, symbol_label
from tm2nn.ir.machine import Machine
from tm2nn.nets import Op, Space

CITE1 = "Wei, Chen & Ma, Lemma C.1: first layer, one-hot of (z_{i-1}, a_{i-1})"
CITE2 = "Wei, Chen & Ma, Lemma C.1: second layer, S(z, a) -> (z_i, u_i, q_i)"


def transition_table(m: Machine):
    """``(z, a) -> (z', u, move)`` for every pair, halting and missing pairs absorbing."""
    out = {}
    for z in m.states:
        for a in m.alphabet:
            r = m.delta.get((z, a))
            if r is None or z in m.halting:
                out[(z, a)] = (z, a, "S")
            else:
                out[(z, a)] = (r.next, r.write, r.move)
    return out


def transition(lay: Layout, m: Machine, x: str, prefix: str) -> tuple[list[Op], str]:
    """Lemma C.1 on value ``x`` (form C.3); returns the ops and the output value (C.4)."""
    h = lay.space
    keep = group(h, "pos1") + group(h, "pos2")
    pair = [f"pair:{z},{symbol_label(a)}" for z in m.states for a in m.alphabet]
    hid = Space(tuple(pair + keep))
    w1, b1 = {}, {}
    for z in m.states:
        for a in m.alphabet:
            p = f"pair:{z},{symbol_label(a)}"
            w1[(p, f"st:{z}")] = 1.0
            w1[(p, f"sym1:{symbol_label(a)}")] = 1.0
            b1[p] = -1.0
    copy(keep, w1)
    ops = relu_layer(f"{prefix}.pair", x, h, hid, w1, b1, CITE1)
    w2 = {}
    for (z, a), (z2, u, mv) in transition_table(m).items():
        p = f"pair:{z},{symbol_label(a)}"
        w2[(f"st:{z2}", p)] = 1.0
        w2[(f"sym2:{symbol_label(u)}", p)] = 1.0
        if mv in ("L", "R"):
            w2[(f"mv:{mv}", p)] = 1.0
        elif mv != "S":  # pragma: no cover - validate_machine allows only L/R/S on a line
            raise ValueError(f"move {mv!r}")
    copy(keep, w2)
    ops += relu_layer(f"{prefix}.next", f"{prefix}.pair", hid, h, w2, None, CITE2)
    return ops, f"{prefix}.next"
