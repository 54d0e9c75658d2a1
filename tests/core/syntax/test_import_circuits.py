"""Circuit importers: ISCAS .bench, ASCII/binary AIGER, BLIF.

Corpus tests read ../shared/corpus (skipped when it is absent); the others build
their inputs here and check them against independent evaluations (textbook
formulas, a literal-level AIG evaluator, a cover-level BLIF evaluator).
"""

from __future__ import annotations

import functools
import random
import zlib
from pathlib import Path

import numpy as np
import pytest
from gen_circuits import varint  # bench/, on the path (conftest)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import circuits
from tm2nn.errors import Tm2nnError
from tm2nn.interp import eval_circuit, exhaustive_inputs, random_inputs, truth_table
from tm2nn.ir import Circuit, Gate
from tm2nn.source import SourceText
from tm2nn.syntax import aiger, aiger_binary, bench, blif, parse_text

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "corpus"
CIRCUITS = CORPUS / "circuits"
ISCAS = sorted((CIRCUITS / "iscas85").glob("*.bench")) if CORPUS.is_dir() else []
EPFL_AIG = sorted((CIRCUITS / "epfl").glob("*.aig")) if CORPUS.is_dir() else []
EPFL_BLIF = sorted((CIRCUITS / "epfl").glob("*.blif")) if CORPUS.is_dir() else []
AAG = sorted((CIRCUITS / "aiger_examples").glob("*.aag")) if CORPUS.is_dir() else []

PARSERS = {".bench": bench, ".aag": aiger, ".aig": aiger_binary, ".blif": blif}

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")


@functools.lru_cache(maxsize=None)
def load(path: Path) -> Circuit:
    [c] = PARSERS[path.suffix].parse(SourceText.from_file(path))
    assert isinstance(c, Circuit)
    return c


def parse_str(mod, text: str | bytes, path: str) -> Circuit:
    data = text.encode() if isinstance(text, str) else text
    [c] = mod.parse(SourceText.register(path, data))
    return c


def error_of(mod, text: str | bytes, path: str) -> Tm2nnError:
    with pytest.raises(Tm2nnError) as info:
        parse_str(mod, text, path)
    return info.value


def ints_to_bits(values, width: int) -> np.ndarray:
    return np.array([[(v >> i) & 1 for i in range(width)] for v in values], dtype=bool)


def bits_to_ints(bits: np.ndarray) -> list[int]:
    return [sum(1 << i for i, b in enumerate(row) if b) for row in bits]


# --------------------------------------------------------------------------- corpus: loading


@needs_corpus
def test_every_corpus_circuit_loads():
    files = ISCAS + EPFL_AIG + EPFL_BLIF + [p for p in AAG if p.stem != "toggle"]
    assert len(ISCAS) == 11 and len(EPFL_AIG) == 10 and len(EPFL_BLIF) == 10
    for path in files:
        [c] = PARSERS[path.suffix].parse(SourceText.from_file(path))
        assert c.name == path.stem
        assert c.outputs or path.stem == "empty"


@needs_corpus
@pytest.mark.parametrize("stem,n_in,n_out", [
    ("ctrl", 7, 26), ("dec", 8, 256), ("int2float", 11, 7), ("cavlc", 10, 11),
    ("router", 60, 30), ("adder", 256, 129), ("bar", 135, 128), ("max", 512, 130),
    ("voter", 1001, 1), ("multiplier", 128, 128),
])
def test_epfl_sizes(stem, n_in, n_out):
    for ext in (".aig", ".blif"):
        c = load(CIRCUITS / "epfl" / (stem + ext))
        assert (len(c.inputs), len(c.outputs)) == (n_in, n_out)
    aig = load(CIRCUITS / "epfl" / (stem + ".aig"))
    if stem == "multiplier":  # README: 27062 ANDs
        assert sum(g.op == "AND" for g in aig.gates) == 27062


# --------------------------------------------------------------------------- corpus: behaviour


@needs_corpus
def test_c17_truth_table():
    c = load(CIRCUITS / "iscas85" / "c17.bench")
    assert c.inputs == ("G1gat", "G2gat", "G3gat", "G6gat", "G7gat")
    assert c.outputs == ("G22gat", "G23gat")
    x = exhaustive_inputs(5)
    got = eval_circuit(c, x)

    def nand(a, b):
        return not (a and b)

    for row, out in zip(x, got, strict=True):
        g1, g2, g3, g6, g7 = map(bool, row)
        g10 = nand(g1, g3)
        g11 = nand(g3, g6)
        g16 = nand(g2, g11)
        g19 = nand(g11, g7)
        assert tuple(out) == (nand(g10, g16), nand(g16, g19))


