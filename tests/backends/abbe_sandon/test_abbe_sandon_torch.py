"""The float64 engine (Abbe & Sandon §4.1's G_n with the dyadic re-parametrisation, as a
network-IR net trained by torch.optim.SGD) and its exports; the sparse trainable affine
of the shared emitters."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tm2nn.backends.abbe_sandon.backend import model
from tm2nn.backends.abbe_sandon.ir_net import build_ir_net
from tm2nn.backends.abbe_sandon.net import build_net
from tm2nn.backends.abbe_sandon.train import held_out_inputs, prepare_stream
from tm2nn.backends.abbe_sandon.train import train as train_exact
from tm2nn.backends.abbe_sandon.train_torch import TorchEngine, train
from tm2nn.emit.onnx_model import onnx_metadata, to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.emit.torch_emit import to_torch
from tm2nn.handle import Compiled
from tm2nn.interp.learner import run_learner
from tm2nn.learners.examples import parity_learner
from tm2nn.learners.targets import parity_target, samples
from tm2nn.nets import Affine, Net, Param, Port, SparseMatrix
from tm2nn.nets.space import Space

from ...conftest import EXAMPLES
from .test_abbe_sandon_net import _stream, learners


def export(eng: TorchEngine, path, steps: int):
    """The engine's net with its current weights, saved as any model (Compiled.save)."""
    return Compiled.of(model(eng.ir, eng.module.to_net(), steps, eng.memory())).save(path)


def _onnx1(model, Z) -> np.ndarray:
    """The net's single output (one value per row) from onnxruntime."""
    return np.asarray(run_onnx(model, Z)).reshape(len(Z))


ALL4 = np.array([[(i >> j) & 1 for j in range(4)] for i in range(16)], bool)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(learners(), st.integers(0, 2**31 - 1))
def test_random_learners_emulated_exactly_in_float64(lr, seed):
    """200 torch.optim.SGD steps: output, decoded memory = the learner's at every step,
    every M_s weight ± its initial value bitwise, no buffer changed (checked in train)."""
    ir = build_ir_net(lr)
    eng = TorchEngine(ir)
    assert eng.memory() == list(lr.init)
    xs, ys, rs, r2s = _stream(lr, 200, seed)
    rep = train(ir, xs, ys, rs, r2s, engine=eng)
    assert rep.mismatch is None, rep.mismatch
    assert rep.steps == 200
    ref = run_learner(lr, xs, ys, rs if lr.random else None, r2s[:, 0] if lr.coin else None)
    assert rep.outputs == [int(v) for v in ref.outputs]
    assert eng.memory() == [int(v) for v in ref.final]


@pytest.fixture(scope="module")
def parity4_trained():
    lr = parity_learner(4)
    tgt = parity_target("1101")
    S = samples(tgt, 40, seed=5)
    ir = build_ir_net(lr)
    eng = TorchEngine(ir)
    before = {k: v.clone() for k, v in eng.module.state_dict().items()}
    before_net = eng.module.to_net()
    rep = train(ir, S.xs, S.ys, None, S.r2s, engine=eng)
    return lr, tgt, S, ir, eng, rep, before, before_net


def test_parity4_learns_everything(parity4_trained):
    lr, tgt, S, ir, eng, rep, _, _ = parity4_trained
    assert rep.mismatch is None, rep.mismatch
    assert ir.dyadic.k == 1 and ir.dyadic.m_prime == 32 and ir.gamma == 4.0
    for coin in (0, 1):
        Z = held_out_inputs(lr, ALL4, None, np.full(16, coin, bool))
        assert eng.predict_rows(Z) == [int(v) for v in tgt(ALL4)]
    assert 0 < rep.samples_used <= 40


def test_float64_and_exact_engines_agree(parity4_trained):
    lr, _, S, ir, eng, rep, _, _ = parity4_trained
    net = build_net(lr)
    rep_x = train_exact(net, S.xs, S.ys, None, S.r2s)
    assert rep_x.mismatch is None
    assert rep.outputs == rep_x.outputs and rep.memory_changes == rep_x.memory_changes
    assert eng.memory() == net.memory_bits()


