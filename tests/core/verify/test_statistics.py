"""Sample complexity (Wei, Chen & Ma Lemma 2.3, Theorem 3.1) with explicit constants, the
all-layer-margin loss (2.2) on data, Corollary A.1 (A.2), and `tm2nn info --statistics`."""

import json
import math
from functools import partial

import numpy as np
import pytest

import tm2nn
from tests.conftest import EXAMPLES
from tm2nn.backends.relu_circuit.margin import certified_radius
from tm2nn.cli import main
from tm2nn.errors import Tm2nnError
from tm2nn.interp import eval_circuit, exhaustive_inputs
from tm2nn.ir import Circuit, Gate
from tm2nn.verify.statistics import (
    corollary_a1,
    lemma23_error,
    load_dataset,
    rademacher_bound,
    sample_complexity,
    statistics_report,
    surrogate_loss,
    surrogate_loss_on,
)

#: relu-circuit's compile of a circuit, as a user calls it
relu_compile = partial(tm2nn.compile, backend="relu-circuit")


def and_gate():
    return Circuit("and", ("a", "b"), ("o",), (Gate("o", "AND", ("a", "b")),))


def full_adder():
    return tm2nn.load(EXAMPLES / "full_adder.circ")


# -- by hand ----------------------------------------------------------------------------------
def bound_by_hand(alpha, gamma, p, n, delta):
    """Lemma 2.3's error bound at n, written out: 4·Rad_n + 2 sqrt(log(2/δ)/n) with
    Rad_n = (12A/√n)(1 + ln(√n/(3A))) + 12 sqrt(ln(4p+2))/√n, A = (α/γ) sqrt(ln(2p+1))."""
    A = alpha / gamma * math.sqrt(math.log(2 * p + 1))
    s = math.sqrt(n)
    if s <= 3 * A:
        return math.inf
    rad = 12 * A / s * (1 + math.log(s / (3 * A))) + 12 * math.sqrt(math.log(4 * p + 2)) / s
    return 4 * rad + 2 * math.sqrt(math.log(2 / delta) / n)


def n_by_hand(alpha, gamma, p, eps, delta):
    """The least integer n with bound_by_hand(n) ≤ ε: doubling, then bisection on integers."""
    hi = 1
    while bound_by_hand(alpha, gamma, p, hi, delta) > eps:
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if bound_by_hand(alpha, gamma, p, mid, delta) <= eps else (mid, hi)
    return hi


def test_one_and_gate_by_hand():
    """Prop. B.2's AND: W1 = (1, 1), b1 = -1, W2 = 1, b2 = 0.  So α = 4, p = (1·2 + 1) + (1·1 + 1)
    = 5, w = 1, d = 2 ReLU layers.  γ: the output moves by at most ε·sqrt(‖W2‖²X1² + X2²) with
    X1 = sqrt(‖x‖² + 1) = √3 and X2 = sqrt((1 + ε√3)² + 1) (the hidden unit is ≤ 1 on bits),
    and must stay below 1/2."""
    comp = relu_compile(and_gate())
    fc = comp.analysis("function_class")(comp)
    assert (fc["alpha"], fc["p"], fc["w"], fc["d"]) == (4.0, 5, 1, 2)
    assert fc["theorem"] == "Theorem 3.1" and fc["scaling"] == {"s": 1, "r": 1, "q": 1}
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid * math.sqrt(3 + (1 + math.sqrt(3) * mid) ** 2 + 1) < 0.5 else (lo, mid)
    rep = statistics_report(comp, eps=0.1, delta=0.01)
    assert rep["gamma"] == pytest.approx(lo, rel=1e-6)
    assert rep["n"] == n_by_hand(4.0, rep["gamma"], 5, 0.1, 0.01)
    assert rep["d5"] == pytest.approx(lo, rel=1e-5)  # one layer: (D.5) is the same bound


