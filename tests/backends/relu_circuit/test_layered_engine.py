"""The fused engines for layered ReLU nets (issue 20): ``fused`` (exact integers) and
``fused-float`` compute what the relu-circuit net computes, on circuits and unrolled
machines, and refuse what they cannot run.  The whole ISCAS/EPFL suite runs through them
in tests/test_relu_corpus.py."""

from __future__ import annotations

import dataclasses
import json
from functools import partial

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tm2nn
from tests.conftest import EXAMPLES, example_circuits
from tests.strategies import circuits
from tm2nn.backends.relu_circuit import layered_program
from tm2nn.backends.relu_circuit.layered_engine import LayeredEngine
from tm2nn.backends.relu_circuit.layered_program import integer_program
from tm2nn.compiler import compile as tm2nn_compile
from tm2nn.emit.torch_emit import run_torch, to_torch
from tm2nn.engines import EngineRefused
from tm2nn.errors import Tm2nnError
from tm2nn.interp import eval_circuit, exhaustive_inputs
from tm2nn.nets import Affine, Net
from tm2nn.options import OptionError
from tm2nn.syntax import load

#: relu-circuit's compile of a circuit, as a user calls it
relu_compile = partial(tm2nn.compile, backend="relu-circuit")


def _outputs(comp, x):
    """(integer engine, float engine, torch float64) outputs on 0/1 inputs ``x``."""
    xf = x.astype(np.float32)
    return (LayeredEngine.for_net(comp.net).run(xf), LayeredEngine.for_net(comp.net, "float").run(xf),
            run_torch(to_torch(comp.net, torch.float64), x.astype(np.float64)))


@settings(max_examples=40, deadline=None)
@given(circuits(), st.booleans(), st.booleans())
def test_random_circuits(c, corrections, pm1):
    """Both engines give the circuit's outputs on every input; the integer engine's are
    the exact values (0/1, or -1/+1 with the final 2z - 1)."""
    comp = relu_compile(c, corrections=corrections, pm_one_output=pm1)
    x = exhaustive_inputs(len(c.inputs))
    want = eval_circuit(c, x)
    y_int, y_float, y_torch = _outputs(comp, x)
    exact = np.where(want, 1.0, -1.0 if pm1 else 0.0)
    assert np.array_equal(y_int, exact)
    assert np.abs(y_float - exact).max(initial=0) <= 1e-5
    assert np.abs(y_torch - exact).max(initial=0) <= 1e-12


@pytest.mark.parametrize("path", example_circuits(), ids=lambda p: p.stem)
def test_example_circuits(path):
    c = load(path)
    comp = relu_compile(c)
    x = exhaustive_inputs(len(c.inputs))
    y_int, y_float, _ = _outputs(comp, x)
    assert np.array_equal(y_int == 1, eval_circuit(c, x))
    assert np.array_equal(y_float > 0.5, eval_circuit(c, x))


def test_unrolled_machines_verify_on_every_engine():
    """A machine unrolled for T steps (relu-circuit's machine path): the decoded
    configuration after T steps is the interpreter's on both fused engines."""
    for name, steps in (("binary_increment", 8), ("even_ones", 6)):
        comp = tm2nn_compile(load(EXAMPLES / f"{name}.tm"), "relu-circuit", steps=steps)
        rep = comp.verify(samples=60, seed=3, engines=["fused", "fused-float"])
        assert rep.ok and list(rep.engines) == ["fused", "fused-float"], rep.first


def test_the_integer_program_runs_a_row_per_new_value():
    """Every identity unit, gate layer after an AND and round correction is shown to copy a
    value: the program runs about one row per AND and two per OR, not the net's five per
    unit of every layer."""
    c = load(EXAMPLES / "full_adder.circ")
    comp = relu_compile(c)
    p = integer_program(comp.net)
    assert p.scale == 3 and p.dtype == np.float32
    assert p.rows < p.net_rows / 4, (p.rows, p.net_rows)
    assert p.w.dtype == np.int64 and np.array_equal(p.w, np.round(p.w))


def _mutated(comp, name: str, **change) -> Net:
    nodes = tuple(dataclasses.replace(op, **change) if op.name == name else op for op in comp.net.nodes)
    return Net(comp.net.name, comp.net.inputs, nodes, comp.net.outputs, comp.net.metadata)


def test_the_engines_follow_the_net_not_the_circuit():
    """Mutation: a correction whose weights are 2 and -2 (no longer the identity on 0/1) is
    run, not skipped, and both engines then give what the mutated net gives in torch."""
    c = load(EXAMPLES / "full_adder.circ")
    comp = relu_compile(c)
    op = comp.net.node("L1.round_b")
    w = dataclasses.replace(op.weight, vals=op.weight.vals * 2 / 3)
    net = _mutated(comp, "L1.round_b", weight=w)
    x = exhaustive_inputs(len(c.inputs))
    want = run_torch(to_torch(net, torch.float64), x.astype(np.float64))
    assert not np.array_equal(want > 0.5, eval_circuit(c, x)) or np.abs(want - np.round(want)).max() > 0.1
    assert np.allclose(LayeredEngine.for_net(net).run(x.astype(np.float32)), want, atol=1e-12)
    assert np.allclose(LayeredEngine.for_net(net, "float", np.float64).run(x), want, atol=1e-12)
    assert integer_program(net).rows > integer_program(comp.net).rows