def test_only_gadget_weights_change_and_flips_are_exact(parity4_trained):
    """Every edge of G_n is a trainable parameter and SGD was given all of them; after 40
    steps every M_s weight is bitwise ± its initial value and every other weight (the
    frozen-by-construction gates, reads, controls, v0, biases; the fixed carries) is
    bitwise unchanged, with a gradient of exactly 0."""
    _, _, _, ir, eng, rep, before, _ = parity4_trained
    module = eng.module
    after = module.state_dict()
    params = {n for n, p in module.named_parameters() if p.requires_grad}
    gadget = {n for n in params if n.endswith(".weight") and "_train" in n}
    assert gadget and params - gadget  # G_n's other edges are trainable too
    given = {id(p) for g in eng.opt.param_groups for p in g["params"]}
    assert given == {id(p) for p in module.parameters()}  # plain SGD over ALL parameters
    def bits(t):
        return t.reshape(-1).view(torch.int64)

    for k, v in after.items():
        if k in gadget:
            assert torch.equal(bits(v.abs()), bits(before[k].abs())), k  # ± initial, bitwise
        else:
            assert torch.equal(bits(v), bits(before[k])), k  # bitwise
    for n, p in module.named_parameters():
        if n in params and n not in gadget:  # trainable, reached by autograd, gradient exactly 0
            assert p.grad is not None and not torch.any(p.grad), n
    w = eng.weights()
    for e in range(len(ir.src)):
        if e not in ir.gadget:
            assert w[e] == ir.w[e]
        else:
            assert abs(w[e]) == abs(ir.w[e])
    assert any(w[e] != ir.w[e] for e in ir.gadget)  # something did flip
    # every edge of G_n has exactly one trainable entry; the extra ones are the 0 bias
    # entries of units without a constant edge (ir_net's named departure)
    ops = set(ir.trainable_ops()) | set(ir.frozen_ops())
    assert all(ir.slot[e][0] in ops for e in range(len(ir.src)))
    assert len(set(ir.slot)) == len(ir.src)
    n_params = sum(p.numel() for p in module.parameters() if p.requires_grad)
    no_bias = sum(int(np.sum(ir.net.node(n).bias == 0)) for n in ir.frozen_ops() if n.endswith(".gates"))
    assert n_params == len(ir.src) + no_bias
    assert sum(p.numel() for n, p in module.named_parameters() if n in gadget) == len(ir.gadget)


def _sgd_all(ir, eng, S, steps):
    """Plain torch.optim.SGD over every parameter of the module, no checks (Theorem 4's
    samples z = (2x - 1, 2r' - 1), loss (y - label)^2, lr = gamma)."""
    lr = ir.learner
    _, Z, ys = prepare_stream(lr, S.xs[:steps], S.ys[:steps], None, S.r2s[:steps])
    opt = torch.optim.SGD(eng.module.parameters(), lr=ir.gamma)
    for z, y in zip(Z, ys):
        opt.zero_grad()
        out = eng.module(torch.as_tensor(np.asarray(z, dtype=np.float64)[None, :]))
        ((out[0, 0] - (1.0 if y else -1.0)) ** 2).backward()
        opt.step()


def _scale_in_edges(ir, v, f):
    """Multiply every in-edge (bias included) of vertex v by f, in the IR net (before any
    engine is built from it)."""
    for e in range(len(ir.src)):
        if ir.dst[e] != v:
            continue
        op, tensor, j = ir.slot[e]
        node = ir.net.node(op)
        (node.weight.vals if tensor == "weight" else getattr(node, tensor))[j] *= f
        ir.w[e] *= f


def test_lemma1_freezes_the_gates_and_a_linear_gate_moves():
    """Lemma 1's "SGD leaves the gates alone" under plain SGD over all parameters: bitwise
    unchanged.  Mutation: the gate feeding vc of the always-active extraneous copies (NOT h),
    moved into fpl's linear zone (its in-edge halved: |z| = 1, fpl' = 1), outputs ±1 instead of
    ±2, which puts vc or the gates it feeds in their linear zones too; on a wrong step the
    gradient flows from the gadgets back through the controls into that gate, and its in-edge,
    the controls' in-edges and others move (``changed_buffers``, the engine's per-step weight
    check, names each edge)."""
    lr = parity_learner(4)
    S = samples(parity_target("1101"), 12, seed=5)
    ir = build_ir_net(lr)
    eng = TorchEngine(ir)
    _sgd_all(ir, eng, S, 12)
    assert eng.changed_buffers() == []
    # the mutation
    ir = build_ir_net(lr)
    vc = ir.names.index(f"ext[{ir.dyadic.m_prime}].vc")
    (gate,) = [ir.src[e] for e in range(len(ir.src)) if ir.dst[e] == vc and ir.kind[ir.src[e]] == "gate"]
    _scale_in_edges(ir, gate, 0.5)
    eng = TorchEngine(ir)
    assert eng.weights() == ir.w  # the engine starts from the mutated net
    _sgd_all(ir, eng, S, 12)
    bad = eng.changed_buffers()
    assert any(f"-> {ir.names[gate]}: " in b for b in bad), bad[:5]  # the gate's in-edge moved
    assert any(".vc" in b.split(": ")[0] for b in bad), bad[:5]  # and edges into control vertices
    # the engine's own per-step checks stop at step 1: the output already leaves ±1
    ir = build_ir_net(lr)
    _scale_in_edges(ir, gate, 0.5)
    rep = train(ir, S.xs, S.ys, None, S.r2s)
    assert rep.mismatch is not None and rep.mismatch.step == 1