def test_full_adder_by_hand():
    """The layered basis full adder (tm2nn's layering; listed below): Lemma B.1 gives per gate
    ‖θ‖₁ = AND 4, OR 5 (b2 = 1), NOT 3, BUF 2; Prop. 3.4 gives 9 per corrected unit
    (1 + 1 + 1/3 + 2/3 + 3 + 3).  Layer widths r = 3 | 7 7 5 5 3 2; per layer i the affine
    maps pre (r_i × r_(i-1)), gate (r_i × r_i), round_a (2r_i × r_i), round_b (r_i × 2r_i),
    each out·in + out dense parameters (no round after the last)."""
    ops = [  # (AND, OR, NOT, BUF) per circuit layer
        (1, 0, 3, 3), (4, 0, 0, 3), (0, 2, 0, 3), (2, 0, 1, 2), (1, 1, 0, 1), (0, 1, 0, 1)]
    r = [3, 7, 7, 5, 5, 3, 2]
    from tm2nn.passes.basis import to_basis
    from tm2nn.passes.layering import layer_circuit

    lc = layer_circuit(to_basis(full_adder()))
    assert list(lc.widths) == r
    assert [tuple(sum(g.op == k for g in layer) for k in ("AND", "OR", "NOT", "BUF")) for layer in lc.layers] == ops
    alpha = sum(4 * a + 5 * o + 3 * n + 2 * b for a, o, n, b in ops) + 9 * sum(r[1:-1])
    p = 0
    for i in range(1, 7):
        p += r[i] * r[i - 1] + r[i] + r[i] * r[i] + r[i]
        if i < 6:
            p += 2 * r[i] * r[i] + 2 * r[i] + r[i] * 2 * r[i] + r[i]
    assert (alpha, p) == (333, 1079)
    comp = relu_compile(full_adder())
    rep = statistics_report(comp, eps=0.05, delta=0.01)
    assert (rep["alpha"], rep["p"], rep["w"], rep["d"]) == (alpha, p, 2 * 7, 2 * 6 + 2 * 5)
    assert rep["gamma"] == certified_radius(comp)["radius"]
    # n ≈ 3·10^17: the bound is flat to float precision there, so agree to 12 digits
    assert rep["n"] == pytest.approx(n_by_hand(alpha, rep["gamma"], p, 0.05, 0.01), rel=1e-12)
    assert lemma23_error(alpha, rep["gamma"], p, rep["n"], 0.01) <= 0.05
    assert rep["scaling"] == {"s": 29, "r": 7, "q": 6} and rep["theorem"] == "Theorem 3.1"
    form = rep["theorem_form"]
    assert form["(alpha/gamma)^2 log(wd)/eps^2"] == pytest.approx((alpha / rep["gamma"]) ** 2 * math.log(14 * 22) / 0.05 ** 2)
    assert form["alpha/s"] == pytest.approx(333 / 29)
    assert 0 < rep["d5"] < rep["gamma"]
    assert rep["function_class"]["p_uniform"] == 14 * 3 + 14 + 21 * (14 * 14 + 14) + 2 * 14 + 2
    assert len(rep["constants"]) >= 4 and all(isinstance(c, str) for c in rep["constants"])


def test_the_pm1_net_has_the_same_depth():
    """With the ±1 map the net has one more affine layer (W_d = out.pm1); without, it ends in a
    ReLU (W_d the identity read-out): d is the same, the number of ReLU layers."""
    a = relu_compile(full_adder()).analysis("function_class")(relu_compile(full_adder()))
    comp = relu_compile(full_adder(), pm_one_output=True)
    b = comp.analysis("function_class")(comp)
    assert (a["d"], b["d"]) == (22, 22) and (a["affine_layers"], b["affine_layers"]) == (22, 23)
    assert b["alpha"] == a["alpha"] + 2 * 2 + 2 * 1  # 2z - 1 on two outputs
    assert b["p"] == a["p"] + 2 * 2 + 2


# -- the pieces -------------------------------------------------------------------------------
def test_surrogate_loss_is_eq_2_2():
    g = 0.2
    assert surrogate_loss(-1.0, g) == 1.0 and surrogate_loss(0.0, g) == 1.0
    assert surrogate_loss(0.05, g) == pytest.approx(0.75) and surrogate_loss(0.1, g) == pytest.approx(0.5)
    assert surrogate_loss(0.2, g) == 0.0 and surrogate_loss(7.0, g) == 0.0 and surrogate_loss(math.inf, g) == 0.0
    v = surrogate_loss(np.array([[-1, 0, 0.1], [0.2, 0.3, np.inf]]), g)
    assert v.shape == (2, 3) and np.allclose(v, [[1, 1, 0.5], [0, 0, 0]])
    r = np.linspace(-1, 1, 101)
    assert np.all(np.diff(surrogate_loss(r, g)) <= 0)  # non-increasing in ρ
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(Tm2nnError, match="gamma"):
            surrogate_loss(0.1, bad)
    with pytest.raises(Tm2nnError, match="NaN"):
        surrogate_loss([0.1, math.nan], g)


