"""The local pool's overhead per task (docs/sweep.md, "Engines: the local pool", "Cost"):
N trivial tasks (the interpreter runs bb3, under a millisecond each) run in this process
with run_task, then on pools of 1 and 2 workers; and reading the rows back.

    .venv/bin/python bench/bench_sweep_local.py [N]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(n: int = 400) -> None:
    from tm2nn.sweep.local import run_local
    from tm2nn.sweep.spec import Task
    from tm2nn.sweep.store import Store
    from tm2nn.sweep.tasks import run_task

    src = str(ROOT / "examples" / "bb3.tm")
    jobs = [Task("run", src, None, None, "interp", {}, {"input": "", "max_steps": 1000 + k}) for k in range(n)]
    run_task(jobs[0].to_json())  # imports
    t0 = time.perf_counter()
    for j in jobs:
        run_task(j.to_json())
    seq = time.perf_counter() - t0
    print(f"load: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{n} tasks in this process: {seq:.2f} s ({seq * 1e3 / n:.2f} ms/task)")
    with tempfile.TemporaryDirectory() as d:
        for w in (1, 2):
            st = Store(Path(d) / f"res{w}")
            t0 = time.perf_counter()
            run_local(jobs, st, workers=w)
            wall = time.perf_counter() - t0
            print(f"pool of {w}: {wall:.2f} s wall ({wall * 1e3 / n:.2f} ms/task, worker start included)")
        t0 = time.perf_counter()
        rows = st.rows()
        print(f"Store.rows() of {len(rows)} rows: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
