"""compile / eval / info / verify / margin end to end, and the model contract."""

import json

import onnx
import pytest

from tests.conftest import CORPUS, EXAMPLES
from tm2nn.cli import main
from tm2nn.compiler import compile as tm2nn_compile
from tm2nn.verify import verify_compiled

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_circuit_to_onnx_then_eval_and_info(tmp_path, capsys):
    out = tmp_path / "fa.onnx"
    code, _, err = run_cli(capsys, "compile", EXAMPLES / "full_adder.circ", "--backend", "relu-circuit", "-o", out)
    assert code == 0, err
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    for key in ("tm2nn.version", "tm2nn.backend", "tm2nn.source_sha256", "tm2nn.input_encoding",
                "tm2nn.output_encoding"):
        assert key in meta
    assert meta["tm2nn.backend"] == "relu-circuit"
    assert json.loads(meta["tm2nn.tables"]) == {"inputs": ["a", "b", "cin"], "outputs": ["s", "cout"]}
    for bits, want in [("000", "00"), ("110", "01"), ("111", "11"), ("100", "10")]:
        code, o, _ = run_cli(capsys, "eval", out, "--input", bits, "--json")
        assert code == 0 and json.loads(o) == {"outputs": want}
    code, o, _ = run_cli(capsys, "info", out, "--json")
    rep = json.loads(o)
    assert code == 0 and rep["backend"] == "relu-circuit" and rep["info"]["affine_layers"] > 0
    assert any(row[0].startswith("width") for row in rep["bounds"])


def test_compile_is_byte_identical_across_runs(tmp_path, capsys):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    for f in (a, b):
        assert run_cli(capsys, "compile", EXAMPLES / "ripple_adder4.circ", "-o", f)[0] == 0
    assert a.read_bytes() == b.read_bytes()


def test_compile_to_pt_and_eval(tmp_path, capsys):
    out = tmp_path / "maj.pt"
    assert run_cli(capsys, "compile", EXAMPLES / "majority5.circ", "-o", out)[0] == 0
    code, o, _ = run_cli(capsys, "eval", out, "--input", "11010", "--json")
    assert code == 0 and json.loads(o) == {"outputs": "1"}


def test_compile_machine_by_unrolling_and_eval(tmp_path, capsys):
    out = tmp_path / "inc.onnx"
    code, _, err = run_cli(capsys, "compile", EXAMPLES / "binary_increment.tm", "--steps", "12", "-o", out)
    assert code == 0, err
    code, o, _ = run_cli(capsys, "eval", out, "--input", "1011", "--json")
    rep = json.loads(o)
    assert code == 0 and rep["tape"] == "1100" and rep["steps"] == 8 and rep["halted"] is True


def test_machine_that_needs_more_steps_reports_not_halted(tmp_path, capsys):
    out = tmp_path / "bb3.onnx"
    assert run_cli(capsys, "compile", EXAMPLES / "bb3.tm", "--steps", "10", "-o", out)[0] == 0
    code, o, _ = run_cli(capsys, "eval", out, "--json")
    rep = json.loads(o)
    assert code == 1 and rep["halted"] is False and rep["steps"] == 10


def test_oversize_unroll_is_refused_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "big.onnx"
    code, _, err = run_cli(capsys, "compile", EXAMPLES / "bb4.tm", "--steps", "100000", "-o", out)
    assert code == 2 and "gates" in err and not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_cyclic_circuit_is_refused_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "cyc.bench"
    src.write_text("INPUT(a)\nOUTPUT(y)\ny = AND(a, z)\nz = NOT(y)\n")
    out = tmp_path / "cyc.onnx"
    code, _, err = run_cli(capsys, "compile", src, "-o", out)
    assert code == 2 and "cycle" in err and not out.exists()
    seq = tmp_path / "seq.bench"
    seq.write_text("INPUT(a)\nOUTPUT(q)\nq = DFF(a)\n")
    code, _, err = run_cli(capsys, "compile", seq, "-o", tmp_path / "seq.onnx")
    assert code == 2 and "sequential" in err and not (tmp_path / "seq.onnx").exists()


