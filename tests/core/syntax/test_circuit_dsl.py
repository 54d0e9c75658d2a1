"""The circuit language: examples, semantics, errors, dump/parse round trips, fuzzing."""

from __future__ import annotations

import itertools
import re
import string
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tm2nn.errors import Tm2nnError
from tm2nn.ir import Circuit, Gate
from tm2nn.source import SourceText
from tm2nn.syntax import circuit_dsl
from tm2nn.syntax.circuit_dsl import dump, parse

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
EXAMPLE_FILES = ["full_adder", "ripple_adder4", "majority5", "comparator4"]

try:
    from tm2nn.interp import eval_circuit
except ImportError:  # pragma: no cover - the official evaluator is optional here
    eval_circuit = None


def p(text: str, path: str = "t.circ") -> list[Circuit]:
    return parse(SourceText.from_string(text, path))


def one(text: str, path: str = "t.circ") -> Circuit:
    (c,) = p(text, path)
    return c


def gates(c: Circuit) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(g.name, g.op, g.inputs) for g in c.gates}


# ----------------------------------------------------------------- a tiny independent evaluator

_FN = {
    "AND": all,
    "OR": any,
    "NAND": lambda xs: not all(xs),
    "NOR": lambda xs: not any(xs),
    "XOR": lambda xs: sum(xs) % 2 == 1,
    "XNOR": lambda xs: sum(xs) % 2 == 0,
    "NOT": lambda xs: not xs[0],
    "BUF": lambda xs: xs[0],
    "CONST0": lambda xs: False,
    "CONST1": lambda xs: True,
}


def evaluate(c: Circuit, bits) -> tuple[bool, ...]:
    """Gate by gate, settling in rounds (does not rely on ``c.topo``)."""
    val = dict(zip(c.inputs, (bool(b) for b in bits), strict=True))
    todo = list(c.gates)
    while todo:
        left = [g for g in todo if not all(i in val for i in g.inputs)]
        for g in todo:
            if all(i in val for i in g.inputs):
                val[g.name] = bool(_FN[g.op]([val[i] for i in g.inputs]))
        assert len(left) < len(todo), "evaluation is stuck (cycle or undefined signal)"
        todo = left
    return tuple(val[o] for o in c.outputs)


def all_inputs(n: int):
    return itertools.product((0, 1), repeat=n)


def check_official(c: Circuit) -> None:
    if eval_circuit is None:  # pragma: no cover
        return
    bits = np.array(list(all_inputs(len(c.inputs))), dtype=bool).reshape(-1, len(c.inputs))
    want = np.array([evaluate(c, row) for row in bits], dtype=bool).reshape(-1, len(c.outputs))
    assert np.array_equal(eval_circuit(c, bits), want)


def number(bits) -> int:
    return sum(int(b) << i for i, b in enumerate(bits))


# ----------------------------------------------------------------- examples


def load_example(name: str) -> Circuit:
    (c,) = parse(SourceText.from_file(EXAMPLES / f"{name}.circ"))
    return c


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_parses_and_has_header(name):
    c = load_example(name)
    assert c.name == name
    text = (EXAMPLES / f"{name}.circ").read_text()
    assert text.startswith("# ")
    assert "->" in text.split("\n\n")[0]  # an example input -> output in the header
    assert one(dump(c)) == c
    check_official(c)


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_header_input_output(name):
    text = (EXAMPLES / f"{name}.circ").read_text()
    given_in = re.search(r"^# input: ([01 ]+)$", text, re.M).group(1).replace(" ", "")
    given_out = re.search(r"^# output: ([01]+)$", text, re.M).group(1)
    c = load_example(name)
    got = evaluate(c, [int(b) for b in given_in])
    assert "".join("1" if b else "0" for b in got) == given_out


def test_registered_as_circ_format(tmp_path):
    from tm2nn import syntax

    c = syntax.load(EXAMPLES / "comparator4.circ")
    assert c == load_example("comparator4")
    f = tmp_path / "copy.circ"
    f.write_text(syntax.dump(c, "circ"))
    assert syntax.load(f) == c


