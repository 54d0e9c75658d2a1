"""Long runs of the compiled transformer (issues 19 and 39): the program engine, the index
engine and the reference interpreter, in one run, per CPU-second.

* binary_counter on a 20-digit counter (it does not halt within these T) and the BB(5)
  champion from the blank tape, at T = 10^4, 10^5 and 10^6 source steps: ``tm2nn run``'s
  path (``compiled.run(..., engine=E)``, its report checked against the interpreter's) for
  E = program and index, and the interpreter on the same run.  Each engine's row gives the
  CPU seconds of the run (``time.process_time``: the machine is shared, so wall time
  measures the neighbours), the start-up (compiling the model, building the engine's
  program) apart from the in-engine rate, and the peak memory of the run (tracemalloc, in a
  second run of the same: tracing every allocation slows the run);
* ``time(10^6) / time(10^5)`` per engine and machine (10 = a constant cost per step; the
  model compiled for each T grows: w_pos bits, 10 + w_pos layers a step);
* where the program engine's time goes per step (binary_counter, T = 10^6, after 2·10^5
  steps): its rows, its attention lookups and its history insert, each timed alone over
  the same registers and index (:func:`profile_step`);
* verification at every step against the interpreter (``verify``) at T = 10^6 on the
  program engine: binary_counter and BB(5)'s first 10^6 steps;
* direct simulation: a naive C simulator of the same machines at T = 10^6
  (:mod:`naive_c`, checked against the interpreter; skipped where no C compiler is).

The engines are single-threaded numba kernels (one per chunk of steps); numba compiles
them once (``warm``, reported: ``jit_s``), then loads them from its cache.  The load
average is printed with each row.  Run: ``.venv/bin/python bench/bench_long_run.py
[--quick]`` (``--quick``: T <= 10^5).
"""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

from naive_c import c_rate

ROOT = Path(__file__).resolve().parents[1]
BB5 = "1RB1LC_1RC1RB_1RD0LE_1LA1LD_1RZ0LA"
COUNTER = "0" * 20
ENGINES = ("program", "index")
TARGET = 5e5  # steps per CPU-second, issue 39 (goal 10^6)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def warm() -> dict:
    """Compile (or load from numba's cache) every kernel once, outside the timings."""
    import tm2nn
    from tm2nn.syntax import load

    c = tm2nn.compile(load(ROOT / "examples" / "bb3.tm"), "transformer", steps=4)
    out = {"bench": "transformer long-run engines: kernels compiled or loaded (numba)"}
    for e in ENGINES:
        t0 = time.perf_counter()
        c.run("", engine=e)
        out[f"jit_s_{e}"] = round(time.perf_counter() - t0, 2)
    return out


def bench_run(m, steps: int, text: str, engine: str) -> dict:
    """``compiled.run`` on ``engine`` (start-up apart: compile, engine build), checked
    against the interpreter's report, and the interpreter's run."""
    import tm2nn
    from tm2nn.backends.transformer.engines.program_engine import IndexEngine, ProgramEngine
    from tm2nn.interp import run_machine

    t0 = time.process_time()
    c = tm2nn.compile(m, "transformer", steps=steps)
    t_compile = time.process_time() - t0
    t0 = time.process_time()
    (ProgramEngine if engine == "program" else IndexEngine).for_net(c.net)
    t_build = time.process_time() - t0
    t0 = time.process_time()
    got = c.run(text, engine=engine)
    t_run = time.process_time() - t0
    tracemalloc.start()  # the peak from a second run: tracing every allocation slows the decode's lists
    c.run(text, engine=engine)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    t0 = time.process_time()
    want = run_machine(m, text, steps).report()
    t_interp = time.process_time() - t0
    assert dict(got) == want, f"the {engine} engine's report differs from the interpreter's at T = {steps}"
    return {"bench": f"transformer {engine} engine {m.name} T={steps:.0e}", "steps": want["steps"],
            "compile_cpu_s": round(t_compile, 3), "engine_build_cpu_s": round(t_build, 3),
            "run_cpu_s": round(t_run, 3), "steps_per_cpu_s": round(want["steps"] / t_run),
            "peak_mib": round(peak / 2**20, 1), "interp_cpu_s": round(t_interp, 4),
            "interp_steps_per_cpu_s": round(want["steps"] / max(t_interp, 1e-9)),
            "engine_over_interp": round(t_run / max(t_interp, 1e-9), 1),
            "target_steps_per_cpu_s": TARGET, "threads": 1, "load": _load()}


