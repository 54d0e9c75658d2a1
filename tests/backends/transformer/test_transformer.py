"""The transformer backend (Wei, Chen & Ma §4 / App. C): step-by-step agreement with the
interpreter, stays and halting, softmax, refusals, and the CLI."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tm2nn
from tests.conftest import CORPUS, EXAMPLES
from tests.strategies import machines
from tm2nn.backends.transformer.layout import Layout
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.ir import GridMachine
from tm2nn.nets import Attention, Decode
from tm2nn.syntax import load, load_all
from tm2nn.verify import verify_compiled

LINE_EXAMPLES = [p for p in sorted(EXAMPLES.glob("*.tm")) if not isinstance(load(p), GridMachine)]


def compile_tf(m, **options):
    """The transformer model of ``m`` with ``options`` (the user's handle)."""
    return tm2nn.compile(m, "transformer", **options)


def tapes(m, n: int, seed: int = 0, max_len: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [""] + ["".join(rng.choice(m.alphabet) for _ in range(rng.randint(1, max_len))) for _ in range(n)]


def engines(c, use_onnx: bool = False) -> list[str]:
    """Every engine a model runs on: torch, onnxruntime when asked, and the index and
    program engines for hard-max models (they refuse softmax)."""
    return ["torch"] + (["onnxruntime"] if use_onnx else []) + \
        (["index", "program"] if c.options["attention"] == "hardmax" else [])


def ok(c, inputs, use_onnx=False):
    rep = verify_compiled(c, inputs=inputs, engines=engines(c, use_onnx))
    assert rep.first is None, rep.first
    assert rep.ok and rep.n_inputs == len(inputs)
    return rep


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_interpreter_every_step(path):
    """Every step to T = 120 (bb4 halts at 107 on the blank tape) on the index and program engines.
    Torch runs to the last of these tapes' halting steps, plus 4 steps of the halted
    configuration (at most T): after that the steps repeat it, which the index engine
    checks to T, and tests/backends/transformer/test_index_engine.py proves it computes the torch module's
    function step by step (the halted steps were most of torch's time here)."""
    m = load(path)
    inputs = tapes(m, 25)
    rep = verify_compiled(compile_tf(m, steps=120), inputs=inputs, engines=["index", "program"])
    assert rep.ok and rep.first is None and rep.n_inputs == len(inputs)
    last = max(run_machine(m, t, 120).steps for t in inputs)
    c = compile_tf(m, steps=min(120, last + 4))
    rep = verify_compiled(c, inputs=inputs, engines=["torch"])
    assert rep.ok and rep.first is None and rep.n_inputs == len(inputs)


def test_layout_width_is_the_papers():
    m = load(EXAMPLES / "bb4.tm")
    c = compile_tf(m, steps=107)
    lay = Layout.from_json(c.output_encoding["layout"])
    k, a = len(m.states), len(m.alphabet)
    assert lay.w_pos == (2 * 107).bit_length()
    assert lay.width == k + 2 * a + 3 * lay.w_pos + (2 * a + lay.w_pos + 5)
    dec = next(op for op in c.net.nodes if isinstance(op, Decode))
    selfs = [op for op in dec.body.nodes if isinstance(op, Attention) and op.is_self]
    assert len(selfs) == lay.w_pos + 2  # Claims C.4, C.5 x w_pos, C.6
    assert c.net.info()["depth"]["attention"] == 1 + 107 * (lay.w_pos + 3)


def corpus_machines(stem: str):
    """(machine, steps, sigma) for every line of a bb corpus file (skip if absent)."""
    from tm2nn.syntax import std

    path = CORPUS / "tm" / "bb" / f"{stem}.txt"
    if not path.exists():
        pytest.skip("../shared/corpus is absent")
    rows = [r for r in map(std.parse_corpus_line, path.read_text().splitlines()) if r]
    ms = load_all(path, "std")
    assert len(ms) == len(rows)
    return [(m, int(f[1]), int(f[2])) for m, (_t, f) in zip(ms, rows)]


def _champion(stem: str):
    return max(corpus_machines(stem), key=lambda r: r[1])


@pytest.mark.parametrize("stem", ["2x2", "3x2", "4x2", "2x3"])
def test_busy_beaver_champions_halt_with_listed_steps(stem):
    m, steps, sigma = _champion(stem)
    c = compile_tf(m, steps=steps + 1)
    ok(c, [""])
    rep = c.run("")
    assert (rep["halted"], rep["steps"], rep["sigma"]) == (True, steps, sigma)


def test_not_halting_within_bound_says_so():
    m = load(EXAMPLES / "bb4.tm")
    c = compile_tf(m, steps=50)
    rep = c.run("")
    want = run_machine(m, "", 50).report()
    assert rep == want and rep["halted"] is False and rep["steps"] == 50


def test_binary_counter_stays_and_morphett_missing_rule():
    m = load(EXAMPLES / "binary_counter.tm")  # halts by a stay move into `done`
    c = compile_tf(m, steps=300)
    assert c.options["decoder_steps"] == 600 and c.options["stay_aux_states"] == 1
    ok(c, ["000000", "0101", "1", ""])
    assert c.run("000000")["steps"] == 247


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=3), seed=st.integers(0, 2**16))
def test_random_machines_match_at_every_step(m, seed):
    c = compile_tf(m, steps=14)
    ok(c, tapes(m, 6, seed, max_len=5))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=3), seed=st.integers(0, 2**16))
