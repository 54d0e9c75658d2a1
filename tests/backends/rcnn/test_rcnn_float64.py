"""RCNN machine mode past float32's 257 states (Goel et al., Def. 5 / B.2): where the B.1.1
cell code has more than 12 digits the net is emitted in float64, in torch and ONNX, and
still matches the interpreter at every step; float32 stays what smaller machines get; the
float64 limit (30 digits) is derived, and refused up front beyond it.  Also: the ONNX
emitter's float64 mode on the other ops (docs/rcnn.md, "float32, with no rounding layer")."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto

import tm2nn
from tests.conftest import EXAMPLES
from tm2nn.backends.rcnn import filter_net
from tm2nn.backends.rcnn.filter_net import (
    K_SHIFT,
    MAX_DIGITS_FLOAT32,
    MAX_DIGITS_FLOAT64,
    bump_grid,
    max_digits,
    net_dtype,
)
from tm2nn.backends.rcnn.trace_decode import value_tolerance
from tm2nn.emit.onnx_model import to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.errors import Tm2nnError
from tm2nn.interp import run_machine
from tm2nn.syntax import load, parse_text
from tm2nn.verify.check import verify_compiled

#: machine mode through the public entry (options validated once, by the backend)
compile_rcnn = partial(tm2nn.compile, backend="rcnn")

#: bb3's rules, then a ring of states the start never reaches (they only widen the cell code).
PADDED = """machine bb3_padded {{
  alphabet: 0 1
  blank: 0
  start: A
  halt: Z
  A 0 -> 1 R B
  A 1 -> 1 R Z
  B 0 -> 1 L B
  B 1 -> 0 R C
  C 0 -> 1 L C
  C 1 -> 1 L A
{ring}
}}"""


#: bb3 halts within 21 steps on every input
STEPS = 21


def padded_bb3(extra: int):
    ring = "\n".join(f"  U{i} 0 -> 1 R U{(i + 1) % extra}" for i in range(extra))
    (m,) = parse_text(PADDED.format(ring=ring), "tm", "padded")
    return m


@pytest.fixture(scope="module")
def wide():
    """bb3 with 248 unreachable states: 262 states in B.1.2 form, 13 digits."""
    m = padded_bb3(248)
    return m, compile_rcnn(m, steps=STEPS, max_input=2)


def float_types(model: onnx.ModelProto) -> set[int]:
    """Element types of every float initializer, graph input/output and Cast target,
    loop bodies included."""
    floats = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}
    found = set()

    def walk(g: onnx.GraphProto):
        found.update(t.data_type for t in g.initializer if t.data_type in floats)
        for v in [*g.input, *g.output]:
            t = v.type.tensor_type.elem_type
            if t in floats:
                found.add(t)
        for n in g.node:
            for a in n.attribute:
                if a.name == "to" and a.i in floats:
                    found.add(a.i)
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in floats:
                    found.add(a.t.data_type)
    walk(model.graph)
    return found


# -- the limits -------------------------------------------------------------------------------
def test_the_limits_are_derived_from_the_dtype():
    assert max_digits(np.float32) == MAX_DIGITS_FLOAT32 == 12
    assert max_digits(np.float64) == MAX_DIGITS_FLOAT64 == 30
    # g >= the spacing of the dtype's numbers in [2, 4), where V1's shift puts every input
    assert bump_grid(30) >= 2.0 ** -51 > bump_grid(31)
    assert bump_grid(12) >= 2.0 ** -22 > bump_grid(13)
    assert [net_dtype(d) for d in (5, 12, 13, 30)] == ["float32", "float32", "float64", "float64"]
    with pytest.raises(Tm2nnError, match=r"31 base-3 digits.*float64 up to 30 digits.*67,108,865 states"):
        net_dtype(31)
    # the value form carries at least as many digits as the net (encoding.MAX_DIGITS_VALUE)
    from tm2nn.backends.rcnn.encoding import MAX_DIGITS_VALUE

    for dt, limit in filter_net.MAX_DIGITS.items():
        assert MAX_DIGITS_VALUE[dt] >= limit


def bumps(D: int, dtype, n: int = 6000, seed: int = 0):
    """Definition 5's first three layers on one bump per sampled cell value, as
    :func:`build_filter` builds them (breakpoints ``c + K + (−4g, −2g, 2g, 4g)``,
    ``ψ = (σ1 − σ2 + σ4 − σ3)/2g − 1``), in ``dtype``, at inputs within the tolerance
    ``1.5g`` of the value (want ψ = 1) and of the closest other domain value, ``h/2`` away
    (want 0).  Also whether every breakpoint is a ``dtype`` number."""
    L = np.longdouble  # 64-bit significand: checks |x − v| <= 1.5g at float64's limit
    rng = np.random.default_rng(seed)
    g, top = float(bump_grid(D)), 3 ** (D - 1)
    v = rng.integers(-top // 3, top + top // 6, n).astype(L) / L(top)  # cell values in [-1/3, 1.17]
    c = np.round(v.astype(np.float64) / g) * g
    offs, sides = np.array([-4 * g, -2 * g, 2 * g, 4 * g]), np.array([1.0, 1.0, -1.0, -1.0])
    points = c[:, None] + K_SHIFT + offs
    representable = (points.astype(dtype).astype(L) == c[:, None].astype(L) + L(K_SHIFT) + offs.astype(L)).all()
    bias = (-sides * points).astype(dtype)
    inv = dtype(1.0 / (2 * g))
    psis = []
    for shift in (0, 1, -1):
        w = v + L(shift) / L(2 * top)
        xf = w.astype(dtype)
        sp = np.spacing(xf).astype(np.float64)
        j = np.floor((1.5 * g - sp / 2) / sp).astype(np.int64) * rng.choice([-1, 0, 1], n)  # the far ends, or 0
        x = xf + (j * sp).astype(dtype)
        near = np.abs(x.astype(L) - w) <= L(1.5 * g)  # (float spacing can overshoot near a binade)
        z = x[near] * dtype(1.0) + dtype(K_SHIFT)
        s = np.maximum(sides.astype(dtype) * z[:, None] + bias[near], dtype(0))
        psis.append(s[:, 0] * inv - s[:, 1] * inv - s[:, 2] * inv + s[:, 3] * inv - dtype(1.0))
    return psis, bool(representable)


def exact(psis) -> bool:
    on, right, left = psis
    return bool((on == 1).all() and (right == 0).all() and (left == 0).all())


@pytest.mark.parametrize("dtype, limit", [(np.float32, 12), (np.float64, 30)])
def test_bumps_are_exact_up_to_the_limit(dtype, limit):
    for D in (limit - 1, limit):
        psis, representable = bumps(D, dtype)
        assert representable and exact(psis), D
    # one digit more and the argument's premise fails: some breakpoints are not dtype numbers
    psis, representable = bumps(limit + 1, dtype)
    assert not representable
    if dtype is np.float32:  # and in float32 the bumps then go wrong (float64 at 31: not guaranteed)
        assert not exact(psis)


def test_the_filter_refuses_float32_past_12_digits(wide):
    from tm2nn.backends.rcnn.filter_net import build_filter
    from tm2nn.backends.rcnn.filter_spec import machine_table
    from tm2nn.passes.rcnn_form import to_rcnn_form

    m, _c = wide
    net = build_filter(machine_table(to_rcnn_form(m).machine))
    assert net.n_digits == 13
    x = np.full((2, 9), 1 / 6)
    with pytest.raises(Tm2nnError, match="13 base-3 digits.*float32 up to 12 digits.*use float64"):
        net(x, np.float32)
    with pytest.raises(Tm2nnError, match="float32 or float64"):
        net(x, np.float16)
    assert np.isfinite(net(x, np.float64)).all()
    assert 0.047 < value_tolerance(13) < 0.094 and value_tolerance(13) == 1.5 * net.g * 3 ** 12


def test_past_the_float64_limit_compile_refuses_up_front(monkeypatch):
    import tm2nn.backends.rcnn.machine_mode as machine_mode

    def never(*_a, **_k):
        raise AssertionError("built the filter before refusing")
    monkeypatch.setattr(filter_net, "MAX_DIGITS_FLOAT64", 12)  # sign_sum_3x2's 13 digits are then too many
    monkeypatch.setattr(machine_mode, "filter_for", never)  # compile's own name for build.filter_for
    with pytest.raises(Tm2nnError, match=r"refusing to compile: 'sign_sum_3x2' lowers to 308 states.*"
                                         r"13 base-3 digits per cell.*float64 up to 12 digits"):
        compile_rcnn(load(EXAMPLES / "sign_sum_3x2.tm"), steps=5, max_input=2)


# -- float32 stays the default -----------------------------------------------------------------
def test_a_small_machine_is_still_float32():
    c = compile_rcnn(load(EXAMPLES / "bb3.tm"), steps=10, max_input=2)
    assert c.options["digits"] <= 12
    assert "dtype" not in c.options and "dtype" not in c.input_encoding
    assert c.dtype == torch.float32 and c.module().dtype == torch.float32
    assert not any(r[0] == "precision" for r in c.bounds)
    model = c.onnx()
    assert float_types(model) == {TensorProto.FLOAT}
    assert model.SerializeToString() == to_onnx(c.net, c.metadata()).SerializeToString()
    assert c.runner("onnxruntime")(c.encode(["1"])).dtype == np.float32


# -- float64 machines --------------------------------------------------------------------------
def test_a_wide_machine_runs_in_float64_and_matches_at_every_step(wide):
    m, c = wide
    assert c.options["states"] == 262 and c.options["digits"] == 13
    assert c.options["dtype"] == c.input_encoding["dtype"] == "float64"
    assert c.dtype == torch.float64 and c.module().dtype == torch.float64
    model = c.onnx()
    onnx.checker.check_model(model, full_check=True)  # types agree everywhere, loop body included
    assert float_types(model) == {TensorProto.DOUBLE}
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [TensorProto.DOUBLE]
    grids = c.encode(["", "1"])
    assert grids.dtype == np.float64
    for engine in ("torch", "onnxruntime"):
        assert c.runner(engine)(grids).dtype == np.float64
    inputs = ["", "1", "01", "10"]
    rep = verify_compiled(c, inputs=inputs)
    assert rep.ok and rep.first is None and rep.n_inputs == len(inputs)
    assert set(rep.engines) == {"torch", "onnxruntime"}
    assert max(rep.max_deviation.values()) < 1e-12  # float32 could not get below ~1e-8
    for engine in ("torch", "onnxruntime"):
        assert c.run("", engine=engine) == run_machine(m, "", STEPS).report()


def test_the_same_run_in_float32_goes_wrong(wide):
    """The float64 choice is needed: the same net run in float32 loses the run."""
    from tm2nn.backends.rcnn.runtime import GridModel
    from tm2nn.emit.torch_emit import run_torch, to_torch
    from tm2nn.verify.runs import compare_runs

    _m, c = wide
    gm = GridModel(c)
    states = run_torch(to_torch(c.net, torch.float32), gm.grids([""]).astype(np.float32))
    try:
        got = gm.decode(states[0].astype(np.float64), "")
    except Tm2nnError:  # a grid that is no B.1.1 code
        return
    assert compare_runs(run_machine(c.source, "", STEPS, trace=True), got) is not None


def test_info_says_float64(wide):
    _m, c = wide
    rows = {r[0]: r for r in c.info()["bounds"]}
    assert "float64" in rows["precision"][1] and "13 base-3 digits" in rows["precision"][1]


def test_float64_model_files_eval(wide, run_cli, tmp_path):
    """compile -o then eval from .onnx, .pt and .safetensors: the loaders rebuild float64 nets."""
    from tm2nn.api import load_model

    m, c = wide
    for suffix, inp in ((".onnx", "01"), (".pt", ""), (".safetensors", "1")):
        out = tmp_path / f"m{suffix}"
        c.save(out)
        if suffix == ".onnx":
            assert float_types(onnx.load(str(out))) == {TensorProto.DOUBLE}
            loaded = load_model(out)
            assert loaded.dtype == torch.float64 and loaded.edited is None
        r = run_cli("eval", str(out), "--input", inp, "--json")
        want = run_machine(m, inp, STEPS).report()
        assert want["halted"] and r.code == 0 and json.loads(r.out) == want
    r = run_cli("info", str(tmp_path / "m.onnx"), "--json")
    rows = {q: ours for q, ours, _paper in json.loads(r.out)["bounds"]}
    assert rows["precision"].startswith("float64")


@pytest.mark.slow
def test_sign_sum_3x2_compiles_and_verifies_in_float64():
    """The acceptance case: 308 states in B.1.2 form, 13 digits, refused before float64.
    Every step of four inputs in torch, and of ``-+-`` (26 steps, then halts) in
    onnxruntime: each input costs all 635 filter steps, 3 to 5 s per input and engine.
    On the 262-state machine above (13 digits too), the float64 ONNX model's types are
    checked, and it runs four inputs and ``run``'s report in both engines."""
    m = load(EXAMPLES / "sign_sum_3x2.tm")
    c = compile_rcnn(m, steps=26, max_input=3)
    assert c.options["states"] == 308 and c.options["digits"] == 13 and c.options["dtype"] == "float64"
    assert c.options["filter_steps"] == 635
    for inputs, engine in ((["", "+", "+++", "-+-"], "torch"), (["-+-"], "onnxruntime")):
        rep = verify_compiled(c, inputs=inputs, engines=[engine])  # "+++", "-+-" halt at step 26
        assert rep.ok and rep.first is None and rep.n_inputs == len(inputs) and list(rep.engines) == [engine]
        assert rep.max_deviation[engine] < 1e-12


