"""The ONNX emitter on the sequence ops (Attention, Embed, Decode) against an independent
numpy reference, and against the torch emitter.

``Ref`` below is the reference: batch-major float64, the formulas of the ops' docstrings
read directly (dense weights, full value width, no key/value cache: a decoder step
recomputes every key and value of the history), sharing no code with either emitter.
The weights and inputs are small integers, so hard-max scores are exact and ties are
real ties; ``Ref`` counts them and records the smallest nonzero score gap, so a test
can check that its cases exercise ties and are not fragile under float32.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.core.emit.test_emit import np_vector_op
from tm2nn.emit import onnx_graph
from tm2nn.emit.onnx_model import onnx_metadata, to_onnx, to_onnx_step
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.nets import (
    Affine,
    Attention,
    BinaryPositions,
    Decode,
    Embed,
    Net,
    Port,
    ReLU,
    Slice,
    Space,
    SparseMatrix,
)

ROOT = Path(__file__).resolve().parents[3]


# -- the reference ------------------------------------------------------------------------
class Ref:
    def __init__(self) -> None:
        self.ties = 0          # hard-max choices with several winners
        self.null_wins = 0     # ... where the null key is among the winners
        self.min_gap = np.inf  # smallest nonzero gap between the top score and another

    def attention(self, op: Attention, h: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """``h`` ``[B, w]``, ``mem`` ``[B, L, w_mem]``."""
        q = h @ op.wq.dense().T + op.bq
        k = mem @ op.wk.dense().T + op.bk                  # [B, L, dk]
        v = mem @ op.wv.dense().T + op.bv                  # [B, L, w]
        scores = np.concatenate([(q @ op.null_key)[:, None], np.einsum("bld,bd->bl", k, q)], axis=1)
        values = np.concatenate([np.broadcast_to(op.null_value, (h.shape[0], 1, h.shape[1])), v], axis=1)
        if op.mode == "hardmax":
            top = scores.max(axis=1, keepdims=True)
            win = scores == top
            self.ties += int((win.sum(axis=1) > 1).sum())
            self.null_wins += int(win[:, 0].sum())
            gaps = (top - scores)[~win]
            if gaps.size:
                self.min_gap = min(self.min_gap, float(gaps.min()))
            a = win / win.sum(axis=1, keepdims=True)
        else:
            z = op.beta * scores
            a = np.exp(z - z.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
        return h + np.einsum("bl,blw->bw", a, values)

    def run(self, net: Net, *arrays, history: dict | None = None) -> dict[str, np.ndarray]:
        """Every value of ``net``; ``history`` (a decoder body's) collects each attended
        source's values over the steps (``history["@seen"]``: sources appended this step)."""
        env = {p.name: np.asarray(a) for p, a in zip(net.inputs, arrays)}
        for op in net.nodes:
            xs = [env[i] for i in op.inputs]
            y = np_vector_op(op, xs)
            env[op.name] = self.sequence_op(op, xs, history) if y is None else y
        return env

    def sequence_op(self, op, xs: list[np.ndarray], history: dict | None) -> np.ndarray:
        """Attention, Embed and Decode (the ops the vector reference does not know)."""
        if isinstance(op, Attention):
            if not op.is_self:
                mem = xs[1]
            elif history is None:
                mem = xs[-1][:, None, :]
            else:
                if op.source not in history["@seen"]:
                    history.setdefault(op.source, []).append(xs[-1])
                    history["@seen"].add(op.source)
                mem = np.stack(history[op.source], axis=1)
            return self.attention(op, xs[0], mem)
        if isinstance(op, Embed):
            tok = xs[0][:, : op.max_len]
            return op.table[tok] + op.positions[: tok.shape[1]][None]
        if isinstance(op, Decode):
            return self.decode(op, xs[0])
        raise AssertionError(op)  # pragma: no cover

    def outputs(self, net: Net, *arrays, history: dict | None = None) -> list[np.ndarray]:
        env = self.run(net, *arrays, history=history)
        return [env[o] for o in net.outputs]

    def decode(self, op: Decode, mem: np.ndarray) -> np.ndarray:
        x0 = np.broadcast_to(op.init, (mem.shape[0], op.init.size)).copy()
        o, tap = self.outputs(op.prologue, x0, mem)
        taps, history = [tap], {}
        for i in range(1, op.steps + 1):
            history["@seen"] = set()
            o, tap = self.outputs(op.body, o + op.positions[i - 1], mem, history=history)
            taps.append(tap)
        return np.stack(taps, axis=1)


# -- random nets --------------------------------------------------------------------------
def sp(group: str, n: int) -> Space:
    return Space.named(group, range(n))


def rand_matrix(rng, n_out: int, n_in: int, density: float = 0.35, values=(-1.0, 1.0)) -> SparseMatrix:
    dense = rng.choice(values, (n_out, n_in)) * (rng.random((n_out, n_in)) < density)
    return SparseMatrix.from_dense(dense)


def rand_vec(rng, n: int, density: float = 0.4) -> np.ndarray:
    return rng.choice([-1.0, 1.0], n) * (rng.random(n) < density)


def rand_attention(rng, name: str, inputs, w: int, w_mem: int, dk: int = 3, mode: str = "hardmax",
                   beta: float = 1.0, value_rows=None, wq=None, history: bool = False) -> Attention:
    """A random attention; ``value_rows`` limits the rows values can change."""
    wv = rand_matrix(rng, w, w_mem, 0.5)
    bv, nv = rand_vec(rng, w), rand_vec(rng, w)
    if value_rows is not None:
        keep = np.isin(np.arange(w), value_rows)
        d = wv.dense() * keep[:, None]
        wv, bv, nv = SparseMatrix.from_dense(d), bv * keep, nv * keep
    return Attention(name, inputs, wq=rand_matrix(rng, dk, w) if wq is None else wq, bq=rand_vec(rng, dk),
                     wk=rand_matrix(rng, dk, w_mem), bk=rand_vec(rng, dk), wv=wv, bv=bv,
                     null_key=rand_vec(rng, dk), null_value=nv, mode=mode, beta=beta, history=history)


def rand_affine(rng, name: str, inputs, n_out: int, n_in: int, group: str, density: float = 0.35) -> Affine:
    return Affine(name, inputs, weight=rand_matrix(rng, n_out, n_in, density), bias=rand_vec(rng, n_out),
                  out=sp(group, n_out))


W, W_MEM, N_TOKENS, MAX_LEN = 6, 5, 4, 6
TAP = (1, 3, 4)


def decode_op(seed: int = 0, steps: int = 6, name: str = "dec", binary: bool = False) -> Decode:
    """A decoder: the prologue cross-attends; the body has two self-attentions, a
    hard-max cross-attention, a self-attention over an earlier value's history (shared
    with ``self2``), affine/ReLU layers and a softmax cross-attention that feeds only the
    tap (so the carried state stays in small integers and exact ties).  ``binary``:
    computed binary positions instead of a table."""
    rng = np.random.default_rng(seed)
    h, mem = sp("h", W), sp("m", W_MEM)
    ports = (Port("x", h), Port("mem", mem, kind="sequence"))
    prologue = Net("prologue", ports, (
        rand_attention(rng, "read", ("x", "mem"), W, W_MEM),
        rand_affine(rng, "mix", ("read",), W, W, "h"),
        Slice("tap", ("read",), indices=TAP),
    ), ("mix", "tap"))
    body = Net("body", ports, (
        rand_attention(rng, "self1", ("x",), W, W, wq=SparseMatrix.diagonal(rng.choice([-1.0, 1.0], W)),
                       dk=W),                                                   # diagonal query map
        rand_affine(rng, "up", ("self1",), 7, W, "r"),
        ReLU("up_relu", ("up",)),
        rand_attention(rng, "self2", ("up_relu",), 7, 7, dk=2, value_rows=[0, 2, 5]),  # compact values
        rand_attention(rng, "cross", ("self2", "mem"), 7, W_MEM, dk=4),
        rand_attention(rng, "hist", ("cross", "up_relu"), 7, 7, dk=3, history=True),  # up_relu's history
        rand_affine(rng, "down", ("hist",), W, 7, "h", density=0.6),            # a dense map
        rand_attention(rng, "soft", ("down", "mem"), W, W_MEM, mode="softmax", beta=0.75),
        Slice("tap", ("soft",), indices=TAP),
    ), ("down", "tap"))
    init = rng.integers(-1, 2, W).astype(float)
    positions = rng.integers(-1, 2, (steps, W)).astype(float)
    if binary:
        positions = BinaryPositions(W, (4, 0, 2, 5, 1, 3), offset=1, length=steps)  # steps < 64
    return Decode(name, ("enc",), prologue=prologue, body=body, init=init, positions=positions, steps=steps)


def decode_net(seed: int = 0, steps: int = 6, binary: bool = False) -> Net:
    rng = np.random.default_rng(seed + 1000)
    positions = rng.integers(-1, 2, (MAX_LEN, W_MEM)).astype(float)
    if binary:
        positions = BinaryPositions(W_MEM, (3, 1, 0), offset=0, length=MAX_LEN)
    embed = Embed("enc", ("tokens",), table=rng.integers(-1, 2, (N_TOKENS, W_MEM)).astype(float),
                  positions=positions, out=sp("m", W_MEM))
    return Net("decoder", (Port("tokens", sp("sym", N_TOKENS), kind="tokens"),),
               (embed, decode_op(seed, steps, binary=binary)), ("dec", "enc"))


def attention_net(seed: int = 0) -> Net:
    """Attention outside a decoder: cross (hard-max with compact values, softmax), a
    self-attention (its history is the current input only) and one with no values."""
    rng = np.random.default_rng(seed)
    h, mem = sp("h", W), sp("m", W_MEM)
    zero = SparseMatrix.from_dense(np.zeros((W, W)))
    dead = Attention("dead", ("self",), wq=rand_matrix(rng, 2, W), wk=rand_matrix(rng, 2, W), wv=zero)
    return Net("attn", (Port("h", h), Port("mem", mem, kind="sequence")), (
        rand_attention(rng, "hard", ("h", "mem"), W, W_MEM, value_rows=[1, 4]),
        rand_attention(rng, "self", ("hard",), W, W),
        dead,
        rand_affine(rng, "lin", ("dead",), W, W, "h"),
        rand_attention(rng, "soft", ("lin", "mem"), W, W_MEM, mode="softmax", beta=2.0),
    ), ("soft", "hard", "mem"))


def tokens(rng, batch: int, length: int) -> np.ndarray:
    return rng.integers(0, N_TOKENS, (batch, length))


def check(model: onnx.ModelProto) -> onnx.ModelProto:
    onnx.checker.check_model(model, full_check=True)
    return model


def assert_close(got, want, tol: float = 1e-5) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.detach().numpy() if hasattr(g, "detach") else np.asarray(g)
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max(initial=0))))