def test_rademacher_bound_is_the_dudley_formula():
    alpha, gamma, p, n = 10.0, 0.5, 100, 10 ** 8
    A = alpha / gamma * math.sqrt(math.log(201))
    want = 12 * A / 1e4 * (1 + math.log(1e4 / (3 * A))) + 12 * math.sqrt(math.log(402)) / 1e4
    assert rademacher_bound(alpha, gamma, p, n) == pytest.approx(want, rel=1e-12)
    assert rademacher_bound(alpha, gamma, p, 100) == 1.0  # √n ≤ 3A: only the trivial bound
    assert lemma23_error(alpha, gamma, p, n, 0.01) == pytest.approx(4 * want + 2 * math.sqrt(math.log(200) / n))


def test_sample_complexity_is_the_least_n_and_scales_like_the_lemma():
    res = sample_complexity(50.0, 0.05, 1000, 0.1, delta=0.01)
    n = res["n"]
    assert lemma23_error(50.0, 0.05, 1000, n, 0.01) <= 0.1 < lemma23_error(50.0, 0.05, 1000, n - 1, 0.01)
    assert res["bound"] == pytest.approx(lemma23_error(50.0, 0.05, 1000, n, 0.01))
    assert n == n_by_hand(50.0, 0.05, 1000, 0.1, 0.01)
    # Õ(α² log p / (γ² ε²)): quadratic in α/γ and 1/ε up to the log factor, logarithmic in p
    for k in (2, 4):
        for kw in ({"alpha": 50.0 * k}, {"gamma": 0.05 / k}):
            n2 = sample_complexity(**{"alpha": 50.0, "gamma": 0.05, "p": 1000, "eps": 0.1, **kw})["n"]
            assert 0.9 * k ** 2 < n2 / n < 1.1 * k ** 2
        n2 = sample_complexity(50.0, 0.05, 1000, 0.1 / k)["n"]
        assert k ** 2 < n2 / n < 1.5 * k ** 2  # and the log factor grows
    n_p = sample_complexity(50.0, 0.05, 1000 ** 2, 0.1)["n"]
    assert 1.8 < n_p / n < 2.2  # log p doubles
    assert sample_complexity(50.0, 0.05, 1000, 0.1, delta=1e-9)["n"] > n
    assert sample_complexity(1e150, 1e-150, 10, 1e-100)["n"] == math.inf
    for bad in ({"eps": 0}, {"eps": 2}, {"delta": 0}, {"gamma": 0}, {"alpha": -1}, {"p": 0}, {"p": 2.5}):
        with pytest.raises(Tm2nnError):
            sample_complexity(**{"alpha": 1.0, "gamma": 0.1, "p": 10, "eps": 0.1, **bad})


def test_corollary_a1_with_equal_margins_is_lemma_2_3s_rademacher_term():
    """(A.2) with every ρ_i = γ: 4·Rad_n of Lemma 2.3 plus ξ = (log(1/δ) + log n)/√n."""
    alpha, p, g, m = 5.0, 50, 0.3, 1000
    res = corollary_a1(np.full(m, g), alpha, p)
    xi = (math.log(100) + math.log(m)) / math.sqrt(m)
    assert res["bound"] == pytest.approx(4 * rademacher_bound(alpha, g, p, m) + xi)
    assert res["xi"] == pytest.approx(xi) and res["rms_inverse_margin"] == pytest.approx(1 / g) and res["vacuous"]
    big = corollary_a1(np.full(10 ** 6, 10.0), 1.0, 10)
    assert big["bound"] < 1 and not big["vacuous"]
    assert corollary_a1(np.full(10 ** 5, 10.0), 1.0, 10)["bound"] > big["bound"]  # more data, smaller
    assert corollary_a1(np.full(10 ** 6, 5.0), 1.0, 10)["bound"] > big["bound"]  # smaller margins, larger
    one_small = corollary_a1(np.array([10.0] * 999 + [0.01]), 1.0, 10)
    assert one_small["rms_inverse_margin"] == pytest.approx(math.sqrt((999 / 100 + 1e4) / 1000))
    assert corollary_a1([0.1, 0.0], 1.0, 10)["bound"] is None