# -- the ONNX emitter's float64 mode on the other ops -------------------------------------------
def test_onnx_float64_emission_of_the_other_ops():
    from tests.core.emit import test_emit_seq as seq
    from tests.core.emit.test_emit import mixed_net, np_eval, np_outputs, rand_inputs
    from tests.core.emit.test_emit_activation import FNS, act_net, in_domain, sample_points

    def model(net):
        m = to_onnx(net, dtype="float64")
        onnx.checker.check_model(m, full_check=True)
        assert float_types(m) == {TensorProto.DOUBLE}
        return m

    def close(got, want, tol=1e-12):
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            assert g.dtype == np.float64
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max(initial=0))))

    net = mixed_net()
    arrays = rand_inputs(net, batch=20)
    close(run_onnx(model(net), *arrays), np_outputs(net, *arrays))
    for binary in (False, True):
        net = seq.decode_net(1, binary=binary)
        tok = seq.tokens(np.random.default_rng(8), 5, 4)
        ref = seq.Ref()
        want = ref.outputs(net, tok)
        assert ref.min_gap > 1e-3  # no near tie of the hard-max scores
        close(run_onnx(model(net), tok), want)
    net = seq.attention_net(2)
    h, mem = seq.attention_inputs(np.random.default_rng(9), 5, 4)
    close(run_onnx(model(net), h, mem), seq.Ref().outputs(net, h, mem))
    for fn in FNS:
        x = in_domain(fn, sample_points())
        net = act_net(fn, x.size)
        close(run_onnx(model(net), x[None, :]), [np_eval(net, x[None, :])["act"]])


