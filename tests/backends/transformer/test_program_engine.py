"""The program engine (``--engine program``, issue 39): the decoder step as the rows that
compute a new value over exact integer registers, and each hard-max attention as one
lookup in the key index.  The same function as the compiled transformer: its taps against
the dense hard-max path (torch, float64) at every step, on the examples and on random
machines, and on a network whose transition table was edited; against the interpreter
through ``verify``; its refusals; mutations of its own program that the comparison
catches.  (BB(5)'s first 10^6 steps, verified at every step: bench/bench_long_run.py.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends.transformer.test_transformer import LINE_EXAMPLES, compile_tf, tapes
from tests.conftest import EXAMPLES
from tests.strategies import machines
from tm2nn.backends.transformer.engines import decode_kernel as K
from tm2nn.backends.transformer.engines.program_engine import ProgramEngine
from tm2nn.backends.transformer.engines.step_program import AI_BASE, AI_FROM, AI_META
from tm2nn.emit.torch_emit import to_torch
from tm2nn.engines import EngineRefused
from tm2nn.interp import run_machine
from tm2nn.nets import Affine, Attention, Decode, Net
from tm2nn.syntax import load
from tm2nn.verify import verify_compiled


def same_taps(c, texts, engine: ProgramEngine | None = None, net: Net | None = None) -> np.ndarray:
    """The program engine's taps on ``texts`` equal the dense path's, bit for bit, at every
    step (``net``: an edited network, run by both)."""
    tokens = c.encode(texts)
    net = c.net if net is None else net
    with torch.no_grad():
        want = to_torch(net, torch.float64)(torch.from_numpy(tokens)).numpy()
    got = (engine or ProgramEngine(net)).run(tokens)
    assert got.taps.dtype == np.int8
    assert np.array_equal(got.taps.astype(np.float64), want), np.argwhere(got.taps != want)[:3]
    return got.taps


def edit_body(c, name: str, edit) -> Net:
    """``c``'s network with the decoder body's op ``name`` replaced by ``edit(op)``."""
    dec = next(op for op in c.net.nodes if isinstance(op, Decode))
    body = Net(dec.body.name, dec.body.inputs, tuple(edit(op) if op.name == name else op for op in dec.body.nodes),
               dec.body.outputs)
    return Net(c.net.name, c.net.inputs, tuple(dataclasses.replace(op, body=body) if op is dec else op
                                                for op in c.net.nodes), c.net.outputs)


def test_examples_same_function_every_step():
    for path in LINE_EXAMPLES:
        m = load(path)
        c = compile_tf(m, steps=12)
        same_taps(c, tapes(m, 1))


@pytest.mark.parametrize("opts", [{"shared_history": False}, {"correction_placement": "layers"},
                                  {"cls_readout": True}, {"corrections": False}],
                         ids=["per-layer-histories", "corrections-every-layer", "cls", "no-corrections"])
def test_variants_same_function(opts):
    m = load(EXAMPLES / "even_ones.tm")
    taps = same_taps(compile_tf(m, steps=16, **opts), tapes(m, 3, seed=3))
    if opts.get("cls_readout"):  # θ_cls's -1 (reject) is kept exactly
        assert set(np.unique(taps[:, :, -1])) <= {-1, 0, 1}


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(grid=False, max_states=4, max_symbols=3), st.integers(0, 2**31))
def test_random_machines_same_function(m, seed):
    same_taps(compile_tf(m, steps=12), tapes(m, 2, seed=seed, max_len=5))


def test_the_branch_and_bound_path_is_the_same_function():
    """Every attention by the branch-and-bound lookup (the path for queries whose ``u``
    and θ do not single out one key pattern), resumed mid-step in the kernel: the same
    taps as the dense path."""
    m = load(EXAMPLES / "bb4.tm")
    c = compile_tf(m, steps=24)
    same_taps(c, tapes(m, 2), ProgramEngine(c.net, prefix=False))


def test_rows_are_the_ones_that_compute_a_new_value():
    """Most of the body's rows are identities or duplicates (Prop. 3.4's rounds after 0/1
    values, the units every layer carries, the query rows repeated layer after layer): the
    program runs under a tenth of them, and every Claim C.5 query but the first extends
    the one before (its pattern over every key bit but the one it tests)."""
    c = compile_tf(load(EXAMPLES / "binary_counter.tm"), steps=1000)
    sp = ProgramEngine(c.net).sp
    assert sp.scale == 3 and 0 < sp.rows_run < sp.net_rows / 10
    c5 = [t for t, n in enumerate(sp.attn_names) if n.startswith("S.c5.")]
    for t in c5[2:]:
        assert int(sp.a_regs[t, AI_BASE]) == t - 1, sp.attn_names[t]
    assert int(sp.a_regs[c5[0], AI_BASE]) == int(sp.a_regs[c5[1], AI_BASE]) == sp.attn_names.index("S.c4")


def test_an_edited_transition_table_is_followed():
    """Lemma C.1's table with one weight changed (``inc 0 -> 1 L back`` no longer enters
    ``back``): the engine reads the edited weights and gives the dense path's taps on the
    edited network, which differ from the construction's."""
    m = load(EXAMPLES / "binary_counter.tm")
    c = compile_tf(m, steps=20)
    body = next(o for o in c.net.nodes if isinstance(o, Decode)).body
    w = next(o for o in body.nodes if o.name == "S.c1.next.lin").weight
    row = list(body.spaces["S.c1.next.lin"]).index("st:back")
    vals = w.vals.copy()
    vals[np.flatnonzero(w.rows == row)[0]] = 0.0
    net = edit_body(c, "S.c1.next.lin", lambda o: dataclasses.replace(o, weight=type(w)(w.shape, w.rows, w.cols, vals)))
    before = same_taps(c, ["0110"])
    after = same_taps(c, ["0110"], net=net)
    assert not np.array_equal(before, after)


