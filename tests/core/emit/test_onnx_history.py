"""The ONNX decode loop's self-attention over histories (tm2nn/emit/onnx_seq.py,
``history_attention``; issue 19): its taps equal the torch module's at every
step (example machines, random machines, hand-built nets whose null key ties with the
items), the graph has the structure the module docstring describes (each history part
carried from ``[B, c_p, 0]`` and appended once per step, read directly by every op; the
key part without value-only columns; ties counted only inside an ``If``), and breaking
the history write or the tie count makes these tests fail."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends.transformer.test_transformer import LINE_EXAMPLES, compile_tf, tapes
from tests.conftest import EXAMPLES
from tests.core.emit.test_emit_seq import Ref
from tests.core.emit.test_onnx_clean import _graphs
from tests.strategies import machines
from tm2nn.backends.transformer.runtime import encode_tokens, torch_runner
from tm2nn.emit import onnx_seq
from tm2nn.emit.onnx_model import to_onnx, to_onnx_step
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.emit.onnx_seq import _history_parts
from tm2nn.nets import Attention, Decode, Embed, Net, Port, Slice, Space, SparseMatrix
from tm2nn.syntax import load

TOL = 1e-5  # float32 sums in another order; the taps themselves are 0/1


def decode_op(net: Net) -> Decode:
    return next(op for op in net.nodes if isinstance(op, Decode))


def onnx_taps(net: Net, tok: np.ndarray) -> np.ndarray:
    out = run_onnx(to_onnx(net), tok)
    return out[0] if isinstance(out, tuple) else out


def assert_taps_agree(c, inputs: list[str]) -> None:
    """ONNX taps = torch taps at every step, and both decode to the interpreter's run."""
    tok = encode_tokens(c.input_encoding, inputs)
    want = torch_runner(c.net)(tok)
    got = onnx_taps(c.net, tok)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


@pytest.mark.parametrize("path", LINE_EXAMPLES, ids=lambda p: p.stem)
def test_taps_equal_torch_on_every_example(path):
    m = load(path)
    c = compile_tf(m, steps=40)
    assert len(_history_parts(decode_op(c.net))) == 1  # the shared search history
    assert_taps_agree(c, tapes(m, 4))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=machines(grid=False, max_states=3, max_symbols=3), seed=st.integers(0, 2**16),
       literal=st.booleans())
def test_taps_equal_torch_on_random_machines(m, seed, literal):
    """Also with one history per layer (``shared_history=False``: histories too small to split)."""
    c = compile_tf(m, steps=13, shared_history=not literal)
    assert_taps_agree(c, tapes(m, 5, seed, max_len=5))


# -- a hand-built decoder whose null key ties with the items -------------------------------
W, M = 4, 5  # x's width; the memory: 4 token coordinates and a position-0 marker


def sp(group: str, n: int) -> Space:
    return Space.named(group, range(n))


