"""`tm2nn viz`: the four pictures for the examples (file written, sensible size, PNG and
SVG, rendering does not raise), divergences found and outlined, attention read from the
network, and user errors (exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tm2nn.cli import main
from tm2nn.syntax import load
from tm2nn.viz import (
    divergences,
    draw_layers,
    draw_spacetime,
    draw_weights,
    interpreter_run,
    net_run,
    spacetime_png,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def image_size(path: Path) -> tuple[int, int]:
    from matplotlib.image import imread

    img = imread(path)
    return img.shape[1], img.shape[0]


@pytest.mark.parametrize("args", [
    ["spacetime", "bb3.tm"],
    ["spacetime", "binary_increment.tm", "--backend", "rcnn"],
    ["spacetime", "binary_increment.tm", "--backend", "gd-trace", "--input", "11"],
    ["spacetime", "palindrome.tm", "--interpreter-only"],
    ["weights", "full_adder.circ"],
    ["weights", "bb3.tm", "--backend", "rcnn"],
    ["weights", "binary_increment.tm", "--layer", "S.c1.pair.lin"],
    ["attention", "binary_increment.tm", "--step", "9"],
    ["layers", "full_adder.circ"],
    ["layers", "ripple_adder4.circ"],
], ids=lambda a: "-".join(a[:2]) + ("-" + a[3] if len(a) > 3 else ""))
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_every_kind_writes_a_picture(tmp_path, capsys, args, suffix):
    out = tmp_path / f"pic{suffix}"
    kind, src, *rest = args
    assert main(["viz", kind, str(EXAMPLES / src), "-o", str(out), *rest]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.stat().st_size > 5_000
    if suffix == ".png":
        w, h = image_size(out)
        assert 300 <= w <= 5000 and 200 <= h <= 5000
    else:
        assert out.read_text(encoding="utf-8").lstrip().startswith("<?xml")


def test_runs_agree_and_a_planted_divergence_is_found():
    m = load(EXAMPLES / "bb3.tm")
    want = interpreter_run(m, "", 21)
    got = net_run(m, "", 21, "transformer")
    assert len(want) == 22 and got == want
    assert want[3] != want[4]  # steps are copies, not one shared tape
    bad = [(q, h, dict(c)) for q, h, c in got]
    bad[7] = (bad[7][0], bad[7][1] + 1, bad[7][2])
    bad[9][2][5] = "1"
    first, diff = divergences(want, bad)
    assert first == 7 and diff[7]["head"] and not diff[7]["state"]
    assert diff[9]["cells"] == {5}
    fig, first = draw_spacetime(m, "", want, bad, "transformer")
    assert first == 7 and "FIRST DIVERGENCE at step 7" in fig._suptitle.get_text()
    red = [p for ax in fig.axes for p in ax.patches if p.get_edgecolor()[:3] == pytest.approx((0.839, 0.153, 0.157), abs=0.01)]
    assert len(red) >= 2  # the head at step 7 and cell 5 at step 9
    fig, first = draw_spacetime(m, "", want, want[:10], "transformer")  # a run that stops early
    assert first == 10


def test_spacetime_png_for_the_readme(tmp_path):
    out = spacetime_png(EXAMPLES / "bb3.tm", "", tmp_path / "bb3.png")
    assert out.stat().st_size > 10_000 and image_size(out)[0] > 400


def test_weights_carry_the_ir_labels():
    from tm2nn.compiler import compile as compile_source

    c = compile_source(load(EXAMPLES / "bb3.tm"), "transformer", steps=10)
    fig, names = draw_weights(c.net, "S.c1.next.lin")
    ax = fig.axes[0]
    labels = {t.get_text() for t in ax.get_yticklabels()} | {t.get_text() for t in ax.get_xticklabels()}
    assert names == ["S.c1.next.lin"] and any(lab.startswith("st:") for lab in labels)
    fig, names = draw_weights(compile_source(load(EXAMPLES / "bb3.tm"), "rcnn", steps=5, max_input=0).net)
    assert names == ["V1", "V2", "V3", "V4", "V5"]


def test_attention_marks_the_binary_search():
    from tm2nn.compiler import compile as compile_source
    from tm2nn.viz import attention_weights, draw_attention

    m = load(EXAMPLES / "bb3.tm")
    c = compile_source(m, "transformer", steps=25)
    w = attention_weights(c, "")
    assert "S.c6" in w and all(len(v) == 25 for v in w.values())
    for v in w["S.c6"]:
        assert abs(v.sum() - 1) < 1e-6 and v.min() >= 0  # hard-max weights: a distribution
    _fig, att = draw_attention(c, "", 10)
    assert set(att) == set(w) and att["S.c6"] == int(np.argmax(w["S.c6"][10])) - 1


def test_layers_counts():
    fig, counts = draw_layers(load(EXAMPLES / "full_adder.circ"))
    assert counts == [4, 3, 2] and len(fig.axes) == 2  # small: the DAG is drawn too


@pytest.mark.parametrize("args,msg", [
    (["spacetime", "full_adder.circ"], "this source is a circuit"),
    (["attention", "bb3.tm", "--backend", "rcnn"], "transformer's attention"),
    (["nope", "bb3.tm"], "unknown picture"),
    (["spacetime", "bb3.tm", "--backend", "relu-circuit"], "decodes only the final tape"),
    (["spacetime", "grid_copy_down.tm"], "2D tape"),
    (["weights", "bb3.tm", "--layer", "nope"], "no affine layer 'nope'"),
    (["attention", "bb3.tm", "--step", "99"], "--step must be in"),
    (["layers", "bb3.tm"], "not a circuit"),
])
def test_user_errors(tmp_path, capsys, args, msg):
    out = tmp_path / "x.png"
    kind, src, *rest = args
    assert main(["viz", kind, str(EXAMPLES / src), "-o", str(out), *rest]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err
    assert not out.exists()


def test_bad_output_paths(tmp_path, capsys):
    assert main(["viz", "layers", str(EXAMPLES / "full_adder.circ"), "-o", str(tmp_path / "x.jpg")]) == 2
    assert "must name a .png or .svg" in capsys.readouterr().err
    assert main(["viz", "layers", str(EXAMPLES / "full_adder.circ"), "-o", str(tmp_path / "no" / "x.png")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_huge_pictures_are_refused(tmp_path, capsys):
    assert main(["viz", "spacetime", str(EXAMPLES / "binary_counter.tm"), "--interpreter-only", "--input", "0" * 12,
                 "--steps", "5000", "-o", str(tmp_path / "x.png")]) == 2
    assert "refusing to draw" in capsys.readouterr().err


def _tick_labels(ax) -> list:
    """The tick labels ``ax`` draws: visible, not empty, at a tick inside the view."""
    out = []
    for axis in (ax.xaxis, ax.yaxis):
        lo, hi = sorted(axis.get_view_interval())
        for tick in axis.get_major_ticks():
            if lo - 1e-9 <= tick.get_loc() <= hi + 1e-9:
                out += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text()]
    return out


def _overlap(a, b) -> bool:
    """Two display boxes share more than an edge."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("src,backend,options", [
    ("binary_increment.tm", "transformer", {"steps": 10}),
    ("ripple_adder4.circ", "relu-circuit", {}),
    ("bb3.tm", "rcnn", {"steps": 5, "max_input": 0}),  # long labels: rule:base:c=head(nf~...)
], ids=["transformer", "relu-circuit", "rcnn"])
def test_weights_labels_stay_in_their_panel(src, backend, options):
    """No tick label or title of a panel prints over another panel, another colour bar
    (colour bars are axes too) or their labels, and no two labels of one axis overlap."""
    from tm2nn.compiler import compile as compile_source

    fig, names = draw_weights(compile_source(load(EXAMPLES / src), backend, **options).net)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison]  # panels and colour bars
    assert len(names) >= 5 and len(axes) >= 2 * len(names)
    boxes = {ax: ax.get_window_extent(renderer) for ax in axes}
    texts = {ax: [(t.get_text(), t.get_window_extent(renderer)) for t in _tick_labels(ax)] for ax in axes}
    for ax in axes:
        if ax.get_title():
            texts[ax].append((ax.get_title(), ax.title.get_window_extent(renderer)))
    assert sum(len(v) for v in texts.values()) > 20 * len(names)
    def name(ax) -> str:
        return repr(ax.get_title()) if ax.get_title() else "a colour bar"

    clashes = []
    for a in axes:
        for text, box in texts[a]:
            for b in axes:
                if b is a:
                    continue
                if _overlap(box, boxes[b]):
                    clashes.append(f"{text!r} of {name(a)} over the axes of {name(b)}")
                clashes += [f"{text!r} of {name(a)} over {other!r} of {name(b)}"
                            for other, obox in texts[b] if _overlap(box, obox)]
        for axis in (a.get_xticklabels(), a.get_yticklabels()):
            shown = [t.get_window_extent(renderer) for t in axis if t.get_visible() and t.get_text()]
            clashes += [f"{a.get_title()!r}: two tick labels overlap" for i, p in enumerate(shown)
                        for q in shown[i + 1:] if _overlap(p, q)]
    assert not clashes, f"{len(clashes)} overlaps, e.g. {clashes[:5]}"
