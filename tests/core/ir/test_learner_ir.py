"""Learners (Abbe & Sandon §4.1, Lemma 3 / Theorem 4): the IR and its validation, the
``learner`` block of the circuit language, the builder, the reference interpreter,
the example learners and the parity targets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES
from tm2nn.errors import Tm2nnError
from tm2nn.interp.circuit import eval_gate_by_gate, exhaustive_inputs, truth_table
from tm2nn.interp.learner import predict, run_learner
from tm2nn.ir import Circuit, Gate, Learner
from tm2nn.learners.builder import (
    CircuitBuilder,
    LearnerBuilder,
    add,
    eq,
    eq_const,
    ge_const,
    increment,
    lowest_one,
    mux,
    mux_vec,
    prefix_or,
)
from tm2nn.learners.examples import EXAMPLES as EXAMPLE_FILES
from tm2nn.learners.examples import majority_learner, parity_learner
from tm2nn.learners.targets import parity_target, parse_target, samples
from tm2nn.syntax import load, load_all, parse_text
from tm2nn.syntax.circuit_dsl import dump_learner
from tm2nn.syntax.learner_examples import example_text

# --------------------------------------------------------------------------- helpers


def _buf_circuit(name, inputs, outputs):
    """A circuit over ``inputs`` whose outputs are the given input names."""
    return Circuit(name, tuple(inputs), tuple(outputs), ())


def _tiny(**kw):
    ports = ["x", "rp", "b0", "b1"]
    args = dict(name="t", inputs=("x",), memory=("b0", "b1"),
                h=_buf_circuit("h", ports, ["rp"]), g=_buf_circuit("g", ports, ["x", "b0"]),
                coin=("rp",))
    args.update(kw)
    return Learner(**args)


def _memo_learner() -> Learner:
    """The builder docstring's example, with a random group and an init 1 bit."""
    lb = LearnerBuilder("remember")
    lb.input("x", 2)
    r = lb.random("r", 2)
    rp = lb.coin("rp")
    seen, lab = lb.memory("seen"), lb.memory("lab")
    flag = lb.memory("flag", init=1)
    lb.update(seen, lb.one)
    lb.update(lab, ~rp)
    lb.update(flag, r[0] ^ r[1])
    return lb.build(h=mux(seen, lab, rp))


# --------------------------------------------------------------------------- IR validation


def test_valid_tiny_learner():
    lr = _tiny()
    assert (lr.n, lr.m, lr.k) == (1, 2, 1)
    assert lr.ports == ("x", "rp", "b0", "b1")
    assert lr.init == (0, 0)
    assert lr.summary()["kind"] == "learner"


@pytest.mark.parametrize("kw, msg", [
    (dict(h=_buf_circuit("h", ["x", "rp", "b0", "b1"], ["x", "rp"])), "one output"),
    (dict(g=_buf_circuit("g", ["x", "rp", "b0", "b1"], ["x"])), "2 outputs"),
    (dict(h=_buf_circuit("h", ["x", "rp", "b1", "b0"], ["x"])), "its input 2 is 'b1'"),
    (dict(g=_buf_circuit("g", ["x", "rp", "b0"], ["x", "x"])), "missing 'b1'"),
    (dict(memory=("b0", "x")), "already in the input"),
    (dict(memory=("b0", "b0")), "declared twice"),
    (dict(memory=()), "no memory"),
    (dict(inputs=()), "no input"),
    (dict(coin=("rp", "rq")), "at most one coin"),
    (dict(init=(0,)), "initial memory has 1 bits"),
    (dict(init=(0, 2)), "must be 0 or 1"),
    (dict(name=""), "empty name"),
])
def test_validation_errors(kw, msg):
    with pytest.raises(Tm2nnError, match=msg):
        _tiny(**kw)


# --------------------------------------------------------------------------- builder


