"""The emulation net G_n of Abbe & Sandon §4.1 (Lemma 3 / Theorem 4): built from the
learner's circuits, trained by plain SGD in exact arithmetic, compared with the learner
(:func:`tm2nn.interp.learner.run_learner`) at every step."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tm2nn.backends.abbe_sandon.gadgets import lemma2_gradients
from tm2nn.backends.abbe_sandon.net import build_net
from tm2nn.backends.abbe_sandon.train import Engine, net_inputs, predict, train
from tm2nn.interp.learner import predict as learner_predict
from tm2nn.interp.learner import run_learner
from tm2nn.learners.builder import LearnerBuilder
from tm2nn.learners.examples import majority_learner, parity_learner
from tm2nn.learners.targets import parity_target, samples

from ...conftest import EXAMPLES


@st.composite
def learners(draw):
    """A random small learner: n <= 3 inputs, m <= 3 memory bits, maybe a random bit and a
    coin, random h and g over all ports, random initial memory."""
    n, m = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    lb = LearnerBuilder("rand")
    sig = list(lb.input("x", n))
    if draw(st.booleans()):
        sig.append(lb.random("r"))
    if draw(st.booleans()):
        sig.append(lb.coin("rp"))
    init = draw(st.lists(st.integers(0, 1), min_size=m, max_size=m))
    mem = list(lb.memory("b", m, init=init))
    sig += mem
    for _ in range(draw(st.integers(0, 10))):
        op = draw(st.sampled_from(["and", "or", "xor", "not", "mux"]))
        a, b, c = (sig[draw(st.integers(0, len(sig) - 1))] for _ in range(3))
        if op == "and":
            sig.append(a & b)
        elif op == "or":
            sig.append(a | b)
        elif op == "xor":
            sig.append(a ^ b)
        elif op == "not":
            sig.append(~a)
        else:
            sig.append(lb.mux(a, b, c))
    pick = st.integers(0, len(sig) - 1)
    lb.update(mem, [sig[draw(pick)] for _ in range(m)])
    return lb.build(sig[draw(pick)])


def _stream(lr, T, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2, (T, lr.n)).astype(bool), rng.integers(0, 2, T).astype(bool),
            rng.integers(0, 2, (T, len(lr.random))).astype(bool), rng.integers(0, 2, (T, len(lr.coin))).astype(bool))


def _weights_are_pm_initial(net) -> bool:
    """Lemma 2's invariant: every weight of every copy is its initial value or its negative."""
    for c in net.copies:
        for e, i in c.edge.items():
            w0 = c.template.initial[e]
            if net.w[i] != w0 and net.w[i] != -w0:
                return False
    return True


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(learners(), st.integers(0, 2**31 - 1))
def test_random_learners_emulated_exactly(lr, seed):
    """Lemma 3: 200 SGD steps; net output = learner output, decoded memory = learner memory
    at every step, no weight outside the M_s copies changes (all checked inside train)."""
    net = build_net(lr)
    assert net.memory_bits() == list(lr.init)
    xs, ys, rs, r2s = _stream(lr, 200, seed)
    frozen = {e: net.w[e] for e in range(len(net.w)) if e not in net.gadget_edges()}
    rep = train(net, xs, ys, rs, r2s)
    assert rep.mismatch is None, rep.mismatch
    assert rep.steps == 200
    ref = run_learner(lr, xs, ys, rs if lr.random else None, r2s[:, 0] if lr.coin else None)
    assert rep.outputs == [int(v) for v in ref.outputs]
    assert net.memory_bits() == [int(v) for v in ref.final]
    assert all(net.w[e] == w for e, w in frozen.items())
    assert _weights_are_pm_initial(net)


def test_majority_example():
    lr = majority_learner(7)
    net = build_net(lr)
    rng = np.random.default_rng(3)
    T = 60
    xs = rng.integers(0, 2, (T, 1)).astype(bool)
    ys = rng.random(T) < 0.7
    r2s = rng.integers(0, 2, T).astype(bool)
    rep = train(net, xs, ys, None, r2s)
    assert rep.mismatch is None, rep.mismatch
    ref = run_learner(lr, xs, ys, None, r2s)
    assert net.memory_bits() == [int(v) for v in ref.final]
    X = np.array([[0], [1]], bool)
    for coin in (0, 1):
        r2 = np.full(2, coin, bool)
        assert (predict(net, X, None, r2) == learner_predict(lr, ref.final, X, None, r2)).all()


def test_parity4_learns_everything():
    lr = parity_learner(4)
    tgt = parity_target("1101")
    S = samples(tgt, 40, seed=5)
    net = build_net(lr)
    rep = train(net, S.xs, S.ys, None, S.r2s)
    assert rep.mismatch is None, rep.mismatch
    X = np.array([[(i >> j) & 1 for j in range(4)] for i in range(16)], bool)
    for coin in (0, 1):
        assert (predict(net, X, None, np.full(16, coin, bool)) == tgt(X)).all()
    assert 0 < rep.samples_used <= 40


def test_gradients_match_lemma2_closed_form():
    """The generic reverse-mode's gradient on each copy = Lemma 2's per-edge closed form."""
    lr = parity_learner(3)
    net = build_net(lr)
    eng = Engine(net)
    tgt = parity_target("111")
    S = samples(tgt, 30, seed=2)
    Z = net_inputs(S.xs, None, S.r2s[:, None])
    checked = 0
    for t in range(30):
        out = eng.forward(Z[t])
        label = 1 if S.ys[t] else -1
        grads = eng.backward(label)
        delta = 3 * 2 * (out - label)
        for c in net.copies:
            vc, vcp = eng.y[c.vertex["vc"]], eng.y[c.vertex["vc'"]]
            want = lemma2_gradients(net.gadget(c), vc, vcp, delta)
            for e, i in c.edge.items():
                assert grads.get(i, 0) == want[e]
            checked += delta != 0
        for e, g in grads.items():
            net.w[e] = net.w[e] - eng.gamma * g
    assert checked > 0


