"""The index engine (``--engine index``, tm2nn/engines): the same function as the compiled
transformer, checked against the dense hard-max path at every step, and against the
interpreter through ``verify``; its lookup against brute force; its refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends.transformer.test_transformer import LINE_EXAMPLES, compile_tf, tapes
from tests.conftest import EXAMPLES
from tests.strategies import machines
from tm2nn.backends.transformer.decoding import TraceDecoder
from tm2nn.backends.transformer.engines import decode_kernel as K
from tm2nn.backends.transformer.engines.hardmax_index import (
    IM_CAP,
    IM_D,
    IM_NV,
    IM_VALCOLS,
    IM_WIDTH,
    MAX_KEY_BITS,
    STACK,
)
from tm2nn.backends.transformer.engines.index_engine import IndexEngine
from tm2nn.emit.torch_emit import to_torch
from tm2nn.emit.torch_seq import record_attention
from tm2nn.engines import EngineRefused
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.nets import Decode
from tm2nn.options import OptionError
from tm2nn.syntax import load
from tm2nn.verify import verify_compiled


def dense(c, tokens):
    """The dense hard-max path: the torch module in float64 (every tap exactly 0/1 there),
    its taps and every attention call's weights (null first)."""
    mod = to_torch(c.net, torch.float64)
    with torch.no_grad(), record_attention() as rec:
        taps = mod(torch.from_numpy(tokens)).numpy()
    return taps, rec


def assert_same_function(c, texts, engine: IndexEngine | None = None):
    """Taps bit for bit, and at every step and attention op: the null's weight and the
    number of items the hard-max attends to, engine against the dense path."""
    tokens = c.encode(texts)
    want, rec = dense(c, tokens)
    eng = engine or IndexEngine(c.net)
    got = eng.run(tokens, probe=True)
    assert got.taps.dtype == np.int8
    assert np.array_equal(got.taps.astype(np.float64), want), np.argwhere(got.taps != want)[:3]
    for a, name in enumerate(eng.prog.attn_names):
        if name.startswith("P."):  # the prologue's op: its call is not a decoder step
            continue
        calls = rec[name]
        assert len(calls) == eng.steps
        null = np.stack([w[:, 0] for w in calls], 1)               # [B, steps]; w: [B, 1 + n] per step
        items = np.stack([(w[:, 1:] > 0).sum(1) for w in calls], 1)
        assert np.array_equal(got.probes[:, :, a, 3], null), name
        assert np.array_equal(got.probes[:, :, a, 2], items), name
    return got


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_examples_same_function_every_step(path):
    m = load(path)
    c = compile_tf(m, steps=40)
    assert_same_function(c, tapes(m, 6))


@pytest.mark.parametrize("opts", [{"shared_history": False}, {"correction_placement": "layers"},
                                  {"cls_readout": True}, {"corrections": False}],
                         ids=["per-layer-histories", "corrections-every-layer", "cls", "no-corrections"])
def test_variants_same_function(opts):
    m = load(EXAMPLES / "even_ones.tm")
    c = compile_tf(m, steps=24, **opts)
    got = assert_same_function(c, tapes(m, 5, seed=3))
    if opts.get("cls_readout"):  # θ_cls's -1 (reject) is kept exactly
        assert set(np.unique(got.taps[:, :, -1])) <= {-1, 0, 1}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(grid=False, max_states=4, max_symbols=3), st.integers(0, 2**31))
def test_random_machines_same_function(m, seed):
    c = compile_tf(m, steps=14)
    assert_same_function(c, tapes(m, 3, seed=seed, max_len=5))


