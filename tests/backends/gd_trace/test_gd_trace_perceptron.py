"""Welper §5 beyond ±1 (issue 18): the perceptron over fixed-point data as a Turing machine
(tm2nn.backends.gd_trace.perceptron), the extended network with App. B's multi-bit
quantisation and a primary network chosen by the layout, trained by (2)/(3): Prop. 2.1 on
20 random datasets in torch and ONNX; (23), (29), (33) at every step and the mutations
that break them; the layout's refusals; ``tm2nn learn`` / ``eval`` on the example."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from tm2nn.backends.gd_trace.check import learn_report
from tm2nn.backends.gd_trace.extended import (
    BoundViolation,
    Extended,
    perceptron_layout,
    sign_sum_layout,
    train,
)
from tm2nn.backends.gd_trace.fixed_point import FixedPoint
from tm2nn.backends.gd_trace.layout import Layout
from tm2nn.backends.gd_trace.perceptron import (
    Perceptron,
    dataset_text,
    perceptron_machine,
    step_bound,
    theta_of,
)
from tm2nn.backends.gd_trace.sign_sum import sign_sum_machine
from tm2nn.cli import main
from tm2nn.datasets import load_csv
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import run_machine
from tm2nn.nets import Net, SparseMatrix
from tm2nn.syntax import gd_layout, load, parse_text

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "gd_trace" / "perceptron_3x1.tm"
CSV = ROOT / "examples" / "gd_trace" / "perceptron_3x1.csv"
SHAPE = Perceptron(3, 1, 2, 1, bias=True, epochs=1)   # the example's


def machine(p: Perceptron):
    return parse_text(perceptron_machine(p.n, p.M, p.bits, p.frac, p.bias, p.epochs), "tm", "<perceptron>")[0]


def perceptron_float(p: Perceptron, X, Y) -> np.ndarray:
    """The perceptron in float64 on the values themselves (exact for these dyadic numbers):
    independent of theta_of's integer units."""
    w, b = np.zeros(p.M), 0.0
    for e in range(p.epochs):
        for i in (range(p.n) if e % 2 == 0 else reversed(range(p.n))):
            if Y[i] * (w @ X[i] + (b if p.bias else 0.0)) <= 0:
                w, b = w + Y[i] * X[i], b + Y[i]
    return np.r_[w, [b] if p.bias else []]


def source_theta(p: Perceptron, m, X, Y) -> np.ndarray:
    lay = perceptron_layout(p)
    res = run_machine(m, dataset_text(p, X, Y), step_bound(p))
    assert res.halted and res.steps == step_bound(p)
    return lay.theta_from_cells(res.cells, m.blank)


@pytest.fixture(scope="module")
def ext() -> Extended:
    return Extended(load(EXAMPLE), perceptron_layout(SHAPE))


# -- the machine -------------------------------------------------------------------------------
def test_example_file_is_the_generator_and_its_csv():
    assert EXAMPLE.read_text(encoding="utf-8") == perceptron_machine(3, 1, 2, 1, True, 1)
    header = gd_layout.parse(EXAMPLE.read_text(encoding="utf-8"), str(EXAMPLE), validate=Layout.from_header)
    assert Layout.from_header(header) == perceptron_layout(SHAPE)
    X, Y = load_csv(CSV, reals=True)
    assert theta_of(SHAPE, X, Y).tolist() == [2.0, 0.0] == perceptron_float(SHAPE, X, Y).tolist()


def test_example_machine_on_every_feature_triple():
    """All 7^3 feature triples of the example's shape (the labels cycle through all 8
    sign patterns): the machine writes the perceptron's weights."""
    m = load(EXAMPLE)
    labels = list(itertools.product((-1.0, 1.0), repeat=3))
    for k, xs in enumerate(itertools.product(SHAPE.x_format.values(), repeat=3)):
        X, Y = np.array(xs).reshape(3, 1), np.array(labels[k % 8])
        want = perceptron_float(SHAPE, X, Y)
        assert np.array_equal(theta_of(SHAPE, X, Y), want)
        assert np.array_equal(source_theta(SHAPE, m, X, Y), want), (xs, Y)


