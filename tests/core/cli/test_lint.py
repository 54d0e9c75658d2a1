"""``tm2nn check``'s diagnostics (tm2nn.lint): likely mistakes per format, the documented
header against a run, and carets on arrow typos in the tm language."""

from __future__ import annotations

from pathlib import Path

import pytest

from tm2nn.errors import Tm2nnError
from tm2nn.lint import Diagnostic, check_header, check_report, lint

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
CORPUS = ROOT.parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not (CORPUS / "tm").is_dir(), reason="../shared/corpus is absent")


def write(tmp_path, name: str, text: str) -> str:
    f = tmp_path / name
    f.write_text(text)
    return str(f)


def report(tmp_path, name: str, text: str, **kw):
    return check_report(write(tmp_path, name, text), **kw)


def only(diags, severity: str) -> Diagnostic:
    assert len(diags) == 1, [d.render() for d in diags]
    (d,) = diags
    assert d.severity == severity, d.render()
    return d


def parse_error(tmp_path, name: str, text: str) -> Tm2nnError:
    with pytest.raises(Tm2nnError) as info:
        report(tmp_path, name, text)
    return info.value


def caret_col(rendered: str) -> int:
    """The 1-based column the caret line points at."""
    return rendered.splitlines()[2].index("^") - 4 + 1


TM = """machine m {{
  alphabet: 0 1 _
  start: {start}
  halt: done
  start 0 -> 1 R start
  start _ -> _ S {target}
}}
"""


# -- the diagnostic itself -------------------------------------------------------------------


def test_render_matches_tm2nn_error_layout():
    d = Diagnostic("error", "boom", "f.tm", 3, 5, "  abc def", ("note: x",))
    assert d.render() == Tm2nnError("boom", file="f.tm", line=3, col=5, snippet="  abc def",
                                    notes=("note: x",)).render()
    w = Diagnostic("warning", "hm", "f.tm", 3, 5, "  abc def")
    assert w.render().splitlines() == ["f.tm:3:5: warning: hm", "      abc def", "        ^"]
    assert d.to_error().render() == d.render()


# -- 1. a start state with no rules that is not halting ---------------------------------------


def test_tm_start_typo_is_an_error_at_start(tmp_path):
    items, diags = report(tmp_path, "m.tm", TM.format(start="strat", target="done"))
    d = only(diags, "error")
    assert (d.line, d.col) == (3, 10)
    assert "'strat' has no rules" in d.message and "step 0" in d.message
    assert "did you mean 'start'?" in d.message
    assert d.render().startswith(f"{tmp_path / 'm.tm'}:3:10: error: ")
    assert caret_col(d.render()) == 10
    assert items[0].start == "strat"  # it parses: only `check` complains


def test_tm_start_declared_halting_or_with_rules_is_fine(tmp_path):
    _, diags = report(tmp_path, "m.tm", TM.format(start="start", target="done"))
    assert diags == []
    _, diags = report(tmp_path, "h.tm", "machine m {\n  start: done\n  halt: done\n}\n")
    assert diags == []


def test_tm_start_without_rules_is_an_error_with_a_states_list_too(tmp_path):
    text = "machine m {\n  states: s t\n  start: t\n  halt: h\n  s 0 -> 1 R h\n}\n"
    d = only(report(tmp_path, "m.tm", text)[1], "error")
    assert (d.line, d.col) == (3, 10) and any("halt: t" in n for n in d.notes)


def test_morphett_without_a_rule_for_state_0_is_an_error(tmp_path):
    text = "; starts in the wrong state\nstart 0 1 r start\nstart _ _ * halt\n"
    d = only(report(tmp_path, "p.morphett", text)[1], "error")
    assert (d.line, d.col) == (2, 1) and "state '0'" in d.message
    assert any("rename 'start' to 0" in n for n in d.notes)
    # a '*' state rule applies to state 0 as well
    _, diags = report(tmp_path, "w.morphett", "* 0 1 r x\nx _ _ * halt\n")
    assert diags == []


def test_std_row_a_without_transitions(tmp_path):
    # nothing else in the machine: the format's way to halt at once -> a warning
    d = only(report(tmp_path, "a.std", "------\n")[1], "warning")
    assert (d.line, d.col) == (1, 1) and "row A" in d.message
    # other rows that can never be reached -> an error
    d = only(report(tmp_path, "b.std", "------_1RZ1LA\n")[1], "error")
    assert "none of its rules is ever used" in d.message


TMIO = """blank: ' '
start state: {start}
table:
  right:
    1: R
    ' ': {{L: done}}
  done:
"""