@pytest.mark.parametrize("separable", [True, False], ids=["corrections-looked-up", "corrections-as-layers"])
def test_every_op_output_every_step(separable):
    """The whole workspace after each step against every op output of the dense float64
    path (forward hooks on the torch body's op modules): equal, bit for bit, except
    Prop. 3.4's round intermediates (``x - 1/3``: the two paths may round them
    differently in the last bit), to 1e-12.  With ``separable`` (the default) a round
    is one looked-up instruction and its intermediates are not kept; without, every
    one is compared."""
    m = load(EXAMPLES / "bb4.tm")
    c = compile_tf(m, steps=12)
    eng = IndexEngine(c.net, separable=separable)
    assert any(".round_a" in n for n in eng.prog.body.slots) != separable
    tokens = c.encode(["", "0110"])
    got = eng.run(tokens, dump=True)
    mod = to_torch(c.net, torch.float64)
    dec = next(x for x in mod.modules() if type(x).__name__ == "DecodeModule")
    seen: dict[str, list] = {}
    for sub in dec.body.children():
        if hasattr(sub, "op_name"):
            sub.register_forward_hook(lambda mm, i, o: seen.setdefault(mm.op_name, []).append(o.detach().numpy().copy()))
    with torch.no_grad():
        mod(torch.from_numpy(tokens))
    checked = 0
    assert set(eng.prog.body.slots) - set(seen) == {"x"}  # every op's value but the input's
    for name, (off, width) in eng.prog.body.slots.items():
        if name not in seen:
            continue
        want = np.stack(seen[name], 1)                              # [B, steps, width]
        have = got.dumps[:, :, off:off + width]
        if ".round_a" in name:
            assert np.allclose(have, want, rtol=0, atol=1e-12), name
        else:
            assert np.array_equal(have, want), name
        checked += 1
    assert checked == len(eng.prog.body.slots) - 1 > 20


def test_mutation_a_broken_lookup_is_caught():
    """Break the lookup on purpose (Claim C.6's key loses its last bit, so it can attend to
    two steps): the comparison with the dense path fails."""
    m = load(EXAMPLES / "binary_counter.tm")
    c = compile_tf(m, steps=40)
    eng = IndexEngine(c.net)
    a = eng.prog.attn_names.index("S.c6")
    eng.prog.ameta[a, K.A_DOP] -= np.uint64(1)
    with pytest.raises(AssertionError):
        assert_same_function(c, ["0000"], eng)


def test_mutation_a_shifted_null_key_is_caught():
    """Every null key one higher in the engine's copy of the weights (so the null ties the
    winners, and ties are averaged where the network has none): caught."""
    m = load(EXAMPLES / "bb4.tm")
    c = compile_tf(m, steps=30)
    eng = IndexEngine(c.net)
    for a in range(len(eng.prog.attn_names)):  # null keys one lower: the null ties or loses
        off = int(eng.prog.ameta[a, K.A_K0])
        dk = int(eng.prog.ameta[a, K.A_DK])
        eng.prog.fdata[off + dk - 1] += 1.0
    with pytest.raises((AssertionError, EngineRefused)):
        assert_same_function(c, tapes(m, 3), eng)


def test_verify_and_run_on_the_index_engine(run_cli):
    m = load(EXAMPLES / "bb4.tm")
    c = compile_tf(m, steps=110)
    rep = verify_compiled(c, inputs=tapes(m, 8), engines=["index"])
    assert rep.ok and rep.first is None and list(rep.engines) == ["index"]
    assert rep.max_deviation["index"] == 0.0
    r1 = run_cli("run", str(EXAMPLES / "bb4.tm"), "--json")
    r2 = run_cli("run", str(EXAMPLES / "bb4.tm"), "--json", "--backend", "transformer", "--engine", "index",
                 "--max-steps", "200")
    assert r1.code == r2.code == 0 and json.loads(r1.out) == json.loads(r2.out)
    r = run_cli("verify", str(EXAMPLES / "binary_increment.tm"), "--backend", "transformer", "--steps", "20",
                "--engines", "index,torch", "--input", "1011", "--input", "", "--json")
    assert r.code == 0, r.err
    assert set(json.loads(r.out)["engines"]) == {"index", "torch"}
    r = run_cli("verify", str(EXAMPLES / "binary_increment.tm"), "--backend", "transformer", "--engines", "gpu")
    assert r.code == 2 and "not an engine" in r.err