def test_output_is_exactly_2h_minus_1_and_mismatch_is_reported():
    lr = parity_learner(3)
    net = build_net(lr)
    eng = Engine(net)
    for z in net_inputs(np.eye(3, dtype=bool), None, np.ones((3, 1), bool)):
        assert eng.forward(z) in (1, -1)
    # corrupt the stored memory: the checker must stop at the first step
    c = net.memory_copies[0]
    i = c.edge[("v0", "v1")]
    net.w[i] = -net.w[i]
    xs, ys, _, r2s = _stream(lr, 20, 0)
    rep = train(net, xs, ys, None, r2s)
    assert rep.mismatch is not None and rep.mismatch.step == 1


def test_size_report_counts():
    lr = parity_learner(3)
    net = build_net(lr)
    mp = net.sec.m_prime
    gates = sum(k == "gate" for k in net.kind)
    assert sum(net.mult) == lr.n + len(lr.coin) + 1 + gates + 10 * (lr.m + mp) + 2
    assert len(net.copies) == 2 * lr.m + 1
    assert [c.mult for c in net.copies][-1] == mp - lr.m
    # Lemma 1: every gate unit has fan-in <= 2 (+ bias) and integer or read weights
    assert all(net.part[e] in ("read", "gate", "control", "v0", "gadget") for e in range(len(net.w)))


# ---------------------------------------------------------------- CLI
def _cli(run_cli, *argv):
    r = run_cli(*argv)
    return r.code, r.out, r.err


def test_cli_json_line(run_cli):
    code, out, err = _cli(run_cli, "learn", str(EXAMPLES / "majority7.circ"), "--target", "const:1", "--steps", "40",
                             "--test", "20", "--json")
    assert code == 0, err
    rep = json.loads(out.strip().splitlines()[-1])
    assert list(rep) == ["steps", "samples_used", "test_accuracy", "mismatches", "test_inputs"]
    assert rep["steps"] == 40 and rep["mismatches"] == 0 and rep["test_inputs"] == 20
    assert rep["test_accuracy"] == 1.0


def test_cli_samples_csv(run_cli, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, (30, 3))
    y = X @ np.array([1, 0, 1]) % 2
    rows = ["x0,x1,x2,y"] + [",".join(str(2 * v - 1) for v in (*x, t)) for x, t in zip(X, y)]
    csv = tmp_path / "s.csv"
    csv.write_text("\n".join(rows) + "\n")
    lr_file = tmp_path / "p3.circ"
    from tm2nn.syntax.circuit_dsl import dump_learner

    lr_file.write_text(dump_learner(parity_learner(3)))
    code, out, err = _cli(run_cli, "learn", str(lr_file), "--samples", str(csv), "--json")
    assert code == 0, err
    rep = json.loads(out.strip().splitlines()[-1])
    assert rep["steps"] == 30 and rep["mismatches"] == 0 and rep["test_inputs"] == 30


@pytest.mark.parametrize("argv, msg", [
    (["--target", "parity:101", "--steps", "5"], "secret has 3 bits"),
    (["--target", "parity:10110010"], "needs --steps"),
    (["--steps", "5"], "exactly one of"),
    (["--target", "const:1", "--samples", "x.csv", "--steps", "5"], "exactly one of"),
    (["--target", "const:1", "--steps", "0"], "--steps: expected an integer ≥ 1, got 0"),
    (["--target", "bogus", "--steps", "5"], "unknown target"),
    (["--target", "const:1", "--steps", "5", "--backend", "nope"], "invalid choice: 'nope'"),
])
def test_cli_bad_input(run_cli, argv, msg):
    code, out, err = _cli(run_cli, "learn", str(EXAMPLES / "parity8.circ"), *argv)
    assert code == 2 and msg in err and out == ""


def test_cli_info_and_compile(run_cli, tmp_path):
    code, out, err = _cli(run_cli, "info", str(EXAMPLES / "parity8.circ"), "--backend", "abbe-sandon", "--json")
    assert code == 0, err
    info = json.loads(out)["info"]
    assert info["memory bits m"] == "44" and info["gamma"].endswith("e75")
    code, out, err = _cli(run_cli, "compile", str(EXAMPLES / "parity8.circ"), "--backend", "abbe-sandon",
                             "-o", str(tmp_path / "x.onnx"))
    assert code == 2 and "tm2nn learn" in err and "--engine float64" in err  # the exact G_n is no IR net
    assert not (tmp_path / "x.onnx").exists()
    code, out, err = _cli(run_cli, "compile", str(EXAMPLES / "parity8.circ"), "--backend", "abbe-sandon",
                             "--engine", "float64", "-o", str(tmp_path / "x.onnx"))
    assert code == 0 and (tmp_path / "x.onnx").stat().st_size > 10_000, err


@pytest.mark.slow
def test_parity8_to_full_accuracy(run_cli):
    code, out, err = _cli(run_cli, "learn", str(EXAMPLES / "parity8.circ"), "--target", "parity:10110010",
                             "--steps", "60", "--test", "300", "--json")
    assert code == 0, err
    rep = json.loads(out.strip().splitlines()[-1])
    assert rep["mismatches"] == 0 and rep["test_accuracy"] == 1.0