def torch_module(net: Net):
    """The torch emitter's module, or a skip while it does not know the sequence ops."""
    from tm2nn.emit import torch_emit, torch_seq

    if not hasattr(torch_seq, "DecodeModule"):
        pytest.skip("the torch emitter has no Attention/Embed/Decode support yet")
    return torch_emit.to_torch(net)


def run_torch_module(module, *arrays) -> list:
    import torch

    with torch.no_grad():
        y = module(*[torch.from_numpy(a.astype(np.float32) if a.dtype.kind == "f" else a)
                     for a in map(np.asarray, arrays)])
    return [y] if isinstance(y, torch.Tensor) else list(y)


# -- tests --------------------------------------------------------------------------------
CASES_ATTENTION = ((5, 4), (3, 1), (2, 0))
CASES_DECODE = ((6, 5), (4, MAX_LEN + 3), (3, 1), (2, 0))


def attention_inputs(rng, batch: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    return (rng.integers(-2, 3, (batch, W)).astype(float),
            rng.integers(-2, 3, (batch, length, W_MEM)).astype(float))


@pytest.mark.parametrize("seed", range(6))
def test_attention_outside_a_decoder_matches_numpy(seed):
    net = attention_net(seed)
    rng = np.random.default_rng(100 + seed)
    model = check(to_onnx(net))
    g = model.graph
    assert [(i.name, i.type.tensor_type.elem_type) for i in g.input] == [("h", 1), ("mem", 1)]
    ties = 0
    for batch, length in CASES_ATTENTION:
        h, mem = attention_inputs(rng, batch, length)
        ref = Ref()
        want = ref.outputs(net, h, mem)
        assert ref.min_gap >= 0.5  # integer scores: no near ties
        ties += ref.ties
        assert_close(run_onnx(model, h, mem), want)
    assert ties > 0


@pytest.mark.parametrize("seed", range(6))
def test_decode_matches_numpy(seed):
    net = decode_net(seed)
    model = check(to_onnx(net))
    g = model.graph
    assert [(i.name, i.type.tensor_type.elem_type) for i in g.input] == [("tokens", onnx.TensorProto.INT64)]
    dec_dims = [d.dim_param or d.dim_value for d in g.output[0].type.tensor_type.shape.dim]
    assert dec_dims == ["batch", 7, len(TAP)]
    assert sum(n.op_type == "Loop" for n in g.node) == 1
    rng = np.random.default_rng(200 + seed)
    ties = 0
    for batch, length in CASES_DECODE:
        tok = tokens(rng, batch, length)
        ref = Ref()
        want = ref.outputs(net, tok)
        assert ref.min_gap > 1e-3, "a near tie: the case is fragile under float32"
        ties += ref.ties
        assert want[0].shape == (batch, 7, len(TAP)) and want[1].shape == (batch, min(length, MAX_LEN), W_MEM)
        assert_close(run_onnx(model, tok, batch_size=4), want)
    assert ties > 0


@pytest.mark.parametrize("seed", range(3))
def test_torch_emitter_agrees(seed):
    rng = np.random.default_rng(300 + seed)
    net = attention_net(seed)
    module, model = torch_module(net), to_onnx(net)
    for batch, length in CASES_ATTENTION:
        h, mem = attention_inputs(rng, batch, length)
        want = Ref().outputs(net, h, mem)
        assert_close(run_torch_module(module, h, mem), want)
    net = decode_net(seed)
    module, model = torch_module(net), to_onnx(net)
    for batch, length in CASES_DECODE:
        tok = tokens(rng, batch, length)
        from_torch = run_torch_module(module, tok)
        assert_close(from_torch, Ref().outputs(net, tok))
        np.testing.assert_allclose(from_torch[0], run_onnx(model, tok)[0], rtol=1e-5, atol=1e-5)


def test_ties_include_the_null_and_exact_averaging():
    """A hand-made case: the null key and two memory items tie exactly."""
    h, mem = sp("h", 2), sp("m", 2)
    att = Attention("a", ("h", "mem"), wq=SparseMatrix.diagonal([1.0, 1.0]), wk=SparseMatrix.diagonal([1.0, 1.0]),
                    wv=SparseMatrix.diagonal([1.0, 1.0]), null_key=np.array([1.0, 0.0]),
                    null_value=np.array([3.0, 0.0]))
    net = Net("tie", (Port("h", h), Port("mem", mem, kind="sequence")), (att,), ("a",))
    hv = np.array([[1.0, 0.0]])
    memv = np.array([[[1.0, 5.0], [0.0, 0.0], [1.0, -7.0]]])  # scores: null 1, items 1, 0, 1
    want = hv + np.array([[(3.0 + 1.0 + 1.0) / 3, (0.0 + 5.0 - 7.0) / 3]])
    ref = Ref()
    np.testing.assert_allclose(ref.outputs(net, hv, memv)[0], want)
    assert ref.ties == 1 and ref.null_wins == 1
    np.testing.assert_allclose(run_onnx(check(to_onnx(net)), hv, memv), want, rtol=1e-6)


def test_tokens_longer_than_max_len_are_truncated():
    net = decode_net(3)
    rng = np.random.default_rng(7)
    tok = tokens(rng, 3, MAX_LEN + 4)
    model = to_onnx(net)
    dec, enc = run_onnx(model, tok)
    assert enc.shape == (3, MAX_LEN, W_MEM)
    dec_short, enc_short = run_onnx(model, tok[:, :MAX_LEN])
    np.testing.assert_array_equal(enc, enc_short)
    np.testing.assert_array_equal(dec, dec_short)
    embed = net.node("enc")
    np.testing.assert_allclose(enc, embed.table[tok[:, :MAX_LEN]] + embed.positions[None])


def test_emission_is_deterministic():
    for net in (decode_net(1), attention_net(1)):
        a = to_onnx(net).SerializeToString()
        assert a == to_onnx(net).SerializeToString()
    step = decode_net(1).node("dec")
    assert to_onnx_step(step).SerializeToString() == to_onnx_step(step).SerializeToString()


def test_emission_is_deterministic_across_processes():
    code = ("import hashlib; from tests.core.emit.test_emit_seq import decode_net; "
            "from tm2nn.emit.onnx_model import to_onnx, to_onnx_step; n = decode_net(2); "
            "print(hashlib.sha256(to_onnx(n).SerializeToString()"
            " + to_onnx_step(n.node('dec')).SerializeToString()).hexdigest())")
    digests = set()
    for seed in ("0", "1"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             check=True)
        digests.add(res.stdout.strip())
    n = decode_net(2)
    here = hashlib.sha256(to_onnx(n).SerializeToString() + to_onnx_step(n.node("dec")).SerializeToString())
    assert digests == {here.hexdigest()}


def all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attr.g)