def test_shared_history_is_the_per_layer_search(m, seed):
    """The C.5/C.6 layers attending over the search input's history (one cache) compute
    the same taps as each layer attending over its own input's (Claims C.4–C.6 read
    literally; docs/transformer.md), in torch and in onnxruntime."""
    from tm2nn.backends.transformer.runtime import encode_tokens, torch_runner

    inputs = tapes(m, 4, seed, max_len=5)
    shared, literal = compile_tf(m, steps=12), compile_tf(m, steps=12, shared_history=False)
    n_hist = [len(c.net.nodes[1].histories()) for c in (shared, literal)]
    assert n_hist == [1, c_layers(literal)]  # the search input x alone; else one per layer
    tok = encode_tokens(shared.input_encoding, inputs)
    a, b = torch_runner(shared.net)(tok), torch_runner(literal.net)(tok)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)  # float32 sums in another order
    ok(literal, inputs, use_onnx=True)


def c_layers(c) -> int:
    return sum(isinstance(op, Attention) and op.is_self for op in c.net.nodes[1].body.nodes)


def readout_reports(c, inputs: list[str]) -> list[dict]:
    """The compiled ONNX model's own decoded outputs (readout.py), as run reports."""
    from tm2nn.backends.transformer.runtime import encode_tokens
    from tm2nn.emit.onnx_runtime import run_onnx
    from tm2nn.modelfile.formats import onnx_model

    model = onnx_model(c)
    names = [o.name for o in model.graph.output]
    assert names == ["trace", "state", "halted", "steps", "head", "final_tape"]
    _trace, state, halted, steps, head, cells = run_onnx(model, encode_tokens(c.input_encoding, inputs))
    lay = Layout.from_json(c.output_encoding["layout"])
    assert cells.shape == (len(inputs), 2 * lay.offset + 1)
    out = []
    for b in range(len(inputs)):
        tape = "".join(lay.alphabet[k] for k in cells[b]).strip(lay.blank)
        out.append({"halted": bool(halted[b]), "steps": int(steps[b]), "state": lay.states[state[b]],
                    "tape": tape, "head": int(head[b])})
    return out


def interp_reports(m, inputs, steps: int) -> list[dict]:
    keys = ("halted", "steps", "state", "tape", "head")
    return [{k: run_machine(m, t, steps).report()[k] for k in keys} for t in inputs]


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_onnx_outputs_the_final_configuration(path):
    m = load(path)
    inputs = tapes(m, 6, seed=5)
    for steps in (9, 60):  # often not halted yet, then halted
        c = compile_tf(m, steps=steps)
        assert readout_reports(c, inputs) == interp_reports(m, inputs, steps)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=3), seed=st.integers(0, 2**16))
def test_onnx_outputs_match_the_interpreter_on_random_machines(m, seed):
    inputs = tapes(m, 5, seed, max_len=5)
    c = compile_tf(m, steps=11)
    assert readout_reports(c, inputs) == interp_reports(m, inputs, 11)


def test_a_wrong_weight_is_caught_at_the_right_step():
    """Break Claim C.6's null key: the search then never finds past writes."""
    import dataclasses

    m = load(EXAMPLES / "binary_increment.tm")
    c = compile_tf(m, steps=30)
    dec = c.net.nodes[1]
    body = dec.body
    nodes = tuple(dataclasses.replace(op, null_key=op.null_key + 5.0) if op.name == "S.c6" else op
                  for op in body.nodes)
    from tm2nn.nets import Net

    body2 = Net(body.name, body.inputs, nodes, body.outputs)
    net2 = Net(c.net.name, c.net.inputs, (c.net.nodes[0], dataclasses.replace(dec, body=body2), *c.net.nodes[2:]),
               c.net.outputs)
    bad = dataclasses.replace(c, net=net2)
    rep = verify_compiled(bad, inputs=["1011"], use_onnx=False)
    assert not rep.ok and rep.first.step is not None
    # binary_increment on 1011 first re-reads a written cell when it walks back left (step 5)
    assert rep.first.step == 5, rep.first


