"""Every picture `tm2nn viz` writes is legible at 100 % zoom (issue 36, point 9): no font
below 8 pt (11 pixels at the pictures' 100 dpi), no heatmap cell below 4 pixels on either
side (a layer wider than its panel is drawn in blocks), and a bounded figure size.  The
RCNN filter's layers (V2: 1250 rows, V3: 1250 columns for bb3) were drawn with cells of
0.3 pixels and 6 pt labels before."""

from __future__ import annotations

from pathlib import Path

import pytest

import tm2nn
from tm2nn.syntax import load
from tm2nn.viz import draw_layers, draw_spacetime, draw_weights, interpreter_run, net_run
from tm2nn.viz.attention import draw_attention
from tm2nn.viz.runs import default_steps

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SMALLEST_FONT_PT = 8
SMALLEST_CELL_PX = 4
LARGEST_SIDE_PX = 4000


def _machine(name):
    m = load(EXAMPLES / name)
    text = "1011" if name == "binary_increment.tm" else ""
    return m, text, default_steps(m, text)


def weights_rcnn():
    m, text, steps = _machine("bb3.tm")
    return draw_weights(tm2nn.compile(m, "rcnn", steps=steps, max_input=max(len(text), 1)).net)[0]


def weights_relu():
    return draw_weights(tm2nn.compile(load(EXAMPLES / "full_adder.circ"), "relu-circuit").net)[0]


def weights_transformer_layer():
    m, text, steps = _machine("binary_increment.tm")
    return draw_weights(tm2nn.compile(m, "transformer", steps=steps).net, "S.c1.pair.lin")[0]


def spacetime_rcnn():
    m, text, steps = _machine("binary_increment.tm")
    return draw_spacetime(m, text, interpreter_run(m, text, steps), net_run(m, text, steps, "rcnn", {}), "rcnn")[0]


def attention():
    m, text, steps = _machine("binary_increment.tm")
    return draw_attention(tm2nn.compile(m, "transformer", steps=steps), text, 9)[0]


def layers():
    return draw_layers(load(EXAMPLES / "ripple_adder4.circ"))[0]


PICTURES = [weights_rcnn, weights_relu, weights_transformer_layer, spacetime_rcnn, attention, layers]


def drawn_texts(fig):
    """The texts the saved picture shows: visible, non-empty, inside the figure."""
    from matplotlib.text import Text

    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        box = t.get_window_extent(r)
        if box.width > 0 and box.height > 0:
            out.append(t)
    return out


HEATMAPS = (weights_rcnn, weights_relu, weights_transformer_layer)


@pytest.mark.parametrize("picture", PICTURES, ids=lambda f: f.__name__)
def test_fonts_are_readable_and_the_figure_bounded(picture):
    """Every drawn text is at least 8 pt, the figure at most 4000 px a side, and (the weight
    pictures) no heatmap cell narrower than 4 px: one drawing per picture checks all."""
    fig = picture()
    small = sorted({(t.get_fontsize(), t.get_text()[:30]) for t in drawn_texts(fig)
                    if t.get_fontsize() < SMALLEST_FONT_PT})
    assert not small, small[:5]
    w, h = fig.get_size_inches() * fig.dpi
    assert fig.dpi == 100 and w <= LARGEST_SIDE_PX and h <= LARGEST_SIDE_PX
    if picture in HEATMAPS:
        _cells_are_wide_enough(fig)


def _cells_are_wide_enough(fig) -> None:
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert images
    for im in images:
        box = im.axes.get_window_extent()
        rows, cols = im.get_array().shape[:2]
        assert box.width / cols >= SMALLEST_CELL_PX and box.height / rows >= SMALLEST_CELL_PX, \
            (im.axes.get_title(), box.width / cols, box.height / rows)
