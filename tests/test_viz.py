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

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


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
