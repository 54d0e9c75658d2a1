"""Size report of a relu-circuit net next to Wei, Chen & Ma's bounds (Theorem 3.1, Lemma B.1).

The paper's quantities are those of the layered basis circuit the net computes: ``q``
layers, max layer width ``r`` and size ``s`` (gates, the identity gates of the layering
included).  Rows are ``(quantity, ours, paper)``; every number comes from
:meth:`tm2nn.nets.Net.info`, so the report describes the net that is emitted.
"""

from __future__ import annotations

import numpy as np

from tm2nn.nets import Net
from tm2nn.passes.layering import LayeredCircuit


def _fmt(v: float) -> str:
    for num, txt in ((1 / 3, "1/3"), (-1 / 3, "-1/3"), (2 / 3, "2/3"), (-2 / 3, "-2/3")):
        if v == num:
            return txt
    return f"{v:g}"


def size_report(lc: LayeredCircuit, net: Net, *, corrections: bool,
                pm_one_output: bool, info: dict | None = None) -> list[tuple[str, str, str]]:
    """The rows; ``info`` is ``net.info()`` when the caller has it already."""
    info = net.info() if info is None else info
    q = lc.depth
    r = max(lc.widths[1:], default=0)
    s = lc.size
    n_corr = max(q - 1, 0) if corrections else 0
    depth = info["depth"]["affine"]
    paper_depth = 2 * q + 2 * n_corr + (1 if pm_one_output and q else 0)
    l1 = info["l1_norm"]
    layers = net.affine_layers()
    allv = np.concatenate([np.zeros(0)] + [np.unique(a) for op in layers
                                           for a in (op.weight.vals, op.bias[op.bias != 0])])
    values = [float(v) for v in np.unique(allv)]
    width_bound = f">= r = {r} (Lemma B.1)"
    if corrections:
        width_bound += f"; <= 2r = {2 * r} with corrections (proof of Thm 3.1)"
    else:
        width_bound += "; = r without corrections"
    return [
        ("circuit (layered, basis)", f"q = {q} layers, r = {r} max width, s = {s} gates "
         f"({lc.identity_gates} identity)", "G in G_{q,r,s} (Thm 3.1)"),
        ("width", f"{info['max_width']}", width_bound),
        ("depth (affine layers)", f"{depth}",
         f"2q{' + 2(q-1)' if corrections else ''}{' + 1' if pm_one_output and q else ''}"
         f" = {paper_depth} (d ~ q, Thm 3.1)"),
        ("||theta||_1", f"{l1:g} (= {l1 / s if s else 0:.3g} s)",
         f"O(s) (alpha ~ s, Thm 3.1): <= 5 per gate (Lemma B.1) + 9 per corrected unit "
         f"(Prop. 3.4) <= {14 * s if corrections else 5 * s}"),
        ("parameters", f"{info['params_nonzero']} nonzero, {info['params_dense']} dense",
         f"p = O(w^2 d) for the dense class F_(w,d,alpha): w^2 d = {info['max_width'] ** 2 * depth}"
         f" (w = {info['max_width']}, d = {depth}); only the log p enters Thm 3.1"),
        ("distinct weight values", f"{len(values)}: {{{', '.join(_fmt(v) for v in values)}}}",
         "O(1): {-1, 0, 1} (Prop. B.2), 1/3, 2/3, 3 (Prop. 3.4), 2, -1 (2z - 1)"),
    ]
