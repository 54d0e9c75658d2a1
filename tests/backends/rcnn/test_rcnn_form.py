"""The RCNN machine form (Goel et al., B.1.2) and cell encoding (B.1.1): every pass,
run in the interpreter, agrees with its source machine once mapped back; the normal
form halts with only the answer on the tape; the base-3 code round-trips exactly."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CORPUS, EXAMPLES
from tests.strategies import machines, row_machines, tape_inputs
from tm2nn.backends.rcnn.encoding import (
    COMPUTE,
    MAX_DIGITS_INT64,
    MEMORIZE,
    UNKNOWN,
    cell_code,
    configs_from_grids,
    decode,
    encode,
    from_value,
    grids_from_configs,
    pack,
    state_digits,
    to_value,
    unpack,
)
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import configurations, run_machine
from tm2nn.ir import GridMachine, Machine, Rule
from tm2nn.ir.machine import validate_machine
from tm2nn.passes.binarise import binarise, block_code
from tm2nn.passes.grid_normal_form import ANSWER, ANSWER_VALUE, normal_form
from tm2nn.passes.line_to_grid import line_to_grid
from tm2nn.passes.lowering import Chain, result_from_configurations
from tm2nn.passes.rcnn_form import rcnn_form_from_json, to_rcnn_form
from tm2nn.syntax import load, load_all

STEPS = 60
#: Source step budgets for the random tests: short ones cut runs off at every point.
BUDGETS = st.integers(0, 12) | st.just(STEPS)


def snapshot(result) -> list:
    return [(q, h, dict(c)) for _k, q, h, c in configurations(result)]


def check_lowering(low, m, inp: str, steps: int = STEPS):
    """Run source and lowered machine; the mapped-back run must equal the source run
    (trace included), and the lowered configuration at ``step_map[k]`` must map to
    source configuration k.  Returns (source run, lowered run)."""
    src = run_machine(m, inp, steps, trace=True)
    lx = low.lower_input(inp)
    assert low.source_input(lx) == inp
    lr = run_machine(low.machine, lx, low.lowered_steps(steps, len(inp)), trace=True)
    back = low.source_result(lr, steps)
    assert back == src
    assert back.report() == src.report()
    marks = low.step_map(lr)
    low_confs = snapshot(lr)
    src_confs = snapshot(src)
    assert len(marks) >= src.steps + 1
    for k in range(src.steps + 1):
        assert low.source_config(*low_confs[marks[k]]) == src_confs[k], k
    return src, lr


# ---------------------------------------------------------------------------------------
# line -> grid
# ---------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_line_to_grid_simulates_source(data):
    m = data.draw(machines(grid=False))
    low = line_to_grid(m)
    g = low.machine
    assert isinstance(g, GridMachine) and g.rules == m.rules and g.states == m.states
    src, lr = check_lowering(low, m, data.draw(tape_inputs(m)), data.draw(BUDGETS))
    assert lr.steps == src.steps and list(low.step_map(lr)) == list(range(src.steps + 1))
    assert all(r == 0 for r, _c in lr.cells)


def test_line_to_grid_refuses_grid_machines_and_bad_input():
    g = GridMachine("g", ("0", "1"), "0", ("a",), "a", {}, ())
    with pytest.raises(Tm2nnError, match="already runs on a grid"):
        line_to_grid(g)
    m = Machine("m", ("0", "1"), "0", ("a",), "a", {}, ())
    with pytest.raises(Tm2nnError) as e:
        line_to_grid(m).lower_input("01x")
    assert e.value.col == 3


# ---------------------------------------------------------------------------------------
# binarisation
# ---------------------------------------------------------------------------------------
def test_block_code_by_hand():
    m = Machine("m", ("0", "1"), "0", ("a",), "a", {}, ())
    assert block_code(m) == {"0": "-", "1": "+"}
    m3 = Machine("m", ("1", "0", "2"), "0", ("a",), "a", {}, ())
    assert block_code(m3) == {"0": "--", "1": "-+", "2": "+-"}
    m5 = Machine("m", tuple("abcde"), "c", ("a",), "a", {}, ())
    code = block_code(m5)
    assert code["c"] == "---" and code["e"] == "+--" and len(set(code.values())) == 5
    one = Machine("m", ("_",), "_", ("a",), "a", {}, ())
    assert block_code(one) == {"_": "-"}


@pytest.mark.parametrize("code, match", [
    ({"0": "-"}, "no word for symbol '1'"),
    ({"0": "-", "1": "+", "2": "-"}, "not a symbol"),
    ({"0": "-", "1": "++"}, "one width"),
    ({"0": "-", "1": "_"}, "consist of"),
    ({"0": "+", "1": "+"}, "same code word"),
])
def test_bad_codes_are_refused(code, match):
    m = Machine("m", ("0", "1"), "0", ("a",), "a", {}, ())
    with pytest.raises(Tm2nnError, match=match):
        binarise(m, code)


@st.composite
def codes(draw, m):
    """A random block code for ``m``: distinct sign words, of the least width or wider."""
    least = max(1, (len(m.alphabet) - 1).bit_length())
    w = draw(st.integers(least, least + 1))
    words = draw(st.lists(st.text("-+", min_size=w, max_size=w), min_size=len(m.alphabet),
                          max_size=len(m.alphabet), unique=True))
    return dict(zip(m.alphabet, words))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_binarised_machine_simulates_source(data):
    m = data.draw(machines(grid=None, max_symbols=5))
    code = data.draw(st.none() | codes(m))
    low = binarise(m, code)
    lm = low.machine
    validate_machine(lm)
    assert type(lm) is type(m)
    assert lm.alphabet == ("_", "-", "+") and lm.blank == "_"
    assert all(r.write != "_" for r in lm.rules)  # never writes the blank
    assert lm.states[:len(m.states)] == m.states and lm.halting == m.halting
    assert lm.start == m.start and lm.missing_rule_counts_step == m.missing_rule_counts_step
    if code is None:
        assert low.width == max(1, (len(m.alphabet) - 1).bit_length())
        assert low.code == block_code(m)
    else:
        assert low.code == code and low.width == len(code[m.blank])
    if low.width == 1:  # a renaming: one lowered step per source step
        assert len(lm.states) == len(m.states)
    inp = data.draw(tape_inputs(m))
    if isinstance(m, GridMachine) and data.draw(st.booleans()):
        inp = inp + "/" + data.draw(tape_inputs(m))
    lx = low.lower_input(inp)
    assert "_" not in lx and len(lx.replace("/", "")) == low.width * len(inp.replace("/", ""))
    check_lowering(low, m, inp, data.draw(BUDGETS))


def test_binarise_by_hand_three_symbols():
    # writes 2 moving left into a fresh block, then halts on a missing rule there
    m = Machine("m", ("0", "1", "2"), "0", ("a", "b"), "a", {}, (
        Rule("a", "1", "2", "L", "b"),), missing_rule_counts_step=True)
    low = binarise(m)
    assert low.width == 2 and low.lower_input("1") == "-+"
    lr = run_machine(low.machine, "-+", 100, trace=True)
    # read 2 cells (the second read writes the last letter of 2's code), write the first
    # letter and step left, walk 1 more to the left block; read the fresh block (2), walk
    # back (1) into b~x and halt on its missing rule (+1 counted)
    assert lr.halted and lr.state == "b~x" and lr.steps == 2 + 1 + 1 + 2 + 1
    assert lr.cells == {-2: "-", -1: "-", 0: "+", 1: "-"} and lr.head == -2
    back = low.source_result(lr)
    assert (back.steps, back.state, back.head, back.cells, back.outcome) == (2, "b", -1, {0: "2"}, "halt")
    assert back == run_machine(m, "1", trace=True)
    assert low.source_config("b~x", -2, lr.cells) == ("b", -1, {0: "2"})
    assert low.source_config("b~-", -1, lr.cells) is None


def test_binarise_step_bound_is_tight_for_left_moves():
    # every step moves left onto a fresh block: 3w - 2 lowered steps each
    m = Machine("m", ("0", "1", "2", "3", "4"), "0", ("a",), "a", {}, (
        Rule("a", "0", "4", "L", "a"),))
    low = binarise(m)
    assert low.width == 3
    for n in range(6):
        src = run_machine(m, "", n, trace=True)
        lr = run_machine(low.machine, "", low.lowered_steps(n), trace=True)
        assert low.source_result(lr, n) == src and lr.steps == 7 * n
        if n:
            short = run_machine(low.machine, "", low.lowered_steps(n) - 1, trace=True)
            assert low.source_result(short, n).steps == n - 1


@pytest.mark.parametrize("counts", [False, True])
def test_cut_off_at_every_step(counts):
    # halts on a missing rule after 3 steps, or in the accepting state on input "2"
    m = Machine("m", ("0", "1", "2"), "0", ("a", "b", "c", "y"), "a", {"y": "accept"}, (
        Rule("a", "0", "1", "R", "b"), Rule("a", "2", "2", "S", "y"),
        Rule("b", "0", "2", "L", "c"), Rule("c", "1", "1", "R", "b"),
        Rule("b", "2", "1", "R", "c")), missing_rule_counts_step=counts)
    lowerings = [binarise(m), line_to_grid(m), to_rcnn_form(m)]
    for inp in ["", "2", "1"]:
        full = run_machine(m, inp)
        assert full.halted
        for n in range(full.steps + 3):
            for low in lowerings:
                check_lowering(low, m, inp, n)


def test_binarise_keeps_grid_moves():
    g = load(EXAMPLES / "grid_copy_down.tm")
    low = binarise(g)
    assert low.width == 2
    for inp in ["1101", "", "0", "10/01"]:
        check_lowering(low, g, inp, steps=200)


def test_binarise_refuses_bad_input():
    low = binarise(Machine("m", ("0", "1"), "0", ("a",), "a", {}, ()))
    with pytest.raises(Tm2nnError) as e:
        low.lower_input("012")
    assert e.value.col == 3 and e.value.file == "input"


# ---------------------------------------------------------------------------------------
# the normal form
# ---------------------------------------------------------------------------------------
def cleanup_steps(g) -> int:
    """The cleanup's length, worked out by hand from the source's final configuration
    ``g`` (a run of the normal form's source machine): see grid_normal_form's docstring."""
    cols = sorted(c for _r, c in g.cells)
    c = g.head[1]
    if not cols:
        return 7
    lo, hi = cols[0], cols[-1]
    assert cols == list(range(lo, hi + 1)) and lo <= 0 and lo - 1 <= c <= hi + 1
    if c == lo - 1:
        return 8 + 2 * hi - 3 * lo
    if c == hi + 1:
        return 8 + hi - 2 * lo
    return 7 + 2 * hi - c - 2 * lo


def check_normal_form_final(low, lr, src):
    """The B.1.2 halt: only the answer, in the top-left cell, and the head there."""
    if src.halted:  # (a source run cut off may halt later, in the lowered run's budget)
        assert lr.halted
        v = src.outcome
        assert lr.state == low.final[v] and lr.outcome == v
        assert lr.cells == ({(0, 0): ANSWER[v]} if ANSWER[v] != "_" else {})
        assert lr.head == (0, 0)
        assert low.answer(lr) == ANSWER_VALUE[v]
        g = low.source_result(lr)  # the normal form's own source (binarised, on a grid)
        counted = g.state not in g.machine.halting and g.machine.missing_rule_counts_step
        real = g.steps - counted
        assert lr.steps == 3 + real + cleanup_steps(g)
        assert lr.steps <= low.lowered_steps(g.steps, len(lr.input))
    if not lr.halted:
        assert low.answer(lr) is None


def check_first_step_is_a_no_op(lr):
    t = lr.trace
    if len(t):
        assert (t.pos_row[0], t.pos[0], t.head_row[0], t.head[0]) == (0, 0, 0, 0)
        assert t.read[0] == t.write[0]


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_normal_form_simulates_source_and_halts_in_form(data):
    g = data.draw(row_machines())
    low = normal_form(g)
    validate_machine(low.machine)
    assert low.machine.states[:len(g.states)] == g.states
    assert set(low.machine.halting) == set(low.final.values())
    inp = "".join(data.draw(st.lists(st.sampled_from("-+"), max_size=8)))
    src, lr = check_lowering(low, g, inp, data.draw(BUDGETS))
    check_first_step_is_a_no_op(lr)
    check_normal_form_final(low, lr, src)


def test_normal_form_by_hand():
    # accepts at once: no-op, mark, then the cleanup of the input "+-"
    g = GridMachine("g", ("_", "-", "+"), "_", ("a", "yes"), "a", {"yes": "accept"}, (
        Rule("a", "+", "+", "R", "yes"),))
    low = normal_form(g)
    lr = run_machine(low.machine, "+-", 100, trace=True)
    names = [low.machine.states[i] for i in lr.trace.state]
    assert names[:4] == ["nf~down", "nf~mark", "a", "yes"]
    assert names[-3:] == ["nf~find~accept", "nf~answer~accept", "nf~accept"]
    assert lr.cells == {(0, 0): "+"} and lr.head == (0, 0) and lr.outcome == "accept"
    # 3 preamble + 1 source + right over "-" + back over "+-" + left end + find + answer
    assert lr.steps == 3 + 1 + 2 + 3 + 2 + 1
    assert list(low.step_map(lr)) == [3, 4]
    back = low.source_result(lr)
    assert (back.steps, back.state, back.cells) == (1, "yes", {(0, 0): "+", (0, 1): "-"})


def test_normal_form_cut_off_in_preamble_or_cleanup():
    g = GridMachine("g", ("_", "-", "+"), "_", ("a", "h"), "a", {"h": "reject"}, (
        Rule("a", "+", "-", "R", "h"),))
    low = normal_form(g)
    for n in range(0, 3):  # inside the preamble: source config 0, not halted
        back = low.source_result(run_machine(low.machine, "+", n, trace=True))
        assert (back.steps, back.halted, back.state) == (0, False, "a")
    for n in range(4, 12):  # inside the cleanup: the source has halted
        back = low.source_result(run_machine(low.machine, "+", n, trace=True))
        assert (back.steps, back.halted, back.outcome, back.cells) == (1, True, "reject", {(0, 0): "-"})
    hs = GridMachine("g", ("_", "-", "+"), "_", ("h",), "h", {"h": "accept"}, ())
    back = normal_form(hs).source_result(run_machine(normal_form(hs).machine, "", 1, trace=True))
    assert back.halted and back.steps == 0  # a halting start state halts at once


@pytest.mark.parametrize("g, match", [
    (Machine("g", ("_", "-", "+"), "_", ("a",), "a", {}, ()), "grid machines"),
    (GridMachine("g", ("_", "0", "+"), "_", ("a",), "a", {}, ()), "symbols"),
    (GridMachine("g", ("-", "+"), "-", ("a",), "a", {}, ()), "symbols"),
    (GridMachine("g", ("_", "-", "+"), "_", ("a",), "a", {}, (Rule("a", "+", "+", "U", "a"),)), "moves U"),
    (GridMachine("g", ("_", "-", "+"), "_", ("a",), "a", {}, (Rule("a", "+", "_", "R", "a"),)), "writes the blank"),
])
def test_normal_form_refuses(g, match):
    with pytest.raises(Tm2nnError, match=match):
        normal_form(g)


def test_normal_form_refuses_bad_inputs():
    low = normal_form(GridMachine("g", ("_", "-", "+"), "_", ("a",), "a", {}, ()))
    for text, col in [("+_-", 2), ("+/-", 2), ("+x", 2)]:
        with pytest.raises(Tm2nnError) as e:
            low.lower_input(text)
        assert e.value.col == col and e.value.file == "input"


# ---------------------------------------------------------------------------------------
# the whole chain
# ---------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_rcnn_form_simulates_source(data):
    m = data.draw(machines(grid=False, max_symbols=5))
    ch = to_rcnn_form(m)
    assert isinstance(ch, Chain) and ch.source is m and isinstance(ch.machine, GridMachine)
    assert [type(s).__name__ for s in ch.steps] == ["BinaryLowering", "GridLowering",
                                                    "NormalFormLowering"]
    cell_code(ch.machine)  # the lowered machine has a B.1.1 cell code
    inp = data.draw(tape_inputs(m))
    src, lr = check_lowering(ch, m, inp, data.draw(BUDGETS))
    check_first_step_is_a_no_op(lr)
    check_normal_form_final(ch.steps[-1], lr, src)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_lowered_columns_bound_the_lowered_run(data):
    """``Chain.lowered_columns`` is sound: up to the lowered step that represents source
    step N (and to the halt, if the source halted), the lowered head and every non-blank
    cell stay in the bound of the source's span ``[-N, max(N, n - 1)]``."""
    from tm2nn.backends.rcnn.window import source_columns

    m = data.draw(machines(grid=False, max_symbols=5))
    inp = data.draw(tape_inputs(m))
    n_steps = data.draw(st.integers(0, 12))
    ch = to_rcnn_form(m)
    lo, hi = ch.lowered_columns(*source_columns(n_steps, len(inp)))
    low = ch.lower_input(inp)
    lr = run_machine(ch.machine, low, ch.lowered_steps(n_steps, len(inp)), trace=True)
    marks = ch.step_map(lr)
    src = run_machine(m, inp, n_steps)
    upto = lr.steps if src.halted else int(marks[min(n_steps, len(marks) - 1)])
    seen = 0
    for k, _q, head, cells in configurations(lr):
        if k > upto:
            break
        cols = [head[1], *(c for (_r, c) in cells)]
        assert lo <= min(cols) and max(cols) <= hi, (k, head, lo, hi)
        seen += 1
    assert seen == upto + 1


@settings(max_examples=50, deadline=None)
@given(machines(grid=False, max_symbols=5))
def test_rcnn_form_json_round_trip(m):
    ch = to_rcnn_form(m)
    d = json.loads(json.dumps(ch.to_json()))
    back = rcnn_form_from_json(d, m)
    assert back.machine == ch.machine and back.to_json() == d
    with pytest.raises(Tm2nnError, match="no word for symbol"):
        rcnn_form_from_json(d, m.replace(alphabet=m.alphabet + ("~",)))
    with pytest.raises(Tm2nnError, match="does not match"):  # a grid machine: no line_to_grid
        rcnn_form_from_json(d, line_to_grid(m).machine)
    with pytest.raises(Tm2nnError, match="expected a list"):
        rcnn_form_from_json({"passes": []}, m)


def test_rcnn_form_of_grid_machines():
    g = GridMachine("g", ("0", "1"), "0", ("a", "h"), "a", {"h": "accept"}, (
        Rule("a", "1", "1", "R", "a"), Rule("a", "0", "1", "L", "h")))
    ch = to_rcnn_form(g)
    assert len(ch.steps) == 2
    src, lr = check_lowering(ch, g, "111")
    check_normal_form_final(ch.steps[-1], lr, src)
    with pytest.raises(Tm2nnError, match="keeps to one row") as e:
        to_rcnn_form(load(EXAMPLES / "grid_copy_down.tm"))
    assert e.value.line is not None  # points at the rule in the file


def test_chain_checks_its_links():
    m = Machine("m", ("0", "1"), "0", ("a",), "a", {}, ())
    with pytest.raises(ValueError):
        Chain((binarise(m), line_to_grid(m)))
    with pytest.raises(ValueError):
        Chain(())


def test_mapping_needs_a_trace_and_the_right_machine():
    m = load(EXAMPLES / "bb3.tm")
    ch = to_rcnn_form(m)
    with pytest.raises(ValueError, match="trace"):
        ch.source_result(run_machine(ch.machine, "", 100))
    with pytest.raises(ValueError, match="not of this lowering"):
        ch.steps[-1].source_result(run_machine(m, "", 100, trace=True))


LINE_EXAMPLES = [p for p in sorted(EXAMPLES.glob("*.tm")) if not isinstance(load(p), GridMachine)]


def example_inputs(path, m, n: int = 12) -> list[str]:
    given = [line.split(":", 1)[1].strip() for line in path.read_text().splitlines()
             if line.startswith("# input:")]
    given = ["" if g == "''" else g for g in given]
    rng = random.Random(path.stem)
    return given + [""] + ["".join(rng.choice(m.alphabet) for _ in range(rng.randint(1, 6)))
                           for _ in range(n)]


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_examples(path):
    m = load(path)
    ch = to_rcnn_form(m)
    for inp in example_inputs(path, m):
        src, lr = check_lowering(ch, m, inp, steps=400)
        check_normal_form_final(ch.steps[-1], lr, src)


def corpus_champion(stem: str):
    from tm2nn.syntax import std

    path = CORPUS / "tm" / "bb" / f"{stem}.txt"
    if not path.exists():
        pytest.skip("../shared/corpus is absent")
    rows = [r for r in map(std.parse_corpus_line, path.read_text().splitlines()) if r]
    ms = load_all(path, "std")
    return max(((m, int(f[1]), int(f[2])) for m, (_t, f) in zip(ms, rows)), key=lambda r: r[1])


@pytest.mark.parametrize("stem", ["2x2", "3x2", "4x2", "2x3"])
def test_busy_beaver_champions(stem):
    m, steps, sigma = corpus_champion(stem)
    ch = to_rcnn_form(m)
    lr = run_machine(ch.machine, "", ch.lowered_steps(steps), trace=True)
    assert lr.halted and lr.cells == {} and lr.head == (0, 0) and lr.outcome == "halt"
    back = ch.source_result(lr)
    assert (back.halted, back.steps, back.sigma) == (True, steps, sigma)
    assert back == run_machine(m, "", steps + 1, trace=True)


def test_result_from_configurations_round_trips():
    for path in LINE_EXAMPLES[:3] + [EXAMPLES / "grid_copy_down.tm"]:
        m = load(path)
        for inp in example_inputs(path, m, 3):
            r = run_machine(m, inp, 300, trace=True)
            assert result_from_configurations(m, inp, configurations(r), r.halted) == r


# ---------------------------------------------------------------------------------------
# the B.1.1 cell encoding
# ---------------------------------------------------------------------------------------
def test_state_digits():
    assert [state_digits(s) for s in (1, 2, 3, 4, 5, 6, 9, 10, 2049, 2050)] == [
        1, 1, 1, 2, 2, 3, 3, 4, 11, 12]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 70), st.data())
