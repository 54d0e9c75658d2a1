"""The fused grid engine (tm2nn/backends/rcnn/grid_engine.py, ``--engine fused`` on rcnn)
against the torch module and the interpreter: the same states, the same decoded runs,
the same fixed point; and the mutations the exactness argument rests on (a weight, a
patch position of the incremental recompute) break it."""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np
import pytest

import tm2nn
from tm2nn.backends.rcnn.grid_engine import GridEngine, GridOptions, build_program
from tm2nn.backends.rcnn.runtime import GridModel
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.syntax import load

from ...conftest import EXAMPLES

#: machine mode through the public entry (options validated once, by the backend)
compile_rcnn = partial(tm2nn.compile, backend="rcnn")

#: machine: (T, max input, inputs, halts): bb3 halts long before its bound (the loop's
#: fixed point); some of the counter's inputs halt, the others run all L filter steps
CASES = {"bb3": (25, 2, ["", "1", "11"], True), "binary_counter": (3, 4, ["", "1", "0110", "111"], False)}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    """The compiled machine, its start grids and the torch module's states."""
    name = request.param
    steps, max_input, texts, halts = CASES[name]
    m = load(EXAMPLES / f"{name}.tm")
    c = compile_rcnn(m, steps=steps, max_input=max_input)
    gm = GridModel(c)
    x = gm.grids(texts)
    return dataclasses.make_dataclass("Case", ["m", "c", "gm", "texts", "x", "want", "halts"])(
        m, c, gm, texts, x, c.runner("torch")(x, batch_size=len(texts)), halts)


def module_trips(states: np.ndarray) -> int:
    """The trips the module's ``Loop(until_fixed)`` runs: to the first whose output is
    its input for every grid of the batch."""
    same = [np.array_equal(states[:, i], states[:, i - 1]) for i in range(1, states.shape[1])]
    return same.index(True) + 1 if True in same else states.shape[1] - 1


def test_fused_states_are_the_modules_and_decode_to_the_interpreters(case):
    eng = GridEngine(case.c.net, np.float32)
    got = eng.run(case.x)
    assert got.shape == case.want.shape and got.dtype == case.want.dtype == np.float32
    # the grids agree to within the float32 rounding of a row's sum (measured: bit for bit)
    assert np.abs(got - case.want).max() <= 1e-6
    for s, w, text in zip(got, case.want, case.texts):
        mine = case.gm.decode(s, text)
        assert mine.report() == case.gm.decode(w, text).report()
        assert mine.report() == run_machine(case.m, text, case.gm.steps).report()
    # the fixed point: the module's trips, and copies after it
    st = eng.stats
    assert st.trips == module_trips(case.want)
    assert (st.trips < case.gm.filter_steps) == case.halts
    assert np.array_equal(got[:, st.trips:], np.broadcast_to(got[:, st.trips:st.trips + 1], got[:, st.trips:].shape))
    # incremental: the first trip evaluates every cell, each later one a few
    cells = case.x[0].size * len(case.texts)
    assert cells < st.evaluated < cells + 20 * len(case.texts) * st.trips


def test_batches_tiles_threads_and_the_dense_baseline_give_the_same_states(case):
    """The exactness argument (docs/rcnn.md, "The fused engine"): a cell's value is a
    function of its patch, bit for bit, whatever its tile, its place in the tile or its
    thread; so evaluating only the cells whose patch changed gives the dense run's states."""
    run = case.c.runner("fused")
    whole = run(case.x, batch_size=len(case.texts))
    dense = GridEngine(case.c.net, options=GridOptions(incremental=False))
    assert np.array_equal(dense.run(case.x).view(np.uint32), whole.view(np.uint32))
    # every cell of a grid at every trip up to that grid's own fixed point
    assert dense.stats.evaluated == case.x[0].size * sum(module_trips(whole[g:g + 1]) for g in range(len(whole)))
    assert np.array_equal(run(case.x, batch_size=1), whole)  # one grid at a time: its own fixed point
    assert np.array_equal(GridEngine(case.c.net, options=GridOptions(tile=3)).run(case.x), whole)
    for threads in (1, 2):  # each thread its own grids
        assert np.array_equal(GridEngine(case.c.net, options=GridOptions(threads=threads)).run(case.x), whole)