@needs_corpus
def test_c6288_multiplies():
    c = load(CIRCUITS / "iscas85" / "c6288.bench")
    assert len(c.inputs) == 32 and len(c.outputs) == 32
    # README: the file lists P31 (N6287) before P30 (N6288); keep file order.
    assert c.outputs[-2:] == ("G6287gat", "G6288gat")
    rng = random.Random(6288)
    pairs = [(rng.getrandbits(16), rng.getrandbits(16)) for _ in range(1500)]
    pairs += [(0, 0), (0xFFFF, 0xFFFF), (1, 0xFFFF), (0xFFFF, 1), (0x8000, 0x8000)]
    x = np.hstack([ints_to_bits([a for a, _ in pairs], 16), ints_to_bits([b for _, b in pairs], 16)])
    out = eval_circuit(c, x)
    out = out[:, list(range(30)) + [31, 30]]  # P0..P29, then P30 (listed last), P31
    assert bits_to_ints(out) == [a * b for a, b in pairs]


@needs_corpus
@pytest.mark.parametrize("ext", [".aig", ".blif"])
def test_epfl_adder_adds(ext):
    c = load(CIRCUITS / "epfl" / ("adder" + ext))
    idx = {name: i for i, name in enumerate(c.inputs)}
    a_cols = [idx[f"a[{i}]"] for i in range(128)]
    b_cols = [idx[f"b[{i}]"] for i in range(128)]
    oidx = {name: i for i, name in enumerate(c.outputs)}
    f_cols = [oidx[f"f[{i}]"] for i in range(128)] + [oidx["cOut"]]
    rng = random.Random(128)
    pairs = [(rng.getrandbits(128), rng.getrandbits(128)) for _ in range(1000)]
    pairs += [(2**128 - 1, 1), (2**128 - 1, 2**128 - 1), (0, 0)]
    x = np.zeros((len(pairs), 256), dtype=bool)
    x[:, a_cols] = ints_to_bits([a for a, _ in pairs], 128)
    x[:, b_cols] = ints_to_bits([b for _, b in pairs], 128)
    out = eval_circuit(c, x)[:, f_cols]  # f + cOut * 2^128
    assert bits_to_ints(out) == [a + b for a, b in pairs]


@needs_corpus
@pytest.mark.parametrize("stem", ["ctrl", "dec", "int2float", "cavlc", "router", "adder",
                                  "bar", "max", "voter", "multiplier"])
def test_epfl_aig_and_blif_agree(stem):
    a = load(CIRCUITS / "epfl" / (stem + ".aig"))
    b = load(CIRCUITS / "epfl" / (stem + ".blif"))
    assert a.inputs == b.inputs and a.outputs == b.outputs  # names from the symbol table
    x = random_inputs(len(a.inputs), 10_000, seed=len(stem))
    assert np.array_equal(eval_circuit(a, x), eval_circuit(b, x))


AAG_TRUTH = {  # rows in exhaustive_inputs order (input 0 = low bit)
    "and": [[0], [0], [0], [1]],
    "or": [[0], [1], [1], [1]],
    "xor1": [[0], [1], [1], [0]],
    "halfadder": [[0, 0], [1, 0], [1, 0], [0, 1]],  # (s, c)
    "inverter": [[1], [0]],
    "buffer": [[0], [1]],
    "true": [[1]],
    "false": [[0]],
    "xorxormiter": [[0], [0], [0], [0]],
}


@needs_corpus
@pytest.mark.parametrize("stem", sorted(AAG_TRUTH))
def test_aiger_examples_truth_tables(stem):
    c = load(CIRCUITS / "aiger_examples" / (stem + ".aag"))
    assert truth_table(c).astype(int).tolist() == AAG_TRUTH[stem]
    if stem == "halfadder":
        assert c.inputs == ("x", "y") and c.outputs == ("s", "c")


@needs_corpus
def test_aiger_examples_empty_and_toggle():
    c = load(CIRCUITS / "aiger_examples" / "empty.aag")
    assert (c.inputs, c.outputs, c.gates) == ((), (), ())
    with pytest.raises(Tm2nnError) as info:
        aiger.parse(SourceText.from_file(CIRCUITS / "aiger_examples" / "toggle.aag"))
    e = info.value
    assert "latches (sequential) not supported yet" in e.message
    assert (e.line, e.col) == (1, 9)


@needs_corpus
@pytest.mark.parametrize("path", ISCAS, ids=lambda p: p.stem)
def test_bench_dump_round_trip_iscas(path):
    c = load(path)
    text = bench.dump(c)
    again = parse_str(bench, text, f"roundtrip/{path.name}")
    assert again == c
    assert again.outputs == c.outputs


