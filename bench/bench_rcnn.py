"""rcnn backend: filter throughput and size against the number of states (issue 5).

**Throughput.** The machine-mode net of examples/binary_counter.tm (it never halts, so
every filter step changes the grid and all L steps run) on grids of 16×64 and 64×256
cells: the start grid of B.1.2 (input on row 0, compute phase) in a window of that size,
a batch of counters, L filter steps.  Cell-updates per second = batch · H · W · L / wall
time, in torch (float32, the emitted module), in onnxruntime (the ONNX ``Loop`` over
the shared filter) and in the fused engine (:mod:`tm2nn.backends.rcnn.grid_engine`) with 1 and
2 threads, with its ratio to onnxruntime measured in the same run.  The fused engine
evaluates the filter only where a patch changed (docs/rcnn.md, "The fused engine"), so
its row also gives the filter evaluations it ran and their rate; ``fused_dense`` is the
same kernel evaluating every cell at every trip (the same states, bit for bit), the
baseline that shows what the fused layers alone give.  Each run is also decoded and
checked against the interpreter.

**float64.** examples/sign_sum_3x2.tm (308 states, 13 digits: past float32's 12) compiled
and run to halting in float64, torch and onnxruntime (:func:`bench_float64`).

**Long runs, verified** (:func:`bench_long_verify`).  ``tm2nn verify
examples/binary_counter.tm --backend rcnn --steps T --input 0…0 --engines fused``, the
command a user runs, for the n-digit zero counter (T = its step count, it halts at T):
wall time, CPU time and peak RSS of the whole process, with the load.  The baseline,
measured in the same run at T = 502, is the path it replaced: the whole scan of states
from the fused engine's ``run``, then the per-step decode
(:func:`tm2nn.backends.rcnn.trace_decode.per_step_run`) and the same comparison with the
interpreter.  (Before the streamed decode, compile refused T = 1013.)

**Size.** Filter width d_rc and parameters for s = 2, 4, 8, 16 states
(:func:`tm2nn.backends.rcnn.bounds.size_table`): d_rc = 80s + 130, nonzero parameters
and distinct weight values are O(s); Definition 5's dense shapes are O(s²).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ((16, 64, 8, 60), (64, 256, 2, 40))  # rows, columns, batch, filter steps
REPEATS = 2


def bench_grid(m, rows: int, cols: int, batch: int, steps: int, fused_only: bool = False) -> dict:
    import numpy as np

    from tm2nn.backends.rcnn.build import filter_for, machine_net
    from tm2nn.backends.rcnn.grid_engine import GridEngine, GridOptions
    from tm2nn.backends.rcnn.machine_io import decode_run, start_grids
    from tm2nn.backends.rcnn.machine_mode import machine_form
    from tm2nn.emit.onnx_model import to_onnx
    from tm2nn.emit.onnx_runtime import run_onnx
    from tm2nn.emit.torch_emit import run_torch, to_torch
    from tm2nn.interp import run_machine

    chain, code = machine_form(m)
    filt = filter_for(chain.machine, code)
    net = machine_net(filt.body, steps, m.name)
    window = (0, -cols // 4, rows, cols)
    # Counters of cols/8 digits, least significant first: none overflows (halts) in L steps.
    texts = [format(i, "b")[::-1].ljust(cols // 8, "0") for i in range(batch)]
    x = start_grids(chain, code, texts, window)
    cells = batch * rows * cols * steps
    row = {"bench": f"rcnn grid {rows}x{cols}", "batch": batch, "filter_steps": steps, "d_rc": filt.width}
    module, blob = to_torch(net), to_onnx(net).SerializeToString()
    GridEngine(net).run(x[:1, :8, :8])  # compile the kernels (cached on disk after the first run)
    engines = [] if fused_only else [("torch", None, lambda: run_torch(module, x, batch_size=batch)),
                                     ("onnxruntime", None, lambda: run_onnx(blob, x, batch_size=batch))]
    for mode, incremental in (("fused", True), ("fused_dense", False)):  # dense: every cell at every trip
        for threads in (1, 2):
            eng = GridEngine(net, np.float32, GridOptions(threads=threads, incremental=incremental))
            engines.append((f"{mode}_{threads}t", eng, lambda e=eng: e.run(x)))
    for name, eng, run in engines:
        best, states = float("inf"), None
        for _ in range(REPEATS):  # the best of REPEATS runs: the machine is shared
            t0 = time.perf_counter()
            states = np.asarray(run())
            best = min(best, time.perf_counter() - t0)
        row[f"{name}_s"] = round(best, 4)
        row[f"{name}_cell_updates_per_s"] = f"{cells / best:.3g}"
        if eng is not None:
            st = eng.stats
            assert st.cell_updates == cells and st.trips == steps, st  # none halts: every trip ran
            row[f"{name}_filter_evaluations"] = st.evaluated
            row[f"{name}_filter_evaluations_per_s"] = f"{st.evaluated / best:.3g}"
            if "onnxruntime_s" in row:
                row[f"{name}_vs_onnxruntime"] = round(row["onnxruntime_s"] / best, 1)
        for text, s in zip(texts, states):  # every run decodes to the interpreter's
            got = decode_run(chain, code, window, s, text, steps)
            n = got.steps
            assert got.report() == run_machine(m, text, n).report(), f"{name} disagrees on {text!r}"
    return row


def bench_float64(inputs=("+++", "-+-"), steps: int = 26) -> dict:
    """examples/sign_sum_3x2.tm: 308 states in B.1.2 form, 13 digits, past float32's 12, so
    the net is float64 (docs/rcnn.md, "float32, with no rounding layer").  Compile time,
    then one batch run to halting in torch, onnxruntime and the fused engine (the loop stops at the halted
    grid), each decoded and checked against the interpreter."""
    import numpy as np

    import tm2nn
    from tm2nn.backends.rcnn.runtime import GridModel
    from tm2nn.interp import run_machine
    from tm2nn.syntax import load

    m = load(ROOT / "examples" / "sign_sum_3x2.tm")
    t0 = time.perf_counter()
    c = tm2nn.compile(m, "rcnn", steps=steps, max_input=max(map(len, inputs)))
    row = {"bench": "rcnn float64 sign_sum_3x2", "states": c.options["states"], "digits": c.options["digits"],
           "dtype": c.options.get("dtype", "float32"), "d_rc": c.options["d_rc"],
           "filter_steps": c.options["filter_steps"], "compile_s": round(time.perf_counter() - t0, 3)}
    gm = GridModel(c)
    x = gm.grids(list(inputs))
    _top, _left, h, w = gm.window
    for eng in ("torch", "onnxruntime", "fused"):
        run = c.runner(eng)
        if eng == "fused":
            run(x[:1, :, :4], batch_size=1)  # compile the float64 kernels (cached on disk after)
        t0 = time.perf_counter()
        states = np.asarray(run(x, batch_size=len(inputs)))
        best = time.perf_counter() - t0
        ran = max(int(np.nonzero((s[1:] != s[:-1]).any((1, 2)))[0].max(initial=-1)) + 2 for s in states)
        row[f"{eng}_s"] = round(best, 3)
        row[f"{eng}_cell_updates_per_s"] = f"{len(inputs) * h * w * ran / best:.3g}"
        for text, s in zip(inputs, states):
            assert gm.decode(s, text).report() == run_machine(m, text, steps).report(), f"{eng} disagrees on {text!r}"
    row["fused_vs_onnxruntime"] = round(row["onnxruntime_s"] / row["fused_s"], 1)
    return row


#: the zero counters of n digits whose verification :func:`bench_long_verify` times
LONG_DIGITS = (7, 8, 9, 10)
#: the per-step baseline's peak at T = 502 (measured: 5.85 GB); skipped where less is available
PER_STEP_BYTES = 7 << 30
#: a command run in a child, its peak RSS read from the child's own rusage
_MEASURE = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); w = time.perf_counter() - t; "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print(json.dumps({'rc': r.returncode, 'wall_s': w, 'cpu_s': u.ru_utime + u.ru_stime, "
            "'peak_rss_mb': u.ru_maxrss / 1024, 'out': r.stdout, 'err': r.stderr[-2000:]}))")


def _measured(cmd: list[str]) -> dict:
    """Wall time, CPU time and peak RSS of ``cmd`` run alone in a child."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, env=env, cwd=ROOT)
    return json.loads(out.stdout)


