"""The torch modules on a GPU, with the same run's CPU figures beside them (issue 35).

* **relu-circuit, ISCAS-85 c6288** at batch 4,096 and 65,536: inputs/s of the torch module
  on the GPU (inputs already there, outputs left there; synchronised), against the
  bit-parallel numpy evaluator and the torch module on the CPU (2 threads), on the same
  inputs.  Every run's thresholded outputs are asserted equal to the evaluator's.  Goal:
  >= 5·10⁶ inputs/s at batch 65,536 on one H100/H200.  The GPU module is also timed with
  each ELL gather strategy forced (``AffineModule.gather``: ``loop`` and ``batched``; the
  default on a GPU is ``batched``, chosen without a GPU to measure it: this row decides).
* **transformer, binary_counter**: a decode of 1,024 random inputs at T steps on the GPU
  against 2 CPU threads, at ``--cpu-steps`` (the CPU decode is O(T²): 52 s at T = 200 on
  this project's 2-core machine) and on the GPU alone at T = 1,000.  The GPU's decoded
  tapes are asserted equal to the CPU's at the common T.

Without a CUDA device it prints one line saying so and returns a row marked ``skipped``
(``make bench`` runs it everywhere).  ``--quick``: smaller batches and T; ``--dry-run``:
every measurement on the CPU at tiny sizes (tests/bench/test_bench_gpu.py: the script
runs without a GPU).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
C6288 = ROOT.parent / "shared" / "corpus" / "circuits" / "iscas85" / "c6288.bench"


def _rate(fn, n: int, min_time: float, sync=lambda: None) -> float:
    """Items/s: the best of repeated timed calls over ``min_time`` (after one warm-up)."""
    fn()
    sync()
    best, t_end = float("inf"), time.perf_counter() + min_time
    while True:
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() >= t_end:
            return n / best


def no_gpu_reason() -> str | None:
    """Why there is no GPU to measure (None when there is one)."""
    import torch

    if torch.cuda.is_available():
        return None
    why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
    return f"no CUDA device ({why}; torch {torch.__version__})"


def _device_kit(device: str):
    """``(sync, name)`` of the device the bench measures (the CPU in a ``--dry-run``)."""
    import torch

    if device == "cuda":
        return torch.cuda.synchronize, torch.cuda.get_device_name()
    return (lambda: None), f"{device} (dry run)"


def bench_circuit(batches: tuple[int, ...], min_time: float, device: str = "cuda") -> list[dict]:
    import torch

    from tm2nn.compiler import compile as tm2nn_compile
    from tm2nn.interp import eval_circuit, random_inputs
    from tm2nn.syntax import load

    c = load(C6288)
    compiled = tm2nn_compile(c, "relu-circuit")
    thr = compiled.output_encoding.get("threshold", 0.5)
    gpu = compiled.torch(device=device)
    cpu = compiled.torch()
    sync, name = _device_kit(device)
    rows = []
    for batch in batches:
        x = random_inputs(len(c.inputs), batch, seed=1)
        want = eval_circuit(c, x)
        xg = torch.from_numpy(x.astype(np.float32)).to(device)
        xc = torch.from_numpy(x.astype(np.float32))
        with torch.no_grad():
            assert np.array_equal((gpu(xg) > thr).cpu().numpy(), want), "the GPU module is not exact"
            assert np.array_equal((cpu(xc) > thr).numpy(), want), "the CPU module is not exact"
            torch.set_num_threads(2)
            r_gpu = _rate(lambda xg=xg: gpu(xg), batch, min_time, sync)
            r_cpu = _rate(lambda xc=xc: cpu(xc), batch, min_time)
            by_gather = {}
            for gather in ("loop", "batched"):  # the ELL gathers' two strategies, side by side
                for m in gpu.modules():
                    if hasattr(m, "gather"):
                        m.gather = gather
                assert np.array_equal((gpu(xg) > thr).cpu().numpy(), want), gather
                by_gather[gather] = round(_rate(lambda xg=xg: gpu(xg), batch, min_time, sync))
            for m in gpu.modules():
                if hasattr(m, "gather"):
                    m.gather = None
        r_np = _rate(lambda x=x: eval_circuit(c, x), batch, min_time)
        rows.append({"bench": f"gpu relu-circuit c6288 batch {batch:,}", "gpu": name,
                     "gpu_torch_inputs_per_s": round(r_gpu),
                     "gpu_gather_loop_inputs_per_s": by_gather["loop"],
                     "gpu_gather_batched_inputs_per_s": by_gather["batched"], "cpu_torch_2t_inputs_per_s": round(r_cpu),
                     "numpy_bitparallel_inputs_per_s": round(r_np), "ratio_gpu_to_bitparallel": round(r_gpu / r_np, 3),
                     "goal_inputs_per_s": 5_000_000 if batch == 65_536 else None,
                     "load": round(os.getloadavg()[0], 2)})
    return rows


def bench_decode(batch: int, cpu_steps: int, gpu_steps: int, device: str = "cuda") -> list[dict]:
    import torch

    from tm2nn.compiler import compile as tm2nn_compile

    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(list("01"), 6)) for _ in range(batch)]
    sync, name = _device_kit(device)
    rows = []
    for steps in sorted({cpu_steps, gpu_steps}):
        compiled = tm2nn_compile(ROOT / "examples" / "binary_counter.tm", "transformer", steps=steps)
        tokens = torch.from_numpy(compiled.encode(texts))
        gpu = compiled.torch(device=device)
        with torch.no_grad():
            gpu(tokens[:2].to(device))  # warm up
            sync()
            t0 = time.perf_counter()
            taps = gpu(tokens.to(device))
            sync()
            t_gpu = time.perf_counter() - t0
        row = {"bench": f"gpu transformer binary_counter decode T={steps:,} batch {batch:,}",
               "gpu": name, "gpu_s": round(t_gpu, 2),
               "gpu_steps_inputs_per_s": round(steps * batch / t_gpu), "load": round(os.getloadavg()[0], 2)}
        if steps == cpu_steps:
            torch.set_num_threads(2)
            cpu = compiled.torch()
            with torch.no_grad():
                t0 = time.perf_counter()
                want = cpu(tokens)
                t_cpu = time.perf_counter() - t0
            assert torch.equal(taps.cpu(), want), "the GPU decode differs from the CPU's"
            row.update(cpu_2t_s=round(t_cpu, 2), speedup_gpu_over_cpu_2t=round(t_cpu / t_gpu, 2))
        rows.append(row)
    return rows


def main(argv=()) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu-steps", type=int, default=None, help="T of the CPU/GPU decode comparison (default 200)")
    ap.add_argument("--dry-run", action="store_true",
                    help="run every measurement on the CPU at tiny sizes (checks the script without a GPU)")
    args, _ = ap.parse_known_args(list(argv))
    if args.dry_run:
        import torch

        threads = torch.get_num_threads()
        try:
            return bench_circuit((64,), 0.01, "cpu") + bench_decode(4, 6, 8, "cpu")
        finally:
            torch.set_num_threads(threads)
    why = no_gpu_reason()
    if why is not None:
        print(f"bench_gpu: skipped: {why}")
        return [{"bench": "gpu", "skipped": why}]
    if not C6288.exists():
        print(f"bench_gpu: c6288 skipped: {C6288} is missing (../shared/corpus)")
        rows = []
    else:
        rows = bench_circuit((4_096, 16_384) if args.quick else (4_096, 65_536), 0.5 if args.quick else 2.0)
    cpu_steps = args.cpu_steps or (50 if args.quick else 200)
    rows += bench_decode(256 if args.quick else 1_024, cpu_steps, 200 if args.quick else 1_000)
    for r in rows:
        print(r)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