@needs_corpus
def test_c499_and_c1355_compute_the_same_function():
    a = load(CIRCUITS / "iscas85" / "c499.bench")
    b = load(CIRCUITS / "iscas85" / "c1355.bench")
    x = random_inputs(41, 5000, seed=499)
    assert np.array_equal(eval_circuit(a, x), eval_circuit(b, x))


@needs_corpus
def test_truncated_aig_from_corpus():
    data = (CIRCUITS / "epfl" / "ctrl.aig").read_bytes()
    header_end = data.index(b"\n")
    outputs_end = header_end
    for _ in range(26):
        outputs_end = data.index(b"\n", outputs_end + 1)
    e = error_of(aiger_binary, data[: outputs_end + 1 + 100], "t/ctrl_cut.aig")
    assert "truncated" in e.message and "byte offset" in e.message
    assert e.line == 1
    e = error_of(aiger_binary, data[: outputs_end - 3], "t/ctrl_cut2.aig")
    assert "file ends early" in e.message


# --------------------------------------------------------------------------- .bench


def test_bench_syntax_variants():
    text = """# any case, any order, BUFF/BUF, any fan-in
INPUT(1)
input(2)
INPUT( 3 )
OUTPUT(22)
OUTPUT(1)
OUTPUT(vdd)
22 = nand(10, 16)    # trailing comment
10 = AND(1, 2, 3)
16 = Buff(n)
n = not(gnd)
x = NXOR(1, 2)
y = BUF(x)
"""
    c = parse_str(bench, text, "t/variants.bench")
    assert c.inputs == ("1", "2", "3")
    assert c.outputs == ("22", "1", "vdd")
    d = {g.name: g for g in c.gates}
    assert d["10"].op == "AND" and d["10"].inputs == ("1", "2", "3")
    assert d["16"].op == "BUF" and d["x"].op == "XNOR" and d["gnd"].op == "CONST0"
    assert d["vdd"].op == "CONST1" and d["22"].loc.line == 8
    tt = truth_table(c).astype(int)
    for j, row in enumerate(tt):
        a, b, cc = j & 1, j >> 1 & 1, j >> 2 & 1
        assert row.tolist() == [int(not (a and b and cc)), a, 1]


def loc_of(e: Tm2nnError):
    return e.line, e.col


@pytest.mark.parametrize("text,line,col,msg", [
    ("INPUT(a)\nOUTPUT(y)\ny = AND(a, b)\n", 3, 12, "undefined signal 'b'"),
    ("INPUT(a)\nOUTPUT(y)\ny = AND(a, z)\nz = NOT(y)\n", 3, 1, "combinational cycle"),
    ("INPUT(a)\nOUTPUT(q)\n\nq = DFF(a)\n", 4, 5,
     "sequential element DFF is not supported: tm2nn handles combinational circuits"),
    ("INPUT(a)\nOUTPUT(y)\ny = FOO(a)\n", 3, 5, "unknown gate type 'FOO'"),
    ("INPUT(a)\nOUTPUT(y)\ny = NOT(a)\ny = BUF(a)\n", 4, 1, "defined twice"),
    ("INPUT(a)\nOUTPUT(a)\na = NOT(a)\n", 3, 1, "is an input"),
    ("INPUT(a)\nOUTPUT(z)\ny = NOT(a)\n", 2, 8, "output 'z' is never defined"),
    ("INPUT(a)\nOUTPUT(y)\ny = NOT(a, a)\n", 3, 5, "exactly one input"),
    ("INPUT(a)\nOUTPUT(y)\ny = AND()\n", 3, 5, "at least one input"),
    ("INPUT(a)\nOUTPUT(y)\ny = AND(a b)\n", 3, 11, "expected ',' or ')'"),
    ("INPUT(a)\nOUTPUT(y)\ny = AND(a, b\n", 3, 13, "expected ',' or ')'"),
    ("INPUT(a\n", 1, 8, "expected ')'"),
    ("INPUT(a) x\n", 1, 10, "unexpected 'x'"),
    ("INPUT(a)\ny AND(a)\n", 2, 3, "missing '='"),
    ("INPUT(a)\n= AND(a)\n", 2, 1, "expected 'INPUT(name)'"),
    ("INPUT(a)\nOUTPUT(a)\nINPUT( a)\n", 3, 8, "input 'a' declared twice"),
])
def test_bench_errors(text, line, col, msg):
    e = error_of(bench, text, f"t/err{zlib.crc32(text.encode())}.bench")
    assert msg in e.message
    assert loc_of(e) == (line, col)
    assert e.file.startswith("t/err")
    rendered = e.render()
    assert f":{line}:{col}: error:" in rendered and "^" in rendered


