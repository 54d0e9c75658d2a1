"""The transformer in Wei, Chen & Ma's own units (§4.1, Theorem 4.1 and its proof in
App. C): the partition of a decoder step into paper transformer layers, the literal
correction placement, the θ_cls readout, the function class F_{w,d,α,T}, and the
paper's quantities (depth O(log T), ‖θ‖₁ = poly(log T)) asserted from the weights —
with mutations that show each check can fail."""

from __future__ import annotations

import dataclasses
import importlib
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends.transformer.test_transformer import compile_tf, engines
from tests.backends.transformer.test_transformer import tapes as _tapes
from tests.conftest import EXAMPLES
from tests.strategies import machines
from tm2nn.backends.transformer.attention import attention
from tm2nn.backends.transformer.backend import BACKEND
from tm2nn.backends.transformer.bounds import (
    D_CONST,
    D_PER_BIT,
    D_PROLOGUE,
    PaperQuantityError,
    check_paper_quantities,
    dense_layer_params,
    function_class,
    l1_constant,
    step_l1_bound,
)
from tm2nn.backends.transformer.cls import OUTCOME_VALUE, cls_column
from tm2nn.backends.transformer.ff import copy, relu_layer
from tm2nn.backends.transformer.layout import Layout
from tm2nn.backends.transformer.paper_layers import (
    PaperLayer,
    PaperLayerError,
    count,
    decoder,
    paper_layers,
)
from tm2nn.backends.transformer.reference import expected_cls
from tm2nn.backends.transformer.runtime import encode_tokens, torch_runner
from tm2nn.interp import run_machine
from tm2nn.ir import GridMachine
from tm2nn.nets import Attention, Net, Port, ReLU, Slice, Space, SparseMatrix, StopGradient
from tm2nn.nets.round import round_correction
from tm2nn.options import OptionError
from tm2nn.syntax import load
from tm2nn.verify import verify_compiled

#: the module (the package re-exports its function ``build`` under the same name)
build_mod = importlib.import_module("tm2nn.backends.transformer.build")
LINE_EXAMPLES = [p for p in sorted(EXAMPLES.glob("*.tm")) if not isinstance(load(p), GridMachine)]
#: T = 8 .. 1024: w_pos = bitlen(2T) = 5 .. 12 for a machine without stay moves (bb4)
SWEEP = [8 * 2**i for i in range(8)]


def tapes(m, n: int, seed: int = 0, max_len: int = 6) -> list[str]:
    return _tapes(m, n, seed, max_len)


def verified(c, inputs, use_onnx=False):
    rep = verify_compiled(c, inputs=inputs, engines=engines(c, use_onnx))
    assert rep.first is None and rep.ok, rep.first
    return rep


# ------------------------------------------------------------------------- paper layers
def test_a_decoder_step_is_the_lemmas_in_paper_layers():
    c = compile_tf(load(EXAMPLES / "bb4.tm"), steps=8)
    w = c.options["w_pos"]
    dec = c.net.nodes[1]
    layers = paper_layers(dec.body)
    assert len(layers) == count(c.net) == count(dec.body) == 10 + w
    slots = [(ly.self_attn, ly.cross_attn, ly.ff and ly.ff[1]) for ly in layers]
    assert slots == ([(None, None, "S.c1.pair"), (None, None, "S.c1.next"),            # Lemma C.1
                      (None, None, "S.c2.carry"), (None, None, "S.c2.xor"), (None, None, "S.c2.out"),  # C.2
                      ("S.c4", None, None)]                                             # Claim C.4
                     + [(f"S.c5.{j}", None, f"S.c5.{j}.ff") for j in range(w)]         # Claim C.5
                     + [("S.c6", None, "S.c6.ff"),                                      # Claim C.6
                        (None, "S.c7", "S.c8.case"), (None, None, "S.c8.and"), (None, None, "S.c8.out")])
    # the default places a correction after each group of lemmas: C.1, C.2, C.4, each C.5, C.6, C.8
    corrected = [ly.ff[1] if ly.ff else ly.self_attn for ly in layers if ly.corrected]
    assert corrected == ["S.c1.next", "S.c2.out", "S.c4", *[f"S.c5.{j}.ff" for j in range(w)], "S.c6.ff", "S.c8.out"]
    for ly in layers:
        assert ly.corrected == bool(ly.correction)
        if ly.corrected:
            assert ly.correction[0].endswith(".round.round_a") and ly.out.endswith(".round.round_b.relu")
        else:
            assert ly.out == ly.value
    assert [ly.cross_attn for ly in paper_layers(dec.prologue)] == ["P.c7", None, None]
    # every parametric op of the step is in exactly one layer (the tap's slices are not)
    named = [n for ly in layers for n in ly.ops]
    assert len(named) == len(set(named))
    assert set(named) == {op.name for op in dec.body.nodes if not isinstance(op, Slice) and op.kind != "concat"}