def test_cell_code_states(s, data):
    start = data.draw(st.integers(0, s - 1))
    states = tuple(f"q{i}" for i in range(s))
    m = GridMachine("m", ("_", "-", "+"), "_", states, states[start], {}, ())
    code = cell_code(m)
    t = code.table
    assert t.shape == (s, state_digits(s)) and code.n_digits == 4 + state_digits(s)
    assert (t[start] == 0).all()  # B.2: the head is placed with state digits 0
    rest = np.delete(t, start, axis=0)
    assert np.isin(rest, (-1, 1)).all()
    assert len({tuple(r) for r in rest}) == s - 1


def test_cell_code_refuses_other_symbols():
    with pytest.raises(Tm2nnError, match="binarise"):
        cell_code(Machine("m", ("0", "1"), "0", ("a",), "a", {}, ()))
    with pytest.raises(Tm2nnError, match="blank"):
        cell_code(Machine("m", ("-", "+"), "-", ("a",), "a", {}, ()))


def test_worked_example():
    """docs/rcnn.md: bb3 in the RCNN form, the head's cell after the preamble."""
    ch = to_rcnn_form(load(EXAMPLES / "bb3.tm"))
    code = cell_code(ch.machine)
    assert code.n_digits == 8 and len(ch.machine.states) == 14  # 13 non-start: 4 digits
    lr = run_machine(ch.machine, "", 4, trace=True)
    conf = snapshot(lr)
    assert [c[0] for c in conf] == ["nf~start", "nf~down", "nf~mark", "A", "B"]
    d = grids_from_configs(code, conf, (0, -1, 2, 3))  # rows 0..1, columns -1..1
    # step 0: the start cell holds the head in the start state (state digits 0)
    assert d[0, 0, 1].tolist() == [0, 0, 1, 1, 0, 0, 0, 0]
    # after step 3: in state A (non-start number 0: - - - -), the marker '+' at (1, 0)
    assert d[3, 0, 1].tolist() == [0, 0, 1, 1, -1, -1, -1, -1]
    assert d[3, 1, 1].tolist() == [0, 1, 1, 0, 0, 0, 0, 0]
    # after step 4: A read a blank, wrote 1 (code '+') and moved right into B (- - - +)
    assert d[4, 0, 1].tolist() == [0, 1, 1, 0, 0, 0, 0, 0]
    assert d[4, 0, 2].tolist() == [0, 0, 1, 1, -1, -1, -1, 1]
    assert d[4, 0, 0].tolist() == [0, 0, 1, 0, 0, 0, 0, 0]  # a blank cell, compute phase
    n = pack(d)
    assert n[4, 0, 1] == 3 ** 6 + 3 ** 5 == 972
    assert n[4, 0, 2] == 3 ** 5 + 3 ** 4 - 3 ** 3 - 3 ** 2 - 3 + 1 == 286
    assert to_value(n[4, 0, 2], 8) == 286 / 3 ** 7
    assert 286 / 3 ** 7 == pytest.approx(1 / 9 + 1 / 27 - 1 / 81 - 1 / 243 - 1 / 729 + 1 / 2187)


