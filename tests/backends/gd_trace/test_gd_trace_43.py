"""GD-trace §4.2-§4.3 + App. A (issue 7): Lagrange basis, configuration simplex, loss (13),
Frank-Wolfe step (14) checked against the interpreter at every step (Prop. 4.2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import machines
from tm2nn.backends.gd_trace.config_simplex import ConfigSimplex, build, inputs_up_to, trace
from tm2nn.backends.gd_trace.lagrange import (
    corner_hyperplane,
    corner_vertex,
    ell_pair_all,
    ell_v,
    ell_v_all,
    ell_vw,
    vertex,
)
from tm2nn.backends.gd_trace.tape_simplex import TapeSimplex
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import configurations, run_machine
from tm2nn.source import SourceText
from tm2nn.syntax import load, std

ROOT = Path(__file__).resolve().parents[3]
BB = ROOT.parent / "shared" / "corpus" / "tm" / "bb"


# ------------------------------------------------------------------------------------------
# Appendix A


@pytest.mark.parametrize("m", [2, 3, 5, 8])
@pytest.mark.parametrize("mu", [0.25, 0.5, 1.0])
def test_lemma_a1_lagrange(m, mu):
    for v in range(m):
        assert ell_v(vertex(m, v), v, mu) == pytest.approx(1.0)
        for w in range(m):
            if w != v:
                assert ell_v(vertex(m, w), v, mu) == pytest.approx(0.0, abs=1e-12)
                assert ell_v(corner_vertex(m, v, w, mu), v, mu) == pytest.approx(0.0, abs=1e-12)
        # closed form == explicit ReLU unit
        x = np.random.default_rng(v).dirichlet(np.ones(m))
        assert ell_v_all(x, mu)[v] == pytest.approx(ell_v(x, v, mu))


@pytest.mark.parametrize("m", [3, 4, 7])
def test_lemma_a1_affine_on_corner(m):
    rng = np.random.default_rng(m)
    for v in range(m):
        corners = [vertex(m, v)] + [corner_vertex(m, v, w) for w in range(m) if w != v]
        vals = np.array([ell_v(c, v) for c in corners])
        for _ in range(20):
            lam = rng.dirichlet(np.ones(m))
            x = sum(lam_i * c for lam_i, c in zip(lam, corners))
            assert ell_v(x, v) == pytest.approx(lam @ vals)
        # zero outside the corner: points with x_v < 1/2
        for _ in range(20):
            x = rng.dirichlet(np.ones(m))
            if x[v] < 0.5:
                assert ell_v(x, v) == pytest.approx(0.0, abs=1e-12)


def test_lemma_a1_hyperplane_values():
    n, d = corner_hyperplane(5, 2, 0.5)
    assert n @ vertex(5, 2) - d == pytest.approx(1.0)
    assert n @ vertex(5, 0) - d == pytest.approx(-1.0)  # -(1 - mu)/mu


@pytest.mark.parametrize("m", [3, 4, 6])
def test_lemma_a2_lagrange_and_affine(m):
    rng = np.random.default_rng(10 + m)
    for v in range(m):
        for w in range(m):
            if v == w:
                continue
            for a in range(m):
                assert ell_vw(vertex(m, a), v, w) == pytest.approx(0.0, abs=1e-12)
                for b in range(m):
                    if a != b:
                        want = 1.0 if {a, b} == {v, w} else 0.0
                        assert ell_vw(corner_vertex(m, a, b), v, w) == pytest.approx(want, abs=1e-12)
            # affine on every corner S_u
            for u in range(m):
                corners = [vertex(m, u)] + [corner_vertex(m, u, t) for t in range(m) if t != u]
                vals = np.array([ell_vw(c, v, w) for c in corners])
                lam = rng.dirichlet(np.ones(m))
                x = sum(li * c for li, c in zip(lam, corners))
                assert ell_vw(x, v, w) == pytest.approx(lam @ vals, abs=1e-12)
            x = rng.dirichlet(np.ones(m))
            assert ell_pair_all(x)[v, w] == pytest.approx(ell_vw(x, v, w))


def test_lagrange_torch_autograd():
    m = 4
    x = torch.tensor(0.8 * vertex(m, 1) + 0.2 * corner_vertex(m, 1, 2), requires_grad=True)
    y = ell_v(x, 1)
    (g,) = torch.autograd.grad(y, x)
    n, _ = corner_hyperplane(m, 1)
    assert np.allclose(g.numpy(), n)
    assert torch.allclose(ell_pair_all(x.detach())[1, 2], ell_vw(x.detach(), 1, 2))


# ------------------------------------------------------------------------------------------
# §4.3


def check_trace(m, inp: str, steps: int | None = None, line_search: bool = False):
    """Prop. 4.2: x_k = e_{v_k} for every k; loss strictly decreasing up to halting; stays."""
    res = run_machine(m, inp, max_steps=10_000, trace=True)
    assert res.halted
    K = res.steps
    steps = K + 2 if steps is None else steps
    tr = trace(m, inp, steps, line_search=line_search)
    want = [(k, q, h, dict(c)) for k, q, h, c in configurations(res)]
    assert len(want) == K + 1
    for (k, q, h, cells), s in zip(want, tr, strict=False):
        assert s.k == k
        assert (s.config.state, s.config.head, s.config.cells(m.blank)) == (q, h, cells)
    losses = [s.loss for s in tr]
    assert all(a > b for a, b in zip(losses[:K], losses[1:K + 1]))  # strictly decreasing
    assert all(losses[K] < x for x in losses[:K])
    for s in tr[K + 1:]:  # x_k = e_{v_K} for k > K
        assert s.config == tr[K].config
    return tr


@pytest.mark.parametrize("inp", ["", "1", "0", "11", "1011", "111"])
def test_binary_increment(inp):
    check_trace(load(ROOT / "examples" / "binary_increment.tm"), inp)


def test_bb3_example():
    tr = check_trace(load(ROOT / "examples" / "bb3.tm"), "")
    assert len(tr) == 24 and tr[21].config.state == "Z"


# -- (14) with a line search (Prop. 4.2's second learning rate, with (15)) -------------------
@pytest.mark.parametrize("name,inp", [("bb3", ""), ("binary_increment", "1011"), ("binary_increment", "111"),
                                      ("balanced_parens", "(()")])
def test_line_search_traces_the_machine(name, inp):
    """With the exact line search every iterate is still the machine's configuration, the
    loss strictly decreases, and the iterate stays at the halting vertex (Prop. 4.2)."""
    check_trace(load(ROOT / "examples" / f"{name}.tm"), inp, line_search=True)


def test_line_search_lands_on_the_far_vertex():
    """Along an edge the loss (13) is omega_v, omega_vw, omega_w at alpha = 0, 1/2, 1 ((15):
    decreasing), so the search returns alpha = 1; at the halting vertex the direction is 0."""
    cs = build(load(ROOT / "examples" / "bb3.tm"), [""], 5, -1, max_steps=30)
    v = cs.starts[""]
    x = cs.vertex(v)
    y = cs.vertex(cs.succ[v])
    assert cs.line_search(x, y) == 1.0
    ls = [float(cs.loss(x + t * (y - x))) for t in (0.0, 0.25, 0.5, 0.75, 1.0)]
    assert ls[0] > ls[2] > ls[4] and ls[0] > ls[1] > ls[2] > ls[3] > ls[4]


def test_line_search_needs_15(monkeypatch):
    """Mutation: edge weights below the successor's (omega_vw < omega_w, (15) broken, (10)
    kept): the fixed step still lands on e_w up to the halt (staying there needs (15),
    Prop. 4.2), the line search stops at the midpoint e_vw, which is not a vertex."""
    m = load(ROOT / "examples" / "bb3.tm")
    orig = ConfigSimplex.omega_vw

    def broken(self):
        om = orig(self)
        for v, w in enumerate(self.succ):
            if w is not None:
                om[v, w] = om[w, v] = om[v, w] - 1.0
        return om
    monkeypatch.setattr(ConfigSimplex, "omega_vw", broken)
    check_trace(m, "", steps=21)   # alpha = 1 does not need (15) for k <= K
    with pytest.raises(ValueError, match="not a vertex"):
        trace(m, "", 21, line_search=True)


def test_line_search_is_not_for_44():
    """Prop. 4.3's remark, measured: on the §4.4 loss (21) the minimum along the
    Frank-Wolfe edge from a vertex is at e_vw^{1/4} (alpha = 1/4), not at the next vertex,
    so (22) keeps the fixed step (no line search option there)."""
    from tm2nn.backends.gd_trace.tape_simplex import Tracer44
    from tm2nn.passes.welper_form import to_welper_form

    low = to_welper_form(load(ROOT / "examples" / "bb3.tm"))
    left, tau = low.window(-22, 23, 0)
    ts = TapeSimplex(low.machine, tau, left)
    tr = Tracer44(ts, low.lower_input(""))
    start = {k: v.clone() for k, v in ((k, tr.module.op(k).value.detach()) for k in ("s", "T", "H"))}
    tr.step()
    s1 = tr.module.op("s").value.detach().clone()
    assert not torch.equal(start["s"], s1)
    vals = []
    with torch.no_grad():   # T, H back at iterate 0; the loss along s0 -> s1
        for k in ("T", "H"):
            tr.module.op(k).value.copy_(start[k])
        for t in (0.0, 0.25, 0.5, 0.75, 1.0):
            tr.module.op("s").value.copy_(start["s"] + t * (s1 - start["s"]))
            vals.append(tr.loss_value())
    assert min(range(5), key=vals.__getitem__) == 1, vals


@pytest.mark.parametrize("inp", ["", "()", "(()", "())("])
def test_balanced_parens(inp):
    m = load(ROOT / "examples" / "balanced_parens.tm")
    res = run_machine(m, inp, max_steps=2000)
    if res.steps > 200:
        pytest.skip("too long for the §4.3 simplex in a unit test")
    check_trace(m, inp)


@pytest.mark.skipif(not BB.is_dir(), reason="../shared/corpus is absent")
@pytest.mark.parametrize("stem", ["2x2", "3x2"])
def test_bb_corpus(stem):
    ms = std.parse(SourceText.from_file(BB / f"{stem}.txt"))
    # the file lists the longest runs first: those, then a spread (all 1379 of 3x2 pass in ~14 s)
    for m in ms[:20] + ms[20::25]:
        check_trace(m, "")


@pytest.mark.parametrize("counts", [False, True])
def test_missing_rule_convention(counts):
    """A missing rule halts; under missing_rule_counts_step the counted no-rule step is an
    extra vertex (``final``) with the same state, head and tape."""
    m = load(ROOT / "examples" / "binary_increment.tm")
    rules = tuple(r for r in m.rules if not (r.state == "carry" and r.read == "0"))
    m = m.replace(rules=rules, missing_rule_counts_step=counts)
    tr = check_trace(m, "10")
    assert tr[-1].config.final is counts


def test_weights_satisfy_10_and_15():
    m = load(ROOT / "examples" / "binary_increment.tm")
    cs = build(m, inputs_up_to(m, 2), tau=6, left=-2, max_steps=50)
    om = cs.omega_vw()
    wv = cs.omega_v
    assert np.allclose(om, om.T)
    edges = {(v, w) for v, w in enumerate(cs.succ) if w is not None}
    assert edges
    for v, w in edges:
        assert wv[v] > om[v, w] > wv[w]  # (10) first line and (15)
        for u, v2 in edges:
            if v2 == v:
                assert om[u, v] > om[v, w]  # (10) second line
    for v in range(cs.m):
        for w in range(cs.m):
            if v != w and (v, w) not in edges and (w, v) not in edges:
                assert om[v, w] == cs.B
    assert cs.B > max(wv.max(), max(om[v, w] for v, w in edges))


def test_loss_interpolates_11_and_gradient_6():
    m = load(ROOT / "examples" / "binary_increment.tm")
    cs = build(m, inputs_up_to(m, 1), tau=4, left=-1, max_steps=50)
    om = cs.omega_vw()
    rng = np.random.default_rng(0)
    for v in rng.choice(cs.m, size=min(cs.m, 6), replace=False):
        ev = cs.vertex(v)
        assert float(cs.loss(ev)) == pytest.approx(cs.omega_v[v])
        for w in rng.choice(cs.m, size=min(cs.m, 6), replace=False):
            if w == v:
                continue
            ew = cs.vertex(w)
            assert float(cs.loss(0.5 * (ev + ew))) == pytest.approx(om[v, w])
            # (6) with affinity on S_v: d_{e_w - e_v} l(e_v) = 2 (omega_vw - omega_v)
            assert cs.directional_derivative(ev, ew) == pytest.approx(2 * (om[v, w] - om[v, v]))
            # same at an interior point of the corner S_v (affine there)
            x = 0.9 * ev + 0.05 * ew + 0.05 * cs.vertex((w + 1) % cs.m if (w + 1) % cs.m != v else w)
            assert np.allclose(cs.gradient(x), cs.gradient(ev))


def test_all_inputs_fw_from_every_start():
    """"All relevant computations": one simplex for every input of length <= 2; FW from
    each start vertex follows that input's run."""
    m = load(ROOT / "examples" / "binary_increment.tm")
    cs = build(m, inputs_up_to(m, 2), tau=6, left=-2, max_steps=50)
    for inp, v0 in cs.starts.items():
        res = run_machine(m, inp, trace=True)
        x = cs.vertex(v0)
        for k, q, h, cells in configurations(res):
            c = cs.decode(x)
            assert (c.state, c.head, c.cells(m.blank)) == (q, h, cells), (inp, k)
            x, _ = cs.fw_step(x)