S2 = Space(("h:a", "h:b"))


def _net(ops, out=None) -> Net:
    ports = (Port("x", S2), Port("memory", S2, kind="sequence"))
    out = out or ops[-1].name
    return Net("bad", ports, tuple(ops), (out, out))


def _ff(name, x, wts=None):
    return relu_layer(name, x, S2, S2, wts or {("h:a", "h:a"): 1.0, ("h:b", "h:b"): 1.0})


def _att(name, inputs, history=False):
    return attention(name, inputs, S2, S2, [({"h:a": 1.0}, 0.0)], [({"h:a": 1.0}, 0.0)], {}, {"h:b": 1.0},
                     [0.5], mode="hardmax", beta=1.0, cite="test", history=history)


def test_greedy_partition_of_hand_built_nets():
    # self-attention -> cross-attention -> ReLU layer -> correction: one layer
    ops = [_att("s", ("x",)), _att("e", ("s", "memory")), *_ff("f", "e"), *round_correction(0, "f", S2, prefix="f.round")]
    assert paper_layers(_net(ops)) == [PaperLayer("s", "e", ("f.lin", "f"), tuple(op.name for op in ops[4:]), True,
                                                  value="f", out="f.round.round_b.relu")]
    # a ReLU layer, then self-attention: two layers (attention comes first in a layer)
    ops = [*_ff("f", "x"), _att("s", ("f",)), *_ff("g", "s")]
    assert [ly.ops for ly in paper_layers(_net(ops))] == [("f.lin", "f"), ("s", "g.lin", "g")]
    # two ReLU layers in a row are two paper layers; cross before self starts a new one
    ops = [*_ff("f", "x"), *_ff("g", "f"), _att("e", ("g", "memory")), _att("s", ("e",))]
    assert len(paper_layers(_net(ops))) == 4
    # a history attention over an earlier value of the stack is fine
    ops = [*_ff("f", "x"), _att("s", ("f", "x"), history=True)]
    assert [ly.self_attn for ly in paper_layers(_net(ops))] == [None, "s"]
    # the tap's slices are skipped
    ops = [*_ff("f", "x"), Slice("t", ("f",), indices=(0,))]
    assert len(paper_layers(_net(ops, out="f"))) == 1


@pytest.mark.parametrize("case, match", [
    ("affine without relu", "is not followed by its ReLU"),
    ("correction first", "a round correction after no module"),
    ("two corrections", "a round correction after another correction"),
    ("branch", "reads 'x', but the layer stack's current value is 'f'"),
    ("foreign op", "is not a module of a paper transformer layer"),
    ("fake round", "weights are not round"),
    ("broken round", "must be Affine round_a, ReLU, Affine round_b, ReLU"),
    ("output off the chain", "the output 'f.lin' is not the end of the layer stack"),
    ("history off the chain", "attends over the history of 'f.lin'"),
])
def test_nets_that_are_not_paper_layers_are_refused(case, match):
    ff = _ff("f", "x")
    rnd = round_correction(0, "f", S2, prefix="f.round")
    ops = {
        "affine without relu": [ff[0], *_ff("g", "f.lin")],
        "correction first": round_correction(0, "x", S2, prefix="x.round"),
        "two corrections": [*ff, *rnd, *round_correction(0, rnd[-1].name, S2, prefix="r2")],
        "branch": [*ff, *_ff("g", "x")],
        "foreign op": [*ff, StopGradient("s", ("f",))],
        "fake round": [*ff, dataclasses.replace(rnd[0], bias=rnd[0].bias * 2), *rnd[1:]],
        "broken round": [*ff, *rnd[:3]],
        "output off the chain": ff,
        "history off the chain": [*ff, _att("s", ("f", "f.lin"), history=True)],
    }[case]
    out = "f.lin" if case == "output off the chain" else None
    with pytest.raises(PaperLayerError, match=match):
        paper_layers(_net(ops, out))


