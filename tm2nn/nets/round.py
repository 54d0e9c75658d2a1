"""Proposition 3.4's round gadget (Wei, Chen & Ma 2022), shared by the relu-circuit and
transformer constructions.

``round(z) = 3φ(z - 1/3) - 3φ(z - 2/3)`` maps every ``z`` within 1/3 of a bit back to that
bit exactly: Wei, Chen & Ma use it after every circuit layer (Lemma 3.3's large all-layer
margin) and as the last two feedforward layers of every transformer layer (proof of
Theorem 4.1).  :func:`round_correction` builds it as network-IR ops.
"""

from __future__ import annotations

import numpy as np

from tm2nn.nets.matrix import SparseMatrix
from tm2nn.nets.ops import Affine, Op, ReLU
from tm2nn.nets.space import Space

# Proposition 3.4's constants, exactly as the paper gives them (not rescaled).
ROUND_LO = 1.0 / 3.0
ROUND_HI = 2.0 / 3.0
ROUND_SCALE = 3.0
#: Prop. 3.4: round returns every z within this of a bit to that bit, exactly (Definition
#: D.1's correction radius σζ of the gadget)
ROUND_RADIUS = ROUND_LO

CITE_RA = "Wei, Chen & Ma, Prop. 3.4: round, first layer (z - 1/3, z - 2/3)"
CITE_RB = "Wei, Chen & Ma, Prop. 3.4: round, second layer 3φ(z-1/3) - 3φ(z-2/3)"

def round_correction(k: int, x: str, space: Space, prefix: str | None = None,
                     signals: tuple[str, ...] | None = None) -> list[Op]:
    """Proposition 3.4: ``round(z) = 3φ(z - 1/3) - 3φ(z - 2/3)`` on every coordinate of
    ``space`` (value ``x``), as the paper's "two feedforward ReLU layers":

    * ``L<k>.round_a``: duplicate each coordinate, biases -1/3 (``rlo:``) and -2/3 (``rhi:``);
    * ReLU;
    * ``L<k>.round_b``: weights 3 and -3, bias 0, back to the labels of ``space``;
    * ReLU — harmless, since round maps into [0, 1]; it keeps every block of the net
      in the uniform form affine → ReLU → affine → ReLU.

    Ops are named ``<prefix>.round_a`` ... (``prefix`` defaults to ``L<k>``).
    ``signals`` are the labels' parts after ``group:`` when the caller has them, and knows
    they are distinct (relu-circuit's ``build_net``: the unit names of a layer).
    """
    n = len(space)
    if signals is None:
        sig = [lab.split(":", 1)[-1] for lab in space.labels]
        if len(set(sig)) < n:  # short names collide across groups: keep the whole label
            sig = list(space.labels)
        a_space = Space.of_distinct([lab for s in sig for lab in (f"rlo:{s}", f"rhi:{s}")])
    else:  # the same labels, made when first read
        a_space = Space.prefixed(("rlo:", "rhi:"), signals)
    i = np.arange(n, dtype=np.int64)
    A = SparseMatrix((2 * n, n), np.stack([2 * i, 2 * i + 1], 1).ravel(),
                     np.repeat(i, 2), np.ones(2 * n))
    c = np.tile([-ROUND_LO, -ROUND_HI], n)
    B = SparseMatrix((n, 2 * n), np.repeat(i, 2), np.stack([2 * i, 2 * i + 1], 1).ravel(),
                     np.tile([ROUND_SCALE, -ROUND_SCALE], n))
    p = f"L{k}" if prefix is None else prefix
    return [
        Affine(f"{p}.round_a", (x,), weight=A, bias=c, out=a_space, cite=CITE_RA),
        ReLU(f"{p}.round_a.relu", (f"{p}.round_a",)),
        Affine(f"{p}.round_b", (f"{p}.round_a.relu",), weight=B, bias=np.zeros(n), out=space,
               cite=CITE_RB),
        ReLU(f"{p}.round_b.relu", (f"{p}.round_b",)),
    ]