def test_eval_a_saved_model_on_the_index_engine(run_cli, tmp_path):
    out = tmp_path / "m.onnx"
    assert run_cli("compile", str(EXAMPLES / "binary_increment.tm"), "--backend", "transformer", "--steps", "30",
                   "-o", str(out)).code == 0
    a = run_cli("eval", str(out), "--input", "1011", "--json")
    b = run_cli("eval", str(out), "--input", "1011", "--json", "--engine", "index")
    assert a.code == b.code == 0 and json.loads(a.out) == json.loads(b.out)


def test_engine_is_refused_where_it_does_not_exist(run_cli):
    r = run_cli("run", str(EXAMPLES / "bb3.tm"), "--backend", "rcnn", "--engine", "index", "--max-steps", "3")
    assert r.code == 2 and "runs on torch, onnxruntime, fused, not --engine 'index'" in r.err, r.err


def test_early_stop_gives_the_full_report():
    """``run`` stops once the taps decide the report (T source steps, or a halt): the same
    report as decoding every step, and fewer steps computed."""
    m = load(EXAMPLES / "bb3.tm")
    c = compile_tf(m, steps=400)
    eng = IndexEngine.for_net(c.net)
    dec = TraceDecoder(c.output_encoding)
    tokens = c.encode(["", "1"])
    full = eng.run(tokens)
    cut = eng.run(tokens, stop=dec.horizon(2))
    assert cut.steps < full.steps
    for b, text in enumerate(["", "1"]):
        assert dec.decode(cut.taps[b], text).report == dec.decode(full.taps[b], text).report \
            == run_machine(m, text, 400).report()
    assert c.run(["", "1"], engine="index") == c.run(["", "1"], engine="torch")


def test_batch_equals_single_inputs():
    m = load(EXAMPLES / "palindrome.tm")
    c = compile_tf(m, steps=30)
    eng = IndexEngine(c.net)
    texts = tapes(m, 5, seed=7)
    both = eng.run(c.encode(texts)).taps
    for b, t in enumerate(texts):
        one = eng.run(c.encode([t])).taps[0]
        assert np.array_equal(both[b, :, :], one[:, :]) or np.array_equal(both[b, :one.shape[0]], one)


def test_softmax_is_refused_with_the_reason():
    c = compile_tf(load(EXAMPLES / "bb3.tm"), steps=10, attention="softmax", beta=20.0)
    with pytest.raises(Tm2nnError, match="hard-max.*softmax"):
        c.run("", engine="index")


def test_a_non_binary_value_is_refused_not_approximated():
    """A network outside the construction's regime (a weight halved, so a key is 0.5) is
    refused with the step and the value, never approximated."""
    import dataclasses

    from tm2nn.nets import Affine, Net

    c = compile_tf(load(EXAMPLES / "bb3.tm"), steps=10)
    dec = next(op for op in c.net.nodes if isinstance(op, Decode))
    nodes = []
    for op in dec.body.nodes:
        if isinstance(op, Affine) and op.name == "S.c2.out.lin":
            w = op.weight
            op = dataclasses.replace(op, weight=type(w)(w.shape, w.rows, w.cols, w.vals * 0.5))
        nodes.append(op)
    body = Net(dec.body.name, dec.body.inputs, tuple(nodes), dec.body.outputs)
    net = Net(c.net.name, c.net.inputs, (c.net.nodes[0], dataclasses.replace(dec, body=body)), c.net.outputs)
    with pytest.raises(EngineRefused, match="decoder step 1 .*not 0 or 1|non-integer"):
        IndexEngine(net).run(c.encode([""]))
    enc = dataclasses.replace(c.net.nodes[0], table=c.net.nodes[0].table * 0.5)  # E[:, a] = 0.5 e_a
    net = Net(c.net.name, c.net.inputs, (enc, dec), c.net.outputs)
    with pytest.raises(EngineRefused, match="encoder position 0, coordinate .* is 0.5"):
        IndexEngine(net).run(c.encode(["1"]))


