import sys
from pathlib import Path

import pytest

try:  # pytest-xdist runs 2 workers on 2 cores: intra-op threads would oversubscribe them
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass
try:  # the same for numba's parallel kernels (the fused engines) ...
    import numba

    numba.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass
try:  # ... and onnxruntime's sessions (callers import onnx_session when they run)
    import tm2nn.emit.onnx_runtime as _onnx_runtime

    _session = _onnx_runtime.onnx_session
    _onnx_runtime.onnx_session = lambda model, threads=None: _session(model, 1 if threads is None else threads)
except ImportError:  # pragma: no cover
    pass

ROOT = Path(__file__).resolve().parents[1]
# bench/gen_circuits.py (big random circuits in every format) is shared by bench and tests
sys.path.insert(0, str(ROOT / "bench"))
CORPUS = ROOT.parent / "shared" / "corpus"
EXAMPLES = ROOT / "examples"


def example_circuits() -> list[Path]:
    """The example ``.circ`` files that hold a plain circuit (not a learner)."""
    from tm2nn.ir import Circuit
    from tm2nn.syntax import load

    return [p for p in sorted(EXAMPLES.glob("*.circ")) if isinstance(load(p), Circuit)]


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent")
    return CORPUS


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*argv)`` -> (code, out, err) of the CLI run in-process."""
    from types import SimpleNamespace

    from tm2nn.cli import main

    def run(*argv):
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return SimpleNamespace(code=code, out=out, err=err)
    return run