def test_full_adder():
    c = load_example("full_adder")
    assert c.inputs == ("a", "b", "cin") and c.outputs == ("s", "cout")
    for a, b, cin in all_inputs(3):
        s, cout = evaluate(c, (a, b, cin))
        assert int(s) + 2 * int(cout) == a + b + cin
    assert evaluate(c, (1, 1, 0)) == (False, True)  # the header's example


def test_ripple_adder_adds_all_inputs():
    c = load_example("ripple_adder4")
    assert c.inputs == tuple(f"a[{i}]" for i in range(4)) + tuple(f"b[{i}]" for i in range(4)) + ("cin",)
    assert c.outputs == tuple(f"s[{i}]" for i in range(4)) + ("cout",)
    n = 0
    for bits in all_inputs(9):
        a, b, cin = number(bits[:4]), number(bits[4:8]), bits[8]
        out = evaluate(c, bits)
        assert number(out) == a + b + cin, (a, b, cin, out)
        n += 1
    assert n == 512
    assert evaluate(c, (1, 1, 0, 0, 1, 0, 1, 0, 0)) == (False, False, False, True, False)


def test_majority5():
    c = load_example("majority5")
    assert c.inputs == tuple(f"x[{i}]" for i in range(5)) and c.outputs == ("maj",)
    for bits in all_inputs(5):
        assert evaluate(c, bits) == (sum(bits) >= 3,)
    ors = [g for g in c.gates if g.name == "maj"]
    assert ors[0].op == "OR" and len(ors[0].inputs) == 10


def test_comparator4():
    c = load_example("comparator4")
    assert c.outputs == ("lt", "eq", "gt")
    for bits in all_inputs(8):
        a, b = number(bits[:4]), number(bits[4:])
        assert evaluate(c, bits) == (a < b, a == b, a > b)
    assert c.driver["gt"].op == "OR" and len(c.driver["gt"].inputs) == 4


# ----------------------------------------------------------------- the language


def test_vector_expansion_and_order():
    c = one('input b c[3] a\ninput d[2]\noutput y[2] "c[1]"\ny[0] = a\ny[1] = b\n')
    assert c.inputs == ("b", "c[0]", "c[1]", "c[2]", "a", "d[0]", "d[1]")
    assert c.outputs == ("y[0]", "y[1]", "c[1]")
    assert one("input c[2]\noutput c[01]\n").outputs == ("c[0]",)  # size 01 is 1
    assert one("input c[3]\noutput y\ny = c[02]\n").driver["y"].inputs == ("c[2]",)


def test_quoted_declaration_is_one_port():
    c = one('input "c[3]" "1gat" "with space" "q\\"x\\\\"\noutput "1gat"\n')
    assert c.inputs == ("c[3]", "1gat", "with space", 'q"x\\')
    assert c.outputs == ("1gat",)


def test_quoted_and_odd_names():
    c = one('input "1" "22" N6287 G1gat a.b$c\noutput "22gat"\n"22gat" = NAND("1", "22", N6287, G1gat, a.b$c)\n')
    assert gates(c) == {("22gat", "NAND", ("1", "22", "N6287", "G1gat", "a.b$c"))}
    assert one('input a\noutput "\\u{41}\\t"\n"A\\t" = a\n').outputs == ("A\t",)


def test_precedence():
    c = one("input a b c\noutput y\ny = a | b & c\n")
    assert gates(c) == {("y$1", "AND", ("b", "c")), ("y", "OR", ("a", "y$1"))}
    c = one("input a b c\noutput y\ny = a ^ b & c | ~a\n")
    assert gates(c) == {
        ("y$1", "AND", ("b", "c")),
        ("y$2", "XOR", ("a", "y$1")),
        ("y$3", "NOT", ("a",)),
        ("y", "OR", ("y$2", "y$3")),
    }
    c = one("input a b\noutput y\ny = ~a & b\n")
    assert gates(c) == {("y$1", "NOT", ("a",)), ("y", "AND", ("y$1", "b"))}
    c = one("input a b\noutput y\ny = ~(a & b)\n")
    assert gates(c) == {("y$1", "AND", ("a", "b")), ("y", "NOT", ("y$1",))}


