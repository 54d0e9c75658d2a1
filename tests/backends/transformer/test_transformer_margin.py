"""The transformer's all-layer margin (Wei, Chen & Ma eq. 2.1, Theorem 4.1, App. D):
score gaps from the weights, the certified radius, the dense perturbed evaluator and the
attacks (docs/transformer_margin.md)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends.transformer.test_transformer import compile_tf
from tests.conftest import EXAMPLES
from tests.strategies import machines
from tm2nn.backends.transformer.margin import (
    MarginError,
    ScoreGapError,
    _Plan,
    certified_radius,
    check_score_gaps,
    margin_report,
    margin_table,
    score_gaps,
    tie_reasons,
    tight_radius,
)
from tm2nn.backends.transformer.perturbed_decode import PerturbedTransformer, attack
from tm2nn.nets import Attention, ReLU
from tm2nn.syntax import load
from tm2nn.verify import verify_compiled

TEXTS = {"bb4": ["", "1", "0110"], "binary_counter": ["0", "101", "11"]}


def machine(name):
    return load(EXAMPLES / f"{name}.tm")


def map_attention(compiled, fn):
    """A copy of a compiled transformer with every attention op replaced by ``fn(op)``."""
    embed, dec, *readouts = compiled.net.nodes

    def sub(net):
        return dataclasses.replace(net, nodes=tuple(fn(op) if isinstance(op, Attention) else op
                                                   for op in net.nodes))
    dec = dataclasses.replace(dec, prologue=sub(dec.prologue), body=sub(dec.body))
    return dataclasses.replace(compiled, net=dataclasses.replace(compiled.net, nodes=(embed, dec, *readouts)))


def null_key_mutant(compiled, below=0.001):
    """The issue's mutation: every null key moved so that its score is ``below`` under the
    best item's (instead of 1).  The score's constant query row is the last one."""
    gaps = {r["op"]: r for r in score_gaps(compiled)}

    def fn(op):
        assert op.wq.rows.max() < len(op.bq) - 1 and op.bq[-1] != 0  # the last query row is constant
        k0 = np.array(op.null_key, dtype=np.float64)
        k0[-1] += (gaps[op.name]["gap_above"] - below) / op.bq[-1]
        return dataclasses.replace(op, null_key=k0)
    return map_attention(compiled, fn)


# -- A. score gaps -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["bb4", "binary_counter"])
def test_score_gaps_of_the_construction_are_exactly_one(name):
    c = compile_tf(machine(name), steps=16)
    rows = check_score_gaps(c, min_gap=1.0)
    lay = c.options["w_pos"]
    assert len(rows) == 1 + (lay + 2) + 1  # prologue C.7; C.4, C.5 x w_pos, C.6; C.7
    for r in rows:
        assert r["gap_above"] == 1.0 and r["gap_below"] == 1.0 and r["min_product"] == 1.0, r
    ties = tie_reasons(c)
    assert {n: t for n, t in ties.items() if n.startswith(("S.c4", "S.c5"))} == \
        {n: "constant values" for n in ties if n.startswith(("S.c4", "S.c5"))}
    assert ties["S.c6"] == ties["S.c7"] == ties["P.c7"] == "unique keys"


def test_null_key_mutant_passes_verify_but_fails_the_gap_check_and_the_certificate():
    c = compile_tf(machine("bb4"), steps=8)
    mutant = null_key_mutant(c)
    # verify cannot see it: the exact scores still put the null strictly between
    rep = verify_compiled(mutant, inputs=["", "1", "0110", "111"], use_onnx=False)
    assert rep.ok and rep.first is None
    assert all(abs(r["gap_above"] - 0.001) < 1e-9 for r in score_gaps(mutant))
    with pytest.raises(ScoreGapError, match="P.c7.*gap above = 0.001"):
        check_score_gaps(mutant)
    good, bad = certified_radius(c, per_step=False), tight_radius(mutant, per_step=False)  # the weight-read bound
    assert bad["radius"] < 2e-3 * good["radius"]
    assert bad["binding"]["check"] == "attention score"


def test_scaled_queries_halve_the_gaps_and_fail():
    c = compile_tf(machine("bb4"), steps=8)
    half = map_attention(c, lambda op: dataclasses.replace(
        op, wq=dataclasses.replace(op.wq, vals=op.wq.vals * 0.5), bq=op.bq * 0.5))
    assert all(r["gap_above"] == r["gap_below"] == 0.5 for r in score_gaps(half))
    with pytest.raises(ScoreGapError, match="< 1"):
        check_score_gaps(half)
    check_score_gaps(half, min_gap=0.5)
    def attention_budget(comp):  # the radius itself binds at a round here; the scores' budgets shrink
        return min(b["budget"] for b in tight_radius(comp, per_step=False)["budgets"]
                   if b["check"] == "attention score")
    assert attention_budget(half) < attention_budget(c)


def test_a_shifted_key_row_is_refused_not_guessed():
    c = compile_tf(machine("bb4"), steps=8)

    def shift(op):
        if op.name != "S.c6":
            return op
        bk = op.bk.copy()
        bk[0] += 0.25
        return dataclasses.replace(op, bk=bk)
    bad = map_attention(c, shift)
    with pytest.raises(ScoreGapError, match="S.c6.*key row 0.*not a ±1 bit"):
        score_gaps(bad)
    with pytest.raises(ScoreGapError):
        tight_radius(bad)  # the weight-read bound refuses; certified_radius gives the general one


def test_a_query_row_reading_two_coordinates_is_refused():
    c = compile_tf(machine("bb4"), steps=8)

    def widen(op):
        if op.name != "S.c4":
            return op
        wq = op.wq
        extra = int(wq.cols[0] + 1)
        return dataclasses.replace(op, wq=dataclasses.replace(
            wq, rows=np.append(wq.rows, wq.rows[0]), cols=np.append(wq.cols, extra), vals=np.append(wq.vals, 1.0)))
    with pytest.raises(ScoreGapError, match="S.c4.*reads 2 coordinates"):
        check_score_gaps(map_attention(c, widen))


# -- B. the certified radius ---------------------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=4, max_symbols=3), T=st.integers(1, 40))
def test_every_machine_has_gaps_of_one_and_a_certified_margin(m, T):
    """The guard on every construction, not only the examples: gaps of exactly 1 on each
    side of every null key, read off the weights, and a certified radius above the
    smallest one the study measures at T = 1024 (docs/margin_study.md)."""
    c = compile_tf(m, steps=T)
    assert all(r["gap_above"] == r["gap_below"] == 1.0 for r in check_score_gaps(c))
    assert certified_radius(c, per_step=False, budgets=False)["radius"] > 1e-4


@pytest.mark.parametrize("name", ["bb4", "binary_counter"])
def test_certified_radius_with_corrections_stays_above_a_constant(name):
    m = machine(name)
    radii = []
    for T in (8, 32, 128, 1024):
        cert = certified_radius(compile_tf(m, steps=T), budgets=False)
        assert cert["seconds"] < 5
        radii.append(cert["radius"])
        # one step's analysis: the per-step radius is the same from step 1 on
        assert len({s["radius"] for s in cert["per_step"] if s["step"] >= 1}) == 1
        assert cert["per_step"][0]["radius"] >= cert["radius"]
    assert min(radii) > 1e-4, radii
    assert radii[-1] > radii[0] / 4  # it depends on T only through w_pos


@pytest.mark.parametrize("name", ["bb4", "binary_counter"])
def test_without_corrections_the_certified_radius_collapses_with_T(name):
    m = machine(name)
    r = {T: certified_radius(compile_tf(m, steps=T, corrections=False), budgets=False) for T in (8, 64, 1024)}
    with_corr = certified_radius(compile_tf(m, steps=8), budgets=False)["radius"]
    assert r[8]["radius"] < 1e-20 * with_corr
    assert r[64]["radius"] < 1e-10 * r[8]["radius"] or r[64]["radius"] == 0.0
    assert r[1024]["radius"] <= r[64]["radius"]
    steps = [s["radius"] for s in r[8]["per_step"]]
    assert all(a > b for a, b in zip(steps, steps[1:]))  # decays step by step
    assert r[1024]["seconds"] < 5


def test_budgets_name_the_binding_check():
    cert = certified_radius(compile_tf(machine("bb4"), steps=8))
    b = cert["budgets"]
    assert b[0]["budget"] == pytest.approx(cert["radius"], rel=1e-6)
    assert (b[0]["check"], b[0]["op"]) == (cert["binding"]["check"], cert["binding"]["op"])
    assert all(x["budget"] >= cert["radius"] for x in b)
    assert {x["check"] for x in b} == {"round input", "attention score", "decoded tap"}


def test_softmax_is_refused():
    c = compile_tf(machine("bb4"), steps=8, attention="softmax", beta=20.0)
    with pytest.raises(MarginError, match="hard-max"):
        certified_radius(c)


@pytest.mark.parametrize("name", ["bb4", "binary_counter"])
@pytest.mark.parametrize("corrections", [True, False])
def test_the_bound_holds_value_by_value_under_dense_perturbations(name, corrections):
    """At ε = the certified radius, random dense perturbations: every value of every step
    is within its bound of the exact run (ℓ2), and no decoded field changes."""
    c = compile_tf(machine(name), steps=6, corrections=corrections)
    plan = _Plan(c)
    r = certified_radius(c, per_step=False, budgets=False)["radius"]
    bounds: dict = {}
    assert plan.run(r, plan.steps, errors=bounds) is None
    P = PerturbedTransformer(c)
    tok = torch.as_tensor(c.encode(TEXTS[name])).repeat_interleave(8, 0)
    ref, got = {}, {}
    with torch.no_grad():
        want = P.run(tok, record=ref)
        d = P.random_directions(tok.shape[0], torch.Generator().manual_seed(1))
        taps = P.run(tok, P.scaled(d, torch.full((tok.shape[0],), r, dtype=torch.float64)), record=got)
    assert torch.equal(taps > 0.5, want > 0.5)
    last, checked = max(bounds), 0
    for (step, _part, value), v in got.items():
        b = bounds.get(step, bounds[last]).get(value)
        if b is not None:
            assert float((v - ref[(step, _part, value)]).norm(dim=1).max()) <= b[0], (step, value)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("name", ["bb4", "binary_counter", "palindrome", "unary_addition"])
def test_reference_values_satisfy_the_invariant_the_bound_uses(name):
    """The exact run: ReLU and attention outputs in [0, 1], 0/1 except a round's hidden
    layer, and every value inside the box the certificate computed from the weights."""
    m = machine(name)
    texts = ["", m.alphabet[0], "".join(m.alphabet[:2]) * 2]
    for corr in (True, False):
        c = compile_tf(m, steps=10, corrections=corr)
        plan = _Plan(c)
        rec = {}
        with torch.no_grad():
            PerturbedTransformer(c).run(c.encode(texts), record=rec)
        for (step, part, value), v in rec.items():
            v = v.numpy()
            boxes = plan.pro_boxes if part == "prologue" else plan.body_boxes
            lo, hi = boxes[value]
            assert np.all(v >= lo - 1e-9) and np.all(v <= hi + 1e-9), (step, value)
            op = (plan.dec.prologue if part == "prologue" else plan.dec.body).node(value)
            if isinstance(op, (ReLU, Attention)):
                assert v.min() >= 0 and v.max() <= 1 + 1e-12, value
                if not value.endswith("round_a.relu"):
                    assert np.all(np.minimum(np.abs(v), np.abs(v - 1)) < 1e-12), value


# -- C. the perturbed evaluator and the attacks --------------------------------------------------
@pytest.mark.parametrize("name", ["bb4", "binary_counter", "palindrome", "unary_addition", "bb3"])
@pytest.mark.parametrize("corrections", [True, False])
def test_evaluator_is_the_emitted_module_at_zero_perturbation(name, corrections):
    m = machine(name)
    texts = ["", m.alphabet[0], "".join(m.alphabet[:2]) * 2, m.alphabet[-1] * 3]
    c = compile_tf(m, steps=12, corrections=corrections)
    tok = c.encode(texts)
    with torch.no_grad():
        want = c.torch(dtype=torch.float64)(torch.from_numpy(tok)).numpy()
        got = PerturbedTransformer(c).run(tok).numpy()
        zero = PerturbedTransformer(c)
        d = zero.scaled(zero.random_directions(len(texts), torch.Generator().manual_seed(0)),
                        torch.zeros(len(texts), dtype=torch.float64))
        got0 = zero.run(tok, d).numpy()
    assert np.array_equal(want, got)      # the same function, to the last bit
    assert np.array_equal(want, got0)     # an explicit zero δ too
    from tm2nn.backends.transformer.runtime import run_taps
    assert np.array_equal(run_taps(c, texts, "torch") > 0.5, got > 0.5)  # float32 engine: same fields


def test_a_shared_perturbation_changes_every_step_the_same_way():
    """The body's δ is applied at every step: perturbing only the last body op's bias
    moves every step's tap by the same amount, and the prologue's not at all."""
    c = compile_tf(machine("bb4"), steps=4)
    P = PerturbedTransformer(c)
    key = "body/S.c8.round.round_b"
    db = torch.zeros((1, *P.shapes[key]["bias"]), dtype=torch.float64)
    db[0, 0] = 0.01  # st:A after the last round, before its ReLU
    with torch.no_grad():
        ref = P.run(c.encode([""]))
        got = P.run(c.encode([""]), {key: {"bias": db}})
    diff = (got - ref)[0, :, 0]
    assert diff[0] == 0  # the prologue has its own ops
    assert torch.allclose(diff[1:], torch.full((4,), 0.01, dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.equal(got > 0.5, ref > 0.5)


@pytest.mark.parametrize("corrections", [True, False])
def test_certified_is_below_both_attacks(corrections):
    c = compile_tf(machine("bb4"), steps=8, corrections=corrections)
    cert = certified_radius(c, budgets=False)["radius"]
    rnd = attack(c, TEXTS["bb4"], 1.0, "random", trials=4, seed=0)
    grd = attack(c, TEXTS["bb4"][:2], 1.0, "gradient", trials=1, steps=12, seed=0, eps0=rnd["eps"])
    assert 0 < cert <= grd["eps"] and cert <= rnd["eps"] < math.inf
    assert rnd["step"] is not None and rnd["field"] in ("state", "head", "symbol read", "symbol written")
    assert rnd["input"] in TEXTS["bb4"]
    if corrections:
        assert rnd["eps"] > 0.01  # random directions: far above the certificate
    else:
        assert rnd["eps"] < 0.01


def test_the_null_key_mutant_falls_to_a_small_attack():
    c = null_key_mutant(compile_tf(machine("bb4"), steps=8))
    rnd = attack(c, TEXTS["bb4"], 1.0, "random", trials=4, seed=0)
    assert rnd["eps"] < 0.003


def test_attack_refuses_what_does_not_fit_in_memory():
    from tm2nn.limits import set_memory_limit
    from tm2nn.options import OptionError

    c = compile_tf(machine("bb4"), steps=8)
    set_memory_limit(1 << 20)
    try:
        with pytest.raises(OptionError, match="random attack .* would need"):
            attack(c, TEXTS["bb4"], 1.0, "random", trials=8)
    finally:
        set_memory_limit(None)


# -- D. the report ---------------------------------------------------------------------------------
def test_margin_report_rows_and_table():
    rows = margin_report(machine("bb4"), ["", "1"], steps=4, trials=2, attack_steps=4, seed=0)
    assert [r["corrections"] for r in rows] == [True, False]
    for r in rows:
        assert r["certified"] <= r["eps_min"] == min(r["eps_random"], r["eps_gradient"])
        assert r["flip"]["field"] and r["flip"]["input"] in ("", "1")
    assert rows[0]["certified"] > 1e3 * rows[1]["certified"]
    t = margin_table(rows)
    assert all(len(t.columns) == len(r) for r in t.rows)
    main = [r for r in t.rows if r[0]]
    assert [r[0] for r in main] == ["on", "off"]
    # per decoder step: rows "<= i" under each setting, nonincreasing, the last one the radius
    for r in rows:
        radii = [s["radius"] for s in r["certified_per_step"]]
        assert radii == sorted(radii, reverse=True) and radii[-1] == r["certified"]
        assert r["layer_budgets"][0]["budget"] == pytest.approx(r["certified"], rel=1e-6)
    assert sum(1 for r in t.rows if r[1].startswith("<= ")) == sum(len(r["certified_per_step"]) - 1 for r in rows)
    assert t.json is rows


@pytest.mark.slow
@pytest.mark.parametrize("name, T", [("binary_counter", 16), ("bb4", 32)])
def test_bracketing_at_larger_T(name, T):
    """32 decoder steps.  With corrections the certificate is below both attacks and random
    directions need ε > 0.05; without, random directions flip a field below 1e-4.  The
    gradient attack runs with corrections only: without them the certificate is about
    1e-135 and any flip (float64 cannot resolve one below about 1e-17) is far above it,
    so that comparison could not fail (it was a third of the test's time)."""
    for corr in (True, False):
        c = compile_tf(machine(name), steps=T, corrections=corr)
        cert = certified_radius(c, budgets=False)["radius"]
        rnd = attack(c, TEXTS[name], 1.0, "random", trials=4, seed=0)
        assert cert <= rnd["eps"]
        if not corr:
            assert cert < 1e-100 and rnd["eps"] < 1e-4
            continue
        grd = attack(c, TEXTS[name][:2], 1.0, "gradient", trials=1, steps=15, seed=0, eps0=rnd["eps"])
        assert cert <= grd["eps"] and rnd["eps"] > 0.05


def _accepts(**options) -> bool:
    from tm2nn.backends import get

    return set(options) <= {f.name for f in dataclasses.fields(get("transformer").Options)}


@pytest.mark.skipif(not _accepts(correction_placement="layers", cls_readout=True),
                    reason="this build has no correction placement / θ_cls options")
@pytest.mark.parametrize("options", [{"cls_readout": True}, {"correction_placement": "layers"},
                                     {"correction_placement": "layers", "cls_readout": True}])
def test_the_construction_variants(options):
    """θ_cls as a tap column, and a correction after every paper layer: the evaluator is
    still the module, the certificate still covers them, and margin_report passes the
    placement to the rows with corrections only."""
    m = machine("balanced_parens")
    texts = ["", "()", "(()"]
    c = compile_tf(m, steps=10, **options)
    with torch.no_grad():
        want = c.torch(dtype=torch.float64)(torch.from_numpy(c.encode(texts))).numpy()
        assert np.array_equal(want, PerturbedTransformer(c).run(c.encode(texts)).numpy())
    cert = certified_radius(c, budgets=False)["radius"]
    assert 1e-4 < cert <= attack(c, texts, 1.0, "random", trials=2, seed=0)["eps"]
    rows = margin_report(m, texts[:2], steps=3, trials=1, attack_steps=2, **options)
    assert [r["corrections"] for r in rows] == [True, False] and rows[0]["certified"] > rows[1]["certified"]


def test_attacks_on_the_cpu_device_equal_the_default():
    """The attacks with ``device="cpu"`` (``tm2nn margin --device cpu``, issue 35): the same
    directions (drawn on the CPU and moved) and the same radii."""
    c = compile_tf(EXAMPLES / "bb3.tm", steps=4)
    for method in ("random", "gradient"):
        a = attack(c, ["", "1"], 1.0, method, 2, steps=3, seed=1, device="cpu")
        b = attack(c, ["", "1"], 1.0, method, 2, steps=3, seed=1)
        assert a["eps"] == b["eps"] and np.array_equal(a["per_input"], b["per_input"])


def test_the_batched_bisection_is_the_one_step_bisection(monkeypatch):
    """The random attack's bisection, two steps per evaluator run (the midpoints batched),
    ends where one step per run ends, bit for bit: ε, every input's ε, the step and field."""
    import tm2nn.backends.transformer.perturbed_decode as pd

    c = compile_tf(machine("bb4"), steps=4, corrections=False)
    got = attack(c, TEXTS["bb4"], 1.0, "random", trials=3, seed=1)
    monkeypatch.setattr(pd, "SPECULATION_DEPTH", 1)
    want = attack(c, TEXTS["bb4"], 1.0, "random", trials=3, seed=1)
    assert math.isfinite(want["eps"])
    assert (got["eps"], got["step"], got["coordinate"]) == (want["eps"], want["step"], want["coordinate"])
    assert np.array_equal(got["per_input"], want["per_input"])