def test_whole_model_goes_to_count_not_paper_layers():
    c = compile_tf(load(EXAMPLES / "bb3.tm"), steps=6)
    with pytest.raises(PaperLayerError, match="reads one decoder step"):
        paper_layers(c.net)
    step = _net(_ff("f", "x"))
    assert count(step) == 1 and count(c.net) == count(c.net.nodes[1].body)
    with pytest.raises(PaperLayerError, match="no decoder"):
        decoder(step)


# ------------------------------------------------------------------- correction placement
def test_layers_placement_corrects_every_layer_and_groups_fewer():
    m = load(EXAMPLES / "bb3.tm")
    for placement in ("groups", "layers"):
        c = compile_tf(m, steps=10, correction_placement=placement)
        for net in (c.net.nodes[1].body, c.net.nodes[1].prologue):
            layers = paper_layers(net)
            assert all(ly.corrected for ly in layers) == (placement == "layers")
        assert c.options["correction_placement"] == placement
    g, lay_, off = (compile_tf(m, steps=10, **kw) for kw in ({}, {"correction_placement": "layers"},
                                                            {"corrections": False}))
    fg, fl, fo = (function_class(c.net) for c in (g, lay_, off))
    assert fg["d"] == fl["d"] == fo["d"] and fg["corrected_layers"] < fl["corrected_layers"] == fl["d"]
    assert fo["corrected_layers"] == 0 and fo["alpha"] < fg["alpha"] < fl["alpha"]


def test_no_corrections_with_layers_placement_is_refused(run_cli):
    with pytest.raises(OptionError, match="correction_placement 'layers' places Prop. 3.4's corrections"):
        compile_tf(load(EXAMPLES / "bb3.tm"), steps=5, corrections=False, correction_placement="layers")
    r = run_cli("compile", str(EXAMPLES / "bb3.tm"), "--backend", "transformer", "--steps", "5",
                "--no-corrections", "--correction-placement", "layers", "-o", "x.onnx")
    assert r.code == 2 and "--correction-placement 'layers'" in r.err and "--no-corrections" in r.err
    r = run_cli("compile", "--help")
    assert "--correction-placement {groups,layers}" in r.out and "--cls-readout" in r.out


def test_every_hidden_value_is_zero_one_so_round_is_the_identity():
    """Without corrections, every ReLU layer's and attention's output at every step of
    every example is exactly 0 or 1: Prop. 3.4's round is the identity on them, which is
    why both placements compute the same function."""
    import torch
    from torch.nn.modules.module import register_module_forward_hook

    seen: dict[str, float] = {}

    def hook(mod, args, out):
        name = getattr(mod, "op_name", None)
        if name in watched:
            x = out.detach().double()
            seen[name] = max(seen.get(name, 0.0), float(torch.minimum(x.abs(), (x - 1).abs()).max()))

    for path in LINE_EXAMPLES:
        m = load(path)
        c = compile_tf(m, steps=12, corrections=False)
        dec = c.net.nodes[1]
        watched = {op.name for net in (dec.body, dec.prologue) for op in net.nodes if isinstance(op, (ReLU, Attention))}
        h = register_module_forward_hook(hook)
        try:
            torch_runner(c.net)(encode_tokens(c.input_encoding, tapes(m, 4, seed=1)))
        finally:
            h.remove()
        assert set(seen) >= watched
        assert max(seen.values()) == 0.0, {k: v for k, v in seen.items() if v}
        seen.clear()


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_layers_placement_verifies_on_the_examples(path):
    m = load(path)
    c = compile_tf(m, steps=16, correction_placement="layers")
    verified(c, tapes(m, 8, seed=2), use_onnx=path.stem in ("bb3", "palindrome"))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=3), seed=st.integers(0, 2**16))
def test_layers_placement_verifies_on_random_machines(m, seed):
    c = compile_tf(m, steps=9, correction_placement="layers", cls_readout=True)
    verified(c, tapes(m, 5, seed, max_len=5))


