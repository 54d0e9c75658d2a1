"""The basis pass: only AND/OR (2 inputs), NOT, BUF and constants; same function; bounded depth."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from tests.conftest import CORPUS, example_circuits
from tests.strategies import circuits
from tm2nn import load
from tm2nn.interp import eval_circuit, random_inputs, truth_table
from tm2nn.ir import Circuit, Gate
from tm2nn.passes.basis import BASIS, depth_cost, is_basis, to_basis


def signal_depths(c: Circuit) -> dict[str, int]:
    d = {x: 0 for x in c.inputs}
    for g in c.topo:
        d[g.name] = 1 + max((d[i] for i in g.inputs), default=0)
    return d


def depth_bounds(c: Circuit) -> dict[str, int]:
    """The documented bound: per gate, deepest input bound + depth_cost(op, fan-in)."""
    b = {x: 0 for x in c.inputs}
    for g in c.topo:
        b[g.name] = depth_cost(g.op, len(g.inputs)) + max((b[i] for i in g.inputs), default=0)
    return b


def check_lowering(c: Circuit) -> Circuit:
    low = to_basis(c)
    assert is_basis(low)
    for g in low.gates:
        assert g.op in BASIS
        if g.op in ("AND", "OR"):
            assert len(g.inputs) == 2
    assert low.inputs == c.inputs and low.outputs == c.outputs and low.name == c.name
    # every source signal is still driven under its own name
    assert {g.name for g in c.gates} <= {g.name for g in low.gates}
    # depth bound (per signal, hence per output)
    dl, bound = signal_depths(low), depth_bounds(c)
    for s in bound:
        assert dl[s] <= bound[s], (s, dl[s], bound[s])
    # negations are shared: at most one added NOT per signal
    negated = [g.inputs[0] for g in low.gates if g.op == "NOT" and g.name not in c.driver]
    assert len(negated) == len(set(negated))
    return low


@settings(max_examples=300, deadline=None)
@given(circuits())
def test_random_circuits_lower_to_the_basis_with_the_same_truth_table(c):
    low = check_lowering(c)
    assert (truth_table(low) == truth_table(c)).all()


@settings(max_examples=100, deadline=None)
@given(circuits(max_inputs=5, max_gates=12, ops=["XOR", "XNOR", "NOT", "NAND", "NOR"]))
def test_parity_heavy_circuits(c):
    low = check_lowering(c)
    assert (truth_table(low) == truth_table(c)).all()


def test_already_in_basis_is_unchanged():
    c = Circuit("c", ("a", "b"), ("o", "n"), (
        Gate("o", "AND", ("a", "b")), Gate("n", "NOT", ("o",)), Gate("k", "CONST1", ())))
    low = to_basis(c)
    assert low == c


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17])
@pytest.mark.parametrize("op", ["AND", "OR", "NAND", "NOR", "XOR", "XNOR"])
def test_wide_gates_are_balanced_trees(op, k):
    xs = tuple(f"x{i}" for i in range(k))
    c = Circuit("w", xs, ("y",), (Gate("y", op, xs),))
    low = check_lowering(c)
    log = (k - 1).bit_length()
    if op in ("AND", "OR"):
        assert low.depth == max(1, log) and len(low.gates) == max(1, k - 1)
    elif op in ("NAND", "NOR"):
        assert low.depth == (1 if k == 1 else log + 1) and len(low.gates) == k
    elif k == 1:
        assert low.depth == 1 and len(low.gates) == 1
    else:  # XOR/XNOR: 3 gates per 2-input XOR, one NOT per negated signal
        assert low.depth <= 3 * log
        assert sum(g.op != "NOT" for g in low.gates) == 3 * (k - 1)
    if k <= 12:
        assert (truth_table(low) == truth_table(c)).all()


def test_xnor_uses_the_dual_form_and_shares_negations():
    c = Circuit("x", ("a", "b"), ("p", "q", "r"), (
        Gate("p", "XOR", ("a", "b")), Gate("q", "XNOR", ("a", "b")), Gate("r", "XOR", ("b", "a"))))
    low = check_lowering(c)
    nots = [g for g in low.gates if g.op == "NOT"]
    assert len(nots) == 2  # one per input, shared by all three
    assert low.depth == 3
    assert (truth_table(low) == truth_table(c)).all()


def test_existing_not_gates_are_reused_as_negations():
    c = Circuit("x", ("a", "b"), ("p", "na"), (
        Gate("na", "NOT", ("a",)), Gate("nand", "NAND", ("a", "b")),
        Gate("p", "XOR", ("a", "nand"))))
    low = check_lowering(c)
    # ¬a is the source's "na"; ¬nand is the tree under the NAND: no NOT added
    assert sum(g.op == "NOT" for g in low.gates) == 2
    assert (truth_table(low) == truth_table(c)).all()


def test_fresh_names_skip_names_in_use():
    c = Circuit("x", ("a", "b%1", "c"), ("y%1", "y"), (
        Gate("y%1", "BUF", ("a",)), Gate("y", "AND", ("a", "b%1", "c", "y%1")),
        Gate("z", "XOR", ("a", "b%1"))))
    low = check_lowering(c)
    names = [g.name for g in low.gates]
    assert len(names) == len(set(names))
    assert (truth_table(low) == truth_table(c)).all()


def test_outputs_that_are_inputs_or_constants():
    c = Circuit("x", ("a",), ("a", "k", "a"), (Gate("k", "CONST0", ()),))
    low = check_lowering(c)
    assert (truth_table(low) == truth_table(c)).all()


@pytest.mark.parametrize("path", example_circuits(), ids=lambda p: p.stem)
def test_example_circuits(path):
    c = load(path)
    low = check_lowering(c)
    x = random_inputs(len(c.inputs), 2000, seed=7) if len(c.inputs) > 12 else None
    if x is None:
        assert (truth_table(low) == truth_table(c)).all()
    else:
        assert np.array_equal(eval_circuit(low, x), eval_circuit(c, x))


ISCAS = CORPUS / "circuits" / "iscas85"


@pytest.mark.parametrize("name", ["c432", "c6288", "c1355", "c17"])
def test_iscas85(name):
    path = Path(ISCAS / f"{name}.bench")
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    c = load(path)
    low = check_lowering(c)
    x = random_inputs(len(c.inputs), 2000, seed=2024)
    assert np.array_equal(eval_circuit(low, x), eval_circuit(c, x))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["multiplier", "voter"])
def test_epfl_large_circuits_are_lowered_quickly(name):
    import time

    path = CORPUS / "circuits" / "epfl" / f"{name}.aig"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    c = load(path)
    t = time.perf_counter()
    low = to_basis(c)
    assert time.perf_counter() - t < 10
    assert is_basis(low)
    x = random_inputs(len(c.inputs), 256, seed=1)
    assert np.array_equal(eval_circuit(low, x), eval_circuit(c, x))