def test_flattening():
    c = one("input a b c d\noutput y\ny = a & b & c & d\n")
    assert gates(c) == {("y", "AND", ("a", "b", "c", "d"))}
    c = one("input a b c d\noutput y\ny = a ^ b ^ c | d | a\n")
    assert gates(c) == {("y$1", "XOR", ("a", "b", "c")), ("y", "OR", ("y$1", "d", "a"))}
    # parentheses and gate calls are not merged
    c = one("input a b c\noutput y\ny = (a & b) & c\n")
    assert gates(c) == {("y$1", "AND", ("a", "b")), ("y", "AND", ("y$1", "c"))}
    c = one("input a b c\noutput y\ny = AND(a, b) & c\n")
    assert gates(c) == {("y$1", "AND", ("a", "b")), ("y", "AND", ("y$1", "c"))}
    c = one("input a b c\noutput y\ny = a & (b & c)\n")
    assert gates(c) == {("y$1", "AND", ("b", "c")), ("y", "AND", ("a", "y$1"))}


def test_calls_nesting_case_and_continuation():
    c = one("input a b c\noutput y\ny = nand(Or(a,\n  b), XNOR(c, a, b),\n   BUF(c),)\n")
    assert gates(c) == {
        ("y$1", "OR", ("a", "b")),
        ("y$2", "XNOR", ("c", "a", "b")),
        ("y$3", "BUF", ("c",)),
        ("y", "NAND", ("y$1", "y$2", "y$3")),
    }
    for x in [(0, 0, 0), (1, 0, 1), (1, 1, 0)]:
        a, b, cc = x
        want = not ((a or b) and (a + b + cc) % 2 == 0 and cc)
        assert evaluate(c, x) == (want,)


def test_constants_and_copies():
    c = one("input a\noutput y z w v\ny = 1\nz = a & 0\nw = a\nv = (a)\n")
    assert gates(c) == {
        ("y", "CONST1", ()),
        ("z$1", "CONST0", ()),
        ("z", "AND", ("a", "z$1")),
        ("w", "BUF", ("a",)),
        ("v", "BUF", ("a",)),
    }
    assert evaluate(c, (1,)) == (True, False, True, True)


def test_gate_names_are_not_reserved():
    c = one("input AND or\noutput y\ny = AND(AND, or)\n")
    assert gates(c) == {("y", "AND", ("AND", "or"))}


def test_fresh_internal_names_avoid_user_names():
    c = one("input a b c\noutput y y$1 y$3\ny$1 = a\ny = a & (b | c) & ~c\ny$3 = b\n")
    names = {g.name for g in c.gates}
    assert {"y$1", "y$3", "y"} <= names
    internal = names - {"y$1", "y$3", "y"}
    assert internal == {"y$2", "y$4"}
    # a name referenced anywhere is avoided too, so it stays undefined
    with pytest.raises(Tm2nnError, match="undefined signal 'y\\$1'"):
        one("input a b c\noutput y z\ny = a & (b | c)\nz = y$1\n")


def test_blocks_and_bare_names():
    cs = p("circuit one {\n input a\n output a\n}\n\n# two\ncircuit \"2 two\" { input b\n output x\n x = ~b }\n")
    assert [c.name for c in cs] == ["one", "2 two"]
    assert gates(cs[1]) == {("x", "NOT", ("b",))}
    assert one("input a\noutput a\n", path="dir/my_thing.circ").name == "my_thing"
    assert p("# only comments\n\n") == []
    assert p("") == []
    # keywords are ordinary names where no keyword can stand
    c = one("circuit k {\n input input circuit\n output output\n output = AND(input, circuit)\n}\n")
    assert c.inputs == ("input", "circuit") and c.outputs == ("output",)
    assert gates(c) == {("output", "AND", ("input", "circuit"))}
    c = one("circuit = 1\ninput = ~circuit\noutput input\n")
    assert gates(c) == {("circuit", "CONST1", ()), ("input", "NOT", ("circuit",))}