def profile_step(steps: int = 10**6, warmup: int = 2 * 10**5, reps: int = 10**5) -> dict:
    """Where a program-engine step goes (binary_counter, T = ``steps``): after ``warmup``
    steps, its rows run in full (the step runs them from kept sums), its attention lookups
    and its insert, each run ``reps`` times alone on the registers and index the last step
    left (numba harnesses over the kernel's own parts, compiled without reference counting
    as the kernel is), against the whole step's CPU time over the next ``reps`` steps; the
    rest is the event-driven rows, Δ, the step's input and taps and the cache misses."""
    import numpy as np
    from numba import njit

    import tm2nn
    from tm2nn.backends.transformer.engines import step_kernel as SK
    from tm2nn.backends.transformer.engines.program_engine import ProgramEngine
    from tm2nn.backends.transformer.engines.step_program import I_ATTN, I_INSERT, I_ROWS
    from tm2nn.syntax import load

    @njit(_nrt=False)
    def rows(n, instr, ptr, col, w, bias, relu, dst, regs, pre):
        for _ in range(n):
            for t in range(instr.shape[0]):
                if instr[t, 0] == I_ROWS:
                    SK._rows(instr[t, 1], instr[t, 2], ptr, col, w, bias, relu, dst, regs, pre)

    @njit(_nrt=False)
    def attend(n, instr, a_regs, a_state, a_pat, ameta, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1,
               ncnt, nvs, nrep, regs, vs_out, fpath):
        for _ in range(n):
            for t in range(instr.shape[0]):
                if instr[t, 0] == I_ATTN:
                    SK._attend(instr[t, 1], a_regs, a_state, a_pat, True, ameta, imeta, istate, leaf_key, leaf_cnt,
                               leaf_vs, nbit, nc0, nc1, ncnt, nvs, nrep, regs, vs_out, fpath)

    @njit(_nrt=False)
    def insert(n, instr, ins_index, ins_key, ins_val, s, imeta, istate, leaf_key, leaf_cnt, leaf_vs, nbit, nc0, nc1,
               ncnt, nvs, nrep, regs, vbits, fpath, err_i, err_f):
        for _ in range(n):
            for t in range(instr.shape[0]):
                if instr[t, 0] == I_INSERT:
                    SK._insert(instr[t, 1], ins_index, ins_key, ins_val, s, imeta, istate, leaf_key, leaf_cnt, leaf_vs,
                               nbit, nc0, nc1, ncnt, nvs, nrep, regs, vbits, fpath, err_i, err_f)

    c = tm2nn.compile(load(ROOT / "examples" / "binary_counter.tm"), "transformer", steps=steps)
    eng = ProgramEngine.for_net(c.net)
    sp, p = eng.sp, eng.prog
    st, _ = eng.start(c.encode([COUNTER])[0], warmup + reps + 1)
    taps = np.zeros((warmup + reps + 1, eng.tap_w), np.int8)
    eng.advance(st, 1, warmup, taps)
    t0 = time.process_time()
    eng.advance(st, warmup + 1, reps, taps)
    whole = (time.process_time() - t0) / reps
    vs_out, vbits = st.scratch[6:]
    s = float(sp.scale)
    parts = {}
    regs = st.regs.copy()
    args = {"rows_in_full": (rows, (sp.instr, sp.ptr, sp.col, sp.w, sp.bias, sp.relu, sp.dst, regs, st.inc[3].copy())),
            "attention_lookups": (attend, (sp.instr, sp.a_regs, st.a_state, st.a_pat, p.ameta, st.imeta, st.istate,
                                           *st.pools, regs, vs_out, st.fpath))}
    for name, (fn, a) in args.items():
        fn(1, *a)
        t0 = time.process_time()
        fn(reps, *a)
        parts[name] = (time.process_time() - t0) / reps
    st2, _ = eng.start(c.encode([COUNTER])[0], reps + 2)  # a fresh index: each insert adds an item
    a = (sp.instr, sp.ins_index, sp.ins_key, sp.ins_val, s, st2.imeta, st2.istate, *st2.pools, regs, vbits, st2.fpath,
         st2.err_i, st2.err_f)
    insert(1, *a)
    t0 = time.process_time()
    insert(reps, *a)
    parts["insert"] = (time.process_time() - t0) / reps
    n_attn = int(np.sum(sp.instr[:, 0] == I_ATTN))
    return {"bench": f"transformer program engine: where a step goes (binary_counter T={steps:.0e}, "
                     f"after {warmup:.0e} steps)",
            "us_per_step": round(1e6 * whole, 2),
            **{f"us_{k}": round(1e6 * v, 2) for k, v in parts.items()},
            "us_rest_rows_changed_deltas_io": round(1e6 * (whole - parts["attention_lookups"] - parts["insert"]), 2),
            "rows_run": sp.rows_run, "rows_of_net": sp.net_rows, "terms": int(sp.ptr[-1]), "attentions": n_attn,
            "ns_per_attention_lookup": round(1e9 * parts["attention_lookups"] / n_attn), "registers": sp.n_regs, "load": _load()}