# -- ℓ_γ on data ------------------------------------------------------------------------------
def test_surrogate_loss_on_brackets_the_loss():
    comp = relu_compile(full_adder())
    x = exhaustive_inputs(3)
    y = eval_circuit(comp.source, x)
    cert = certified_radius(comp)["radius"]
    small = surrogate_loss_on(comp, (x, y), gamma=cert, trials=2, steps=30)
    assert small["wrong"] == 0 and small["loss_lower"] == small["loss_upper"] == 0.0  # ρ ≥ γ everywhere
    big = surrogate_loss_on(comp, (x, y), gamma=1.0, trials=2, steps=30)
    assert np.all(big["rho_lower"] == cert) and np.all(big["rho_upper"] >= cert)
    assert 0 < big["loss_lower"] <= big["loss_upper"] < 1
    assert big["loss_upper"] == pytest.approx(1 - cert)
    assert np.all(big["per_example_lower"] <= big["per_example_upper"])
    assert big["a2_at_rho_lower"]["bound"] >= big["a2_at_rho_upper"]["bound"] > 0
    # a label that disagrees with the net: ρ = 0 there, ℓ = 1 on both sides
    y2 = y.copy()
    y2[5, 1] ^= True
    bad = surrogate_loss_on(comp, (x, y2), gamma=cert, trials=2, steps=30)
    assert bad["wrong"] == 1 and bad["rho_lower"][5] == bad["rho_upper"][5] == 0
    assert bad["loss_lower"] == bad["loss_upper"] == pytest.approx(1 / 8)
    assert bad["a2_at_rho_lower"]["bound"] is None


def test_datasets_from_csv_and_arrays(tmp_path):
    comp = relu_compile(full_adder())
    x = exhaustive_inputs(3)
    y = eval_circuit(comp.source, x)
    f = tmp_path / "adder.csv"
    rows = ["a,b,cin,s,cout"] + [",".join("1" if v else "-1" for v in [*xi, *yi]) for xi, yi in zip(x, y)]
    f.write_text("\n".join(rows) + "\n")
    X, Y = load_dataset(comp, f)
    assert np.array_equal(X, x) and np.array_equal(Y, y)
    X2, Y2 = load_dataset(comp, (x.astype(int) * 2 - 1, y.astype(int) * 2 - 1))  # ±1 arrays
    assert np.array_equal(X2, x) and np.array_equal(Y2, y)
    f.write_text("1,1,1,1\n")
    with pytest.raises(Tm2nnError, match="3 inputs then 2 outputs"):
        load_dataset(comp, f)
    with pytest.raises(Tm2nnError, match="shape"):
        load_dataset(comp, (x, y[:, 0]))
    with pytest.raises(Tm2nnError, match="bits"):
        load_dataset(comp, (x * 3, y))
    with pytest.raises(Tm2nnError, match="pair"):
        load_dataset(comp, 42)
    machine = tm2nn.compile(EXAMPLES / "binary_increment.tm", "relu-circuit", steps=3)
    with pytest.raises(Tm2nnError, match="circuit models"):
        load_dataset(machine, (x, y))


# -- the backend hooks and the report ---------------------------------------------------------
def test_backends_without_the_hooks_say_which_have_them():
    comp = tm2nn.compile(EXAMPLES / "majority7.circ", "abbe-sandon", engine="float64")
    with pytest.raises(Tm2nnError, match=r"does not describe its function class \(backends that do: .*relu-circuit"):
        comp.analysis("function_class")(comp)
    with pytest.raises(Tm2nnError, match=r"no certified margin \(backends with one: .*relu-circuit"):
        comp.analysis("certified_margin")(comp)
    with pytest.raises(Tm2nnError):
        statistics_report(comp)


