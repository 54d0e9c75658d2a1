"""What a person reads from the command line (issue 36): option help that says what a flag
does, help grouped by backend, no abbreviated flags, close flags suggested for a typo."""

from __future__ import annotations

import json
import re

import pytest

import tm2nn
from tests.conftest import EXAMPLES
from tests.core.cli.test_interrupt import LOOP
from tm2nn.options import fields_of

VERBS = ("run", "compile", "info", "verify", "margin", "learn", "viz")


def _option_help(text: str, flag: str, group: str) -> str:
    """The help of ``flag`` in the help section titled ``group ...`` of ``text``, one line."""
    section = re.search(rf"^{re.escape(group)} options \(.*?(?=^\S|\Z)", text, re.S | re.M).group(0)
    m = re.search(rf"^  {re.escape(flag)}\b(.*?)(?=^  -|\Z)", section, re.S | re.M)
    return " ".join(m.group(1).split())


def test_every_negated_flag_says_it_turns_the_option_off(run_cli):
    negated = [(b.name, f) for b in tm2nn.backends.all() for f in fields_of(b.Options)
               if f.kind is bool and f.default is True]
    assert {f.flag for _, f in negated} >= {"--no-corrections", "--no-shared-history"}
    out = run_cli("verify", "--help").out
    for backend, f in negated:
        text = _option_help(out, f.flag, backend)
        assert text.startswith("turn off (on by default): "), (backend, f.flag, text)
    assert "one key/value cache shared" in _option_help(out, "--no-shared-history", "transformer")
    # a flag that turns something on keeps the positive text
    assert _option_help(out, "--pm-one", "relu-circuit").startswith("the final map z -> 2z-1")


@pytest.mark.parametrize("verb", VERBS)
def test_backend_options_are_grouped_and_one_backend_can_be_asked_for(run_cli, verb):
    full = run_cli(verb, "--help")
    assert full.code == 0 and "backend options (each takes" not in full.out
    titles = re.findall(r"^(\S+) options \(", full.out, re.M)
    assert len(titles) >= 2 and set(titles) <= set(tm2nn.backends.names()), titles
    one = run_cli(verb, "--backend", titles[-1], "--help")
    assert one.code == 0
    assert re.findall(r"^(\S+) options \(", one.out, re.M) == [titles[-1]]
    assert len(one.out.splitlines()) < len(full.out.splitlines())
    assert "--backend NAME --help" in full.out


def test_each_backend_group_shows_that_backends_help(run_cli):
    out = run_cli("compile", "--help").out
    assert "unrolling" in _option_help(out, "--steps", "relu-circuit")
    assert "decoder runs T source steps" in _option_help(out, "--steps", "transformer")
    assert "unrolling" not in _option_help(out, "--steps", "transformer")


def test_an_abbreviated_flag_is_refused_with_the_flag_it_abbreviates(run_cli):
    r = run_cli("run", EXAMPLES / "bb3.tm", "--max-step", "25")
    assert r.code == 2 and "did you mean --max-steps?" in r.err and "'tm2nn run --help'" in r.err
    r = run_cli("verify", EXAMPLES / "bb3.tm", "--backend", "transformer", "--ste", "4")
    assert r.code == 2 and "--ste" in r.err


def test_a_misspelt_flag_gets_the_close_flag_and_the_verbs_help(run_cli):
    r = run_cli("compile", EXAMPLES / "bb3.tm", "--backend", "transformer", "--stpes", "25", "-o", "x.onnx")
    assert r.code == 2 and r.err.count("\n") == 1
    assert "unrecognized arguments: --stpes 25; did you mean --steps?" in r.err
    assert "(see 'tm2nn compile --help')" in r.err
    r = run_cli("verify", EXAMPLES / "bb3.tm", "--json", "--zzzz")
    assert r.code == 2 and "did you mean" not in r.err and "'tm2nn verify --help'" in r.err


#: never halts: the head walks right forever writing 1s (test_interrupt's loop, all ones)
FOREVER = LOOP.replace("B 0 -> 0 R A", "B 0 -> 1 R A")