@st.composite
def _programs(draw):
    """A random straight-line program over 4 inputs using the builder's gates."""
    ops = []
    n_sig = 4 + 2  # inputs, then the two constants
    for _ in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(["and", "or", "xor", "not", "mux", "and3", "xor3"]))
        k = {"not": 1, "mux": 3, "and3": 3, "xor3": 3}.get(op, 2)
        args = [draw(st.integers(0, n_sig - 1)) for _ in range(k)]
        ops.append((op, args))
        n_sig += 1
    outs = draw(st.lists(st.integers(0, n_sig - 1), min_size=1, max_size=4))
    return ops, outs


def _run_program(ops, vals, fns):
    for op, args in ops:
        a = [vals[i] for i in args]
        vals.append(fns[op](*a))
    return vals


@settings(max_examples=150, deadline=None)
@given(_programs())
def test_builder_gates_match_python(prog):
    ops, outs = prog
    cb = CircuitBuilder()
    ins = [cb.port(f"i{j}") for j in range(4)]
    built = _run_program(ops, ins + [cb.zero, cb.one], {
        "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
        "not": lambda a: ~a, "mux": cb.mux, "and3": cb.and_, "xor3": cb.xor})
    c = cb.circuit("p", [f"i{j}" for j in range(4)], [built[o] for o in outs])
    for bits in exhaustive_inputs(4):
        ref = _run_program(ops, [bool(b) for b in bits] + [False, True], {
            "and": lambda a, b: a and b, "or": lambda a, b: a or b, "xor": lambda a, b: a != b,
            "not": lambda a: not a, "mux": lambda s, a, b: a if s else b,
            "and3": lambda a, b, d: a and b and d, "xor3": lambda a, b, d: (a + b + d) % 2 == 1})
        assert eval_gate_by_gate(c, bits) == tuple(ref[o] for o in outs)
    assert all(g.op != "XOR" or len(g.inputs) == 2 for g in c.gates)


def test_builder_folds_and_shares():
    cb = CircuitBuilder()
    a, b = cb.port("a"), cb.port("b")
    assert (a & b) is (b & a)
    assert ~~a is a
    assert (a & ~a).const == 0 and (a | ~a).const == 1 and (a ^ a).const == 0 and (a ^ ~a).const == 1
    assert (a & cb.one) is a and (a | cb.one).const == 1
    assert cb.mux(cb.one, a, b) is a and cb.mux(a, b, b) is b


def _num(bits) -> int:
    return sum(int(b) << i for i, b in enumerate(bits))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(-1, 17))
def test_arithmetic_helpers(w, k):
    cb = CircuitBuilder()
    a = [cb.port(f"a{i}") for i in range(w)]
    b = [cb.port(f"b{i}") for i in range(w)]
    s = cb.port("s")
    inc, inc_c = increment(a, s)
    sm, sm_c = add(a, b, s)
    outs = ([eq(a, b), eq_const(a, k), ge_const(a, k), inc_c, sm_c] + list(inc) + list(sm)
            + list(lowest_one(a)) + list(prefix_or(a)) + list(mux_vec(s, a, b)))
    c = cb.circuit("h", [p.name for p in a + b + [s]], outs)
    tt = truth_table(c)
    for j, bits in enumerate(exhaustive_inputs(2 * w + 1)):
        x, y, e = _num(bits[:w]), _num(bits[w:2 * w]), int(bits[-1])
        row = [int(v) for v in tt[j]]
        low = [int(i == (x & -x).bit_length() - 1) for i in range(w)] if x else [0] * w
        pre = [int(x & ((2 << i) - 1) != 0) for i in range(w)]
        want = ([x == y, x == k, x >= k, (x + e) >> w, (x + y + e) >> w]
                + [((x + e) >> i) & 1 for i in range(w)] + [((x + y + e) >> i) & 1 for i in range(w)]
                + low + pre + [((x if e else y) >> i) & 1 for i in range(w)])
        assert row == [int(v) for v in want], (x, y, e, k)


def test_learner_builder_errors():
    lb = LearnerBuilder("e")
    x = lb.input("x")
    m = lb.memory("m")
    lb.coin()
    with pytest.raises(ValueError, match="at most one coin"):
        lb.coin("q")
    with pytest.raises(ValueError, match="not a memory bit"):
        lb.update(x, m)
    lb.update(m, x)
    with pytest.raises(ValueError, match="already has an update"):
        lb.update(m, x)
    with pytest.raises(ValueError, match="another|not a signal"):
        lb.update(m, CircuitBuilder().port("z"))


