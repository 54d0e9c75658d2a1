"""GD-trace §4.4 (issue 7): tape variables T, H, loss (21) with stop-gradients, weights
(17), b per (18), state tripling (20), update (22) checked against the interpreter at every
step, and Prop. 4.3's loss bounds (23)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import machines
from tests.test_gd_trace_43 import random_machine_case
from tm2nn.backends.gd_trace import TapeSimplex, choose_b, lbar_all, trace44
from tm2nn.errors import Tm2nnError
from tm2nn.interp.machine import configurations, run_machine
from tm2nn.source import SourceText
from tm2nn.syntax import load, std

ROOT = Path(__file__).resolve().parents[1]
BB = ROOT.parent / "shared" / "corpus" / "tm" / "bb"


def check_trace(m, inp: str):
    """Prop. 4.3: optimizer step k == machine step k; (23) at every step; the halting
    loss below every earlier one; the iterate stays at the halt afterwards."""
    res = run_machine(m, inp, max_steps=10_000, trace=True)
    assert res.halted
    K = res.steps
    tr = trace44(m, inp, K + 2)
    want = [(k, q, h, dict(c)) for k, q, h, c in configurations(res)]
    assert len(want) == K + 1
    for (k, q, h, cells), s in zip(want, tr, strict=False):
        assert s.k == k
        assert (s.config.state, s.config.head, s.config.cells) == (q, h, dict(cells))
    b = choose_b(1)
    hi = 8 * b * b + 3
    first = next(k for k, s in enumerate(tr) if s.config.halted)
    for k, s in enumerate(tr):
        if k < first:
            assert 0.0 <= s.loss <= hi and not s.config.halted
        else:
            assert s.config.halted and s.loss <= hi - b ** 3
    assert all(tr[first].loss < s.loss for s in tr[:first])
    for s in tr[K + 1:]:
        assert s.config == tr[K].config
    return tr


def test_choose_b_satisfies_18():
    b = choose_b(1)
    assert b ** 3 >= 0.5 * (b ** 3 + b) and 0.5 * b ** 3 - b >= 2 * b * b and b * b > b
    assert b ** 3 > 8 * b * b + 3 and b == 9


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
    m = load(ROOT / "examples" / "bb3.tm")
    ts = TapeSimplex(m, tau=8, left=-4)
    om = ts.omega_vw
    assert not np.any((om != 0) & (om.T != 0))  # (20)
    b = ts.b
    for i, (q, r, a) in enumerate(ts.verts):
        for j, (q2, r2, a2) in enumerate(ts.verts):
            if om[i, j]:
                assert r2 == (r + 1) % 3 and q2 == m.delta[(q, a)].next
                assert om[i, j] == -(b ** 3 + (b if a2 == a else 0))
    assert set(ts.omega_v[ts.halting]) == {-b ** 3}


def test_stop_gradients():
    """(21): grad_T only from the write term, grad_H only from the move term."""
    m = load(ROOT / "examples" / "bb3.tm")
    ts = TapeSimplex(m, tau=8, left=-4)
    x, T, H = ts.start("")
    T.requires_grad_(True)
    H.requires_grad_(True)
    gT, gH = torch.autograd.grad(ts.loss(x, T, H), (T, H))
    want_T = H[:, None] * (T.T @ H - ts._arrow @ x)[None, :]
    assert torch.allclose(gT, want_T.detach())
    assert torch.allclose(gH, -(ts.shifted_head(x, H) - H).detach())


@pytest.mark.parametrize("inp", ["", "1", "0", "11", "1011", "111"])
def test_binary_increment(inp):
    check_trace(load(ROOT / "examples" / "binary_increment.tm"), inp)


def test_bb3_example():
    tr = check_trace(load(ROOT / "examples" / "bb3.tm"), "")
    assert tr[21].config.state == "Z"


@pytest.mark.skipif(not BB.is_dir(), reason="../shared/corpus is absent")
def test_bb2_corpus():
    for m in std.parse(SourceText.from_file(BB / "2x2.txt")):
        check_trace(m, "")


@pytest.mark.parametrize("counts", [False, True])
def test_missing_rule_convention(counts):
    m = load(ROOT / "examples" / "binary_increment.tm")
    rules = tuple(r for r in m.rules if not (r.state == "carry" and r.read == "0"))
    check_trace(m.replace(rules=rules, missing_rule_counts_step=counts), "10")


def test_refusals():
    m = load(ROOT / "examples" / "binary_increment.tm")
    with pytest.raises(Tm2nnError, match="dimension"):
        TapeSimplex(m, tau=10_000, left=0)
    with pytest.raises(Tm2nnError, match="head leaves"):
        trace44(m, "1", 10, tau=2, left=0)
    with pytest.raises(Tm2nnError, match="tape window"):
        trace44(m, "1111", 10, tau=3, left=0)
    with pytest.raises(Tm2nnError, match="does not halt"):
        trace44(load(ROOT / "examples" / "bb3.tm"), "", 10)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=2), data=st.data())
def test_random_machines(m, data):
    random_machine_case(m, data, trace44, check_trace)
