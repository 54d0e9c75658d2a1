"""Interpreter and circuit-evaluator throughput (issue: the spine).

* steps/s of the reference interpreter on BB(4) run repeatedly and on BB(5) to halting
  (47,176,870 steps; target < 30 s here);
* inputs/s of the bit-parallel evaluator on c6288 (16x16 multiplier), against a
  gate-by-gate Python baseline measured in the same run.

Run: ``make bench`` (all benchmarks) or ``.venv/bin/python bench/bench_interp.py``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tm2nn.interp import eval_circuit, eval_gate_by_gate, random_inputs, run_batch, run_machine
from tm2nn.syntax import parse_text

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"

BB4 = "1RB1LB_1LA0LC_1RZ1LD_1RD0RA"
BB5 = "1RB1LC_1RC1RB_1RD0LE_1LA1LD_1RZ0LA"


def bench_bb4(repeats: int = 20_000) -> dict:
    m = parse_text(BB4, "std", "<bb4>")[0]
    t0 = time.perf_counter()
    total = 0
    for _ in range(repeats):
        total += run_machine(m).steps
    dt = time.perf_counter() - t0
    return {"bench": "interp BB(4) x%d" % repeats, "steps": total, "seconds": round(dt, 3),
            "steps_per_s": round(total / dt)}


def bench_bb4_batch(batch: int = 4096) -> dict:
    m = parse_text(BB4, "std", "<bb4>")[0]
    t0 = time.perf_counter()
    rs = run_batch(m, [""] * batch, 200)
    dt = time.perf_counter() - t0
    total = sum(r.steps for r in rs)
    return {"bench": f"batched interp BB(4) x{batch}", "steps": total, "seconds": round(dt, 3),
            "steps_per_s": round(total / dt)}


def bench_bb5() -> dict:
    m = parse_text(BB5, "std", "<bb5>")[0]
    t0 = time.perf_counter()
    r = run_machine(m, max_steps=50_000_000)
    dt = time.perf_counter() - t0
    assert r.halted and r.steps == 47_176_870 and r.sigma == 4098, r.report()
    return {"bench": "interp BB(5) to halting", "steps": r.steps, "seconds": round(dt, 3),
            "steps_per_s": round(r.steps / dt), "target_seconds": 30, "met": dt < 30}


def bench_c6288(n: int = 1 << 16) -> dict:
    from tm2nn.syntax import load

    path = CORPUS / "circuits" / "iscas85" / "c6288.bench"
    if not path.exists():
        return {"bench": "c6288", "skipped": "corpus absent"}
    c = load(path)
    x = random_inputs(len(c.inputs), n, seed=1)
    eval_circuit(c, x[:64])  # build the plan once
    t0 = time.perf_counter()
    eval_circuit(c, x)
    dt = time.perf_counter() - t0
    k = 20
    t1 = time.perf_counter()
    for row in x[:k]:
        eval_gate_by_gate(c, row)
    base = (time.perf_counter() - t1) / k
    return {"bench": f"bit-parallel eval c6288 ({len(c.gates)} gates), {n} inputs",
            "seconds": round(dt, 4), "inputs_per_s": round(n / dt),
            "gate_by_gate_inputs_per_s": round(1 / base), "speedup": round((n / dt) * base, 1)}


def main(argv: list[str]) -> list[dict]:
    quick = "--quick" in argv
    rows = [bench_bb4(500 if quick else 20_000), bench_bb4_batch(256 if quick else 4096)]
    if not quick:
        rows.append(bench_bb5())
    rows.append(bench_c6288(1 << 12 if quick else 1 << 16))
    return rows


if __name__ == "__main__":
    for row in main(sys.argv[1:]):
        print(json.dumps(row))
