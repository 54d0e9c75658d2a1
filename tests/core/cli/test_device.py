"""Devices (issue 35, point 1): ``--device`` on run, eval, verify, margin and learn, and the
``device=`` argument of :class:`tm2nn.handle.Compiled`'s methods.  This machine has no GPU:
``--device cpu`` must equal no device, and a device that is not present, or an engine that
runs on the CPU only, must be refused in one line (exit 2, no traceback)."""

import json

import pytest
import torch

from tests.conftest import EXAMPLES
from tm2nn import compile as compile_source
from tm2nn import learn
from tm2nn.cli import main
from tm2nn.errors import OptionError

BB3 = EXAMPLES / "bb3.tm"
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, out, err) -> str:
    assert code == 2, (code, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tm2nn: error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def bb3():
    return compile_source(BB3, "transformer", steps=25)


# -- the command line ----------------------------------------------------------------------------
def test_run_device_cpu_equals_no_device(capsys):
    argv = ["run", BB3, "--backend", "transformer", "--max-steps", "25", "--json"]
    code, plain, err = run_cli(capsys, *argv)
    assert code == 0, err
    code, on_cpu, err = run_cli(capsys, *argv, "--device", "cpu")
    assert code == 0, err
    assert json.loads(on_cpu) == json.loads(plain)


def test_eval_device_cpu_equals_no_device(tmp_path, capsys):
    model = tmp_path / "fa.pt"
    assert run_cli(capsys, "compile", EXAMPLES / "full_adder.circ", "--backend", "relu-circuit", "-o", model)[0] == 0
    argv = ["eval", model, "--input", "101", "--input", "011", "--json"]
    code, plain, err = run_cli(capsys, *argv)
    assert code == 0, err
    code, on_cpu, err = run_cli(capsys, *argv, "--device", "cpu")
    assert code == 0, err
    assert on_cpu == plain


def test_verify_device_cpu_equals_no_device(capsys):
    argv = ["verify", EXAMPLES / "full_adder.circ", "--backend", "relu-circuit", "--json"]
    reps = []
    for extra in ([], ["--device", "cpu"]):
        code, out, err = run_cli(capsys, *argv, *extra)
        assert code == 0, err
        rep = json.loads(out)
        rep.pop("seconds")
        reps.append(rep)
    assert reps[0] == reps[1] and reps[0]["ok"]


@no_cuda
@pytest.mark.parametrize("argv", [
    ["run", BB3, "--backend", "transformer", "--max-steps", "25"],
    ["verify", EXAMPLES / "full_adder.circ", "--backend", "relu-circuit"],
    ["margin", EXAMPLES / "full_adder.circ", "--samples", "2", "--trials", "1"],
    ["learn", EXAMPLES / "parity8.circ", "--target", "parity:10110010", "--steps", "5", "--test", "2"],
])
def test_a_missing_cuda_device_is_one_line(capsys, argv):
    line = one_line_error(*run_cli(capsys, *argv, "--device", "cuda"))
    assert "--device 'cuda'" in line and "no CUDA device" in line


def test_eval_missing_cuda_device_is_one_line(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    model = tmp_path / "fa.onnx"
    assert run_cli(capsys, "compile", EXAMPLES / "full_adder.circ", "--backend", "relu-circuit", "-o", model)[0] == 0
    assert "--device 'cuda:1'" in one_line_error(*run_cli(capsys, "eval", model, "--device", "cuda:1"))


@pytest.mark.parametrize("value", ["nonsense", "cpu:0", "gpu", ""])
def test_a_bad_device_name_exits_2(capsys, value):
    line = one_line_error(*run_cli(capsys, "run", BB3, "--backend", "transformer", "--device", value))
    assert line.startswith("tm2nn: error: --device")


def test_the_cli_refuses_cpu_only_engines_and_the_interpreter_off_the_cpu(capsys):
    line = one_line_error(*run_cli(capsys, "run", BB3, "--backend", "transformer", "--engine", "index",
                                   "--device", "meta"))
    assert "index engine runs on the CPU only" in line
    line = one_line_error(*run_cli(capsys, "run", BB3, "--device", "meta"))
    assert "interpreter runs on the CPU" in line
    line = one_line_error(*run_cli(capsys, "run", BB3, "--backend", "transformer", "--device", "meta"))
    assert "'meta' holds shapes" in line


# -- the handle ----------------------------------------------------------------------------------
def test_torch_on_meta_puts_every_tensor_there(bb3):
    module = bb3.torch(device="meta")
    tensors = [*module.parameters(), *module.buffers()]
    assert tensors and {t.device.type for t in tensors} == {"meta"}
    assert {p.dtype for p in module.parameters() if p.is_floating_point()} == {torch.float32}
    exact = bb3.torch(device="meta", dtype=torch.float64)
    assert {p.dtype for p in exact.parameters() if p.is_floating_point()} == {torch.float64}


def test_run_and_check_on_cpu_equal_the_default(bb3):
    texts = ["", "1", "11"]
    assert bb3.run(texts, device="cpu") == bb3.run(texts)
    assert bb3.run("", device=torch.device("cpu")) == bb3.run("")
    assert bb3.check(texts, device="cpu") == bb3.check(texts)
    assert bb3.module("cpu") is bb3.module()  # one cached module per device
    assert bb3.runner("torch", "cpu") is bb3.runner("torch")


@pytest.mark.parametrize("engine", ["index", "onnxruntime"])
@pytest.mark.parametrize("device", ["meta", "cuda"])
def test_cpu_only_engines_refuse_another_device(bb3, engine, device):
    for call in (lambda: bb3.run("", engine=engine, device=device),
                 lambda: bb3.runner(engine, device),
                 lambda: bb3.verify([""], engines=[engine], device=device)):
        with pytest.raises(OptionError, match=f"the {engine} engine runs on the CPU only"):
            call()


def test_the_fused_engine_refuses_another_device():
    c = compile_source(EXAMPLES / "full_adder.circ", "relu-circuit")
    with pytest.raises(OptionError, match="the fused engine runs on the CPU only"):
        c.run("101", engine="fused", device="meta")
    with pytest.raises(OptionError, match="the fused engine runs on the CPU only"):
        c.runner("fused", "cuda")


def test_on_device_is_scoped(bb3):
    with bb3.on_device("cpu"):
        assert bb3._device is None
    with pytest.raises(OptionError, match="'meta' holds shapes"):
        with bb3.on_device("meta"):
            pass
    assert bb3._device is None


def test_verify_on_cpu_equals_the_default(bb3):
    a = bb3.verify(["", "1", "111"], device="cpu").to_json()
    b = bb3.verify(["", "1", "111"]).to_json()
    a.pop("seconds"), b.pop("seconds")
    assert a == b and a["ok"]


@no_cuda
def test_handle_refuses_a_missing_device(bb3):
    for call in (lambda: bb3.run("", device="cuda"), lambda: bb3.torch(device="cuda"),
                 lambda: bb3.verify([""], device="cuda:0")):
        with pytest.raises(OptionError, match="no CUDA device"):
            call()


# -- trainers ------------------------------------------------------------------------------------
def test_exact_abbe_sandon_training_refuses_another_device():
    kw = {"target": "parity:10110010", "steps": 5, "test": 2}
    with pytest.raises(OptionError, match="exact trains in exact arithmetic, on the CPU only"):
        learn(EXAMPLES / "parity8.circ", "abbe-sandon", device="meta", **kw)
    assert (learn(EXAMPLES / "parity8.circ", "abbe-sandon", device="cpu", engine="float64", **kw).summary
            == learn(EXAMPLES / "parity8.circ", "abbe-sandon", engine="float64", **kw).summary)