@st.composite
def grids(draw):
    s = draw(st.integers(1, 40))
    states = tuple(f"q{i}" for i in range(s))
    m = GridMachine("m", ("_", "-", "+"), "_", states, states[draw(st.integers(0, s - 1))], {}, ())
    code = cell_code(m)
    B, H, W = draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    pad = rng.random((B, H, W)) < 0.2
    sym = np.where(pad, 0, rng.integers(-1, 2, (B, H, W))).astype(np.int8)
    phase = np.where(pad, 0, rng.integers(-1, 2, (B, H, W))).astype(np.int8)
    head = np.stack([rng.integers(0, H, B), rng.integers(0, W, B)], 1)
    head[rng.random(B) < 0.3] = -1
    b = np.nonzero(head[:, 0] >= 0)[0]
    pad[b, head[b, 0], head[b, 1]] = False
    state = rng.integers(0, s, B)
    state[head[:, 0] < 0] = -1
    return code, sym, head, state, phase, pad


@settings(max_examples=200, deadline=None)
@given(grids())
def test_encode_decode_round_trip(args):
    code, sym, head, state, phase, pad = args
    d = encode(code, sym, head, state, phase, pad)
    assert d.dtype == np.int8 and d.shape == sym.shape + (code.n_digits,)
    g = decode(code, d)
    assert (g.sym == sym).all() and (g.phase == phase).all() and (g.pad == pad).all()
    assert (g.head == head).all() and (g.state == state).all()
    assert (d[..., 3].sum((1, 2)) == (head[:, 0] >= 0)).all()
    n = pack(d)
    assert n.dtype == np.int64 and (unpack(n, code.n_digits) == d).all()
    for dt in (np.float32, np.float64):
        v = to_value(n, code.n_digits, dt)
        assert v.dtype == dt and (from_value(v, code.n_digits) == n).all()
        # and the value is the paper's sum of digits times 3^-i
        exact = (d * 3.0 ** -np.arange(code.n_digits)).sum(-1)
        assert np.allclose(v, exact, rtol=0, atol=1e-6 if dt == np.float32 else 1e-15)


