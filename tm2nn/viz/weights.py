"""Weight heatmaps: every affine layer of a compiled network (nested decode and loop
bodies included), rows labelled with the output dimensions and columns with the input
dimensions of the network IR, e.g. the transformer's ``st:*``, ``sym1:*``, ``pos2:*``
groups or the RCNN filter's ``V1``..``V5``.  Label groups (the part before ``:``) are
separated by thin lines and named once, so wide layers stay readable.  A layer with more
rows or columns than its panel has room for at :data:`~.render.MIN_CELL_PX` pixels each
is drawn in blocks (:func:`pool`: each drawn cell is the weight of largest magnitude in
its block, sign kept), and its title says so: no weight shrinks to a sub-pixel mark."""

from __future__ import annotations

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.limits import check_memory

from .render import MIN_CELL_PX, SMALL_FONT, declutter_ticks, figure, shorten, thin_ticks

MAX_LAYERS = 12


#: Bytes a drawn weight entry costs: the dense float64 matrix, matplotlib's normalised
#: copy and its masked-array bookkeeping (imshow), so 3 x 8.
BYTES_PER_DRAWN_ENTRY = 24
#: Most entries one heatmap draws (a 4,000 x 4,000 layer; more is not a picture).
MAX_ENTRIES = 16_000_000


def affine_layers(net, prefix: str = "") -> list[tuple[str, object, list[str], list[str]]]:
    """``(name, weight, out labels, in labels)`` for every Affine op, in order, walking
    into ops that hold a body net.  The weight is the op's (sparse) matrix: a layer is
    made dense only when it is drawn (``weight.dense()``)."""
    out = []
    for op in net.nodes:
        if type(op).__name__ == "Affine":
            ins = list(net.spaces[op.inputs[0]].labels)
            outs = list(net.spaces[op.name].labels)
            out.append((prefix + op.name, op.weight, outs, ins))
        body = getattr(op, "body", None)
        if body is not None and hasattr(body, "nodes"):
            out += affine_layers(body, prefix)
    return out


def _check_size(shown) -> None:
    """Refuse, before anything is made dense, layers too big to draw or to hold."""

    for name, w, _o, _i in shown:
        n = w.shape[0] * w.shape[1]
        if n > MAX_ENTRIES:
            raise Tm2nnError(f"refusing to draw {name} ({w.shape[0]:,} x {w.shape[1]:,} = {n:,} weights; at most "
                             f"{MAX_ENTRIES:,} in a picture): pick a smaller layer with --layer")
    total = sum(w.shape[0] * w.shape[1] for _n, w, _o, _i in shown)
    check_memory(total * BYTES_PER_DRAWN_ENTRY, f"drawing {len(shown)} layer(s) of {total:,} weights in all",
                 ("layer",))


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


#: Most ticks an axis gets before they are thinned (by group, or evenly).
MOST_TICKS = 40
TICK_PROPS = {"x": {"rotation": 90, "fontsize": SMALL_FONT}, "y": {"fontsize": SMALL_FONT}}


