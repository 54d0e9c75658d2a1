"""gd-trace backend (Welper, issue 7): optimizer throughput, sizes next to Cor. 2.2 / 2.3,
and the §5 extended network's training time.

**§4.4 machine mode.** For bb3, bb4, binary_increment and binary_counter (counting up
from 000000 to the overflow, 247 source steps): compile the loss (21) for the machine's step bound, then run the
conditional-gradient update (22) from the encoded input, decoding every iterate; the
decoded run must equal the interpreter's (asserted).  Reported: |V|, tau, edge units,
optimizer steps, wall time of the run, optimizer steps per second, and Cor. 2.3's width
``2^d |Q| + 2 d tau``.

**§4.3.** The full-configuration simplex of bb3 (one vertex per reached configuration):
vertices, and the Frank–Wolfe trace's time.

Also the same traces with the exact line search for (14) (``line_search=True``).

**§5.** Training the extended network of examples/sign_sum_3x2.tm on 5 random datasets
(and one each of the 2x3 and 4x2 machines): optimizer steps (= machine steps + 1,
asserted), mean training time, theta equal to the interpreter's (asserted).  Then the
perceptron over fixed-point data (examples/gd_trace/perceptron_3x1.tm: 3 samples, one
feature of sign + 2 magnitude bits, bias; App. B multi-bit quantisation, the affine
primary network) on the same number of random datasets, with every Prop. 2.1 check of
``learn_report`` asserted, ONNX included: build time, optimizer steps, source steps,
mean training time (learn_report without its ONNX and fresh-data checks) and the time of
those checks.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINES = (("bb3.tm", "", 30), ("bb4.tm", "", 120), ("binary_increment.tm", "1011", 12),
            ("binary_counter.tm", "000000", 260))


def machine_row(name: str, text: str, steps: int) -> dict:
    import tm2nn
    from tm2nn.backends.gd_trace.machine_mode import estimate, run_gd
    from tm2nn.interp import run_machine
    from tm2nn.syntax import load

    m = load(ROOT / "examples" / name)
    t0 = time.perf_counter()
    c = tm2nn.compile(m, "gd-trace", steps=steps, max_input=len(text))
    t_compile = time.perf_counter() - t0
    est = estimate(m, steps, len(text))
    t0 = time.perf_counter()
    g = run_gd(c, text)
    t_run = time.perf_counter() - t0
    want = run_machine(m, text, steps)
    assert g.result.report() == want.report(), f"{name}: gd-trace run differs from the interpreter"
    assert g.max_deviation == 0.0, g.max_deviation
    opt_steps = len(g.losses) - 1
    d, q, tau = est["tapes"], est["states"], est["tau"]
    return {"bench": f"gd-trace §4.4 {Path(name).stem}", "source_steps": want.steps, "halted": want.halted,
            "vertices": est["vertices"], "tau": tau, "edge_units": est["edges"],
            "cor23_width": 2 ** d * q + 2 * d * tau, "compile_s": round(t_compile, 3),
            "optimizer_steps": opt_steps, "run_s": round(t_run, 3),
            "optimizer_steps_per_s": round(opt_steps / t_run, 1)}


def config_simplex_row() -> dict:
    from tm2nn.backends.gd_trace.config_simplex import build, inputs_up_to, trace, window_for
    from tm2nn.interp import run_machine
    from tm2nn.syntax import load

    m = load(ROOT / "examples" / "binary_increment.tm")
    inputs = inputs_up_to(m, 4)
    tau, left = window_for(m, "1111", 12)
    t0 = time.perf_counter()
    cs = build(m, inputs, tau, left, max_steps=12)
    t_build = time.perf_counter() - t0
    dts = []
    for ls in (False, True):
        t0 = time.perf_counter()
        for x in inputs:
            tr = trace(m, x, 12, tau, left, line_search=ls)
            want = run_machine(m, x, 12)
            assert tr[want.steps].config.state == want.state, x
        dts.append(time.perf_counter() - t0)
    return {"bench": "gd-trace §4.3 binary_increment, all inputs <= 4", "inputs": len(inputs),
            "vertices": len(cs.vertices), "build_s": round(t_build, 3), "fw_traces_s": round(dts[0], 3),
            "fw_traces_line_search_s": round(dts[1], 3)}


def extended_rows(datasets: int) -> list[dict]:
    import numpy as np

    from tm2nn.backends.gd_trace.check import learn_report
    from tm2nn.backends.gd_trace.extended import Extended, sign_sum_layout
    from tm2nn.backends.gd_trace.sign_sum import sign_sum_machine
    from tm2nn.syntax import parse_text

    rows = []
    for n, M, k in ((3, 2, datasets), (2, 3, 1), (4, 2, 1)):
        m = parse_text(sign_sum_machine(n, M), "tm", "<sign_sum>")[0]
        t0 = time.perf_counter()
        ext = Extended(m, sign_sum_layout(n, M))
        t_build = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        times, steps = [], []
        for _ in range(k):
            X, Y = rng.choice([-1, 1], (n, M)), rng.choice([-1, 1], n)
            t0 = time.perf_counter()
            rep = learn_report(ext, X, Y, tests=0)
            times.append(time.perf_counter() - t0)
            assert rep["stopped_at_machine_steps_plus_1"] and rep["trace_matches"] and rep["theta_matches"]
            steps.append(rep["optimizer_steps"])
        rows.append({"bench": f"gd-trace §5 sign_sum {n}x{M}", "datasets": k,
                     "simplex_vertices": len(ext.ts.verts), "tau": ext.tau,
                     "params": int(sum(p.value.size for p in ext.net.nodes if type(p).__name__ == "Param")),
                     "build_s": round(t_build, 2), "optimizer_steps": "/".join(map(str, sorted(set(steps)))),
                     "train_s_mean": round(sum(times) / k, 2)})
    rows.append(perceptron_row(datasets))
    return rows


def perceptron_row(datasets: int) -> dict:
    """§5 with the perceptron over fixed-point data (multi-bit App. B, affine primary)."""
    import numpy as np

    from tm2nn.backends.gd_trace.check import learn_report
    from tm2nn.backends.gd_trace.extended import Extended, perceptron_layout
    from tm2nn.backends.gd_trace.perceptron import Perceptron, theta_of
    from tm2nn.syntax import load

    p = Perceptron(3, 1, 2, 1, bias=True)
    t0 = time.perf_counter()
    ext = Extended(load(ROOT / "examples" / "gd_trace" / "perceptron_3x1.tm"), perceptron_layout(p))
    t_build = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    train_s, check_s, steps = [], [], set()
    for _ in range(datasets):
        X, Y = ext.layout.random_x(rng), rng.choice([-1.0, 1.0], p.n)
        t0 = time.perf_counter()
        rep = learn_report(ext, X, Y, tests=0)
        train_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rep = learn_report(ext, X, Y, tests=20, onnx=True)
        check_s.append(time.perf_counter() - t0 - train_s[-1])
        assert rep["bounds_23_29_33"] and rep["stopped_at_machine_steps_plus_1"] and rep["trace_matches"]
        assert rep["theta"] == (theta_of(p, X, Y) + 0.0).tolist() and rep["theta_matches"]
        assert rep["test_agreement"] == rep["onnx_test_agreement"] == 1.0 and rep["onnx_F_equals_f_theta_on_train"]
        steps.add((rep["optimizer_steps"], rep["source_steps"]))
    return {"bench": "gd-trace §5 perceptron 3x1 (fixed point)", "datasets": datasets,
            "simplex_vertices": len(ext.ts.verts), "tau": ext.tau,
            "params": int(sum(q.value.size for q in ext.net.nodes if type(q).__name__ == "Param")),
            "build_s": round(t_build, 2),
            "optimizer_steps": "/".join(str(a) for a, _ in sorted(steps)),
            "source_steps": "/".join(str(b) for _, b in sorted(steps)),
            "train_s_mean": round(sum(train_s) / datasets, 2),
            "checks_s_mean (20 fresh datasets, torch + ONNX)": round(sum(check_s) / datasets, 2)}


def _load() -> dict:
    import torch

    return {"torch_threads": torch.get_num_threads(), "load_1min": round(os.getloadavg()[0], 2)}


def vertices_rows(full: bool) -> list[dict]:
    """Issue 38: the §4.4 simplex over all of ``Qbar x {-1,1}^d`` (the paper, before) and
    over the reachable tripled states (after), in the same run.  The perceptron 3x1: both
    train, with the same iterates (asserted) and Prop. 2.1 checked; the perceptron 3x2
    (2 features): the full set is refused over the 200,000 cap, the reachable one trains
    (``full`` only: about 30 s).  And the ``relu:2`` primary: the perceptron on the fixed
    hidden layer relu(x), relu(-x), 3 samples of sign + 2 magnitude bits."""
    import numpy as np

    from tm2nn.backends.gd_trace.check import learn_report
    from tm2nn.backends.gd_trace.extended import Extended, perceptron_layout, train
    from tm2nn.backends.gd_trace.perceptron import (
        Perceptron,
        perceptron_machine,
        split_features,
        theta_of,
    )
    from tm2nn.errors import Tm2nnError
    from tm2nn.syntax import parse_text

    rows = []
    shapes = [((3, 1, 2, 1), ()), ((3, 1, 2, 1), split_features(1))] + ([((3, 2, 2, 1), ())] if full else [])
    for args, hidden in shapes:
        p = Perceptron(*args, True, 1, hidden)
        t0 = time.perf_counter()
        m = parse_text(perceptron_machine(*args, True, 1, hidden), "tm", "<p>")[0]
        t_gen = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        X, Y = perceptron_layout(p).random_x(rng), rng.choice([-1.0, 1.0], p.n)
        row = {"bench": f"gd-trace §5 {p.name} ({p.primary})", "states": len(m.states), "generate_s": round(t_gen, 2)}
        runs = {}
        for vs in ("all", "reachable"):
            t0 = time.perf_counter()
            try:
                ext = Extended(m, perceptron_layout(p), vertices=vs)
            except Tm2nnError as e:
                row[f"{vs}: vertices"] = f"refused: {e.message.split(' (limit')[0].split('dimension ')[-1]}"
                continue
            t_build = time.perf_counter() - t0
            t0 = time.perf_counter()
            rep = learn_report(ext, X, Y, tests=20)
            t_train = time.perf_counter() - t0
            assert rep["bounds_23_29_33"] and rep["trace_matches"] and rep["theta_matches"], rep
            assert rep["theta"] == (theta_of(p, X, Y) + 0.0).tolist() and rep["test_agreement"] == 1.0
            runs[vs] = train(ext, X, Y).configs if vs == "all" else None
            row.update({f"{vs}: vertices": ext.ts.m, f"{vs}: edge units": len(ext.ts.edges),
                        f"{vs}: build_s": round(t_build, 2), f"{vs}: train+check_s": round(t_train, 2)})
            if vs == "reachable" and runs.get("all") is not None:
                assert train(ext, X, Y).configs == runs["all"], "reachable vertices changed the iterates"
            row["optimizer_steps"] = rep["optimizer_steps"]
        rows.append({**row, **_load()})
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def sign_sum_16x8_row(steps: int = 100) -> dict:
    """sign_sum 16x8 (issue 38), before and after in the same run: the paper's full vertex
    set with the window the step bound gives (before), and the reachable vertices with the
    declared cells (after).  Build time, the optimizer steps one dataset needs (the §4.1
    machine's, + 1), and the time of ``steps`` optimizer steps, projected to the whole
    run; ``--sign-sum-16x8-full`` also trains the reduced net to the end with every Prop. 2.1
    check (``learn_report``)."""
    import dataclasses

    import numpy as np

    from tm2nn.backends.gd_trace import sign_sum
    from tm2nn.backends.gd_trace.check import learn_report, lowered_run
    from tm2nn.backends.gd_trace.extended import Extended, sign_sum_layout, train
    from tm2nn.errors import Tm2nnError
    from tm2nn.syntax import parse_text

    n, M = 16, 8
    m = parse_text(sign_sum.sign_sum_machine(n, M), "tm", "<s>")[0]
    lay = sign_sum_layout(n, M)
    rng = np.random.default_rng(0)
    X, Y = rng.choice([-1, 1], (n, M)), rng.choice([-1, 1], n)
    row: dict = {"bench": "gd-trace §5 sign_sum 16x8"}
    for tag, layout, vs in (("before", dataclasses.replace(lay, cells=None), "all"), ("after", lay, "reachable")):
        t0 = time.perf_counter()
        ext = Extended(m, layout, vertices=vs)
        t_build = time.perf_counter() - t0
        total = lowered_run(ext, X, Y, max_steps=ext.low.lowered_steps(lay.steps, ext.text_len)).steps + 1
        t0 = time.perf_counter()
        try:
            train(ext, X, Y, max_steps=steps)
        except Tm2nnError:
            pass   # (4) cannot hold this early: the run is cut on purpose
        per = (time.perf_counter() - t0) / steps
        row.update({f"{tag}: vertices": ext.ts.m, f"{tag}: tau": ext.tau, f"{tag}: edge units": len(ext.ts.edges),
                    f"{tag}: build_s": round(t_build, 1), f"{tag}: s_per_step": round(per, 4),
                    f"{tag}: projected_train_s": round(per * total)})
        row["optimizer_steps_needed"] = total
    if "--sign-sum-16x8-full" in sys.argv:
        t0 = time.perf_counter()
        rep = learn_report(ext, X, Y, tests=5)
        assert rep["trace_matches"] and rep["theta_matches"] and rep["bounds_23_29_33"] and rep["test_agreement"] == 1
        row["after: full train + Prop. 2.1 checks_s"] = round(time.perf_counter() - t0, 1)
    return {**row, **_load()}


def main(argv: list[str]) -> list[dict]:
    quick = "--quick" in argv
    machine_row(*MACHINES[0])  # warm-up: torch's first module and autograd set-up
    rows = []
    for spec in MACHINES[:2] if quick else MACHINES:
        rows.append(machine_row(*spec))
        print(json.dumps(rows[-1]), file=sys.stderr)
    rows.append(config_simplex_row())
    rows += extended_rows(2 if quick else 5)
    for r in rows[-4:]:
        print(json.dumps(r), file=sys.stderr)
    rows += vertices_rows(full=not quick)
    if "--sign-sum-16x8" in argv or "--sign-sum-16x8-full" in argv:
        rows.append(sign_sum_16x8_row())
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


if __name__ == "__main__":
    from rich.console import Console

    for r in main(sys.argv[1:]):
        Console().print(r)
