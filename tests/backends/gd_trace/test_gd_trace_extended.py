"""Welper §5: the extended network (tm2nn.backends.gd_trace.extended) trained by least
squares (2) with the mixed update (3) stops after (machine steps + 1) optimizer steps
(Prop. 2.1) with F = f_theta, theta = what the machine writes; the §5.4 constants,
App. C's f_perp, the worked example, its ONNX export and `tm2nn learn --backend gd-trace`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tm2nn import load_model
from tm2nn.backends.gd_trace.check import learn_report
from tm2nn.backends.gd_trace.extended import (
    Constants,
    Extended,
    Layout,
    sign_sum_layout,
    train,
)
from tm2nn.backends.gd_trace.fixed_point import FixedPoint
from tm2nn.backends.gd_trace.sign_sum import dataset_text, sign_sum_machine, theta_of
from tm2nn.cli import main
from tm2nn.datasets import load_csv
from tm2nn.emit.onnx_model import to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.emit.torch_emit import to_torch
from tm2nn.errors import Tm2nnError
from tm2nn.syntax import gd_layout, load, parse_text

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "sign_sum_3x2.tm"
CSV = ROOT / "examples" / "sign_sum_3x2.csv"


def extended(n: int, M: int) -> Extended:
    m = parse_text(sign_sum_machine(n, M), "tm", "<sign_sum>")[0]
    return Extended(m, sign_sum_layout(n, M))


@pytest.fixture(scope="module")
def ext32() -> Extended:
    return Extended(load(EXAMPLE), sign_sum_layout(3, 2))


def check_prop_21(rep: dict, X, Y) -> None:
    """Everything Prop. 2.1 promises, and theta from an independent formula."""
    assert rep["optimizer_steps"] == rep["machine_steps"] + 1, rep
    assert rep["stopped_at_machine_steps_plus_1"] and rep["halted"]
    assert rep["trace_matches"], rep["first_divergence"]
    assert rep["theta_matches"]
    assert rep["theta"] == theta_of(X, Y).tolist()
    assert rep["F_equals_f_theta_on_train"] and rep["test_agreement"] == 1.0
    assert rep["z_equals_y"] and rep["z_deviation"] == 0.0   # exact: the switches mix (1 - r) a + r b
    assert rep["bounds_23_29_33"]
    assert rep["final_loss"] <= rep["B_stop"]


# -- §5.4 constants ---------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("B_stop", [0.5, 4.0, 9.0, 1000.0])
def test_constants_satisfy_the_54_inequalities(d, B_stop):
    k = Constants.choose(B_stop, d, eps=2.0)
    K = 8 * k.b**2 * d + 3 * d
    # (23) at a halting vertex: l_TM <= c + (K - b^3) gamma < B_stop = B_lo < B_hi <= c
    assert k.c + (K - k.b**3) * k.gamma < k.B_stop == k.B_lo < k.B_hi <= k.c
    assert k.c - k.b**3 * k.gamma > 0  # sqrt(2 l_TM) is defined everywhere
    lo, hi = k.phi_ramp
    assert 2 * k.B_lo < lo < hi < 2 * k.B_hi


def test_constants_check_rejects_a_bad_set():
    k = Constants.choose(4.0, 2, eps=2.0)
    bad = Constants(k.B_stop, k.b, k.gamma, k.B_stop / 2, k.B_lo, k.B_hi, k.eps, k.d)  # c below B_stop
    with pytest.raises(AssertionError, match="inequalities"):
        bad.check()


# -- App. C: f_perp ------------------------------------------------------------------------------
def f_perp(ext: Extended, z: np.ndarray) -> np.ndarray:
    mod = to_torch(ext.net, torch.float64)
    with torch.no_grad():
        mod.op("z").value.copy_(torch.from_numpy(np.asarray(z, dtype=np.float64)))
        x = torch.ones((1, ext.layout.n * ext.layout.M), dtype=torch.float64)
        return mod.trace(x)["f_perp"][0].numpy()


@pytest.mark.parametrize("z", [
    [1.0, 1.0, 1.0], [1.0, -1.0, 1.0], [3.0, 0.0, 0.0], [3.0, 1e-9, 0.0],  # z along e0: the w branch
    [0.0, 2.0, 0.0], [0.9, 0.9, -0.2], [-1.0, -1.0, -1.0],
])
def test_f_perp_is_a_unit_vector_orthogonal_to_z(ext32, z):
    v = f_perp(ext32, z)
    assert abs(np.linalg.norm(v) - 1) < 1e-12
    assert abs(v @ np.asarray(z)) < 1e-12 * max(1.0, np.linalg.norm(z))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=3, max_size=3).filter(lambda z: sum(t * t for t in z) >= 1.5))
def test_f_perp_random(ext32, z):
    v = f_perp(ext32, z)
    assert abs(np.linalg.norm(v) - 1) < 1e-9 and abs(v @ np.asarray(z)) < 1e-9


# -- Prop. 2.1 on the worked example and on random data ---------------------------------------
def test_worked_example_file_is_the_generator_and_its_csv_gives_minus_minus():
    assert EXAMPLE.read_text(encoding="utf-8") == sign_sum_machine(3, 2)
    X, Y = load_csv(CSV)
    assert X.shape == (3, 2) and theta_of(X, Y).tolist() == [-1.0, -1.0]
    lay = Layout.from_header(gd_layout.parse(EXAMPLE.read_text(encoding="utf-8"), str(EXAMPLE)))
    assert lay == sign_sum_layout(3, 2)
    rng = np.random.default_rng(0)
    for _ in range(10):   # the generic layout's text is sign_sum's dataset_text
        X, Y = rng.choice([-1, 1], (3, 2)), rng.choice([-1, 1], 3)
        assert lay.text(X, Y) == dataset_text(X, Y)


@pytest.mark.parametrize("seed", range(5))
def test_random_datasets(ext32, seed):
    """Five random ±1 datasets (the 20-dataset acceptance of issue 18 runs the perceptron,
    tests/backends/gd_trace/test_gd_trace_perceptron.py)."""
    rng = np.random.default_rng(1000 + seed)
    X, Y = rng.choice([-1, 1], (3, 2)), rng.choice([-1, 1], 3)
    rep = learn_report(ext32, X, Y, tests=5, seed=seed)
    check_prop_21(rep, X, Y)
    # every iterate k >= 1 is the lowered machine's configuration k - 1 (trace_matches), and
    # the loss never met (4) before the last step
    losses = rep["result"].losses
    assert all(v > rep["B_stop"] for v in losses[1:-1])


@pytest.mark.parametrize("n,M", [(2, 1), (2, 3), (4, 2)])
def test_other_shapes(n, M):
    ext = extended(n, M)
    rng = np.random.default_rng(n * 10 + M)
    X, Y = rng.choice([-1, 1], (n, M)), rng.choice([-1, 1], n)
    check_prop_21(learn_report(ext, X, Y, tests=5), X, Y)


def test_trained_net_exports_to_onnx(ext32):
    X, Y = load_csv(CSV)
    r = train(ext32, X, Y)
    net = r.module.to_net()
    model = to_onnx(net)
    rng = np.random.default_rng(0)
    for x in [X, *(rng.choice([-1, 1], (3, 2)) for _ in range(5))]:
        got = run_onnx(model, x.reshape(1, -1).astype(np.float64))[0]
        np.testing.assert_allclose(got, x @ theta_of(X, Y), atol=1e-5)
        with torch.no_grad():
            t = to_torch(net, torch.float64)(torch.from_numpy(x.reshape(1, -1).astype(np.float64)))[0].numpy()
        assert np.array_equal(t, x @ theta_of(X, Y))


def test_before_training_the_net_is_not_f_theta(ext32):
    """The check above could not pass by accident: untrained, F(x) = s_init(.., z = 0)
    outputs z = 0, not theta^T x."""
    x = np.ones((1, 6))
    with torch.no_grad():
        out = to_torch(ext32.net, torch.float64)(torch.from_numpy(x))[0].numpy()
    assert np.array_equal(out, np.zeros(3))


# -- refusals -------------------------------------------------------------------------------
def test_refusals(ext32):
    m = load(EXAMPLE)
    lay = sign_sum_layout(3, 2)
    with pytest.raises(Tm2nnError, match="n >= 2"):
        Extended(m, Layout(1, 2, lay.theta_cells, lay.steps))
    with pytest.raises(Tm2nnError, match="sample 1's label = 0.0 is not a number of the format ±1"):
        train(ext32, np.ones((3, 2)), np.zeros(3))
    # (5) |y|^2 >= eps: labels that may be 0 (sign + 1 magnitude bit) must not all be
    small = Extended(parse_text(sign_sum_machine(2, 1), "tm", "<s>")[0],
                     dataclasses.replace(sign_sum_layout(2, 1), y=FixedPoint(1, 0)))
    assert small.k.eps == 1.0
    with pytest.raises(Tm2nnError, match=r"\(5\): \|y\|\^2 = 0 is below eps = 1"):
        train(small, np.ones((2, 1)), np.zeros(2))
    with pytest.raises(Tm2nnError, match="laid out for 3 samples of 2"):
        learn_report(ext32, np.ones((2, 2)), np.ones(2))
    with pytest.raises(ValueError):
        dataset_text(np.zeros((3, 2)), np.ones(3))


@pytest.mark.parametrize("line,match,col", [
    ("# gd-trace: samples=3 features=2 theta=10,11", "missing steps", 1),
    ("# gd-trace: samples=3 features=2 theta=10,x steps=5", "theta must be integers", "10,x"),
    ("# gd-trace: samples=3 feat=2 theta=10,11 steps=5", "expected samples=N", "feat"),
    ("# gd-trace: samples=1 features=2 theta=10,11 steps=5", "samples must be >= 2", 1),
    ("# gd-trace: samples=3 features=2 theta=10 steps=5", "linear primary network has 2 weights", 1),
    ("# gd-trace: samples=3 features=2 theta=10,11 steps=5 primary=affine", "theta must list 3 cells", 1),
    ("# gd-trace: samples=3 features=2 theta=10,11 steps=5 xbits=q", "xbits must be an integer", "q"),
])
def test_layout_header_errors_are_located(line, match, col):
    with pytest.raises(Tm2nnError, match=match) as e:
        gd_layout.parse("machine m {}\n" + line + "\n", "m.tm", validate=Layout.from_header)
    assert e.value.line == 2 and e.value.col == (col if isinstance(col, int) else line.index(col) + 1)


# -- the command line -------------------------------------------------------------------------
def test_cli_learn(tmp_path, capsys):
    before, after = tmp_path / "before.onnx", tmp_path / "after.pt"
    code = main(["learn", str(EXAMPLE), "--backend", "gd-trace", "--train", str(CSV), "--test", "4",
                 "--export-before", str(before), "--export-after", str(after), "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 0, rep
    X, Y = load_csv(CSV)
    check_prop_21(rep, X, Y)
    assert rep["theta"] == [-1.0, -1.0] and rep["source_steps"] == 56
    assert before.stat().st_size > 10_000 and after.stat().st_size > 10_000
    assert set(torch.load(after, weights_only=True)) == {"state_dict", "metadata"}
    module = load_model(after).torch()  # rebuilt from the source, the trained weights put back
    with torch.no_grad():
        out = module(torch.from_numpy(X.reshape(1, -1).astype(np.float64)))[0].numpy()
    assert np.array_equal(out, X @ np.array([-1.0, -1.0]))
    # tm2nn eval reads the exported nets: x = (+,-), (+,+), (-,-) -> F = theta^T x_i after
    # training, and s_init's z = 0 before it
    assert main(["eval", str(after), "--input", "+-++--", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"outputs": [0.0, -2.0, 2.0]}
    assert main(["eval", str(before), "--input", "+-++--", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"outputs": [0.0, 0.0, 0.0]}
    assert main(["eval", str(before), "--input", "+-+x--"]) == 2
    assert "--input:1:4" in capsys.readouterr().err
    assert main(["info", str(after), "--json"]) == 0
    assert "1,428" in capsys.readouterr().out   # |V|: the reachable vertices (3,696 for the full set)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


@pytest.mark.parametrize("case", ["shape", "value", "not-a-number", "no-header", "suffix", "folder", "circuit",
                                  "no-train"])
def test_cli_learn_errors(tmp_path, capsys, case):
    src, csv = str(EXAMPLE), str(CSV)
    extra: list[str] = []
    want = ""
    if case == "shape":
        csv = write(tmp_path, "d.csv", "x1,x2,y\n+1,-1,+1\n-1,-1,+1\n")
        want = "laid out for 3 samples of 2 features"
    elif case == "value":
        csv = write(tmp_path, "d.csv", "x1,x2,y\n+1,-1,+1\n-1,2,+1\n+1,+1,-1\n")
        want = "sample 2's feature 2 = 2.0 is not a number of the format ±1"
    elif case == "not-a-number":
        csv = write(tmp_path, "d.csv", "x1,x2,y\n+1,-1,+1\n-1,+,+1\n+1,+1,-1\n")
        want = "d.csv:3:4"
    elif case == "no-header":
        src, want = str(ROOT / "examples" / "bb3.tm"), "declares its data layout"
    elif case == "suffix":
        extra, want = ["--export-after", str(tmp_path / "out.txt")], "must name a .onnx, .pt or .safetensors file"
    elif case == "folder":  # refused before training, not after
        extra, want = ["--export-after", str(tmp_path / "nope" / "out.onnx")], "does not exist"
    elif case == "circuit":
        src, want = str(ROOT / "examples" / "full_adder.circ"), "machine"
    args = ["learn", src, "--backend", "gd-trace", *extra]
    if case != "no-train":
        args += ["--train", csv]
    else:
        want = "needs --train"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert want in err and "Traceback" not in err
    assert not (tmp_path / "out.txt").exists()


def test_learn_on_the_cpu_device_equals_the_default():
    """``tm2nn learn --device cpu`` (issue 35): the same iterates, checks and summary."""
    from tm2nn import learn as learn_api

    a = learn_api(EXAMPLE, "gd-trace", train=str(CSV), test=3, device="cpu")
    b = learn_api(EXAMPLE, "gd-trace", train=str(CSV), test=3)
    assert a.summary == b.summary and a.ok