def test_a_broken_identity_proof_is_caught(monkeypatch):
    """Mutation of the analysis: if every one-input row were taken for a copy, the outputs
    would be wrong and the corpus-style comparison fails."""
    c = load(EXAMPLES / "full_adder.circ")
    comp = relu_compile(c)
    x = exhaustive_inputs(len(c.inputs))
    real = layered_program.np.all

    def lenient(a, axis=None, **kw):
        out = real(a, axis=axis, **kw)
        return np.ones_like(out) if axis == 1 else out
    monkeypatch.setattr(layered_program.np, "all", lenient)
    y = LayeredEngine.for_net(comp.net).run(x.astype(np.float32))
    monkeypatch.undo()
    assert not np.array_equal(y == 1, eval_circuit(c, x))


def test_refusals():
    comp = relu_compile(load(EXAMPLES / "full_adder.circ"))
    eng = LayeredEngine.for_net(comp.net)
    with pytest.raises(Tm2nnError, match="0/1 inputs only"):
        eng.run(np.full((2, 3), 0.5, np.float32))
    op = comp.net.node("L1.pre")
    net = _mutated(comp, "L1.pre", weight=dataclasses.replace(op.weight, vals=op.weight.vals * 0.5))
    with pytest.raises(EngineRefused, match="not an integer.*fused-float"):
        integer_program(net)
    assert LayeredEngine.for_net(net, "float").run(np.zeros((1, 3), np.float32)).shape == (1, 2)
    net = _mutated(comp, "L1.pre", bias=op.bias + 1 / 97)
    with pytest.raises(EngineRefused, match="denominator"):
        integer_program(net)
    transformer = tm2nn_compile(load(EXAMPLES / "even_ones.tm"), "transformer", steps=4).net
    with pytest.raises(EngineRefused, match="fused engine runs"):
        integer_program(transformer)
    assert isinstance(comp.net.node("L1.pre"), Affine)


def test_engine_selection_and_refusals_through_the_api(tmp_path):
    comp = tm2nn_compile(load(EXAMPLES / "full_adder.circ"), "relu-circuit")
    texts = ["000", "011", "111"]
    want = [r["outputs"] for r in comp.run(texts)]
    for eng in ("fused", "fused-float"):
        assert [r["outputs"] for r in comp.run(texts, engine=eng)] == want
    with pytest.raises(OptionError, match="runs on torch, onnxruntime, index"):
        tm2nn_compile(load(EXAMPLES / "even_ones.tm"), "transformer", steps=4).run("1", engine="fused")


def test_numba_runs_its_own_threads_not_a_second_openmp():
    """tm2nn.engines selects numba's workqueue layer (unless the user chose one): with the
    omp layer, numba's idle threads spun and torch's OpenMP ops ran 15x slower after a
    fused run (tm2nn/engines/__init__.py)."""
    import os

    import numba

    import tm2nn.engines  # noqa: F401

    want = os.environ.get("NUMBA_THREADING_LAYER", "workqueue")
    assert numba.config.THREADING_LAYER == want


def test_an_edited_model_is_refused():
    """Both engines run ``compiled.net``, the construction: a model whose weights are not
    the construction's is refused (Compiled.check_engine), on run and on the array runner."""
    comp = tm2nn_compile(load(EXAMPLES / "full_adder.circ"), "relu-circuit")
    comp.edited = "weight 'L1.pre.weight': 1 of 12 values differ"
    for eng in ("fused", "fused-float"):
        with pytest.raises(Tm2nnError, match=f"the {eng} engine runs the construction's network: run it in torch"):
            comp.run("101", engine=eng)
        with pytest.raises(Tm2nnError, match="not the construction's"):
            comp.runner(eng)
    assert comp.run("101", engine="torch")["outputs"] == "01"


def test_cli_eval_verify_margin(run_cli, tmp_path):
    model = tmp_path / "fa.onnx"
    assert run_cli("compile", EXAMPLES / "full_adder.circ", "-o", model).code == 0
    inputs = ["--input", "110", "--input", "011", "--json"]
    want = run_cli("eval", model, "--engine", "onnxruntime", *inputs)
    got = run_cli("eval", model, "--engine", "fused", *inputs)
    assert got.code == 0 and got.out == want.out and '"outputs": "01"' in got.out
    r = run_cli("verify", EXAMPLES / "full_adder.circ", "--engines", "fused,fused-float")
    assert r.code == 0 and "fused-float" in r.out
    # a budget no load reaches: the comparison is of the same search run to its end on both
    # engines (under the default 45 s a busy machine cut one short: eps 8.0 against 0.084)
    r = run_cli("margin", EXAMPLES / "full_adder.circ", "--engines", "torch,fused-float", "--samples", "8",
                "--trials", "2", "--budget", "3600", "--json")
    rows = json.loads(r.out)
    assert r.code == 0 and [row["engine"] for row in rows] == ["torch", "fused-float"] * 2
    for a, b in zip(rows[::2], rows[1::2]):  # the same directions and bisection on both engines
        assert a["eps_random"] == pytest.approx(b["eps_random"], rel=1e-9)
        assert a["eps_joint_random"] == pytest.approx(b["eps_joint_random"], rel=1e-9)
    r = run_cli("margin", EXAMPLES / "full_adder.circ", "--engines", "fused")
    assert r.code == 2 and "torch or fused-float" in r.err
