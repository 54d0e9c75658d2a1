"""Round trips between formats preserve behaviour (issue 2 acceptance).

* every bbchallenge corpus machine runs to its listed steps and sigma after
  std -> tm2nn DSL -> parse;
* every morphett and turingmachine.io example gives the same run report after
  conversion to the DSL;
* every ISCAS / EPFL circuit computes the same function after conversion to the
  circuit DSL and to .bench.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from tests.conftest import CORPUS
from tests.strategies import circuits, machines
from tm2nn.api import default_input
from tm2nn.interp import eval_circuit, random_inputs, run_machine
from tm2nn.source import SourceText
from tm2nn.syntax import dump, load, load_all, parse_text, std

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")
BB = CORPUS / "tm" / "bb"
FAST_STEPS = 100_000


def corpus_rows(stem):
    src = SourceText.from_file(BB / f"{stem}.txt")
    rows = [r for r in map(std.parse_corpus_line, src.text.splitlines()) if r]
    return list(zip(std.parse(src), rows, strict=True))


@needs_corpus
@pytest.mark.parametrize("stem", ["2x2", "2x3", "2x4", "3x2", "4x2"])
def test_bb_corpus_runs_after_conversion_to_dsl(stem):
    n = 0
    for m, (text, fields) in corpus_rows(stem):
        steps, sigma = int(fields[1]), int(fields[2])
        (m2,) = parse_text(dump(m, "tm"), "tm", f"<{text}.tm>")
        assert m2 == m
        if steps > FAST_STEPS:
            continue  # covered by the slow variant below
        r = run_machine(m2, "", steps + 10)
        assert (r.halted, r.steps, r.sigma) == (True, steps, sigma), text
        n += 1
    assert n > 0


@pytest.mark.slow
@needs_corpus
def test_bb_corpus_long_runs_after_conversion_to_dsl():
    for m, (text, fields) in corpus_rows("2x4"):
        steps, sigma = int(fields[1]), int(fields[2])
        if steps <= FAST_STEPS:
            continue
        (m2,) = parse_text(dump(m, "tm"), "tm", "<long.tm>")
        r = run_machine(m2, "", steps + 10)
        assert (r.halted, r.steps, r.sigma) == (True, steps, sigma), text


def _runnable_examples():
    if not CORPUS.is_dir():
        return []
    out = []
    for p in sorted((CORPUS / "tm" / "morphett").glob("*.txt")):
        out.append((p, "morphett"))
    for p in sorted((CORPUS / "tm" / "turingmachine_io").glob("*.yaml")):
        out.append((p, "tmio"))
    return out


@needs_corpus
@pytest.mark.parametrize("path,fmt", _runnable_examples(), ids=lambda v: getattr(v, "name", v))
def test_imported_examples_run_the_same_after_conversion(path, fmt):
    m = load(path, fmt)
    x = default_input(path, fmt) or ""
    (m2,) = parse_text(dump(m, "tm"), "tm", f"<{path.name}.tm>")
    assert m2 == m
    a = run_machine(m, x, 20_000)
    b = run_machine(m2, x, 20_000)
    assert a.report() == b.report()


def _circuit_files():
    if not CORPUS.is_dir():
        return []
    c = CORPUS / "circuits"
    return sorted(c.glob("iscas85/*.bench")) + [
        c / "epfl" / f"{n}.aig" for n in ("ctrl", "dec", "int2float", "cavlc", "router", "adder")
    ]


@needs_corpus
@pytest.mark.parametrize("path", _circuit_files(), ids=lambda p: p.name)
def test_corpus_circuits_survive_conversion(path):
    c = load(path)
    x = random_inputs(len(c.inputs), 2000, seed=7)
    want = eval_circuit(c, x)
    for fmt in ("circ", "bench"):
        (c2,) = parse_text(dump(c, fmt), fmt, f"<{path.stem}.{fmt}>")
        assert c2.inputs == c.inputs and c2.outputs == c.outputs
        assert np.array_equal(eval_circuit(c2, x), want), fmt


@settings(max_examples=100, deadline=None)
@given(machines(conventions=True))
def test_random_machines_survive_dsl_round_trip_with_identical_runs(m):
    (m2,) = parse_text(dump(m, "tm"), "tm", "<rt.tm>")
    assert m2 == m
    for x in ("", m.alphabet[-1] * 3):
        assert run_machine(m, x, 50).report() == run_machine(m2, x, 50).report()


@settings(max_examples=100, deadline=None)
@given(circuits())
def test_random_circuits_survive_both_circuit_formats(c):
    x = random_inputs(len(c.inputs), 256, seed=3)
    want = eval_circuit(c, x)
    for fmt in ("circ", "bench"):
        (c2,) = parse_text(dump(c, fmt), fmt, f"<rt.{fmt}>")
        assert np.array_equal(eval_circuit(c2, x), want), fmt


def test_multi_machine_dsl_file_and_name_selection(tmp_path):
    from tm2nn.syntax import select

    text = dump(parse_text("1RB1RZ_1LB0RC_1LC1LA", "std")[0], "tm")
    f = tmp_path / "two.tm"
    f.write_text(text + "\n" + text.replace("machine ", "machine second_", 1))
    items = load_all(f)
    assert len(items) == 2
    assert select(items, "2").name == items[1].name
    assert select(items, items[1].name) is items[1]
