"""Figures and files for :mod:`tm2nn.viz`: an Agg-backed matplotlib ``Figure`` (no global
pyplot state, no display needed) and a checked writer for ``.png`` / ``.svg``."""

from __future__ import annotations

from pathlib import Path

from tm2nn.errors import Tm2nnError
from tm2nn.fileio import output_target, write_atomic

SUFFIXES = (".png", ".svg")
#: Most rows (steps) or columns (cells, dimensions) a picture draws.
MAX_EXTENT = 2000
#: Dots per inch of every picture (a PNG shown at 100 % has this many pixels per inch).
DPI = 100
#: The smallest font in any picture, in points: 11 pixels at :data:`DPI`, readable at 100 %
#: zoom (tick labels, legends, state names; titles are larger).
SMALL_FONT = 8
#: The smallest heatmap cell, in pixels at :data:`DPI`: a wider layer is drawn in blocks
#: (:func:`tm2nn.viz.weights.pool`), so no mark is a sub-pixel line.
MIN_CELL_PX = 4
#: A figure's sides are clamped to this range, in inches (at most 4,000 pixels at :data:`DPI`).
FIGURE_INCHES = ((4.0, 40.0), (3.0, 40.0))


def check_out(path: str | Path) -> Path:
    """The output path, checked before any work: ``.png`` or ``.svg`` in an existing folder."""

    out = Path(path)
    if out.suffix.lower() not in SUFFIXES:
        raise Tm2nnError(f"-o must name a .png or .svg file, got {out.name!r}")
    output_target(out, "-o")  # a regular file in a folder for files (docs/limits.md)
    return out


def figure(width: float, height: float, layout: str | None = None):
    """A new figure of ``width`` x ``height`` inches (clamped to something viewable);
    ``layout="constrained"`` makes room for every panel's tick labels, title and colour
    bar (matplotlib's constrained layout)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    (wlo, whi), (hlo, hhi) = FIGURE_INCHES
    fig = Figure(figsize=(min(max(width, wlo), whi), min(max(height, hlo), hhi)), dpi=DPI, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) atomically."""
    import io


    out = check_out(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=out.suffix.lower()[1:], bbox_inches="tight")
    write_atomic(out, buf.getvalue())
    return out


def refuse_large(what: str, n: int, hint: str) -> None:
    if n > MAX_EXTENT:
        raise Tm2nnError(f"refusing to draw {n:,} {what} (at most {MAX_EXTENT:,}): {hint}")


def thin_ticks(labels: list[str], most: int = 40) -> tuple[list[int], list[str]]:
    """At most ``most`` evenly spread tick positions with their labels."""
    n = len(labels)
    if n <= most:
        return list(range(n)), list(labels)
    step = -(-n // most)
    idx = list(range(0, n, step))
    return idx, [labels[i] for i in idx]


def shorten(label: str, most: int = 40) -> str:
    """``label`` cut to ``most`` characters with an ellipsis in the middle (both ends
    usually name the dimension)."""
    if len(label) <= most:
        return label
    head = (most - 1) // 2
    return label[:head] + "\u2026" + label[len(label) - (most - 1 - head):]


def declutter_ticks(fig, axes, **label_props) -> None:
    """Lay ``fig`` out (a draw), then drop the tick labels of ``axes`` that would print
    over an earlier label of the same axis, keeping the first in reading order.  The
    kept labels get ``label_props`` (``{"x": {...}, "y": {...}}``: rotation, size) again.
    A layout engine only grows the axes when labels go, so the kept ones stay apart."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in axes:
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            locs = list(axis.get_majorticklocs())
            texts = axis.get_ticklabels()
            if len(locs) < 2 or len(texts) != len(locs):
                continue
            # each label's extent along the axis, in reading order (left to right, top down)
            spans = [(b.x0, b.x1) if which == "x" else (-b.y1, -b.y0)
                     for b in (t.get_window_extent(renderer) for t in texts)]
            keep, end = [], -float("inf")
            for i in sorted(range(len(locs)), key=lambda i: spans[i][0]):
                if not texts[i].get_text():
                    keep.append(i)
                elif spans[i][0] >= end + 1.0:  # a pixel apart
                    keep.append(i)
                    end = spans[i][1]
            if len(keep) < len(locs):
                keep.sort()
                axis.set_ticks([locs[i] for i in keep], [texts[i].get_text() for i in keep],
                               **label_props.get(which, {}))