def test_model_does_not_grow_with_steps():
    """With computed binary positions only the trip count depends on ``steps``."""
    small = check(to_onnx(decode_net(4, steps=10, binary=True)))
    big = check(to_onnx(decode_net(4, steps=60, binary=True)))
    assert [n.op_type for n in all_nodes(small.graph)] == [n.op_type for n in all_nodes(big.graph)]
    # only the trip count and the output's length (11 or 61) differ
    assert len(small.SerializeToString()) == len(big.SerializeToString())
    tok = tokens(np.random.default_rng(0), 2, 4)
    dec, _ = run_onnx(big, tok)
    assert dec.shape == (2, 61, len(TAP))
    ref = Ref()
    np.testing.assert_allclose(dec[:, :13], ref.outputs(decode_net(4, steps=12, binary=True), tok)[0],
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 2, 4])  # seeds whose cases have no float32 near ties
def test_binary_positions_match_numpy(seed):
    """Positions computed in the graph (torch: materialised) equal the table they stand for."""
    net = decode_net(seed, steps=6, binary=True)
    code = net.node("dec").positions
    assert code.shape == (6, W)
    np.testing.assert_array_equal(code[2], code.dense()[2])
    assert code[2][[4, 0, 2, 5, 1, 3]].tolist() == [0, 0, 0, 0, 1, 1]  # Bin(3), MSB first
    rng = np.random.default_rng(400 + seed)
    for batch, length in CASES_DECODE:
        tok = tokens(rng, batch, length)
        ref = Ref()
        want = ref.outputs(net, tok)
        assert ref.min_gap > 1e-3, "a near tie: the case is fragile under float32"
        assert_close(run_onnx(check(to_onnx(net)), tok), want)
        assert_close(run_torch_module(torch_module(net), tok), want)


