"""§4.2 learners from files and the CLI: the ``noisy_learner`` block, the example
``noisy_parity3.circ``, and ``check`` / ``info`` / ``learn`` / ``convert`` on it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLES
from tm2nn.errors import Tm2nnError
from tm2nn.ir.noisy_learner import NoisyLearner
from tm2nn.learners.examples import NOISY_EXAMPLES
from tm2nn.learners.noisy import majority_learner, parity_learner
from tm2nn.syntax import dump, load, parse_text
from tm2nn.syntax.circuit_dsl import dump_noisy_learner
from tm2nn.syntax.learner_examples import example_text

EX = EXAMPLES / "noisy_parity3.circ"


def _parse(text: str):
    return parse_text(text, "circ", "f.circ")


def test_round_trip():
    for lr in (parity_learner(2, 3), majority_learner(3, 2)):
        back = _parse(dump(lr, "circ"))[0]
        assert isinstance(back, NoisyLearner) and back == lr
        assert back.summary()["mprime_copies"] == 2 * lr.n * lr.t


def _text(header: str, h_inputs: str = "x0[1] y0 x[1]", outputs: str = "o") -> str:
    return (header + "\n\ncircuit H {\n  input " + h_inputs + "\n  output " + outputs
            + "\n  o = XOR(y0, x[0])\n  p = NOT(o)\n}\n")


def _err(text: str) -> str:
    with pytest.raises(Tm2nnError) as e:
        _parse(text)
    return e.value.render()


def test_minimal_parse():
    lr = _parse(_text("noisy_learner L {\n  input x[1]\n  samples 1\n  output H\n}"))[0]
    assert (lr.name, lr.n, lr.t, lr.h.name) == ("L", 1, 1, "H")
    assert lr([[0]], [1], [1]) == 0


@pytest.mark.parametrize("header, where, msg", [
    ("noisy_learner L {\n  input x[1]\n  samples 0\n  output H\n}", "f.circ:3:11", "integer >= 1"),
    ("noisy_learner L {\n  input x[1]\n  samples two\n  output H\n}", "f.circ:3:11", "integer >= 1"),
    ("noisy_learner L {\n  input y[1]\n  samples 1\n  output H\n}", "f.circ:2:9", "input x[n]"),
    ("noisy_learner L {\n  input x[1]\n  samples 1\n  output G\n}", "f.circ:4:10", "no circuit named 'G'"),
    ("noisy_learner L {\n  input x[1]\n  sample 1\n  output H\n}", "f.circ:3:3", "did you mean 'samples'"),
    ("noisy_learner L {\n  input x[1]\n  samples 1\n  samples 1\n  output H\n}", "f.circ:4:3", "twice"),
    ("noisy_learner L {\n  input x[1]\n  output H\n}", "f.circ:1:15", "no 'samples' item"),
    ("noisy_learner L {\n  input x[1]\n  samples 2\n  output H\n}", "f.circ:4:10", "must read"),
    ("noisy_learner L {\n  input x[2]\n  samples 1\n  output H\n}", "f.circ:4:10", "input 1 is 'y0'"),
])
def test_errors_at_position(header, where, msg):
    r = _err(_text(header))
    assert where in r and msg in r, r


def test_two_outputs_error():
    r = _err(_text("noisy_learner L {\n  input x[1]\n  samples 1\n  output H\n}", outputs="o p"))
    assert "f.circ:4:10" in r and "exactly one output" in r


def test_example_equals_generator():
    for fname, (build, _) in NOISY_EXAMPLES.items():
        path = EXAMPLES / fname
        assert path.read_text() == example_text(fname), f"regenerate {path}"
        lr = load(path)
        assert isinstance(lr, NoisyLearner) and lr == build()
        assert dump_noisy_learner(lr, header=False) in path.read_text()


def test_check_and_convert(run_cli, tmp_path):
    r = run_cli("check", EX, "--json")
    assert r.code == 0
    s = json.loads(r.out)
    assert s["kind"] == "noisy learner" and (s["inputs"], s["samples"], s["mprime_copies"]) == (3, 10, 60)
    assert s["h_gates"] == len(load(EX).h.gates)
    out = tmp_path / "back.circ"
    assert run_cli("convert", EX, "--to", "circ", "-o", out).code == 0
    assert load(out) == load(EX)


def test_info(run_cli):
    r = run_cli("info", EX, "--backend", "abbe-sandon", "--json")
    assert r.code == 0
    info = json.loads(r.out)["info"]
    assert info["copies of M'"] == "60" and int(info["vertices"]) > 0 and int(info["distinct weights"]) > 0
    assert info["gamma"].startswith("1.98")
    r = run_cli("info", EX, "--backend", "abbe-sandon")
    assert r.code == 0 and "Lemma 6" in r.out


@pytest.mark.parametrize("noise", ["uniform", "none"])
def test_learn_json(run_cli, noise):
    r = run_cli("learn", EX, "--target", "parity:101", "--test", "8", "--noise", noise, "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out.strip().splitlines()[-1])
    bounds = {k: rep.pop(k) for k in ("noise_max", "noise_bound", "lemma6_bound")}
    assert rep == {"steps": 10, "samples_used": 10, "test_accuracy": 1.0, "mismatches": 0, "test_inputs": 8,
                   "noise": noise, "agreement": 1.0}
    # the noise level reached, next to Lemma 6's (n = 3, t = 10): eps/t = 2^-134 3^-11 / 10 vs 1/90
    assert bounds["noise_bound"] == pytest.approx(2.0**-134 * 3.0**-11 / 10, rel=1e-12)
    assert bounds["lemma6_bound"] == pytest.approx(1 / 90)
    if noise == "none":
        assert bounds["noise_max"] == 0
    else:
        assert 0.5 * bounds["noise_bound"] < bounds["noise_max"] <= bounds["noise_bound"]


def test_learn_samples_csv(run_cli, tmp_path):
    rows = [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)] * 2
    csv = tmp_path / "d.csv"
    csv.write_text("".join(",".join("1" if v else "-1" for v in (*x, x[0] ^ x[2])) + "\n" for x in rows))
    r = run_cli("learn", EX, "--samples", csv, "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out.strip().splitlines()[-1])
    assert rep["test_inputs"] == 16 and rep["test_accuracy"] == 1.0 and rep["mismatches"] == 0


@pytest.mark.parametrize("argv, msg", [
    (["--target", "parity:10"], "the secret has 2 bits"),
    ([], "exactly one of --samples (a CSV) or --target"),
    (["--target", "parity:101", "--steps", "5"], "exactly its t = 10"),
    (["--target", "parity:101", "--engine", "float64"], "mpmath"),
    (["--target", "parity:101", "--test", "-1"], "--test: expected an integer ≥ 0, got -1"),
])
def test_learn_bad_input(run_cli, argv, msg):
    r = run_cli("learn", EX, *argv, "--json")
    assert r.code == 2 and msg in r.err and "Traceback" not in r.err and r.out == ""


def test_noise_flag_rejected_for_41_learner(run_cli):
    r = run_cli("learn", EXAMPLES / "majority7.circ", "--target", "const:1", "--steps", "2", "--noise", "max")
    assert r.code == 2 and "--noise is for a noisy learner" in r.err


def test_run_rejects_noisy_learner(run_cli):
    r = run_cli("run", EX, "--input", "0")
    assert r.code == 2 and "noisy learner" in r.err