def test_bench_dump_constants_and_collisions():
    c = Circuit("k", ("a",), ("z", "o", "gnd", "w"), (
        Gate("z", "CONST0", ()), Gate("o", "CONST1", ()), Gate("gnd", "NOT", ("a",)),
        Gate("w", "AND", ("z", "o", "gnd")),
    ))
    text = bench.dump(c)
    assert "z = CONST0()" in text  # "gnd" is taken by a NOT gate
    assert "o = BUFF(vdd)" in text
    again = parse_str(bench, text, "t/consts.bench")
    assert np.array_equal(truth_table(again), truth_table(c))
    c2 = Circuit("k", ("a",), ("gnd", "y"), (Gate("gnd", "CONST0", ()), Gate("y", "OR", ("a", "gnd"))))
    assert parse_str(bench, bench.dump(c2), "t/consts2/k.bench") == c2
    with pytest.raises(Tm2nnError, match="cannot be written"):
        bench.dump(Circuit("k", ("a b",), ("a b",), ()))


@settings(max_examples=150, deadline=None)
@given(circuits(max_inputs=5, max_gates=20))
def test_bench_dump_round_trip_random(c):
    again = parse_str(bench, bench.dump(c), "t/rand.bench")
    assert again.inputs == c.inputs and again.outputs == c.outputs
    assert np.array_equal(truth_table(again), truth_table(c))
    if not any(g.op in ("CONST0", "CONST1") for g in c.gates):
        assert again == c


# --------------------------------------------------------------------------- AIGER


def aig_eval(n_in: int, ands, outs, x: np.ndarray) -> np.ndarray:
    """Literal-level AIG semantics, independent of the importer."""
    val = {0: np.zeros(len(x), dtype=bool)}
    for i in range(n_in):
        val[i + 1] = x[:, i]
    lit = lambda v: val[v >> 1] ^ bool(v & 1)  # noqa: E731
    for lhs, r0, r1 in ands:
        val[lhs >> 1] = lit(r0) & lit(r1)
    return np.stack([lit(o) for o in outs], axis=1) if outs else np.zeros((len(x), 0), bool)


def aig_bytes(n_in: int, ands, outs, symbols: str = "", comment: bytes = b"") -> bytes:
    m = n_in + len(ands)
    head = f"aig {m} {n_in} 0 {len(outs)} {len(ands)}\n" + "".join(f"{o}\n" for o in outs)
    body = b"".join(varint(lhs - r0) + varint(r0 - r1) for lhs, r0, r1 in ands)
    return head.encode() + body + symbols.encode() + comment


def aag_text(n_in: int, ands, outs, symbols: str = "", order=None) -> str:
    m = n_in + len(ands)
    lines = [f"aag {m} {n_in} 0 {len(outs)} {len(ands)}"]
    lines += [str(2 * (i + 1)) for i in range(n_in)]
    lines += [str(o) for o in outs]
    order = order or range(len(ands))
    lines += [f"{ands[k][0]} {ands[k][1]} {ands[k][2]}" for k in order]
    return "\n".join(lines) + "\n" + symbols


NAME_POOL = ["i0", "i1", "o0", "o1", "n3", "n4", "not_i0", "not_n3", "x", "y", "const0", "a b"]


@st.composite
def aigs(draw):
    n_in = draw(st.integers(0, 4))
    ands = []
    for k in range(draw(st.integers(0, 8))):
        lhs = 2 * (n_in + k + 1)
        r0 = draw(st.integers(0, lhs - 1))
        r1 = draw(st.integers(0, r0))
        ands.append((lhs, r0, r1))
    top = 2 * (n_in + len(ands)) + 1
    outs = draw(st.lists(st.integers(0, top), max_size=5))
    # a symbol table that may collide with the generated names, never ambiguously
    names = draw(st.lists(st.sampled_from(NAME_POOL), unique=True,
                          max_size=min(len(NAME_POOL), n_in + len(outs))))
    slots = [("i", k) for k in range(n_in)] + [("o", k) for k in range(len(outs))]
    chosen = draw(st.permutations(slots))[: len(names)]
    syms = ""
    for (kind, k), nm in zip(chosen, names, strict=True):
        syms += f"{kind}{k} {nm}\n"
    if draw(st.booleans()):
        syms += "c\nsome comment\n"
    order = draw(st.permutations(range(len(ands))))
    return n_in, ands, outs, syms, order


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(aigs())
def test_aiger_ascii_and_binary_match_literal_semantics(spec):
    n_in, ands, outs, syms, order = spec
    try:
        a = parse_str(aiger, aag_text(n_in, ands, outs, syms, order), "t/rand.aag")
    except Tm2nnError as e:
        # the only legal refusal: a symbol names two different signals
        assert "name" in e.message
        with pytest.raises(Tm2nnError):
            parse_str(aiger_binary, aig_bytes(n_in, ands, outs, syms), "t/rand.aig")
        return
    b = parse_str(aiger_binary, aig_bytes(n_in, ands, outs, syms), "t/rand.aig")
    assert a.inputs == b.inputs and a.outputs == b.outputs
    assert len(a.inputs) == n_in and len(a.outputs) == len(outs)
    x = exhaustive_inputs(n_in)
    want = aig_eval(n_in, ands, outs, x)
    if outs:
        assert np.array_equal(eval_circuit(a, x), want)
        assert np.array_equal(eval_circuit(b, x), want)
    # negations are shared: at most one NOT per variable
    nots = [g.inputs for g in a.gates if g.op == "NOT"]
    assert len(nots) == len(set(nots))