def test_zero_steps():
    net = decode_net(5, steps=0)
    tok = tokens(np.random.default_rng(1), 3, 4)
    got = run_onnx(check(to_onnx(net)), tok)
    assert got[0].shape == (3, 1, len(TAP))
    assert_close(got, Ref().outputs(net, tok))


@pytest.mark.parametrize("binary", [False, True])
def test_step_model_reproduces_the_loop(binary):
    net = decode_net(2, steps=6, binary=binary)
    op = net.node("dec")
    hists = op.histories()
    assert list(hists) == ["x", "up_relu"]  # self1's own input; self2 and hist share up_relu
    assert hists["x"].tolist() == op.body.node("self1").memory_columns().tolist()
    both = set(op.body.node("self2").memory_columns()) | set(op.body.node("hist").memory_columns())
    assert set(hists["up_relu"].tolist()) == both
    step = check(to_onnx_step(op, metadata={"who": "test"}))
    names = ["x", "memory", "history.x", "history.up_relu"]
    assert [i.name for i in step.graph.input] == names
    assert [o.name for o in step.graph.output] == ["o", "tap"] + [f"{n}.out" for n in names[2:]]
    meta = onnx_metadata(step)
    assert meta["who"] == "test" and meta["tm2nn.decode.steps"] == "6"
    assert json.loads(meta["tm2nn.decode.histories"]) == {k: v.tolist() for k, v in hists.items()}
    assert json.loads(meta["tm2nn.decode.positions"])["kind"] == ("binary" if binary else "table")

    tok = tokens(np.random.default_rng(3), 5, 5)
    taps, mem = run_onnx(to_onnx(net), tok)
    pro = to_onnx(op.prologue)  # the prologue is a Net with ports (x, memory) too
    o, tap = run_onnx(pro, np.broadcast_to(op.init, (5, W)), mem)
    np.testing.assert_allclose(tap, taps[:, 0], rtol=1e-6)
    cache = [np.zeros((5, c.size, 0), np.float32) for c in hists.values()]
    for i in range(1, op.steps + 1):
        o, tap, *cache = run_onnx(step, o + op.positions[i - 1], mem, *cache)
        assert [c.shape for c in cache] == [(5, h.size, i) for h in hists.values()]
        np.testing.assert_allclose(tap, taps[:, i], rtol=1e-5, atol=1e-5)


