"""Welper §5 with a primary network that has a hidden ReLU layer (issue 38, Deliver 4), and
the §4.4 simplex over the reachable tripled states (the 2-feature perceptron fits).

* the ``relu:H`` primary's ops (torch, ONNX) against an independent numpy network;
* the perceptron on a fixed hidden ReLU layer (``perceptron.split_features``) against an
  independent float perceptron on random datasets, and the example file against its
  generator;
* Prop. 2.1 on the example (every iterate = the §4.1 machine's configuration, theta = the
  interpreter's, F = f_theta exactly on fresh datasets, torch and ONNX);
* mutations: the hidden ReLU as the identity, the ReLU on the negated pre-activation
  (a wrong sign), and the machine's feature map without the ReLU: each fails a check;
* ``vertices="reachable"``: a third of the vertices for an acyclic learner, the same
  iterates as the paper's full vertex set; machine mode with the option;
* ``tm2nn learn --primary``: the option, and its error for a layout it does not fit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tm2nn.backends.gd_trace import layout as layout_mod
from tm2nn.backends.gd_trace.check import learn_report
from tm2nn.backends.gd_trace.extended import Extended, perceptron_layout, train
from tm2nn.backends.gd_trace.layout import primary_shape
from tm2nn.backends.gd_trace.perceptron import (
    Perceptron,
    perceptron_machine,
    split_features,
    theta_of,
)
from tm2nn.cli import main
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import run_machine
from tm2nn.nets import Affine, Net, Port, Space, SparseMatrix
from tm2nn.syntax import load, parse_text

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "gd_trace" / "perceptron_relu_2x1.tm"
CSV = ROOT / "examples" / "gd_trace" / "perceptron_relu_2x1.csv"
P = Perceptron(2, 1, 1, 0, True, 1, split_features(1))


@pytest.fixture(scope="module")
def ext():
    return Extended(load(EXAMPLE), perceptron_layout(P))


def independent_theta(p: Perceptron, X, Y) -> np.ndarray:
    """The perceptron on h = relu(W x + c), in floats (not the machine's integer units)."""
    Wc = np.array(p.hidden, dtype=np.float64)
    h = np.maximum(np.asarray(X, dtype=np.float64) @ Wc[:, :-1].T + Wc[:, -1], 0.0)
    a, b = np.zeros(p.H), 0.0
    for i in range(p.n):
        if Y[i] * (h[i] @ a + b) <= 0:
            a, b = a + Y[i] * h[i], b + Y[i]
    return np.r_[Wc.ravel(), a, b]


def test_example_is_the_generator():
    assert EXAMPLE.read_text(encoding="utf-8") == perceptron_machine(2, 1, 1, 0, True, 1, split_features(1))
    assert "primary=relu:2" in EXAMPLE.read_text(encoding="utf-8")


@pytest.mark.parametrize("shape", [(2, 1, 1, 0), (3, 1, 1, 0)])
def test_machine_against_an_independent_perceptron(shape):
    """The machine (run by the interpreter, weights read off its tape) = the float
    perceptron on the hidden ReLU layer, on random datasets; theta_of agrees too."""
    n, M, bits, frac = shape
    p = Perceptron(n, M, bits, frac, True, 1, split_features(M))
    m = parse_text(perceptron_machine(n, M, bits, frac, True, 1, split_features(M)), "tm", "<p>")[0]
    lay = perceptron_layout(p)
    rng = np.random.default_rng(1)
    for _ in range(12):
        X, Y = lay.random_x(rng), rng.choice([-1.0, 1.0], n)
        r = run_machine(m, lay.text(X, Y), lay.steps)
        got = lay.theta_from_cells(r.cells, m.blank)
        assert r.halted and np.array_equal(got, independent_theta(p, X, Y)), (X, Y)
        assert np.array_equal(got, theta_of(p, X, Y))


def test_relu_primary_ops_equal_an_independent_network():
    """The ``relu:3`` ops in torch and ONNX = a numpy one-hidden-layer ReLU network."""
    import torch

    from tm2nn import emit

    n, M, H = 3, 2, 3
    shape = primary_shape("relu:3")
    K = len(shape.param_names(M))
    assert K == H * (M + 1) + H + 1
    ops, out = shape.ops("x", "theta", n, M)
    net = Net("p", (Port("in", Space.named("in", range(n * M + K))),),
              (Affine("x", ("in",), weight=SparseMatrix.from_dense(np.eye(n * M, n * M + K)),
                      out=Space.named("xx", range(n * M))),
               Affine("theta", ("in",), weight=SparseMatrix.from_dense(np.eye(K, n * M + K, n * M)),
                      out=Space.named("th", range(K))), *ops), (out,))
    rng = np.random.default_rng(0)
    X, TH = rng.normal(size=(16, n * M)), rng.normal(size=(16, K))
    W, c = TH[:, :H * (M + 1)].reshape(16, H, M + 1)[..., :M], TH[:, :H * (M + 1)].reshape(16, H, M + 1)[..., M]
    a, b = TH[:, H * (M + 1):H * (M + 2)], TH[:, -1]
    want = np.einsum("bih,bh->bi", np.maximum(np.einsum("bim,bhm->bih", X.reshape(16, n, M), W) + c[:, None, :], 0),
                     a) + b[:, None]
    got = emit.to_torch(net, torch.float64)(torch.from_numpy(np.c_[X, TH])).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(emit.run_onnx(emit.to_onnx(net, dtype="float64"), np.c_[X, TH]), want,
                               rtol=1e-12, atol=1e-12)
    ref = np.stack([shape.reference(x.reshape(n, M), t) for x, t in zip(X, TH)])
    np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(Tm2nnError, match="unknown primary network 'relu:0'"):
        primary_shape("relu:0")


def test_prop21_with_the_relu_primary(ext):
    """Prop. 2.1: the iterates trace the §4.1 machine, theta = the interpreter's, and
    F = f_theta (the hidden ReLU network) exactly on fresh datasets, in torch and ONNX."""
    assert ext.layout.primary == "relu:2" and "relu" in ext.net.metadata["primary"]
    rng = np.random.default_rng(3)
    X, Y = ext.layout.random_x(rng), rng.choice([-1.0, 1.0], 2)
    rep = learn_report(ext, X, Y, tests=4, onnx=True)
    assert rep["bounds_23_29_33"] and rep["trace_matches"] and rep["stopped_at_machine_steps_plus_1"]
    assert rep["theta"] == independent_theta(P, X, Y).tolist() and rep["theta_matches"]
    assert rep["F_equals_f_theta_on_train"] and rep["test_agreement"] == 1.0 and rep["z_equals_y"]
    assert rep["onnx_test_agreement"] == 1.0 and rep["onnx_F_equals_f_theta_on_train"]


def _mutated_ops(how: str):
    orig = layout_mod.PrimaryShape.ops

    def ops(self, x, theta, n, M):
        out, name = orig(self, x, theta, n, M)
        if not self.hidden:
            return out, name
        k = next(i for i, op in enumerate(out) if type(op).__name__ == "ReLU")
        relu, hn = out[k], n * self.hidden
        if how == "identity":   # the hidden layer without its ReLU
            out[k] = Affine(relu.name, relu.inputs, weight=SparseMatrix.from_dense(np.eye(hn)),
                            out=Space.named("mut", range(hn)))
        else:                   # relu(-z): the ReLU's sign flipped
            neg = Affine(relu.name + "_neg", relu.inputs, weight=SparseMatrix.from_dense(-np.eye(hn)),
                         out=Space.named("mut", range(hn)))
            out[k:k + 1] = [neg, type(relu)(relu.name, (neg.name,))]
        return out, name
    return ops


@pytest.mark.parametrize("how", ["identity", "negated"])
def test_mutation_hidden_relu_fails_f_equals_f_theta(monkeypatch, how):
    monkeypatch.setattr(layout_mod.PrimaryShape, "ops", _mutated_ops(how))
    bad = Extended(load(EXAMPLE), perceptron_layout(P))
    X, Y = np.array([[1.0], [-1.0]]), np.array([1.0, 1.0])
    rep = learn_report(bad, X, Y, tests=4)
    assert rep["trace_matches"] and rep["theta_matches"]   # the trace is untouched ...
    assert not (rep["F_equals_f_theta_on_train"] and rep["test_agreement"] == 1.0)   # ... F is not f_theta


def test_mutation_machine_without_relu_fails_the_reference(monkeypatch):
    """A machine whose feature map forgets the ReLU writes other weights than the
    independent perceptron on relu(W x + c)."""
    def linear(self, xu):
        return [sum(w * v for w, v in zip(row[:-1], xu)) + row[-1] for row in self.hidden]
    monkeypatch.setattr(Perceptron, "features", linear)
    m = parse_text(perceptron_machine(2, 1, 1, 0, True, 1, split_features(1)), "tm", "<p>")[0]
    lay = perceptron_layout(P)
    rng = np.random.default_rng(1)
    bad = 0
    for _ in range(12):
        X, Y = lay.random_x(rng), rng.choice([-1.0, 1.0], 2)
        got = lay.theta_from_cells(run_machine(m, lay.text(X, Y), lay.steps).cells, m.blank)
        bad += not np.array_equal(got, independent_theta(P, X, Y))
    assert bad > 0


def test_reachable_vertices_same_iterates():
    """The perceptron is acyclic with fixed-length passes: one round in three is reachable
    (reachable_rounds), and the read-only cells no data bit changes cut the vertices and
    edges further (reachable_reads); training on the reduced simplex gives the same
    iterates, steps and weights as on the paper's full Qbar x {-1,1}^d."""
    from tm2nn.backends.gd_trace.tape_simplex import vertex_count

    p = Perceptron(2, 1, 1, 0)
    m = parse_text(perceptron_machine(2, 1, 1, 0), "tm", "<p>")[0]
    full = Extended(m, perceptron_layout(p), vertices="all")
    red = Extended(m, perceptron_layout(p), vertices="reachable")
    assert full.ts.m == vertex_count(full.low.machine, "all") == 3 * vertex_count(full.low.machine, "reachable")
    assert red.ts.m < full.ts.m / 3 and len(red.ts.edges) < len(full.ts.edges) / 6
    X, Y = np.array([[1.0], [-1.0]]), np.array([-1.0, 1.0])
    a, b = train(full, X, Y), train(red, X, Y)
    assert a.configs == b.configs and a.steps == b.steps and np.array_equal(a.theta, b.theta)
    np.testing.assert_allclose(a.ell, b.ell, rtol=1e-12)   # (21): the same value at every iterate
    with pytest.raises(Tm2nnError, match="vertices must be one of"):
        vertex_count(full.low.machine, "some")


def test_machine_mode_reachable_vertices(capsys):
    src = str(ROOT / "examples" / "bb3.tm")
    assert main(["verify", src, "--backend", "gd-trace", "--steps", "25", "--max-input", "0",
                 "--vertices", "reachable", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_cli_learn_primary_option(tmp_path, capsys):
    assert main(["learn", str(EXAMPLE), "--backend", "gd-trace", "--train", str(CSV), "--test", "2",
                 "--primary", "relu:2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    X, Y = np.array([[1.0], [-1.0]]), np.array([1.0, -1.0])
    assert rep["primary"] == "relu:2" and rep["theta"] == independent_theta(P, X, Y).tolist()
    assert main(["learn", str(EXAMPLE), "--backend", "gd-trace", "--train", str(CSV), "--primary", "affine"]) == 2
    err = capsys.readouterr().err
    assert "primary" in err and "theta must list 2 cells, got 7" in err and "Traceback" not in err


def test_declared_cells_size_the_window():
    """``cells=LO,HI`` in the header: sign_sum declares [-1, L + M], the window shrinks
    from what the step bound gives; a declaration that misses the input or the weights is
    refused with the reason."""
    import dataclasses

    from tm2nn.backends.gd_trace.extended import sign_sum_layout
    from tm2nn.backends.gd_trace.layout import Layout
    from tm2nn.syntax import gd_layout

    ex = ROOT / "examples" / "sign_sum_3x2.tm"
    lay = Layout.from_header(gd_layout.parse(ex.read_text(encoding="utf-8"), str(ex)))
    assert lay.cells == (-1, 11) == lay.window and lay == sign_sum_layout(3, 2)
    wide = dataclasses.replace(lay, cells=None)
    assert wide.window == (-lay.steps, 9 + lay.steps)
    with pytest.raises(Tm2nnError, match="cells must be LO,HI with LO <= 0 and HI >= 11"):
        dataclasses.replace(lay, cells=(-1, 10))
    with pytest.raises(Tm2nnError, match="cells must be LO,HI"):
        dataclasses.replace(lay, cells=(1, 20))


def test_model_files_record_the_vertex_set():
    """``learn`` stores ``vertices: reachable`` with the layout; a model file written before
    (no such key) is rebuilt with the paper's full vertex set, the net it was saved from."""
    from tm2nn.backends.gd_trace.backend import extended_model
    from tm2nn.syntax import gd_layout

    ex = ROOT / "examples" / "sign_sum_3x2.tm"
    header = gd_layout.parse(ex.read_text(encoding="utf-8"), str(ex))
    m = load(ex)

    def size(model):
        return next(op.value.size for op in model.net.nodes if op.name == "s")
    assert size(extended_model(m, header)) == 3696
    assert size(extended_model(m, {**header, "vertices": "reachable"})) == 1428


def test_mutation_pruning_the_taken_edge_is_caught(monkeypatch):
    """If the reduction dropped the edge a run takes (no successor where the read-only
    symbol is fixed), Prop. 2.1's checks fail: the reduction is checked, not trusted."""
    from tm2nn.backends.gd_trace import tape_simplex

    orig = tape_simplex.reachable_reads

    def flipped(*a, **k):
        verts, succ = orig(*a, **k)
        return verts, {v: (set() if len(s) == 1 else s) for v, s in succ.items()}
    monkeypatch.setattr(tape_simplex, "reachable_reads", flipped)
    p = Perceptron(2, 1, 1, 0)
    bad = Extended(parse_text(perceptron_machine(2, 1, 1, 0), "tm", "<p>")[0], perceptron_layout(p))
    rep = learn_report(bad, np.array([[1.0], [-1.0]]), np.array([-1.0, 1.0]), tests=0)
    assert not (rep["bounds_23_29_33"] and rep["trace_matches"])