def test_onnx_export_before_and_after_matches_torch(parity4_trained, tmp_path):
    lr, tgt, _, ir, eng, rep, before, before_net = parity4_trained
    Z = np.concatenate([held_out_inputs(lr, ALL4, None, np.full(16, c, bool)) for c in (0, 1)]).astype(np.float64)
    fresh = TorchEngine(build_ir_net(lr))
    for module_eng, net in ((fresh, before_net), (eng, None)):
        path = export(module_eng, tmp_path / "m.onnx", rep.steps)
        meta = onnx_metadata(path)
        assert meta["tm2nn.abbe_sandon.engine"] == "float64" and meta["tm2nn.abbe_sandon.gamma"] == "4.0"
        got = _onnx1(path.read_bytes(), Z)
        with torch.no_grad():
            want = module_eng.module(torch.from_numpy(Z)).numpy()[:, 0]
        assert set(np.unique(got)) <= {-1.0, 1.0}
        assert np.array_equal(got, want)
        if net is not None:  # the "before" net written from the IR equals the fresh module's
            assert np.array_equal(_onnx1(to_onnx(net), Z), got)
    assert np.array_equal((got > 0), np.concatenate([tgt(ALL4)] * 2))


def test_state_dict_and_pt_round_trip(parity4_trained, tmp_path):
    lr, _, _, ir, eng, rep, _, _ = parity4_trained
    other = TorchEngine(build_ir_net(lr))
    other.module.load_state_dict(eng.module.state_dict())
    assert other.memory() == eng.memory()
    Z = held_out_inputs(lr, ALL4, None, np.ones(16, bool))
    assert other.predict_rows(Z) == eng.predict_rows(Z)
    path = export(eng, tmp_path / "m.pt", rep.steps)
    saved = torch.load(path, weights_only=True)  # a state dict and metadata, no pickled module
    assert set(saved) == {"state_dict", "metadata"}
    assert json.loads(saved["metadata"]["tm2nn.options"])["memory"] == "".join(map(str, eng.memory()))
    x = torch.from_numpy(Z.astype(np.float64))
    from tm2nn import load_model

    loaded = load_model(path).torch()
    with torch.no_grad():
        assert torch.equal(loaded(x), eng.module(x))
    for k, v in saved["state_dict"].items():
        assert torch.equal(v, eng.module.state_dict()[k])


def test_ir_net_labels_and_layers():
    lr = parity_learner(3)
    ir = build_ir_net(lr)
    net = ir.net
    assert net.inputs[0].space.labels == tuple(f"in:{p}" for p in lr.net_inputs)
    assert net.spaces[net.outputs[0]].labels == ("out",)
    for op in net.nodes:
        if isinstance(op, Affine):
            role = op.name.split(".")[-1]
            assert op.trainable == (role in ("train", "gates")) and role in ("train", "gates", "carry")
            labels = set(op.out.labels)
            assert all(lab in ir.names for lab in labels)
            if role == "train":
                assert not op.train_bias and not np.any(op.bias)
            if role == "gates":  # every unit reads some vertex: no trainable absent edge
                assert op.train_bias and np.all(np.bincount(op.weight.rows, minlength=len(op.out)) > 0)
            if role == "carry":
                assert np.array_equal(op.weight.vals, np.ones(op.weight.nnz)) and not np.any(op.bias)
        elif isinstance(op, Param):
            assert op.name.endswith(".const") and set(np.abs(op.value)) == {2.0}  # v0, CONST0/1
    # a trainable op storing every entry is dense (out reads exactly the v5, v5' of the layer
    # before): the engine's index maps handle both forms
    from tm2nn.emit import affine_form

    forms = [affine_form(op) for op in net.nodes if isinstance(op, Affine) and op.name.endswith(".train")]
    assert forms[-1] == "dense" and "scatter" in forms
    eng = TorchEngine(ir)
    assert eng.weights() == ir.w
    info = dict((q.strip(), v) for q, v, _ in ir.size_report())
    assert info["m'"] == "32" and info["gamma"].startswith("4 ")