def per_step_verify(steps: int, text: str) -> dict:
    """The baseline of :func:`bench_long_verify` (run in a child, ``--per-step-verify``):
    the fused engine's whole scan, the per-step decode, the comparison with the interpreter."""
    import resource

    import tm2nn
    from tm2nn.backends.rcnn.runtime import GridModel
    from tm2nn.backends.rcnn.trace_decode import per_step_run
    from tm2nn.interp import run_machine
    from tm2nn.syntax import load
    from tm2nn.verify.runs import compare_runs

    m = load(ROOT / "examples" / "binary_counter.tm")
    c = tm2nn.compile(m, "rcnn", steps=steps)
    gm = GridModel(c)
    states = c.runner("fused")(gm.grids([text]), batch_size=1)
    got = per_step_run(gm.chain, gm.code, gm.window, states[0], text, gm.steps)
    diff = compare_runs(run_machine(m, text, steps, trace=True), got)
    return {"ok": diff is None, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bench_long_verify(digits=LONG_DIGITS, baseline: bool = True) -> list[dict]:
    """rcnn verification of long runs: the streamed decode (the CLI, as a user runs it)
    and, at the first size, the per-step decode it replaced (module doc)."""
    import os

    import tm2nn
    from tm2nn.interp import run_machine
    from tm2nn.limits import human, memory_limit
    from tm2nn.syntax import load

    m = load(ROOT / "examples" / "binary_counter.tm")
    rows = []
    for i, n in enumerate(digits):
        text = "0" * n
        steps = run_machine(m, text, 10**7).steps
        c = tm2nn.compile(m, "rcnn", steps=steps)
        row = {"bench": f"rcnn verify binary_counter T={steps}", "input": text, "filter_steps": c.options["filter_steps"],
               "grid": "x".join(map(str, c.options["window"][2:])), "threads": 1,
               "load_1min": round(os.getloadavg()[0], 2)}
        new = _measured([sys.executable, "-m", "tm2nn.cli", "verify", "examples/binary_counter.tm", "--backend",
                         "rcnn", "--steps", str(steps), "--input", text, "--engines", "fused", "--threads", "1",
                         "--json"])
        assert new["rc"] == 0 and json.loads(new["out"])["ok"], new
        row.update({"streamed_wall_s": round(new["wall_s"], 2), "streamed_cpu_s": round(new["cpu_s"], 2),
                    "streamed_peak_rss_mb": round(new["peak_rss_mb"])})
        if baseline and i == 0 and memory_limit() < PER_STEP_BYTES:
            row["per_step"] = f"skipped: it needs about {human(PER_STEP_BYTES)}, over {human(memory_limit())}"
        elif baseline and i == 0:
            old = _measured([sys.executable, str(ROOT / "bench" / "bench_rcnn.py"), "--per-step-verify", str(steps),
                             text])
            assert old["rc"] == 0 and json.loads(old["out"].splitlines()[-1])["ok"], old
            row.update({"per_step_wall_s": round(old["wall_s"], 2), "per_step_cpu_s": round(old["cpu_s"], 2),
                        "per_step_peak_rss_mb": round(old["peak_rss_mb"]),
                        "wall_ratio": round(old["wall_s"] / new["wall_s"], 1),
                        "rss_ratio": round(old["peak_rss_mb"] / new["peak_rss_mb"], 1)})
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


def size_rows() -> list[dict]:
    from tm2nn.backends.rcnn.bounds import size_table

    rows = []
    for rep in size_table():
        o = rep["ours"]
        rows.append({"bench": f"rcnn filter s={o['states']}", "d_rc": o["d_rc"], "widths": o["widths"],
                     "params_nonzero": o["params_nonzero"], "params_dense_def5": o["params_dense"],
                     "distinct_values": o["distinct_values"], "paper_alg1_d_rc": rep["paper"]["alg1_d_rc"],
                     "paper_cor3_U": rep["paper"]["cor3_U"]})
    return rows


def main(argv: list[str]) -> list[dict]:
    from tm2nn.syntax import load

    m = load(ROOT / "examples" / "binary_counter.tm")
    grids = GRIDS[:1] if "--quick" in argv else GRIDS
    rows = []
    for g in grids:  # --fused-only: skip torch and onnxruntime (no ratio then)
        rows.append(bench_grid(m, *g, fused_only="--fused-only" in argv))
        print(json.dumps(rows[-1]), file=sys.stderr)
    rows.append(bench_float64())
    print(json.dumps(rows[-1]), file=sys.stderr)
    quick = "--quick" in argv
    rows += bench_long_verify(LONG_DIGITS[1:2] if quick else LONG_DIGITS, baseline=not quick)
    rows += size_rows()
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--per-step-verify"]:  # the baseline child of bench_long_verify
        sys.path.insert(0, str(ROOT))
        print(json.dumps(per_step_verify(int(sys.argv[2]), sys.argv[3])))
        sys.exit(0)
    from rich.console import Console

    for r in main(sys.argv[1:]):
        Console().print(r)