def test_phase_per_grid_and_default():
    m = GridMachine("m", ("_", "-", "+"), "_", ("a", "b"), "a", {}, ())
    code = cell_code(m)
    sym = np.zeros((2, 1, 2), dtype=np.int8)
    d = encode(code, sym, [[0, 0], [0, 1]], [0, 1], phase=[MEMORIZE, UNKNOWN])
    assert d[0, ..., 2].tolist() == [[-1, -1]] and d[1, ..., 2].tolist() == [[0, 0]]
    assert (encode(code, sym, [[0, 0], [0, 1]], [0, 1])[..., 2] == COMPUTE).all()


@pytest.mark.parametrize("dtype, limit", [(np.float32, 15), (np.float64, 33)])
def test_value_form_limits(dtype, limit):
    rng = np.random.default_rng(1)
    top = (3 ** limit - 1) // 2
    n = np.concatenate([np.arange(-top, -top + 50_000), np.arange(top - 50_000, top + 1),
                        rng.integers(-top, top + 1, 200_000, dtype=np.int64)])
    assert (from_value(to_value(n, limit, dtype), limit) == n).all()
    with pytest.raises(Tm2nnError, match="cannot be read back"):
        to_value(n, limit + 1, dtype)
    # and one digit more really is ambiguous: two values meet in one float
    top2 = (3 ** (limit + 1) - 1) // 2
    n2 = np.arange(top2 - 2_000_000, top2 + 1, dtype=np.int64)
    v2 = (n2.astype(np.float64) / float(3 ** limit)).astype(dtype)
    assert len(np.unique(v2)) < len(n2)