def test_verify_against_the_interpreter():
    m = load(EXAMPLES / "bb4.tm")
    rep = verify_compiled(compile_tf(m, steps=120), inputs=["", "1"], engines=["program"])
    assert rep.ok and rep.first is None
    c = compile_tf(load(EXAMPLES / "binary_counter.tm"), steps=3000)
    assert dict(c.run("0" * 10, engine="program")) == run_machine(c.source, "0" * 10, 3000).report()


def test_mutation_a_wrong_query_base_is_caught():
    """The program's own plan broken on purpose: Claim C.5's last query extends C.4's
    pattern as if the bits it shares were all its key bits (its found bits ignored)."""
    c = compile_tf(load(EXAMPLES / "binary_counter.tm"), steps=40)
    eng = ProgramEngine(c.net)
    t = max(t for t, n in enumerate(eng.sp.attn_names) if n.startswith("S.c5."))
    dop = int(eng.prog.ameta[int(eng.sp.a_regs[t, AI_META]), K.A_DOP])
    eng.sp.a_regs[t, AI_BASE], eng.sp.a_regs[t, AI_FROM] = eng.sp.attn_names.index("S.c4"), dop - 1
    with pytest.raises(AssertionError):
        same_taps(c, ["0000"], eng)


def test_mutation_a_wrong_row_weight_is_caught():
    """One weight of the engine's program (not of the net) changed: caught."""
    c = compile_tf(load(EXAMPLES / "bb4.tm"), steps=30)
    eng = ProgramEngine(c.net)
    multi = np.flatnonzero(np.diff(eng.sp.ptr.astype(np.int64)) >= 2)
    eng.sp.w[int(eng.sp.ptr[multi[len(multi) // 2]])] += 1.0
    with pytest.raises((AssertionError, EngineRefused)):
        same_taps(c, tapes(load(EXAMPLES / "bb4.tm"), 3), eng)


def test_refusals_name_the_reason():
    c = compile_tf(load(EXAMPLES / "bb3.tm"), steps=10)
    half = edit_body(c, "S.c4", lambda o: dataclasses.replace(o, null_key=o.null_key + 0.5))
    with pytest.raises(EngineRefused, match="not an integer"):
        ProgramEngine(half)
    # the null key raised by one: the items tie it (the output would mix both): refused at that step
    tie = edit_body(c, "S.c4", lambda o: dataclasses.replace(o, null_key=o.null_key + np.sign(o.null_key)))
    with pytest.raises(EngineRefused, match="decoder step"):
        ProgramEngine(tie).run(c.encode(["", "1"]))
    soft = compile_tf(load(EXAMPLES / "bb3.tm"), steps=10, attention="softmax", beta=20.0)
    with pytest.raises(EngineRefused, match="softmax"):
        soft.run("", engine="program")
    assert all(isinstance(op, (Affine, Attention)) or op.kind in ("relu", "slice", "concat")
               for op in next(o for o in c.net.nodes if isinstance(o, Decode)).body.nodes)


def test_mutation_a_lost_change_is_caught():
    """The event-driven rows (a row runs only when an input changed, its sum kept and told
    of each change): one reader left out of a register's fan-out, so that row keeps a
    stale sum when the register changes: caught at some step."""
    c = compile_tf(load(EXAMPLES / "bb4.tm"), steps=30)
    eng = ProgramEngine(c.net)
    kept = eng._kept_sums

    def lossy():
        inc = kept()
        inc[2][inc[2].size // 2] = 0.0
        return inc

    eng._kept_sums = lossy
    with pytest.raises((AssertionError, EngineRefused)):
        same_taps(c, tapes(load(EXAMPLES / "bb4.tm"), 3), eng)
