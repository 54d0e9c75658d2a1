"""Stay-move removal: the lowered machine has no S moves and simulates the source step by step."""

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.strategies import machines, tape_inputs
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import configurations, run_machine
from tm2nn.ir import Machine, Rule
from tm2nn.ir.machine import validate_machine
from tm2nn.passes.stay import remove_stays, source_configurations, source_step_map

SOURCE_STEPS = 60


@st.composite
def stay_machines(draw, grid: bool | None = False):
    """A random machine (some halting states, either convention) with at least one S rule."""
    m = draw(machines(grid=grid))
    assume(m.rules)
    flags = draw(st.lists(st.booleans(), min_size=len(m.rules), max_size=len(m.rules)))
    flags[0] = True
    return m.replace(rules=tuple(replace(r, move="S") if f else r for r, f in zip(m.rules, flags)))


def snapshot(result):
    return [(s, h, dict(c)) for _, s, h, c in configurations(result)]


def small() -> Machine:
    """q0 reads 0, writes 1, stays into q1; q1 reads 1 and steps right into accept."""
    return Machine("small", ("0", "1"), "0", ("q0", "q1", "h"), "q0", {"h": "accept"}, (
        Rule("q0", "0", "1", "S", "q1"), Rule("q1", "1", "1", "R", "h")))


def test_machine_without_stays_is_returned_as_is():
    m = small().replace(rules=(Rule("q0", "0", "1", "R", "q1"), Rule("q1", "0", "1", "L", "h")))
    low = remove_stays(m)
    assert low.machine is m and low.source is m
    assert low.aux == ()
    assert low.lowered_steps(7) == 7
    assert not low.is_aux_index().any()
    assert list(source_step_map(low, ["q1", "h"])) == [1, 2]


def test_small_machine_by_hand():
    low = remove_stays(small())
    assert low.aux == ("q1~S",)
    assert low.machine.states == ("q0", "q1", "h", "q1~S")
    assert list(low.is_aux_index()) == [False, False, False, True]
    src = run_machine(small(), "0", trace=True)
    lr = run_machine(low.machine, "0", trace=True)
    assert (src.steps, lr.steps) == (2, 3)
    names = [low.machine.states[i] for i in lr.trace.state]
    assert names == ["q1~S", "q1", "h"]
    assert list(source_step_map(low, lr.trace.state)) == [0, 1, 2]
    assert list(source_step_map(low, names)) == [0, 1, 2]
    assert len(source_step_map(low, [])) == 0
    confs = [(k, s, h, dict(c)) for k, s, h, c in source_configurations(low, configurations(lr))]
    assert confs == [(k, *c) for k, c in enumerate(snapshot(src))]
    assert (lr.outcome, lr.head, lr.cells) == (src.outcome, src.head, src.cells) == (
        "accept", 1, {0: "1"})


