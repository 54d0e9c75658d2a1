"""Fuzz every parser with mutated example files (issue 23): byte and line edits of one
seed file per format (the examples, plus texts written by tm2nn's own writers and by
bench/gen_circuits.py, so the suite needs no corpus), run through ``tm2nn check`` and,
for what still parses, ``tm2nn run``.  The only outcomes allowed are exit 0, 1 or 2 with
tm2nn's own message (tests/fuzzing.py): a located error, never another exception or a
hang.
"""

from __future__ import annotations

from pathlib import Path

from gen_circuits import aag_text, aig_bytes, blif_text  # bench/, on the path (conftest)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing import FUZZ_MEMORY, LONG_FACTOR, assert_clean, long_profile, run_case

ROOT = Path(__file__).resolve().parents[3]
EX = ROOT / "examples"

MORPHETT = b"""; 4-state busy beaver
0 * * * a

a _ 1 r b
a 1 1 l b
b _ 1 l a
b 1 _ l c
c _ 1 r halt
c 1 1 l d
d _ 1 r d
d 1 _ r a
"""
TMIO = b"""name: 3-state busy beaver
input: ''
blank: '0'
start state: A
table:
  A:
    0: {write: 1, R: B}
    1: {L: C}
  B:
    0: {write: 1, L: A}
    1: R
  C:
    0: {write: 1, L: B}
    1: {R: H}
  H:
"""
STD = b"1RB1LB_1LA1RZ Halt 6 4\n1RB1RZ_1LB1LA Halt 6 3\n1RB0LB_1LA1RZ\n"
C17 = b"""# c17
INPUT(G1gat)
INPUT(G2gat)
INPUT(G3gat)
INPUT(G6gat)
INPUT(G7gat)
OUTPUT(G22gat)
OUTPUT(G23gat)

G10gat = nand(G1gat, G3gat)
G11gat = nand(G3gat, G6gat)
G16gat = nand(G2gat, G11gat)
G19gat = nand(G11gat, G7gat)
G22gat = nand(G10gat, G16gat)
G23gat = NAND(G16gat, G19gat)
"""

#: Tokens a mutation may insert: the formats' own keywords and punctuation, and numbers
#: that a parser must bound before it allocates.
TOKENS = [b"->", b"=>", b"=", b"(", b")", b"{", b"}", b"[", b"]", b",", b":", b";", b"#", b"\\", b"\n", b"\r\n",
          b"\t", b" ", b"\x00", b"\xff", b"\xe2\x80\x8b", b"machine", b"circuit", b"input", b"output", b"alphabet:",
          b"blank:", b"states:", b"start:", b"halt:", b"AND(", b"NOT(", b"XOR", b"INPUT(", b"OUTPUT(", b"DFF(",
          b".model", b".inputs", b".outputs", b".names", b".latch", b".end", b".subckt", b"aag", b"aig", b"table:",
          b"write:", b"R", b"L", b"S", b"_", b"*", b"0", b"1", b"-1", b"999999999", b"4294967296",
          b"18446744073709551616", b"1" * 400, b"(" * 300, b"a" * 1000, b"c[99999999]", b"x[4294967295]",
          b"\"", b"'", b"\\u{110000}", b"learner", b"noisy", b"&", b"|", b"^", b"~",
          b"\xef\xbb\xbf", b"\r", b"\xd0\x90", b"~" * 300]