def test_a_long_tape_is_shown_as_a_window_around_the_head(run_cli, tmp_path):
    src = tmp_path / "forever.tm"
    src.write_text(FOREVER)
    r = run_cli("run", src, "--max-steps", "100000")
    assert r.code == 1 and "did not halt" in r.out
    assert max(len(line) for line in r.out.splitlines()) < 300
    assert "[99,919 cells left out] '" + "1" * 81 + "' (of 100,000; --full-tape prints them all)" in r.out
    js = run_cli("run", src, "--max-steps", "100000", "--json")
    assert json.loads(js.out)["tape"] == "1" * 100000  # --json keeps the whole tape
    full = run_cli("run", src, "--max-steps", "100000", "--full-tape")
    assert full.code == 1 and f"tape  '{'1' * 100000}'  head 100000" in full.out
    short = run_cli("run", EXAMPLES / "bb3.tm")
    assert "tape  '11111'  head 1  sigma 5" in short.out  # a short tape prints whole


def test_tape_window_pieces():
    from tm2nn.console import tape_window

    tape = "".join(str(i % 10) for i in range(1000))
    assert tape_window(tape[:81], 3, 40) == [tape[:81]]
    assert tape_window(tape, 500, 40) == [460, tape[460:541], 459]
    assert tape_window(tape, 0, 40) == [tape[:81], 919]
    assert tape_window(tape, 5000, 40) == [919, tape[919:]]
    assert tape_window(tape, None, 40) == [tape[:40], 920, tape[-40:]]


def test_eval_json_lines_echo_the_input_they_answer(run_cli, tmp_path):
    model = tmp_path / "fa.onnx"
    assert run_cli("compile", EXAMPLES / "full_adder.circ", "-o", model).code == 0
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("000\n011\n111\n")
    r = run_cli("eval", model, "--inputs", inputs, "--input", "110", "--json")
    lines = [json.loads(line) for line in r.out.splitlines()]
    assert r.code == 0 and [(x["input"], x["outputs"]) for x in lines] == [
        ("110", "01"), ("000", "00"), ("011", "01"), ("111", "11")]
    assert list(lines[0]) == ["input", "outputs"]  # the input first, then the run report
    inputs.write_text("011\n")
    r = run_cli("eval", model, "--inputs", inputs, "--json")
    assert json.loads(r.out) == {"input": "011", "outputs": "01"}  # from a file: always echoed
    r = run_cli("eval", model, "--input", "011", "--json")
    assert json.loads(r.out) == {"outputs": "01"}  # one input given: the run report, as run prints it


def test_run_takes_relu_circuit_like_the_other_backends(run_cli):
    want = json.loads(run_cli("run", EXAMPLES / "bb3.tm", "--json").out)
    r = run_cli("run", EXAMPLES / "bb3.tm", "--backend", "relu-circuit", "--json")
    assert r.code == 0 and json.loads(r.out) == want, r.err
    r = run_cli("run", EXAMPLES / "bb3.tm", "--backend", "relu-circuit", "--max-steps", "10", "--json")
    assert r.code == 1 and json.loads(r.out) == json.loads(
        run_cli("run", EXAMPLES / "bb3.tm", "--max-steps", "10", "--json").out)
    # a circuit compiles as it is; an input longer than the default window widens it
    r = run_cli("run", EXAMPLES / "full_adder.circ", "--backend", "relu-circuit", "--input", "101", "--json")
    assert r.code == 0 and json.loads(r.out) == {"outputs": "01"}
    tape = "1011011011"
    r = run_cli("run", EXAMPLES / "binary_increment.tm", "--backend", "relu-circuit", "--input", tape,
                "--max-steps", "5", "--json")
    assert r.code == 1 and json.loads(r.out) == json.loads(
        run_cli("run", EXAMPLES / "binary_increment.tm", "--input", tape, "--max-steps", "5", "--json").out)
    assert "runs machines: relu-circuit, transformer" in " ".join(run_cli("run", "--help").out.split())


def test_help_says_where_the_examples_are(run_cli):
    from tm2nn.console import examples_dir

    assert (examples_dir() / "bb3.tm").is_file()
    out = " ".join(run_cli("--help").out.split())
    assert f"examples: {examples_dir()}" in out