def test_structure_and_names():
    net = decode_net(0)
    model = to_onnx(net)
    g = model.graph
    inits = {t.name for t in g.initializer}
    assert {"enc.table", "enc.positions", "dec.init", "dec.positions", "dec.steps",
            "dec/prologue/read.wk", "dec/body/self2.rows", "dec/body/self1.wq",
            "dec/body/soft.beta", "dec/body/down.weight"} <= inits
    assert "dec/body/self1.rows" not in inits  # self1's values reach every row: a plain Add
    names = [n.name for n in all_nodes(g)]
    assert len(names) == len(set(names))
    assert {"dec", "enc/lookup", "enc/feature_major", "enc/transpose", "dec/transpose", "dec/prologue/read/weights",
            "dec/body/self1/history", "dec/body/self1/residual", "dec/body/self2/history", "dec/body/self2/scatter",
            "dec/body/cross/k.einsum", "dec/body/soft/weights", "dec/body/down/matmul", "dec/concat"} <= set(names)
    loop = next(n for n in g.node if n.op_type == "Loop")
    assert loop.name == "dec"
    body = loop.attribute[0].g
    # carried: o and one history per attended source (x; up_relu, shared); then the taps
    assert len(body.input) == 2 + 1 + 2 and len(body.output) == 1 + 1 + 2 + 1
    assert not any(n.name.startswith("dec/body/hist/history") for n in body.node)  # reuses self2's
    # the cross-attentions' keys/values over the memory are computed outside the loop
    assert not any(n.name.startswith(("dec/body/cross/k.", "dec/body/soft/v.")) for n in body.node)
    assert any(n.name.startswith("dec/body/cross/k.") for n in g.node)
    # the compact value map of self2 (rows 0, 2, 5 of 7) is scattered back
    assert any(n.op_type == "ScatterND" and n.name.startswith("dec/body/self2/") for n in body.node)