def test_packed_limits_and_errors():
    d = np.ones((1, MAX_DIGITS_INT64), dtype=np.int8)
    n = pack(d)
    assert n[0] == (3 ** MAX_DIGITS_INT64 - 1) // 2 and (unpack(n, MAX_DIGITS_INT64) == d).all()
    with pytest.raises(Tm2nnError, match="int64"):
        pack(np.ones((1, MAX_DIGITS_INT64 + 1), dtype=np.int8))
    with pytest.raises(Tm2nnError, match="outside"):
        unpack(np.array([14]), 3)
    with pytest.raises(Tm2nnError, match="not a 3-digit"):
        from_value(np.array([0.5 + 1e-9]), 3)
    assert from_value(np.array([1 / 3 + 0.01]), 3, tol=0.2)[0] == 3
    with pytest.raises(Tm2nnError, match="not a 3-digit"):
        from_value(np.array([1 / 3 + 0.05]), 3, tol=0.2)  # 0.45 of the last digit off
    with pytest.raises(Tm2nnError, match="float32 or float64"):
        to_value(np.array([1]), 3, np.float16)


def test_decode_rejects_bad_codes():
    m = GridMachine("m", ("_", "-", "+"), "_", ("a", "b", "c"), "a", {}, ())
    code = cell_code(m)  # 1 state digit: b -> -1, c -> +1
    good = encode(code, np.zeros((1, 2, 2), np.int8), [[0, 0]], [2])
    assert decode(code, good).state.tolist() == [2]
    cases = {
        "two heads": lambda d: d.__setitem__((0, 1, 1, 3), 1),
        "bad digit": lambda d: d.__setitem__((0, 1, 1, 1), 2),
        "padding with content": lambda d: d.__setitem__((0, 1, 1), [1, 1, 0, 0, 0]),
        "state off the head": lambda d: d.__setitem__((0, 1, 0, 4), 1),
        "negative head": lambda d: d.__setitem__((0, 1, 0, 3), -1),
    }
    for spoil in cases.values():
        d = good.copy()
        spoil(d)
        with pytest.raises(Tm2nnError, match="decode"):
            decode(code, d)
    with pytest.raises(Tm2nnError, match="expected digits"):
        decode(code, good[..., :4])
    m4 = GridMachine("m", ("_", "-", "+"), "_", ("a", "b", "c", "d"), "a", {}, ())
    code4 = cell_code(m4)  # 3 others in 2 digits: "+ +" names no state
    d4 = encode(code4, np.zeros((1, 1, 1), np.int8), [[0, 0]], [1])
    d4[0, 0, 0, 4:] = (1, 1)
    with pytest.raises(Tm2nnError, match="name no state"):
        decode(code4, d4)
    d4[0, 0, 0, 4:] = (1, 0)
    with pytest.raises(Tm2nnError, match="partly 0"):
        decode(code4, d4)