@pytest.mark.parametrize("p", [Perceptron(2, 2, 1, 0, True, 1), Perceptron(3, 1, 2, 1, False, 1),
                               Perceptron(2, 1, 2, 1, True, 2), Perceptron(3, 2, 1, 1, False, 1),
                               Perceptron(2, 1, 1, 0, True, 3)], ids=lambda p: p.name)
def test_other_shapes_on_random_datasets(p):
    m = machine(p)
    rng = np.random.default_rng(p.n * 100 + p.M * 10 + p.epochs)
    for _ in range(40):
        X = rng.choice(p.x_format.values(), (p.n, p.M))
        Y = rng.choice([-1.0, 1.0], p.n)
        want = perceptron_float(p, X, Y)
        assert np.array_equal(theta_of(p, X, Y), want)
        assert np.array_equal(source_theta(p, m, X, Y), want)


def test_shape_errors():
    with pytest.raises(ValueError, match="n >= 2"):
        Perceptron(1, 1, 2, 1)
    with pytest.raises(ValueError, match="bits >= 1"):
        Perceptron(2, 1, 0, 0)


# -- Prop. 2.1 (issue 18 acceptance) -----------------------------------------------------------
def check_prop_21(rep: dict, want_theta) -> None:
    assert rep["bounds_23_29_33"], rep["bound_violation"]
    assert rep["optimizer_steps"] == rep["machine_steps"] + 1 and rep["stopped_at_machine_steps_plus_1"]
    assert rep["halted"] and rep["trace_matches"], rep["first_divergence"]
    assert rep["theta_matches"] and rep["theta"] == list(want_theta)
    assert rep["F_equals_f_theta_on_train"] and rep["test_agreement"] == 1.0
    assert rep["onnx_F_equals_f_theta_on_train"] and rep["onnx_test_agreement"] == 1.0
    assert rep["z_equals_y"] and rep["z_deviation"] == 0.0 and rep["final_loss"] <= rep["B_stop"]


@pytest.mark.slow
def test_prop_21_on_twenty_random_datasets_torch_and_onnx(ext):
    """The acceptance of issue 18 (5): theta = TM(x, y) exactly, F = f_theta on fresh data
    in torch and in onnxruntime, the stopping criterion after machine steps + 1."""
    rng = np.random.default_rng(18)
    seen = set()
    for seed in range(20):
        X, Y = ext.layout.random_x(rng), rng.choice([-1.0, 1.0], 3)
        want = perceptron_float(SHAPE, X, Y)
        seen.add(tuple(want))
        rep = learn_report(ext, X, Y, tests=3, seed=seed, onnx=True)
        check_prop_21(rep, want + 0.0)
        assert rep["optimizer_steps"] == 99 and rep["source_steps"] == 22
    assert len(seen) >= 10   # the datasets exercise different weights


def test_linear_primary_with_fixed_point_weights():
    p = Perceptron(3, 1, 2, 1, bias=False)
    e = Extended(machine(p), perceptron_layout(p))
    assert e.layout.primary == "linear"
    X, Y = np.array([[-1.5], [1.0], [0.5]]), np.array([1.0, 1.0, -1.0])
    want = perceptron_float(p, X, Y)
    assert want.tolist() == [-0.5]   # updates at samples 1 and 2, not 3
    check_prop_21(learn_report(e, X, Y, tests=3, onnx=True), want)


def test_primary_network_is_labelled_in_the_ir(ext):
    ops = {op.name: op for op in ext.net.nodes}
    assert "affine" in ops["f_theta"].cite and ext.net.metadata["primary"].startswith("affine")
    assert ext.net.spaces["theta"].labels == ("theta:w1", "theta:b")
    assert ext.net.spaces["f_theta"].labels == ("f:0", "f:1", "f:2")
    assert any(op.name.startswith("q/") for op in ext.net.nodes)   # App. B quantiser layers