def tiny_net(seed: int, steps: int = 8) -> Net:
    """Tokens -> Embed -> Decode.  The prologue reads the first token (a unique winner:
    the marker), so batch rows differ; the body carries ``o = x``, so every ``x_i`` is a
    small-integer vector and every score an exact integer.  Body: ``a``, a hard-max
    self-attention without values (``bv`` and a null value: only the shares matter, the
    ``If`` path), then ``b``, one with values over ``x``'s history; the tap is ``b``.  No key
    reads ``x``'s last coordinate and ``b``'s values do: a history that splits."""
    rng = np.random.default_rng(seed)
    h, mem = sp("h", W), sp("m", M)
    ports = (Port("x", h), Port("mem", mem, kind="sequence"))
    read = Attention("read", ("x", "mem"), wq=SparseMatrix.from_dense(np.zeros((1, W))), bq=np.array([1.0]),
                     wk=SparseMatrix.from_dense(np.eye(1, M, M - 1)), bk=np.zeros(1),
                     wv=SparseMatrix.from_dense(np.hstack([np.eye(W), np.zeros((W, 1))])), bv=np.zeros(W),
                     null_key=np.array([-1.0]), null_value=np.zeros(W))
    prologue = Net("prologue", ports, (read, Slice("tap", ("read",), indices=tuple(range(W)))), ("read", "tap"))

    def mat(n: int, k: int, last: bool = True) -> SparseMatrix:  # last: may read x's last coordinate
        d = rng.choice([-1.0, 1.0], (n, k)) * (rng.random((n, k)) < 0.5)
        d[:, -1] = d[:, -1] if last else 0.0
        if last:
            d[0, -1] = 1.0
        return SparseMatrix.from_dense(d)

    def vec(n: int) -> np.ndarray:
        return rng.integers(-1, 2, n).astype(float)

    a = Attention("a", ("x",), wq=mat(2, W), bq=vec(2), wk=mat(2, W, last=False), bk=vec(2),
                  wv=SparseMatrix.from_dense(np.zeros((W, W))), bv=np.array([0, 0, 0, 1.0]),
                  null_key=vec(2), null_value=np.array([0, 0, 1.0, 0]))
    b = Attention("b", ("a", "x"), history=True, wq=mat(2, W), bq=vec(2), wk=mat(2, W, last=False), bk=np.zeros(2),
                  wv=mat(W, W), bv=np.zeros(W), null_key=vec(2), null_value=np.array([1.0, 0, 0, 0]))
    body = Net("body", ports, (a, b, Slice("o", ("x",), indices=tuple(range(W))),
                               Slice("tap", ("b",), indices=tuple(range(W)))), ("o", "tap"))
    dec = Decode("dec", ("enc",), prologue=prologue, body=body, init=np.zeros(W),
                 positions=rng.integers(-1, 2, (steps, W)).astype(float), steps=steps)
    table = np.hstack([rng.integers(-2, 3, (3, W)).astype(float), np.zeros((3, 1))])
    positions = np.zeros((6, M))
    positions[0, -1] = 1.0
    enc = Embed("enc", ("tokens",), table=table, positions=positions, out=mem)
    return Net("tiny", (Port("tokens", sp("sym", 3), kind="tokens"),), (enc, dec), ("dec",))


class TieCount(Ref):
    """The reference, counting per self-attention op the batch rows and steps where the
    null key ties with the best items (``null_item``) and where it does not (``clear``)."""

    def __init__(self) -> None:
        super().__init__()
        self.null_item: dict[str, int] = {}
        self.clear: dict[str, int] = {}

    def attention(self, op: Attention, h: np.ndarray, mem: np.ndarray) -> np.ndarray:
        if op.is_self:
            q = h @ op.wq.dense().T + op.bq
            k = mem @ op.wk.dense().T + op.bk
            s = np.concatenate([(q @ op.null_key)[:, None], np.einsum("bld,bd->bl", k, q)], axis=1)
            win = s == s.max(axis=1, keepdims=True)
            tie = win[:, 0] & win[:, 1:].any(axis=1)
            self.null_item[op.name] = self.null_item.get(op.name, 0) + int(tie.sum())
            self.clear[op.name] = self.clear.get(op.name, 0) + int((~tie).sum())
        return super().attention(op, h, mem)


SEEDS = range(8)
TOKENS = np.array([[0, 1, 2], [1, 1, 0], [2, 0, 1], [0, 2, 2], [1, 0, 0], [2, 2, 1]])


def check_tiny(seed: int) -> TieCount:
    """ONNX (and torch) = the reference on a tiny net; returns the reference's counts."""
    from tests.core.emit.test_emit_seq import run_torch_module, torch_module

    net = tiny_net(seed)
    ref = TieCount()
    want = ref.outputs(net, TOKENS)[0]
    assert ref.min_gap >= 0.5  # integer scores: real ties, no near ones
    np.testing.assert_allclose(onnx_taps(net, TOKENS), want, rtol=0, atol=TOL)
    np.testing.assert_allclose(run_torch_module(torch_module(net), TOKENS)[0], want, rtol=0, atol=TOL)
    return ref


@pytest.mark.parametrize("split", [False, True], ids=["one part", "split"])
def test_null_ties_with_items_are_averaged_exactly(split, monkeypatch):
    """The items' share where the null ties with them (``If`` counts the ties), and where
    it does not (the share is ``live``), in the same batch; with the history in one part
    and split into key and value parts."""
    if split:
        monkeypatch.setattr(onnx_seq, "SPLIT_MIN_READS", 0)
    assert [len(p) for p in _history_parts(decode_op(tiny_net(0))).values()] == ([2] if split else [1])
    tied = clear = 0
    for seed in SEEDS:
        ref = check_tiny(seed)
        tied, clear = tied + ref.null_item["a"], clear + ref.clear["a"]
    assert tied >= 20 and clear >= 20  # both branches of the If, often


