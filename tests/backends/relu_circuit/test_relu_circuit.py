"""relu-circuit backend (Wei, Chen & Ma §3, App. B): per-gate blocks, round, whole nets."""

import itertools
from functools import partial

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tm2nn
from tests.conftest import CORPUS, EXAMPLES, example_circuits
from tests.strategies import circuits
from tm2nn.backends.relu_circuit.layers import blocks, build_net, gate_rows
from tm2nn.emit.torch_emit import run_torch, to_torch
from tm2nn.interp import eval_circuit, exhaustive_inputs, random_inputs, truth_table
from tm2nn.ir import Circuit, Gate
from tm2nn.nets import Affine, Net, Port, ReLU, Space
from tm2nn.nets.round import ROUND_HI, ROUND_LO, round_correction
from tm2nn.passes.basis import to_basis
from tm2nn.passes.layering import layer_circuit
from tm2nn.syntax import load

#: relu-circuit's compile of a circuit, as a user calls it
relu_compile = partial(tm2nn.compile, backend="relu-circuit")

GROUPS = {"in", "pre", "g", "rlo", "rhi", "out"}
REF = {
    "AND": lambda xs: all(xs),
    "OR": lambda xs: any(xs),
    "NOT": lambda xs: not xs[0],
    "BUF": lambda xs: xs[0],
    "CONST0": lambda xs: False,
    "CONST1": lambda xs: True,
}


def relu(v):
    return max(0.0, v)


# -- Prop. B.2 / Lemma B.1, gate by gate ---------------------------------------------------------
@pytest.mark.parametrize("op,fanin", [("AND", 2), ("OR", 2), ("NOT", 1), ("BUF", 1),
                                      ("CONST0", 0), ("CONST1", 0), ("AND", 3), ("OR", 1)])
def test_gate_rows_compute_the_gate_on_bits(op, fanin):
    w1, b1, w2, b2 = gate_rows(op, fanin)
    assert w2 in (-1.0, 0.0, 1.0)
    for xs in itertools.product((0, 1), repeat=fanin):
        pre = relu(sum(w * x for w, x in zip(w1, xs)) + b1)
        assert pre in (0.0, 1.0)
        assert relu(w2 * pre + b2) == float(REF[op](xs))


def test_prop_b2_formulas_are_the_papers():
    assert gate_rows("AND", 2) == ((1.0, 1.0), -1.0, 1.0, 0.0)  # φ(x1 + x2 - 1)
    assert gate_rows("OR", 2) == ((-1.0, -1.0), 1.0, -1.0, 1.0)  # 1 - φ(1 - x1 - x2)
    assert gate_rows("NOT", 1) == ((-1.0,), 1.0, 1.0, 0.0)  # Lemma B.1's proof
    assert gate_rows("BUF", 1) == ((1.0,), 0.0, 1.0, 0.0)


def test_gate_rows_refuse_non_basis_gates():
    with pytest.raises(ValueError):
        gate_rows("XOR", 2)


@pytest.mark.parametrize("op", ["AND", "OR", "NOT", "BUF", "CONST0", "CONST1"])
def test_each_gate_block_through_the_emitter(op):
    k = {"AND": 2, "OR": 2, "NOT": 1, "BUF": 1}.get(op, 0)
    ins = ("a", "b")
    c = Circuit("one", ins, ("o",), (Gate("o", op, ins[:k]),))
    comp = relu_compile(c, corrections=False)
    assert comp.net.info()["affine_layers"] == 2  # one circuit layer = two ReLU layers
    x = exhaustive_inputs(2)
    y = run_torch(comp.net, x.astype(np.float32))
    assert np.array_equal(y, eval_circuit(c, x).astype(np.float32))


# -- Prop. 3.4 ---------------------------------------------------------------------------------
def _round_net():
    space = Space(("g:z",))
    return Net("round", (Port("x", space),), tuple(round_correction(1, "x", space)), ("L1.round_b.relu",))


def test_round_on_a_grid():
    z = np.linspace(-1.0, 2.0, 3001)
    y = run_torch(to_torch(_round_net(), torch.float64), z[:, None])[:, 0]
    want = np.where(z < 1 / 3, 0.0, np.where(z < 2 / 3, 3 * z - 1, 1.0))
    assert np.allclose(y, want, atol=1e-12)
    assert np.all(y[(z <= 1 / 3)] == 0.0)
    assert np.allclose(y[z >= 2 / 3], 1.0, atol=1e-15)


def test_round_keeps_the_papers_constants():
    ops = round_correction(1, "x", Space(("g:z",)))
    a, b = ops[0], ops[2]
    assert list(a.bias) == [-ROUND_LO, -ROUND_HI] and ROUND_LO == 1 / 3 and ROUND_HI == 2 / 3
    assert sorted(a.weight.vals) == [1.0, 1.0]
    assert sorted(b.weight.vals) == [-3.0, 3.0] and not b.bias.any()
    assert a.out.labels == ("rlo:z", "rhi:z")