def test_memory_is_estimated_and_refused_up_front():
    from tm2nn.limits import set_memory_limit

    c = compile_tf(load(EXAMPLES / "bb3.tm"), steps=50_000)
    eng = IndexEngine.for_net(c.net)
    need = eng.bytes_per_input(1)
    assert 50_000 * 32 < need < 50_000 * 200  # O(T) bytes: the index and the int8 taps
    set_memory_limit(need // 2)
    try:
        with pytest.raises(OptionError, match="index engine .* would need about"):
            eng.run(c.encode([""]))
    finally:
        set_memory_limit(None)


def test_long_runs_compile_and_torch_refuses_its_tables():
    """T = 10^7: the model is small (positions are computed), the torch module refuses
    to materialise its positional tables and names the index engine."""
    c = compile_tf(load(EXAMPLES / "bb3.tm"), steps=10**7)
    assert c.options["w_pos"] == (2 * 10**7).bit_length()
    with pytest.raises(OptionError, match="positional table .*index engine"):
        c.torch()


def test_ctrl_c_returns_the_steps_so_far(monkeypatch):
    from tm2nn import interrupt

    c = compile_tf(load(EXAMPLES / "binary_counter.tm"), steps=3000)
    eng = IndexEngine.for_net(c.net)
    monkeypatch.setattr(interrupt, "requested", lambda: True)
    with pytest.raises(interrupt.Interrupted) as e:
        eng.run(c.encode(["0000"]))
    part = e.value.partial
    assert 0 < part.shape[1] - 1 < eng.steps and e.value.done == part.shape[1] - 1
    want = eng.run(c.encode(["0000"]), steps=part.shape[1] - 1)
    assert np.array_equal(part, want.taps)


# -- the lookup, against brute force ------------------------------------------------------------
def _index(keys, vals, d):
    """One index over ``keys`` (ints of ``d`` bits, bit position p = bit d-1-p) and value
    bits ``vals`` ``[n, nv]``, built with the kernel's insert from rows ``(key bits,
    value bits)`` as a decoder step's vector would give them."""
    nv = vals.shape[1]
    n = len(keys)
    im = np.zeros((1, IM_WIDTH), dtype=np.uint64)
    im[0, IM_D], im[0, IM_NV], im[0, IM_CAP], im[0, IM_VALCOLS] = d, nv, max(1, n), d  # key columns from 0
    ist = np.zeros((1, 3), dtype=np.uint64)
    pools = (np.zeros(n, np.uint64), np.zeros(n, np.int32), np.zeros(max(1, n * nv), np.int32),
             np.zeros(n, np.uint32), np.zeros(n, np.uint32), np.zeros(n, np.uint32), np.zeros(n, np.int32),
             np.zeros(max(1, n * nv), np.int32), np.zeros(n, np.uint32))
    bits = np.array([[(k >> (d - 1 - p)) & 1 for p in range(d)] for k in keys], dtype=np.float64).reshape(n, d)
    rows = np.hstack([bits, vals.astype(np.float64)])
    cols = np.arange(d + nv, dtype=np.uint64)       # key columns 0..d-1, value columns d..d+nv-1
    status = K.insert_rows(im, ist, np.uint64(0), rows, cols, np.zeros(nv, np.int64), np.zeros(4, np.int64),
                           np.zeros(1), *pools)
    assert status == 0
    return im, ist, pools


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.data())
def test_lookup_equals_brute_force(d, data):
    """Top score, the items at it and their value sums, for any integer weights (zeros,
    negatives, ties, duplicate keys) and any threshold."""
    from tm2nn.backends.transformer.engines.hardmax_index import index_query

    n = data.draw(st.integers(1, 40))
    keys = data.draw(st.lists(st.integers(0, 2**d - 1), min_size=n, max_size=n))
    nv = data.draw(st.integers(1, 3))
    vals = np.array(data.draw(st.lists(st.lists(st.integers(0, 1), min_size=nv, max_size=nv), min_size=n,
                                       max_size=n)))
    dop = data.draw(st.integers(0, d))
    u = np.zeros(MAX_KEY_BITS + 1)
    u[:dop] = data.draw(st.lists(st.integers(-3, 3), min_size=dop, max_size=dop))
    thr = float(data.draw(st.integers(-6, 6)))
    im, ist, pools = _index(keys, vals, d)
    vs = np.zeros(nv, np.int64)
    top, count = index_query(im, ist, np.uint64(0), u, np.uint64(dop), thr, *pools, np.zeros(MAX_KEY_BITS + 1),
                             np.zeros(STACK, np.uint64), np.zeros(STACK), np.zeros(STACK, np.uint64), vs)
    bits = np.array([[(k >> (d - 1 - p)) & 1 for p in range(d)] for k in keys])
    score = bits[:, :dop] @ u[:dop]
    live = score >= thr
    if not live.any():
        assert count == 0 and top == -np.inf
        return
    best = score[live].max()
    win = live & (score == best)
    assert (top, count) == (best, win.sum())
    assert np.array_equal(vs, vals[win].sum(0))


