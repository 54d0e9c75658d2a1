"""The ONNX bytes of every example, pinned (issue 34: a refactor keeps every network).

``pins.json`` holds, per (backend, example), the sha256 of the ``.onnx`` bytes a compile
writes, and for the transformer the sha256 of its ONNX outputs on every example input
(its readout became NetIR ops, so its bytes may change but its outputs may not).
``TM2NN_REPIN=1 pytest tests/core/test_onnx_pins.py`` writes the file anew.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

import tm2nn
from tm2nn.errors import Tm2nnError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PINS = ROOT / "tests" / "data" / "onnx_pins.json"

#: backend -> the compile options every example is compiled with
OPTIONS = {"relu-circuit": {}, "transformer": {"steps": 12}, "rcnn": {"steps": 6}, "abbe-sandon": {"engine": "float64"},
           "gd-trace": {"steps": 6}}
MACHINE_OPTIONS = {"relu-circuit": {"steps": 6}}
#: the inputs the transformer's outputs are pinned on
INPUTS = ["", "0", "1", "01", "10", "11", "011", "101", "1101", "0110"]


def examples() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".tm", ".circ"))


@functools.cache  # shared with the device and gradient tests (one xdist group: one compile)
def compile_example(backend: str, path: Path):
    opts = dict(OPTIONS[backend])
    if path.suffix == ".tm":
        opts.update(MACHINE_OPTIONS.get(backend, {}))
    try:
        return tm2nn.compile(path, backend, **opts)
    except Tm2nnError:
        return None


def transformer_outputs(compiled) -> str:
    import onnxruntime as ort

    sess = ort.InferenceSession(compiled.onnx().SerializeToString(), providers=["CPUExecutionProvider"])
    alphabet = set(compiled.source.alphabet)
    h = hashlib.sha256()
    for text in INPUTS:
        if not set(text) <= alphabet:
            continue
        x = compiled.encode([text])
        for name, y in zip([o.name for o in sess.get_outputs()], sess.run(None, {sess.get_inputs()[0].name: x})):
            if name != "trace":  # the taps; the readout outputs are pinned through them and below
                continue
            h.update(text.encode() + b"\0" + np.ascontiguousarray(y).tobytes())
        for r in compiled.run([text], engine="onnxruntime"):
            h.update(json.dumps(r.to_json() if hasattr(r, "to_json") else dict(r), sort_keys=True).encode())
    return h.hexdigest()


def measure() -> dict:
    pins = {}
    for backend in OPTIONS:
        for path in examples():
            compiled = compile_example(backend, path)
            if compiled is None:
                continue
            key = f"{backend}:{path.relative_to(EXAMPLES)}"
            if backend == "transformer":
                pins[key] = {"outputs": transformer_outputs(compiled)}
            else:
                pins[key] = {"onnx": hashlib.sha256(compiled.onnx().SerializeToString()).hexdigest()}
    return pins


@pytest.mark.slow
@pytest.mark.xdist_group("examples")
def test_every_example_compiles_to_the_pinned_network():
    got = measure()
    if os.environ.get("TM2NN_REPIN"):
        PINS.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(PINS.read_text())
    assert sorted(got) == sorted(want)
    changed = [k for k in want if got[k] != want[k]]
    assert not changed, f"{len(changed)} networks changed: {changed[:5]}"