def test_a_perturbed_weight_changes_the_states(case):
    """Mutation: V1's first weight (the centre cell's copy) off by 2^-8 puts the bumps'
    inputs outside their tolerance, and the states leave the module's."""
    eng = GridEngine(case.c.net)
    vals = eng.prog.vals.copy()
    vals[0] += np.float32(2 ** -8)
    eng.prog = dataclasses.replace(eng.prog, vals=vals)
    assert np.abs(eng.run(case.x) - case.want).max() > 0.01


@pytest.mark.parametrize("drop", range(5))
def test_a_missing_neighbour_in_the_incremental_recompute_changes_the_states(case, drop):
    """Mutation: forget one patch position the filter reads when choosing the cells to
    evaluate again, and a cell next to a change keeps a stale value."""
    eng = GridEngine(case.c.net)
    assert len(eng.prog.reads) == 5  # V1 reads the centre and its 4 neighbours (B.2)
    eng.prog = dataclasses.replace(eng.prog, reads=np.delete(eng.prog.reads, drop, 0))
    assert not np.array_equal(eng.run(case.x), case.want)


@pytest.mark.slow  # compiles the float64 kernels (~3 s on a fresh machine, then cached)
def test_float64_states_are_the_float64_modules():
    """The kernels in float64 (the dtype of a model past float32's 12 digits) against the
    torch module emitted in float64, on bb3's filter."""
    import torch

    from tm2nn.emit.torch_emit import run_torch

    m = load(EXAMPLES / "bb3.tm")
    c = compile_rcnn(m, steps=8, max_input=2)
    gm = GridModel(c)
    x = gm.grids(["", "11"]).astype(np.float64)
    want = run_torch(c.torch(dtype=torch.float64), x, batch_size=2)
    got = GridEngine(c.net, np.float64).run(x)
    assert got.dtype == want.dtype == np.float64
    assert np.abs(got - want).max() <= 1e-14
    for s, text in zip(got, ["", "11"]):
        assert gm.decode(s, text).report() == run_machine(m, text, 8).report()


def test_run_and_verify_through_the_api():
    m = load(EXAMPLES / "bb3.tm")
    c = compile_rcnn(m, steps=25, max_input=2)
    assert c.run(["", "1"], engine="fused") == [run_machine(m, t, 25).report() for t in ("", "1")]
    rep = c.verify(["", "1", "11"], engines=["fused"])
    assert rep.ok


def test_cli_verify_and_run_on_the_fused_engine(run_cli):
    r = run_cli("verify", EXAMPLES / "bb3.tm", "--backend", "rcnn", "--steps", "25", "--engines", "fused",
                "--input", "")
    assert r.code == 0 and "fused" in r.out
    r = run_cli("run", EXAMPLES / "bb3.tm", "--backend", "rcnn", "--max-steps", "25", "--engine", "fused", "--json")
    assert r.code == 0 and '"sigma": 5' in r.out


def test_an_edited_model_is_refused():
    """A loaded model whose weights are not the construction's: the engine reads
    ``compiled.net`` (the construction's), so it refuses rather than run other weights."""
    c = compile_rcnn(load(EXAMPLES / "bb3.tm"), steps=5, max_input=0)
    c.edited = "states.body.filter.body.V5"
    with pytest.raises(Tm2nnError, match="fused engine runs the construction"):
        c.runner("fused")


def test_other_nets_are_refused():
    from tm2nn.nets import Affine, Net, Port, Space, SparseMatrix

    x = Space(("x",))
    net = Net("affine", (Port("in", x),), (Affine("a", ("in",), weight=SparseMatrix.from_dense(np.eye(1)), out=x),),
              ("a",))
    with pytest.raises(Tm2nnError, match="rcnn machine-mode net"):
        build_program(net)
