"""Welper §4.1 machine form: the 2-tape lowering (read-only input tape + work tape)
simulates the source machine step by step, keeps the form's invariants, and refuses
what it cannot take."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CORPUS, EXAMPLES
from tests.strategies import machines, tape_inputs
from tm2nn.api import default_input
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import configurations, run_machine
from tm2nn.interp.multitape import MultiRun, run_multitape
from tm2nn.ir import GridMachine, Machine, Rule
from tm2nn.passes.welper_form import WelperLowering, sign_rules, to_welper_form
from tm2nn.syntax import load, load_all

LINE_EXAMPLES = [p for p in sorted(EXAMPLES.glob("*.tm")) if not isinstance(load(p), GridMachine)]


def bb(text: str, name: str, counts: bool = False, drop_halt: bool = False) -> Machine:
    """A 2-symbol machine in bbchallenge notation (``Z`` halts); ``drop_halt`` leaves the
    rule into ``Z`` out, so the machine halts on the missing rule instead."""
    states = "ABCDE"[: len(text.split("_"))]
    rules = []
    for q, row in zip(states, text.split("_")):
        for a, (w, mv, n) in zip("01", (row[:3], row[3:])):
            if drop_halt and n == "Z":
                continue
            rules.append(Rule(q, a, w, mv, n))
    return Machine(name, ("0", "1"), "0", tuple(states) + ("Z",), "A", {"Z": "halt"},
                   tuple(rules), missing_rule_counts_step=counts)


BB2 = "1RB1LB_1LA1RZ"
BB3 = "1RB1RZ_1LB0RC_1LC1LA"


def tapes(m: Machine, n: int, seed: int = 0, max_len: int = 4) -> list[str]:
    rng = random.Random(seed)
    return [""] + ["".join(rng.choice(m.alphabet) for _ in range(rng.randint(1, max_len)))
                   for _ in range(n)]


def check(m: Machine, x: str, n_src: int, low: WelperLowering | None = None) -> MultiRun:
    """Run the lowered machine for ``lowered_steps(n_src)`` steps; its mapped trace must be
    the source run, config by config, with the same halting and step count; and the
    form's invariants must hold along the way."""
    low = low or to_welper_form(m)
    bound = low.lowered_steps(n_src, len(x))
    run = run_multitape(low.machine, low.lower_input(x), bound)
    tr = low.source_trace(run)
    k = len(tr) - 1
    src = run_machine(m, x, max_steps=max(n_src, k + 1), trace=True)
    confs = [(s, h, dict(c)) for _, s, h, c in configurations(src)]
    assert [c for _, c in tr] == confs[: k + 1]
    marks = [t for t, _ in tr]
    assert marks[0] == low.copy_steps(len(x))
    gaps = [b - a for a, b in zip(marks, marks[1:])]
    stop = run.halted and run.configs[-1].state not in run.machine.halting
    if stop and m.missing_rule_counts_step:  # the counted step that finds no rule
        assert gaps.pop() == 2 * low.width - 2
    assert all(0 < g <= low.steps_per_source_step for g in gaps)
    if run.halted:
        assert src.halted and src.steps == k
        assert run.steps <= low.lowered_steps(src.steps, len(x))
    else:
        assert k >= n_src  # the bound sufficed
        assert not src.halted or src.steps > k
    if src.halted and src.steps <= n_src:
        assert run.halted
    # invariants: ±1 moves, read-only tape fixed, everything inside the window
    cells = [p for c in confs for p in (c[1], *c[2])]  # up to source step k + 1
    lo, hi = min(cells + [0]), max(cells + [0])
    left, tau = low.window(lo, hi, len(x))
    ro0 = run.configs[0].tapes[0]
    for a, b in zip(run.configs, run.configs[1:]):
        assert all(abs(hb - ha) == 1 for ha, hb in zip(a.heads, b.heads))
    for c in run.configs:
        assert c.tapes[0] == ro0
        assert all(left <= h < left + tau for h in c.heads)
        assert all(left <= p < left + tau for t in c.tapes for p in t)
    return run


def test_form_and_state_count():
    for m in (bb(BB2, "bb2"), load(EXAMPLES / "palindrome.tm")):
        low = to_welper_form(m)
        lm = low.machine
        assert lm.tapes == 2 and lm.read_only == {0}
        assert lm.halting == set(m.halting)
        assert all(set(r.move) <= {-1, 1} and r.write[0] == r.read[0] for r in lm.rules)
        w = low.width
        assert len(lm.states) == len(low.stays.machine.states) + 3 * w + 3
        assert low.steps_per_source_step == (max(3 * w - 2, 2 * w) if low.stays.aux else 3 * w - 2)
        assert lm.start in low.copy_states
        assert low.lowered_steps(5, 2) == low.copy_steps(2) + 5 * low.steps_per_source_step + 2 * w - 2


def test_read_only_layout_by_hand():
    low = to_welper_form(bb(BB3, "bb3"))  # w = 1, P = 3: marker, pad, value
    assert low.width == 1 and low.period == 3
    assert low.lower_input("") == (frozenset({-1}), frozenset())
    assert low.lower_input("101") == (frozenset({-1, 0, 2, 3, 6, 8}), frozenset())
    three = Machine("t", ("a", "b", "c"), "a", ("q",), "q", {}, ())  # w = 2: a -- b -+ c +-
    lt = to_welper_form(three)
    assert lt.lower_input("cab")[0] == frozenset({-1, 0, 2, 4, 8, 11})
    assert lt.copy_steps(3) == 7 * 4 + 2


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_the_interpreter_at_every_step(path):
    m = load(path)
    low = to_welper_form(m)
    doc = default_input(path) or ""
    for x in [doc] + tapes(m, 3, seed=len(m.states)):
        check(m, x, 120, low)


