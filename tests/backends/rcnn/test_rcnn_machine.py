"""RCNN machine mode (Goel et al., Def. 5 / B.2): the filter applied over the grid
matches the interpreter at every step (state, head, every cell), to halting, in torch
and onnxruntime; reports, refusals and the CLI."""

from __future__ import annotations

import json
import random
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tm2nn
from tests.conftest import CORPUS, EXAMPLES
from tests.strategies import machines
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.ir import GridMachine
from tm2nn.syntax import load, load_all
from tm2nn.verify.check import verify_compiled

#: machine mode through the public entry (options validated once, by the backend)
compile_rcnn = partial(tm2nn.compile, backend="rcnn")

#: Line examples the float32 filter can carry (D <= 12 digits); sign_sum_3x2's 308 lowered
#: states need 13 and run in float64 (tests/backends/rcnn/test_rcnn_float64.py).
TOO_WIDE = {"sign_sum_3x2"}
LINE_EXAMPLES = [p for p in sorted(EXAMPLES.glob("*.tm"))
                 if not isinstance(load(p), GridMachine) and p.stem not in TOO_WIDE]


def tapes(m, n: int, seed: int = 0, max_len: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [""] + ["".join(rng.choice(m.alphabet) for _ in range(rng.randint(1, max_len))) for _ in range(n)]


def ok(c, inputs, use_onnx=True):
    """Every input, every step, on torch, the fused engine and (``use_onnx``) onnxruntime."""
    engines = ["torch", "fused"] + ["onnxruntime"] * use_onnx
    rep = verify_compiled(c, inputs=inputs, engines=engines)
    assert rep.first is None, rep.first
    assert rep.ok and rep.n_inputs == len(inputs)
    assert list(rep.engines) == engines
    return rep


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_the_interpreter_at_every_step(path):
    m = load(path)
    inputs = tapes(m, 4, max_len=5)
    c = compile_rcnn(m, steps=40, max_input=5)
    ok(c, inputs)


def corpus(stem: str):
    from tm2nn.syntax import std

    path = CORPUS / "tm" / "bb" / f"{stem}.txt"
    if not path.exists():
        pytest.skip("../shared/corpus is absent")
    rows = [r for r in map(std.parse_corpus_line, path.read_text().splitlines()) if r]
    return [(m, int(f[1]), int(f[2])) for m, (_t, f) in zip(load_all(path, "std"), rows)]


@pytest.mark.parametrize("stem", ["2x2", "3x2", "4x2"])
def test_busy_beaver_champions(stem):
    m, steps, sigma = max(corpus(stem), key=lambda r: r[1])
    c = compile_rcnn(m, steps=steps, max_input=0)
    ok(c, [""])
    rep = c.run("")
    assert rep["halted"] and rep["steps"] == steps and rep["sigma"] == sigma


def test_hundred_corpus_machines():
    rows = corpus("2x2") + corpus("3x2")
    for m, steps, _sigma in random.Random(5).sample(rows, 100):
        ok(compile_rcnn(m, steps=steps, max_input=0), [""])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=3), seed=st.integers(0, 2**16))
def test_random_machines_match_at_every_step(m, seed):
    c = compile_rcnn(m, steps=10, max_input=4)
    ok(c, tapes(m, 4, seed, max_len=4), use_onnx=seed % 2 == 0)


def test_not_halting_within_the_bound_says_so():
    m = load(EXAMPLES / "bb4.tm")
    c = compile_rcnn(m, steps=30, max_input=0)
    rep = c.run("")
    assert rep == run_machine(m, "", 30).report() and rep["halted"] is False


def test_refusals():
    with pytest.raises(Tm2nnError, match="step bound"):
        compile_rcnn(load(EXAMPLES / "bb3.tm"), steps=0)
    with pytest.raises(Tm2nnError, match="refusing to compile"):
        compile_rcnn(load(EXAMPLES / "bb3.tm"), steps=10**5)
    with pytest.raises(Tm2nnError, match="one row"):
        compile_rcnn(load(EXAMPLES / "grid_copy_down.tm"), steps=5)
    c = compile_rcnn(load(EXAMPLES / "binary_increment.tm"), steps=10, max_input=3)
    with pytest.raises(Tm2nnError, match="longer than the compiled bound"):
        verify_compiled(c, inputs=["10110"], use_onnx=False)


def test_cli_run_and_verify(run_cli):
    src = str(EXAMPLES / "binary_increment.tm")
    for inp in ("1011", "111"):
        r1 = run_cli("run", src, "--input", inp, "--json")
        r2 = run_cli("run", src, "--input", inp, "--json", "--backend", "rcnn", "--max-steps", "30")
        assert r1.code == r2.code == 0
        assert json.loads(r1.out) == json.loads(r2.out)
    r = run_cli("run", str(EXAMPLES / "bb4.tm"), "--json", "--backend", "rcnn", "--max-steps", "20")
    assert r.code == 1 and json.loads(r.out)["halted"] is False
    r = run_cli("verify", str(EXAMPLES / "bb3.tm"), "--backend", "rcnn", "--steps", "25", "--max-input", "2")
    assert r.code == 0 and "0 mismatching" in r.out
    r = run_cli("run", str(EXAMPLES / "grid_copy_down.tm"), "--backend", "rcnn", "--max-steps", "5")
    assert r.code == 2 and "one row" in r.err and "Traceback" not in r.err


def test_a_run_off_a_too_narrow_window_is_a_mismatch_not_a_crash():
    import copy

    m = load(EXAMPLES / "binary_increment.tm")
    c = compile_rcnn(m, steps=12, max_input=3)
    narrow = copy.deepcopy(c)
    top, left, h, w = c.input_encoding["window"]
    narrow.input_encoding["window"] = [top, 0, h, 3]  # the source head reaches column 1
    rep = verify_compiled(narrow, inputs=["1"], use_onnx=False)
    assert not rep.ok and rep.first is not None and rep.first.field != "encoding"
    assert verify_compiled(c, inputs=["1"], use_onnx=False).ok


def test_cli_compile_eval_and_info_from_the_model_file(run_cli, tmp_path):
    src = str(EXAMPLES / "binary_increment.tm")
    for suffix in (".onnx", ".pt", ".safetensors"):
        out = tmp_path / f"m{suffix}"
        r = run_cli("compile", src, "--backend", "rcnn", "--steps", "20", "--max-input", "4", "-o", str(out))
        assert r.code == 0 and out.is_file()
        for inp in ("1011", "", "111"):
            r1, r2 = run_cli("eval", str(out), "--input", inp, "--json"), run_cli("run", src, "--input", inp, "--json")
            assert r1.code == r2.code == 0 and json.loads(r1.out) == json.loads(r2.out)
        r = run_cli("eval", str(out), "--input", "10110")
        assert r.code == 2 and "longer than the compiled bound" in r.err
    r = run_cli("info", str(tmp_path / "m.onnx"), "--json")
    rows = {q: (ours, paper) for q, ours, paper in json.loads(r.out)["bounds"]}
    assert rows["d_rc (Def. 5 width)"][0] == "1,970" and "Alg. 1" in rows["d_rc (Def. 5 width)"][1]
    assert "Cor. 3" in rows["distinct weight values, all layers"][1]


def test_onnx_size_does_not_grow_with_the_step_bound():
    from tm2nn.emit.onnx_model import to_onnx

    m = load(EXAMPLES / "bb3.tm")
    sizes = [len(to_onnx(compile_rcnn(m, steps=t, max_input=0).net).SerializeToString()) for t in (5, 50, 500)]
    assert max(sizes) - min(sizes) <= 8, sizes