def test_a_machine_unrolled_into_a_circuit_is_theorem_3_1():
    comp = tm2nn.compile(EXAMPLES / "binary_increment.tm", "relu-circuit", steps=3)
    rep = statistics_report(comp, eps=0.1)
    assert rep["theorem"] == "Theorem 3.1" and rep["n"] > 0 and rep["gamma"] > 0
    assert rep["scaling"]["q"] == comp.options["layers"]


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_info_statistics_on_the_command_line(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "info", EXAMPLES / "full_adder.circ", "--statistics", "--eps", "0.2", "--json")
    rep = json.loads(out)
    comp = relu_compile(full_adder())
    want = statistics_report(comp, eps=0.2)
    assert code == 0 and rep["n"] == want["n"] and rep["eps"] == 0.2 and rep["delta"] == 0.01
    assert (rep["alpha"], rep["p"], rep["w"], rep["d"]) == (333.0, 1079, 14, 22)
    code, out, _ = run_cli(capsys, "info", EXAMPLES / "full_adder.circ", "--backend", "relu-circuit", "--statistics")
    assert code == 0 and "Theorem 3.1" in out and "constant chosen:" in out and f"{want['gamma']:.4g}" in out
    model = tmp_path / "adder.onnx"
    assert run_cli(capsys, "compile", EXAMPLES / "full_adder.circ", "-o", model)[0] == 0
    code, out, _ = run_cli(capsys, "info", model, "--statistics", "--eps", "0.2", "--json")
    assert code == 0 and json.loads(out)["n"] == want["n"]
    code, _, err = run_cli(capsys, "info", EXAMPLES / "full_adder.circ", "--eps", "0.2")
    assert code == 2 and "--eps applies only with --statistics" in err
    code, _, err = run_cli(capsys, "info", EXAMPLES / "full_adder.circ", "--statistics", "--eps", "0")
    assert code == 2 and "--eps" in err
    code, _, err = run_cli(capsys, "info", EXAMPLES / "majority7.circ", "--backend", "abbe-sandon", "--engine", "float64",
                           "--statistics")
    assert code == 2 and "relu-circuit" in err and "Traceback" not in err


def test_the_transformer_loss_is_of_its_theta_cls_classifier():
    """Theorem 4.1's classifier F = θ_clsᵀ o_T: ρ bracketed between the certified radius and
    √B × the attacks that change F's sign; a wrong label is ρ = 0 (loss 1)."""
    from tests.backends.transformer.test_transformer import compile_tf
    from tm2nn.backends.transformer.perturbed_decode import attack

    m = tm2nn.load(EXAMPLES / "even_ones.tm")
    c = compile_tf(m, steps=6, cls_readout=True)
    texts = ["", "1", "11", "101"]
    truth = [tm2nn.run(m, t, 6).outcome for t in texts]
    assert truth == ["accept", "reject", "accept", "accept"]
    r = surrogate_loss_on(c, (texts, truth), gamma=1e-3, trials=2, steps=4)
    assert r["wrong"] == 0 and np.all(r["rho_lower"] == r["certified"]) and r["certified"] > 0
    assert np.all(r["rho_lower"] <= r["rho_upper"]) and np.all(np.isfinite(r["rho_upper"]))
    assert 0 <= r["loss_lower"] <= r["loss_upper"] <= 1
    # γ at the certified radius: every example's certified ρ reaches it, so the upper loss is 0
    assert surrogate_loss_on(c, (texts, truth), gamma=r["certified"], trials=1, steps=0)["loss_upper"] == 0.0
    flipped = ["reject" if t == "accept" else "accept" for t in truth]
    w = surrogate_loss_on(c, (texts, flipped), gamma=1e-3, trials=1, steps=0)
    assert w["wrong"] == 4 and w["loss_lower"] == w["loss_upper"] == 1.0
    # the cls target is weaker than "any decoded field": its flips need at least as large an ε
    a_cls = attack(c, texts, 1.0, "random", 2, seed=0, target="cls")
    a_any = attack(c, texts, 1.0, "random", 2, seed=0)
    assert np.all(a_cls["per_input"] >= a_any["per_input"] * (1 - 1e-2))
    with pytest.raises(Tm2nnError, match="cls-readout"):
        surrogate_loss_on(compile_tf(m, steps=6), (texts, truth), gamma=1e-3)