def test_aiger_naming_and_sharing():
    text = "aag 4 2 0 4 2\n2\n4\n6\n7\n7\n2\n6 2 5\n8 3 5\ni0 x\no1 nx\n"
    c = parse_str(aiger, text, "t/naming.aag")
    assert c.inputs == ("x", "i1")
    assert c.outputs == ("o0", "nx", "o2", "o3")
    d = {g.name: g for g in c.gates}
    assert d["o0"].op == "AND" and d["o0"].inputs == ("x", "not_i1")
    assert d["nx"] == Gate("nx", "NOT", ("o0",))
    assert d["o2"] == Gate("o2", "BUF", ("nx",))  # the same literal as output 1
    assert d["o3"] == Gate("o3", "BUF", ("x",))  # an input, renamed
    assert d["n4"].inputs == ("not_x", "not_i1")
    # the 1.9 header with B = C = J = F = 0 is accepted
    c19 = parse_str(aiger, "aag 1 1 0 1 0 0 0 0 0\n2\n3\n", "t/ext.aag")
    assert c19.gates == (Gate("o0", "NOT", ("i0",)),)


def test_aiger_dispatches_on_header():
    """A file is read as its header says, whatever its format name (syntax.parse_text)."""
    data = aig_bytes(2, [(6, 4, 2)], [6])
    [a], [b] = parse_text(data, "aag", "t/a/x.aag"), parse_text(data, "aig", "t/b/x.aig")
    assert a == b == parse_str(aiger_binary, data, "t/c/x.aig")
    text = aag_text(2, [(6, 4, 2)], [7])
    assert parse_text(text, "aig", "t/really_ascii.aig")[0].gates[-1].op == "NOT"


@pytest.mark.parametrize("text,line,col,msg", [
    ("", 1, 1, "expected an AIGER header"),
    ("aig2 1 1 0 1 0\n", 1, 1, "expected an AIGER header"),
    ("aag 3 2 0 1\n2\n4\n", 1, 12, "missing A"),
    ("aag 3 2 0 1 x\n", 1, 13, "must be a non-negative integer"),
    ("aag 3 2 0 1 " + "9" * 5000 + "\n", 1, 13, "5000 digits"),
    ("aag 3 2 0 1 1\n2\n4\n" + "8" * 5000 + "\n", 4, 1, "5000 digits"),
    ("aag 1 2 0 0 0\n2\n4\n", 1, 5, "M = 1 is too small"),
    ("aag 1 0 1 2 0\n2 3\n2\n3\n", 1, 9, "latches (sequential) not supported yet"),
    ("aag 1 1 0 0 0 1\n2\n3\n", 1, 15, "bad-state properties"),
    ("aag 1 1 0 0 0 0 0 1\n2\n", 1, 19, "justice"),
    ("aag 1 1 0 0 0 0 0 0 0 0\n2\n", 1, 23, "too many numbers"),
    ("aag 3 2 0 1 1\n2\n4\n6\n7 2 4\n", 5, 1, "odd"),
    ("aag 3 2 0 1 1\n2\n2\n6\n6 2 4\n", 3, 1, "defined twice"),
    ("aag 3 2 0 1 1\n2\n4\n6\n4 2 2\n", 5, 1, "defined twice"),
    ("aag 5 2 0 1 1\n2\n4\n6\n6 2 8\n", 5, 5, "undefined literal 8"),
    ("aag 5 2 0 1 1\n2\n4\n10\n6 2 4\n", 4, 1, "undefined literal 10"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2 9\n", 5, 5, "exceeds the maximum"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2\n", 5, 4, "expected 3 literals"),
    ("aag 3 2 0 1 1\n2\n4\n6\n", 4, 2, "file ends early"),
    ("aag 3 2 0 1 1\n2\n0\n6\n6 2 4\n", 3, 1, "constant FALSE"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2 4\ni2 x\n", 6, 2, "out of range"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2 4\ni0 x\ni0 y\n", 7, 1, "second symbol"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2 4\nl0 x\n", 6, 1, "no latches"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2 4\nix x\n", 6, 2, "needs a position"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2 4\ni0\n", 6, 3, "has no name"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2 4\nhello\n", 6, 1, "expected a symbol table entry"),
    ("aag 3 2 0 1 1\n2\n4\n6\n6 2 4\ni0 x\ni1 x\n", 7, 4, "two inputs are named 'x'"),
    ("aag 3 2 0 2 1\n2\n4\n6\n2\ni0 x\no0 x\n6 2 4\n", 6, 5, "expected 3 literals"),
    ("aag 3 2 0 2 1\n2\n4\n6\n2\n6 2 4\ni0 x\no0 x\n", 8, 4, "different signal"),
    ("aag 3 1 0 1 1\n2\n6\n6 6 2\n", 4, 1, "combinational cycle"),
])
def test_aiger_ascii_errors(text, line, col, msg):
    e = error_of(aiger, text, f"t/aerr{zlib.crc32(text.encode())}.aag")
    assert msg in e.message
    assert loc_of(e) == (line, col)