@settings(max_examples=300, deadline=None)
@given(stay_machines(grid=None))
def test_lowered_machine_has_no_stays_and_validates(m):
    low = remove_stays(m)
    lm = low.machine
    validate_machine(lm)
    assert type(lm) is type(m)
    assert all(r.move != "S" for r in lm.rules)
    assert (lm.alphabet, lm.blank, lm.start, lm.halting, lm.missing_rule_counts_step) == (
        m.alphabet, m.blank, m.start, m.halting, m.missing_rule_counts_step)
    targets = {r.next for r in m.rules if r.move == "S"}
    assert len(low.aux) == len(targets) and set(low.targets) == targets
    assert lm.states == m.states + low.aux
    assert not set(low.aux) & set(m.states) and not set(low.aux) & set(lm.halting)
    assert list(low.is_aux_index()) == [q in low.aux for q in lm.states]
    assert low.lowered_steps(5) == 10
    for a, t in zip(low.aux, low.targets):  # aux: every symbol, written back, left, to t
        assert {(lm.delta[(a, c)].write, lm.delta[(a, c)].move, lm.delta[(a, c)].next)
                for c in lm.alphabet} == {(c, "L", t) for c in lm.alphabet}
    aux_of = dict(zip(low.targets, low.aux))
    for r in m.rules:  # source rules kept (S -> R into the aux), with their loc
        new = lm.delta[(r.state, r.read)]
        assert new.loc is r.loc and new.write == r.write
        assert (new.move, new.next) == (("R", aux_of[r.next]) if r.move == "S" else (r.move, r.next))
    assert len(lm.rules) == len(m.rules) + len(low.aux) * len(m.alphabet)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_lowered_machine_simulates_source(data):
    m = data.draw(stay_machines(grid=None))
    inp = data.draw(tape_inputs(m))
    low = remove_stays(m)
    src = run_machine(m, inp, SOURCE_STEPS, trace=True)
    lr = run_machine(low.machine, inp, low.lowered_steps(SOURCE_STEPS), trace=True)
    smap = source_step_map(low, lr.trace.state)
    assert len(smap) == lr.steps
    done = int(smap[-1]) if len(smap) else 0
    # The lowered configuration equals the source one at the first lowered step that
    # completes k source steps (the step after it, if any, is mid-way in an aux state).
    first = {0: 0}
    for j, k in enumerate(smap, start=1):
        first.setdefault(int(k), j)
    src_confs, low_confs = snapshot(src), snapshot(lr)
    for k in range(min(src.steps, done) + 1):
        assert low_confs[first[k]] == src_confs[k], k
    aux = set(low.aux)
    mapped = [(k, s, h, dict(c)) for k, s, h, c in source_configurations(low, configurations(lr))]
    n = min(len(mapped), len(src_confs))
    assert [c[1:] for c in mapped[:n]] == src_confs[:n]
    if src.halted:
        assert lr.halted and done == src.steps
        assert (lr.state, lr.outcome, lr.head, lr.cells, lr.sigma) == (
            src.state, src.outcome, src.head, src.cells, src.sigma)
    else:  # the source was cut off; the lowered run got at least as far
        assert done >= SOURCE_STEPS
        if lr.halted:
            assert lr.state not in aux


def test_aux_names_avoid_existing_states():
    # "a~S" is a state already, and the aux of "a~" would be "a~~S", which the aux of "a" took.
    m = Machine("clash", ("0", "1"), "0", ("a", "a~S", "a~", "h"), "a", {"h": "halt"}, (
        Rule("a", "0", "1", "S", "a"),
        Rule("a", "1", "0", "S", "a~"),
        Rule("a~", "0", "1", "S", "a~S"),
        Rule("a~", "1", "1", "R", "h"),
        Rule("a~S", "1", "1", "S", "a~"),
    ))
    low = remove_stays(m)
    assert low.aux == ("a~~S", "a~~~S", "a~S~S")
    assert low.targets == ("a", "a~", "a~S")
    assert len(set(low.machine.states)) == len(low.machine.states) == 7
    src = run_machine(m, "", 100)
    lr = run_machine(low.machine, "", low.lowered_steps(100))
    assert src.halted and lr.halted and src.steps == 5 and lr.steps == 9
    assert (lr.state, lr.head, lr.cells) == (src.state, src.head, src.cells)


@settings(max_examples=100, deadline=None)
@given(stay_machines(grid=None))
def test_json_round_trip(m):
    low = remove_stays(m)
    d = json.loads(json.dumps(low.to_json()))
    back = type(low).from_json(d, m)
    assert back.aux == low.aux and back.targets == low.targets
    assert back.machine == low.machine and back.source is m
    plain = m.replace(rules=tuple(r for r in m.rules if r.move != "S"))
    with pytest.raises(Tm2nnError):
        type(low).from_json(d, plain)
    none = remove_stays(plain)
    assert type(none).from_json(json.loads(json.dumps(none.to_json())), plain).machine is plain


def test_is_aux_index_dtype():
    assert remove_stays(small()).is_aux_index().dtype == np.bool_