def test_refusal_with_estimate():
    m = load(ROOT / "examples" / "binary_increment.tm")
    with pytest.raises(Tm2nnError, match=r"up to \d+ vertices"):
        build(m, inputs_up_to(m, 8), tau=12, left=-2, max_steps=100, max_vertices=500)
    with pytest.raises(Tm2nnError, match="tape window"):
        build(m, ["1111"], tau=5, left=0, max_steps=50)
    with pytest.raises(Tm2nnError, match="head leaves"):
        build(m, ["1"], tau=2, left=0, max_steps=50)


def test_refusal_non_halting():
    bb3 = load(ROOT / "examples" / "bb3.tm")
    with pytest.raises(Tm2nnError, match="does not halt"):
        build(bb3, [""], tau=8, left=-4, max_steps=10)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=2), data=st.data())
def test_random_machines(m, data):
    random_machine_case(m, data, trace, check_trace)


def random_machine_case(m, data, trace_fn, check) -> None:
    """A drawn input of up to 3 non-blank cells: a machine that halts within 40 steps is
    traced step by step (``check``); one that does not is refused by ``trace_fn``."""
    syms = [a for a in m.alphabet if a != m.blank]
    inp = data.draw(st.text(alphabet=syms, max_size=3)) if syms else ""
    res = run_machine(m, inp, max_steps=40, trace=True)
    if not res.halted:
        with pytest.raises(Tm2nnError):
            trace_fn(m, inp, 40)
        return
    check(m, inp)