def test_aiger_binary_errors():
    good = aig_bytes(2, [(6, 4, 2), (8, 6, 3)], [8, 7])
    c = parse_str(aiger_binary, good, "t/good.aig")
    assert c.outputs == ("o0", "o1")
    head = b"aig 4 2 0 2 2\n8\n7\n"
    cases = [
        (head + b"\x02", "truncated", "byte offset 19"),  # delta1 of gate 0 missing
        (head + b"\x02\x02\x02", "truncated", "AND gate 1"),
        (head + b"\x82", "truncated", "byte offset 18"),
        (head + b"\x07\x00", "delta0 = 7", "out of range 1..6"),
        (head + b"\x00\x00", "delta0 = 0", "byte offset 18"),
        (head + b"\x02\x05", "delta1 = 5", "exceeds rhs0 = 4"),
        (head + b"\x80" * 12, "malformed varint", "byte offset 18"),
        (b"aig 5 2 0 2 2\n8\n7\n\x02\x02\x02\x02", "M = I + L + A", ""),
        (b"aig 4 2 0 2 2\n8\n", "file ends early", ""),
        (b"aig 4 2 0 2 2\n8\n7 1\n", "one output literal", ""),
        (b"aig 4 2 0 2 2\n8\n10\n", "exceeds the maximum", ""),
        (b"aig 4 2 0 2 2", "must end with a newline", ""),
        (b"aig 2000000 2000000 0 0 0\n", "more than tm2nn accepts", ""),
        (head + b"\x02\x02\x02\x01i5 x\n", "out of range", ""),
    ]
    for k, (data, m1, m2) in enumerate(cases):
        e = error_of(aiger_binary, data, f"t/berr{k}.aig")
        assert m1 in e.message and m2 in e.message, (data, e.message)
        assert e.file == f"t/berr{k}.aig" and e.line is not None
    e = error_of(aiger_binary, head + b"\x02", "t/trunc.aig")
    assert (e.line, e.col) == (1, 13)  # the header's A field
    assert e.snippet == "aig 4 2 0 2 2"


def test_aiger_binary_symbols_and_comments():
    data = aig_bytes(2, [(6, 4, 2)], [6, 7], "i0 a\ni1 b[1]\no1 not and\n",
                     b"c\n\x00\xff\xfe binary comment\n")
    c = parse_str(aiger_binary, data, "t/syms.aig")
    assert c.inputs == ("a", "b[1]") and c.outputs == ("o0", "not and")
    # the symbol table may start right after a binary byte 0x0a ('\n')
    data = aig_bytes(5, [(12, 11, 1)], [12], "i0 q\n")
    assert parse_str(aiger_binary, data, "t/syms2.aig").inputs[0] == "q"
    e = error_of(aiger_binary, aig_bytes(1, [(4, 2, 2)], [4], "q0 x\n"), "t/syms3.aig")
    assert "expected a symbol table entry" in e.message and e.snippet is not None


# --------------------------------------------------------------------------- BLIF


def cover_eval(rows: list[str], n: int, args: list[np.ndarray], size: int) -> np.ndarray:
    """Cover semantics, independent of the importer: on-set or off-set of cubes."""
    if not rows:
        return np.zeros(size, dtype=bool)
    hit = np.zeros(size, dtype=bool)
    for row in rows:
        plane, out = (row.split() + [""])[:2] if n else ("", row.strip())
        m = np.ones(size, dtype=bool)
        for ch, a in zip(plane, args, strict=True):
            if ch != "-":
                m &= a if ch == "1" else ~a
        hit |= m
    return hit if out == "1" else ~hit


BLIF_NAMES = ["a", "b", "c~n", "y~0", "a~n", "y", "z", "n1", "w[3]", "v~~"]