def test_crlf_tabs_and_comments():
    c = one("input a b\r\n\toutput y # outputs\r\n\r\ny = a ^ b\t# xor\r\n")
    assert gates(c) == {("y", "XOR", ("a", "b"))}


def test_locations_on_gates():
    c = one("input a b\noutput y\n\ny = a | (b & a)\n")
    assert (c.driver["y"].loc.line, c.driver["y"].loc.col) == (4, 1)
    assert (c.driver["y$1"].loc.line, c.driver["y$1"].loc.col) == (4, 12)


# ----------------------------------------------------------------- errors


def err(text: str, path: str = "e.circ") -> Tm2nnError:
    with pytest.raises(Tm2nnError) as info:
        p(text, path)
    return info.value


def assert_caret(e: Tm2nnError, line: int, col: int, under: str | None = None):
    assert (e.file, e.line, e.col) == ("e.circ", line, col), e.render()
    lines = e.render().split("\n")
    assert lines[0].startswith(f"e.circ:{line}:{col}: error: ")
    assert lines[2] == "    " + " " * (col - 1) + "^"
    if under is not None:
        assert lines[1][4 + col - 1:].startswith(under)


def test_undefined_signal():
    e = err("input a\noutput y\ny = a & bb\n")
    assert "undefined signal 'bb'" in e.message
    assert_caret(e, 3, 9, "bb")
    e = err("input abc\noutput y\ny = abd\n")
    assert "did you mean 'abc'" in e.message


def test_undefined_output():
    e = err("input a\noutput y z\ny = a\n")
    assert "'z' is never defined" in e.message
    assert_caret(e, 2, 10, "z")


def test_cycle():
    e = err("input a\noutput y\ny = a & z\nz = ~y\n")
    assert "combinational cycle" in e.message and "y" in e.message and "z" in e.message
    assert e.line in (3, 4) and e.col == 1
    assert e.render().split("\n")[2] == "    ^"
    e = err("input a\noutput y\n\ny = (a & y)\n")
    assert "combinational cycle: y -> y" in e.message
    assert_caret(e, 4, 1, "y = (a & y)")


def test_redefinition():
    e = err("input a\noutput y\ny = a\ny = ~a\n")
    assert "defined twice" in e.message
    assert_caret(e, 4, 1, "y = ~a")
    assert e.notes and "e.circ:3:1" in e.notes[0]
    e = err("input a\noutput a\na = 1\n")
    assert "is an input" in e.message
    assert_caret(e, 3, 1)
    e = err("input a b a\n")
    assert "declared twice" in e.message
    assert_caret(e, 1, 11)


def test_arity():
    e = err("input a b\noutput y\ny = a | NOT(a, b)\n")
    assert "NOT takes exactly one input, got 2" in e.message
    assert_caret(e, 3, 9, "NOT")
    e = err("input a\noutput y\ny = buf()\n")
    assert "BUF takes exactly one input, got 0" in e.message
    e = err("input a\noutput y\ny = OR()\n")
    assert "needs at least one input" in e.message
    assert_caret(e, 3, 5)


def test_unknown_gate_and_bad_constants():
    e = err("input a\noutput y\ny = MUX(a, a, a)\n")
    assert "unknown gate 'MUX'" in e.message
    assert_caret(e, 3, 5)
    e = err("input a\noutput y\ny = a & 2\n")
    assert "not a constant" in e.message
    assert_caret(e, 3, 9, "2")
    e = err("input a\noutput y\ny = 1gat\n")
    assert '"1gat"' in e.message