def test_softmax_with_every_layer_corrected_verifies():
    m = load(EXAMPLES / "binary_increment.tm")
    c = compile_tf(m, steps=12, attention="softmax", beta=12.0, correction_placement="layers")
    verified(c, ["1011", "111", "", "10"])


# --------------------------------------------------------------------------------- θ_cls
def _cls_values(c, inputs: list[str]):
    """θ_clsᵀ o_T' from the torch module's last tap and from the ONNX model's ``cls``."""
    from tm2nn.emit.onnx_runtime import run_onnx
    from tm2nn.modelfile.formats import onnx_model

    tok = encode_tokens(c.input_encoding, inputs)
    taps = torch_runner(c.net)(tok)
    model = onnx_model(c)
    names = [o.name for o in model.graph.output]
    assert names == ["trace", "state", "halted", "steps", "head", "final_tape", "cls"]
    outs = run_onnx(model, tok)
    np.testing.assert_allclose(outs[0], taps, atol=1e-5)
    return taps[:, -1, cls_column(c.output_encoding)], outs[-1]


@pytest.mark.parametrize("stem", ["even_ones", "palindrome", "balanced_parens"])
def test_cls_is_the_interpreters_outcome(stem):
    m = load(EXAMPLES / f"{stem}.tm")
    assert {"accept", "reject"} <= set(m.halting.values())
    steps = 80
    inputs = tapes(m, 10, seed=3)
    c = compile_tf(m, steps=steps, cls_readout=True)
    torch_cls, onnx_cls = _cls_values(c, inputs)
    want = []
    for text in inputs:
        r = run_machine(m, text, steps).report()
        assert r["halted"], text  # every input halts within T: cls is the outcome
        want.append(OUTCOME_VALUE.get(r["outcome"], 0.0))
    assert set(want) >= {1.0, -1.0}
    np.testing.assert_allclose(torch_cls, want, atol=1e-5)
    np.testing.assert_allclose(onnx_cls, want, atol=1e-5)
    verified(c, inputs)


def test_cls_is_zero_for_plain_halts_and_runs_that_did_not_halt():
    m = load(EXAMPLES / "bb4.tm")  # halts in state Z (plain halt) after 107 steps
    for steps in (50, 110):
        c = compile_tf(m, steps=steps, cls_readout=True)
        t, o = _cls_values(c, ["", "1"])
        assert t.tolist() == [0.0, 0.0] and o.tolist() == [0.0, 0.0]
    m = load(EXAMPLES / "even_ones.tm")  # 01101 needs 5 + 2 lowered steps; T' = 2T = 6
    c = compile_tf(m, steps=3, cls_readout=True)
    t, _ = _cls_values(c, ["01101"])
    assert t.tolist() == [0.0] and run_machine(m, "01101", 3).report()["halted"] is False


def test_cls_reads_o_of_the_last_decoder_step_not_source_step_T():
    """even_ones accepts 0110 after 5 source steps (4 moves right, then a stay lowered to
    right + left).  With T = 3 the decoder runs T' = 6 lowered steps, so o_T' is in the
    accept state although the run report (bound T) has not halted: θ_clsᵀ o_T' = +1.  The
    checker's reference runs the lowered machine for T' steps, as cls does."""
    m = load(EXAMPLES / "even_ones.tm")
    c = compile_tf(m, steps=3, cls_readout=True)
    assert c.options["decoder_steps"] == 6
    t, o = _cls_values(c, ["0110"])
    assert t.tolist() == o.tolist() == [1.0] and expected_cls(c, "0110") == 1.0
    assert c.run("0110")["halted"] is False
    verified(c, ["0110"])


def test_a_wrong_theta_cls_is_caught_by_verify():
    m = load(EXAMPLES / "even_ones.tm")
    c = compile_tf(m, steps=12, cls_readout=True)
    dec = c.net.nodes[1]
    nodes = tuple(dataclasses.replace(op, weight=SparseMatrix(op.weight.shape, op.weight.rows, op.weight.cols,
                                                              -op.weight.vals))
                  if op.name == "S.cls" else op for op in dec.body.nodes)
    body = Net(dec.body.name, dec.body.inputs, nodes, dec.body.outputs)
    bad = dataclasses.replace(c, net=Net(c.net.name, c.net.inputs, (c.net.nodes[0], dataclasses.replace(dec, body=body)),
                                         c.net.outputs))
    rep = verify_compiled(bad, inputs=["0110", "1011"], use_onnx=False)
    assert not rep.ok and rep.first.field.startswith("cls") and rep.first.expected == 1.0 and rep.first.got == pytest.approx(-1.0)


