"""The three machine importers: bbchallenge std text, morphett.info, turingmachine.io YAML.

Corpus tests read ../shared/corpus and skip when it is absent.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import machines
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.ir import Machine, Rule
from tm2nn.source import SourceText
from tm2nn.syntax import morphett, std, tmio

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "corpus"
TM = CORPUS / "tm"
needs_corpus = pytest.mark.skipif(not TM.is_dir(), reason="../shared/corpus is absent")

BB_FILES = ["2x2", "2x3", "2x4", "3x2", "4x2"]
FAST_STEPS = 100_000  # the default run skips the few corpus machines slower than this


def src_of(text: str | bytes, path: str) -> SourceText:
    return SourceText.register(path, text if isinstance(text, bytes) else text.encode("utf-8"))


def parse_one(mod, text: str, path: str) -> Machine:
    (m,) = mod.parse(src_of(text, path))
    return m


def error_of(mod, text: str, path: str) -> Tm2nnError:
    with pytest.raises(Tm2nnError) as info:
        mod.parse(src_of(text, path))
    return info.value


def bb_entries(stem: str):
    """(machine, text, steps, sigma) for every line of a corpus file."""
    src = SourceText.from_file(TM / "bb" / f"{stem}.txt")
    ms = std.parse(src)
    rows = [r for r in map(std.parse_corpus_line, src.text.splitlines()) if r]
    assert len(ms) == len(rows)
    for m, (text, fields) in zip(ms, rows, strict=True):
        assert fields[0] == "Halt"
        yield m, text, int(fields[1]), int(fields[2])


# --------------------------------------------------------------------------------------------
# std


def test_std_basic():
    m = parse_one(std, "1RB1LB_1LA1RZ\n", "bb.std")
    assert m.name == "1RB1LB_1LA1RZ"
    assert m.alphabet == ("0", "1") and m.blank == "0"
    assert m.states == ("A", "B", "Z") and m.start == "A"
    assert m.halting == {"Z": "halt"}
    assert not m.missing_rule_counts_step
    assert all(r.loc is not None and r.loc.line == 1 for r in m.rules)
    assert [r.loc.col for r in m.rules] == [1, 4, 8, 11]
    r = run_machine(m)
    assert (r.halted, r.steps, r.sigma, r.state, r.outcome) == (True, 6, 4, "Z", "halt")


def test_std_undefined_transition_does_not_count():
    m = parse_one(std, "1RB---_1LB1RZ", "u.std")
    assert ("A", "1") not in m.delta
    r = run_machine(m)
    assert (r.halted, r.steps, r.sigma) == (True, 3, 2)


def test_std_several_halting_letters_and_symbols():
    m = parse_one(std, "1RB2LA1RY_2LA2RB1RZ", "h.std")
    assert m.alphabet == ("0", "1", "2")
    assert m.halting == {"Y": "halt", "Z": "halt"}
    assert std.to_std(m) == "1RB2LA1RY_2LA2RB1RZ"
    # a letter beyond the rows (not Z) also halts
    m = parse_one(std, "1RB1RH_1LA0LA", "h2.std")
    assert m.halting == {"H": "halt"}


def test_std_multi_machine_file_names_and_comments():
    text = "# header\n\n1RB1LB_1LA1RZ Halt 6 4\n1RB1RZ_1LB1LA  # comment\n1RB1LB_1LA1RZ\n"
    ms = std.parse(src_of(text, "multi.std"))
    assert [m.name for m in ms] == ["1RB1LB_1LA1RZ", "1RB1RZ_1LB1LA", "1RB1LB_1LA1RZ@5"]
    assert ms[1].rules[0].loc.line == 4
    assert std.parse_corpus_line("1RB1LB_1LA1RZ Halt 6 4") == ("1RB1LB_1LA1RZ", ["Halt", "6", "4"])
    assert std.parse_corpus_line("   # only a comment") is None
    assert std.parse_corpus_line("") is None


@pytest.mark.parametrize(
    "text, line, col, words",
    [
        ("1RB1LB_1LA1R", 1, 13, "row B has 5 characters"),
        ("1RB1XB_1LA1RZ", 1, 5, "bad move 'X'"),
        ("1RB2LB_1LA1RZ", 1, 4, "bad write symbol '2'"),
        ("1RB1Lb_1LA1RZ", 1, 6, "bad state 'b'"),
        ("1RB1L_1LA1RZ", 1, 4, "row A has 5 characters"),
        ("1RB1LB__1LA1RZ", 1, 8, "empty row B"),
        ("1RB1LB_1LA1RZ\n  1RB1LB_1LA1RZ_1R", 2, 19, "row C has 2 characters"),
        ("1RB-LB_1LA1RZ", 1, 4, "'---'"),
        ("1RB" * 11, 1, 31, "at most 10 symbols"),
        ("_".join(["1RA"] * 27), 1, 105, "at most 26 states"),
    ],
)
def test_std_errors(text, line, col, words):
    e = error_of(std, text, "bad.std")
    assert (e.file, e.line, e.col) == ("bad.std", line, col), e.render()
    assert words in e.message
    assert "^" in e.render()


def test_std_dump_conversions_and_refusals():
    m = parse_one(std, "1RB1LB_1LA1RZ", "d.std")
    assert std.dump(m) == "1RB1LB_1LA1RZ\n"
    # renamed states / symbols: start -> A, blank -> 0, halting -> Z
    m2 = Machine(
        name="x", alphabet=("a", "_"), blank="_", states=("q1", "q0", "done"), start="q0",
        halting={"done": "halt"},
        rules=(Rule("q0", "_", "a", "R", "q1"), Rule("q1", "_", "a", "L", "done")),
    )
    assert std.to_std(m2) == "1RB---_1LZ---"
    with pytest.raises(Tm2nnError, match="accept"):
        std.to_std(m2.replace(halting={"done": "accept"}))
    with pytest.raises(Tm2nnError, match="moves 'S'"):
        std.to_std(parse_one(morphett, "0 _ 1 * halt\n", "s.txt").replace(
            missing_rule_counts_step=False))
    with pytest.raises(Tm2nnError, match="no rule applies"):
        std.to_std(parse_one(morphett, "0 _ 1 r halt\n", "c.txt"))


@needs_corpus
@pytest.mark.parametrize("stem", BB_FILES)
def test_std_corpus_runs(stem):
    checked = 0
    for m, text, steps, sigma in bb_entries(stem):
        if steps > FAST_STEPS:
            continue
        r = run_machine(m, "", max_steps=steps + 10)
        assert (r.halted, r.steps, r.sigma) == (True, steps, sigma), text
        assert r.outcome == "halt"
        checked += 1
    assert checked > 0


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("stem", BB_FILES)
def test_std_corpus_runs_slow(stem):
    """The corpus machines the default run skips (BB(2,4) takes ~4 million steps)."""
    for m, text, steps, sigma in bb_entries(stem):
        if steps <= FAST_STEPS:
            continue
        r = run_machine(m, "", max_steps=steps + 10)
        assert (r.halted, r.steps, r.sigma) == (True, steps, sigma), text


@needs_corpus
def test_std_corpus_round_trip():
    n = 0
    for stem in BB_FILES:
        for m, text, _, _ in bb_entries(stem):
            assert std.to_std(m) == text
            assert std.dump(m) == text + "\n"
            n += 1
    assert n == 3360


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(grid=False, conventions=False, max_states=5, max_symbols=4))
def test_std_dump_preserves_runs(m):
    try:
        text = std.to_std(m)
    except Tm2nnError:
        return  # S moves, accept/reject outcomes: std cannot say that
    back = parse_one(std, text, "rt.std")
    assert std.to_std(back) == text
    a, b = run_machine(m, "", max_steps=300), run_machine(back, "", max_steps=300)
    assert (a.halted, a.steps, a.head, a.sigma) == (b.halted, b.steps, b.head, b.sigma)
    assert len(a.tape) == len(b.tape)


# --------------------------------------------------------------------------------------------
# morphett

PAL = TM / "morphett" / "palindrome.txt"


def morphett_file(name: str) -> tuple[Machine, str]:
    src = SourceText.from_file(TM / "morphett" / name)
    (m,) = morphett.parse(src)
    return m, src.text


def test_morphett_wildcards_and_precedence():
    prog = "\n".join([
        "0 a A r 0   ; explicit beats (0,*)",
        "0 * * r 1   ; (0,*) beats (*,a)",
        "* a x * *   ; (*,a): write x, keep state",
        "* * * l halt-reject",
        "1 b B * halt-accept",
    ])
    m = parse_one(morphett, prog, "w.txt")
    d = m.delta
    assert d[("0", "a")].write == "A" and d[("0", "a")].next == "0"
    assert (d[("0", "b")].write, d[("0", "b")].move, d[("0", "b")].next) == ("b", "R", "1")
    assert (d[("1", "a")].write, d[("1", "a")].move, d[("1", "a")].next) == ("x", "S", "1")
    assert (d[("1", "_")].next, d[("1", "_")].move) == ("halt-reject", "L")
    assert d[("1", "b")].next == "halt-accept"
    assert m.halting == {"halt-reject": "reject", "halt-accept": "accept"}
    assert m.alphabet == ("_", "a", "A", "x", "b", "B")
    assert m.missing_rule_counts_step and m.start == "0" and m.name == "w"
    assert d[("0", "a")].loc.line == 1 and d[("1", "a")].loc.line == 3


def test_morphett_missing_rule_counts_a_step():
    m = parse_one(morphett, "0 _ 1 r 1\n", "miss.txt")
    r = run_machine(m)
    assert (r.halted, r.steps, r.state, r.tape) == (True, 2, "1", "1")


def test_morphett_halting_names():
    assert morphett.outcome_of("halt") == "halt"
    assert morphett.outcome_of("HALT-Accept") == "accept"
    assert morphett.outcome_of("halt_reject") == "reject"
    assert morphett.outcome_of("accept") is None
    # rules of halting states never fire: dropped
    m = parse_one(morphett, "0 _ _ r halt\nhalt _ 1 r 0\n", "h.txt")
    assert [r.state for r in m.rules] == ["0"]


def test_morphett_initial_tape_directive():
    text = "0 * * r 0\n; load it: $INITIAL_TAPE: 10 1*01\n"
    assert morphett.initial_tape(text) == "10_101"
    assert morphett.initial_head(text) == 4
    assert morphett.initial_tape("0 * * r 0\n") is None
    assert morphett.initial_tape("0 * * r 0 ;$INITIAL_TAPE:") == ""
    m = parse_one(morphett, text, "t.txt")
    assert set("10_") <= set(m.alphabet)


@pytest.mark.parametrize(
    "text, line, col, words",
    [
        ("0 _ _ x 1", 1, 7, "bad direction 'x'"),
        ("0 ab _ r 1", 1, 3, "single character"),
        ("0 _ bc r 1", 1, 5, "single character"),
        ("; c\n0 _ _ r   ; no state", 2, 8, "missing <new state>"),
        ("0", 1, 2, "missing <current symbol>"),
        ("0 _ _ r 1 2", 1, 11, "too many fields"),
        ("0 _ _ r 1 ! x", 1, 13, "too many fields"),
        ("0 _ _ r 1\n\n  0 _ 1 l 2", 3, 3, "two rules for state '0' reading '_'"),
    ],
)
def test_morphett_errors(text, line, col, words):
    e = error_of(morphett, text, "bad.txt")
    assert (e.file, e.line, e.col) == ("bad.txt", line, col), e.render()
    assert words in e.message


def test_morphett_breakpoint_and_case():
    m = parse_one(morphett, "0 _ 1 R 1 !\n1 _ 1 L halt\n", "b.txt")
    assert [r.move for r in m.rules] == ["R", "L"]


@needs_corpus
def test_morphett_corpus_parses():
    files = sorted((TM / "morphett").glob("*.txt"))
    assert len(files) == 13
    for f in files:
        (m,) = morphett.parse(SourceText.from_file(f))
        assert m.name == f.stem and m.missing_rule_counts_step


@needs_corpus
def test_morphett_palindrome_known_result():
    m, text = morphett_file("palindrome.txt")
    assert morphett.initial_tape(text) == "1001001"
    r = run_machine(m, "1001001")
    assert (r.halted, r.steps, r.state, r.outcome) == (True, 38, "halt-accept", "accept")
    r = run_machine(m, "10")
    assert (r.state, r.outcome) == ("halt-reject", "reject")


@needs_corpus
@pytest.mark.parametrize(
    "name, tape, expect_tape, state",
    [
        ("binaryadd.txt", "100_1110", "10010", "halt"),  # the file's example '100 1110'
        ("binaryadd.txt", None, "1100001", "halt"),  # 110110 + 101011 = 97
        ("binarymult.txt", "101_1101", "1000001", "halt"),  # 5 * 13 = 65
        ("bin2dec.txt", None, "22", "halt"),  # 10110 = 22
        ("reversepolishboolean.txt", "11&", "1", "halt"),
        ("reversepolishboolean.txt", "01~1|&", "0", "halt"),
        ("primetest.txt", None, "101_is_prime!", "halt"),
        ("parentheses.txt", None, ":)", "halt-accept"),
        ("universal.txt", None, "[_L+,0R.,1R.:1L+,1L+,0L.:,0L.,1L.!]_1100", "halt"),  # 1011 + 1
    ],
)
def test_morphett_documented_examples(name, tape, expect_tape, state):
    m, text = morphett_file(name)
    if tape is None:
        tape = morphett.initial_tape(text)
    r = run_machine(m, tape, max_steps=100_000)
    assert r.halted and r.state == state
    assert r.tape.strip("_") == expect_tape


@needs_corpus
def test_morphett_busy_beaver_and_turing_sequence():
    m, text = morphett_file("4statebeaver.txt")
    r = run_machine(m, morphett.initial_tape(text))
    # BB(4) takes 107 steps and leaves 13 ones; the program spends one step entering 'a'
    assert (r.steps, r.sigma, r.tape.count("1")) == (108, 13, 13)
    m, _ = morphett_file("turingsequence.txt")
    assert not run_machine(m, "", max_steps=5000).halted


# --------------------------------------------------------------------------------------------
# turingmachine.io


INCREMENT = """\
name: inc
source code: |
  input: '1011'
  blank: ' '
  start state: right
  table:
    right:
      [1,0]: R
      ' '  : {L: carry}
    carry:
      1      : {write: 0, L}
      [0,' ']: {write: 1, L: done}
    done:
