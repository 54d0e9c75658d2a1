"""The Ray engine's overhead per task next to the local pool's (docs/sweep.md, "Engines:
Ray"): N trivial tasks (the interpreter runs bb3, under a millisecond each) and N compiles
(``info`` of bb3 on the transformer, ~20 ms each), in this process with run_task, on a
local pool of 2 workers (new worker processes each run), and on a Ray cluster with 2 CPUs:
once, then again with other task ids (Ray keeps its worker processes: the first run of the
first kind includes starting them and importing tm2nn).

    .venv/bin/python bench/bench_sweep_ray.py [N] [--address HOST:PORT]

Without ``--address`` it starts a one-node Ray cluster of 2 CPUs in this process
(``ray.init``) and stops it at the end; needs ``pip install 'tm2nn[ray]'``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tasks(n: int, bb3: str):
    """The two kinds of N tasks on the machine file ``bb3`` (a copy of it gives the same
    work under other task ids)."""
    from tm2nn.sweep.spec import Task

    return {"run (interp)": [Task("run", bb3, None, None, "interp", {}, {"input": "", "max_steps": 1000 + k})
                             for k in range(n)],
            "info (transformer)": [Task("info", bb3, None, None, "transformer", {"steps": 22 + k}, {})
                                   for k in range(n)]}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=300)
    ap.add_argument("--address", help="an existing cluster (default: start one with 2 CPUs here)")
    a = ap.parse_args(argv)
    import ray

    from tm2nn.sweep.local import run_local
    from tm2nn.sweep.ray_engine import run_ray
    from tm2nn.sweep.store import Store
    from tm2nn.sweep.tasks import run_task

    print(f"load: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    out = []
    with tempfile.TemporaryDirectory() as d:
        bb3 = ROOT / "examples" / "bb3.tm"
        again = Path(d) / "bb3.tm"
        again.write_bytes(bb3.read_bytes())
        if a.address:
            ray.init(address=a.address, logging_level="warning", log_to_driver=False)
        else:  # a cluster of this process, as `ray start` makes one (no token: ray.init would write ~/.ray/auth_token)
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
        try:
            for salt, (label, tasks) in enumerate(_tasks(a.n, str(bb3)).items()):
                run_task(tasks[0].to_json())  # the imports
                t0 = time.perf_counter()
                for t in tasks:
                    run_task(t.to_json())
                seq = time.perf_counter() - t0
                row = {"bench": f"sweep {label} x{a.n}", "in_process_ms": seq * 1e3 / a.n}
                t0 = time.perf_counter()
                run_local(tasks, Store(Path(d) / f"local{salt}"), workers=2)
                row["local_2_ms"] = (time.perf_counter() - t0) * 1e3 / a.n
                for phase, ts in (("ray_first_ms", tasks), ("ray_again_ms", _tasks(a.n, str(again))[label])):
                    t0 = time.perf_counter()
                    run_ray(ts, Store(Path(d) / f"{phase}{salt}"), address=a.address or "auto")
                    row[phase] = (time.perf_counter() - t0) * 1e3 / a.n
                print(f"{row['bench']}: ms/task wall: in this process {row['in_process_ms']:.2f}, local pool of 2 "
                      f"{row['local_2_ms']:.2f} (worker start included), Ray 2 CPUs first run {row['ray_first_ms']:.2f}, "
                      f"again {row['ray_again_ms']:.2f}")
                out.append({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
        finally:
            ray.shutdown()
    return out


if __name__ == "__main__":
    main()
