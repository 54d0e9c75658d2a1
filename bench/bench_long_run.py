"""Long runs of the compiled transformer on the index engine (issue 19).

* binary_counter on a 20-digit counter (it does not halt within these T): ``tm2nn run``'s
  path (``compiled.run(..., engine="index")``) at T = 10^4, 10^5 and 10^6 source steps:
  steps/s, peak memory of the run (tracemalloc: the history index, the taps), and the
  reference interpreter on the same run, measured in the same process (its ratio);
  ``time(10^6) / time(10^5)`` (10 = a constant cost per step), both for models compiled
  for each T (the construction itself grows: w_pos bits, 10 + w_pos layers a step) and for
  one model run for 10^5 and 10^6 steps (the history alone grows);
* verification at every step against the interpreter (``verify`` on the index engine) at
  T = 10^6 on binary_counter and on the BB(5) champion (its first 10^6 steps).

The index engine is single-threaded (one numba kernel per chunk of steps); the load
average is printed with each row, since the machine is shared.  Run:
``.venv/bin/python bench/bench_long_run.py [--quick]`` (``--quick``: T <= 10^5).
"""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BB5 = "1RB1LC_1RC1RB_1RD0LE_1LA1LD_1RZ0LA"
COUNTER = "0" * 20
TARGET = 3e4  # steps/s: Percepta's transformer-vm, the bar for long runs


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def warm() -> None:
    """Compile (or load from numba's cache) the kernels once, outside the timings."""
    import tm2nn
    from tm2nn.syntax import load

    tm2nn.compile(load(ROOT / "examples" / "bb3.tm"), "transformer", steps=4).run("", engine="index")


def bench_run(m, steps: int, text: str) -> dict:
    """``compiled.run`` on the index engine against the interpreter's run."""
    import tm2nn
    from tm2nn.interp import run_machine

    t0 = time.perf_counter()
    c = tm2nn.compile(m, "transformer", steps=steps)
    t_compile = time.perf_counter() - t0
    tracemalloc.start()
    t0 = time.perf_counter()
    got = c.run(text, engine="index")
    t_run = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    t0 = time.perf_counter()
    want = run_machine(m, text, steps).report()
    t_interp = time.perf_counter() - t0
    assert dict(got) == want, f"the index engine's report differs from the interpreter's at T = {steps}"
    return {"bench": f"transformer index engine {m.name} T={steps:.0e}", "steps": want["steps"],
            "compile_s": round(t_compile, 3), "run_s": round(t_run, 3),
            "steps_per_s": round(want["steps"] / t_run), "peak_mib": round(peak / 2**20, 1),
            "interp_s": round(t_interp, 4), "engine_over_interp": round(t_run / t_interp, 1),
            "target_steps_per_s": TARGET, "load": _load()}


def bench_same_model(m, steps: int, text: str) -> dict:
    """The engine alone on one model (compiled for ``steps``): the first ``steps // 10``
    decoder steps against all ``steps``, so the ratio shows how a step's cost grows with
    the history alone (the construction's width and depth fixed)."""
    import tm2nn
    from tm2nn.backends.transformer.engines.index_engine import IndexEngine

    c = tm2nn.compile(m, "transformer", steps=steps)
    eng = IndexEngine.for_net(c.net)
    tokens = c.encode([text])
    times = {}
    for n in (steps // 10, steps):
        t0 = time.perf_counter()
        eng.run(tokens, steps=n)
        times[n] = time.perf_counter() - t0
    return {"bench": f"transformer index engine growth, one model (T={steps:.0e})",
            "time_n_over_time_n10": round(times[steps] / times[steps // 10], 2),
            "us_per_step_first_tenth": round(1e6 * times[steps // 10] / (steps // 10), 2),
            "us_per_step_all": round(1e6 * times[steps] / steps, 2), "load": _load()}


def bench_verify(m, steps: int, text: str, label: str) -> dict:
    """``verify`` on the index engine: every step against the interpreter."""
    import tm2nn
    from tm2nn.verify import verify_compiled

    c = tm2nn.compile(m, "transformer", steps=steps)
    t0 = time.perf_counter()
    rep = verify_compiled(c, inputs=[text], engines=["index"])
    dt = time.perf_counter() - t0
    assert rep.ok and rep.first is None, f"{label}: {rep.first}"
    return {"bench": f"transformer index engine verify {label} T={steps:.0e}", "steps": steps,
            "every_step_matches": True, "seconds": round(dt, 2), "steps_per_s": round(steps / dt),
            "load": _load()}


def main(argv: list[str]) -> list[dict]:
    from tm2nn.syntax import load, parse_text

    quick = "--quick" in argv
    counter = load(ROOT / "examples" / "binary_counter.tm")
    bb5 = parse_text(BB5, "std", "<bb5>")[0]
    warm()
    top = 10**5 if quick else 10**6
    rows = []
    for steps in (10**4, 10**5, 10**6):
        if steps <= top:
            rows.append(bench_run(counter, steps, COUNTER))
            print(json.dumps(rows[-1]), file=sys.stderr)
    by = {r["steps"]: r for r in rows}
    big, small = top, top // 10
    rows.append({"bench": "transformer index engine growth, compiled per T",
                 f"time{big:.0e}_over_time{small:.0e}": round(by[big]["run_s"] / by[small]["run_s"], 2),
                 "target": "<= 12 (10 = constant per step)",
                 "note": "includes the construction's own growth: w_pos bits, 10 + w_pos layers a step"})
    rows.append(bench_same_model(counter, top, COUNTER))
    print(json.dumps(rows[-1]), file=sys.stderr)
    rows.append(bench_verify(counter, top, COUNTER, "binary_counter"))
    print(json.dumps(rows[-1]), file=sys.stderr)
    rows.append(bench_verify(bb5, top, "", "BB(5)"))
    print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


if __name__ == "__main__":
    from rich.console import Console

    for r in main(sys.argv[1:]):
        Console().print(r)
