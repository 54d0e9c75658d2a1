"""Theorem 4's learning phase as a transformation (Abbe & Sandon §4.1, proof of Theorem 4):
:func:`tm2nn.learners.theorem4.theorem4` against a direct simulation of A'/A'', on the
example learners and on random base learners, and emulated by SGD on G_n (exact and
float64 engines) with 0 mismatches."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tm2nn.backends.abbe_sandon import train_torch
from tm2nn.backends.abbe_sandon.ir_net import build_ir_net
from tm2nn.backends.abbe_sandon.net import build_net
from tm2nn.backends.abbe_sandon.train import train
from tm2nn.errors import Tm2nnError
from tm2nn.interp.circuit import eval_circuit, eval_gate_by_gate, exhaustive_inputs
from tm2nn.interp.learner import run_learner
from tm2nn.ir import Circuit
from tm2nn.ir.learner import BaseLearner
from tm2nn.learners import theorem4 as t4
from tm2nn.learners.builder import BaseLearnerBuilder, Bit, CircuitBuilder
from tm2nn.learners.examples import majority_base, parity_base
from tm2nn.learners.theorem4 import Theorem4Options, theorem4

# --------------------------------------------------------------------------- helpers


def simulate(base: BaseLearner, xs, ys, rs, r2s):
    """Theorem 4's A'/A'' in plain Python, one gate at a time on the base learner's own
    circuits, with the true label y:

    * ``y*_t = A(b, x)`` if done else ``r'_t`` (A'');
    * ``b_t = A(b, x, y, r)`` if not done and ``y != r'`` (A'), else ``b_{t-1}``.

    Returns (outputs, memories, learned) with the memory as the transformed learner
    holds it (the sample counter first, bit 0 least significant, when there is one)."""
    b, count = list(base.init), 0
    w = 0 if base.samples is None else base.samples.bit_length()
    outs, mems, learned = [], [], []
    for x, y, r, c in zip(xs, ys, rs, r2s):
        ports = [*map(int, x), *map(int, r), *b]
        done = count >= base.samples if base.samples is not None else eval_gate_by_gate(base.done, ports)[0]
        outs.append(bool(eval_gate_by_gate(base.predict, ports)[0]) if done else bool(c))
        learn = not done and bool(y) != bool(c)
        if learn:
            b = [int(v) for v in eval_gate_by_gate(base.update, [*map(int, x), *map(int, r), int(y), *b])]
            count += 1
        mems.append([(count >> i) & 1 for i in range(w)] + b)
        learned.append(learn)
    return np.array(outs, bool), np.array(mems, bool).reshape(len(outs), -1), np.array(learned, bool)


def stream(base: BaseLearner, T: int, seed: int, labels=None):
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 2, (T, len(base.inputs))).astype(bool)
    rs = rng.integers(0, 2, (T, len(base.random))).astype(bool)
    ys = rng.integers(0, 2, T).astype(bool) if labels is None else labels(xs)
    return xs, ys, rs, rng.integers(0, 2, T).astype(bool)


def agrees(base: BaseLearner, xs, ys, rs, r2s, options: Theorem4Options | None = None) -> bool:
    """The transformed learner, run by the reference interpreter, equals :func:`simulate`."""
    lr = theorem4(base, options)
    run = run_learner(lr, xs, ys, rs if lr.random else None, r2s)
    outs, mems, _ = simulate(base, xs, ys, rs, r2s)
    return np.array_equal(run.outputs, outs) and np.array_equal(run.memories, mems)


def random_base(seed: int) -> BaseLearner:
    """A random small base learner: n <= 3 inputs, <= 2 random bits, m <= 3 memory bits,
    random init, up to 14 random gates; predict and done read x, r, b only, the update
    may read the label; done is a random bit or a sample count T <= 4."""
    rng = np.random.default_rng(seed)
    n, k, m = (int(v) for v in (rng.integers(1, 4), rng.integers(0, 3), rng.integers(1, 4)))
    bb = BaseLearnerBuilder(f"rand{seed}")
    free: list[Bit] = list(bb.input("x", n)) + (list(bb.random("r", k)) if k else [])
    y = bb.label()
    mem = list(bb.memory("b", m, init=[int(v) for v in rng.integers(0, 2, m)]))
    free += mem
    sig = [(s, False) for s in free] + [(y, True)]
    for _ in range(int(rng.integers(0, 15))):
        op = rng.choice(["and", "or", "xor", "not", "mux"])
        (a, da), (c, dc), (e, de) = (sig[int(rng.integers(len(sig)))] for _ in range(3))
        if op == "not":
            sig.append((~a, da))
        elif op == "mux":
            sig.append((bb.mux(a, c, e), da or dc or de))
        else:
            sig.append(({"and": a & c, "or": a | c, "xor": a ^ c}[op], da or dc))
    pure = [s for s, dep in sig if not dep]
    bb.update(mem, [sig[int(rng.integers(len(sig)))][0] for _ in range(m)])
    predict = pure[int(rng.integers(len(pure)))]
    if rng.random() < 0.4:
        return bb.build(predict=predict, samples=int(rng.integers(1, 5)))
    return bb.build(predict=predict, done=pure[int(rng.integers(len(pure)))])


def parity_labels(secret):
    return lambda xs: xs.astype(int) @ np.asarray(secret) % 2 == 1


def noisy(labels, p, seed):
    rng = np.random.default_rng(seed)
    return lambda xs: labels(xs) ^ (rng.random(len(xs)) < p)


#: (base learner, label rule) pairs: clean and noisy parity, both done rules, majority.
EXAMPLE_CASES = [
    (lambda: parity_base(3), parity_labels([1, 0, 1])),
    (lambda: parity_base(3, strict=True), parity_labels([1, 1, 0])),
    (lambda: parity_base(3), noisy(parity_labels([0, 1, 1]), 0.2, 1)),
    (lambda: majority_base(3, n=2), None),
]

# --------------------------------------------------------------------------- semantics


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.booleans())
def test_random_base_learners_follow_a_prime(seed, sseed, prune):
    """For random base learners and random streams, the transformed learner (run by
    ``run_learner``) is Theorem 4's A'/A'': same outputs, same memory at every step; the
    memory changes only on learned samples (not done, y != r'), the output is r' while
    learning.  With and without the gate pruning."""
    base = random_base(seed)
    xs, ys, rs, r2s = stream(base, 30, sseed)
    lr = theorem4(base, Theorem4Options(prune=prune))
    run = run_learner(lr, xs, ys, rs if lr.random else None, r2s)
    outs, mems, learned = simulate(base, xs, ys, rs, r2s)
    assert np.array_equal(run.outputs, outs)
    assert np.array_equal(run.memories, mems)
    prev = np.vstack([run.init[None], run.memories[:-1]])
    assert not ((prev != run.memories).any(axis=1) & ~learned).any()
    assert not (learned & ~(run.wrong & (run.outputs == r2s))).any()  # learning: h = r' != y


@pytest.mark.parametrize("case", range(len(EXAMPLE_CASES)))
def test_example_learners_are_the_transformation(case):
    make, labels = EXAMPLE_CASES[case]
    base = make()
    for seed in range(4):
        assert agrees(base, *stream(base, 40, seed, labels))


def test_counter_saturates_at_T():
    """The sample counter goes up only while learning, so it stops at T; then the memory
    is frozen even on wrong outputs."""
    base = majority_base(5, n=1)
    xs, ys, rs, r2s = stream(base, 80, 0)
    lr = theorem4(base)
    assert lr.memory[:3] == ("seen[0]", "seen[1]", "seen[2]") and lr.init == (0,) * lr.m
    run = run_learner(lr, xs, ys, None, r2s)
    seen = run.memories[:, :3].astype(int) @ [1, 2, 4]
    assert seen.max() == 5 and (np.diff(seen) >= 0).all()
    after = np.argmax(seen == 5) + 1
    assert run.wrong[after:].any() and (run.memories[after:] == run.memories[after - 1]).all()


def test_pruning_leaves_out_every_gate_for_example_1():
    """Example 1's update is already the identity once x is in the span (or all slots are
    full), so the pruned g is the ungated A(b, x, NOT r') -- the net stays the size of the
    hand-written learner -- while a counter-done learner (majority) keeps its gates."""
    for base in (parity_base(4), parity_base(4, strict=True)):
        pruned = theorem4(base)
        gated = theorem4(base, Theorem4Options(prune=False))
        assert len(pruned.g.gates) < len(gated.g.gates)
        P = exhaustive_inputs(len(pruned.ports))
        y = ~P[:, [len(base.inputs)]]  # the label NOT r'
        ungated = eval_circuit(base.update, np.hstack([P[:, :len(base.inputs)], y, P[:, len(base.inputs) + 1:]]))
        assert np.array_equal(eval_circuit(pruned.g, P), ungated)
    maj = majority_base(3)
    assert len(theorem4(maj).g.gates) == len(theorem4(maj, Theorem4Options(prune=False)).g.gates)


def implied_is_sound(seed: int) -> bool:
    """``implied(s, v)`` lists only facts that hold whenever s == v, and ``cofactor``
    under them changes no output on those assignments (a random circuit, exhaustive
    over its <= 5 ports)."""
    rng = np.random.default_rng(seed)
    cb = CircuitBuilder()
    n = int(rng.integers(1, 6))
    sig = [cb.port(f"p{i}") for i in range(n)]
    for _ in range(int(rng.integers(1, 20))):
        a, b = (sig[int(rng.integers(len(sig)))] for _ in range(2))
        sig.append([a & b, a | b, a ^ b, ~a][int(rng.integers(4))])
    s, v = sig[-1], int(rng.integers(2))
    outs = [sig[int(rng.integers(len(sig)))] for _ in range(3)]
    facts = cb.implied(s, v)
    co = cb.cofactor(outs, facts)
    names = sorted(facts)
    c = cb.circuit("t", [f"p{i}" for i in range(n)], [s, *outs, *co, *(Bit(cb, f) for f in names)])
    val = eval_circuit(c, exhaustive_inputs(n))
    rows = val[:, 0] == bool(v)
    return (np.array_equal(val[rows, 1:4], val[rows, 4:7])
            and all((val[rows, 7 + j] == bool(facts[f])).all() for j, f in enumerate(names)))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_implied_and_cofactor_are_sound(seed):
    assert implied_is_sound(seed)


def test_implied_finds_facts():
    cb = CircuitBuilder()
    a, b, c = cb.port("a"), cb.port("b"), cb.port("c")
    done = ~((a | b) | ~c)  # = NOT a AND NOT b AND c
    facts = cb.implied(done, 1)
    assert {k: facts[k] for k in "abc"} == {"a": 0, "b": 0, "c": 1}
    assert cb.cofactor([a & c, b | c, a ^ b], facts) == [cb.zero, cb.one, cb.zero]
    assert cb.cofactor([a & c], cb.implied(a ^ b, 1))[0].name == (a & c).name  # XOR forces nothing


# --------------------------------------------------------------------------- SGD on G_n


def _sgd(base: BaseLearner, xs, ys, rs, r2s):
    """Train G_n (exact engine, then float64 engine) on the stream: 0 mismatches, and the
    outputs are A'/A'''s."""
    lr = theorem4(base)
    rs_ = rs if lr.random else None
    outs, mems, _ = simulate(base, xs, ys, rs, r2s)
    net = build_net(lr)
    rep = train(net, xs, ys, rs_, r2s)
    assert rep.mismatch is None, rep.mismatch
    assert rep.steps == len(xs) and rep.outputs == [int(v) for v in outs]
    assert net.memory_bits() == [int(v) for v in mems[-1]]
    rep = train_torch.train(build_ir_net(lr), xs, ys, rs_, r2s)
    assert rep.mismatch is None, rep.mismatch
    assert rep.steps == len(xs) and rep.outputs == [int(v) for v in outs]


@pytest.mark.parametrize("case", range(len(EXAMPLE_CASES)))
def test_sgd_emulates_example_learners(case):
    make, labels = EXAMPLE_CASES[case]
    base = make()
    _sgd(base, *stream(base, 30, 7, labels))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_sgd_emulates_random_base_learners(seed, sseed):
    base = random_base(seed)
    _sgd(base, *stream(base, 25, sseed))


# --------------------------------------------------------------------------- mutations

#: Base learners and streams on which a broken transformation must show (fast, fixed).
MUTATION_CORPUS = [(make(), labels, seed) for make, labels in EXAMPLE_CASES for seed in range(2)]
MUTATION_CORPUS += [(random_base(s), None, s) for s in range(20)]


def _prune_bait() -> BaseLearner:
    """done = NOT(x AND b), update b := x AND b: the update is 0 once done, which is b
    only when b = 0 -- the gate on g is needed, and an unsound fact (b = 0) drops it."""
    bb = BaseLearnerBuilder("bait")
    x = bb.input("x")
    bb.label()
    b = bb.memory("b", init=1)
    bb.update(b, x & b)
    return bb.build(predict=b, done=~(x & b))


MUTATION_CORPUS.append((_prune_bait(), None, 0))


def _corpus_agrees() -> bool:
    return all(agrees(base, *stream(base, 40, seed, labels)) for base, labels, seed in MUTATION_CORPUS)


def test_corpus_agrees_unmutated():
    assert _corpus_agrees()


def test_mutation_g_not_gated_by_done(monkeypatch):
    """A transformation that forgets ``g = done ? b : ...`` lets wrong outputs of the
    computing phase change the memory: caught."""
    monkeypatch.setattr(t4, "gate_update", lambda lb, done, b, new, prune=True: new)
    assert not _corpus_agrees()


def test_mutation_label_is_r_prime(monkeypatch):
    """Feeding the net's own output r' to A instead of the label NOT r': caught."""
    monkeypatch.setattr(t4, "learning_label", lambda rp: rp)
    assert not _corpus_agrees()


def test_mutation_unsound_pruning(monkeypatch):
    """An ``implied`` that also propagates an AND being 0 to all its inputs claims facts
    that do not hold, so pruning drops gates it needs: caught."""
    orig = CircuitBuilder.implied

    def unsound(self, s, value=1):
        facts = orig(self, s, value)
        for nm in list(facts):
            g = self._gates.get(nm)
            if g is not None and g.op == "AND" and facts[nm] == 0:
                facts.update({i: 0 for i in g.inputs})
        return facts

    monkeypatch.setattr(CircuitBuilder, "implied", unsound)
    assert not all(implied_is_sound(s) for s in range(30))
    assert not _corpus_agrees()


# --------------------------------------------------------------------------- validation


def _c(name, inputs, outputs):
    return Circuit(name, tuple(inputs), tuple(outputs), ())


def _base(**kw):
    ports, uports = ["x", "b"], ["x", "y", "b"]
    args = dict(name="t", inputs=("x",), memory=("b",), predict=_c("p", ports, ["b"]),
                update=_c("u", uports, ["y"]), samples=2)
    args.update(kw)
    return BaseLearner(**args)


def test_valid_base_learner():
    bl = _base()
    assert bl.ports == ("x", "b") and bl.update_ports == ("x", "y", "b") and bl.init == (0,)
    lr = theorem4(bl)
    assert lr.ports == ("x", "rp", "seen[0]", "seen[1]", "b") and lr.coin == ("rp",)


@pytest.mark.parametrize("kw, msg", [
    (dict(samples=None), "exactly one rule"),
    (dict(done=_c("d", ["x", "b"], ["x"])), "not both"),
    (dict(samples=0), "sample count T"),
    (dict(samples=True), "sample count T"),
    (dict(inputs=()), "no input bits"),
    (dict(memory=()), "no memory bits"),
    (dict(label="x"), "already in the input group"),
    (dict(predict=_c("p", ["b", "x"], ["b"])), "its input 0 is 'b'"),
    (dict(predict=_c("p", ["x", "b"], ["b", "x"])), "must have one output"),
    (dict(update=_c("u", ["x", "b"], ["b"])), "x ++ r ++ y ++ b"),
    (dict(update=_c("u", ["x", "y", "b"], ["b", "y"])), "1 outputs"),
    (dict(init=(2,)), "must be 0 or 1"),
    (dict(init=(0, 1)), "initial memory has 2 bits"),
    (dict(predict="p"), "must be a Circuit"),
])
def test_base_learner_errors(kw, msg):
    with pytest.raises(Tm2nnError, match=re.escape(msg)):
        _base(**kw)


def test_transformation_name_clashes():
    with pytest.raises(Tm2nnError, match="adds the bit 'x'"):
        theorem4(_base(), Theorem4Options(coin="x"))
    bl = _base(inputs=("seen[1]",), predict=_c("p", ["seen[1]", "b"], ["b"]),
               update=_c("u", ["seen[1]", "y", "b"], ["b"]))
    with pytest.raises(Tm2nnError, match="adds the bit 'seen\\[1\\]'"):
        theorem4(bl)
    assert theorem4(bl, Theorem4Options(counter="count")).memory[:2] == ("count[0]", "count[1]")


def test_builder_predict_may_not_read_the_label():
    bb = BaseLearnerBuilder("bad")
    bb.input("x")
    y = bb.label()
    b = bb.memory("b")
    bb.update(b, y)
    with pytest.raises(ValueError, match="depends on 'y'"):
        bb.build(predict=b ^ y, samples=1)
    with pytest.raises(ValueError, match="one label bit"):
        bb.label()


# --------------------------------------------------------------------------- .circ form

GOOD_T4 = """\
learner maj3 {
  phases theorem4
  input x[1]
  label y
  memory ones[2]
  predict P
  update U
  samples 3
}
circuit P {
  input x[1] ones[2]
  output o
  o = ones[1]
}
circuit U {
  input x[1] y ones[2]
  output n0 n1
  n0 = ones[0] ^ y
  n1 = ones[1] ^ (ones[0] & y)
}
"""


def test_circ_theorem4_block_is_the_transformation():
    from tm2nn.syntax import parse_text

    lr, p, u = parse_text(GOOD_T4, "circ", "t4.circ")
    base = BaseLearner("maj3", ("x[0]",), ("ones[0]", "ones[1]"), p, u, samples=3)
    assert lr == theorem4(base)
    assert lr.memory == ("seen[0]", "seen[1]", "ones[0]", "ones[1]") and lr.coin == ("rp",)
    text = GOOD_T4.replace("  samples 3\n", "  done D\n  coin c\n  init \"ones[1]\"\n") + (
        "circuit D {\n  input x[1] ones[2]\n  output d\n  d = ones[0]\n}\n")
    lr2 = parse_text(text, "circ", "t4.circ")[0]
    assert lr2.coin == ("c",) and lr2.memory == ("ones[0]", "ones[1]") and lr2.init == (0, 1)
    base2 = BaseLearner("maj3", ("x[0]",), ("ones[0]", "ones[1]"), p, u,
                        done=parse_text(text, "circ", "t4.circ")[-1], init=(0, 1))
    assert lr2 == theorem4(base2, Theorem4Options(coin="c"))


@pytest.mark.parametrize("old, new, line, col, msg", [
    ("  predict P\n", "  output P\n", 6, 3, "here it is 'predict'"),
    ("  predict P\n", "  predikt P\n", 6, 3, "did you mean 'predict'"),
    ("  predict P\n", "", 1, 9, "no 'predict' item"),
    ("  samples 3\n", "  samples 0\n", 8, 11, "integer >= 1"),
    ("  samples 3\n", "  samples x\n", 8, 11, "integer >= 1"),
    ("  samples 3\n", "  samples " + "9" * 5000 + "\n", 8, 11, "over the 4,096"),  # the word cap (issue 40)
    ("  samples 3\n", "  samples 99999999999999\n", 8, 11, "integer in 1.."),
    ("  phases theorem4\n", "  phases theorem5\n", 2, 10, "unknown phases 'theorem5'"),
    ("  samples 3\n", "  samples 3\n  done P\n", 1, 1, "not both"),
    ("  samples 3\n", "", 1, 1, "exactly one rule"),
    ("  update U\n", "  update P\n", 7, 10, "x ++ r ++ y ++ b"),
    ("  label y\n", "  label 7\n", 4, 9, "not the number '7'"),
    ("  label y\n", "  label y\n  label z\n", 5, 3, "given twice"),
    ("  samples 3\n", "  samples 3\n  init ones[2] \"x[0]\"\n", 9, 16, "'x[0]', which is not a memory bit"),
    ("  samples 3\n", "  samples 3\n  coin x[0]\n", 1, 1, "adds the bit 'x[0]'"),
    ("  samples 3\n", "  samples 3\n  counter c[2]\n", 9, 11, "plain name"),
    ("  label y\n", "  label ones[0]\n", 5, 10, "already in the label group"),
])
def test_circ_theorem4_errors_have_positions(old, new, line, col, msg):
    from tm2nn.syntax import parse_text

    text = GOOD_T4.replace(old, new, 1)
    assert text != GOOD_T4
    with pytest.raises(Tm2nnError) as ei:
        parse_text(text, "circ", "bad.circ")
    e = ei.value
    assert msg in e.message
    assert (e.file, e.line, e.col) == ("bad.circ", line, col), e.render()


def test_lemma3_learner_block_rejects_numbers():
    from tm2nn.syntax import parse_text

    text = "learner L {\n  input x[2]\n  memory b 3\n  output H\n  update G\n}\n"
    with pytest.raises(Tm2nnError) as ei:
        parse_text(text, "circ", "bad.circ")
    assert "not the number '3'" in ei.value.message and (ei.value.line, ei.value.col) == (3, 12)


def test_cli_learns_a_theorem4_block(tmp_path, run_cli):
    import json

    path = tmp_path / "maj3.circ"
    path.write_text(GOOD_T4)
    r = run_cli("learn", path, "--target", "const:1", "--steps", "20", "--test", "10", "--json")
    assert r.code == 0, r.err
    s = json.loads(r.out.strip().splitlines()[-1])
    assert s["mismatches"] == 0 and s["test_accuracy"] == 1.0
    path.write_text(GOOD_T4.replace("  samples 3\n", ""))
    r = run_cli("check", path)
    assert r.code == 2 and "maj3.circ:1:1: error:" in r.err and "Traceback" not in r.err


def test_lemma3_block_points_to_phases():
    from tm2nn.syntax import parse_text

    text = GOOD_T4.replace("  phases theorem4\n", "")
    with pytest.raises(Tm2nnError) as ei:
        parse_text(text, "circ", "bad.circ")
    assert "starts with 'phases theorem4'" in ei.value.message and ei.value.line == 3


def test_huge_sample_counts_are_clear_errors():
    """A 5000-digit count is a located error: the parsers' cap on a word's length (4 KiB,
    issue 40) refuses it before int() would (Python refuses int() of > 4300 digits)."""
    from tm2nn.syntax import parse_text

    noisy = ("noisy_learner N {\n  input x[2]\n  samples " + "9" * 5000 + "\n  output H\n}\n"
             "circuit H {\n  input x[2]\n  output o\n  o = x[0]\n}\n")
    with pytest.raises(Tm2nnError) as ei:
        parse_text(noisy, "circ", "bad.circ")
    assert (ei.value.line, ei.value.col) == (3, 11) and "over the 4,096" in ei.value.message