def test_syntax_errors():
    e = err("input a\noutput y\ny = a &\n")
    assert "unexpected end of line" in e.message and "expected" in e.message
    assert_caret(e, 3, 8)
    e = err("input a\noutput y\ny = a @ a\n")
    assert "unexpected character '@'" in e.message
    assert_caret(e, 3, 7, "@")
    e = err("input a b\noutput y\ny = AND(a b)\n")
    assert "unexpected name 'b'" in e.message and "','" in e.message
    assert_caret(e, 3, 11, "b")
    e = err("input a\ny = (a\n")
    assert "end of file" in e.message
    e = err('input a\ny = "a\n')
    assert "unterminated" in e.message
    assert_caret(e, 2, 5)
    e = err("output\n")
    assert "unexpected end of line; expected a name" in e.message
    assert_caret(e, 1, 7)
    e = err('input "a\\q"\n')
    assert "unknown escape" in e.message
    assert_caret(e, 1, 9)
    e = err("input a\ncircuit x {\n}\n")
    assert e.line == 2


def test_vector_errors():
    e = err("input c[8]\noutput y\ny = c[9]\n")
    assert "out of range" in e.message
    assert_caret(e, 3, 5, "c[9]")
    e = err("input a\noutput v[2]\nv[0] = a\nv[1] = a\nv[2] = a\n")
    assert "out of range" in e.message
    assert_caret(e, 5, 1)
    e = err("input c[0]\n")
    assert "no elements" in e.message
    e = err(f"input c[{circuit_dsl.MAX_VECTOR + 1}]\n")
    assert "too large" in e.message
    # an element of a name never declared as a vector is an ordinary (here undefined) name
    e = err("input a\noutput y\ny = t[3]\n")
    assert "undefined signal 't[3]'" in e.message


def test_duplicate_circuit_names():
    e = err("circuit a {\n}\ncircuit a {\n}\n")
    assert "defined twice" in e.message
    assert_caret(e, 3, 9)


def test_not_utf8():
    with pytest.raises(Tm2nnError, match="UTF-8"):
        parse(SourceText.register("bin.circ", b"input a\n\xff\n"))


# ----------------------------------------------------------------- dump


def test_dump_shape():
    c = Circuit("odd", ("1", "c[0]", "input", 'q"'), ("0", "x y"),
                (Gate("0", "CONST0", ()), Gate("x y", "XOR", ("1", "c[0]", "input", 'q"'))))
    text = dump(c)
    assert text.startswith("# converted by tm2nn\ncircuit odd {\n")
    assert '  input "1" "c[0]" "input" "q\\""\n' in text
    assert '  output "0" "x y"\n' in text
    assert '  "0" = 0\n' in text
    assert one(text) == c


def test_dump_wraps_long_lines():
    ins = tuple(f"input_signal_{i}" for i in range(40))
    c = Circuit("wide", ins, ("y",), (Gate("y", "AND", ins),))
    text = dump(c)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert one(text) == c


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_dump_examples_round_trip(name):
    c = load_example(name)
    again = one(dump(c))
    assert again == c
    assert [g.name for g in again.topo] == [g.name for g in c.topo]


# ----------------------------------------------------------------- hypothesis: round trips

_NAME_CHARS = string.ascii_letters + string.digits + "_.$[]\"\\ \t\n#(){}=&|^~,'é\u2028\x00"
IDENTS = st.from_regex(re.compile(r"[A-Za-z_][A-Za-z0-9_.$]{0,6}(\[(0|[1-9][0-9]?)\])?"), fullmatch=True)
ODD = st.one_of(
    st.sampled_from(["0", "1", "22", "1gat", "input", "output", "circuit", "AND", "c[03]",
                     "x$1", "y$2", 'a"b', "a\\b", "a b", "é", "\u2028", "\x00", "-"]),
    st.text(_NAME_CHARS, min_size=1, max_size=8),
)
NAMES = st.one_of(IDENTS, ODD)