def seeds() -> list[tuple[str, bytes]]:
    """(extension, bytes) of every seed file: each format at least once."""
    from tm2nn.syntax import dump, load

    out = [(p.suffix, p.read_bytes()) for p in sorted(EX.glob("*.tm")) + sorted(EX.glob("*.circ"))]
    out += [(".std", dump(load(EX / "bb3.tm"), "std").encode()), (".std", STD), (".morphett", MORPHETT),
            (".yaml", TMIO), (".bench", C17), (".bench", dump(load(EX / "full_adder.circ"), "bench").encode())]
    for name in ("full_adder.circ", "comparator4.circ"):
        c = load(EX / name)
        out += [(".blif", blif_text(c).encode()), (".aag", aag_text(c).encode()), (".aig", aig_bytes(c))]
    # hostile files of issue 40: a byte order mark, old Mac and Windows line ends, look-alike
    # names, a deep one-line expression (small), and a word over the 4 KiB cap (HOSTILE)
    bb3 = (EX / "bb3.tm").read_bytes()
    adder = (EX / "full_adder.circ").read_bytes()
    out += [(".tm", b"\xef\xbb\xbf" + bb3), (".circ", adder.replace(b"\n", b"\r")),
            (".bench", C17.replace(b"\n", b"\r\n")), (".morphett", b"\xef\xbb\xbf" + MORPHETT.replace(b"\n", b"\r")),
            (".tm", "machine m {\n  start: A\n  halt: h\n  A 0 -> 1 R \u0410\n  \u0410 0 -> 1 R h\n}\n".encode()),
            (".circ", b"input a\noutput y\ny = " + b"NOT(" * 300 + b"~" * 300 + b"a" + b")" * 300 + b"\n")]
    return out


SEEDS = seeds()
#: Seeds that are errors as they stand (a mutation may make them valid).
HOSTILE = [(".tm", b"machine m {\n  start: " + b"q" * 5000 + b"\n  halt: h\n}\n"),
           (".circ", b"input " + b"a" * 5000 + b"\noutput y\ny = NOT(a)\n")]


@st.composite
def mutated(draw):
    """A seed file after 1 to 4 random edits: ``(extension, bytes)``."""
    ext, data = draw(st.sampled_from(SEEDS + HOSTILE))
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        n = len(data)
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, min(n, i + 64)))
        kind = draw(st.sampled_from(["delete", "insert", "token", "byte", "truncate", "dup_line", "swap_lines",
                                     "digit"]))
        if kind == "delete":
            del data[i:j]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "token":
            data[i:i] = draw(st.sampled_from(TOKENS))
        elif kind == "byte" and n:
            data[min(i, n - 1)] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[i:]
        elif kind in ("dup_line", "swap_lines"):
            lines = bytes(data).split(b"\n")
            a = draw(st.integers(0, len(lines) - 1))
            b = draw(st.integers(0, len(lines) - 1))
            if kind == "dup_line":
                lines.insert(b, lines[a])
            else:
                lines[a], lines[b] = lines[b], lines[a]
            data = bytearray(b"\n".join(lines))
        elif kind == "digit":  # a number in the file made huge, negative or zero
            digits = [k for k in range(n) if 48 <= data[k] <= 57]
            if digits:
                k = draw(st.sampled_from(digits))
                data[k:k + 1] = draw(st.sampled_from([b"99999999999", b"0", b"-1", b"4294967296", b"00"]))
    return ext, bytes(data)


def _fuzz(n: int, tmp_path: Path):
    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large])
    @given(mutated(), st.booleans())
    def case(file, also_run):
        ext, data = file
        path = tmp_path / f"fuzz{ext}"
        path.write_bytes(data)
        argv = ["check", path, "--all", "--max-memory", FUZZ_MEMORY]
        code, out, err, _ = run_case(argv)
        assert_clean(code, out, err, argv)
        if code == 0 and also_run:
            argv = ["run", path, "--max-steps", "2000", "--max-memory", FUZZ_MEMORY]
            code, out, err, _ = run_case(argv)
            assert_clean(code, out, err, argv)
    case()


def test_every_format_has_a_seed():
    from tm2nn.syntax import EXTENSIONS, FORMATS

    have = {EXTENSIONS[ext] for ext, _ in SEEDS}
    assert have == set(FORMATS)


def test_seeds_parse():
    """The fuzz starts from valid files (else it would only test the first error)."""
    from tm2nn.syntax import EXTENSIONS, parse_text

    for ext, data in SEEDS:
        assert parse_text(data, EXTENSIONS[ext], f"seed{ext}")


#: cases of the fast profile (run with the suite: about 12 ms each, so 500 cost 6 s of its
#: time); the long profile (make fuzz) keeps its 14,000, the count before the fast one was cut
FAST_CASES = 500
LONG_CASES = 1400 * LONG_FACTOR


def test_fuzz_parsers(tmp_path):
    _fuzz(FAST_CASES, tmp_path)


@long_profile
def test_fuzz_parsers_long(tmp_path):
    _fuzz(LONG_CASES, tmp_path)
