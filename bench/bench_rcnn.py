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
    rows += size_rows()
    return rows


if __name__ == "__main__":
    from rich.console import Console

    for r in main(sys.argv[1:]):
        Console().print(r)
