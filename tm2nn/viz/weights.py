"""Weight heatmaps: every affine layer of a compiled network (nested decode and loop
bodies included), rows labelled with the output dimensions and columns with the input
dimensions of the network IR, e.g. the transformer's ``st:*``, ``sym1:*``, ``pos2:*``
groups or the RCNN filter's ``V1``..``V5``.  Label groups (the part before ``:``) are
separated by thin lines and named once, so wide layers stay readable."""

from __future__ import annotations

import numpy as np

from tm2nn.errors import Tm2nnError

from .render import figure, thin_ticks

MAX_LAYERS = 12


def affine_layers(net, prefix: str = "") -> list[tuple[str, np.ndarray, list[str], list[str]]]:
    """``(name, dense weight [out, in], out labels, in labels)`` for every Affine op,
    in order, walking into ops that hold a body net."""
    out = []
    for op in net.nodes:
        if type(op).__name__ == "Affine":
            ins = list(net.spaces[op.inputs[0]].labels)
            outs = list(net.spaces[op.name].labels)
            out.append((prefix + op.name, op.weight.dense(), outs, ins))
        body = getattr(op, "body", None)
        if body is not None and hasattr(body, "nodes"):
            out += affine_layers(body, prefix)
    return out


def _groups(labels: list[str]) -> list[tuple[int, int, str]]:
    """Runs of equal label group (text before ``:``): ``(start, end, group)``."""
    runs: list[tuple[int, int, str]] = []
    for i, lab in enumerate(labels):
        g = lab.split(":", 1)[0] if ":" in lab else ""
        if runs and runs[-1][2] == g:
            runs[-1] = (runs[-1][0], i + 1, g)
        else:
            runs.append((i, i + 1, g))
    return runs


def _axis(ax, labels: list[str], which: str) -> None:
    groups = _groups(labels)
    if len(labels) <= 40 or len(groups) <= 1:
        idx, labs = thin_ticks(labels)
    else:  # one tick per group, at its middle
        idx = [(a + b - 1) / 2 for a, b, _g in groups]
        labs = [f"{g}:*" if g else "" for _a, _b, g in groups]
        idx, labs = idx[:60], labs[:60]
    for a, _b, _g in groups[1:]:
        (ax.axvline if which == "x" else ax.axhline)(a - 0.5, color="0.6", lw=0.5)
    if which == "x":
        ax.set_xticks(idx, labs, rotation=90, fontsize=6)
    else:
        ax.set_yticks(idx, labs, fontsize=6)


def draw_weights(net, layer: str | None = None):
    """One heatmap per affine layer (the first ``MAX_LAYERS``, or the layer named
    ``layer``); colour is the weight, symmetric around 0."""
    layers = affine_layers(net)
    if layer is not None:
        chosen = [L for L in layers if L[0] == layer]
        if not chosen:
            names = ", ".join(L[0] for L in layers[:30])
            raise Tm2nnError(f"--layer: no affine layer {layer!r} in {net.name!r} (layers: {names}"
                             f"{', ...' if len(layers) > 30 else ''})")
        layers = chosen
    if not layers:
        raise Tm2nnError(f"{net.name!r} has no affine layer to draw")
    shown = layers[:MAX_LAYERS]
    cols = 1 if len(shown) == 1 else min(3, len(shown))
    rows = -(-len(shown) // cols)
    big = max(max(w.shape) for _n, w, _o, _i in shown)
    side = 5.0 if len(shown) > 1 else min(14.0, 4.0 + big / 40)
    fig = figure(width=cols * side + 1, height=rows * side + 1)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (name, w, outs, ins) in zip(axes, shown):
        lim = float(np.abs(w).max()) or 1.0
        im = ax.imshow(w, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        ax.set_title(f"{name}  {w.shape[0]}x{w.shape[1]}", fontsize=8)
        _axis(ax, ins, "x")
        _axis(ax, outs, "y")
        fig.colorbar(im, ax=ax, fraction=0.04)
    for ax in axes[len(shown):]:
        ax.set_axis_off()
    more = f" (first {MAX_LAYERS} of {len(layers)}; pick one with --layer)" if len(layers) > MAX_LAYERS else ""
    fig.suptitle(f"{net.name}: affine weights{more}", fontsize=10)
    return fig, [n for n, *_ in shown]
