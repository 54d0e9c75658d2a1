"""A verification the budget ends after very few inputs says so (issue 36, point 10):
a warning line, ``few`` / ``stopped_by`` / ``samples_checked`` in ``--json``, and
``--min-samples N``, a floor reached even past the budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tm2nn
from tm2nn.verify.check import FEW_SAMPLES

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture
def wide(xor_circuit) -> Path:
    """A 24-input circuit: too many inputs for an exhaustive check, cheap to run."""
    return xor_circuit(24)


def test_a_budget_that_ends_after_one_input_warns_and_says_few(run_cli, wide):
    # a budget shorter than the first chunk: one input checked, and the report says so
    r = run_cli("verify", wide, "--backend", "relu-circuit", "--budget", "1e-9", "--seed", "3", "--json")
    assert r.code == 0
    d = json.loads(r.out)
    assert d["ok"] and d["samples_checked"] == d["n_inputs"] == 1
    assert d["stopped_by"] == "budget" and d["few"] is True and d["few_threshold"] == FEW_SAMPLES
    assert d["warnings"] and "after 1 input" in d["warnings"][0]
    assert "tm2nn: warning: the 1e-09 s budget stopped the check after 1 input" in r.err
    assert "--min-samples" in r.err and len(r.err.strip().splitlines()) == 1
    text = run_cli("verify", wide, "--backend", "relu-circuit", "--budget", "1e-9", "--seed", "3")
    assert text.code == 0 and "warning" in text.err and "warning" not in text.out


def test_min_samples_is_a_floor_past_the_budget(run_cli, wide):
    r = run_cli("verify", wide, "--backend", "relu-circuit", "--budget", "1e-9", "--min-samples", "150",
                "--seed", "3", "--json")
    d = json.loads(r.out)
    assert r.code == 0 and d["n_inputs"] >= 150 and d["min_samples"] == 150
    assert d["few"] is False and not d["warnings"] and r.err == ""
    text = run_cli("verify", wide, "--backend", "relu-circuit", "--budget", "1e-9", "--min-samples", "150")
    assert "to reach --min-samples 150" in text.out


def test_what_stopped_the_check():
    c = tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit")
    rep = c.verify()  # 8 inputs, all of them
    assert rep.stopped_by == "space" and not rep.few and rep.to_json()["samples_checked"] == 8
    assert c.verify(["101"]).stopped_by == "inputs"
    small = c.verify(budget=1e-9)  # an exhaustive check cut after its first input
    assert small.stopped_by == "budget" and small.few and not small.complete
    assert c.verify(budget=1e-9, min_samples=100).n_inputs == 8  # the whole space is below the floor


def test_min_samples_is_checked(run_cli, wide):
    r = run_cli("verify", wide, "--samples", "10", "--min-samples", "20")
    assert r.code == 2 and r.err.strip() == ("tm2nn: error: --min-samples 20 is above --samples 10: the check "
                                             "cannot reach the floor")
    r = run_cli("verify", wide, "--min-samples", "0")
    assert r.code == 2 and "--min-samples: expected an integer ≥ 1, got 0" in r.err
