"""A broken Abbe–Sandon net is a training-check failure, not a crash (issue 36, point 14):
a perturbed gadget weight puts a value where the activation has no exact form, and the
exact engine's ``ArithmeticError`` becomes the mismatch at the SGD step where it
happens, in the API and on the command line (exit 1, no traceback)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

import tm2nn
from tm2nn.backends.abbe_sandon import train
from tm2nn.cli import main

PARITY8 = Path(__file__).resolve().parents[3] / "examples" / "parity8.circ"
OPTS = {"target": "parity:10110010", "steps": 4, "test": 4}


@pytest.fixture
def perturbed(monkeypatch):
    """Plant the mutation: every weight of the M_s copies (the gadgets SGD trains) times
    1001/1000."""
    build = train.build_net

    def broken(lr):
        net = build(lr)
        for e in net.gadget_edges():
            net.w[e] = net.w[e] * Fraction(1001, 1000)
        return net

    monkeypatch.setattr(train, "build_net", broken)


def test_api_reports_the_step(perturbed):
    got = tm2nn.learn(PARITY8, "abbe-sandon", **OPTS)
    assert not got.ok and got.summary["mismatches"] == 1
    assert got.summary["steps"] == 1  # the first SGD step cannot be computed exactly
    assert any("mismatch with the learner at step 1: value" in line and "not exact" in line for line in got.lines)


def test_cli_exits_1(perturbed, capsys):
    code = main(["learn", str(PARITY8), "--backend", "abbe-sandon", "--target", OPTS["target"], "--steps", "4",
                 "--test", "4"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 1
    assert "Traceback" not in text and "ArithmeticError" not in text
    assert "mismatch with the learner at step 1" in text
