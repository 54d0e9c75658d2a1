"""The abbe-sandon activations (f, f* and the float64 parametrisation's fpl) live in the
backend's package and register themselves in the network IR's open activation registry;
the registry names no backend.  A model that uses them still builds and runs in a fresh
process from each of its files: ``tm2nn.load_model`` (.onnx, .safetensors, .pt) and the
manifest's ``load_module`` (.safetensors) load the backend through the registry first."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import tm2nn

from ...conftest import EXAMPLES, ROOT

NAMES = ("abbe_sandon_f", "abbe_sandon_fstar", "abbe_sandon_fpl")
INPUTS = ["000000000", "111111111", "101100101", "010011010"]


def _fresh(code: str) -> str:
    """Run ``code`` in a new interpreter (this tree on the path); its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_registry_names_no_backend_and_the_backend_registers_its_own():
    got = json.loads(_fresh(
        "import json\n"
        "from tm2nn.nets import activations as a\n"
        "before = sorted(a.REGISTRY)\n"
        "import tm2nn.backends.abbe_sandon.backend\n"
        "print(json.dumps([before, sorted(a.REGISTRY), a.get('abbe_sandon_fpl').module]))\n"))
    before, after, module = got
    assert not [n for n in before if n.startswith("abbe_sandon")]
    assert set(NAMES) <= set(after)
    assert module == "tm2nn.backends.abbe_sandon.float64"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A float64 abbe-sandon model of parity8, saved in every format, and its outputs."""
    c = tm2nn.compile(EXAMPLES / "parity8.circ", backend="abbe-sandon", engine="float64")
    assert sorted({op.fn for op in c.net.nodes if op.kind == "activation"}) == ["abbe_sandon_fpl"]
    d = tmp_path_factory.mktemp("abbe_models")
    paths = {ext: d / f"parity8.{ext}" for ext in ("onnx", "safetensors", "pt")}
    for p in paths.values():
        c.save(p)
    want = [r.outputs for r in c.run(INPUTS)]
    x = 2.0 * np.array([[int(b) for b in t] for t in INPUTS], dtype=np.float64) - 1.0
    return paths, want, c.torch()(torch.from_numpy(x)).detach().numpy().tolist()


@pytest.mark.parametrize("ext", ["onnx", "safetensors", "pt"])
def test_a_fresh_process_loads_and_runs_each_model_file(saved, ext):
    paths, want, _ = saved
    out = _fresh("import json, tm2nn\n"
                 f"m = tm2nn.load_model({str(paths[ext])!r})\n"
                 f"print(json.dumps([r.outputs for r in m.run({INPUTS!r})]))\n")
    assert json.loads(out) == want


def test_a_fresh_process_builds_the_module_from_the_manifest_alone(saved):
    paths, _, values = saved
    out = _fresh("import json, torch\n"
                 "from tm2nn.modelfile.manifest import load_module\n"
                 f"mod = load_module({str(paths['safetensors'])!r})\n"
                 f"x = 2.0 * torch.tensor({[[int(b) for b in t] for t in INPUTS]!r}, dtype=torch.float64) - 1.0\n"
                 "print(json.dumps(mod(x).detach().numpy().tolist()))\n")
    assert json.loads(out) == values