# --------------------------------------------------------------------------- file format


@pytest.mark.parametrize("make", [lambda: parity_learner(3), lambda: parity_learner(2, strict=True),
                                  lambda: majority_learner(5, n=2), _memo_learner])
def test_dump_parse_round_trip(make):
    lr = make()
    items = parse_text(dump_learner(lr), "circ", "rt.circ")
    assert items[0] == lr
    assert [i.name for i in items[1:]] == [lr.h.name, lr.g.name]
    assert items[0].loc.line == 2


def test_examples_equal_generator_output():
    for fname in EXAMPLE_FILES:
        path = EXAMPLES / fname
        assert path.read_text() == example_text(fname), f"regenerate {path}"
        lr = load(path)
        assert isinstance(lr, Learner) and lr == EXAMPLE_FILES[fname][0]()


def test_load_returns_learner_first_and_circuits_by_name():
    path = EXAMPLES / "majority7.circ"
    assert [type(i).__name__ for i in load_all(path)] == ["Learner", "Circuit", "Circuit"]
    assert isinstance(load(path, name="majority7_g"), Circuit)


GOOD = """\
learner L {
  input x[2]
  coin rp
  memory b
  init b
  output H
  update G
}
circuit H {
  input x[2] rp b
  output o
  o = b & rp
}
circuit G {
  input x[2] rp b
  output b
}
"""


def test_handwritten_learner_parses():
    lr = parse_text(GOOD, "circ", "good.circ")[0]
    assert lr.inputs == ("x[0]", "x[1]") and lr.coin == ("rp",) and lr.memory == ("b",)
    assert lr.init == (1,)


@pytest.mark.parametrize("old, new, line, col, msg", [
    ("  memory b\n", "  memry b\n", 4, 3, "did you mean 'memory'"),
    ("  update G\n", "", 1, 9, "no 'update' item"),
    ("  output H\n", "  output K\n", 6, 10, "no circuit named 'K'"),
    ("  init b\n", "  init rp\n", 5, 8, "'rp', which is not a memory bit"),
    ("  init b\n", "  init b[0]\n", 5, 8, "no elements"),
    ("  input x[2] rp b\n  output o", "  input x[2] b rp\n  output o", 6, 10, "its input 2 is 'b'"),
    ("  coin rp\n", "  coin rp rq\n", 3, 3, "at most one coin"),
    ("  output H\n", "  output H\n  output H\n", 7, 3, "given twice"),
    ("learner L {\n", "learner L {\n  input\n", 2, 8, "unexpected end of line"),
    ("circuit G", "circuit H", 14, 9, "'H' is defined twice"),
    ("learner L", "learner H", 9, 9, "'H' is defined twice"),
    ("  output b\n", "  output b\n  b = rp\n", 17, 3, "'b' is an input"),
])
def test_parse_errors_have_positions(old, new, line, col, msg):
    text = GOOD.replace(old, new, 1)
    assert text != GOOD
    with pytest.raises(Tm2nnError) as ei:
        parse_text(text, "circ", "bad.circ")
    e = ei.value
    assert msg in e.message
    assert (e.file, e.line, e.col) == ("bad.circ", line, col)
    assert e.render().startswith(f"bad.circ:{line}:{col}: error:")


def test_learner_keyword_is_still_a_signal_name_in_bare_files():
    c = parse_text("input a\noutput learner\nlearner = ~a\n", "circ", "k.circ")[0]
    assert c.outputs == ("learner",)


def test_cli_check_and_run(run_cli):
    r = run_cli("check", EXAMPLES / "parity8.circ", "--json")
    assert r.code == 0
    s = json.loads(r.out)
    assert (s["kind"], s["inputs"], s["memory"], s["coin"]) == ("learner", 8, 44, 1)
    r = run_cli("run", EXAMPLES / "parity8.circ", "--input", "0")
    assert r.code == 2 and "is a learner" in r.err


