"""relu-circuit on the real corpus, bit for bit in torch, onnxruntime and the fused engines
(issue 3 acceptance; issue 20: every engine passes the backend's exactness tests)."""

import numpy as np
import pytest

from tests.conftest import CORPUS
from tm2nn.backends.relu_circuit.layered_engine import LayeredEngine
from tm2nn.compiler import compile as tm2nn_compile
from tm2nn.emit.onnx_model import to_onnx
from tm2nn.emit.onnx_runtime import run_onnx
from tm2nn.emit.torch_emit import run_torch, to_torch
from tm2nn.modelfile.metadata import metadata
from tm2nn.syntax import load
from tm2nn.verify import verify_compiled

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")
ISCAS = ["c17", "c432", "c499", "c880", "c1355", "c1908", "c2670", "c3540", "c5315", "c6288", "c7552"]
EPFL = ["ctrl", "dec", "int2float", "cavlc", "router", "adder"]
ENGINES = ["torch", "onnxruntime", "fused", "fused-float"]


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("name", ISCAS)
def test_iscas85_bit_for_bit(name):
    compiled = tm2nn_compile(CORPUS / "circuits" / "iscas85" / f"{name}.bench")
    rep = verify_compiled(compiled, samples=10_000, seed=85, engines=ENGINES)
    assert rep.mode == ("exhaustive" if name == "c17" else "random")
    assert rep.ok, rep.first
    assert list(rep.engines) == ENGINES


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("name", EPFL)
def test_epfl_bit_for_bit(name):
    compiled = tm2nn_compile(CORPUS / "circuits" / "epfl" / f"{name}.aig")
    rep = verify_compiled(compiled, samples=10_000, seed=7, engines=ENGINES)
    assert rep.ok, rep.first


def _ints(bits: np.ndarray) -> list[int]:
    return [int("".join("1" if b else "0" for b in row[::-1]), 2) for row in bits]


def _both_engines(compiled, x):
    """Torch, onnxruntime and the two fused engines' outputs (the integer one exactly 0/1)."""
    y_t = run_torch(to_torch(compiled.net), x.astype(np.float32)) > 0.5
    y_o = run_onnx(to_onnx(compiled.net, metadata(compiled)).SerializeToString(), x.astype(np.float32)) > 0.5
    y_i = LayeredEngine.for_net(compiled.net).run(x.astype(np.float32))
    assert np.all((y_i == 0) | (y_i == 1))
    y_f = LayeredEngine.for_net(compiled.net, "float").run(x.astype(np.float32)) > 0.5
    return y_t, y_o, y_i == 1, y_f


@needs_corpus
@pytest.mark.slow
def test_c6288_net_multiplies():
    compiled = tm2nn_compile(CORPUS / "circuits" / "iscas85" / "c6288.bench")
    rng = np.random.default_rng(6288)
    a = rng.integers(0, 1 << 16, size=500)
    b = rng.integers(0, 1 << 16, size=500)
    x = np.array([[(int(ai) >> i) & 1 for i in range(16)] + [(int(bi) >> i) & 1 for i in range(16)]
                  for ai, bi in zip(a, b)], dtype=bool)
    for y in _both_engines(compiled, x):
        y = y.copy()
        y[:, [30, 31]] = y[:, [31, 30]]  # the file lists P31 before P30 (corpus README)
        assert _ints(y) == [int(ai) * int(bi) for ai, bi in zip(a, b)]


@needs_corpus
@pytest.mark.slow
def test_epfl_adder_net_adds():
    c = load(CORPUS / "circuits" / "epfl" / "adder.aig")
    compiled = tm2nn_compile(c)
    rng = np.random.default_rng(128)
    pairs = [(int.from_bytes(rng.bytes(16), "little"), int.from_bytes(rng.bytes(16), "little")) for _ in range(300)]
    x = np.array([[(a >> i) & 1 for i in range(128)] + [(b >> i) & 1 for i in range(128)] for a, b in pairs],
                 dtype=bool)
    for y in _both_engines(compiled, x):
        assert _ints(y) == [a + b for a, b in pairs]
