"""``margin``'s attacks have a time budget and fit in memory by chunks (issue 36, point 11):
the report says what the budget cut, and an attack too big for memory at once runs in
chunks of inputs instead of being refused."""

from __future__ import annotations

import json
from pathlib import Path

import tm2nn
from tm2nn.backends.transformer.perturbed_decode import PerturbedTransformer, attack, attack_memory
from tm2nn.limits import set_memory_limit

EX = Path(__file__).resolve().parents[3] / "examples"


def test_the_budget_cuts_the_attacks_and_the_report_says_so(run_cli):
    r = run_cli("margin", EX / "bb4.tm", "--backend", "transformer", "--steps", "4", "--samples", "6",
                "--trials", "2", "--budget", "0.01", "--json")
    assert r.code == 0
    rows = json.loads(r.out)
    for row in rows:
        assert row["budget"] == 0.01 and row["complete"] is False
        rnd = row["attacked"]["random"]
        assert rnd["inputs"] == 6 and rnd["inputs_done"] < 6 and rnd["iterations_done"] < rnd["iterations"]
    text = run_cli("margin", EX / "bb4.tm", "--backend", "transformer", "--steps", "4", "--samples", "6",
                   "--trials", "2", "--budget", "0.01")
    assert "budget cut the attacks" in text.out and "attacked" in text.out


def test_an_attack_too_big_for_memory_at_once_runs_in_chunks():
    c = tm2nn.compile(EX / "bb4.tm", "transformer", steps=4)
    texts = ["", "1", "11", "111", "1111", "11111"]
    one = attack_memory(PerturbedTransformer(c), 2, "random")
    set_memory_limit(int(one * 5))  # room for all 6 inputs at once: no; for 1 a chunk (a quarter): yes
    try:
        r = attack(c, texts, 1.0, "random", trials=2, seed=0)
    finally:
        set_memory_limit(None)
    assert r["inputs_done"] == 6 and len(r["per_input"]) == 6 and r["iterations_done"] == r["iterations"]


def test_relu_circuit_margin_takes_the_same_budget(run_cli):
    r = run_cli("margin", EX / "full_adder.circ", "--budget", "0.001", "--json")
    rows = json.loads(r.out)
    assert r.code == 0 and all(row["complete"] is False and row["budget"] == 0.001 for row in rows)
    assert any(a["iterations_done"] < a["iterations"] for a in rows[0]["attacked"].values())
    full = json.loads(run_cli("margin", EX / "full_adder.circ", "--budget", "600", "--json").out)
    assert all(row["complete"] for row in full)