def test_cls_off_changes_nothing():
    m = load(EXAMPLES / "even_ones.tm")
    off, on = compile_tf(m, steps=8), compile_tf(m, steps=8, cls_readout=True)
    lay = Layout.from_json(off.output_encoding["layout"])
    tap_w = sum(len(lay.idx(g)) for g in lay.tap_groups)
    spaces = [len(c.net.nodes[1].body.spaces["S.tap"]) for c in (off, on)]
    assert spaces == [tap_w, tap_w + 1] and cls_column(off.output_encoding) is None
    assert "cls_column" not in off.output_encoding and cls_column(on.output_encoding) == tap_w
    tok = encode_tokens(off.input_encoding, ["0110", "1"])
    a, b = torch_runner(off.net)(tok), torch_runner(on.net)(tok)
    np.testing.assert_array_equal(a, b[..., :tap_w])
    assert type(BACKEND.reference(off)).__name__ == "TraceChecker"
    assert off.run("0110") == on.run("0110")


# ------------------------------------------------------------------------ function class
def test_function_class_of_a_model():
    m = load(EXAMPLES / "bb3.tm")
    c = compile_tf(m, steps=20)
    fc = BACKEND.analyses["function_class"](c)
    assert set(fc) >= {"w", "d", "d_total", "alpha", "alpha_per_step", "p", "beta"}
    assert fc["theorem"] == "Theorem 4.1" and fc["scaling"]["k"] == len(m.states) and fc["scaling"]["T"] == 20
    lay = Layout.from_json(c.output_encoding["layout"])
    assert fc["beta"] is None and fc["d"] == D_CONST + D_PER_BIT * lay.w_pos
    assert fc["d_total"] == fc["d"] * 20 + D_PROLOGUE
    info = c.net.info()
    # α is every tensor's l1 but the positional codes' placements (one entry per bit: Bin(i) is fixed)
    assert fc["alpha"] == pytest.approx(info["l1_norm"] - 2 * lay.w_pos)
    assert fc["alpha_per_step"] == pytest.approx(c.net.nodes[1].body.info()["l1_norm"])
    assert fc["w"] == info["max_width"] and fc["w_tm"] == lay.width
    assert fc["p"] == (fc["d"] + D_PROLOGUE) * dense_layer_params(fc["w"]) + len(m.alphabet) * fc["w"] + fc["w"]
    assert dense_layer_params(1) == 22  # 2·(3 + 5) + 3·(1 + 1)


def test_softmax_beta_is_folded_into_the_queries():
    m = load(EXAMPLES / "bb3.tm")
    hard, soft = compile_tf(m, steps=20), compile_tf(m, steps=20, attention="softmax", beta=9.0)
    fh, fs = function_class(hard.net), function_class(soft.net)
    q = sum(op.wq.l1() + np.abs(op.bq).sum() for op in soft.net.attention_layers())
    assert fs["beta"] == 9.0 and fs["alpha"] == pytest.approx(fh["alpha"] + 8.0 * q)
    check_paper_quantities(soft)


def test_info_shows_the_function_class(run_cli):
    r = run_cli("info", str(EXAMPLES / "bb3.tm"), "--backend", "transformer", "--steps", "30", "--json",
                "--correction-placement", "layers")
    assert r.code == 0
    rows = {q: (ours, paper) for q, ours, paper in json.loads(r.out)["bounds"]}
    fc = function_class(compile_tf(load(EXAMPLES / "bb3.tm"), steps=30, correction_placement="layers").net)
    assert rows["F_{w,d,α,T}: d"][0].startswith(f"{fc['d']} paper transformer layers per step = 10 + w_pos "
                                                f"({fc['d']} end in a round correction)")
    assert rows["F_{w,d,α,T}: α = ‖θ‖₁"][0].startswith(f"{fc['alpha']:.0f} ")
    assert rows["depth as one network"][0] == f"d·T' + prologue = {fc['d_total']:,}"
    assert rows["dense parameters p"][0].startswith(f"{fc['p']:,} ")
    assert rows["w_pos"][0].startswith("6 ")  # the rows that were there stay


