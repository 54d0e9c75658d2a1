"""The decoder-only form of Wei, Chen & Ma's App. C (issue 37, docs/transformer_lens.md):
the token contract and its replay, exactness against the interpreter at every step in
float64 and float32 (teacher forcing checks every step in one forward; greedy once), the
head-position error bound, the components registry, and one mutation per asserted
quantity (each must make the check fail)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tm2nn
from tests.strategies import machines
from tm2nn.backends.transformer.decoder_only import (
    Contract,
    build_native,
    exact_T,
    replay,
    vocabulary,
)
from tm2nn.backends.transformer.decoder_only.build import SNAP, bits_of, error_bounds
from tm2nn.backends.transformer.decoder_only.check import greedy_replay, mismatches
from tm2nn.backends.transformer.decoder_only.tokens import expected_tokens, parse_outcome
from tm2nn.emit.torch_native import Ablation, NativeRunner
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import run_machine
from tm2nn.limits import set_memory_limit
from tm2nn.nets.native import NativeTransformer

F32, F64 = torch.float32, torch.float64


@pytest.fixture(scope="module")
def bb4():
    m = tm2nn.load("examples/bb4.tm")
    return m, build_native(m, 110, max_input=0)


@pytest.fixture(scope="module")
def incr():
    m = tm2nn.load("examples/binary_increment.tm")
    return m, build_native(m, 12, max_input=4)


def _inputs(m, n):
    out = [""]
    for k in range(1, n + 1):
        out += ["".join(t) for t in np.array(np.meshgrid(*[list(m.alphabet)] * k)).reshape(k, -1).T]
    return out


def _replay_matches(m, rp, x, T):
    res = run_machine(m, x, max_steps=T, trace=True)
    n = len(rp.states)
    assert rp.states == [m.states[s] for s in res.trace.state[:n]]
    assert rp.heads == list(res.trace.head[:n])
    assert [c for c, _ in rp.writes] == list(res.trace.pos[:n])
    assert (rp.halted, rp.steps, rp.state, rp.head, rp.tape) == (res.halted, res.steps, res.state, res.head, res.cells)


# -- the token contract ----------------------------------------------------------------------
def test_contract_and_replay_against_the_interpreter():
    m = tm2nn.load("examples/binary_increment.tm")
    c = Contract.of(m, 5)
    assert c.vocab[:3] == ("<bos>", "<go>", "<halt>") and set(m.alphabet) <= set(c.vocab)
    assert "right|0|R" in c.vocab and "done|1|S" in c.vocab and vocabulary(m) == list(c.vocab)
    assert c.prompt("10") == ["<bos>", "1", "0", "_", "_", "_", "<go>"]
    for x in ["", "1", "1011", "111", "0"]:
        toks, halted = expected_tokens(m, c, x, 50)
        assert halted and toks[-1] == "<halt>"
        _replay_matches(m, replay(toks, c), x, 50)
    assert parse_outcome("q|||R") == ("q", "|", "R")
    with pytest.raises(Tm2nnError):
        c.prompt("101101")  # longer than max_input
    with pytest.raises(Tm2nnError):
        c.prompt("12")
    with pytest.raises(Tm2nnError):
        replay(c.prompt("1") + ["<halt>", "right|1|R"], c)


def test_bad_requests_are_refused_up_front():
    m = tm2nn.load("examples/bb3.tm")
    with pytest.raises(Tm2nnError):
        build_native(m, 0)
    with pytest.raises(Tm2nnError):
        build_native(m, 5, max_input=-1)
    before = set_memory_limit(10_000_000)
    try:
        with pytest.raises(Tm2nnError, match="parameters"):
            build_native(m, 2000)
    finally:
        set_memory_limit(before)


# -- exactness ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F64, F32])
def test_bb3_bb4_every_step(bb4, dtype):
    m, nt = bb4
    assert nt.meta["exact_T"]["float32"] >= 110 and nt.meta["exact_T"]["float64"] >= 110
    assert nt.meta["exact"] == {"float32": True, "float64": True}
    assert mismatches(NativeRunner(nt, dtype), nt, m, [""]) == {"": []}
    m3 = tm2nn.load("examples/bb3.tm")
    nt3 = build_native(m3, 30, max_input=2)
    assert mismatches(NativeRunner(nt3, dtype), nt3, m3, ["", "1", "01"]) == {"": [], "1": [], "01": []}


@pytest.mark.parametrize("dtype", [F64, F32])
def test_binary_increment_every_input(incr, dtype):
    m, nt = incr
    bad = mismatches(NativeRunner(nt, dtype), nt, m, _inputs(m, 3))
    assert all(v == [] for v in bad.values()), {k: v for k, v in bad.items() if v}


def test_greedy_decoding_replays_the_run(incr):
    m, nt = incr
    for x in ["111"]:
        _replay_matches(m, greedy_replay(NativeRunner(nt, F32), nt, x), x, 12)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(grid=False, max_states=4, max_symbols=3), st.integers(3, 14), st.data())
def test_random_machines(m, T, data):
    nt = build_native(m, T, max_input=2)
    xs = data.draw(st.lists(st.text(alphabet=st.sampled_from(m.alphabet), max_size=2), min_size=1, max_size=3))
    for dtype in (F64, F32):
        bad = mismatches(NativeRunner(nt, dtype), nt, m, xs)
        assert all(v == [] for v in bad.values()), (dtype, bad)
    c = Contract.from_json(nt.meta["tokens"])
    for x in xs:  # the contract's tokens replay to the interpreter's run (morphett's counted step too)
        _replay_matches(m, replay(expected_tokens(m, c, x, T)[0], c), x, T)


# -- the head position (a)-(c) and its float bound -----------------------------------------
def _first_layers(nt: NativeTransformer, k: int) -> NativeTransformer:
    w = {key: v for key, v in nt.weights.items() if not key.startswith("layers.") or int(key.split(".")[1]) < k}
    return NativeTransformer(nt.vocab, nt.residual_labels, k, nt.n_heads, nt.d_head, nt.d_mlp, nt.n_ctx, w,
                             nt.attn_scale, meta=nt.meta)


def _head_position_error(nt, dtype, moves):
    """max |hp:l - SNAP - l| and max |loc, wloc bits - Bin(l + T), Bin(l_prev + T)| over every
    position of the sequences of step tokens with the given moves."""
    c, T = Contract.from_json(nt.meta["tokens"]), nt.meta["steps"]
    step = {t[-1]: t for t in c.vocab if "|" in t}  # one outcome token per move the machine makes
    prompt = c.ids(c.prompt(""))
    seqs = [prompt + c.ids([step[mv] for mv in ms])[: nt.n_ctx - len(prompt)] for ms in moves]
    sub = _first_layers(nt, 3)
    _, res = NativeRunner(sub, dtype).forward(torch.tensor(seqs), keep=True)
    lab = {x: i for i, x in enumerate(nt.residual_labels)}
    loc = [lab[x] for x in nt.residual_labels if x.startswith("loc:")]
    wloc = [lab[x] for x in nt.residual_labels if x.startswith("wloc:")]
    el = eb = 0.0
    for b, ms in enumerate(moves):
        l = np.concatenate([np.zeros(len(prompt)), np.cumsum([{"L": -1, "R": 1, "S": 0}[x] for x in ms])])
        l = l[: nt.n_ctx]
        hp = res[1][b, :, lab["hp:l"]].double().numpy() - SNAP
        el = max(el, float(np.abs(hp - l).max()))
        want = np.array([bits_of(int(v) + T, len(loc)) for v in l])
        eb = max(eb, float(np.abs(res[2][b][:, loc].double().numpy() - want).max()))
        # wloc: at step t (position p) the cell it wrote, l at p - 1; 0 at the prompt
        wrote = np.array([bits_of(int(v) + T, len(loc)) for v in l[:-1]])
        wrote[: len(prompt) - 1] = 0
        eb = max(eb, float(np.abs(res[3][b][1:, wloc].double().numpy() - wrote).max()))
    return el, eb


def test_head_position_is_exact_in_float32_at_the_claimed_T():
    m = tm2nn.load("examples/bb3.tm")  # R only and L only: the extremes of l, where the hats' sums peak
    T = exact_T(0)["float32"]
    nt = build_native(m, T, max_input=0)
    el, eb = _head_position_error(nt, F32, ["R" * T, "L" * T])
    assert el == 0.0 and eb == 0.0  # snapped to the integer; the hats sum integers below 2^24


def test_head_position_error_within_the_bound_float64():
    m = tm2nn.load("examples/binary_increment.tm")  # R, L and S moves
    nt = build_native(m, 200, max_input=0)
    rng = np.random.default_rng(0)
    el, eb = _head_position_error(nt, F64, ["R" * 200, "".join(rng.choice(list("LRS"), 200))])
    bound = error_bounds(200, 0, "float64")
    assert bound["exact"] and el <= bound["err_l"] + 2 ** -29 and eb <= bound["err_bits"]


# -- the components registry ----------------------------------------------------------------
def test_components_registry(bb4):
    m, nt = bb4
    comp = nt.components
    names = " ".join(comp)
    for claim in ("C.1", "C.4", "C.5 bit 0", "C.6", "C.7", "C.8", "round after C.4", "head position (a)",
                  "head position (b)", "head position (c)"):
        assert claim in names
    used = {}
    for name, c in comp.items():
        assert set(c["writes"]) <= set(nt.residual_labels) and c["writes"], name
        assert all(0 <= h < nt.n_heads for h in c["heads"]) and 0 <= c["layer"] < nt.n_layers
        if c["neurons"]:
            a, b = c["neurons"]
            assert 0 <= a < b <= nt.d_mlp
            for k in range(a, b):
                assert (c["layer"], k) not in used, (name, used.get((c["layer"], k)))
                used[(c["layer"], k)] = name
        assert c["heads"] or c["neurons"]
    # every nonzero neuron belongs to a component
    for i in range(nt.n_layers):
        live = np.nonzero(np.abs(nt.weights[f"layers.{i}.mlp.fc_out.weight"]).sum(0))[0]
        assert all((i, int(k)) in used for k in live)


def test_ablating_a_listed_head_changes_the_field(incr):
    m, nt = incr
    run = NativeRunner(nt, F64)
    c7 = nt.components["C.7: the input symbol at l_i"]
    bad = mismatches(run, nt, m, ["1011"], Ablation(heads=[(c7["layer"], c7["heads"][0])]))
    assert bad["1011"]  # the machine reads its input
    c6 = nt.components["C.6: the symbol step i' wrote"]
    bad = mismatches(run, nt, m, ["1011"], Ablation(heads=[(c6["layer"], c6["heads"][0])]))
    assert bad["1011"]  # it revisits cells it wrote


# -- mutations: each asserted quantity, broken, must fail the check -------------------------
def _mutated(nt, fn):
    w = copy.deepcopy(nt.weights)
    fn(w, {x: i for i, x in enumerate(nt.residual_labels)}, nt.components)
    return NativeTransformer(nt.vocab, nt.residual_labels, nt.n_layers, nt.n_heads, nt.d_head, nt.d_mlp, nt.n_ctx,
                             w, nt.attn_scale, nt.components, nt.meta)


def _neg_product(w, lab, comp):  # (b): a wrong sign in the product l = (p+1)·avg
    a, b = comp["head position (b): times the count p + 1"]["neurons"]
    w["layers.0.mlp.fc_in.weight"][a:b:2, lab["hp:avg"]] *= -1


def _small_C(w, lab, comp):  # (b): C ≤ n_ctx lets other positions' neurons fire
    a, b = comp["head position (b): times the count p + 1"]["neurons"]
    cols = [i for x, i in lab.items() if x.startswith("pos:")]
    for c in cols:
        w["layers.0.mlp.fc_in.weight"][a:b, c] /= 20.0
    w["layers.0.mlp.fc_in.bias"][a:b] /= 20.0


def _no_round_c4(w, lab, comp):  # a missing Prop. 3.4 correction (its output never written)
    c = comp["Prop. 3.4 round after C.4"]
    a, b = c["neurons"]
    w[f"layers.{c['layer']}.mlp.fc_out.weight"][:, a:b] = 0.0


def _small_beta(w, lab, comp):  # β too small: softmax no longer selects
    for i in range(2, len([k for k in w if k.endswith("attn.q.weight")])):
        w[f"layers.{i}.attn.q.weight"] *= 0.1
        w[f"layers.{i}.attn.q.bias"] *= 0.1


def _null_too_high(w, lab, comp):  # the <bos> sink at the best score instead of one below it
    c = comp["C.4: some past step wrote l_i"]
    k = w[f"layers.{c['layer']}.attn.k.weight"]
    r = np.nonzero(k[:, lab["tok:bos"]])[0][0]
    k[r, lab["tok:bos"]] += 1.0


def _no_gate(w, lab, comp):  # wloc without its gate: non-step positions match as writers
    c = comp["head position (c): Bin(l_{i-1} + T), the cell each step wrote"]
    a, b, fc = *c["neurons"], f"layers.{c['layer']}.mlp.fc_in."
    w[fc + "bias"][a:b] += w[fc + "weight"][a:b, lab["tok:step"]]
    w[fc + "weight"][a:b, lab["tok:step"]] = 0.0


def _no_snap(w, lab, comp):  # hp:l without its offset: the hats read l - SNAP
    w["layers.0.mlp.fc_out.bias"][lab["hp:l"]] = 0.0


@pytest.mark.parametrize("mutation", [_neg_product, _small_C, _no_round_c4, _small_beta, _null_too_high, _no_gate,
                                      _no_snap])
def test_mutation_fails_the_check(bb4, mutation):
    m, nt = bb4
    bad = _mutated(nt, mutation)
    assert mismatches(NativeRunner(bad, F64), bad, m, [""])[""]


def _ablation(c) -> Ablation:
    return Ablation(heads=[(c["layer"], h) for h in c["heads"]],
                    neurons=[(c["layer"], *c["neurons"])] if c["neurons"] else [])


def test_every_listed_component_matters(bb4, incr):
    """Ablating any one component breaks some step of bb4 (blank tape) or of
    binary_increment (which reads its input): the registry lists nothing idle."""
    cases = [(bb4, [""]), (incr, ["1011", "111", "0"])]
    for name in bb4[1].components:  # C.5 names carry the bit: binary_increment has fewer
        broke = False
        for (m, nt), xs in cases:
            if name in nt.components:
                bad = mismatches(NativeRunner(nt, F64), nt, m, xs, _ablation(nt.components[name]))
                broke = broke or any(bad.values())
        assert broke, name