# -- whole nets ---------------------------------------------------------------------------------
def _check(c: Circuit, comp, x: np.ndarray, dtype=torch.float32, tol=1e-5):
    want = eval_circuit(c, x)
    y = run_torch(to_torch(comp.net, dtype), x.astype(np.float64 if dtype == torch.float64 else np.float32))
    enc = comp.output_encoding
    assert np.array_equal(y > enc["threshold"], want)
    exact = np.where(want, 1.0, -1.0 if enc["values"] == "pm1" else 0.0)
    dev = float(np.abs(y - exact).max()) if y.size else 0.0
    assert dev <= tol, dev
    return dev


@settings(max_examples=60, deadline=None)
@given(circuits(), st.booleans(), st.booleans())
def test_random_circuits_match_the_truth_table(c, corrections, pm1):
    comp = relu_compile(c, corrections=corrections, pm_one_output=pm1)
    x = exhaustive_inputs(len(c.inputs))
    tt = truth_table(c)
    for dtype in (torch.float32, torch.float64):
        y = run_torch(to_torch(comp.net, dtype), x.astype(np.float32))
        assert np.array_equal(y > comp.output_encoding["threshold"], tt)
    _check(c, comp, x, torch.float32, 1e-5)
    _check(c, comp, x, torch.float64, 1e-12)
    if not corrections:  # integer weights on 0/1: exact in float32
        _check(c, comp, x, torch.float32, 0.0)
    _check_structure(c, comp)


def _check_structure(c: Circuit, comp):
    net = comp.net
    opts = comp.options
    q = opts["layers"]
    # labels: every dimension of every value, unique within its space (Space enforces it)
    for name, space in net.spaces.items():
        for lab in space.labels:
            group, _, item = lab.partition(":")
            assert group in GROUPS and item, (name, lab)
    assert net.spaces["x"].labels == tuple(f"in:{i}" for i in c.inputs)
    assert [lab.split(":", 1)[1].split("#")[0] for lab in net.spaces["y"].labels] == list(c.outputs)
    info = net.info()
    corr = 2 * max(q - 1, 0) if opts["corrections"] else 0
    assert info["depth"]["affine"] == 2 * q + corr + (1 if opts["pm_one_output"] and q else 0)
    assert info["distinct_weight_values"] <= 9
    # Lemma B.1: W2 diagonal with entries in {-1, 0, 1}; W1 entries in {-1, 1} (2 for AND(a, a))
    for b in blocks(net):
        if b.kind == "f":
            w1, w2 = b.affines
            assert w2.weight.is_diagonal and set(w2.weight.vals) <= {-1.0, 1.0}
            assert set(w2.bias) <= {0.0, 1.0}
            assert set(np.abs(w1.weight.vals)) <= {1.0, 2.0}
            assert w1.weight.max_row_nnz <= 2
    assert info["inputs"] == {"x": len(c.inputs)} and info["outputs"] == {"y": len(c.outputs)}


def test_encodings_and_bounds():
    c = load(EXAMPLES / "full_adder.circ")
    comp = relu_compile(c)
    assert comp.backend == "relu-circuit" and comp.source is c
    assert comp.input_encoding == {"kind": "bits", "names": ["a", "b", "cin"]}
    assert comp.output_encoding == {"kind": "bits", "names": ["s", "cout"], "threshold": 0.5, "values": "01"}
    pm = relu_compile(c, pm_one_output=True)
    assert pm.output_encoding["threshold"] == 0.0 and pm.output_encoding["values"] == "pm1"
    assert [r[0] for r in comp.bounds] == ["circuit (layered, basis)", "width", "depth (affine layers)",
                                          "||theta||_1", "parameters", "distinct weight values"]
    assert all(len(r) == 3 and all(isinstance(v, str) for v in r) for r in comp.bounds)
    info = comp.net.info()
    lc = layer_circuit(to_basis(c))
    r = max(lc.widths[1:])
    s = sum(lc.widths[1:])
    assert r <= info["max_width"] <= 2 * r  # Lemma B.1 needs >= r; corrections double it
    assert info["l1_norm"] <= 14 * s  # O(s): <= 5 per gate + 9 per corrected unit
    assert info["params_nonzero"] <= 10 * s
    values = {float(v) for op in comp.net.affine_layers() for v in (*op.weight.vals, *op.bias)}
    assert values <= {0.0, 1.0, -1.0, 3.0, -3.0, -1 / 3, -2 / 3}


