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


def function_class(compiled) -> dict:
    """Where this net sits in Theorem 3.1's class ``F_{w,d,α}``, measured on the net:

    * ``w``: the largest layer width (hidden layers; the corrections' units included);
    * ``d``: the paper's depth, counted as it counts ``W_0 .. W_d``: the number of ReLU
      layers, so the net has ``d + 1`` affine maps with the ±1 map (``out.pm1`` is W_d) and
      ``d`` without (it ends with a ReLU: W_d is the identity read-out, not stored);
    * ``alpha``: ``‖θ‖₁`` over every weight and bias of the net (:meth:`Net.info`);
    * ``p``: the parameters of the dense architecture with the net's layer shapes,
      ``Σ_layers (out·in + out)`` (every entry, zeros included: the space the certified
      margin perturbs, and Lemma 2.3 holds for any architecture); ``p_uniform`` is the
      count with every hidden layer padded to width ``w`` and a read-out,
      ``w·m + w + (d−1)(w² + w) + n·w + n`` (m inputs, n outputs), the literal ``F_{w,d}``.

    Plus the theorem, its order ``poly(s)·log(wd)/ε²`` and the circuit's ``s, r, q``."""
    info = compiled.info()["info"]
    w, d = int(info["max_width"]), int(info["depth"]["relu"])
    m, n = sum(info["inputs"].values()), sum(info["outputs"].values())
    opts = compiled.options
    return {
        "w": w, "d": d, "alpha": float(info["l1_norm"]), "p": int(info["params_dense"]),
        "p_uniform": w * m + w + max(d - 1, 0) * (w * w + w) + n * w + n,
        "affine_layers": int(info["affine_layers"]), "inputs": m, "outputs": n,
        "theorem": "Theorem 3.1", "order": "poly(s) log(wd) / eps^2",
        "scaling": {"s": opts.get("gates"), "r": opts.get("width"), "q": opts.get("layers")},
        "scaling_how": "alpha ~ s (Lemma B.1, Prop. 3.4), gamma = 1/poly(r, q) (Theorem D.6), d ~ q, w >= r",
        "how": {"w": "the widest layer (corrections: 2r)",
                "d": "ReLU layers: the paper's W_0..W_d (W_d = out.pm1, or the identity read-out)",
                "alpha": "||theta||_1 of every weight and bias (measured)",
                "p": "sum over the net's affine layers of out*in + out (dense, zeros included)"},
    }
