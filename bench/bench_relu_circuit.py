"""relu-circuit backend: compile time and inference throughput (issue 3).

For each circuit: compile time, and inputs/s at batch 4096 in onnxruntime and in
torch, each as a ratio against the bit-parallel numpy evaluator measured in the
same run on the same inputs (target: ratio >= 0.2 on c6288).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "circuits"
CIRCUITS = {
    "c432": CORPUS / "iscas85" / "c432.bench",
    "c6288": CORPUS / "iscas85" / "c6288.bench",
    "c7552": CORPUS / "iscas85" / "c7552.bench",
    "epfl adder": CORPUS / "epfl" / "adder.aig",
    "epfl multiplier": CORPUS / "epfl" / "multiplier.aig",
}
BATCH = 4096


def _rate(fn, n_inputs: int, min_time: float = 1.0) -> float:
    fn()  # warm up
    reps, t0 = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return reps * n_inputs / dt


def bench_one(label: str, path: Path, quick: bool) -> dict:
    from tm2nn.compiler import compile as tm2nn_compile
    from tm2nn.emit.onnx_emit import to_onnx
    from tm2nn.emit.torch_emit import to_torch
    from tm2nn.interp import eval_circuit, random_inputs
    from tm2nn.model_io import metadata
    from tm2nn.syntax import load

    c = load(path)
    t0 = time.perf_counter()
    compiled = tm2nn_compile(c, "relu-circuit")
    t_compile = time.perf_counter() - t0
    x = random_inputs(len(c.inputs), BATCH, seed=1)
    xf = x.astype(np.float32)
    want = eval_circuit(c, x)
    info = compiled.net.info()

    import onnxruntime as ort
    import torch

    t0 = time.perf_counter()
    blob = to_onnx(compiled.net, metadata(compiled)).SerializeToString()
    t_onnx = time.perf_counter() - t0
    so = ort.SessionOptions()
    sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    module = to_torch(compiled.net)
    feed = {sess.get_inputs()[0].name: xf}
    y_onnx = sess.run(None, feed)[0]
    with torch.no_grad():
        y_torch = module(torch.from_numpy(xf)).numpy()
    thr = compiled.output_encoding.get("threshold", 0.5)
    assert np.array_equal(y_onnx > thr, want) and np.array_equal(y_torch > thr, want), label

    t = 0.5 if quick else 2.0
    r_np = _rate(lambda: eval_circuit(c, x), BATCH, t)
    r_ort = _rate(lambda: sess.run(None, feed), BATCH, t)

    def torch_run():
        with torch.no_grad():
            module(torch.from_numpy(xf))

    r_torch = _rate(torch_run, BATCH, t)
    return {
        "bench": f"relu-circuit {label}", "gates": len(c.gates), "affine_layers": info["affine_layers"],
        "max_width": info["max_width"], "params_nonzero": info["params_nonzero"],
        "compile_s": round(t_compile, 2), "onnx_build_s": round(t_onnx, 2), "onnx_bytes": len(blob),
        "numpy_bitparallel_inputs_per_s": round(r_np), "onnxruntime_inputs_per_s": round(r_ort),
        "torch_inputs_per_s": round(r_torch), "ratio_onnxruntime": round(r_ort / r_np, 3),
        "ratio_torch": round(r_torch / r_np, 3),
    }


def main(argv: list[str]) -> list[dict]:
    quick = "--quick" in argv
    rows = []
    for label, path in CIRCUITS.items():
        if not path.exists():
            rows.append({"bench": f"relu-circuit {label}", "skipped": "corpus absent"})
            continue
        if quick and label == "epfl multiplier":
            continue
        rows.append(bench_one(label, path, quick))
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


if __name__ == "__main__":
    for row in main(sys.argv[1:]):
        print(json.dumps(row))