def test_op_names_and_cites():
    comp = relu_compile(load(EXAMPLES / "full_adder.circ"), pm_one_output=True)
    names = [op.name for op in comp.net.nodes]
    assert names[:8] == ["L1.pre", "L1.pre.relu", "L1.gate", "L1.gate.relu",
                         "L1.round_a", "L1.round_a.relu", "L1.round_b", "L1.round_b.relu"]
    assert names[-2:] == ["out.pm1", "y"]
    for op in comp.net.nodes:
        if isinstance(op, Affine):
            assert "Wei, Chen & Ma" in op.cite
        else:
            assert isinstance(op, ReLU) or op.name == "y"
    q = comp.options["layers"]
    assert f"L{q}.round_a" not in names and f"L{q - 1}.round_a" in names  # none after the last


@pytest.mark.parametrize("path", example_circuits(), ids=lambda p: p.stem)
def test_example_circuits_exhaustive(path):
    c = load(path)
    x = exhaustive_inputs(len(c.inputs))
    for corr, pm in ((True, False), (False, False), (True, True)):
        comp = relu_compile(c, corrections=corr, pm_one_output=pm)
        _check(c, comp, x)
        _check_structure(c, comp)


def test_repeated_outputs_constants_and_passthrough():
    c = Circuit("odd", ("a", "b"), ("k1", "a", "n", "n", "k0"), (
        Gate("k1", "CONST1", ()), Gate("k0", "CONST0", ()), Gate("n", "NAND", ("a", "b"))))
    for corr, pm in itertools.product((True, False), repeat=2):
        comp = relu_compile(c, corrections=corr, pm_one_output=pm)
        _check(c, comp, exhaustive_inputs(2))
        _check_structure(c, comp)
        assert comp.net.spaces["y"].labels == ("out:k1", "out:a", "out:n", "out:n#2", "out:k0")


def test_no_outputs():
    c = Circuit("none", ("a",), (), ())
    comp = relu_compile(c)
    y = run_torch(comp.net, np.zeros((3, 1), np.float32))
    assert y.shape == (3, 0)


def test_build_net_does_not_need_basis_for_multi_input_and_or():
    c = Circuit("wide", ("a", "b", "c"), ("o", "p"), (
        Gate("o", "AND", ("a", "b", "c")), Gate("p", "OR", ("a", "a"))))
    net = build_net(layer_circuit(c), corrections=True)
    x = exhaustive_inputs(3)
    y = run_torch(net, x.astype(np.float32))
    assert np.array_equal(y > 0.5, eval_circuit(c, x))


def test_float32_deviation_is_rounding_only():
    c = load(EXAMPLES / "ripple_adder4.circ")
    dev = _check(c, relu_compile(c), exhaustive_inputs(len(c.inputs)))
    assert 0 < dev < 1e-6  # the 1/3, 2/3 of round are not exact in float32
    assert _check(c, relu_compile(c, corrections=False), exhaustive_inputs(len(c.inputs))) == 0.0


def test_compile_through_the_orchestrator():
    from tm2nn.compiler import compile as tm2nn_compile

    comp = tm2nn_compile(EXAMPLES / "full_adder.circ", corrections=False, pm_one_output=True)
    assert comp.options["corrections"] is False and comp.output_encoding["values"] == "pm1"


# -- the corpus ---------------------------------------------------------------------------------
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")


@needs_corpus
def test_c17_exhaustive():
    c = load(CORPUS / "circuits" / "iscas85" / "c17.bench")
    x = exhaustive_inputs(len(c.inputs))
    for corr in (True, False):
        comp = relu_compile(c, corrections=corr)
        _check(c, comp, x)
        _check(c, comp, x, torch.float64, 1e-12)
        _check_structure(c, comp)


@needs_corpus
def test_c432_random():
    c = load(CORPUS / "circuits" / "iscas85" / "c432.bench")
    x = random_inputs(len(c.inputs), 2000, seed=432)
    for corr, pm in ((True, False), (False, True)):
        comp = relu_compile(c, corrections=corr, pm_one_output=pm)
        _check(c, comp, x)
        _check_structure(c, comp)


@needs_corpus
@pytest.mark.slow
def test_epfl_multiplier_is_linear_in_size():
    import time

    c = load(CORPUS / "circuits" / "epfl" / "multiplier.aig")
    t0 = time.perf_counter()
    comp = relu_compile(c)
    elapsed = time.perf_counter() - t0
    assert elapsed < 60, elapsed  # a few seconds on the project machine
    info = comp.net.info()
    s = comp.options["gates"]
    assert info["params_nonzero"] <= 10 * s and info["max_width"] <= 2 * comp.options["width"]
    _check(c, comp, random_inputs(len(c.inputs), 64, seed=64))
