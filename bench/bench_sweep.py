"""Issue 22's benchmark: ``tm2nn sweep`` verifies the bb corpus with the transformer backend
on the local pool (bench/sweep_bb_corpus.toml: the 3,359 machines that halt within 10^4
steps, each at T = its step count + 1, step by step against the interpreter in torch and
onnxruntime).  Reports the wall time, the mismatches (expected 0), the per-task time
percentiles, and an estimate of the wall time on an N-node Ray cluster from the measured
per-task times (docs/benchmarks.md, "Sweeps").

    .venv/bin/python bench/bench_sweep.py [--quick] [--workers N] [--results DIR]

``--quick`` (what ``make bench`` runs): the 15 2x2 machines and the first 100 of 3x2.
``--results DIR`` keeps the results folder (rerunning resumes it); default a temp folder.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "bench" / "sweep_bb_corpus.toml"
QUICK = """name = "bb-corpus-quick"
task = "verify"
backends = ["transformer"]
halt_limit = 10000
[[source]]
path = "{bb}/2x2.txt"
format = "std"
[[source]]
path = "{bb}/3x2.txt"
format = "std"
items = "1-100"
[grid]
steps = ["halt+1"]
[args]
inputs = [""]
"""


def estimate(seconds: np.ndarray, nodes: int, cores: int) -> float:
    """Wall time of the same tasks on ``nodes`` nodes of ``cores`` workers: the greedy
    schedule's bound, at least the total work spread evenly and at least the longest task
    (Graham's list-scheduling bound, ``sum/p + max``, is the upper end)."""
    p = nodes * cores
    return max(float(seconds.sum()) / p, float(seconds.max()))


def main(argv=()) -> list[dict]:
    from tm2nn.sweep.local import run_local
    from tm2nn.sweep.spec import load_spec
    from tm2nn.sweep.store import Store

    argv = list(argv)
    bb = ROOT.parent / "shared" / "corpus" / "tm" / "bb"
    if not bb.is_dir():
        return []
    workers = int(argv[argv.index("--workers") + 1]) if "--workers" in argv else (os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = SPEC
        if "--quick" in argv:
            spec_path = Path(tmp) / "quick.toml"
            spec_path.write_text(QUICK.format(bb=bb))
        results = Path(argv[argv.index("--results") + 1]) if "--results" in argv else Path(tmp) / "results"
        t0 = time.perf_counter()
        spec = load_spec(spec_path)
        tasks = spec.tasks()
        t_spec = time.perf_counter() - t0
        store = Store(results, sweep=spec.name)
        t0 = time.perf_counter()
        run_local(tasks, store, workers=workers)
        wall = time.perf_counter() - t0
        ids = {t.id for t in tasks}
        rows = [r for r in store.rows() if r["task_id"] in ids]
    secs = np.array([r["seconds"] for r in rows])
    bad = [r for r in rows if r["outcome"] != "ok"]
    slow = sorted(rows, key=lambda r: -r["seconds"])[:3]
    return [{"bench": f"sweep {spec.name}", "tasks": len(rows), "not_ok": len(bad),
             "outcomes": {o: sum(r["outcome"] == o for r in rows) for o in ("ok", "mismatch", "error", "crash")},
             "workers": workers, "spec_s": round(t_spec, 2), "wall_s": round(wall, 1),
             "task_s_sum": round(float(secs.sum()), 1), "task_s_p50": round(float(np.percentile(secs, 50)), 3),
             "task_s_p90": round(float(np.percentile(secs, 90)), 3),
             "task_s_p99": round(float(np.percentile(secs, 99)), 2), "task_s_max": round(float(secs.max()), 1),
             "slowest": [(r["name"], r["options"], round(r["seconds"], 1)) for r in slow],
             "peak_rss_mb_max": round(max(r["peak_rss_mb"] for r in rows), 0),
             "estimate_s": {f"{n} nodes x {c} workers": round(estimate(secs, n, c), 1)
                            for n, c in ((1, 2), (4, 8), (16, 16), (64, 16))},
             "load": os.getloadavg()[0]}]


if __name__ == "__main__":
    import json

    for r in main(sys.argv[1:]):
        print(json.dumps(r))