@st.composite
def blifs(draw):
    n_in = draw(st.integers(1, 4))
    pool = list(BLIF_NAMES)
    draw(st.randoms()).shuffle(pool)
    inputs, rest = pool[:n_in], pool[n_in:]
    covers = []
    signals = list(inputs)
    for y in rest[: draw(st.integers(1, len(rest)))]:
        ins = draw(st.lists(st.sampled_from(signals), max_size=3))
        value = draw(st.sampled_from("01"))
        n_rows = draw(st.integers(0, 3))
        rows = []
        for _ in range(n_rows):
            plane = "".join(draw(st.sampled_from("01-")) for _ in ins)
            rows.append(f"{plane} {value}" if ins else value)
        covers.append((ins, y, rows))
        signals.append(y)
    outs = draw(st.lists(st.sampled_from(signals), min_size=1, max_size=4))
    order = draw(st.permutations(covers))
    return inputs, covers, outs, order


def blif_text(inputs, outs, covers, continuation=False):
    sep = " \\\n  " if continuation else " "
    lines = [".model rand", ".inputs" + sep + sep.join(inputs), ".outputs " + " ".join(outs)]
    for ins, y, rows in covers:
        lines.append(".names " + " ".join(ins + [y]) + ("  # comment" if continuation else ""))
        lines += rows
    return "\n".join(lines + [".end", ""])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blifs(), st.booleans())
def test_blif_matches_cover_semantics(spec, continuation):
    inputs, covers, outs, order = spec
    c = parse_str(blif, blif_text(inputs, outs, order, continuation), "t/rand.blif")
    assert c.inputs == tuple(inputs) and c.outputs == tuple(outs)
    x = exhaustive_inputs(len(inputs))
    val = {s: x[:, i] for i, s in enumerate(inputs)}
    for ins, y, rows in covers:
        val[y] = cover_eval(rows, len(ins), [val[s] for s in ins], len(x))
    want = np.stack([val[o] for o in outs], axis=1)
    assert np.array_equal(eval_circuit(c, x), want)


def test_blif_lowering_shapes():
    text = """.model m
.inputs a b \\
  c
.outputs y0 y1 y2 y3 y4 y5 y6 k0 k1 a
.names a b y0
11 1
.names a b y1
00 1
.names a b y2
00 0
.names a y3
0 1
.names a b c y4
1-0 1
-11 1
.names y5
.names y6
1
.names a b k0
0- 0
.names k1
 0
.end
.model ignored
.latch a b
.end
"""
    c = parse_str(blif, text, "t/shapes.blif")
    d = {g.name: g for g in c.gates}
    assert d["y0"] == Gate("y0", "AND", ("a", "b"))
    assert d["y1"] == Gate("y1", "NOR", ("a", "b"))
    assert d["y2"] == Gate("y2", "OR", ("a", "b"))
    assert d["y3"] == Gate("y3", "NOT", ("a",))
    assert d["y4"] == Gate("y4", "OR", ("y4~0", "y4~1"))
    assert d["y4~0"] == Gate("y4~0", "AND", ("a", "c~n"))
    assert d["y5"].op == "CONST0" and d["y6"].op == "CONST1" and d["k1"].op == "CONST0"
    assert d["k0"] == Gate("k0", "BUF", ("a",))
    assert d["y0"].loc.line == 5 and d["y0"].loc.col == 12
    assert c.port_locs["c"].line == 3