def test_softmax_needs_a_cold_enough_beta():
    from tm2nn.backends.transformer.beta import find_beta

    m = load(EXAMPLES / "binary_increment.tm")
    inputs = ["1011", "111", "", "10"]
    res = find_beta(lambda b: compile_tf(m, steps=20, attention="softmax", beta=b), inputs=inputs)
    beta = res["beta"]
    assert beta is not None and res["below"] is not None and res["below"] < beta
    ok(compile_tf(m, steps=20, attention="softmax", beta=beta), inputs)
    rep = verify_compiled(compile_tf(m, steps=20, attention="softmax", beta=res["below"]), inputs=inputs, use_onnx=False)
    assert not rep.ok


def test_refusals():
    with pytest.raises(Tm2nnError, match="grid machine"):
        compile_tf(load(EXAMPLES / "grid_copy_down.tm"), steps=5)
    with pytest.raises(Tm2nnError, match="step bound"):
        compile_tf(load(EXAMPLES / "bb3.tm"), steps=0)
    with pytest.raises(Tm2nnError, match="refusing to compile.*positions of 33 bits"):
        compile_tf(load(EXAMPLES / "bb3.tm"), steps=2**31)


def test_cli_run_matches_interpreter(run_cli):
    for inp in ("1011", "111"):
        r1 = run_cli("run", str(EXAMPLES / "binary_increment.tm"), "--input", inp, "--json")
        r2 = run_cli("run", str(EXAMPLES / "binary_increment.tm"), "--input", inp, "--json",
                     "--backend", "transformer", "--max-steps", "40")
        assert r1.code == r2.code == 0
        assert json.loads(r1.out) == json.loads(r2.out)
    r = run_cli("run", str(EXAMPLES / "bb4.tm"), "--json", "--backend", "transformer", "--max-steps", "30")
    assert r.code == 1 and json.loads(r.out)["halted"] is False
    r = run_cli("run", str(EXAMPLES / "binary_increment.tm"), "--input", "12", "--backend", "transformer")
    assert r.code == 2 and "--input:1:2" in r.err


def test_cli_verify_and_info(run_cli):
    r = run_cli("verify", str(EXAMPLES / "bb3.tm"), "--backend", "transformer", "--steps", "30",
                "--samples", "20", "--seed", "3", "--no-onnx")
    assert r.code == 0 and "0 mismatching" in r.out
    r = run_cli("info", str(EXAMPLES / "bb3.tm"), "--backend", "transformer", "--steps", "30", "--json")
    rows = {q: (ours, paper) for q, ours, paper in json.loads(r.out)["bounds"]}
    assert r.code == 0 and rows["w_pos"][0].startswith("6 ")


def test_decoded_taps_are_exact_zero_one():
    m = load(EXAMPLES / "bb3.tm")
    c = compile_tf(m, steps=21)
    from tm2nn.backends.transformer.runtime import encode_tokens, torch_runner

    taps = torch_runner(c.net)(encode_tokens(c.input_encoding, ["", "11"]))
    assert np.max(np.minimum(np.abs(taps), np.abs(taps - 1))) < 1e-5


@pytest.mark.slow
def test_ten_thousand_steps_binary_counter():
    """T = 10^4 (2·10^4 decoder steps: the counter's stays are lowered; w_pos = 16) on the
    index engine, every step checked against the interpreter, and the decoded report.  The
    ONNX model scans every past step at every step (O(T^2): about 40 s at T = 10^4), so
    onnxruntime runs T = 2,048 (4,096 decoder steps, w_pos = 14): every step, and the
    model's own decoded outputs.  tests/backends/transformer/test_index_engine.py proves step by step that the
    index engine computes the torch module's function, on every example."""
    from tm2nn.backends.transformer.decoding import TraceDecoder
    from tm2nn.backends.transformer.runtime import encode_tokens, run_taps
    from tm2nn.emit.onnx_runtime import run_onnx
    from tm2nn.modelfile.formats import onnx_model
    from tm2nn.verify.runs import first_divergence

    m = load(EXAMPLES / "binary_counter.tm")
    text = "0" * 14
    for T, w_pos in ((10_000, 16), (2_048, 14)):
        c = compile_tf(m, steps=T)
        assert c.options["decoder_steps"] == 2 * T and c.options["w_pos"] == w_pos
        want = run_machine(m, text, T).report()
        assert want["halted"] is False
        if T == 10_000:
            trace = run_taps(c, [text], "index")
        else:
            tokens = encode_tokens(c.input_encoding, [text])
            trace, state, halted, steps, head, _cells = run_onnx(onnx_model(c), tokens)
            assert (bool(halted[0]), int(steps[0]), int(head[0])) == (False, T, want["head"])
            assert c.output_encoding["layout"]["states"][int(state[0])] == want["state"]
        assert trace.shape[:2] == (1, 2 * T + 1)
        decoded = TraceDecoder(c.output_encoding).decode(trace[0], text)
        assert first_divergence(m, decoded, text, T) is None
        assert decoded.report == want
