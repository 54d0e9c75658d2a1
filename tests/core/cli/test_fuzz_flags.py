"""Fuzz every verb's flags with random values of each type (issue 23): the flags come from
the CLI's own parser, so a new flag is fuzzed the day it is added.  The only outcomes
allowed are exit 0, 1 or 2 with tm2nn's own message (tests/fuzzing.py).

Values: boundary integers (-1, 0, 1, 2^31, 2^63, 10^30), small ones, huge ones that a
size estimate must refuse before allocating, non-finite and odd floats, and random
text.  Work sizes between 10^3 and 10^8 are left out: they are legitimate and slow (a
transformer of 10^5 steps decodes for minutes, with a progress bar), and the refusals
past them are pinned by the size-estimate tests.  Paths are drawn inside the test's
folder only (a fuzz run as root must not write over a device).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing import FUZZ_MEMORY, LONG_FACTOR, assert_clean, long_profile, run_case

ROOT = Path(__file__).resolve().parents[3]
EX = ROOT / "examples"

#: Fast sources per verb: the argv before the fuzzed flags ({tmp}: the case's folder).
BASES = {
    "check": [[EX / "bb3.tm"], [EX / "full_adder.circ"], [EX / "parity8.circ"]],
    "run": [[EX / "bb3.tm"], [EX / "full_adder.circ", "--input", "101"], [EX / "grid_copy_down.tm"]],
    "convert": [[EX / "bb3.tm"], [EX / "full_adder.circ"]],
    "compile": [[EX / "full_adder.circ", "-o", "{tmp}/m.onnx"], [EX / "bb3.tm", "-o", "{tmp}/m.pt"]],
    "eval": [["{model}"]],
    "info": [[EX / "full_adder.circ"], [EX / "bb3.tm", "--steps", "5"]],
    "verify": [[EX / "full_adder.circ", "--budget", "0.3"], [EX / "bb3.tm", "--steps", "5", "--budget", "0.3"]],
    "margin": [[EX / "full_adder.circ", "--samples", "4", "--trials", "2"]],
    "learn": [[EX / "parity8.circ", "--target", "parity:10110010", "--steps", "20", "--test", "10"],
              [EX / "learner_match.tm", "--train", EX / "learner_match.csv", "--test", "4"]],
    "viz": [["spacetime", EX / "bb3.tm", "-o", "{tmp}/s.png", "--interpreter-only"],
            ["weights", EX / "full_adder.circ", "-o", "{tmp}/w.png"]],
    # --dry-run: the spec is checked and expanded, nothing runs (a pool per case would take seconds)
    "sweep": [[EX / "sweep" / "first.toml", "--dry-run"], ["report", "{tmp}"]],
    "export": [[EX / "bb3.tm", "--to", "transformer-lens", "--steps", "3", "-o", "{tmp}/bb3-tl"]],
    "train": [[EX / "full_adder.circ", "--epochs", "1", "--samples", "8", "--test", "8", "--budget", "0.5",
               "--no-margin"]],
}
#: Flags whose value is a path (drawn inside the case's folder).
PATHS = {"output", "export_before", "export_after", "inputs", "train", "examples", "out"}
#: Flags whose value is a path in some verbs and data in others.
LEARN_PATHS = {"samples"}
#: Flags left alone: the demo runs every example (minutes), not a flag check.
SKIP_VERBS = {"demo"}

INTS = st.one_of(
    st.sampled_from([-(2**63), -(10**9), -2, -1, 0, 1, 2, 3, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64,
                     10**9, 10**12, 10**30]),
    st.integers(0, 8), st.integers(-(10**40), -1),
)
FLOATS = st.one_of(
    st.sampled_from(["nan", "-nan", "inf", "-inf", "1e309", "-0.0", "0.0", "1e-320", "0x10", "1_000", "١٢",
                     " 3", "3 ", "+2", "1e3", "2.5"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["", "-", "--", "-1x", "parity:", "parity:2", "const:7",
                                                        "../", "\x00", "é", "0" * 200]))
NUMERIC = st.one_of(INTS.map(str), FLOATS, TEXT)
SIZES = st.one_of(st.sampled_from(["0", "-1G", "1", "10K", "8G", "2TiB", "1e3M", "512MiB", "x", "", "1.5G",
                                   "99999999999999999999999G"]), TEXT)
#: --max-memory values: never above FUZZ_MEMORY, so a case cannot plan past it.
MEMORY = st.one_of(st.sampled_from(["0", "-1G", "1", "10K", "1e3M", "512MiB", "x", "", "1.5G", "3G", "3.0G"]), TEXT)


def _subparsers() -> dict:
    from tm2nn.cli import build_parser

    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    return {verb: p for verb, p in sub.choices.items() if verb not in SKIP_VERBS}


VERBS = _subparsers()


def _flags(verb: str) -> list[argparse.Action]:
    return [a for a in VERBS[verb]._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _path_value(draw, tmp: Path) -> str:
    name = draw(st.sampled_from(["m.onnx", "m.pt", "x.png", "x.svg", "d.csv", "in.txt", "no/such/dir/m.onnx",
                                 "m.txt", "", ".", "m", "m.ONNX", "sub"]))
    return str(tmp / name) if name else name


@st.composite
def argv_of(draw, verb: str, tmp: Path, model: str):
    base = [str(a).replace("{tmp}", str(tmp)).replace("{model}", model) for a in draw(st.sampled_from(BASES[verb]))]
    argv = [verb, *base, "--max-memory", FUZZ_MEMORY]
    for a in draw(st.lists(st.sampled_from(_flags(verb)), min_size=1, max_size=3, unique_by=lambda a: a.dest)):
        flag = draw(st.sampled_from(a.option_strings))
        if a.nargs == 0:
            argv.append(flag)
            continue
        if a.dest in PATHS or (verb == "learn" and a.dest in LEARN_PATHS):
            value = draw(st.one_of(st.just(_path_value(draw, tmp)), TEXT.filter(lambda t: "/" not in t)))
            if value.startswith("/") and not value.startswith(str(tmp)):
                value = str(tmp / "x")
        elif a.choices:
            value = draw(st.one_of(st.sampled_from([str(c) for c in a.choices]), TEXT))
        elif a.dest == "max_memory":
            value = draw(MEMORY)
        elif getattr(a.type, "__name__", "") == "flag_size":
            value = draw(SIZES)
        else:
            value = draw(NUMERIC)
        argv += [flag, value] if not value.startswith("-") else [f"{flag}={value}"]
    return argv


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """A small compiled model for ``eval``."""
    from tm2nn import compile as tm_compile

    out = tmp_path_factory.mktemp("fuzz_model") / "fa.onnx"
    tm_compile(EX / "full_adder.circ").save(out)
    return str(out)


def _fuzz(verb: str, n: int, tmp_path: Path, model: str):
    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                     HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
    @given(st.data())
    def case(data):
        argv = data.draw(argv_of(verb, tmp_path, model))
        code, out, err, _ = run_case(argv)
        assert_clean(code, out, err, argv)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # relative paths land in the case's folder
    try:
        case()
    finally:
        os.chdir(cwd)


#: Cases per verb in the fast profile (1,260 in all with the parser and model fuzz).
PER_VERB = {"check": 60, "run": 80, "convert": 50, "compile": 60, "eval": 50, "info": 60, "verify": 40,
            "margin": 30, "learn": 40, "viz": 30, "sweep": 30, "export": 30, "train": 15}


@pytest.mark.parametrize("verb", sorted(PER_VERB))
def test_fuzz_flags(verb, tmp_path, model):
    _fuzz(verb, PER_VERB[verb], tmp_path, model)


@long_profile
@pytest.mark.parametrize("verb", sorted(PER_VERB))
def test_fuzz_flags_long(verb, tmp_path, model):
    _fuzz(verb, PER_VERB[verb] * LONG_FACTOR, tmp_path, model)


def test_every_verb_is_fuzzed():
    assert set(PER_VERB) == set(VERBS) == set(BASES)
