"""A broken gd-trace construction is a verification failure, not a crash (issue 36,
point 14): weights (17) without the ``b #{i: t'_i = t_i}`` term tie every successor of a
vertex, so the Frank–Wolfe step (22) has no unique vertex (:class:`AmbiguousStep`).
``verify`` reports that as the first divergence, at the optimizer step where it happens,
in the API and on the command line (exit 1, no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tm2nn
from tm2nn.backends.gd_trace import tape_simplex
from tm2nn.cli import main

BB3 = Path(__file__).resolve().parents[3] / "examples" / "bb3.tm"


@pytest.fixture
def ties(monkeypatch):
    """Plant the mutation: every edge weight of (17) is ``-b^3 gamma`` (the term that
    separates the successors dropped)."""
    init = tape_simplex.TapeSimplex.__init__

    def broken(self, *a, **k):
        init(self, *a, **k)
        self.omega_e[:] = -(self.b ** 3) * self.gamma

    monkeypatch.setattr(tape_simplex.TapeSimplex, "__init__", broken)


def test_api_reports_the_ambiguous_step(ties):
    rep = tm2nn.compile(BB3, "gd-trace", steps=3).verify(inputs=["", "1"], onnx=False)
    assert not rep.ok and rep.engines["torch"] == 2
    first = rep.first
    assert first.input == "" and first.step == 0  # the first update (22) already ties
    assert first.field.startswith("update (22)")
    assert first.expected == "a unique conditional-gradient vertex"
    assert "not unique" in first.got


def test_cli_exits_1_with_the_first_divergence(ties, capsys):
    code = main(["verify", str(BB3), "--backend", "gd-trace", "--steps", "3", "--max-input", "1"])
    out = capsys.readouterr()
    assert code == 1
    text = out.out + out.err
    assert "Traceback" not in text and "AmbiguousStep" not in text
    assert "first divergence (torch): input '', step 0, update (22)" in text
