"""The backend interface and the Python API (issue 15): what the object a user holds costs.

* **Hooks.** The emitted torch module runs a fast feature-major path when no submodule has
  a hook, and a batch-major path through ``module(...)`` when one has.  Time of the
  transformer's decode (bb4, T = 110) and the rcnn loop (bb3, T = 25) with and without one
  forward hook, as a ratio (same run, one torch thread, best of REPEATS).
* **Saved models.** ``Compiled.save`` then ``tm2nn.load_model`` (which recompiles the source
  with the recorded options and checks the weights hash) against ``tm2nn.compile`` alone,
  per backend, for ``.onnx``, ``.pt`` and ``.safetensors`` (also ISCAS-85 c6288 where
  ../shared/corpus is present), with the file sizes; for ``.safetensors`` also
  ``tm2nn.modelfile.manifest.load_module`` (the torch module from the manifest alone, no recompile).
* **Verify.** Inputs checked per second by ``Compiled.verify`` (torch and onnxruntime, step
  by step where the backend decodes every step) within a budget of BUDGET seconds.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
REPEATS = 3
BUDGET = 5.0

CASES = {  # backend -> (source, compile options, an input)
    "relu-circuit": ("ripple_adder4.circ", {}, "110010100"),
    "transformer": ("bb4.tm", {"steps": 110}, ""),
    "rcnn": ("bb3.tm", {"steps": 25, "max_input": 2}, "1"),
    "gd-trace": ("bb3.tm", {"steps": 25, "max_input": 2}, "1"),
    "abbe-sandon": ("parity8.circ", {"engine": "float64"}, "101100100"),
}


def _best(fn) -> float:
    best = float("inf")
    for _ in range(REPEATS):  # the machine is shared: the best of REPEATS runs
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_hooks() -> list[dict]:
    import torch

    import tm2nn

    torch.set_num_threads(1)
    rows = []
    for backend, src, kw, text, path in (("transformer", "bb4.tm", {"steps": 110}, "", "trace_op.body.S_c1_pair_lin"),
                                         ("rcnn", "bb3.tm", {"steps": 25, "max_input": 2}, "1",
                                          "states.body.filter.body.V5")):
        c = tm2nn.compile(EX / src, backend, **kw)
        module = c.torch()
        x = torch.from_numpy(c.encode([text] * 8))
        def forward(module=module, x=x):
            return module(x)
        calls: list = []
        with torch.no_grad():
            plain = _best(forward)
            h = module.get_submodule(path).register_forward_hook(lambda m, a, o, calls=calls: calls.append(1))
            hooked = _best(forward)
            out_hooked = forward()
            h.remove()
            same = torch.equal(out_hooked, forward())
        rows.append({"bench": f"api hook {backend}", "layer": path, "calls_per_run": len(calls) // (REPEATS + 1),
                     "plain_s": round(plain, 4), "hooked_s": round(hooked, 4),
                     "hooked_over_plain": round(hooked / plain, 2), "same_output": same})
    return rows


def bench_models() -> list[dict]:
    import tm2nn

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = {backend: (EX / src, kw, text) for backend, (src, kw, text) in CASES.items()}
        c6288 = ROOT.parent / "shared" / "corpus" / "circuits" / "iscas85" / "c6288.bench"
        if c6288.exists():
            cases["relu-circuit c6288"] = (c6288, {}, "01" * 16)
        for case, (src, kw, text) in cases.items():
            backend = case.split()[0]
            t0 = time.perf_counter()
            c = tm2nn.compile(src, backend, **kw)
            t_compile = time.perf_counter() - t0
            row = {"bench": f"api save/load {case}", "compile_s": round(t_compile, 3)}
            for suffix in (".onnx", ".pt", ".safetensors"):
                path = Path(tmp) / f"m{suffix}"
                t0 = time.perf_counter()
                c.save(path)
                row[f"save{suffix}_s"] = round(time.perf_counter() - t0, 3)
                t0 = time.perf_counter()
                back = tm2nn.load_model(path)
                t_load = time.perf_counter() - t0
                row[f"load{suffix}_s"] = round(t_load, 3)
                row[f"load{suffix}_over_compile"] = round(t_load / t_compile, 2)
                row[f"{suffix[1:]}_bytes"] = os.path.getsize(path)
                assert back.run([text]) == c.run([text]), f"{backend}{suffix}: the loaded model disagrees"
                if suffix == ".safetensors":
                    from tm2nn.modelfile.manifest import load_module

                    t0 = time.perf_counter()
                    load_module(path)
                    row["module.safetensors_s"] = round(time.perf_counter() - t0, 3)
            rows.append(row)
    return rows


def bench_verify() -> list[dict]:
    import tm2nn

    rows = []
    for backend, src, kw in (("relu-circuit", "c6288", {}), ("transformer", "binary_counter.tm", {"steps": 60}),
                             ("rcnn", "even_ones.tm", {"steps": 12}),
                             ("gd-trace", "binary_increment.tm", {"steps": 12, "max_input": 10})):
        path = (ROOT.parent / "shared" / "corpus" / "circuits" / "iscas85" / "c6288.bench") if src == "c6288" \
            else EX / src
        if not path.is_file():
            continue
        c = tm2nn.compile(path, backend, **kw)
        rep = c.verify(budget=BUDGET, seed=0)
        assert rep.ok, f"{backend}: {rep.first}"
        rows.append({"bench": f"api verify {backend}", "source": path.name, "mode": rep.mode,
                     "inputs": rep.n_inputs, "seconds": round(rep.seconds, 2),
                     "inputs_per_s": round(rep.n_inputs / rep.seconds, 1), "engines": "+".join(rep.engines)})
    return rows


def main(argv=()) -> list[dict]:
    return bench_hooks() + bench_models() + bench_verify()


if __name__ == "__main__":
    import json

    for r in main(sys.argv[1:]):
        print(json.dumps(r))