# --------------------------------------------------------------------------- interpreter


def _naive_run(lr, xs, ys, r2s):
    """Lemma 3's recursion, one gate at a time."""
    b = list(lr.init)
    outs, mems = [], []
    for x, y, c in zip(xs, ys, r2s):
        ports = list(x) + [c] + b
        o = eval_gate_by_gate(lr.h, ports)[0]
        if o != y:
            b = [int(v) for v in eval_gate_by_gate(lr.g, ports)]
        outs.append(o)
        mems.append(list(b))
    return np.array(outs, bool), np.array(mems, bool)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_interpreter_matches_naive_recursion(seed, noisy):
    lr = parity_learner(3)
    tg = parity_target(np.random.default_rng(seed).integers(0, 2, 3))
    S = samples(tg, 12, seed)
    ys = S.ys ^ (np.random.default_rng(seed + 1).random(12) < 0.3) if noisy else S.ys
    run = run_learner(lr, S.xs, ys, None, S.r2s)
    outs, mems = _naive_run(lr, S.xs.astype(int), ys, S.r2s.astype(int))
    assert np.array_equal(run.outputs, outs) and np.array_equal(run.memories, mems)
    # Lemma 3: the memory changes only on steps where the output was wrong
    prev = np.vstack([run.init[None], run.memories[:-1]])
    changed = (prev != run.memories).any(axis=1)
    assert not (changed & ~run.wrong).any()
    assert np.array_equal(run.wrong, run.outputs != ys)


def test_batched_run_equals_single_runs():
    lr = parity_learner(4)
    B, T = 5, 30
    S = [samples(parity_target(np.random.default_rng(s).integers(0, 2, 4)), T, s) for s in range(B)]
    run = run_learner(lr, np.stack([s.xs for s in S]), np.stack([s.ys for s in S]), None,
                      np.stack([s.r2s for s in S]))
    for i, s in enumerate(S):
        one = run_learner(lr, s.xs, s.ys, None, s.r2s)
        assert np.array_equal(run.outputs[i], one.outputs)
        assert np.array_equal(run.memories[i], one.memories)
        assert np.array_equal(run.final[i], one.final)


def test_interpreter_argument_errors():
    lr = parity_learner(2)
    with pytest.raises(ValueError, match="coin"):
        run_learner(lr, np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="xs"):
        run_learner(lr, np.zeros((3, 5)), np.zeros(3), None, np.zeros(3))
    with pytest.raises(ValueError, match="0 or 1"):
        run_learner(lr, np.full((3, 2), 2), np.zeros(3), None, np.zeros(3))
    assert run_learner(lr, np.zeros((0, 2)), np.zeros(0), None, np.zeros(0)).final.shape == (lr.m,)


@pytest.mark.parametrize("strict", [False, True])
def test_parity_learner_learns_every_secret_exactly(strict):
    """Example 1: about 2n samples fill the n pivot slots, then h is the parity on all
    2^n inputs.  64 random secrets for n = 4, run as one batch."""
    n, B, T = 4, 64, 60
    lr = parity_learner(n, strict=strict)
    rng = np.random.default_rng(2024)
    secrets = rng.integers(0, 2, (B, n))
    xs = rng.integers(0, 2, (B, T, n)).astype(bool)
    ys = np.einsum("btn,bn->bt", xs.astype(int), secrets) % 2 == 1
    r2s = rng.integers(0, 2, (B, T)).astype(bool)
    run = run_learner(lr, xs, ys, None, r2s)
    full = run.memories[:, :, :n].all(axis=2)  # all pivot slots full
    assert full[:, -1].all()
    used = full.argmax(axis=1) + 1  # samples until the memory is complete
    assert used.min() >= n and used.max() <= 12 * n
    assert used.mean() <= 4 * n  # Example 1: ≈ 2n (exactly 2·Σ 1/(1 - 2^(r-n)) ≈ 11.1 here)
    stores = (np.diff(run.memories.astype(int), axis=1) != 0).any(axis=2).sum(axis=1) + run.memories[:, 0].any(1)
    assert stores.tolist() == [n] * B  # one store per pivot
    if not strict:  # Example 1: every wrong output stores a sample
        assert run.wrong.sum(axis=1).tolist() == [n] * B
    X = exhaustive_inputs(n)
    for b in range(B):
        want = X.astype(int) @ secrets[b] % 2 == 1
        assert np.array_equal(predict(lr, run.final[b], X), want)
        # after the memory is complete the learner never errs again
        assert not run.wrong[b, used[b]:].any()
        assert np.array_equal(run.outputs[b, used[b]:], ys[b, used[b]:])
    if strict:  # A'': before the memory says done, the output is the coin
        before = np.arange(T)[None, :] < (used - 1)[:, None]
        assert np.array_equal(run.outputs[before], r2s[before])