def test_tmio_start_state_without_instructions(tmp_path):
    d = only(report(tmp_path, "m.yaml", TMIO.format(start="done"))[1], "error")
    assert (d.line, d.col) == (2, 14) and "'done' has no instructions" in d.message
    trivial = "blank: ' '\nstart state: stop\ntable:\n  stop:\n"
    d = only(report(tmp_path, "t.yaml", trivial)[1], "warning")
    assert (d.line, d.col) == (2, 14)
    _, diags = report(tmp_path, "ok.yaml", TMIO.format(start="right"))
    assert diags == []  # 'done' has no entry: that is how turingmachine.io halts


# -- 2. a rule into an undeclared state ---------------------------------------------------------


def test_tm_target_with_no_rules_and_not_halting_is_a_warning_at_the_target(tmp_path):
    d = only(report(tmp_path, "m.tm", TM.format(start="start", target="dnoe"))[1], "warning")
    assert (d.line, d.col) == (6, 18) and "'dnoe'" in d.message and "did you mean 'done'?" in d.message
    assert caret_col(d.render()) == 18


def test_tm_target_not_in_states_list_is_a_parse_error(tmp_path):
    text = "machine m {\n  states: s h\n  start: s\n  halt: h\n  s 0 -> 1 R hh\n}\n"
    e = parse_error(tmp_path, "m.tm", text)
    assert (e.line, e.col) == (5, 14) and "unknown state 'hh'" in e.message
    # declared in the list: the author said it exists, no warning
    text = "machine m {\n  states: s h x\n  start: s\n  halt: h\n  s 0 -> 1 R x\n}\n"
    assert report(tmp_path, "n.tm", text)[1] == []


def test_morphett_target_with_no_rules_is_a_warning(tmp_path):
    d = only(report(tmp_path, "p.morphett", "0 0 1 r 0\n0 _ _ * hlat ; typo\n")[1], "warning")
    assert (d.line, d.col) == (2, 9) and "did you mean 'halt'?" in d.message
    assert report(tmp_path, "q.morphett", "0 0 1 r 0\n0 _ _ * halt-accept\n")[1] == []


def test_tmio_undeclared_target_is_a_parse_error(tmp_path):
    e = parse_error(tmp_path, "m.yaml", TMIO.format(start="right").replace("{L: done}", "{L: dnoe}"))
    assert (e.line, e.col) == (6, 14) and "undeclared state 'dnoe'" in e.message


def test_std_letter_past_the_rows_is_a_halting_state(tmp_path):
    items, diags = report(tmp_path, "m.std", "1RB1RC_1LA1LB\n")
    assert diags == [] and items[0].halting == {"C": "halt"}


# -- 3. a write outside the alphabet ------------------------------------------------------------


def test_tm_write_outside_declared_alphabet_is_a_parse_error(tmp_path):
    e = parse_error(tmp_path, "m.tm", TM.format(start="start", target="done").replace("-> 1 R", "-> 2 R"))
    assert (e.line, e.col) == (5, 14) and "symbol '2' is not in the alphabet" in e.message


def test_std_write_outside_alphabet_is_a_parse_error(tmp_path):
    e = parse_error(tmp_path, "m.std", "2RB1RZ_1LA1LB\n")
    assert (e.line, e.col) == (1, 1) and "bad write symbol '2'" in e.message


@pytest.mark.parametrize("name, text", [
    ("m.tm", "machine m {\n  start: s\n  halt: h\n  s 0 -> 2 R h\n}\n"),
    ("m.morphett", "0 0 2 r halt\n"),
    ("m.yaml", "blank: '0'\nstart state: s\ntable:\n  s:\n    0: {write: 2, R: h}\n  h:\n"),
])
def test_inferred_alphabets_take_the_written_symbol(tmp_path, name, text):
    items, diags = report(tmp_path, name, text)
    assert diags == [] and "2" in items[0].alphabet


# -- 4. the documented header ---------------------------------------------------------------------


INC = (EXAMPLES / "binary_increment.tm").read_text()


def test_header_that_matches_gives_nothing():
    for f in sorted(EXAMPLES.iterdir()):
        if f.suffix in (".tm", ".circ"):
            items, diags = check_report(str(f), all_items=True)
            assert [d for d in diags if d.severity == "error"] == [], [d.render() for d in diags]


def test_header_output_and_outcome_mismatch_are_errors_at_their_lines(tmp_path):
    text = INC.replace("# output: 1100", "# output: 1101").replace("# outcome: halt", "# outcome: accept")
    _, diags = report(tmp_path, "inc.tm", text)
    out, outcome = diags
    assert out.severity == outcome.severity == "error"
    assert (out.line, out.col) == (9, 11) and "'1100'" in out.message and "'1101'" in out.message
    assert (outcome.line, outcome.col) == (10, 12) and "'halt'" in outcome.message and "'accept'" in outcome.message


