"""The tm2nn machine language: parser, writer, examples, errors, round trips, fuzzing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.ir.machine import GRID_MOVES, LINE_MOVES, GridMachine, Machine, Rule
from tm2nn.source import SourceText
from tm2nn.syntax import parse_text
from tm2nn.syntax.tm_dsl import dump, parse

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def p(text: str, path: str = "t.tm") -> list[Machine]:
    return parse(SourceText.from_string(text, path))


def one(body: str, header: str = "machine m {") -> Machine:
    (m,) = p(f"{header}\n{body}\n}}\n")
    return m


def err(text: str) -> Tm2nnError:
    with pytest.raises(Tm2nnError) as info:
        p(text)
    return info.value


def assert_caret(e: Tm2nnError) -> None:
    """``render()`` shows the source line and a caret under the column."""
    out = e.render()
    assert out.startswith(f"t.tm:{e.line}:{e.col}: error: ")
    assert e.snippet is not None
    assert "\n    " + e.snippet.expandtabs(1) + "\n" in out
    assert "\n    " + " " * (e.col - 1) + "^" in out


def triples(m: Machine) -> list[tuple[str, str, str, str, str]]:
    return [(r.state, r.read, r.write, r.move, r.next) for r in m.rules]


# ---------------------------------------------------------------------------------------
# examples: documented runs give documented results
# ---------------------------------------------------------------------------------------

# Each example's header holds "# input:", "# output:", "# outcome:", "# steps:" (and for
# the busy beavers "# sigma:") lines; these are further runs its prose mentions:
# file -> [(input, halted state, outcome, tape or None)]
EXTRA = {
    "binary_increment.tm": [("111", "done", "halt", "1000"), ("", "done", "halt", "1")],
    "palindrome.tm": [("1101", "no", "reject", None)],
    "unary_addition.tm": [],
    "balanced_parens.tm": [("())(", "no", "reject", None)],
    "bb3.tm": [],
    "bb4.tm": [],
    "grid_copy_down.tm": [],
}
HEADER_KEY = re.compile(r"^#\s*(input|output|outcome|steps|sigma):\s*(.*?)\s*$")


def header(name: str) -> dict[str, str]:
    out = {}
    for line in (EXAMPLES / name).read_text().splitlines():
        if not line.startswith("#"):
            break
        m = HEADER_KEY.match(line)
        if m:
            v = m.group(2)
            out[m.group(1)] = "" if v == "''" else v
    return out


def load_example(name: str) -> Machine:
    ms = parse(SourceText.from_file(EXAMPLES / name))
    assert len(ms) == 1
    return ms[0]


def test_every_example_is_covered():
    files = {f.name for f in EXAMPLES.glob("*.tm")}
    assert set(EXTRA) <= files


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_example_runs_as_documented(name):
    m = load_example(name)
    h = header(name)
    assert {"input", "output", "outcome", "steps"} <= set(h), h
    res = run_machine(m, h["input"], max_steps=100_000)
    assert res.halted
    assert res.tape == h["output"]
    assert res.outcome == h["outcome"]
    assert res.steps == int(h["steps"])
    if "sigma" in h:
        assert res.sigma == int(h["sigma"])
    text = (EXAMPLES / name).read_text()
    for inp, state, outcome, tape in EXTRA[name]:
        assert inp == "" or inp in text  # the prose mentions it
        res = run_machine(m, inp, max_steps=100_000)
        assert (res.halted, res.state, res.outcome) == (True, state, outcome)
        if tape is not None:
            assert res.tape == tape


def test_busy_beavers():
    bb3 = run_machine(load_example("bb3.tm"))
    assert (bb3.halted, bb3.steps, bb3.sigma) == (True, 21, 5)
    bb4 = run_machine(load_example("bb4.tm"))
    assert (bb4.halted, bb4.steps, bb4.sigma) == (True, 107, 13)


def test_palindrome_and_parens_agree_with_python():
    pal = load_example("palindrome.tm")
    par = load_example("balanced_parens.tm")
    import itertools

    for n in range(7):
        for bits in itertools.product("01", repeat=n):
            s = "".join(bits)
            assert run_machine(pal, s).outcome == ("accept" if s == s[::-1] else "reject"), s
        for chars in itertools.product("()", repeat=n):
            s = "".join(chars)
            depth, ok = 0, True
            for c in s:
                depth += 1 if c == "(" else -1
                ok = ok and depth >= 0
            ok = ok and depth == 0
            assert run_machine(par, s).outcome == ("accept" if ok else "reject"), s


def test_binary_increment_and_unary_addition_compute():
    inc = load_example("binary_increment.tm")
    add = load_example("unary_addition.tm")
    for k in range(40):
        assert run_machine(inc, format(k, "b")).tape == format(k + 1, "b")
    for a in range(5):
        for b in range(5):
            assert run_machine(add, "1" * a + "+" + "1" * b).tape == "1" * (a + b)


def test_grid_example_uses_vertical_moves():
    m = load_example("grid_copy_down.tm")
    assert isinstance(m, GridMachine)
    assert {"U", "D"} <= {r.move for r in m.rules}
    for row in ("0", "10", "0110111"):
        res = run_machine(m, row)
        assert res.tape == f"{row}/{row}"
        assert res.head == (0, len(row))


def test_examples_round_trip():
    for name in EXTRA:
        m = load_example(name)
        assert p(dump(m))[0] == m


def test_dispatch_by_format_name():
    (m,) = parse_text((EXAMPLES / "bb3.tm").read_text(), "tm", "bb3.tm")
    assert m.name == "bb3" and m.start == "A" and m.halting == {"Z": "halt"}


# ---------------------------------------------------------------------------------------
# the language: declarations and shorthands
# ---------------------------------------------------------------------------------------


def test_symbol_list_on_the_left_gives_one_rule_per_symbol():
    m = one("alphabet: a b c _\nstart: q\nq a b c -> _ R r")
    assert triples(m) == [("q", s, "_", "R", "r") for s in "abc"]
    assert len({r.loc for r in m.rules}) == 1 and m.rules[0].loc.line == 4


def test_star_write_and_next():
    m = one("alphabet: 0 1 _\nstart: q\nq 0 1 -> * L *\nq _ -> 1 S *")
    assert triples(m) == [
        ("q", "0", "0", "L", "q"),
        ("q", "1", "1", "L", "q"),
        ("q", "_", "1", "S", "q"),
    ]


def test_star_on_the_left_explicit_rules_win_in_any_order():
    m = one(
        "alphabet: a b c d _ x\nstart: q\nq * -> x R r\nq b -> b L q\nr c -> * S h\nq d -> d L r"
    )
    got = {(r.state, r.read): r for r in m.rules}
    assert got[("q", "b")].move == "L" and got[("q", "d")].next == "r"
    stars = [t for t in triples(m) if t[2] == "x"]
    # the * rule covers the other symbols, in alphabet order, where it is written
    assert stars == [("q", s, "x", "R", "r") for s in "ac_x"]
    assert triples(m)[:4] == stars
    assert ("r", "c", "c", "S", "h") in triples(m)


def test_star_on_the_left_with_star_write():
    m = one("alphabet: 0 1 _\nstart: q\nq 1 -> 0 R q\nq * -> * L done\nhalt: done")
    assert sorted(triples(m)) == [
        ("q", "0", "0", "L", "done"),
        ("q", "1", "0", "R", "q"),
        ("q", "_", "_", "L", "done"),
    ]


def test_inferred_states_alphabet_and_defaults():
    m = one("accept: yes\nstart: s\ns 0 -> 1 R t\nt 1 -> 0 L yes\nt 0 -> 0 L s")
    assert m.states == ("s", "yes", "t")  # start first, then order of first appearance
    assert m.alphabet == ("_", "0", "1")  # blank (default _) first, then the rules' symbols
    assert m.blank == "_" and m.halting == {"yes": "accept"}
    assert type(m) is Machine and not m.missing_rule_counts_step


def test_declared_states_halting_join_and_blank_appended():
    m = one("alphabet: 0 1\nblank: B\nstates: a b\nstart: b\nreject: no\nhalt: stop\na 0 -> 1 R no")
    assert m.states == ("a", "b", "no", "stop")
    assert m.alphabet == ("0", "1", "B") and m.blank == "B"
    assert m.start == "b" and m.halting == {"no": "reject", "stop": "halt"}


def test_tape_convention_and_lowercase_moves():
    m = one("tape: grid\nconvention: morphett\nstart: q\nq _ -> 1 u q\nq 1 -> 1 d q\nq 0 -> 0 l q")
    assert isinstance(m, GridMachine) and m.missing_rule_counts_step
    assert [r.move for r in m.rules] == ["U", "D", "L"]
    m2 = one("tape: line\nconvention: bbchallenge\nstart: q\nq _ -> 1 s q")
    assert type(m2) is Machine and not m2.missing_rule_counts_step
    assert m2.rules[0].move == "S"


def test_quoted_symbols_and_names_exact():
    m = one(
        "alphabet: ' ' '#' '*' '{' '}' ':' '\\'' - > \\ A\n"
        "blank: ' '\n"
        "start: 'my state'\n"
        "'my state' '*' '#' -> '\\u{41}' R machine   # comment after a rule\n"
        "machine - -> * L 'q\\n'\n",
        "machine 'the m' {",
    )
    assert m.name == "the m"
    assert m.alphabet == (" ", "#", "*", "{", "}", ":", "'", "-", ">", "\\", "A")
    assert triples(m) == [
        ("my state", "*", "A", "R", "machine"),
        ("my state", "#", "A", "R", "machine"),
        ("machine", "-", "-", "L", "q\n"),
    ]


def test_arrow_needs_no_spaces_and_names_may_have_dashes():
    m = one("start: 1o\n1o 0->1 R halt-accept\naccept: halt-accept")
    assert triples(m) == [("1o", "0", "1", "R", "halt-accept")]
    assert m.halting == {"halt-accept": "accept"}


def test_several_machines_comments_and_blank_lines():
    text = "# top\n\nmachine a {  # c\n\n  start: q\n  q 0 -> 1 R q }\n\n# mid\nmachine b {\nstart: r\n}"
    ms = p(text)
    assert [m.name for m in ms] == ["a", "b"]
    assert ms[1].states == ("r",) and ms[1].rules == ()
    assert ms[0].loc.line == 3 and ms[1].loc.line == 9
    assert p("") == [] and p("# only a comment") == [] and p("\n\n") == []


def test_every_rule_has_a_location():
    m = load_example("palindrome.tm")
    assert all(r.loc is not None and r.loc.file.endswith("palindrome.tm") for r in m.rules)
    text = (EXAMPLES / "palindrome.tm").read_text().splitlines()
    for r in m.rules:
        assert text[r.loc.line - 1][r.loc.col - 1 :].startswith(r.state)


# ---------------------------------------------------------------------------------------
# errors: Tm2nnError at the right line and column, with a caret
# ---------------------------------------------------------------------------------------


def test_nondeterminism_names_both_lines():
    e = err("machine m {\n start: a\n a 0 1 -> 1 R b\n\n   a 1 -> 0 L a\n}\n")
    assert (e.line, e.col) == (5, 4)
    assert "nondeterministic" in e.message
    assert any("t.tm:3:2" in n for n in e.notes)
    assert "t.tm:3:2" in e.render() and "t.tm:5:4" in e.render()
    assert_caret(e)


def test_two_star_rules_name_both_lines():
    e = err("machine m {\n start: a\n a * -> 1 R b\n a * -> 1 R b\n}\n")
    assert (e.line, e.col) == (4, 4)
    assert "lines 3 and 4" in e.message
    assert_caret(e)


def test_unknown_state_in_rule():
    e = err("machine m {\n states: a b\n start: a\n a 0 -> 1 R c\n}\n")
    assert (e.line, e.col) == (4, 13)
    assert "unknown state 'c'" in e.message
    assert_caret(e)


def test_unknown_start_state():
    e = err("machine m {\n states: a b\n start: zz\n}\n")
    assert (e.line, e.col) == (3, 9)
    assert "unknown state 'zz'" in e.message
    assert_caret(e)


def test_missing_start_names_the_machine_line():
    e = err("# x\nmachine m {\n states: a b\n}\n")
    assert (e.line, e.col) == (2, 1)
    assert "start" in e.message
    assert_caret(e)


def test_bad_move():
    e = err("machine m {\n start: a\n a 0 -> 1 X b\n}\n")
    assert (e.line, e.col) == (3, 11)
    assert "bad move 'X'" in e.message
    assert_caret(e)


def test_grid_move_on_line_tape():
    e = err("machine m {\n start: a\n a 0 -> 1 U b\n}\n")
    assert (e.line, e.col) == (3, 11)
    assert "grid" in e.message
    assert_caret(e)
    # the same rule is fine on a grid tape
    assert one(" start: a\n a 0 -> 1 U b\n tape: grid").rules[0].move == "U"


def test_multi_character_symbol():
    e = err("machine m {\n alphabet: 0 1 ab\n}\n")
    assert (e.line, e.col) == (2, 16)
    assert "single characters" in e.message
    assert_caret(e)
    e = err("machine m {\n start: a\n a 'xy' -> 1 R a\n}\n")
    assert (e.line, e.col) == (3, 4)


def test_symbol_not_in_declared_alphabet():
    e = err("machine m {\n alphabet: 0 1\n start: a\n a 0 -> 2 R a\n}\n")
    assert (e.line, e.col) == (4, 9)
    assert "not in the alphabet" in e.message


def test_unknown_and_duplicate_declarations():
    e = err("machine m {\n start: a\n alphabt: 0 1\n}\n")
    assert (e.line, e.col) == (3, 2) and "unknown declaration 'alphabt'" in e.message
    assert_caret(e)
    e = err("machine m {\n start: a\n start: b\n}\n")
    assert (e.line, e.col) == (3, 2) and "twice" in e.message
    e = err("machine m {\n start: a b\n}\n")
    assert (e.line, e.col) == (2, 11)
    e = err("machine m {\n start: a\n tape: torus\n}\n")
    assert (e.line, e.col) == (3, 8)
    e = err("machine m {\n start: a\n convention: turing\n}\n")
    assert (e.line, e.col) == (3, 14)


def test_duplicate_machine_names():
    e = err("machine m {\n start: a\n}\nmachine m {\n start: a\n}\n")
    assert (e.line, e.col) == (4, 9)
    assert "twice" in e.message and any("t.tm:1" in n for n in e.notes)


def test_halting_state_with_rules_and_double_outcome():
    e = err("machine m {\n start: a\n halt: b\n b 0 -> 1 R b\n}\n")
    assert (e.line, e.col) == (4, 2) and "halting" in e.message
    e = err("machine m {\n start: a\n accept: b\n reject: b\n}\n")
    assert (e.line, e.col) == (4, 10)


def test_bad_names_and_escapes():
    e = err("machine m {\n start: a\n a 0 -> 1 R q>\n}\n")
    assert (e.line, e.col) == (3, 13) and "'q>'" in e.message
    e = err("machine m {\n start: a\n a 0 -> 'x\\q' R b\n}\n")
    assert (e.line, e.col) == (3, 11) and "escape" in e.message
    e = err("machine m {\n start: a\n a 0 -> '\\u{110000}' R b\n}\n")
    assert (e.line, e.col) == (3, 10)
    e = err("machine m {\n start: *\n}\n")
    assert (e.line, e.col) == (2, 9)
    e = err("machine m {\n start: a\n * 0 -> 1 R a\n}\n")
    assert (e.line, e.col) == (3, 2)


@pytest.mark.parametrize(
    "text, line, col, words",
    [
        ("machine m {\n start: a\n a 0 -> 1 R\n}\n", 3, 12, ["end of line", "name or symbol"]),
        ("machine m {\n start: a\n a 0 1 R b\n}\n", 3, 6, ["missing '->' before '1'"]),
        ("machine m {\n start a\n}\n", 2, 9, ["'->'", "end of line"]),
        ("machine m {\n start: a\n a 0 -> 1 R b\n", 3, 14, ["end of file", "'}'"]),
        ("foo", 1, 1, ["'foo'", "'machine'"]),
        ("machine { }", 1, 9, ["'{'", "name or symbol"]),
        ("machine m {\n alphabet: 0 1 'ab\n}\n", 2, 16, ["unterminated"]),
        ("machine m {\n start: a\n}\n}\n", 4, 1, ["'}'", "'machine'"]),
        ("machine m {\n start: a\n a 0 -> 1 R b } junk", 3, 17, ["'junk'"]),
        ("machine m {\n\tstart:\x0b a\n}", 2, 8, ["unexpected character '\\x0b'"]),
    ],
)
def test_syntax_errors(text, line, col, words):
    e = err(text)
    assert (e.line, e.col) == (line, col), e.render()
    for w in words:
        assert w in e.message, e.render()
    assert_caret(e)


def test_syntax_error_hints():
    e = err("machine m {\n start: a\n a 0 -> 1 R\n}\n")
    assert any("STATE SYMBOL... -> WRITE MOVE NEXT" in n for n in e.notes)
    e = err("machine m {\n start a\n}\n")
    assert any("KEY: VALUE" in n for n in e.notes)
    e = err("foo")
    assert e.notes == ()


def test_not_utf8():
    with pytest.raises(Tm2nnError) as info:
        parse(SourceText.register("bad.tm", b"machine m {\n \xff\n}"))
    assert (info.value.line, info.value.col) == (2, 2)


# ---------------------------------------------------------------------------------------
# dump
# ---------------------------------------------------------------------------------------


def test_dump_lists_everything_explicitly():
    m = one("tape: grid\nconvention: morphett\nstart: q\naccept: y\nq * -> * D y")
    text = dump(m)
    assert text.startswith("# converted by tm2nn\n")
    for line in (
        "tape: grid",
        "convention: morphett",
        "alphabet: _",
        "blank: _",
        "states: q y",
        "start: q",
        "accept: y",
        "q _ -> _ D y",
    ):
        assert f"\n  {line}\n" in text, line
    assert p(dump(m))[0] == m


def test_dump_quotes_what_needs_quoting():
    m = Machine(
        name="a b",
        alphabet=(" ", "'", "*", "#", "\n", "\\", "x"),
        blank=" ",
        states=("q 0", "machine", "*", ""),
        start="q 0",
        halting={"": "reject"},
        rules=(Rule("q 0", "*", "'", "L", "machine"), Rule("machine", "\n", "\\", "R", "*")),
    )
    text = dump(m)
    assert "machine 'a b' {" in text
    assert "alphabet: ' ' '\\'' '*' '#' '\\n' \\ x" in text
    assert "states: 'q 0' machine '*' ''" in text
    assert "reject: ''" in text
    assert "'q 0' '*' -> '\\'' L machine" in text
    back = p(text)[0]
    assert back == m and back.states == m.states and back.alphabet == m.alphabet


# ---------------------------------------------------------------------------------------
# hypothesis: round trips
# ---------------------------------------------------------------------------------------

AWKWARD = list("01_'#* {}:\\->\"\t\nxX") + ["\u2028", "\x00", "\x85", "é", "\u0301", "😀"]
NAMES = [
    "machine",
    "alphabet",
    "start",
    "states",
    "*",
    "->",
    "q'",
    "a b",
    "#x",
    "1o",
    "halt-accept",
    "q.1",
    "",
]

symbols = st.one_of(st.sampled_from(AWKWARD), st.characters())
names = st.one_of(
    st.sampled_from(NAMES),
    st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_\-.]{0,5}", fullmatch=True),
    st.text(max_size=6),
)


@st.composite
def machines(draw):
    grid = draw(st.booleans())
    moves = GRID_MOVES if grid else LINE_MOVES
    alphabet = draw(st.lists(symbols, min_size=1, max_size=6, unique=True))
    blank = draw(st.sampled_from(alphabet))
    states = draw(st.lists(names, min_size=1, max_size=5, unique=True))
    start = draw(st.sampled_from(states))
    halting = {}
    for q in states:
        if draw(st.integers(0, 3)) == 0:
            halting[q] = draw(st.sampled_from(["accept", "reject", "halt"]))
    rules = []
    for q in states:
        if q in halting:
            continue
        for a in draw(st.lists(st.sampled_from(alphabet), unique=True)):
            rules.append(
                Rule(
                    q,
                    a,
                    draw(st.sampled_from(alphabet)),
                    draw(st.sampled_from(moves)),
                    draw(st.sampled_from(states)),
                )
            )
    rules = draw(st.permutations(rules))
    cls = GridMachine if grid else Machine
    return cls(
        name=draw(names.filter(bool)),
        alphabet=alphabet,
        blank=blank,
        states=states,
        start=start,
        halting=halting,
        rules=rules,
        missing_rule_counts_step=draw(st.booleans()),
    )


@settings(max_examples=400, deadline=None)
@given(machines())
def test_round_trip(m):
    text = dump(m)
    (back,) = p(text)
    assert back == m
    assert type(back) is type(m)
    assert back.states == m.states and back.alphabet == m.alphabet
    assert [(r.state, r.read) for r in back.rules] == [(r.state, r.read) for r in m.rules]
    assert dump(back) == text


@settings(max_examples=100, deadline=None)
@given(st.lists(machines(), min_size=1, max_size=3))
def test_round_trip_several_machines_in_one_file(ms):
    names_ = [m.name for m in ms]
    assume(len(set(names_)) == len(names_))
    text = "\n".join(dump(m) for m in ms)
    assert p(text) == ms


# ---------------------------------------------------------------------------------------
# hypothesis: fuzzing — only Tm2nnError may escape
# ---------------------------------------------------------------------------------------


def parse_or_error(data: str | bytes) -> None:
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    src = SourceText.register("fuzz.tm", raw)
    try:
        ms = parse(src)
    except Tm2nnError as e:
        assert e.message
        e.render()
        if e.line is not None:
            assert e.line >= 1 and (e.col or 1) >= 1
        return
    for m in ms:
        assert isinstance(m, Machine)
        assert p(dump(m))[0] == m


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_fuzz_random_text(text):
    parse_or_error(text)


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_fuzz_random_bytes(data):
    parse_or_error(data)


TOKENS = [
    "machine",
    "m",
    "n",
    "{",
    "}",
    "->",
    "*",
    ":",
    "alphabet:",
    "blank:",
    "states:",
    "start:",
    "accept:",
    "reject:",
    "halt:",
    "tape:",
    "grid",
    "line",
    "convention:",
    "morphett",
    "bbchallenge",
    "q",
    "r",
    "0",
    "1",
    "_",
    "R",
    "L",
    "U",
    "D",
    "S",
    "x",
    "'x'",
    "'\\''",
    "'\\u{41}'",
    "'\\u{110000}'",
    "'ab'",
    "''",
    "'",
    "#c",
    "\n",
    "\n",
    "\n",
    " ",
    "\t",
    "\r\n",
    "->",
    "q>",
    "\\",
]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_fuzz_token_soup(text):
    parse_or_error(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(EXTRA)),
    st.lists(
        st.tuples(
            st.sampled_from(["delete", "insert", "dup", "swap"]),
            st.integers(0, 10_000),
            st.integers(0, 12),
            st.one_of(st.text(max_size=4), st.sampled_from(TOKENS)),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_fuzz_mutated_examples(name, edits):
    text = (EXAMPLES / name).read_text()
    for op, pos, n, s in edits:
        pos %= len(text) + 1
        if op == "delete":
            text = text[:pos] + text[pos + n :]
        elif op == "insert":
            text = text[:pos] + s + text[pos:]
        elif op == "dup":
            text = text[:pos] + text[pos : pos + n] + text[pos:]
        else:
            lines = text.split("\n")
            i, j = pos % len(lines), (pos + n) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    parse_or_error(text)


def test_unquoted_words_and_quoting_agree():
    """Every character dump writes bare lexes as a word; everything else gets quoted."""
    from tm2nn.syntax.tm_dsl import _sym

    word = re.compile(r"(?:(?!->)[^\s#*{}':])+")
    for cp in list(range(0, 0x3000)) + [0x2028, 0x2029, 0xFEFF, 0x1F600]:
        ch = chr(cp)
        out = _sym(ch)
        if out == ch:
            assert word.fullmatch(ch), hex(cp)
        else:
            assert out.startswith("'") and out.endswith("'")
