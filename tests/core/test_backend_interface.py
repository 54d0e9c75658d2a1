"""The backend interface: a construction registered from outside (a toy, defined here in a
few lines) goes through compile, eval, verify and info on the command line and in the
API without touching cli.py or compiler.py; options are validated by each backend's
dataclass; the CLI names no backend; models of every backend save, load and expose their
weights as parameters."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import tm2nn
from tests.conftest import EXAMPLES, ROOT
from tm2nn.backends.protocol import BITS, Backend, Model
from tm2nn.interp import exhaustive_inputs
from tm2nn.interp import truth_table as interp_truth_table
from tm2nn.ir import Circuit
from tm2nn.nets import Affine, Net, Port, ReLU, Space, SparseMatrix
from tm2nn.options import option
from tm2nn.verify.check import CircuitChecker


# -- a toy construction: a circuit as its truth table, one ReLU unit per true input pattern ------
@dataclass(frozen=True)
class ToyOptions:
    scale: float = option(1.0, "the output's scale (1: outputs in {0, 1})")


def truth_table(c, opts) -> Model:
    """``h_p = ReLU(sum_i (2p_i - 1) x_i - |p| + 1)`` is 1 exactly at ``x = p``;
    ``y_j = scale * sum_{p: f_j(p) = 1} h_p``."""
    pats, table = exhaustive_inputs(len(c.inputs)), interp_truth_table(c)
    hid = Space.named("pat", range(len(pats)))
    net = Net(c.name, (Port("x", Space.named("in", c.inputs)),), (
        Affine("match", ("x",), SparseMatrix.from_dense(2.0 * pats - 1), 1.0 - pats.sum(1), hid),
        ReLU("h", ("match",)),
        Affine("y", ("h",), SparseMatrix.from_dense(opts.scale * table.T), None, Space.named("out", c.outputs))),
        ("y",))
    return Model("toy-truth-table", net, c, {"kind": "bits", "names": list(c.inputs)},
                 {"kind": "bits", "names": list(c.outputs), "threshold": opts.scale / 2},
                 [["hidden units", str(len(pats)), "2^n"]])


TRUTH_TABLE = Backend(name="toy-truth-table", paper="", summary="a circuit as its truth table (a test of the "
                      "backend interface)", Options=ToyOptions, takes=(Circuit,), takes_what="circuits",
                      compile=truth_table, codec=BITS, reference=CircuitChecker)


@pytest.fixture
def toy():
    tm2nn.backends.register(TRUTH_TABLE)
    yield "toy-truth-table"
    tm2nn.backends.unregister("toy-truth-table")


def test_toy_backend_in_the_api(toy, tmp_path):
    c = tm2nn.compile(EXAMPLES / "full_adder.circ", toy, scale=2.0)
    assert [r.outputs for r in c.run(["000", "101", "111"])] == ["00", "01", "11"]
    assert c.run("110", engine="onnxruntime") == {"outputs": "01"}
    rep = c.verify()
    assert rep.ok and rep.mode == "exhaustive" and rep.n_inputs == 8 and set(rep.engines) == {"torch", "onnxruntime"}
    assert c.info()["bounds"] == [["hidden units", "8", "2^n"]]
    assert sum(p.numel() for p in c.torch().parameters()) == c.info()["info"]["params_nonzero"]
    for suffix in (".onnx", ".pt", ".safetensors"):
        back = tm2nn.load_model(c.save(tmp_path / f"fa{suffix}"))
        assert back.backend == toy and back.run(["011", "100"]) == c.run(["011", "100"])
    with pytest.raises(tm2nn.OptionError, match=r"takes no option steps; the options it takes: scale"):
        tm2nn.compile(EXAMPLES / "full_adder.circ", toy, steps=3)
    with pytest.raises(tm2nn.OptionError, match=r"scale: expected a number, got .big."):
        tm2nn.compile(EXAMPLES / "full_adder.circ", toy, scale="big")
    with pytest.raises(tm2nn.Tm2nnError, match=r"compiles circuits; 'bb3' is a machine"):
        tm2nn.compile(EXAMPLES / "bb3.tm", toy)


def test_toy_backend_on_the_command_line(toy, run_cli, tmp_path):
    model = tmp_path / "fa.onnx"
    r = run_cli("compile", EXAMPLES / "full_adder.circ", "--backend", toy, "--scale", "3", "-o", model)
    assert r.code == 0, r.err
    r = run_cli("eval", model, "--input", "101", "--input", "011", "--json")
    assert r.code == 0 and [json.loads(x) for x in r.out.splitlines()] == [{"input": "101", "outputs": "01"}, {"input": "011", "outputs": "01"}]
    r = run_cli("verify", EXAMPLES / "full_adder.circ", "--backend", toy, "--json")
    assert r.code == 0 and json.loads(r.out)["ok"] and json.loads(r.out)["n_inputs"] == 8
    r = run_cli("info", EXAMPLES / "full_adder.circ", "--backend", toy, "--json")
    assert r.code == 0 and json.loads(r.out)["bounds"] == [["hidden units", "8", "2^n"]]
    r = run_cli("info", model, "--json")
    assert r.code == 0 and json.loads(r.out)["backend"] == toy
    r = run_cli("compile", EXAMPLES / "full_adder.circ", "--backend", toy, "--steps", "3", "-o", model)
    assert r.code == 2 and "takes no option --steps" in r.err and "--scale" in r.err
    r = run_cli("compile", "--help")
    assert r.code == 0 and toy in r.out and "--scale" in r.out


# -- options ---------------------------------------------------------------------------------------
def test_options_are_validated_by_the_backend_and_errors_speak_of_arguments():
    with pytest.raises(tm2nn.OptionError) as e:
        tm2nn.compile(EXAMPLES / "bb3.tm", "transformer", steps=30, max_input=3)
    msg = str(e.value)
    assert "takes no option max_input" in msg and "steps, attention, beta, corrections" in msg and "--" not in msg
    for kw, pattern in (({}, r"needs steps"), ({"steps": 0}, r"steps: expected an integer ≥ 1, got 0"),
                        ({"steps": 3, "attention": "soft"}, r"attention must be one of"),
                        ({"steps": "3"}, r"steps: expected an integer ≥ 1, got '3'")):
        with pytest.raises(tm2nn.OptionError, match=pattern) as e:
            tm2nn.compile(EXAMPLES / "bb3.tm", "transformer", **kw)
        assert "--" not in str(e.value)
    c = tm2nn.compile(EXAMPLES / "bb3.tm", "rcnn", steps=5, max_input=1)
    with pytest.raises(tm2nn.OptionError, match="compile with a larger max_input"):
        c.run("11")
    with pytest.raises(tm2nn.OptionError) as e:
        tm2nn.compile(EXAMPLES / "binary_increment.tm", "relu-circuit")
    assert "step bound steps" in str(e.value) and "--" not in str(e.value)


def test_the_cli_renders_option_errors_as_flags(run_cli):
    r = run_cli("compile", EXAMPLES / "binary_increment.tm", "-o", "x.onnx")
    assert r.code == 2 and "needs the step bound --steps" in r.err
    r = run_cli("verify", EXAMPLES / "bb3.tm", "--backend", "transformer", "--steps", "4", "--max-input", "2")
    assert r.code == 2 and "takes no option --max-input (it is an option of rcnn, gd-trace)" in r.err
    assert "--steps, --attention, --beta, --no-corrections" in r.err
    r = run_cli("compile", EXAMPLES / "bb3.tm", "--backend", "transformer", "--steps", "x", "-o", "x.onnx")
    assert r.code == 2 and "--steps: expected an integer, got 'x'" in r.err


def test_cli_is_thin_and_names_no_backend():
    text = (ROOT / "tm2nn" / "cli.py").read_text()
    assert len(text.splitlines()) <= 450
    for n, line in enumerate(text.splitlines(), 1):
        if re.search(r"transformer|rcnn|gd.trace|abbe|relu.circuit", line):
            assert "help=" in line or line.strip().startswith(("help", '"', "f\"")), f"cli.py:{n}: {line}"
    assert "(or --max-steps)" not in "".join(p.read_text() for p in (ROOT / "tm2nn").rglob("*.py"))


def test_help_lists_choices_and_defaults(run_cli):
    r = run_cli("verify", "--help")
    assert all(n in r.out for n in tm2nn.backends.names())
    assert "--json" in r.out and "print the verification report as JSON" in r.out
    assert re.search(r"as many as\s+the\s+budget", r.out) and "--budget" in r.out
    for verb in ("info", "margin"):
        r = run_cli(verb, "--help")
        assert re.search(r"--json\s+print", r.out), verb
    assert "default 64" in run_cli("margin", "--help").out


# -- every backend: parameters, saved models, one report type ------------------------------------
def _compiled_per_backend():
    return {
        "relu-circuit": tm2nn.compile(EXAMPLES / "full_adder.circ", "relu-circuit"),
        "relu-circuit (machine)": tm2nn.compile(EXAMPLES / "binary_increment.tm", "relu-circuit", steps=6),
        "transformer": tm2nn.compile(EXAMPLES / "bb3.tm", "transformer", steps=25),
        "rcnn": tm2nn.compile(EXAMPLES / "bb3.tm", "rcnn", steps=25, max_input=1),
        "abbe-sandon": tm2nn.compile(EXAMPLES / "majority7.circ", "abbe-sandon", engine="float64"),
        "gd-trace": tm2nn.compile(EXAMPLES / "bb3.tm", "gd-trace", steps=25, max_input=1),
    }


@pytest.fixture(scope="module")
def per_backend():
    return _compiled_per_backend()


def test_every_backend_is_covered(per_backend):
    assert {k.split()[0] for k in per_backend} == set(tm2nn.backends.BUILTIN)


@pytest.mark.parametrize("key", ["relu-circuit", "relu-circuit (machine)", "transformer", "rcnn", "abbe-sandon",
                                 "gd-trace"])
def test_parameters_are_the_nonzero_weights(per_backend, key):
    c = per_backend[key]
    module = c.torch()
    assert sum(p.numel() for p in module.parameters()) == c.info()["info"]["params_nonzero"] > 0
    trained = {n for n, p in module.named_parameters() if p.requires_grad}
    if key in ("relu-circuit", "relu-circuit (machine)", "transformer", "rcnn"):
        assert not trained  # construction weights are frozen by default


@pytest.mark.parametrize("key", ["relu-circuit", "relu-circuit (machine)", "transformer", "rcnn", "abbe-sandon",
                                 "gd-trace"])
def test_saved_models_load_back(per_backend, key, tmp_path):
    c = per_backend[key]
    text = {"relu-circuit": "101", "relu-circuit (machine)": "101"}.get(key, "1")
    if key == "abbe-sandon":
        text = "10" * (len(c.input_encoding["names"]) // 2) + "1" * (len(c.input_encoding["names"]) % 2)
    want = c.run([text])
    for suffix in (".onnx", ".pt", ".safetensors"):
        path = c.save(tmp_path / f"m{suffix}")
        if suffix == ".pt":
            saved = torch.load(path, weights_only=True)
            assert set(saved) == {"state_dict", "metadata"}
        back = tm2nn.load_model(path)
        assert back.backend == c.backend and back.input_encoding == c.input_encoding
        engine = "onnxruntime" if suffix == ".onnx" and "onnxruntime" in back.spec.engines else "torch"
        assert back.run([text], engine=engine) == want
        assert back.info()["bounds"] == json.loads(json.dumps(c.info()["bounds"]))


def test_run_returns_one_report_type():
    r1 = tm2nn.run(EXAMPLES / "binary_increment.tm", "1011")
    r2 = tm2nn.run(EXAMPLES / "full_adder.circ", "101")
    r3 = tm2nn.run(EXAMPLES / "binary_increment.tm", "1011", backend="transformer", max_steps=20)
    assert all(isinstance(r, tm2nn.Report) for r in (r1, r2, r3))
    assert r1 == r3 and r1.tape == "1100" and r1.run.steps == 8 and r2.outputs == "01"
    assert json.loads(r1.to_json()) == dict(r1)


def test_a_edited_state_dict_travels(per_backend, tmp_path):
    c = per_backend["relu-circuit"]
    module = c.torch()
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(1.0)
    path = tmp_path / "fa.pt"
    torch.save({"state_dict": module.state_dict(), "metadata": c.metadata()}, path)
    assert tm2nn.load_model(path).run("111") == {"outputs": "11"}


def test_eval_reads_inputs_from_a_file(run_cli, tmp_path):
    model = tmp_path / "fa.onnx"
    assert run_cli("compile", EXAMPLES / "full_adder.circ", "-o", model).code == 0
    inputs = tmp_path / "in.txt"
    inputs.write_text("000\n111\n")
    r = run_cli("eval", model, "--inputs", inputs, "--input", "101", "--json")  # --input first, then the file
    assert r.code == 0 and [json.loads(x)["outputs"] for x in r.out.splitlines()] == ["01", "00", "11"]


# -- verify within a time budget -------------------------------------------------------------------
def test_verify_stops_at_its_budget_and_says_what_it_checked(tmp_path):
    c = tm2nn.compile(EXAMPLES / "even_ones.tm", "rcnn", steps=12)
    seen = []
    rep = c.verify(budget=2.0, seed=5, onnx=False, progress=lambda *a: seen.append(a))
    assert rep.ok and rep.mode == "random" and rep.seed == 5 and rep.n_inputs >= 1
    assert rep.seconds < 2.0 + 30 and seen and seen[-1][0] == rep.n_inputs
    assert [s[0] for s in seen] == sorted(s[0] for s in seen)
    assert "random tapes of 0..12 symbols" in rep.how and "seed 5" in rep.how
    small = c.verify(["1", "11", "0110"])
    assert small.mode == "given" and small.n_inputs == 3 and small.distinct == 3
    assert not small.complete and small.coverage == 3 / small.space  # 3 of the 2^13 - 1 tapes (issue 40)


def test_verify_shows_progress_on_a_terminal(monkeypatch):
    from tm2nn import console

    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    with console.verify_progress() as bar:
        assert bar is not None
        bar(3, None, 1.0, 60.0)
    with console.verify_progress(quiet=True) as bar:
        assert bar is None


def test_piped_tables_are_not_wrapped(run_cli):
    r = run_cli("info", EXAMPLES / "ripple_adder4.circ")
    assert r.code == 0
    rows = [ln for ln in r.out.splitlines() if "O(1)" in ln]
    assert rows and all("Prop. 3.4" in ln for ln in rows)  # one line per row, nothing cut


def test_every_example_passes_check():
    from tm2nn.lint import check_report

    for p in sorted(Path(EXAMPLES).iterdir()):
        if p.suffix in (".tm", ".circ"):
            _, diags = check_report(p)
            assert not [d for d in diags if d.severity == "error"], p