def _majority_python(T, ys, r2s):
    seen = ones = 0
    outs, mems = [], []
    for y, c in zip(ys, r2s):
        out = (2 * ones > T) if seen == T else bool(c)
        if out != y and seen < T:
            seen, ones = seen + 1, ones + int(y)
        outs.append(out)
        mems.append((seen, ones))
    return outs, mems


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 3, 4, 7]), st.lists(st.tuples(st.booleans(), st.booleans()), max_size=40))
def test_majority_learner_matches_python(T, stream):
    lr = majority_learner(T, n=2)
    ys = np.array([y for y, _ in stream], bool)
    r2s = np.array([c for _, c in stream], bool)
    xs = np.zeros((len(stream), 2), bool)
    run = run_learner(lr, xs, ys, None, r2s)
    outs, mems = _majority_python(T, ys, r2s)
    w = T.bit_length()
    assert run.outputs.tolist() == outs
    assert [(_num(m[:w]), _num(m[w:])) for m in run.memories] == mems


def test_majority_learns_the_majority_label():
    lr = majority_learner(7)
    rng = np.random.default_rng(7)
    for p, want in ((0.9, True), (0.1, False)):
        ys = rng.random(200) < p
        run = run_learner(lr, np.zeros((200, 1), bool), ys, None, rng.random(200) < 0.5)
        assert predict(lr, run.final, np.zeros((3, 1), bool)).tolist() == [want] * 3


# --------------------------------------------------------------------------- targets


def test_parse_target():
    assert parse_target("parity:1011", 4).secret == (1, 0, 1, 1)
    assert parse_target("parity:0,3", 4).secret == (1, 0, 0, 1)
    assert parse_target("parity:", 3).secret == (0, 0, 0)
    assert parse_target("const:1", 2)(np.zeros((3, 2))).tolist() == [True] * 3
    for bad, msg in (("parity:101", "has 3 bits"), ("parity:0,9", "not an input index"),
                     ("majority:1", "unknown target"), ("parity", "unknown target")):
        with pytest.raises(Tm2nnError, match=msg):
            parse_target(bad, 4)


def test_samples_are_seeded_and_labelled():
    tg = parse_target("parity:0,2", 3)
    a, b = samples(tg, 50, 1, random_bits=2), samples(tg, 50, 1, random_bits=2)
    assert np.array_equal(a.xs, b.xs) and np.array_equal(a.r2s, b.r2s)
    assert a.rs.shape == (50, 2) and a.r2s.shape == (50,)
    assert np.array_equal(a.ys, a.xs[:, 0] ^ a.xs[:, 2])
    z, y = a.signs()
    assert z.shape == (50, 6) and set(np.unique(z)) <= {-1.0, 1.0} and set(np.unique(y)) <= {-1.0, 1.0}


def test_circuit_gate_names_never_collide_with_ports():
    lb = LearnerBuilder("c", prefix="n")
    x = lb.input("n1")
    m = lb.memory("n2")
    lb.update(m, x & m)
    lr = lb.build(h=x | m)
    assert all(g.name not in lr.ports for g in lr.h.gates + lr.g.gates)
    assert isinstance(lr.g.gates[0], Gate)
