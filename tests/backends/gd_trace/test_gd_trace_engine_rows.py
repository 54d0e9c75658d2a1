"""Every engine row of a gd-trace ``verify`` checks the same thing or says why it cannot
(issue 36, point 12).  The ONNX model is the loss (21) only: ONNX has no gradients, so the
optimizer (22), with its step 1/gamma, runs in torch alone.  A construction whose step
ignores gamma fails in torch, and the onnxruntime row must not read "ok"."""

from __future__ import annotations

import json
from pathlib import Path

from tm2nn.backends.gd_trace import tape_simplex

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "binary_increment.tm"
ARGS = ["verify", EXAMPLE, "--backend", "gd-trace", "--steps", "4", "--max-input", "1", "--gamma", "2"]


def test_the_onnxruntime_row_says_what_it_does_not_check(run_cli):
    r = run_cli(*ARGS, "--json")
    d = json.loads(r.out)
    assert r.code == 0 and d["ok"] and set(d["engines"]) == {"torch", "onnxruntime"}
    assert set(d["not_checked"]) == {"onnxruntime"} and "1/gamma" in d["not_checked"]["onnxruntime"]
    text = run_cli(*ARGS)
    row = next(ln for ln in text.out.splitlines() if ln.strip().startswith("onnxruntime"))
    assert "not checked" in row and " ok" not in row and "no gradients" in row
    assert run_cli(*ARGS, "--no-onnx", "--json").out.count("not_checked\": {}") == 1


def test_a_step_that_ignores_gamma_fails_and_onnxruntime_does_not_say_ok(run_cli, monkeypatch):
    real = tape_simplex.conditional_gradient

    def unit_step(groups):  # the mutation: T and H step at rate 1, not 1/gamma
        return real([{**g, "lr": 1.0} if g.get("kind") == "gd" else g for g in groups])

    monkeypatch.setattr(tape_simplex, "conditional_gradient", unit_step)
    r = run_cli(*ARGS)
    assert r.code == 1
    rows = {ln.split()[0]: ln for ln in r.out.splitlines() if ln.strip().split()[:1] in (["torch"], ["onnxruntime"])}
    assert "MISMATCH" in rows["torch"]
    assert "not checked" in rows["onnxruntime"] and " ok" not in rows["onnxruntime"]