def test_ctrl_c_in_run_reports_the_configuration_reached(monkeypatch):
    """``run`` on the index engine, interrupted: the run report of the steps decoded so
    far, the interpreter's configuration after that many steps."""
    from tm2nn import interrupt

    m = load(EXAMPLES / "binary_counter.tm")
    c = compile_tf(m, steps=3000)
    monkeypatch.setattr(interrupt, "requested", lambda: True)
    with pytest.raises(interrupt.Interrupted) as e:
        c.run("0000000000", engine="index")
    rep = e.value.reports[0]
    assert rep is not None and 0 < rep["steps"] < 3000
    assert rep == run_machine(m, "0000000000", rep["steps"]).report()


def test_consecutive_one_coordinate_layers(monkeypatch):
    """Three identity ReLU layers in a row after Lemma C.2: each pair could be looked up as
    a block, but blocks must not overlap (a block's second layer is evaluated, not folded
    into the next block).  Same function as the dense path."""
    import importlib

    from tm2nn.backends.transformer.ff import copy, relu_layer

    build_mod = importlib.import_module("tm2nn.backends.transformer.build")  # the module, not the function

    orig = build_mod.head_move

    def extra(lay, x, prefix):
        ops, cur = orig(lay, x, prefix)
        for i in range(3):
            ops += relu_layer(f"{prefix}.extra{i}", cur, lay.space, lay.space, copy(lay.space.labels, {}))
            cur = f"{prefix}.extra{i}"
        return ops, cur

    monkeypatch.setattr(build_mod, "head_move", extra)
    m = load(EXAMPLES / "bb4.tm")
    c = compile_tf(m, steps=16)
    eng = IndexEngine(c.net)
    assert sum(1 for r in eng.prog.body.iprog if r[0] == K.OP_SEPARABLE) >= 2
    assert_same_function(c, tapes(m, 3), eng)


def test_an_edited_model_file_is_refused(run_cli, tmp_path):
    """The index engine runs ``compiled.net``, the construction: a model file whose weights
    were edited is refused on it (it once ran the construction silently), and still runs
    in onnxruntime, which reads the file's weights."""
    import onnx
    from onnx import numpy_helper

    good, bad = tmp_path / "m.onnx", tmp_path / "bad.onnx"
    assert run_cli("compile", EXAMPLES / "binary_increment.tm", "--backend", "transformer", "--steps", "20",
                   "-o", good).code == 0
    m = onnx.load(str(good))
    t = next(t for t in m.graph.initializer if t.name == "encoder.table")
    a = numpy_helper.to_array(t).copy()
    a.reshape(-1)[0] += 100.0
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    onnx.save(m, str(bad))
    r = run_cli("eval", bad, "--input", "1011", "--engine", "index")
    assert r.code == 2 and "the index engine runs the construction's network: run it in onnxruntime" in r.err
    assert run_cli("eval", bad, "--input", "1011", "--engine", "onnxruntime").code in (0, 1)