@pytest.mark.parametrize(("opset", "dtype"), [(13, "float32"), (17, "float64")])
def test_null_ties_in_older_opsets_and_float64(opset, dtype):
    """The ``If`` and the reductions in their opset-13 forms (axes as attributes), and every
    constant, cast and branch output in the model's float type."""
    for seed in SEEDS:
        net = tiny_net(seed)
        model = to_onnx(net, opset=opset, dtype=dtype)
        onnx.checker.check_model(model, full_check=True)
        got = run_onnx(model, TOKENS)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, Ref().outputs(net, TOKENS)[0], rtol=0, atol=TOL)


# -- the graph -----------------------------------------------------------------------------
def loop_body(model: onnx.ModelProto) -> tuple[onnx.NodeProto, onnx.GraphProto]:
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    return loop, next(a.g for a in loop.attribute if a.name == "body")


def test_histories_are_carried_and_appended_once_per_step():
    """binary_counter: the search history is carried in two parts (the keys' columns and
    the written symbol's), each from ``ConstantOfShape`` ``[B, c_p, 0]``, extended by one
    ``Concat`` per step, and read by the ops' ``MatMul`` nodes directly (no per-op copy)."""
    m = load(EXAMPLES / "binary_counter.tm")
    c = compile_tf(m, steps=50)
    dec = decode_op(c.net)
    ((src, parts),) = _history_parts(dec).items()
    assert [len(p) for p in parts] == [2 * c.options["w_pos"], len(m.alphabet)]  # pos1, pos2 | sym2
    model = to_onnx(c.net)
    loop, body = loop_body(model)
    made = {o: n for n in model.graph.node for o in n.output}
    carried = loop.input[3:]  # trip count, condition, o, then the history parts
    assert len(carried) == 2 and len(body.input) == 3 + 2
    for v, cols in zip(carried, parts):
        assert made[v].op_type == "ConstantOfShape"
        shape = made[made[v].input[0]]  # Concat(batch, [c_p, 0])
        const = next(t for t in model.graph.initializer if t.name == shape.input[1])
        assert onnx.numpy_helper.to_array(const).tolist() == [len(cols), 0]
    appends = [n for n in body.node if n.op_type == "Concat" and "history" in n.name]
    assert [n.name for n in appends] == ["trace/body/S.c4/history", "trace/body/S.c4/history.v"]
    assert [n.input[0] for n in appends] == [i.name for i in body.input[3:]]
    new = [n.output[0] for n in appends]
    assert list(new) == [o.name for o in body.output[2:4]]  # carried to the next step as they are
    readers = {v: [n for n in body.node if v in n.input] for v in new}
    key_reads, value_reads = readers[new[0]], readers[new[1]]
    assert all(n.op_type == "MatMul" for n in key_reads + value_reads)
    n_layers = c.options["w_pos"] + 2  # Claims C.4, C.5 x w_pos, C.6
    assert sorted(n.name.split("/")[2] for n in key_reads) == sorted(
        a.name for a in dec.body.nodes if isinstance(a, Attention) and a.is_self)
    assert len(key_reads) == n_layers and all(n.name.endswith("/scores") for n in key_reads)
    assert [n.name for n in value_reads] == ["trace/body/S.c6/mix.v"]  # C.6 reads the written symbol


def test_ties_are_counted_only_inside_an_if():
    """In the loop body, the O(n) tie count (``Equal`` over the scores) runs outside an
    ``If`` only for the op whose values read the history (Claim C.6); every other
    hard-max self-attention counts inside its ``If``'s then-branch."""
    c = compile_tf(load(EXAMPLES / "bb4.tm"), steps=20)
    _, body = loop_body(to_onnx(c.net))
    selfs = [a for a in decode_op(c.net).body.nodes if isinstance(a, Attention) and a.is_self]
    names = {a.name for a in selfs}
    outside = sorted(n.name for n in body.node if n.op_type == "Equal" and n.name.split("/")[2] in names)
    assert outside == ["trace/body/S.c6/argmax"]
    ifs = {n.name: n for n in body.node if n.op_type == "If"}
    assert sorted(ifs) == sorted(f"trace/body/{a.name}/n_items" for a in selfs if a.name != "S.c6")
    for node in ifs.values():
        then = next(a.g for a in node.attribute if a.name == "then_branch")
        other = next(a.g for a in node.attribute if a.name == "else_branch")
        assert [n.op_type for n in then.node] == ["Equal", "Cast", "ReduceSum", "Mul"]
        assert [n.op_type for n in other.node] == ["Identity"]


