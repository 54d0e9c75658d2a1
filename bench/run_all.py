"""Run every benchmark and print one table; results also go to bench/results/latest.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_abbe_sandon  # noqa: E402
import bench_api  # noqa: E402
import bench_gd_trace  # noqa: E402
import bench_gpu  # noqa: E402
import bench_interp  # noqa: E402
import bench_layout  # noqa: E402
import bench_learning  # noqa: E402
import bench_long_run  # noqa: E402
import bench_margin_study  # noqa: E402
import bench_parse  # noqa: E402
import bench_rcnn  # noqa: E402
import bench_rcnn_learner  # noqa: E402
import bench_relu_circuit  # noqa: E402
import bench_separation  # noqa: E402
import bench_sweep  # noqa: E402
import bench_transformer  # noqa: E402


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    rows = (bench_interp.main(sys.argv[1:]) + bench_relu_circuit.main(sys.argv[1:])
            + bench_transformer.main(sys.argv[1:]) + bench_long_run.main(sys.argv[1:])
            + bench_rcnn.main(sys.argv[1:])
            + bench_rcnn_learner.main(sys.argv[1:])
            + bench_abbe_sandon.main(sys.argv[1:])
            + bench_separation.main(["--quick"])  # the full table: docs/benchmarks.md, "Separation"
            + bench_gd_trace.main(sys.argv[1:])
            + bench_api.main(sys.argv[1:]) + bench_layout.main(sys.argv[1:]) + bench_parse.main(sys.argv[1:])
            + bench_margin_study.main(sys.argv[1:])
            + bench_learning.main([])  # quick form; --full: docs/learning.md's tables
            + bench_gpu.main(sys.argv[1:])  # skipped, with a line saying why, without CUDA
            + bench_sweep.main(["--quick"]))  # the whole bb corpus: bench/bench_sweep.py alone
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps(rows, indent=2))
    t = Table(title="tm2nn benchmarks")
    t.add_column("benchmark")
    t.add_column("result")
    for r in rows:
        t.add_row(r["bench"], ", ".join(f"{k}={v}" for k, v in r.items() if k != "bench"))
    Console().print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
