"""The reference interpreters: scalar and batched machine runs, traces, circuit evaluation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import circuits, machines
from tm2nn.errors import Tm2nnError
from tm2nn.interp import (
    configurations,
    eval_circuit,
    eval_gate_by_gate,
    exhaustive_inputs,
    random_inputs,
    run_batch,
    run_machine,
    truth_table,
)
from tm2nn.ir import Circuit, Gate, GridMachine, Machine, Rule


def bb(spec: str) -> Machine:
    """A small std-text reader for tests (the real importer is tested separately)."""
    rows = spec.split("_")
    k = len(rows[0]) // 3
    names = [chr(65 + i) for i in range(len(rows))]
    rules, halts = [], set()
    for i, r in enumerate(rows):
        for a in range(k):
            w, mv, nx = r[3 * a : 3 * a + 3]
            if nx not in names:
                halts.add(nx)
            rules.append(Rule(names[i], str(a), w, mv, nx))
    return Machine("bb", tuple(str(a) for a in range(k)), "0", tuple(names) + tuple(sorted(halts)),
                   "A", {h: "halt" for h in halts}, tuple(rules))


BB3 = "1RB1RZ_1LB0RC_1LC1LA"
BB4 = "1RB1LB_1LA0LC_1RZ1LD_1RD0RA"


def test_busy_beavers_step_counts_and_sigma():
    r3 = run_machine(bb(BB3))
    assert (r3.halted, r3.steps, r3.sigma, r3.state) == (True, 21, 5, "Z")
    r4 = run_machine(bb(BB4))
    assert (r4.halted, r4.steps, r4.sigma) == (True, 107, 13)
    assert r4.report() == {"halted": True, "steps": 107, "state": "Z", "outcome": "halt",
                           "tape": "10111111111111", "head": -9, "sigma": 13}


def test_not_halting_within_max_steps():
    r = run_machine(bb(BB4), max_steps=50)
    assert not r.halted and r.steps == 50 and r.outcome is None


def test_tape_grows_on_both_sides():
    # Walks left 3000 cells writing 1s, then right 6000: both growth paths run.
    m = Machine("walk", ("0", "1"), "0", ("L", "R", "H"), "L", {"H": "halt"}, (
        Rule("L", "0", "1", "L", "L"),
    ))
    r = run_machine(m, max_steps=3000)
    assert r.sigma == 3000 and r.head == -3000 and not r.halted
    m2 = Machine("walkr", ("0", "1"), "0", ("R",), "R", {}, (Rule("R", "0", "1", "R", "R"),))
    r2 = run_machine(m2, max_steps=6000)
    assert r2.sigma == 6000 and r2.head == 6000 and r2.tape == "1" * 6000


def test_missing_rule_convention():
    rules = (Rule("a", "x", "y", "R", "b"),)
    m = Machine("m", ("_", "x", "y"), "_", ("a", "b"), "a", {}, rules)
    r = run_machine(m, "x")
    assert (r.halted, r.steps, r.state, r.outcome) == (True, 1, "b", "halt")
    r2 = run_machine(m.replace(missing_rule_counts_step=True), "x")
    assert (r2.halted, r2.steps, r2.state) == (True, 2, "b")


def test_outcomes_of_halting_states():
    m = Machine("acc", ("_", "1"), "_", ("s", "yes", "no"), "s", {"yes": "accept", "no": "reject"}, (
        Rule("s", "1", "1", "R", "yes"), Rule("s", "_", "_", "S", "no")))
    assert run_machine(m, "1").outcome == "accept"
    assert run_machine(m, "").outcome == "reject"


def test_start_in_halting_state_takes_no_step():
    m = Machine("h", ("_",), "_", ("h",), "h", {"h": "accept"}, ())
    r = run_machine(m, "")
    assert r.halted and r.steps == 0 and r.outcome == "accept"


def test_bad_input_symbol_is_a_located_error():
    with pytest.raises(Tm2nnError) as e:
        run_machine(bb(BB3), "0120")
    assert e.value.col == 3 and "'2'" in e.value.message
    assert "^" in e.value.render()


def test_grid_machine_moves_in_two_dimensions():
    # Writes 1 at (0,0), moves down, writes 1 at (1,0), moves right, writes 1, halts.
    m = GridMachine("g", ("_", "1"), "_", ("a", "b", "c", "h"), "a", {"h": "halt"}, (
        Rule("a", "_", "1", "D", "b"), Rule("b", "_", "1", "R", "c"), Rule("c", "_", "1", "S", "h")))
    r = run_machine(m, "")
    assert r.report()["tape"] == "1_/11" and r.head == (1, 1) and r.steps == 3
    r2 = run_machine(m, "/_1")  # two input rows: row 1 has a 1 at column 1
    assert r2.state == "c" and r2.halted  # (1,1) holds 1: no rule for (c, 1)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_batch_runner_agrees_with_scalar(data):
    m = data.draw(machines(grid=False))
    xs = data.draw(st.lists(st.text(alphabet=st.sampled_from(m.alphabet), max_size=6), min_size=1, max_size=5))
    steps = data.draw(st.integers(0, 60))
    batch = run_batch(m, xs, steps)
    for x, rb in zip(xs, batch):
        rs = run_machine(m, x, steps)
        assert rb.report() == rs.report()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_trace_replays_to_the_final_configuration(data):
    m = data.draw(machines())
    x = data.draw(st.text(alphabet=st.sampled_from(m.alphabet), max_size=6))
    if isinstance(m, GridMachine) and "/" in m.alphabet:
        x = x.replace("/", "")
    r = run_machine(m, x, 80, trace=True)
    assert len(r.trace) == r.steps
    last = None
    for step, state, head, cells in configurations(r):
        last = (step, state, head, dict(cells))
    assert last == (r.steps, r.state, r.head, r.cells)


def test_trace_agrees_with_step_by_step_runs():
    m = bb(BB4)
    full = run_machine(m, trace=True)
    for k, (step, state, head, cells) in enumerate(configurations(full)):
        part = run_machine(m, max_steps=k)
        assert (part.steps, part.state, part.head, part.cells) == (step, state, head, cells)


# -- circuits ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(circuits(), st.integers(1, 200), st.integers(0, 2**32 - 1))
def test_bit_parallel_matches_gate_by_gate(c, n, seed):
    x = random_inputs(len(c.inputs), n, seed)
    got = eval_circuit(c, x)
    want = np.array([eval_gate_by_gate(c, row) for row in x], dtype=bool)
    assert got.shape == (n, len(c.outputs))
    assert (got == want).all()


def test_truth_table_of_xor_and_constants():
    c = Circuit("c", ("a", "b"), ("x", "one", "zero", "a"), (
        Gate("x", "XOR", ("a", "b")), Gate("one", "CONST1", ()), Gate("zero", "CONST0", ())))
    tt = truth_table(c).astype(int).tolist()
    assert tt == [[0, 1, 0, 0], [1, 1, 0, 1], [1, 1, 0, 0], [0, 1, 0, 1]]
    assert (exhaustive_inputs(2).astype(int) == [[0, 0], [1, 0], [0, 1], [1, 1]]).all()


def test_wide_truth_table_uses_many_words():
    n = 10
    c = Circuit("par", tuple(f"x{i}" for i in range(n)), ("p", "a"), (
        Gate("p", "XOR", tuple(f"x{i}" for i in range(n))), Gate("a", "AND", tuple(f"x{i}" for i in range(n)))))
    tt = truth_table(c)
    xs = exhaustive_inputs(n)
    assert (tt[:, 0] == (xs.sum(1) % 2 == 1)).all()
    assert tt[:, 1].sum() == 1 and tt[-1, 1]