@pytest.mark.parametrize("kind", ["linear", "affine"])
def test_primary_ops_equal_their_reference(kind):
    """Each primary network's ops (torch and ONNX) compute its numpy reference; the other
    shape's reference differs (so Prop. 2.1's F = f_theta check tells them apart)."""
    import torch

    from tm2nn.backends.gd_trace.layout import PRIMARIES
    from tm2nn.emit import to_torch
    from tm2nn.emit.onnx_model import to_onnx
    from tm2nn.emit.onnx_runtime import run_onnx
    from tm2nn.nets import Port, Slice, Space

    n, M = 3, 2
    shape = PRIMARIES[kind]
    P = len(shape.param_names(M))
    ops, out = shape.ops("x", "theta", n, M)
    net = Net("p", (Port("in", Space(tuple(f"in:{i}" for i in range(n * M + P)))),),
              (Slice("x", ("in",), indices=range(n * M)), Slice("theta", ("in",), indices=range(n * M, n * M + P)),
               *ops), (out,), {})
    rng = np.random.default_rng(0)
    X = rng.choice(FixedPoint(2, 1).values(), (16, n * M))
    TH = rng.choice(FixedPoint(3, 1).values(), (16, P))
    want = np.stack([shape.reference(x.reshape(n, M), t) for x, t in zip(X, TH)])
    inp = np.hstack([X, TH])
    with torch.no_grad():
        assert np.array_equal(to_torch(net, torch.float64)(torch.from_numpy(inp)).numpy(), want)
    assert np.array_equal(run_onnx(to_onnx(net, dtype="float64"), inp), want)
    other = PRIMARIES["affine" if kind == "linear" else "linear"]
    theta_other = TH[:, :M] if kind == "affine" else np.hstack([TH, np.ones((16, 1))])
    assert not np.array_equal(want, np.stack([other.reference(x.reshape(n, M), t)
                                              for x, t in zip(X, theta_other)]))


# -- (23), (29), (33) at every step, and the mutations that break them --------------------------
@pytest.fixture(scope="module")
def small():
    """sign_sum 2x1: the cheapest §5 net to rebuild with broken constants."""
    return parse_text(sign_sum_machine(2, 1), "tm", "<s>")[0], sign_sum_layout(2, 1)


def test_bounds_are_recorded_at_every_step(ext):
    X, Y = np.array([[1.5], [-0.5], [0.5]]), np.array([1.0, -1.0, 1.0])
    r = train(ext, X, Y)
    k = ext.k
    assert len(r.ell) == len(r.f_tm2) == r.steps + 1
    assert np.allclose(r.f_tm2, 2 * np.array(r.ell), rtol=1e-12)                        # (33)
    assert all(f > 2 * k.B_hi for f in r.f_tm2[1:-1]) and r.f_tm2[-1] < 2 * k.B_lo      # (29)
    assert r.halted[-1] and not any(r.halted[:-1])


def replace_op(net: Net, name: str, **changes) -> Net:
    ops = tuple(dataclasses.replace(op, **changes) if op.name == name else op for op in net.nodes)
    return dataclasses.replace(net, nodes=ops)


def test_mutation_33_sqrt_of_l_not_2l(small):
    m, lay = small
    e = Extended(m, lay)
    two_l = next(op for op in e.net.nodes if op.name == "two_l")
    e.net = replace_op(e.net, "two_l", weight=SparseMatrix.from_dense(np.array([[1.0]])))   # l, not 2 l
    assert two_l.weight.dense()[0, 0] == 2.0
    with pytest.raises(BoundViolation, match=r"\(33\)") as err:
        train(e, np.array([[1.0], [-1.0]]), np.array([1.0, 1.0]))
    assert err.value.step == 0


def test_mutation_23_loss_constant_below_c(small):
    m, lay = small
    e = Extended(m, lay)
    k = e.k
    op = next(op for op in e.net.nodes if op.name == "tm/loss")
    e.net = replace_op(e.net, "tm/loss", bias=op.bias - (k.c - k.B_hi) / 2)   # l_TM < c, still > B_hi
    with pytest.raises(BoundViolation, match=r"\(23\)") as err:
        train(e, np.array([[1.0], [-1.0]]), np.array([1.0, 1.0]))
    assert err.value.step <= 2   # of 107


