"""The streamed, vectorised decode of an RCNN machine-mode run (tm2nn/backends/rcnn/trace_decode.py)
and the fused engine's stream (``GridEngine.stream``): the same runs and the same errors as
the per-step decode they replace (``trace_decode.per_step_run``, made of the library's
per-step pieces), the same states as the whole run, a corrupted cell caught by ``verify``, and the
refusals of the new memory model."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import tm2nn
from tm2nn import interrupt
from tm2nn.backends.rcnn import trace_decode
from tm2nn.backends.rcnn.encoding import HEAD, unpack
from tm2nn.backends.rcnn.grid_engine import GridEngine
from tm2nn.backends.rcnn.runtime import GridModel
from tm2nn.backends.rcnn.trace_decode import per_step_lowered, per_step_run, value_tolerance
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.limits import set_memory_limit
from tm2nn.syntax import load
from tm2nn.verify.check import verify_compiled

from ...conftest import EXAMPLES

compile_rcnn = partial(tm2nn.compile, backend="rcnn")

#: machine: (T, max input, inputs): bb3 halts long before its bound (a fixed point the
#: engine broadcasts); the counter's longer inputs run all L filter steps and lose the head
CASES = {"bb3": (25, 2, ["", "1", "11"]), "binary_counter": (3, 4, ["", "0110", "111"]),
         "binary_increment": (6, 3, ["1", "101"])}


def per_step_decode(gm: GridModel, grids: np.ndarray, text: str):
    """The decode before it was streamed (:func:`~tm2nn.backends.rcnn.trace_decode.per_step_run`)."""
    return per_step_run(gm.chain, gm.code, gm.window, grids, text, gm.steps)


def streamed_lowered(gm: GridModel, grids: np.ndarray, text: str):
    """The lowered machine's run, streamed (the chain maps a few different ones to one source run)."""
    return trace_decode.decode_grids(gm.chain, gm.code, gm.window, grids).lowered(text)


def outcome(f, *args):
    try:
        return "ok", f(*args)
    except Tm2nnError as e:
        return "error", e.message
    except ValueError as e:  # a decoded run that is none of the lowered machine (the chain's mapping)
        return "error", str(e)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    steps, max_input, texts = CASES[request.param]
    c = compile_rcnn(load(EXAMPLES / f"{request.param}.tm"), steps=steps, max_input=max_input)
    gm = GridModel(c)
    return c, gm, texts, c.runner("fused")(gm.grids(texts))


@pytest.mark.parametrize("block", [None, 1])
def test_the_streamed_decode_is_the_per_step_decode(case, block, monkeypatch):
    """Whole runs, traces included, in blocks of the whole run and of one step."""
    _c, gm, texts, states = case
    if block:
        monkeypatch.setattr(trace_decode, "BLOCK_CELLS", block * states[0, 0].size)
    for s, text in zip(states, texts):
        want = per_step_decode(gm, s, text)
        assert gm.decode(s, text) == want and want.trace is not None
        # the lowered machine's run too (the chain maps a few different ones to one source run)
        assert streamed_lowered(gm, s, text) == per_step_lowered(gm.chain, gm.code, gm.window, s, text)