# ---------------------------------------------------------------- the shared emitters
def _sparse_net(trainable=True, train_bias=False):
    w = SparseMatrix.from_entries((3, 4), [(0, 0, 0.5), (0, 3, -1.0), (2, 1, 2.0)])
    op = Affine("a", ("x",), weight=w, bias=np.array([0.0, 1.0, -0.5]), out=Space.named("y", range(3)),
                trainable=trainable, train_bias=train_bias)
    return Net("sp", (Port("x", Space.named("x", range(4))),), (op,), ("a",))


def test_sparse_trainable_affine_trains_only_its_edges():
    net = _sparse_net()
    m = to_torch(net, torch.float64)
    assert m.a.form == "scatter"
    assert [n for n, p in m.named_parameters() if p.requires_grad] == ["a.weight"]
    assert m.a.weight.shape == (3,)
    assert set(m.state_dict()) == {"a.weight", "a.bias"}  # the frozen bias holds its nonzeros
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0.0, 2.0]], dtype=torch.float64)
    m(x).sum().backward()
    # d sum / d w_e = sum_batch x[:, col_e] for the 3 existing edges only
    assert m.a.weight.grad.tolist() == [0.0, 6.0, 2.5]  # entries (0,0), (0,3), (2,1)
    opt.step()
    dense = m.to_net().nodes[0].weight.dense()
    want = net.nodes[0].weight.dense()
    assert (dense != 0).tolist() == (want != 0).tolist()  # absent edges stay absent
    assert torch.equal(m.a.dense_bias(), torch.tensor([0.0, 1.0, -0.5], dtype=torch.float64))
    # the written-back net runs in ONNX like the trained module
    got = run_onnx(to_onnx(m.to_net()), x.numpy())
    np.testing.assert_allclose(got, m(x).detach().numpy(), rtol=1e-6)
    # with a trainable bias, the bias is a parameter too
    m2 = to_torch(_sparse_net(train_bias=True), torch.float64)
    assert {n for n, p in m2.named_parameters() if p.requires_grad} == {"a.weight", "a.bias"}


# ---------------------------------------------------------------- CLI
def test_cli_float64_learn_with_exports(run_cli, tmp_path):
    b, a = tmp_path / "before.onnx", tmp_path / "after.pt"
    r = run_cli("learn", str(EXAMPLES / "majority7.circ"), "--target", "const:1", "--steps", "20", "--test", "10",
                "--engine", "float64", "--export-before", str(b), "--export-after", str(a), "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out.strip().splitlines()[-1])
    assert rep["mismatches"] == 0 and rep["test_accuracy"] == 1.0
    assert b.is_file() and a.is_file()
    assert json.loads(onnx_metadata(b)["tm2nn.options"])["steps"] == 0
    assert json.loads(torch.load(a, weights_only=True)["metadata"]["tm2nn.options"])["steps"] == 20
    r = run_cli("info", str(a))
    assert r.code == 0 and "gamma" in r.out
    for x in ("00", "10"):  # x, then the coin r': trained on const:1, the net answers 1
        r = run_cli("eval", str(a), "--input", x, "--json")
        assert r.code == 0 and json.loads(r.out) == {"outputs": "1"}, r.err
    r = run_cli("eval", str(b), "--input", "10", "--json")  # untrained: the learning phase outputs r'
    assert r.code == 0 and json.loads(r.out) == {"outputs": "0"}
    r = run_cli("eval", str(b), "--input", "1")
    assert r.code == 2 and "2 inputs" in r.err
    r = run_cli("learn", str(EXAMPLES / "majority7.circ"), "--target", "const:1", "--steps", "5",
                "--export-after", str(a))
    assert r.code != 0 and "--engine float64" in r.err