@pytest.mark.parametrize("text,line,col,msg", [
    (".model m\n.inputs a\n.outputs y\n.names a b y\n11 1\n.end\n", 4, 10, "undefined signal 'b'"),
    (".model m\n.inputs a\n.outputs y z\n.names a y\n1 1\n.end\n", 3, 12, "output 'z' is never defined"),
    (".model m\n.inputs a\n.outputs y\n.latch a y 0\n.end\n", 4, 1, "sequential element .latch"),
    (".model m\n.inputs a\n.outputs y\n.subckt f x=a y=y\n.end\n", 4, 1, ".subckt is not supported"),
    (".model m\n.inputs a\n.outputs y\n.gate and2 A=a B=a O=y\n.end\n", 4, 1, ".gate is not"),
    (".model m\n.inputs a\n.outputs y\n.mlatch x a y 0\n.end\n", 4, 1, "sequential"),
    (".model m\n.inputs a b\n.outputs y\n.names a b y\n11 1\n00 0\n", 6, 4, "mixes on-set"),
    (".model m\n.inputs a b\n.outputs y\n.names a b y\n1 1\n", 5, 1, "1 input column(s)"),
    (".model m\n.inputs a b\n.outputs y\n.names a b y\n1x 1\n", 5, 2, "not 'x'"),
    (".model m\n.inputs a b\n.outputs y\n.names a b y\n11 2\n", 5, 4, "output column"),
    (".model m\n.inputs a b\n.outputs y\n.names a b y\n11\n", 5, 3, "found 1 field"),
    (".model m\n.inputs a\n.outputs y\n.names y\n1 1\n", 5, 3, "rows of one column"),
    (".model m\n.inputs a\n.outputs y\n11 1\n", 4, 1, "cover rows must follow a .names"),
    (".model m\n.inputs a\n.outputs y\n.names\n", 4, 1, "at least an output"),
    (".model m\n.inputs a\n.outputs y\n.frob\n", 4, 1, "unknown BLIF directive"),
    (".model m\n.inputs a\n.outputs y\n.exdc\n", 4, 1, "don't-care"),
    (".model m\n.inputs a\n.outputs y\n.names a y\n1 1\n.names a y\n0 1\n", 6, 10, "defined twice"),
    (".model m\n.inputs a\n.outputs y\n.names y y\n1 1\n", 4, 10, "combinational cycle"),
    (".model m\n.inputs a \\\n b\n.outputs y\n.names a \\\n c y\n11 1\n", 6, 2, "undefined signal 'c'"),
    (".model m\n.inputs a b\n.outputs a\n.inputs c a\n", 4, 11, "input 'a' declared twice"),
])
def test_blif_errors(text, line, col, msg):
    e = error_of(blif, text, f"t/berr{zlib.crc32(text.encode())}.blif")
    assert msg in e.message
    assert loc_of(e) == (line, col)


# --------------------------------------------------------------------------- fuzz


def _only_tm2nn_errors(mod, data: bytes, path: str) -> None:
    try:
        out = mod.parse(SourceText.register(path, data))
    except Tm2nnError as e:
        e.render()
        return
    assert len(out) == 1 and isinstance(out[0], Circuit)


SEEDS = {
    bench: b"INPUT(a)\nINPUT(b)\nOUTPUT(y)\n# c\ny = nand(a, t)\nt = BUFF(b)\nz = XOR(a, gnd)\n",
    aiger: b"aag 7 2 0 2 3\n2\n4\n6\n12\n6 13 15\n12 2 4\n14 3 5\ni0 x\ni1 y\no0 s\no1 c\nc\nhalf\n",
    aiger_binary: aig_bytes(2, [(6, 4, 2), (8, 6, 3), (10, 9, 7)], [10, 1, 8], "i0 a\no1 k\n",
                            b"c\nhello\n"),
    blif: b".model m\n.inputs a b \\\n c\n.outputs y z\n.names a b t\n1- 1\n-0 1\n"
          b".names t c y\n00 0\n.names z\n 0\n.end\n",
}
TOKENS = [b"(", b")", b",", b"=", b"\n", b"\\\n", b" ", b"0", b"1", b"2", b"7", b"-", b"#",
          b"99999999999999999999", b".names", b".latch", b".end", b".model", b"aig", b"aag",
          b"\x80", b"\xff", b"\x00", b"i0 ", b"o0 ", b"c\n", b"DFF", b"gnd", b"vdd", b"\r\n",
          b"\t", b"\xc3\xa9", b"\x0c"]


@st.composite
def mutated(draw, seed: bytes):
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "truncate", "dup"]))
        if kind == "insert":
            data[pos:pos] = draw(st.sampled_from(TOKENS))
        elif kind == "delete":
            del data[pos: pos + draw(st.integers(1, 8))]
        elif kind == "replace" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "dup":
            end = min(len(data), pos + draw(st.integers(1, 20)))
            data[pos:pos] = data[pos:end]
    return bytes(data)


@pytest.mark.parametrize("mod", [bench, aiger, aiger_binary, blif], ids=lambda m: m.__name__)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutated_snippets(mod, data):
    _only_tm2nn_errors(mod, data.draw(mutated(SEEDS[mod])), f"fuzz/m.{mod.__name__}")


@pytest.mark.parametrize("mod", [bench, aiger, aiger_binary, blif], ids=lambda m: m.__name__)
@settings(max_examples=200, deadline=None)
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_fuzz_random_input(mod, raw):
    _only_tm2nn_errors(mod, raw, f"fuzz/r.{mod.__name__}")


@needs_corpus
@pytest.mark.parametrize("path", [CIRCUITS / "iscas85" / "c432.bench",
                                  CIRCUITS / "epfl" / "ctrl.aig",
                                  CIRCUITS / "epfl" / "router.blif",
                                  CIRCUITS / "aiger_examples" / "halfadder.aag"],
                         ids=lambda p: p.name)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutated_corpus_files(path, data):
    _only_tm2nn_errors(PARSERS[path.suffix], data.draw(mutated(path.read_bytes())),
                       f"fuzz/c{path.suffix}")