def test_header_bad_input_is_an_error_at_the_symbol(tmp_path):
    d = only(report(tmp_path, "inc.tm", INC.replace("# input: 1011", "# input: 10x1"))[1], "error")
    assert (d.line, d.col) == (8, 12) and "'x'" in d.message


def test_header_circuit_mismatch(tmp_path):
    text = (EXAMPLES / "full_adder.circ").read_text().replace("# output: 01", "# output: 10")
    d = only(report(tmp_path, "fa.circ", text)[1], "error")
    assert d.snippet == "# output: 10" and "'01'" in d.message and "'10'" in d.message


def test_header_run_that_does_not_halt_is_a_warning(tmp_path):
    text = "# input: ''\n# output: 1\nmachine loop {\n  alphabet: 1 _\n  start: s\n  s _ -> _ R s\n}\n"
    f = write(tmp_path, "loop.tm", text)
    items, _ = check_report(f)
    d = only(check_header(f, items[0], max_steps=1000), "warning")
    assert (d.line, d.col) == (2, 11) and "did not halt within 1,000 steps" in d.message


def test_header_without_result_or_with_prose_is_not_run(tmp_path):
    assert report(tmp_path, "loop.tm", "# input: 1\nmachine m {\n  start: s\n  s * -> * R s\n}\n")[1] == []
    prose = "; Input: two numbers in binary, eg '101 1101'\n; Output: their product\n0 _ _ * halt\n"
    assert report(tmp_path, "p.morphett", prose)[1] == []


def test_header_parser_is_shared_with_demo():
    from tm2nn.demo import example_header
    from tm2nn.syntax.headers import example_header as moved

    assert example_header is moved
    assert example_header(EXAMPLES / "bb3.tm") == {"input": "", "output": "11111", "outcome": "halt"}


# -- 5. arrow typos in the tm language: the caret is at the typo ------------------------------------


RULE = "machine m {{\n  alphabet: a _ -\n  blank: _\n  start: s\n  halt: h\n  s a -> a R s\n  s _ {arrow} _ S h\n}}\n"


@pytest.mark.parametrize("arrow, col, got", [
    ("=>", 7, "got '=>'"),
    ("-->", 7, "got '-->'"),  # lexes as reading '-' then '->': no longer a silent extra rule
    ("- >", 7, "got '- >'"),
    ("→", 7, "got '→'"),
    ("", 8, "missing '->' before '_'"),
])
def test_arrow_typo_caret(tmp_path, arrow, col, got):
    e = parse_error(tmp_path, "c.tm", RULE.format(arrow=arrow))
    assert (e.line, e.col) == (7, col), e.render()
    assert got in e.message and "STATE SYMBOL... -> WRITE MOVE NEXT" in e.message
    assert caret_col(e.render()) == col


def test_issue_repro_caret_at_the_arrow(tmp_path):
    text = "machine m {\n  alphabet: a _\n  blank: _\n  start: s\n  halt: h\n  s a -> a R s\n  a _ => _ S h\n}\n"
    e = parse_error(tmp_path, "c1.tm", text)
    assert e.render().splitlines()[0] == (
        f"{tmp_path / 'c1.tm'}:7:7: error: expected '->' (a rule reads  STATE SYMBOL... -> WRITE MOVE NEXT), "
        "got '=>'")


def test_spaced_minus_before_the_arrow_still_reads_the_symbol(tmp_path):
    items, _ = report(tmp_path, "ok.tm", RULE.format(arrow="- ->"))
    assert {r.read for r in items[0].rules if r.state == "s"} == {"a", "_", "-"}


# -- no false alarms on real files ------------------------------------------------------------------


@needs_corpus
def test_corpus_machines_give_no_errors():
    tm = CORPUS / "tm"
    files = [(f, "morphett") for f in sorted((tm / "morphett").glob("*.txt"))]
    files += [(f, None) for f in sorted((tm / "turingmachine_io").glob("*.yaml"))]
    files += [(tm / "bb" / "2x2.txt", "std"), (tm / "bb" / "3x2.txt", "std")]
    for f, fmt in files:
        _, diags = check_report(str(f), fmt, all_items=True)
        assert [d for d in diags if d.severity == "error"] == [], (f, [d.render() for d in diags])


def test_lint_of_a_circuit_or_an_unlocated_machine():
    from tm2nn.ir import Machine, Rule
    from tm2nn.syntax import load

    assert lint(load(EXAMPLES / "full_adder.circ")) == []
    m = Machine("m", ("0",), "0", ("a", "b"), "b", {}, (Rule("a", "0", "0", "R", "a"),))
    d = only(lint(m), "warning")  # built in Python: no format, no location
    assert d.line is None and d.render().startswith("tm2nn: warning: start state 'b'")
