"""Welper App. B for §5 (tm2nn.backends.gd_trace.fixed_point): the sign–magnitude format,
App. B's quantisation algorithm, and its network form (quantise_ops / dequantise_ops) in
torch and ONNX against the algorithm, on every value of several formats."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tm2nn.backends.gd_trace import fixed_point
from tm2nn.backends.gd_trace.fixed_point import FixedPoint, dequantise_ops, quantise_ops
from tm2nn.emit import to_torch
from tm2nn.emit.onnx_model import to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.errors import Tm2nnError
from tm2nn.nets import Net, Port, Space

FORMATS = [FixedPoint(0, 0), FixedPoint(1, 0), FixedPoint(2, 1), FixedPoint(3, 0), FixedPoint(4, 2), FixedPoint(5, 5)]


def bits_by_formula(f: FixedPoint, v: float) -> list[int]:
    """Independent of App. B's loop: sigma = [v <= 0], the magnitude in units written in binary."""
    if f.bits == 0:
        return [int(v <= 0)]
    k = int(round(abs(v) / f.unit))
    return [int(v <= 0)] + [int(c) for c in format(k, f"0{f.bits}b")]


@pytest.mark.parametrize("f", FORMATS, ids=str)
def test_encode_is_app_b_and_decode_inverts_it(f):
    vals = f.values()
    assert len(vals) == (2 if f.bits == 0 else 2 ** (f.bits + 1) - 1)
    enc = f.encode(vals)
    assert enc.tolist() == [bits_by_formula(f, v) for v in vals]
    assert np.array_equal(f.decode(enc), vals)
    assert abs(vals).max() == f.max


def quantiser(fmts):
    ops, out = quantise_ops("q/", "x", fmts, [f"v{k}" for k in range(len(fmts))])
    return Net("q", (Port("x", Space(tuple(f"x:{k}" for k in range(len(fmts))))),), tuple(ops), (out,), {})


def all_values(fmts) -> np.ndarray:
    vals = [f.values() for f in fmts]
    L = max(len(v) for v in vals)
    return np.stack([np.resize(v, L) for v in vals], axis=1)


def test_quantiser_net_is_app_b_on_every_value_in_torch_and_onnx():
    net = quantiser(FORMATS)
    X = all_values(FORMATS)
    want = np.concatenate([f.encode(X[:, k]) for k, f in enumerate(FORMATS)], axis=1)
    with torch.no_grad():
        got = to_torch(net, torch.float64)(torch.from_numpy(X)).numpy()
    assert np.array_equal(got, want)
    assert np.array_equal(run_onnx(to_onnx(net, dtype="float64"), X), want)
    # z holds the labels up to rounding: anything within u/4 of the grid gives the same bits
    for d in (0.2, -0.2):
        Xp = X + d * np.array([f.unit for f in FORMATS])
        with torch.no_grad():
            assert np.array_equal(to_torch(net, torch.float64)(torch.from_numpy(Xp)).numpy(), want)


def test_quantiser_ramp_offset_is_what_makes_it_exact(monkeypatch):
    """Mutation: the comparison [t >= 0] as psi(t + u/4) (ramp centred on the grid point
    instead of between grid points) gives half bits; the test above would fail."""
    monkeypatch.setattr(fixed_point, "RAMP_OFFSET", 0.25)
    net = quantiser([FixedPoint(2, 1)])
    X = all_values([FixedPoint(2, 1)])
    with torch.no_grad():
        got = to_torch(net, torch.float64)(torch.from_numpy(X)).numpy()
    assert not np.array_equal(got, FixedPoint(2, 1).encode(X[:, 0]))


@pytest.mark.parametrize("orient", [1.0, -1.0])
def test_dequantiser_reads_every_bit_pattern(orient):
    fmts = [FixedPoint(0, 0), FixedPoint(2, 1), FixedPoint(3, 2)]
    width = sum(f.width for f in fmts)
    params, c = [], 0
    for f in fmts:
        params.append((f, [(c + i, orient) for i in range(f.width)]))
        c += f.width
    ops, out = dequantise_ops("d/", "T", width, params, [f"p{j}" for j in range(len(fmts))], out="theta")
    net = Net("d", (Port("T", Space(tuple(f"T:{i}" for i in range(width)))),), tuple(ops), (out,), {})
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, (64, width))
    T = orient * (2.0 * bits - 1.0) * (1 + rng.uniform(-0.4, 0.4, bits.shape))  # ±1 up to 40 %
    want = np.stack([np.concatenate([[f.decode(b[s:s + f.width])] for f, s in
                                     zip(fmts, np.cumsum([0] + [f.width for f in fmts])[:-1])]) for b in bits])
    with torch.no_grad():
        got = to_torch(net, torch.float64)(torch.from_numpy(T)).numpy()
    assert np.array_equal(got, want)
    assert np.array_equal(run_onnx(to_onnx(net, dtype="float64"), T), want)


def test_format_errors():
    with pytest.raises(Tm2nnError, match="0 <= bits <= 16"):
        FixedPoint(17, 0)
    with pytest.raises(Tm2nnError, match="no fractional bits"):
        FixedPoint(0, 1)
    with pytest.raises(Tm2nnError, match=r"x\(1, 0\) = 0\.25 is not a number of the format sign \+ 2"):
        FixedPoint(2, 1).check(np.array([[0.5], [0.25]]), lambda i: f"x{i}")
    with pytest.raises(Tm2nnError, match="±1"):
        FixedPoint().check([1.0, 0.0], str)
    assert FixedPoint(2, 1).describe() == "sign + 2 magnitude bits, 1 fractional (multiples of 2^-1 up to ±1.5)"