def corruptions(gm: GridModel, s: np.ndarray, rng) -> list[np.ndarray]:
    """Grids of a run with one thing broken: at random places, a value just off the code
    (and one off by less than the tolerance, which decodes), a
    tape digit flipped (at one step, and from a step on), a NaN; then a second head, the
    start grid's head gone, the head's state digits moved, the grid frozen mid-run, a tape
    cell away from the head written."""
    D = gm.code.n_digits
    unit = 3.0 ** -(D - 1)
    out = []
    n, h, w = s.shape

    def head_of(k):
        return tuple(int(i[0]) for i in np.nonzero(unpack(np.rint(s[k] / unit).astype(np.int64), D)[..., HEAD]))

    for _ in range(2):
        k, r, c = int(rng.integers(n)), int(rng.integers(h)), int(rng.integers(w))
        tol = value_tolerance(D) * unit  # just past the decode's tolerance, and well within it
        for change in (1.5 * tol, -0.5 * tol, 3 ** (D - 2) * unit, -(3 ** (D - 2)) * unit, 3 ** (D - 4) * unit, np.nan):
            x = s.copy()
            x[k, r, c] += np.float32(change) if s.dtype == np.float32 else change
            out.append(x)
        x = s.copy()
        x[k:, r, c] += s.dtype.type(3 ** (D - 2) * unit)
        out.append(x)
    head_digit = s.dtype.type(3 ** (D - 4) * unit)
    (r0, c0), (r1, c1) = head_of(0), head_of(1)
    x = s.copy()
    x[1, r1, (c1 + 1) % w] += head_digit  # a second head (a start-state one)
    out.append(x)
    x = s.copy()
    x[0, r0, c0] -= head_digit  # the start grid without its head
    out.append(x)
    x = s.copy()
    x[1, r1, c1] += s.dtype.type(2 * unit)  # the state digits of step 1's head
    out.append(x)
    x = s.copy()  # a net stuck from step 2 on: the same grid, with its head, again and again
    x[3:] = x[2]
    out.append(x)
    x = s.copy()  # a tape cell away from the head written from step 2 on
    far = (c1 + w // 2) % w
    flip = -1 if np.rint(x[2, r1, far] / unit) >= 3 ** (D - 2) / 2 else 1
    x[2:, r1, far] += s.dtype.type(flip * 3 ** (D - 2) * unit)
    out.append(x)
    return out


def test_corrupted_grids_give_the_per_step_decodes_answer(case):
    """Every kind of broken grid: the same error (message for message) or, when the
    broken grid still decodes, the same run."""
    _c, gm, texts, states = case
    rng = np.random.default_rng(7)
    seen = set()
    for s, text in zip(states, texts):
        for x in corruptions(gm, s, rng):
            want = outcome(per_step_decode, gm, x, text)
            assert outcome(gm.decode, x, text) == want
            assert outcome(streamed_lowered, gm, x, text) == outcome(per_step_lowered, gm.chain, gm.code, gm.window,
                                                                     x, text)
            seen.add(want[1].split(" ")[0] if want[0] == "error" else "ok")
    assert {"from_value:", "decode:", "step", "the"} <= seen  # value, cell/heads, tape, start grid


def test_a_decoder_that_skips_changed_cells_is_caught(case, monkeypatch):
    """Mutation: a decoder that reads only the first step of each block's changes (a
    stale cell code for every later step) gives other runs than the per-step decode."""
    _c, gm, texts, states = case
    monkeypatch.setattr(trace_decode, "BLOCK_CELLS", 4 * states[0, 0].size)
    real = trace_decode.TraceDecoder._changes

    def first_step_only(self, v):
        s, r, c = real(self, v)
        keep = s == 0
        return s[keep], r[keep], c[keep]

    monkeypatch.setattr(trace_decode.TraceDecoder, "_changes", first_step_only)
    assert any(outcome(gm.decode, s, t) != outcome(per_step_decode, gm, s, t) for s, t in zip(states, texts))


def test_the_stream_is_the_whole_run_block_for_block(case):
    """``GridEngine.stream`` through a ring of a few states gives ``run``'s states bit for
    bit, the fixed point's broadcast tail included, with the same statistics."""
    c, gm, texts, _states = case
    x = gm.grids(texts)
    eng = GridEngine(c.net, gm.dtype)
    whole = eng.run(x)
    stats = eng.stats
    got, k = [], 0
    for k0, block in eng.stream(x, block_bytes=3 * x[0].nbytes * len(x)):
        assert k0 == k and (block.shape[1] <= 3 or block.strides[1] == 0)  # the ring, or the fixed point's tail
        got.append(np.array(block))
        k += block.shape[1]
    assert np.array_equal(np.concatenate(got, axis=1).view(np.uint32), whole.view(np.uint32))
    assert eng.stats == stats


def test_verify_catches_a_corrupted_cell_in_the_stream(monkeypatch):
    """Mutation: the fused engine's stream with one tape cell flipped at one step (away
    from the head): verify reports the step, not ok; unbroken, it is ok."""
    m = load(EXAMPLES / "binary_increment.tm")
    c = compile_rcnn(m, steps=6, max_input=3)
    assert verify_compiled(c, inputs=["101"], use_onnx=False, engines=["fused"]).ok
    real = GridEngine.stream
    unit = 3.0 ** -(GridModel(c).code.n_digits - 1)

    def broken(self, grids, progress=None, **kw):
        for k0, block in real(self, grids, progress, **kw):
            if k0 <= 5 < k0 + block.shape[1]:
                block = block.copy()
                block[:, 5 - k0, 0, -1] += np.float32(-unit * 3 ** (GridModel(c).code.n_digits - 2))
            yield k0, block

    monkeypatch.setattr(GridEngine, "stream", broken)
    rep = verify_compiled(c, inputs=["101"], use_onnx=False, engines=["fused"])
    assert not rep.ok and rep.first.field == "encoding" and "the decoded tape changed" in str(rep.first.got)


def test_a_run_that_halts_mid_step_is_a_mismatch_not_a_traceback(monkeypatch):
    """A decoded run the source machine cannot map back (the lowered machine halted
    mid-step, a ``ValueError`` of the chain's mapping) is a verify failure with its reason."""
    c = compile_rcnn(load(EXAMPLES / "binary_increment.tm"), steps=6, max_input=3)

    def mid_step(self, text, steps):
        raise ValueError("lowered run halted in 'inc~-', which is mid-step")

    monkeypatch.setattr(trace_decode.TraceDecoder, "result", mid_step)
    rep = verify_compiled(c, inputs=["101"], use_onnx=False, engines=["fused"])
    assert not rep.ok and rep.first.field == "encoding" and "mid-step" in str(rep.first.got)


def test_the_refusals_are_the_new_memory_model():
    """Compile refuses on the work, (L + 1)·H·W cells, and names what torch would hold;
    torch and onnxruntime, which return every grid, are refused at run time against the
    memory limit; the fused engine streams the same run in a fixed buffer."""
    with pytest.raises(Tm2nnError, match=r"refusing to compile: T = 100000 needs 600,011 filter steps.* grid cells "
                                         r"per input over the run .*GiB of them per input"):
        compile_rcnn(load(EXAMPLES / "bb3.tm"), steps=10**5)
    c = compile_rcnn(load(EXAMPLES / "binary_increment.tm"), steps=6, max_input=3)
    before = set_memory_limit(1 << 16)
    try:
        with pytest.raises(Tm2nnError, match=r"the states of 1 grid\(s\) of .* \(the net's output, and its copy\)"):
            c.run("101", engine="torch")
    finally:
        set_memory_limit(before)


def test_ctrl_c_reports_the_steps_streamed_so_far(monkeypatch):
    """Ctrl-C during a streamed run: the report of what was decoded, a run cut short."""
    m = load(EXAMPLES / "binary_counter.tm")
    c = compile_rcnn(m, steps=6, max_input=3)
    monkeypatch.setattr(interrupt, "requested", lambda: True)
    with pytest.raises(interrupt.Interrupted) as e:
        c.run("000", engine="fused")
    (rep,) = e.value.reports
    assert e.value.partial is None and rep is not None and 0 < rep["steps"] < 6 and rep["halted"] is False
    assert rep == run_machine(m, "000", rep["steps"]).report()


def test_a_long_runs_input_space_is_reported_not_a_traceback():
    """rcnn verify at T = 16369 checked its input and then crashed printing the space of
    3^16370 tapes (past the 4300 digits Python writes as text), in the console and in JSON."""
    import json

    from tm2nn.verify.check import VerifyReport, count_text

    assert count_text(12345) == "12,345" and count_text(3 ** 16370) == "about 3·10^7810"
    rep = VerifyReport("rcnn", "given", 1, None, space=3 ** 16370, distinct=1, coverage=0.0)
    assert "of about 3·10^7810 inputs" in rep.covered
    assert json.loads(json.dumps(rep.to_json()))["space"] == "about 3·10^7810"
    assert VerifyReport("rcnn", "given", 1, None, space=3 ** 500, coverage=0.0).to_json()["space"] == 3 ** 500
