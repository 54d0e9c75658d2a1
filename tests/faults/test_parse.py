"""Parsers under hostile sources (issue 40, points 6, 7, 8 and 10): what a parse may cost
is estimated and refused before it starts, a long word is a located error, running out of
memory mid-parse is one line, a look-alike name is a warning, and a byte order mark or
old line ends read as the text they hold."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.core.syntax.test_fuzz_parsers import SEEDS
from tm2nn import limits
from tm2nn.errors import Tm2nnError
from tm2nn.lint import check_report
from tm2nn.syntax import EXTENSIONS, dump, parse_text

ROOT = Path(__file__).resolve().parents[2]
#: What starting tm2nn costs before it reads anything (Python, lark, numpy), which the
#: memory limit does not cover (tm2nn/syntax/budget.py, docs/formats.md).
STARTUP_RSS = 100 * 2**20

#: One seed per text format (binary AIGER is read byte for byte).
TEXT_SEEDS = {EXTENSIONS[ext]: data for ext, data in reversed(SEEDS) if ext != ".aig"}


def _rules_tm(n: int) -> str:
    rules = "".join(f"  q{i} 0 -> 1 R q{i + 1}\n" for i in range(n))
    return f"machine m {{\n  start: q0\n  halt: h\n{rules}  q{n} 0 -> 1 R h\n}}\n"


#: ``tm2nn.cli`` that reports its own peak RSS last (VmHWM: of this program only; the
#: rusage of a child counts the forked test process it started as).
_MEASURED = ("import sys\nfrom tm2nn.cli import main\nrc = main(sys.argv[1:])\n"
             "hwm = [x for x in open('/proc/self/status') if x.startswith('VmHWM')][0].split()[1]\n"
             "sys.stderr.write('VmHWM ' + hwm + '\\n')\nsys.exit(rc)")


def _cli(argv, *, env=None, cap: int | None = None, timeout: float = 120):
    """``(code, stderr, seconds, peak RSS bytes or None)`` of ``tm2nn ARGV`` in a new
    process, under an address-space cap of ``cap`` bytes."""
    def limit():
        if cap:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    t = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", _MEASURED, *map(str, argv)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, env=env, preexec_fn=limit, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tm2nn {argv[0]} ran past {timeout} s")
    err, rss = p.stderr.decode(), None
    if err.rstrip().splitlines()[-1:] and err.rstrip().splitlines()[-1].startswith("VmHWM "):
        lines = err.rstrip().splitlines()
        rss, err = int(lines[-1].split()[1]) * 1024, "\n".join(lines[:-1])
    return p.returncode, err, time.monotonic() - t, rss


def _one_line(err: str) -> str:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def memory_limit():
    def set_to(nbytes):
        limits.set_memory_limit(nbytes)
    yield set_to
    limits.set_memory_limit(None)


# -- point 6: memory estimated before parsing, names capped -------------------------------------
@pytest.mark.parametrize("fmt, text", [
    ("tm", "machine m {{\n  start: {w}\n  halt: h\n  {w} 0 -> 1 R h\n}}\n"),
    ("circ", "input a\noutput y\ny = NOT({w})\n"),
    ("bench", "INPUT(a)\nOUTPUT(y)\ny = NOT({w})\n"),
    ("blif", ".model m\n.inputs {w}\n.outputs y\n.names {w} y\n0 1\n.end\n"),
    ("aag", "aag 1 1 0 1 0\n2\n3\ni0 {w}\n"),
    ("morphett", "0 0 1 r {w}\n"),
    ("tmio", "name: x\nblank: '0'\nstart state: {w}\ntable:\n  {w}:\n"),
    ("std", "1RB1LB_1LA1RZ {w}\n"),
])
def test_a_word_over_4_KiB_is_a_located_error(fmt, text):
    """issue 40, point 6: a 100 MB state name took 6.7 GB to parse; every text format now
    refuses a word over 4,096 bytes at its first character, before parsing."""
    w = "s" * 4097
    with pytest.raises(Tm2nnError) as info:
        parse_text(text.format(w=w), fmt, f"long.{fmt}")
    e = info.value
    assert "a word of 4,097 bytes, over the 4,096" in e.message, e.render()
    line = text.format(w=w).count("\n", 0, text.format(w=w).index(w)) + 1
    assert (e.line, e.col) == (line, text.format(w=w).splitlines()[line - 1].index(w) + 1)
    assert e.render().splitlines()[2].strip() == "^"
    # 4,096 bytes is still a name
    parse_text(text.format(w="s" * 4096), fmt, f"ok.{fmt}") if fmt == "tm" else None


def test_a_parse_over_the_memory_limit_is_refused_before_it_starts(memory_limit, monkeypatch):
    """issue 40, points 6 and 8: a 40 MB .tm with 10^7 rules ran out of memory mid-parse;
    the parse is now estimated from the source and refused over the limit, naming the
    estimate and the flag, before any token is read."""
    import tm2nn.syntax.tm_dsl as tm_dsl

    text = _rules_tm(20_000)  # 0.5 MB
    memory_limit(50 * 2**20)
    monkeypatch.setattr(tm_dsl, "parse", lambda src: pytest.fail("parsed past the estimate"))
    with pytest.raises(Tm2nnError) as info:
        parse_text(text, "tm", "rules.tm")
    msg = info.value.message
    assert msg.startswith("reading rules.tm (") and "would need about" in msg, msg
    assert "over the limit of 50.0 MiB" in msg and "--max-memory" in str(info.value.for_cli(lambda n: n))


def test_a_deep_circ_expression_is_refused_by_its_estimate(memory_limit):
    """issue 40, points 6 and 7: the .circ grammar costs about 1 KB per operator
    (`~~~...a`), so it is estimated by its operators, not only its bytes."""
    text = "input a\noutput y\ny = " + "~" * 200_000 + "a\n"
    memory_limit(100 * 2**20)
    with pytest.raises(Tm2nnError, match=r"would need about .* over the limit of 100\.0 MiB"):
        parse_text(text, "circ", "deep.circ")


def test_peak_rss_stays_within_the_limit(tmp_path):
    """issue 40, point 6: with TM2NN_MAX_MEMORY=200M a parse that would need more is
    refused at once, and one under it parses, each within the limit plus the start-up
    cost (measured: the refused 2.4 MB .tm took ~0.5 GB and exited 0 before)."""
    big, small = tmp_path / "big.tm", tmp_path / "small.tm"
    big.write_text(_rules_tm(100_000))
    small.write_text(_rules_tm(2_000))
    env = {"TM2NN_MAX_MEMORY": "200M"}
    code, err, secs, rss = _cli(["check", big], env=env)
    assert code == 2 and "would need about" in _one_line(err) and "--max-memory" in err, err
    assert rss < STARTUP_RSS, rss / 2**20
    code, err, secs, rss = _cli(["check", small], env=env)
    assert code == 0, err
    assert rss < STARTUP_RSS + 200 * 2**20, rss / 2**20


# -- point 7: a long one-line expression under an address-space cap -----------------------------
def test_a_long_one_line_expression_under_a_cap_is_one_error(tmp_path):
    """issue 40, point 7: a one-line .circ expression of 30 MB crashed (SIGSEGV) under a
    3 GiB cap.  A 10 MB one (2,000,000 levels of NOT) under a 2 GiB cap is now refused at
    once with the estimate; before, it parsed for ~50 s into 1.7 GB (and, at 30 MB, ran
    out of memory after ~35 s with no location)."""
    f = tmp_path / "deep.circ"
    n = 2_000_000
    f.write_text("input a\noutput y\ny = " + "NOT(" * n + "a" + ")" * n + "\n")
    code, err, secs, _ = _cli(["check", f], cap=2 * 2**30, timeout=30)
    assert code == 2, (code, err)
    line = _one_line(err)
    assert "would need about" in line and "--max-memory" in line, line
    assert secs < 15, secs


def test_a_deep_expression_goes_through_every_later_walk():
    """issue 40, point 7: what the parser accepts, nothing after it recurses on: a
    20,000-deep expression parses, prints, converts, evaluates and is summarised."""
    from tm2nn.api import run_circuit

    n = 20_000
    text = "input a\noutput y\ny = " + "NOT(" * n + "a" + ")" * n + "\n"
    (c,) = parse_text(text, "circ", "deep.circ")
    assert len(c.gates) == n
    again = parse_text(dump(c, "circ"), "circ", "again.circ")[0]
    assert again == c
    assert parse_text(dump(c, "bench"), "bench", "deep.bench")[0].outputs == ("y",)
    assert run_circuit(c, "1")["outputs"] == "1"
    assert c.depth == n


# -- point 8: out of memory mid-parse is one error ----------------------------------------------
def test_out_of_memory_mid_parse_is_one_tm2nn_error(monkeypatch, run_cli, tmp_path):
    """issue 40, point 8: a MemoryError past the estimate (a machine with less memory than it
    reports) became a chained traceback; it is now one tm2nn error, exit 2."""
    import tm2nn.syntax.tm_dsl as tm_dsl

    def exhausted(src):
        raise MemoryError
    monkeypatch.setattr(tm_dsl, "parse", exhausted)
    with pytest.raises(Tm2nnError, match=r"out of memory while reading m\.tm"):
        parse_text(_rules_tm(3), "tm", "m.tm")
    f = tmp_path / "m.tm"
    f.write_text(_rules_tm(3))
    r = run_cli("check", f)
    assert r.code == 2 and _one_line(r.err).startswith("tm2nn: error: out of memory while reading"), r.err


# -- point 10: look-alike names, byte order marks, line ends ------------------------------------
HOMOGLYPH_TM = """machine m {
  start: A
  halt: done
  A 0 -> 1 R \u0410
  \u0410 0 -> 1 R done
  A _ -> 1 R p\u0410ss
  p\u0410ss _ -> 1 R done
}
"""


def test_a_cyrillic_state_beside_a_latin_one_is_a_warning(tmp_path):
    """issue 40, point 10: a Cyrillic А (U+0410) state beside a Latin A passed check with no
    warning; it is now a located warning, as is a name mixing scripts."""
    f = tmp_path / "homo.tm"
    f.write_text(HOMOGLYPH_TM)
    _, diags = check_report(f)
    warned = [d for d in diags if d.severity == "warning"]
    look = [d for d in warned if "looks like state 'A'" in d.message]
    assert len(look) == 1 and (look[0].line, look[0].col) == (4, 14), [d.render() for d in diags]
    assert "U+0410 CYRILLIC CAPITAL LETTER A" in look[0].message
    assert look[0].notes == (f"{f}:2:10: note: state 'A' is here",)
    mixed = [d for d in warned if "mixes Latin and Cyrillic" in d.message]
    assert len(mixed) == 1 and (mixed[0].line, mixed[0].col) == (6, 14)


def test_look_alike_signals_and_fullwidth_names_are_warned(tmp_path):
    """issue 40, point 10: circuits too, and NFKC look-alikes (a fullwidth ｑ)."""
    f = tmp_path / "homo.circ"
    f.write_text('input a "\u0430"\noutput y\ny = a & "\u0430"\n')
    _, diags = check_report(f)
    assert [(d.line, d.col, d.severity) for d in diags] == [(1, 9, "warning")], [d.render() for d in diags]
    assert "signal 'а' looks like signal 'a'" in diags[0].message
    g = tmp_path / "wide.tm"
    g.write_text("machine m {\n  start: q\n  halt: h\n  q 0 -> 1 R \uff51\n  \uff51 0 -> 1 R h\n}\n")
    _, diags = check_report(g)
    assert any("looks like state 'q'" in d.message for d in diags), [d.render() for d in diags]
    # plain ASCII names are never confusable with each other
    assert check_report(ROOT / "examples" / "bb3.tm")[1] == []


@pytest.mark.parametrize("fmt", sorted(TEXT_SEEDS))
def test_a_byte_order_mark_is_skipped(fmt):
    """issue 40, point 10: a UTF-8 BOM at the start of a .tm or .circ file was refused; every
    text format now reads the text after it, with the same columns."""
    data = TEXT_SEEDS[fmt]
    assert parse_text(b"\xef\xbb\xbf" + data, fmt, f"x.{fmt}") == parse_text(data, fmt, f"x.{fmt}")


def test_columns_after_a_byte_order_mark_are_unchanged():
    """issue 40, point 10: an error on the first line has the column an editor shows."""
    cols = []
    for data in (b"machine m {\n  start: a b\n}\n", b"\xef\xbb\xbfmachine m {\n  start: a b\n}\n",
                 b"\xef\xbb\xbfmachine m { x\n}\n", b"machine m { x\n}\n"):
        with pytest.raises(Tm2nnError) as info:
            parse_text(data, "tm", "e.tm")
        cols.append((info.value.line, info.value.col, info.value.snippet))
    assert cols[0] == cols[1] and cols[2] == cols[3] and cols[2][:2] == (1, 14), cols


@pytest.mark.parametrize("fmt", sorted(TEXT_SEEDS))
@pytest.mark.parametrize("end", [b"\r", b"\r\n"])
def test_old_mac_and_windows_line_ends_read_as_lines(fmt, end):
    """issue 40, point 10: a CR-only .circ gave "no circuit found" with no location; CR-only
    and CRLF line ends now read as line ends in every text format."""
    data = TEXT_SEEDS[fmt]
    assert parse_text(data.replace(b"\n", end), fmt, f"x.{fmt}") == parse_text(data, fmt, f"x.{fmt}")


def test_errors_in_a_cr_only_file_are_located():
    """issue 40, point 10: line numbers count the CR line ends."""
    with pytest.raises(Tm2nnError) as info:
        parse_text(b"input a\routput y\ry = AND(a, b)\r", "circ", "cr.circ")
    e = info.value
    assert (e.line, e.col, e.snippet) == (3, 12, "y = AND(a, b)"), e.render()