def test_emission_is_deterministic_and_clean():
    c = compile_tf(load(EXAMPLES / "binary_counter.tm"), steps=30)
    a, b = to_onnx(c.net), to_onnx(c.net)
    assert a.SerializeToString() == b.SerializeToString()
    onnx.checker.check_model(a, full_check=True)
    names = [n.name for g in _graphs(a.graph) for n in g.node]
    assert len(names) == len(set(names))


def test_step_model_drives_the_same_decode():
    """``to_onnx_step`` keeps its interface (one history input per source, every column in
    ``tm2nn.decode.histories`` order, unsplit) and reproduces the loop's taps."""
    m = load(EXAMPLES / "binary_counter.tm")
    c = compile_tf(m, steps=6)
    dec = decode_op(c.net)
    hists = dec.histories()
    step = to_onnx_step(dec)
    assert [i.name for i in step.graph.input] == ["x", "memory"] + [f"history.{s}" for s in hists]
    tok = encode_tokens(c.input_encoding, ["0110", "1"])
    taps = onnx_taps(c.net, tok)
    enc = next(op for op in c.net.nodes if isinstance(op, Embed))
    mem = run_onnx(to_onnx(Net("enc", c.net.inputs, (enc,), (enc.name,))), tok)
    o, tap = run_onnx(to_onnx(dec.prologue), np.broadcast_to(dec.init, (2, dec.init.size)), mem)
    np.testing.assert_allclose(tap, taps[:, 0], atol=TOL)
    cache = [np.zeros((2, cols.size, 0), np.float32) for cols in hists.values()]
    for i in range(1, dec.steps + 1):
        o, tap, *cache = run_onnx(step, o + dec.positions[i - 1], mem, *cache)
        np.testing.assert_allclose(tap, taps[:, i], atol=TOL)
    assert [h.shape for h in cache] == [(2, cols.size, dec.steps) for cols in hists.values()]


# -- mutations: what the tests above catch --------------------------------------------------
def test_a_broken_history_write_is_caught(monkeypatch):
    """Gather the appended columns in the wrong order (the readers' weights expect the
    parts' order): the taps no longer match."""
    original = onnx_seq.append_history

    def shuffled(self, source, parts, *args, **kw):
        return original(self, source, [p[::-1] for p in parts], *args, **kw)

    c = compile_tf(load(EXAMPLES / "bb4.tm"), steps=40)
    assert_taps_agree(c, ["", "1"])
    monkeypatch.setattr(onnx_seq, "append_history", shuffled)
    with pytest.raises(AssertionError):
        assert_taps_agree(c, ["", "1"])


def test_a_history_that_forgets_is_caught(monkeypatch):
    """Carry no history (each step attends over its own column only): caught."""
    original = onnx_seq.append_history

    def forgetful(self, source, parts, src, base, emit, got, ctx):
        return original(self, None, parts, src, base, emit, got, ctx)  # the new column alone

    c = compile_tf(load(EXAMPLES / "bb4.tm"), steps=40)
    monkeypatch.setattr(onnx_seq, "append_history", forgetful)
    with pytest.raises(AssertionError):
        assert_taps_agree(c, ["", "1"])


def test_a_tie_count_that_is_skipped_is_caught(monkeypatch):
    """An ``If`` whose then-branch does not count the ties (the share stays ``live``):
    the null-tie cases no longer match the reference."""
    original = onnx_seq.tie_branches

    def never_count(self, base, scores, top, live):
        branches = original(self, base, scores, top, live)
        then = onnx.GraphProto()
        then.CopyFrom(branches["else_branch"])  # renamed: names are unique in a model
        then.name += ".skipped"
        for n in then.node:
            n.name += ".skipped"
            n.output[0] += ".skipped"
        then.output[0].name += ".skipped"
        return {"then_branch": then, "else_branch": branches["else_branch"]}

    monkeypatch.setattr(onnx_seq, "tie_branches", never_count)
    with pytest.raises(AssertionError):
        for seed in SEEDS:
            check_tiny(seed)
