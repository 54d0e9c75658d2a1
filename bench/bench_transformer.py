"""transformer backend: decode time against T (issue 4; issue 19 for the ONNX loop).

One machine (examples/binary_counter.tm on a 12-digit counter, which does not halt
within these T), compiled for T = 500, 1000, 2000, 4000.  For each T: compile time,
ONNX model size, and the wall time of one full decode (T source steps; the machine has
a stay move, so 2T decoder steps) in torch and in onnxruntime, plus the interpreter's
time for the same run as the baseline.  The growth ratio time(4000)/time(1000) shows
the cost per step: 4 means constant, 16 a full recompute of the prefix per step
(target <= 5: the key/value cache makes step i cost O(i) attention on top of a
constant layer stack).

torch runs on one thread (``torch_runner``), onnxruntime on one (``onnxruntime``:
``intra_op_num_threads = 1``) and on its default, one per core (``onnxruntime_mt``): a
decode step is a chain of small ops that extra threads only synchronise, but the
attention's O(i) matrix-vector products split over the cores when they are idle; on a
loaded machine the default is much slower.  Each time is the best of ``REPEATS``
(``ORT_REPEATS`` for onnxruntime) runs; each row records the 1-minute load average when
it started, since the machine may be shared.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = (500, 1000, 2000, 4000)
INPUT = "0" * 12
REPEATS = 2
ORT_REPEATS = 3
#: onnxruntime's intra-op threads per engine column (None: its default)
ORT_THREADS = {"onnxruntime": 1, "onnxruntime_mt": None}
ENGINES = ("torch", "onnxruntime", "onnxruntime_mt")


def bench_one(m, steps: int, engines=ENGINES) -> dict:
    import tm2nn
    from tm2nn.backends.transformer.decoding import TraceDecoder
    from tm2nn.backends.transformer.runtime import encode_tokens, torch_runner
    from tm2nn.emit.onnx_runtime import onnx_session, run_onnx
    from tm2nn.interp import run_machine
    from tm2nn.modelfile.formats import onnx_model

    load = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    c = tm2nn.compile(m, "transformer", steps=steps)
    t_compile = time.perf_counter() - t0
    blob = onnx_model(c).SerializeToString()
    tokens = encode_tokens(c.input_encoding, [INPUT])
    row = {"bench": f"transformer T={steps}", "decoder_steps": c.options["decoder_steps"],
           "compile_s": round(t_compile, 3), "onnx_bytes": len(blob), "load": load}
    want = run_machine(m, INPUT, steps).report()
    t0 = time.perf_counter()
    run_machine(m, INPUT, steps, trace=True)
    row["interp_s"] = round(time.perf_counter() - t0, 5)
    dec = TraceDecoder(c.output_encoding)
    for eng in engines:
        sess = onnx_session(blob, threads=ORT_THREADS[eng]) if eng in ORT_THREADS else None
        run = torch_runner(c.net) if eng == "torch" else (lambda tok, sess=sess: run_onnx(sess, tok)[0])
        best = float("inf")
        for _ in range(ORT_REPEATS if sess else REPEATS):  # the best run: the machine is shared
            t0 = time.perf_counter()
            taps = run(tokens)
            best = min(best, time.perf_counter() - t0)
        row[f"{eng}_s"] = round(best, 3)
        row[f"{eng}_ms_per_step"] = round(1000 * best / c.options["decoder_steps"], 3)
        assert dec.decode(taps[0], INPUT).report == want, f"{eng} disagrees with the interpreter"
    return row


def main(argv: list[str]) -> list[dict]:
    from tm2nn.syntax import load

    m = load(ROOT / "examples" / "binary_counter.tm")
    steps = STEPS[:2] if "--quick" in argv else STEPS
    rows = []
    for t in steps:
        rows.append(bench_one(m, t))
        print(json.dumps(rows[-1]), file=sys.stderr)
    by = {r["bench"]: r for r in rows}
    if "transformer T=4000" in by:
        for eng in ENGINES:
            g = by["transformer T=4000"][f"{eng}_s"] / by["transformer T=1000"][f"{eng}_s"]
            rows.append({"bench": f"transformer growth {eng}", "time4000_over_time1000": round(g, 2),
                         "target": "<= 5"})
    return rows


if __name__ == "__main__":
    from rich.console import Console

    for r in main(sys.argv[1:]):
        Console().print(r)