"""


def test_tmio_inline_increment():
    m = parse_one(tmio, INCREMENT, "inc.yaml")
    assert m.name == "inc" and m.blank == " " and m.start == "right"
    assert m.states == ("right", "carry", "done") and m.halting == {}
    assert not m.missing_rule_counts_step
    assert m.delta[("right", "1")].loc.line == 8 and m.delta[("right", "1")].loc.col == 7
    assert m.delta[("carry", " ")].loc.line == 12
    assert tmio.default_input(INCREMENT) == "1011"
    r = run_machine(m, "1011")
    assert (r.halted, r.steps, r.tape, r.state, r.outcome) == (True, 8, "1100", "done", "halt")


def test_tmio_top_level_spec_and_forms():
    text = """\
blank: 0
start state: a
synonyms:
  stop: {R: h}
table:
  a: {0: {write: 1, R: b}, 1: L, 2: stop}
  b:
    0,1: {write: '2', N: a}
    '.': {L}
    [y, ',', z]: L
    x: {write: y, R: }
  h: {}
"""
    m = parse_one(tmio, text, "top.yaml")
    assert m.name == "top" and m.blank == "0"
    d = m.delta
    assert (d[("a", "0")].write, d[("a", "0")].move, d[("a", "0")].next) == ("1", "R", "b")
    assert (d[("a", "1")].write, d[("a", "1")].move, d[("a", "1")].next) == ("1", "L", "a")
    assert (d[("a", "2")].move, d[("a", "2")].next) == ("R", "h")
    assert (d[("b", "0")].write, d[("b", "0")].move) == ("2", "S")
    assert (d[("b", "1")].write, d[("b", "1")].next) == ("2", "a")
    assert (d[("b", ",")].write, d[("b", ",")].move, d[("b", ",")].next) == (",", "L", "b")
    assert (d[("b", "x")].write, d[("b", "x")].next) == ("y", "b")
    assert d[("b", "y")].move == d[("b", "z")].move == "L"
    assert len([r for r in m.rules if r.read == ","]) == 1
    assert tmio.default_input(text) is None


@pytest.mark.parametrize(
    "text, line, col, words",
    [
        ("blank: ' '\nstart state: a\ntable: {a: [}\n", 3, 13, "YAML error"),
        ("blank: ' '\nstart state: a\ntable:\n  a: {0: {R: b}}\n", 4, 14, "undeclared state 'b'"),
        ("start state: a\ntable:\n  a:\n", 1, 1, "missing 'blank'"),
        ("blank: '  '\nstart state: a\ntable: {a: }\n", 1, 8, "single character"),
        ("blank: ' '\nstart state: z\ntable: {a: }\n", 2, 14, "start state 'z'"),
        ("blank: ' '\nstart state: a\ntable:\n  a:\n    10: R\n", 5, 5, "symbol '10'"),
        ("blank: ' '\nstart state: a\ntable:\n  a:\n    1: {write: 10, R}\n", 5, 16, "write"),
        ("blank: ' '\nstart state: a\ntable:\n  a:\n    1: {R, L}\n", 5, 12, "conflicting"),
        ("blank: ' '\nstart state: a\ntable:\n  a:\n    1: {go: a}\n", 5, 9, "unknown key 'go'"),
        ("blank: ' '\nstart state: a\ntable:\n  a:\n    1: X\n", 5, 8, "unknown instruction 'X'"),
        ("blank: ' '\nstart state: a\ntable:\n  a:\n    1:\n", 5, 7, "missing instruction"),
        ("blank: ' '\nstart state: a\ntable:\n  a:\n    1: R\n    '1': L\n", 6, 5, "duplicate key"),
        ("blank: ' '\nstart state: a\ntable:\n  a:\n    [0,1]: R\n    1: L\n", 6, 5,
         "two instructions for symbol '1'"),
        ("blank: ' '\nstart state: a\ntable: [a]\n", 3, 8, "must be a mapping"),
        ("- 1\n- 2\n", 1, 1, "must be a mapping"),
        # inside 'source code': positions map back to the outer file
        ("name: x\nsource code: |\n  blank: ' '\n  start state: a\n  table:\n    a: {0: {L: q}}\n",
         6, 16, "undeclared state 'q'"),
        ("source code: |\n  blank: ' '\n  table: {a: [}\n", 3, 15, "YAML error"),
    ],
)
def test_tmio_errors(text, line, col, words):
    e = error_of(tmio, text, "bad.yaml")
    assert (e.file, e.line, e.col) == ("bad.yaml", line, col), e.render()
    assert words in e.message, e.message


def test_tmio_scalars_follow_js_yaml():
    # 'yes' and 'on' are strings (YAML 1.2 core), 'true' is the string 'true'
    text = "blank: ' '\nstart state: yes\ntable:\n  yes: {1: {R: on}}\n  on:\n  true:\n"
    m = parse_one(tmio, text, "js.yaml")
    assert m.states == ("yes", "on", "true")
    assert tmio.default_input("input: 0\nblank: 0\nstart state: a\ntable: {a: }\n") == ""
    assert tmio.default_input("input: 4728\nblank: 0\nstart state: a\ntable: {a: }\n") == "4728"


@needs_corpus
def test_tmio_corpus_parses():
    files = sorted((TM / "turingmachine_io").glob("*.yaml"))
    assert len(files) == 15
    for f in files:
        (m,) = tmio.parse(SourceText.from_file(f))
        assert m.halting == {} and not m.missing_rule_counts_step
        assert m.name


def tmio_file(name: str) -> tuple[Machine, str | None]:
    src = SourceText.from_file(TM / "turingmachine_io" / name)
    (m,) = tmio.parse(src)
    return m, tmio.default_input(src)


@needs_corpus
def test_tmio_binary_increment_known_result():
    m, inp = tmio_file("binaryIncrement.yaml")
    assert inp == "1011"
    r = run_machine(m, inp)
    assert (r.halted, r.steps, r.tape, r.outcome) == (True, 8, "1100", "halt")


@needs_corpus
@pytest.mark.parametrize(
    "name, inp, tape, state",
    [
        ("binaryAdd.yaml", "11+1", "100 1", "done"),  # the file's example
        ("binaryAdd.yaml", None, "100100 11001", "done"),  # 11 + 25 = 36
        ("binaryMult.yaml", "11*11", "1001", "done"),
        ("binaryMult.yaml", "111*110", "101010", "done"),
        ("binaryMult.yaml", None, "1111", "done"),  # 3 * 5 = 15
        ("unaryMult.yaml", None, "||*||| ||||||", "done"),  # 2 * 3
        ("copy1s.yaml", None, "1110111", "H"),
        ("divisibleBy3.yaml", "1111", None, "accept"),
        ("divisibleBy3Base10.yaml", None, None, "accept"),
        ("palindrome.yaml", None, None, "accept"),
        ("palindrome.yaml", "ab", None, "reject"),
        ("powersOfTwo.yaml", None, None, "accept"),
        ("powersOfTwo.yaml", "000", None, "reject"),
        ("matchThreeLengths.yaml", None, None, "accept"),
        ("matchBinaryStrings.yaml", None, None, "accept"),
        ("lengthMult.yaml", None, None, "accept"),
    ],
)
def test_tmio_documented_examples(name, inp, tape, state):
    m, default = tmio_file(name)
    r = run_machine(m, default if inp is None else inp, max_steps=100_000)
    assert r.halted and r.state == state and r.outcome == "halt"
    if tape is not None:
        assert r.tape == tape


@needs_corpus
def test_tmio_busy_beavers():
    for name, steps, ones in (("busyBeaver3.yaml", 13, 6), ("busyBeaver4.yaml", 107, 13)):
        m, inp = tmio_file(name)
        assert inp is None
        r = run_machine(m, "")
        assert (r.halted, r.steps, r.tape.count("1")) == (True, steps, ones), name
    m, _ = tmio_file("repeat01.yaml")
    assert not run_machine(m, "", max_steps=1000).halted


# --------------------------------------------------------------------------------------------
# fuzz: any input gives machines or a Tm2nnError, nothing else

PARSERS = {"std": std, "morphett": morphett, "tmio": tmio}
FUZZ_ALPHABET = "01234RLZAB-_ \n\t#;*:[]{},'\"|>-!&@?%halt\x00\xff\u2028é"


def check_parse(mod, data: bytes, path: str) -> None:
    try:
        items = mod.parse(src_of(data, path))
    except Tm2nnError as e:
        assert e.message
        e.render()
        return
    assert isinstance(items, list)
    assert all(isinstance(m, Machine) for m in items)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(PARSERS)), st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.text(alphabet=FUZZ_ALPHABET, max_size=200).map(lambda s: s.encode("utf-8")),
))
def test_fuzz_random_input(fmt, data):
    check_parse(PARSERS[fmt], data, f"fuzz.{fmt}")


def _corpus_samples() -> list[tuple[str, bytes]]:
    if not TM.is_dir():
        return [("std", b"1RB1LB_1LA1RZ Halt 6 4\n"), ("morphett", b"0 _ 1 r halt\n"),
                ("tmio", INCREMENT.encode())]
    out = [("std", (TM / "bb" / "2x3.txt").read_bytes()[:600])]
    out += [("morphett", p.read_bytes()) for p in sorted((TM / "morphett").glob("*.txt"))]
    out += [("tmio", p.read_bytes()) for p in sorted((TM / "turingmachine_io").glob("*.yaml"))]
    return out


SAMPLES = _corpus_samples()


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(SAMPLES) - 1), st.integers(0, 2**32 - 1), st.integers(1, 8))
def test_fuzz_mutated_corpus(which, seed, n_mutations):
    fmt, data = SAMPLES[which]
    rng = random.Random(seed)
    buf = bytearray(data)
    pool = b"01RLZ-_ \n:;*[]{},'|#\x00\xc3"
    for _ in range(n_mutations):
        i = rng.randrange(len(buf) + 1)
        op = rng.randrange(4)
        if op == 0 and buf:
            del buf[i: i + rng.randrange(1, 20)]
        elif op == 1:
            buf[i:i] = bytes(rng.choice(pool) for _ in range(rng.randrange(1, 4)))
        elif op == 2 and i < len(buf):
            buf[i] = rng.choice(pool)
        else:
            buf = buf[:i]  # truncate
    check_parse(PARSERS[fmt], bytes(buf), f"mut.{fmt}")


def test_deeply_nested_yaml_is_an_error():
    check_parse(tmio, b"table: " + b"[" * 5000, "deep.yaml")
    check_parse(tmio, b"source code: |\n  table: " + b"{a: " * 3000 + b"\n", "deep2.yaml")