def test_memory_grid_in_float64_and_bad_dtypes_refused():
    """The learner's memory layer (W diag(z), the frame left of it, the ones right of
    it) in float64 ONNX equals the float64 torch module exactly; float16 is refused."""
    import torch

    from tm2nn.emit import to_torch
    from tm2nn.nets import MemoryGrid, Net, Port, Space

    z = Space.named("z", range(3))
    w = np.array([[1 / 3, -1 / 3, 1 / 3], [-1 / 3, 1 / 3, 1 / 3]])
    grid = MemoryGrid("mem", ("z",), weight=w, ones=1, left=np.array([[1 / 3, 1.0], [1.0, 1.0]]),
                      out=Space(("cell:value",)))
    net = Net("memory", (Port("z", z),), (grid,), ("mem",))
    x = np.array([[1.0, -1.0, 1.0], [-1.0, -1.0, 1.0]])
    got = run_onnx(to_onnx(net, dtype="float64"), x)
    want = to_torch(net, dtype=torch.float64)(torch.tensor(x)).detach().numpy()
    assert got.dtype == np.float64 and got.shape == (2, 2, 6) and np.array_equal(got, want)
    assert got[0, 0, 0] == 1 / 3 and got[0, 0, 2] == 1 / 3  # the frame's mark, a memorized cell
    with pytest.raises(ValueError, match="float32 or float64"):
        to_onnx(net, dtype="float16")