def pool(w: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``w`` in blocks of ``rows`` x ``cols`` entries (the last ones padded with zeros):
    each block becomes its entry of largest magnitude, sign kept, so a lone nonzero
    weight stays visible and keeps its colour."""
    n, m = w.shape
    R, C = -(-n // rows), -(-m // cols)
    p = np.zeros((R * rows, C * cols), dtype=w.dtype)
    p[:n, :m] = w
    b = p.reshape(R, rows, C, cols).transpose(0, 2, 1, 3).reshape(R, C, rows * cols)
    return np.take_along_axis(b, np.abs(b).argmax(axis=2)[..., None], axis=2)[..., 0]


def _blocks(fig, panels) -> None:
    """Lay ``fig`` out, then redraw each ``(axes, image, weights, title)`` panel in blocks
    where its cells would be narrower or shorter than :data:`MIN_CELL_PX` pixels."""
    drawn = {id(ax): (1, 1) for ax, *_ in panels}
    for _ in range(4):  # a two-line title shrinks the axes: measure again until nothing changes
        fig.canvas.draw()
        changed = False
        for ax, im, w, title in panels:
            box = ax.get_window_extent()
            kr = max(1, -(-MIN_CELL_PX * w.shape[0] // max(int(box.height), 1)))
            kc = max(1, -(-MIN_CELL_PX * w.shape[1] // max(int(box.width), 1)))
            if (kr, kc) != drawn[id(ax)]:
                drawn[id(ax)], changed = (kr, kc), True
                im.set_data(pool(w, kr, kc))  # the extent keeps the ticks on the layer's own indices
                blocks = f"\n(cells: {kr}x{kc} blocks, largest |w|)" if kr * kc > 1 else ""
                ax.set_title(title + blocks, fontsize=SMALL_FONT + 1)
        if not changed:
            break


def _axis(ax, labels: list[str], which: str) -> None:
    """Ticks for one axis: every label when they are few; one ``group:*`` per label
    group when there are too many labels but the groups are few (each group at its
    middle, groups split by thin lines); else evenly thinned labels.  Groups of one or
    two labels on average (``rlo:*``, ``rhi:*`` alternating) are not drawn as groups."""
    groups = _groups(labels)
    real = 1 < len(groups) <= min(MOST_TICKS, len(labels) // 2)
    if len(labels) > MOST_TICKS and real:
        idx = [(a + b - 1) / 2 for a, b, _g in groups]
        labs = [f"{g}:*" if g else "" for _a, _b, g in groups]
    else:
        idx, labs = thin_ticks(labels, MOST_TICKS)
    if real:
        for a, _b, _g in groups[1:]:
            (ax.axvline if which == "x" else ax.axhline)(a - 0.5, color="0.6", lw=0.5)
    (ax.set_xticks if which == "x" else ax.set_yticks)(idx, [shorten(x) for x in labs], **TICK_PROPS[which])


def draw_weights(net, layer: str | None = None):
    """One heatmap per affine layer (the first ``MAX_LAYERS``, or the layer named
    ``layer``); colour is the weight, symmetric around 0.  The layout is constrained
    (no panel's labels run into another panel or colour bar) and an axis keeps only the
    tick labels that do not print over each other."""
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
    _check_size(shown)
    shown = [(name, w.dense(), outs, ins) for name, w, outs, ins in shown]
    cols = 1 if len(shown) == 1 else min(3, len(shown))
    rows = -(-len(shown) // cols)
    big = max(max(w.shape) for _n, w, _o, _i in shown)
    side = 5.0 if len(shown) > 1 else min(14.0, 4.0 + big / 40)
    fig = figure(width=cols * side + 1, height=rows * side + 1, layout="constrained")
    fig.get_layout_engine().set(w_pad=0.05, h_pad=0.05, wspace=0.02, hspace=0.02)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    panels = []
    for ax, (name, w, outs, ins) in zip(axes, shown):
        lim = float(np.abs(w).max()) or 1.0
        n, m = w.shape
        im = ax.imshow(w, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest",
                       extent=(-0.5, m - 0.5, n - 0.5, -0.5))
        title = f"{name}  {n}x{m}"
        ax.set_title(title, fontsize=SMALL_FONT + 1)
        _axis(ax, ins, "x")
        _axis(ax, outs, "y")
        cbar = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.02)
        cbar.ax.tick_params(labelsize=SMALL_FONT)
        panels.append((ax, im, w, title))
    for ax in axes[len(shown):]:
        ax.remove()
    more = f" (first {MAX_LAYERS} of {len(layers)}; pick one with --layer)" if len(layers) > MAX_LAYERS else ""
    fig.suptitle(f"{net.name}: affine weights{more}", fontsize=11)
    _blocks(fig, panels)
    declutter_ticks(fig, axes[:len(shown)], **TICK_PROPS)
    return fig, [n for n, *_ in shown]