def bench_verify(m, steps: int, text: str, label: str, engine: str = "program") -> dict:
    """``verify`` on ``engine``: every step against the interpreter."""
    import tm2nn
    from tm2nn.verify import verify_compiled

    c = tm2nn.compile(m, "transformer", steps=steps)
    t0 = time.process_time()
    rep = verify_compiled(c, inputs=[text], engines=[engine])
    dt = time.process_time() - t0
    assert rep.ok and rep.first is None, f"{label}: {rep.first}"
    return {"bench": f"transformer {engine} engine verify {label} T={steps:.0e}", "steps": steps,
            "every_step_matches": True, "cpu_s": round(dt, 2), "steps_per_cpu_s": round(steps / dt),
            "load": _load()}


def main(argv: list[str]) -> list[dict]:
    from tm2nn.syntax import load, parse_text

    quick = "--quick" in argv
    machines = {"binary_counter": (load(ROOT / "examples" / "binary_counter.tm"), COUNTER),
                "BB(5)": (parse_text(BB5, "std", "<bb5>")[0], "")}
    rows = [warm()]
    print(json.dumps(rows[-1]), file=sys.stderr)
    top = 10**5 if quick else 10**6
    runs = {}
    for label, (m, text) in machines.items():
        for steps in (10**4, 10**5, 10**6):
            if steps > top:
                continue
            for e in ENGINES:
                rows.append(bench_run(m, steps, text, e))
                runs[label, e, steps] = rows[-1]
                print(json.dumps(rows[-1]), file=sys.stderr)
    for label in machines:
        rows.append({"bench": f"transformer long-run engines {label}: time(T) / time(T/10), compiled per T",
                     **{f"{e}_time{top:.0e}_over_time{top // 10:.0e}":
                        round(runs[label, e, top]["run_cpu_s"] / runs[label, e, top // 10]["run_cpu_s"], 2)
                        for e in ENGINES},
                     "program_over_index_at_top": round(runs[label, "index", top]["run_cpu_s"]
                                                        / runs[label, "program", top]["run_cpu_s"], 1),
                     "note": "10 = constant per step; includes the construction's growth (w_pos bits)"})
    rows.append(profile_step(top, warmup=top // 5, reps=top // 10))
    print(json.dumps(rows[-1]), file=sys.stderr)
    for label, (m, text) in machines.items():
        rows.append(bench_verify(m, top, text, label))
        print(json.dumps(rows[-1]), file=sys.stderr)
    for label, (m, text) in machines.items():
        rows.append({**c_rate(m, text, top), "machine": label, "load": _load()})
        rows[-1]["bench"] = f"naive C simulator {label} T={top:.0e}"
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


if __name__ == "__main__":
    from rich.console import Console

    for r in main(sys.argv[1:]):
        Console().print(r)