def test_encode_rejects_bad_grids():
    m = GridMachine("m", ("_", "-", "+"), "_", ("a", "b"), "a", {}, ())
    code = cell_code(m)
    z = np.zeros((1, 2, 2), np.int8)
    with pytest.raises(Tm2nnError, match="outside"):
        encode(code, z, [[2, 0]], [0])
    with pytest.raises(Tm2nnError, match="-1, 0 or 1"):
        encode(code, z + 2, [[0, 0]], [0])
    with pytest.raises(Tm2nnError, match="out of range"):
        encode(code, z, [[0, 0]], [5])
    with pytest.raises(Tm2nnError, match="padding"):
        encode(code, z, [[0, 0]], [0], pad=np.ones((1, 2, 2), bool))
    with pytest.raises(Tm2nnError, match="batch, rows, cols"):
        encode(code, z[0], [[0, 0]], [0])


@pytest.mark.parametrize("path", LINE_EXAMPLES[:4], ids=lambda p: p.stem)
def test_configurations_through_the_encoding(path):
    """Every configuration of a lowered run survives digits -> packed -> float32 -> back."""
    m = load(path)
    ch = to_rcnn_form(m)
    code = cell_code(ch.machine)
    for inp in example_inputs(path, m, 2):
        lr = run_machine(ch.machine, ch.lower_input(inp), 3000, trace=True)
        confs = snapshot(lr)
        cols = [p[1] for _q, _h, c in confs for p in c] + [h[1] for _q, h, _c in confs]
        window = (0, min(cols), 2, max(cols) - min(cols) + 1)
        d = grids_from_configs(code, confs, window)
        v = to_value(pack(d), code.n_digits, np.float32)
        d2 = unpack(from_value(v, code.n_digits), code.n_digits)
        back = configs_from_grids(code, d2, window)
        assert [(q, h, c) for q, h, c, _p in back] == confs
        assert all((p == COMPUTE).all() for *_x, p in back)


def test_configs_outside_the_window_are_refused():
    m = GridMachine("m", ("_", "-", "+"), "_", ("a",), "a", {}, ())
    code = cell_code(m)
    with pytest.raises(Tm2nnError, match="outside the window"):
        grids_from_configs(code, [("a", (0, 0), {(0, 5): "+"})], (0, 0, 1, 3))
    with pytest.raises(Tm2nnError, match="outside the window"):
        grids_from_configs(code, [("a", (0, 4), {})], (0, 0, 1, 3))
    with pytest.raises(Tm2nnError, match="no B.1.1 code"):
        grids_from_configs(code, [("a", (0, 0), {(0, 1): "x"})], (0, 0, 1, 3))
    with pytest.raises(Tm2nnError, match="not a state"):
        grids_from_configs(code, [("z", (0, 0), {})], (0, 0, 1, 3))
