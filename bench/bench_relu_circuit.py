"""relu-circuit backend: compile time and inference throughput (issues 3 and 20).

For each circuit: compile time, the ONNX file's size, and inputs/s at batch 4096 on one
thread and on two, for onnxruntime, torch and the fused engines (``fused``: exact
integers; ``fused-float``: float32), each as a ratio to the bit-parallel numpy evaluator
measured in the same run on the same inputs (numpy runs one thread).  Every engine's
outputs are asserted equal to the evaluator's before it is timed.  Issue 20's target:
the fused engine >= 0.1x the evaluator on c6288 at batch 4096 on one thread.

Scale: verilog2nn publishes nets for MD5 (~52K gates), SHA-256 (~136K) and AES-128
(~171K); the corpus's largest circuit is the EPFL multiplier (50,504 gates).
"""

from __future__ import annotations

import json
import os
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
    """Inputs/s: the best of repeated timed calls over ``min_time`` (at least one)."""
    fn()  # warm up
    best, t_end = float("inf"), time.perf_counter() + min_time
    while True:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() >= t_end:
            return n_inputs / best


def _threads(n: int) -> None:
    import numba
    import torch

    torch.set_num_threads(n)
    numba.set_num_threads(n)


def bench_one(label: str, path: Path, quick: bool) -> dict:
    import onnxruntime as ort
    import torch

    from tm2nn.backends.relu_circuit.layered_engine import LayeredEngine
    from tm2nn.compiler import compile as tm2nn_compile
    from tm2nn.emit.onnx_model import to_onnx
    from tm2nn.emit.torch_emit import to_torch
    from tm2nn.interp import eval_circuit, random_inputs
    from tm2nn.modelfile.metadata import metadata
    from tm2nn.syntax import load

    c = load(path)
    t0 = time.perf_counter()
    compiled = tm2nn_compile(c, "relu-circuit")
    t_compile = time.perf_counter() - t0
    x = random_inputs(len(c.inputs), BATCH, seed=1)
    xf = x.astype(np.float32)
    want = eval_circuit(c, x)
    info = compiled.net.info()
    thr = compiled.output_encoding.get("threshold", 0.5)
    t0 = time.perf_counter()
    blob = to_onnx(compiled.net, metadata(compiled)).SerializeToString()
    t_onnx = time.perf_counter() - t0
    module = to_torch(compiled.net)
    t0 = time.perf_counter()
    fused = LayeredEngine.for_net(compiled.net)
    t_fused = time.perf_counter() - t0
    ffloat = LayeredEngine.for_net(compiled.net, "float")
    row = {"bench": f"relu-circuit {label}", "gates": len(c.gates), "affine_layers": info["affine_layers"],
           "max_width": info["max_width"], "params_nonzero": info["params_nonzero"],
           "compile_s": round(t_compile, 2), "onnx_build_s": round(t_onnx, 2), "onnx_bytes": len(blob),
           "fused_build_s": round(t_fused, 2), "fused_rows": fused.program.rows, "net_rows": fused.program.net_rows,
           "batch": BATCH, "load": round(os.getloadavg()[0], 2)}
    t = 0.5 if quick else 2.0
    row["numpy_bitparallel_inputs_per_s"] = r_np = round(_rate(lambda: eval_circuit(c, x), BATCH, t))
    for threads in (1, 2):
        _threads(threads)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: xf}

        def torch_run():
            with torch.no_grad():
                return module(torch.from_numpy(xf)).numpy()
        engines = {"onnxruntime": lambda s=sess, f=feed: s.run(None, f)[0], "torch": torch_run,
                   "fused": lambda: fused.run(xf), "fused-float": lambda: ffloat.run(xf)}
        for name, fn in engines.items():
            assert np.array_equal(fn() > thr, want), (label, name)
            r = _rate(fn, BATCH, t)
            row[f"{name}_{threads}t_inputs_per_s"] = round(r)
            row[f"ratio_{name}_{threads}t"] = round(r / r_np, 4)
    _threads(os.cpu_count() or 1)
    return row
def bench_register_types(path: Path, quick: bool) -> dict:
    """The integer program of c6288 run with other register types and tiles (one thread):
    why ``layered_program.EXACT_TYPES`` holds float32 and why tiles are large.  Every run's
    outputs are asserted equal to the float32 run's (the values are small integers)."""
    import numba

    from tm2nn.backends.relu_circuit.layered_kernel import run_program
    from tm2nn.backends.relu_circuit.layered_program import integer_program
    from tm2nn.compiler import compile as tm2nn_compile
    from tm2nn.interp import random_inputs
    from tm2nn.syntax import load

    c = load(path)
    prog = integer_program(tm2nn_compile(c, "relu-circuit").net)
    x = random_inputs(len(c.inputs), BATCH, seed=1).T
    numba.set_num_threads(1)
    row, want = {"bench": "relu-circuit fused register types, c6288", "load": round(os.getloadavg()[0], 2)}, None
    none = np.zeros(0, np.uint64)  # no perturbation
    for dtype in (np.float32, np.int8, np.int16, np.int32):
        prog.dtype = np.dtype(dtype)
        args = prog.arrays()
        xt = np.ascontiguousarray(x, dtype=dtype) * dtype(prog.scale)
        for tile in (256, 2048):
            out = np.empty((prog.out_reg.size, BATCH), dtype=dtype)

            def go(out=out, args=args, xt=xt, tile=tile, dtype=dtype, none=none):
                run_program(xt, *args, tile, out, none, none, none, np.zeros((0, 0), dtype), np.zeros(0, dtype))
            go()
            want = out.astype(np.int64) if want is None else want
            assert np.array_equal(out.astype(np.int64), want), (dtype, tile)
            row[f"{np.dtype(dtype).name}_tile{tile}_inputs_per_s"] = round(_rate(go, BATCH, 0.5 if quick else 2.0))
    _threads(os.cpu_count() or 1)
    return row


def bench_margin_engines(path: Path, quick: bool) -> dict:
    """The random attack of ``tm2nn margin`` (64 inputs x 4 directions, 26 perturbed passes)
    on torch and on fused-float, c6288: the same ε, and the time of each."""
    from tm2nn.backends.relu_circuit.attacks import empirical_margin
    from tm2nn.backends.relu_circuit.backend import BACKEND
    from tm2nn.interp import random_inputs
    from tm2nn.syntax import load

    c = load(path)
    comp = BACKEND.compile(c, BACKEND.options())
    x = random_inputs(len(c.inputs), 16 if quick else 64, 2024)
    row = {"bench": "relu-circuit margin random attack, c6288", "inputs": len(x), "trials": 4,
           "load": round(os.getloadavg()[0], 2)}
    eps = {}
    for engine in ("torch", "fused-float"):
        t0 = time.perf_counter()
        eps[engine] = empirical_margin(comp, x, seed=0, trials=4, method="random", engine=engine)["eps"]
        row[f"{engine}_s"] = round(time.perf_counter() - t0, 2)
    assert abs(eps["torch"] - eps["fused-float"]) <= 1e-9 * eps["torch"], eps
    row["eps"] = eps["torch"]
    return row


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
    if CIRCUITS["c6288"].exists():
        for extra in (bench_register_types, bench_margin_engines):
            rows.append(extra(CIRCUITS["c6288"], quick))
            print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


if __name__ == "__main__":
    for row in main(sys.argv[1:]):
        print(json.dumps(row))