def test_mutation_29_c_below_b_hi(small):
    m, lay = small
    k = Extended(m, lay).k
    bad = dataclasses.replace(k, c=k.B_stop)   # c < B_hi: l_TM near c does not switch to f_TM
    with pytest.raises(AssertionError):
        bad.check()
    e = Extended(m, lay, constants=bad)
    with pytest.raises(BoundViolation, match=r"\(29\)") as err:
        train(e, np.array([[1.0], [-1.0]]), np.array([1.0, 1.0]))
    assert 1 <= err.value.step <= 2   # of 107


# -- the layout: validated in one place, errors are clear ---------------------------------------
@pytest.mark.parametrize("fields,match", [
    (dict(primary="relu"), "unknown primary network 'relu'"),
    (dict(primary="affine"), "has 2 weights .w1, b.: theta must list 2 cells, got 1"),
    (dict(digits="00"), "two different symbols"),
    (dict(xbits=20), "0 <= bits <= 16"),
    (dict(theta=[5, 6], primary="affine", wbits=2), "overlap"),
])
def test_layout_refusals(fields, match):
    h = {"samples": 3, "features": 1, "theta": [5], "steps": 9, **fields}
    with pytest.raises(Tm2nnError, match=match):
        Layout.from_header(h)


def test_data_refusals(ext):
    with pytest.raises(Tm2nnError, match="sample 2's feature 1 = 0.25 is not a number of the format"):
        train(ext, np.array([[0.5], [0.25], [1.0]]), np.ones(3))
    with pytest.raises(Tm2nnError, match="sample 3's label = 0.5"):
        train(ext, np.array([[0.5], [0.5], [1.0]]), np.array([1.0, 1.0, 0.5]))
    with pytest.raises(Tm2nnError, match="laid out for 3 samples of 1"):
        train(ext, np.ones((2, 1)), np.ones(2))


# -- the command line -------------------------------------------------------------------------
def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_cli_learn_and_eval(tmp_path, capsys):
    after = tmp_path / "after.onnx"
    assert main(["learn", str(EXAMPLE), "--backend", "gd-trace", "--train", str(CSV), "--test", "3",
                 "--export-after", str(after), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["theta"] == [2.0, 0.0] and rep["primary"] == "affine" and rep["bounds_23_29_33"]
    assert rep["optimizer_steps"] == 99 and rep["source_steps"] == 22
    assert main(["eval", str(after), "--input", "1,-1.5,0.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"outputs": [2.0, -3.0, 1.0]}
    assert main(["eval", str(after), "--input", "1,x,0.5"]) == 2
    assert "not a finite number" in capsys.readouterr().err


@pytest.mark.parametrize("case,want", [
    ("off-grid", "sample 2's feature 1 = 0.25 is not a number of the format sign + 2 magnitude bits"),
    ("not-a-number", "d.csv:3:1"),
    ("header", "unknown primary network 'cubic'"),
    ("digits", "(digits) '+-' must be symbols of 'perceptron_3x1_b2f1' (0 1); '+' is not"),
    ("steps", "did not hold within 82 optimizer steps (does the machine halt within the layout's steps=5?)"),
])
def test_cli_learn_errors(tmp_path, capsys, case, want):
    src, csv = str(EXAMPLE), str(CSV)
    if case == "off-grid":
        csv = write(tmp_path, "d.csv", "x1,y\n1.5,1\n0.25,-1\n0.5,1\n")
    elif case == "not-a-number":
        csv = write(tmp_path, "d.csv", "x1,y\n1.5,1\nabc,-1\n0.5,1\n")
    else:
        old, new = {"header": ("primary=affine", "primary=cubic"), "digits": ("digits=01", "digits=+-"),
                    "steps": ("steps=22", "steps=5")}[case]
        src = write(tmp_path, "m.tm", EXAMPLE.read_text(encoding="utf-8").replace(old, new))
    assert main(["learn", src, "--backend", "gd-trace", "--train", csv]) == 2
    err = capsys.readouterr().err
    assert want in err and "Traceback" not in err