# ---------------------------------------------------- the paper's quantities, from the weights
def test_depth_is_a_plus_b_w_pos_and_l1_is_poly_log_T():
    """T = 8 .. 1024, both placements and none: d = 10 + w_pos paper layers per step
    exactly, and ‖θ‖₁ per step ≤ the construction's polynomial ≤ C·w_pos² with one C
    (from k and |A| alone) for every T."""
    m = load(EXAMPLES / "bb4.tm")
    k, a = len(m.states), len(m.alphabet)  # bb4 has no stay moves: the lowered machine is m
    for kw in ({}, {"correction_placement": "layers"}, {"corrections": False}):
        opts = {"corrections": kw.get("corrections", True), "placement": kw.get("correction_placement", "groups")}
        C = l1_constant(k, a, **opts)
        seen = []
        for T in SWEEP:
            q = check_paper_quantities(compile_tf(m, steps=T, **kw))
            W = q["w_pos"]
            assert W == (2 * T).bit_length() and q["d"] == 10 + W and q["d_total"] == q["d"] * T + 3
            assert q["C"] == C and q["alpha_per_step"] <= step_l1_bound(k, a, W, **opts) <= C * W * W
            # the only slack: 2 of bb4's 10 (state, symbol) pairs do not move (C.1 counts 3 per pair)
            assert q["alpha_per_step_bound"] - q["alpha_per_step"] == 2
            seen.append(q["alpha_per_step"])
        assert seen == sorted(seen) and seen[-1] < 4 * seen[0]  # 5 -> 12 bits: about (12/5)^2


def _with_query_entry(op: Attention, s: float) -> Attention:
    """``op`` with one more key coordinate: query bias ``s``, key 0, null key 0 — every
    score gains s·0 = 0, so the function is the same, but ‖θ‖₁ grows by |s|."""
    def grow(mat):
        return SparseMatrix((mat.shape[0] + 1, mat.shape[1]), mat.rows, mat.cols, mat.vals)
    return dataclasses.replace(op, wq=grow(op.wq), bq=np.append(op.bq, s), wk=grow(op.wk), bk=np.append(op.bk, 0.0),
                               null_key=np.append(op.null_key, 0.0))


def test_a_weight_growing_with_T_fails_the_l1_check(monkeypatch):
    """Pérez et al.-style: an attention entry scaled by the time bound (here T itself, in
    a coordinate that changes no score, so the net still computes the machine)."""
    orig = build_mod.binary_search

    def mutated(lay, x, prefix, **kw):
        ops, out = orig(lay, x, prefix, **kw)
        return [_with_query_entry(op, float(lay.steps)) if op.name == f"{prefix}.c4" else op for op in ops], out

    monkeypatch.setattr(build_mod, "binary_search", mutated)
    m = load(EXAMPLES / "bb4.tm")
    verified(compile_tf(m, steps=12), ["", "1"])  # the same function
    for T in SWEEP:
        with pytest.raises(PaperQuantityError, match=r"‖θ‖₁ of a decoder step .* above the construction's"):
            check_paper_quantities(compile_tf(m, steps=T))
    monkeypatch.undo()
    check_paper_quantities(compile_tf(m, steps=SWEEP[-1]))


def test_layers_growing_with_T_fail_the_depth_check(monkeypatch):
    """T/64 + 1 extra identity ReLU layers after Lemma C.2 (all values are ≥ 0, so they
    change nothing): the step is no longer 10 + w_pos paper layers."""
    orig = build_mod.head_move

    def mutated(lay, x, prefix):
        ops, cur = orig(lay, x, prefix)
        for i in range(lay.steps // 64 + 1):
            ops += relu_layer(f"{prefix}.extra{i}", cur, lay.space, lay.space, copy(lay.space.labels, {}))
            cur = f"{prefix}.extra{i}"
        return ops, cur

    monkeypatch.setattr(build_mod, "head_move", mutated)
    m = load(EXAMPLES / "bb4.tm")
    verified(compile_tf(m, steps=12), ["", "1"])
    for T in SWEEP:
        for kw in ({}, {"correction_placement": "layers"}):
            with pytest.raises(PaperQuantityError, match="depth: .* paper transformer layers per decoder step"):
                check_paper_quantities(compile_tf(m, steps=T, **kw))
