"""GD-trace §4.4 (issue 7) on Welper §4.1 machines (d tapes over {-1,1}, read-only
tapes): tape variables T, H, loss (21) as a network-IR net with stop-gradients, weights
(17), b per (18), state tripling (20), update (22) checked against the interpreter at
every step, and Prop. 4.3's loss bounds (23)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tm2nn.backends.gd_trace.tape_simplex import TapeSimplex, Tracer44, choose_b, lbar_all, trace44
from tm2nn.emit import to_onnx
from tm2nn.errors import Tm2nnError
from tm2nn.interp.multitape import run_multitape
from tm2nn.ir.multitape import MRule, MultiTapeMachine


def copy_back() -> MultiTapeMachine:
    """Copy the read-only tape 0 onto tape 1, walk back erasing, halt."""
    return MultiTapeMachine("copy_back", 2, {0}, ("a", "b", "c"), "a", {"c"}, (
        MRule("a", (1, -1), "a", (1, 1), (1, 1)),
        MRule("a", (-1, -1), "b", (-1, 1), (-1, -1)),
        MRule("b", (1, 1), "b", (1, -1), (-1, -1)),
        MRule("b", (-1, -1), "c", (-1, -1), (1, 1))))


def check_trace(mm: MultiTapeMachine, tapes, tau: int, left: int, extra: int = 2):
    """Prop. 4.3: optimizer step k == machine step k (state, heads, every tape); (23) at
    every step; the halting loss below every earlier one; the iterate stays at the halt."""
    run = run_multitape(mm, tapes, 400)
    assert run.halted
    K = run.steps
    tr = trace44(mm, tapes, K + extra, tau=tau, left=left)
    for k, s in enumerate(tr):
        assert s.config == run.configs[min(k, K)], f"step {k}"
    ts = TapeSimplex(mm, tau, left)
    first = next(k for k, s in enumerate(tr) if s.halted)
    assert first <= K
    for k, s in enumerate(tr):
        lo, hi = ts.bounds23(s.halted)
        assert lo - 1e-9 <= s.loss <= hi + 1e-9, (k, s.loss, lo, hi)
        assert s.halted == (k >= first)
    assert all(tr[first].loss < s.loss for s in tr[:first])
    return tr


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_choose_b_satisfies_18(d):
    b = choose_b(d)
    assert b ** 3 >= 0.5 * (b ** 3 + d * b) and 0.5 * b ** 3 - d * b >= 2 * d * b * b and b * b > b
    assert b ** 3 > 8 * b * b * d + 3 * d
    assert not (b - 1 > 1 and (b - 1) ** 3 > 8 * (b - 1) ** 2 * d + 3 * d
                and 0.5 * (b - 1) ** 3 - d * (b - 1) >= 2 * d * (b - 1) ** 2)


def test_lbar_properties():
    m = 5
    e = torch.eye(m, dtype=torch.float64)
    for v in range(m):
        for w in range(m):
            if v == w:
                continue
            L = lbar_all(e[v])
            assert torch.allclose(L, torch.zeros_like(L))
            for a in range(m):
                for c in range(m):
                    if a == c:
                        continue
                    p = 0.75 * e[a] + 0.25 * e[c]  # e_ac^{1/4}
                    want = 1.0 if (a, c) == (v, w) else 0.5 if (a, c) == (w, v) else 0.0
                    assert float(lbar_all(p)[v, w]) == pytest.approx(want, abs=1e-12)
            # affine on the corner S_v^{1/4}: value = 4 x_w
            rng = np.random.default_rng(v * m + w)
            lam = torch.as_tensor(rng.dirichlet(np.ones(m)))
            corners = [e[v]] + [0.75 * e[v] + 0.25 * e[t] for t in range(m) if t != v]
            x = sum(li * c for li, c in zip(lam, corners))
            assert float(lbar_all(x)[v, w]) == pytest.approx(float(4 * x[w]))


def test_weights_17_and_tripling_20():
    mm = copy_back()
    ts = TapeSimplex(mm, tau=8, left=-2)
    om = ts.omega_vw()
    assert not np.any((om != 0) & (om.T != 0))  # (20)
    b = ts.b
    assert b == choose_b(2)
    for i, (q, r, t) in enumerate(ts.verts):
        for j, (q2, r2, t2) in enumerate(ts.verts):
            if om[i, j]:
                assert r2 == (r + 1) % 3 and q2 == mm.delta[(q, t)].next
                assert om[i, j] == -(b ** 3 + b * sum(a == c for a, c in zip(t, t2)))
    # every non-halting vertex has 2^d out-edges
    assert (np.count_nonzero(om, axis=1)[~ts.halting] == 4).all()
    assert set(ts.omega_v[ts.halting]) == {-b ** 3} and not ts.omega_v[~ts.halting].any()
    assert ts.m == 3 * 3 * 4


def test_net_l_S_matches_reference():
    """The net's l_S (edges only) equals sum omega_v l_v + sum omega_vw lbar_vw of the
    dense reference at random simplex points, and the gradient agrees (autograd)."""
    from tm2nn.backends.gd_trace.lagrange import ell_v_all

    mm = copy_back()
    ts = TapeSimplex(mm, tau=6, left=-1, c=0.0)
    tr = Tracer44(ts, [{0}, set()])
    rng = np.random.default_rng(0)
    om = torch.as_tensor(ts.omega_vw())
    wv = torch.as_tensor(ts.omega_v)
    for _ in range(5):
        x = torch.as_tensor(rng.dirichlet(np.ones(ts.m) * 0.3))
        with torch.no_grad():
            tr.module.op("s").value.copy_(x)
        with torch.no_grad():
            vals = tr.module.trace(tr.ro)
        got = float((tr.module.op("loss").dense_weight().detach()[0, : len(vals["lag1r"][0]) + len(vals["lag2r"][0])]
                     * torch.cat([vals["lag1r"][0], vals["lag2r"][0]])).sum())
        want = float((wv * ell_v_all(x, 0.25)).sum() + (om * lbar_all(x)).sum())
        assert got == pytest.approx(want, rel=1e-9, abs=1e-6)


def test_stop_gradients():
    """(21): grad_T = gamma (T^T H - T_arrow x) H on the writable tape only, grad_H =
    -gamma (S(x) H - H), grad_x only through l_S and the read term."""
    mm = copy_back()
    ts = TapeSimplex(mm, tau=6, left=-1, gamma=2.0)
    tr = Tracer44(ts, [{0, 1}, set()])
    tr.loss().backward()
    v = tr.values()
    T = v["T"].reshape(1, 6)
    H = v["H"].reshape(2, 6)
    x = v["s"]
    arrow = ts.arrow @ x
    want_T = 2.0 * (T[0] @ H[1] - arrow[1]) * H[1]
    assert np.allclose(tr.module.op("T").value.grad.numpy(), want_T)
    i0 = 1  # head cell (cell 0 at index -left)
    SH = np.zeros((2, 6))
    SH[:, i0 + 1] = 1.0  # rule (a, (1, -1)) moves both heads right
    assert np.allclose(tr.module.op("H").value.grad.numpy().reshape(2, 6), -2.0 * (SH - H))


def test_copy_back_trace_and_onnx():
    tr = check_trace(copy_back(), [{0, 1, 2}, set()], tau=8, left=-2)
    assert tr[-1].config.tapes[1] == frozenset({3})
    # the emitted ONNX model computes the same loss at the start iterate
    ts = TapeSimplex(copy_back(), 8, -2)
    st0 = ts.start([{0, 1, 2}, set()])
    import dataclasses

    from tm2nn.nets import Net
    nodes = [dataclasses.replace(o, value=st0[o.name]) if o.name in ("s", "T", "H") else o for o in ts.net.nodes]
    sess = ort.InferenceSession(to_onnx(Net("l", ts.net.inputs, tuple(nodes), ts.net.outputs)).SerializeToString())
    (got,) = sess.run(None, {"ro": st0["ro"][None].astype(np.float32)})
    assert float(got[0, 0]) == pytest.approx(tr[0].loss)


def test_refusals():
    mm = copy_back()
    with pytest.raises(Tm2nnError, match="dimension"):
        TapeSimplex(mm, tau=200_000, left=0)
    with pytest.raises(Tm2nnError, match="leaves the tape window"):
        trace44(mm, [{0, 1, 2}, set()], 10, tau=3, left=0)
    with pytest.raises(Tm2nnError, match="outside the window"):
        trace44(mm, [{0, 1, 2, 7}, set()], 10, tau=5, left=0)


@st.composite
def multitape_cases(draw):
    d = draw(st.integers(1, 3))
    ro = frozenset(j for j in range(d) if d > 1 and j == 0 and draw(st.booleans()))
    n = draw(st.integers(1, 3))
    states = tuple(f"q{i}" for i in range(n)) + ("h",)
    rules = []
    from itertools import product
    for q in states[:-1]:
        for t in product((-1, 1), repeat=d):
            if draw(st.integers(0, 5)) == 0:
                continue  # missing rule: halts
            w = tuple(t[j] if j in ro else draw(st.sampled_from((-1, 1))) for j in range(d))
            mv = tuple(draw(st.sampled_from((-1, 1))) for _ in range(d))
            rules.append(MRule(q, t, draw(st.sampled_from(states)), w, mv))
    mm = MultiTapeMachine("rand", d, ro, states, "q0", {"h"}, tuple(rules))
    tapes = [frozenset(draw(st.sets(st.integers(0, 3), max_size=3))) for _ in range(d)]
    return mm, tapes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=multitape_cases())
def test_random_multitape_machines(case):
    mm, tapes = case
    run = run_multitape(mm, tapes, 40)
    lo = min([0, *[c for t in tapes for c in t]])
    hi = max([3, *[c for t in tapes for c in t]])
    for cfg in run.configs:
        lo = min(lo, *cfg.heads)
        hi = max(hi, *cfg.heads)
    if run.halted:
        check_trace(mm, tapes, tau=hi - lo + 1, left=lo, extra=1)
    else:  # a window that holds the first 40 steps: the first 40 optimizer steps agree
        tr = trace44(mm, tapes, 40, tau=hi - lo + 3, left=lo - 1)
        assert [s.config for s in tr] == list(run.configs)