# -- loss (13) as a network-IR net ----------------------------------------------------------
def _net_case():
    from tm2nn.backends.gd_trace.config_simplex import window_for

    m = load(Path(__file__).resolve().parents[3] / "examples" / "binary_increment.tm")
    tau, left = window_for(m, "111", 10)
    return build(m, inputs_up_to(m, 2), tau, left, max_steps=10)


def test_loss13_net_equals_the_closed_form_and_its_gradient():
    from tm2nn.emit.onnx_model import to_onnx
    from tm2nn.emit.onnx_runtime import run_onnx
    from tm2nn.emit.torch_emit import run_torch, to_torch

    cs = _net_case()
    net = cs.net()
    assert net.depth()["relu"] == 1  # one ReLU layer: Lemmas A.1 and A.2 are single units
    mod = to_torch(net, torch.float64)
    rng = np.random.default_rng(3)
    m = cs.m
    mids = [(cs.vertex(v) + cs.vertex(w)) / 2 for v, w in enumerate(cs.succ) if w is not None][:10]
    X = np.vstack([np.eye(m)[: min(m, 20)], *mids, rng.dirichlet(np.ones(m), 10)])
    want = np.array([float(cs.loss(x)) for x in X])
    np.testing.assert_allclose(run_torch(mod, X)[:, 0], want, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(run_onnx(to_onnx(net), X)[:, 0], want, rtol=1e-5, atol=1e-3)
    # the Frank-Wolfe vertex from the net's autograd gradient is the machine's successor
    for v, w in enumerate(cs.succ):
        xt = torch.tensor(cs.vertex(v)[None, :], requires_grad=True)
        mod(xt).sum().backward()
        g = xt.grad.numpy()[0]
        np.testing.assert_allclose(g, cs.gradient(cs.vertex(v)), rtol=1e-12, atol=1e-9)
        assert int(np.argmin(g)) == (v if w is None else w)


def test_loss13_net_refuses_too_many_pairs(monkeypatch):
    from tm2nn.backends.gd_trace import config_simplex

    cs = _net_case()
    monkeypatch.setattr(config_simplex, "MAX_PAIR_UNITS", 10)
    with pytest.raises(Tm2nnError, match="pair units"):
        cs.net()
