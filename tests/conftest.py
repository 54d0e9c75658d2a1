import os
import sys
from pathlib import Path

import numba  # noqa: F401  (loaded here so that the thread count reaches it)
import pytest
import torch  # noqa: F401

from tm2nn import threads

from .shutdown import pytest_sessionfinish  # noqa: F401  (the workers' final collection)

# pytest-xdist runs 2 workers on 2 cores: one thread each for torch, onnxruntime and numba
# (tm2nn.threads), whatever the default for bulk work, in this process and the CLIs it starts
os.environ["TM2NN_THREADS"] = "1"
threads.set_threads(None)  # torch and numba, loaded here, get it now


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
def xor_circuit(tmp_path):
    """``xor_circuit(n)``: a ``.circ`` of one XOR over ``n`` inputs, written in
    ``tmp_path`` (wide input spaces, cheap to run, no corpus needed)."""
    def write(n: int) -> Path:
        names = [f"x{i}" for i in range(n)]
        path = tmp_path / f"wide{n}.circ"
        path.write_text(f"circuit wide {{\n  input {' '.join(names)}\n  output y\n  y = XOR({', '.join(names)})\n}}\n")
        return path
    return write


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