@pytest.mark.parametrize("counts", [False, True])
@pytest.mark.parametrize("text,steps,sigma", [(BB2, 6, 4), (BB3, 21, 5)])
def test_busy_beaver_champions_both_conventions(text, steps, sigma, counts):
    m = bb(text, "bb", counts=counts)
    run = check(m, "", steps)
    assert run.halted
    low = to_welper_form(m)
    tr = low.source_trace(run)
    assert len(tr) - 1 == steps and len(tr[-1][1][2]) == sigma
    # the same machine halting on a missing rule instead of entering Z
    gone = bb(text, "bb", counts=counts, drop_halt=True)
    run = check(gone, "", steps)
    assert run.halted and run.configs[-1].state not in run.machine.halting
    assert len(to_welper_form(gone).source_trace(run)) - 1 == steps - (0 if counts else 1)


def corpus_rows(stem: str):
    from tm2nn.syntax import std

    path = CORPUS / "tm" / "bb" / f"{stem}.txt"
    if not path.exists():
        pytest.skip("../shared/corpus is absent")
    rows = [r for r in map(std.parse_corpus_line, path.read_text().splitlines()) if r]
    return [(m, int(f[1])) for m, (_t, f) in zip(load_all(path, "std"), rows)]


def test_corpus_sample():
    rows = corpus_rows("2x2") + random.Random(3).sample(corpus_rows("3x2"), 100)
    for i, (m, steps) in enumerate(rows):
        if i % 2:
            m = m.replace(missing_rule_counts_step=not m.missing_rule_counts_step)
        run = check(m, "", steps)
        assert run.halted


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_machines_match_at_every_step(data):
    m = data.draw(machines(grid=False, max_states=3, max_symbols=4))
    x = data.draw(tape_inputs(m, max_size=4))
    check(m, x, 15)


def test_mid_step_configurations_map_to_none():
    m = load(EXAMPLES / "palindrome.tm")  # w = 2: block operations take several steps
    low = to_welper_form(m)
    run = run_multitape(low.machine, low.lower_input("101"), low.lowered_steps(30, 3))
    mapped = [low.source_config(c) for c in run.configs]
    n_copy = low.copy_steps(3)
    assert all(c is None for c in mapped[:n_copy]) and mapped[n_copy] is not None
    assert sum(c is None for c in mapped[n_copy:]) > 0
    # the trace takes every non-None configuration of a source state, in order
    assert [t for t, _ in low.source_trace(run)] == [
        t for t, c in enumerate(run.configs) if mapped[t] is not None and low.at_boundary(c.state)]


def test_json_roundtrip_and_mismatch():
    m = load(EXAMPLES / "palindrome.tm")
    low = to_welper_form(m)
    again = WelperLowering.from_json(low.to_json(), m)
    assert again.width == low.width and again.machine.states == low.machine.states
    assert len(again.machine.rules) == len(low.machine.rules)
    with pytest.raises(Tm2nnError, match="does not match"):
        WelperLowering.from_json({**low.to_json(), "width": 7}, m)


def test_refusals():
    grid = load(EXAMPLES / "grid_copy_down.tm")
    with pytest.raises(Tm2nnError, match="grid machine"):
        to_welper_form(grid)
    low = to_welper_form(bb(BB3, "bb3"))
    with pytest.raises(Tm2nnError, match="not in the alphabet"):
        low.lower_input("102")
    with pytest.raises(ValueError, match="lo <= 0 <= hi"):
        low.window(1, 3, 0)
    other = to_welper_form(bb(BB2, "bb2"))
    run = run_multitape(other.machine, other.lower_input(""), 10)
    with pytest.raises(ValueError, match="not of this lowering"):
        low.source_trace(run)
    # a run that "halted" in the copy phase is not a source run
    cut = run_multitape(low.machine, low.lower_input("1"), 3)
    with pytest.raises(ValueError, match="mid-step"):
        low.source_trace(MultiRun(cut.machine, cut.configs, True))


def test_blank_and_minus_must_agree():
    ok = Machine("s", ("_", "-", "+"), "_", ("q", "h"), "q", {"h": "halt"}, (
        Rule("q", "_", "+", "R", "h"), Rule("q", "-", "+", "R", "h"), Rule("q", "+", "-", "L", "q")))
    assert sign_rules(ok) == {("q", -1): ("h", 1, 1), ("q", 1): ("q", -1, -1)}
    bad = ok.replace(rules=(Rule("q", "_", "+", "R", "h"), Rule("q", "-", "-", "R", "h")))
    with pytest.raises(Tm2nnError, match="treats '_' and '-' differently"):
        sign_rules(bad)
    half = ok.replace(rules=(Rule("q", "-", "+", "R", "h"),))
    with pytest.raises(Tm2nnError, match="differently"):
        sign_rules(half)
    stay = ok.replace(rules=(Rule("q", "+", "+", "S", "h"),))
    with pytest.raises(Tm2nnError, match="not L or R"):
        sign_rules(stay)