def test_verify_cli_circuit_and_machine(capsys):
    code, o, _ = run_cli(capsys, "verify", EXAMPLES / "comparator4.circ", "--json")
    rep = json.loads(o)
    assert code == 0 and rep["ok"] and rep["mode"] == "exhaustive" and rep["n_inputs"] == 256
    assert rep["engines"] == {"torch": 0, "onnxruntime": 0}
    code, o, _ = run_cli(capsys, "verify", EXAMPLES / "unary_addition.tm", "--steps", "12", "--tape", "13", "--json")
    rep = json.loads(o)
    assert code == 0 and rep["ok"] and rep["n_inputs"] > 100
    assert rep["out_of_window"] > 0  # long inputs leave a 13-cell window: flagged, not mis-decoded


def test_verify_reports_first_mismatch(capsys, monkeypatch):
    """A deliberately broken net is caught, with the first divergent input and bit."""
    import numpy as np

    from tm2nn.nets import Affine

    compiled = tm2nn_compile(EXAMPLES / "full_adder.circ")
    last = [op for op in compiled.net.nodes if isinstance(op, Affine)][-1]
    object.__setattr__(last, "bias", last.bias + 5.0)  # every output now reads 1
    rep = verify_compiled(compiled, use_onnx=True)
    assert not rep.ok and rep.engines["torch"] > 0 and rep.engines["onnxruntime"] > 0
    assert rep.first.input == "000" and rep.first.expected == 0 and rep.first.got == 1
    assert np.isfinite(rep.max_deviation["torch"])


def test_every_example_machine_compiles_and_matches_the_interpreter():
    from tm2nn.interp import run_machine
    from tm2nn.ir import GridMachine
    from tm2nn.syntax import load

    for path in sorted(EXAMPLES.glob("*.tm")):
        m = load(path)
        if isinstance(m, GridMachine):
            continue
        from tm2nn.demo import example_header

        x = example_header(path).get("input", "")
        # binary_counter's 247 steps take minutes to unroll, and so do sign_sum_3x2's 56
        # steps of 46 states (about 1.2M gates): cap the unrolled size, not only the steps.
        steps = min(run_machine(m, x).steps, 120 if len(m.states) < 20 else 20)
        compiled = tm2nn_compile(m, steps=steps, tape=2 * steps + len(x) + 1, origin=steps)
        rep = verify_compiled(compiled, inputs=[x, x[:1], ""], use_onnx=True)
        assert rep.ok, (path.name, rep.first)


@needs_corpus
def test_verify_c17_exhaustive_cli(capsys):
    code, o, _ = run_cli(capsys, "verify", CORPUS / "circuits" / "iscas85" / "c17.bench", "--json")
    rep = json.loads(o)
    assert code == 0 and rep["ok"] and rep["n_inputs"] == 32


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.strategies import machines  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_machines_compile_and_verify(data):
    """Random small machines, unrolled and compiled to a relu net, match the interpreter
    in torch and onnxruntime on random inputs."""
    m = data.draw(machines(grid=False, max_states=3, max_symbols=3))
    steps = data.draw(st.integers(1, 6))
    xs = data.draw(st.lists(st.text(alphabet=st.sampled_from(m.alphabet), max_size=steps + 1),
                            min_size=1, max_size=4))
    compiled = tm2nn_compile(m, steps=steps)
    rep = verify_compiled(compiled, inputs=xs, use_onnx=True)
    assert rep.ok, rep.first
    assert rep.out_of_window == 0  # the default window 2T+1 holds every run of T steps


def test_margin_cli_reports_both_variants(capsys):
    code, o, _ = run_cli(capsys, "margin", EXAMPLES / "full_adder.circ", "--trials", "2", "--json")
    rows = json.loads(o)
    assert code == 0 and [r["corrections"] for r in rows] == [True, False]
    for r in rows:
        assert 0 < r["certified"] <= r["eps_gradient"] and r["certified"] <= r["eps_random"]
    assert rows[0]["certified"] > rows[1]["certified"]  # the corrections buy margin
    code, _, err = run_cli(capsys, "margin", EXAMPLES / "bb3.tm")
    assert code == 2 and "--steps" in err
