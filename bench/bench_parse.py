"""Circuit parsers at scale (issue 23, deliverable 5).

* ``tm2nn check FILE`` end to end (a subprocess: start-up, parse, validation, the
  summary's depth and width) on random layered circuits of 10^4, 10^5 and 10^6 gates
  (``gen_circuits.random_layered_circuit``) in every format: seconds, CPU seconds and
  lines per second.  Target: at most 30 s at 10^6 gates.
* The parsers' fallback paths (the ``.circ`` grammar, the line-by-line ``.bench``,
  BLIF and AIGER readers that give the located errors) against the fast paths on the
  10^4-gate files, in-process, parse and validation only, in the same run: the ratio.
* ``tm2nn compile`` (relu-circuit) at each size and on a 10^5-gate NAND chain: written or
  refused, seconds, peak RSS, and the memory estimate it is refused on
  (:mod:`tm2nn.backends.relu_circuit.estimate`).
* ``--calibrate``: peak RSS of ``tm2nn compile`` against that estimate on random, narrow
  and chain circuits and a wall of real gates (how ``BYTES_PER_UNIT`` was measured).

Every row carries the 1-minute load average, the CPU count and the hardware threads
available: the machine is shared.
Run: ``make bench`` or ``.venv/bin/python bench/bench_parse.py [--quick] [--calibrate]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_circuits import (  # noqa: E402
    FORMATS,
    gate_wall,
    nand_chain,
    random_layered_circuit,
    write_all,
    write_circuit,
)

ROOT = Path(__file__).resolve().parents[1]
#: ``tm2nn`` as the console script runs it, with this interpreter
TM2NN = [sys.executable, "-c", "import sys; from tm2nn.cli import main; sys.exit(main())"]
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
TARGET_SECONDS = 30


def _machine() -> dict:
    """The 1-minute load average, the CPUs, and the hardware threads this process may use."""
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"load_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "threads": threads}


def run_measured(argv: list[str]) -> dict:
    """Run a command; its wall and CPU seconds, peak RSS (MB, None without GNU time),
    exit code and last stderr line.  The peak comes from ``/usr/bin/time``: a child
    spawned from this (large) process would count this process's memory in its own
    peak, one spawned by ``time`` does not."""
    timed = Path("/usr/bin/time").exists()
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.run((["/usr/bin/time", "-f", "%M %U %S"] if timed else []) + argv,
                           stdout=subprocess.DEVNULL, stderr=err)
        wall = time.perf_counter() - t0
        err.seek(0)
        lines = err.read().decode("utf-8", errors="replace").strip().splitlines()
    rss = cpu = None
    if timed and lines:
        kb, user, system = lines.pop().split()[-3:]
        rss, cpu = int(kb) // 1024, round(float(user) + float(system), 2)
        lines = [ln for ln in lines if not ln.startswith("Command ")]  # time's exit notes
    return {"seconds": round(wall, 2), "cpu_seconds": cpu, "peak_rss_mb": rss, "exit": p.returncode,
            "stderr": lines[-1] if lines else ""}


def records(path: Path) -> int:
    """The lines of a text file; for binary AIGER, its header, output lines and ANDs."""
    data = path.read_bytes()
    if path.suffix == ".aig":
        head = data.split(b"\n", 1)[0].split()
        return 1 + int(head[4]) + int(head[5])
    return data.count(b"\n")


def bench_check(paths: dict[str, Path], gates: int) -> list[dict]:
    rows = []
    for fmt, path in paths.items():
        r = run_measured([*TM2NN, "check", str(path)])
        n = records(path)
        row = {"bench": f"tm2nn check, {gates:,} gates, .{fmt}", "gates": gates, "format": fmt, "lines": n,
               "seconds": r["seconds"], "cpu_seconds": r["cpu_seconds"], "lines_per_s": round(n / r["seconds"]),
               "peak_rss_mb": r["peak_rss_mb"], "exit": r["exit"], **_machine()}
        if gates >= 1_000_000:
            row.update(target_seconds=TARGET_SECONDS, met=r["exit"] == 0 and r["seconds"] <= TARGET_SECONDS)
        rows.append(row)
    return rows


def _parse_seconds(path: Path, fmt: str, fallback: bool) -> float:
    """Seconds to parse and validate ``path`` in-process, by the fast path or the fallback."""
    from unittest import mock

    from tm2nn.syntax import load_all

    patches = {"circ": "tm2nn.syntax.circuit_flat.parse_flat", "bench": "tm2nn.syntax.bench._parse_plain",
               "blif": "tm2nn.syntax.blif._parse_plain", "aag": "tm2nn.syntax.aiger._plain_ands"}
    best = float("inf")
    for _ in range(2):
        with mock.patch(patches[fmt], return_value=None) if fallback else _nothing():
            t0 = time.perf_counter()
            load_all(path, fmt)
            best = min(best, time.perf_counter() - t0)
    return best


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def bench_fallback(paths: dict[str, Path], gates: int) -> list[dict]:
    what = {"circ": "the LALR grammar", "bench": "line by line", "blif": "logical lines (_Lines)",
            "aag": "AND lines one by one"}
    rows = []
    for fmt, label in what.items():
        n = records(paths[fmt])
        slow = _parse_seconds(paths[fmt], fmt, fallback=True)
        fast = _parse_seconds(paths[fmt], fmt, fallback=False)
        rows.append({"bench": f"parse+validate in-process, {gates:,} gates, .{fmt}: fallback ({label}) vs fast path",
                     "format": fmt, "lines": n, "fallback_seconds": round(slow, 3), "fast_seconds": round(fast, 3),
                     "fallback_lines_per_s": round(n / slow), "fast_lines_per_s": round(n / fast),
                     "speedup": round(slow / fast, 1), **_machine()})
    return rows


def _estimate(path: Path) -> dict:
    from tm2nn.backends.relu_circuit.estimate import net_size
    from tm2nn.ir.levels import layer_widths
    from tm2nn.passes.basis import to_basis
    from tm2nn.syntax import load

    b = to_basis(load(path))
    size = net_size(layer_widths(b), len(b.inputs), len(b.outputs))
    return {"layers": size.layers, "max_width": size.max_width, "units": size.units, "dense": size.dense,
            "estimate_mb": size.nbytes // 2**20}


def bench_compile(path: Path, label: str, out: Path, estimate: bool = True, max_memory: str | None = None) -> dict:
    argv = [*TM2NN, "compile", str(path), "-o", str(out)] + (["--max-memory", max_memory] if max_memory else [])
    r = run_measured(argv)
    outcome = "written" if r["exit"] == 0 else "refused" if "would need about" in r["stderr"] else "failed"
    row = {"bench": f"tm2nn compile (relu-circuit), {label}", "outcome": outcome, "seconds": r["seconds"],
           "cpu_seconds": r["cpu_seconds"], "peak_rss_mb": r["peak_rss_mb"]}
    if outcome == "written":
        row["onnx_mb"] = round(out.stat().st_size / 2**20, 1)
        out.unlink()
    else:
        row["message"] = r["stderr"][:300]
    if estimate:
        row.update(_estimate(path))
    return {**row, "target_seconds": TARGET_SECONDS, "met": outcome != "failed" and r["seconds"] <= TARGET_SECONDS,
            **_machine()}


def calibrate(folder: Path) -> list[dict]:
    """Peak RSS of ``tm2nn compile`` against the estimate (see estimate.BYTES_PER_UNIT)."""
    cases = [(random_layered_circuit(n, seed=3, name=f"random{n}"), f"random, {n:,} gates")
             for n in (10_000, 30_000, 100_000, 300_000)]
    cases += [(random_layered_circuit(n, width=64, seed=3, name=f"narrow{n}"), f"width 64, {n:,} gates")
              for n in (10_000, 30_000, 100_000)]
    cases += [(nand_chain(n, name=f"chain{n}"), f"NAND chain, {n:,} gates") for n in (300, 1_000, 1_500, 2_000)]
    cases += [(gate_wall(700, 1_000), "AND/OR wall, 700 x 1,000")]
    rows = []
    for c, label in cases:
        path = write_circuit(c, folder, "bench")
        row = bench_compile(path, label, folder / "model.onnx", max_memory="1T")
        row["rss_over_estimate"] = round(row["peak_rss_mb"] / max(row["estimate_mb"], 1), 2)
        rows.append(row)
        path.unlink()
    return rows


def main(argv: list[str]) -> list[dict]:
    quick = "--quick" in argv
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tm2nn-bench-parse-") as tmp:
        folder = Path(tmp)
        if "--calibrate" in argv:
            return calibrate(folder)
        for n in QUICK_SIZES if quick else SIZES:
            c = random_layered_circuit(n, seed=1, name=f"random{n}")
            paths = write_all(c, folder, FORMATS)
            del c
            rows += bench_check(paths, n)
            if n == 10_000:
                rows += bench_fallback(paths, n)
            rows.append(bench_compile(paths["bench"], f"random, {n:,} gates", folder / "model.onnx"))
            for p in paths.values():
                p.unlink()
        chain = write_circuit(nand_chain(100_000, name="chain100000"), folder, "bench")
        rows.append(bench_compile(chain, "NAND chain, 100,000 gates", folder / "model.onnx", estimate=False))
    return rows


if __name__ == "__main__":
    for row in main(sys.argv[1:]):
        print(json.dumps(row), flush=True)