@st.composite
def circuits(draw):
    names = draw(st.lists(NAMES, min_size=2, max_size=25, unique=True))
    n_in = draw(st.integers(1, min(6, len(names) - 1)))
    inputs, gate_names = names[:n_in], names[n_in:]
    signals = list(inputs)
    gs = []
    for n in gate_names:
        op = draw(st.sampled_from(["AND", "OR", "NOT", "XOR", "NAND", "NOR", "XNOR", "BUF",
                                   "CONST0", "CONST1"]))
        if op.startswith("CONST"):
            ins = ()
        elif op in ("NOT", "BUF"):
            ins = (draw(st.sampled_from(signals)),)
        else:
            ins = tuple(draw(st.lists(st.sampled_from(signals), min_size=1, max_size=5)))
        gs.append(Gate(n, op, ins))
        signals.append(n)
    outs = draw(st.lists(st.sampled_from(signals), max_size=6))
    cname = draw(st.one_of(IDENTS, NAMES))
    order = draw(st.permutations(gs))
    return Circuit(cname, tuple(inputs), tuple(outs), tuple(order))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(circuits())
def test_round_trip(c):
    text = dump(c)
    again = one(text)
    assert again == c
    assert dump(again) == text


@settings(max_examples=100, deadline=None)
@given(circuits())
def test_round_trip_preserves_function(c):
    again = one(dump(c))
    for bits in itertools.islice(all_inputs(len(c.inputs)), 16):
        assert evaluate(again, bits) == evaluate(c, bits)


# ----------------------------------------------------------------- hypothesis: fuzzing

_FUZZ_CHARS = "abcxy01 \t\n\r#()[]{}=&|^~,\"\\$._9" + "ANDORXT"
_TOKENS = ["input", "output", "circuit", "a", "b", "c[2]", "c[9]", "y", '"q"', "0", "1", "=",
           "&", "|", "^", "~", "(", ")", ",", "{", "}", "\n", " ", "AND", "not", "xor(", "#"]


def parses_or_tm2nn_error(text: str) -> None:
    try:
        out = p(text, "fuzz.circ")
    except Tm2nnError as e:
        e.render()
        return
    assert isinstance(out, list) and all(isinstance(c, Circuit) for c in out)
    for c in out:
        assert one(dump(c)) == c


@settings(max_examples=400, deadline=None)
@given(st.text(_FUZZ_CHARS, max_size=80))
def test_fuzz_random_text(text):
    parses_or_tm2nn_error(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=40))
def test_fuzz_token_soup(tokens):
    parses_or_tm2nn_error("".join(tokens))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_fuzz_any_unicode(text):
    parses_or_tm2nn_error(text)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=60))
def test_fuzz_bytes(data):
    try:
        parse(SourceText.register("fuzz.circ", data))
    except Tm2nnError as e:
        e.render()


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(EXAMPLE_FILES),
    st.lists(st.tuples(st.sampled_from(["del", "ins", "rep"]), st.floats(0, 1),
                       st.sampled_from(_TOKENS + list(_FUZZ_CHARS))), min_size=1, max_size=4),
)
def test_fuzz_mutated_examples(name, edits):
    text = (EXAMPLES / f"{name}.circ").read_text()
    for kind, where, s in edits:
        i = int(where * len(text))
        if kind == "del":
            text = text[:i] + text[i + len(s):]
        elif kind == "ins":
            text = text[:i] + s + text[i:]
        else:
            text = text[:i] + s + text[i + 1:]
    parses_or_tm2nn_error(text)


def test_deep_nesting_is_not_a_recursion_error():
    depth = 5000
    c = one("input a\noutput y\ny = " + "(" * depth + "~a" + ")" * depth + "\n")
    assert gates(c) == {("y", "NOT", ("a",))}
    c = one("input a\noutput y\ny = " + "NOT(" * depth + "a" + ")" * depth + "\n")
    assert len(c.gates) == depth
    val = {"a": True}
    for g in c.topo:
        val[g.name] = not val[g.inputs[0]]
    assert val["y"] == (depth % 2 == 0)
    c = one("input a\noutput y\ny = " + "~" * depth + "a\n")
    assert len(c.gates) == depth