@pytest.mark.parametrize("opset", [13, 17])
def test_older_opsets(opset):
    net = decode_net(1)
    tok = tokens(np.random.default_rng(4), 3, 4)
    assert_close(run_onnx(check(to_onnx(net, opset=opset)), tok), Ref().outputs(net, tok))


def test_weight_bytes_counts_the_sequence_ops():
    net = decode_net(0)
    est = onnx_graph.weight_bytes(net)
    model = to_onnx(net)
    actual = sum(len(t.raw_data) for t in model.graph.initializer)
    assert actual <= est <= 4 * actual
    assert onnx_graph.weight_bytes(attention_net(0)) > 0


def test_wide_sparse_attention_uses_gathers():
    """Weights too big for the small-matrix matmul take the ELL gather form, on a vector
    (the query) and on a sequence (``Gather`` axis 1 for the memory's keys and values)."""
    rng = np.random.default_rng(9)
    w, w_mem, dk = 220, 200, 180
    att = Attention("a", ("h", "mem"), wq=rand_matrix(rng, dk, w, 2 / w), bq=rand_vec(rng, dk),
                    wk=rand_matrix(rng, dk, w_mem, 2 / w_mem), wv=rand_matrix(rng, w, w_mem, 1 / w_mem),
                    null_key=rand_vec(rng, dk), null_value=rand_vec(rng, w))
    net = Net("wide", (Port("h", sp("h", w)), Port("mem", sp("m", w_mem), kind="sequence")), (att,), ("a",))
    model = check(to_onnx(net))
    gathers = {n.name for n in model.graph.node if n.op_type == "Gather"}
    assert {"a/q.gather.0", "a/k.gather.0", "a/v.gather.0"} <= gathers
    assert next(n for n in model.graph.node if n.name == "a/k.gather.0").attribute[0].i == 1
    for length in (7, 0):
        h = rng.integers(-2, 3, (4, w)).astype(float)
        mem = rng.integers(-2, 3, (4, length, w_mem)).astype(float)
        ref = Ref()
        want = ref.outputs(net, h, mem)
        assert ref.min_gap >= 0.5
        assert_close([run_onnx(model, h, mem)], want)
