"""Goel et al.'s Algorithm 1 learning parity (issue 17): ``tm2nn learn`` on the parity
learner (examples/learner_parity.tm, Gaussian elimination in B.1.2 form) for growing n.

For each n: ``m = 3n`` training examples, uniform on {±1}^n and redrawn until they span
GF(2)^n (the draws it took are reported), labelled by a parity of about n/2 of the
features; then exactly the documented command

    tm2nn learn examples/learner_parity.tm --train DATA.csv --test 1000 --target parity:S --json

in a subprocess, timed, with its peak resident memory (``wait4``).  A row passes when
the net memorized (Lemma 4, bit for bit, after every example), agrees with the
interpreter on all 1,000 fresh points, and has zero error against the parity.  It stops
after the first n over the budget (10 minutes or 8 GB), or at ``--max-n``.

After them, **before/after in the same run** (issue 38): the same learner, data and
1,000 test points through :func:`tm2nn.backends.rcnn.learner.run` twice, in-process:
``fast=False`` (the code before issue 38: SGD through the emitted module's backward, the
test points through the lookup engine applying the filter at every cell of every trip)
and ``fast=True`` (SGD through the memoised filter and Jacobian,
:mod:`tm2nn.backends.rcnn.lookup_grad`; the test through the incremental lookup engine),
with the train and test seconds of each and whether both gave the same W and the same
answer on every point (they must).

Run: ``python bench/bench_rcnn_learner.py [--quick] [--min-n N] [--max-n N] [--ab-n N]``
(``make bench`` runs n = 4 … 16, then the before/after at n = 8; ``--quick``: the CLI
row and the before/after at n = 4 with 200 test points).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S, BUDGET_GB = 600, 8.0


def dataset(n: int, m: int, seed: int):
    from tm2nn.backends.rcnn.parity_learner import gf2_rank

    rng = np.random.default_rng(seed)
    subset = sorted(rng.choice(n, size=max(1, n // 2), replace=False).tolist())
    draws = 0
    while True:
        draws += 1
        X = rng.choice([-1, 1], size=(m, n))
        if gf2_rank(X) == n:
            break
    Y = np.prod(X[:, subset], axis=1)
    return X, Y, subset, draws


def run_one(n: int, m: int, seed: int, tmp: Path, test: int) -> dict:
    from tm2nn.backends.rcnn.parity_learner import parity_learner_steps
    from tm2nn.syntax import load

    X, Y, subset, draws = dataset(n, m, seed)
    csv = tmp / f"parity_n{n}.csv"
    csv.write_text(",".join([f"x{i + 1}" for i in range(n)] + ["y"]) + "\n"
                   + "".join(",".join(f"{v:+d}" for v in [*x, y]) + "\n" for x, y in zip(X, Y)))
    g = load(ROOT / "examples" / "learner_parity.tm")
    s = len(g.states)
    target = "parity:" + ",".join(map(str, subset)) + ("," if len(subset) == 1 else "")
    cmd = [sys.executable, "-m", "tm2nn.cli", "learn", str(ROOT / "examples" / "learner_parity.tm"),
           "--train", str(csv), "--test", str(test), "--target", target, "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    with open(tmp / "out", "w") as fo, open(tmp / "err", "w") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env)
        _pid, status, ru = os.wait4(p.pid, 0)  # this process's own peak memory, not the session's
    secs = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    out, err = (tmp / "out").read_text(), (tmp / "err").read_text()
    peak_gb = ru.ru_maxrss / 2 ** 20  # kB on Linux
    last = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"error": err.strip()[-300:]}
    steps = parity_learner_steps(m, n)
    ok = code == 0 and last.get("memorized") and last.get("test_agreement") == 1.0 and last.get("test_error") == 0.0
    return {"bench": f"rcnn learner parity n={n}", "n": n, "m": m, "d": n, "states": s, "d_rc": 80 * s + 130,
            "steps_t": steps, "L": max(steps + 1, m + 1), "grid": f"{m + 1}x{n + 4}", "parity": subset,
            "span_draws": draws, "seconds": round(secs, 1), "peak_gb": round(peak_gb, 2),
            "test_points": test, **{k: last.get(k) for k in ("memorized", "test_agreement", "test_error")},
            "exit": code, "ok": bool(ok), "load": round(os.getloadavg()[0], 2)}


def before_after(n: int, test: int) -> list[dict]:
    """The same parity learner run through the old path (``fast=False``) and the new one,
    in this process, on the same data and test points (module doc)."""
    import torch

    from tm2nn import threads
    from tm2nn.backends.rcnn.learner import run
    from tm2nn.syntax import load

    g = load(ROOT / "examples" / "learner_parity.tm")
    X, Y, _subset, _draws = dataset(n, 3 * n, n)
    out, reps = [], {}
    for fast in (False, True):
        load0 = round(os.getloadavg()[0], 2)
        t0 = time.perf_counter()
        rep = run(g, X, Y, test=test, seed=0, fast=fast)
        reps[fast] = rep
        out.append({"bench": f"rcnn learner parity n={n}: {'after' if fast else 'before'} (issue 38)", "n": n,
                    "test_points": test, "train_s": rep["train_seconds"], "test_s": rep["test_seconds"],
                    "total_s": round(time.perf_counter() - t0, 1), "memorized": rep["memorized"],
                    "test_agreement": rep["test_agreement"], "load": load0, "threads": threads.count()})
    same = (np.array_equal(reps[False]["_got"], reps[True]["_got"])
            and torch.equal(reps[False]["_trained"].module.op("memory").weight,
                            reps[True]["_trained"].module.op("memory").weight))
    b, a = out
    out.append({"bench": f"rcnn learner parity n={n}: speed-up (same run)", "train_x": round(b["train_s"] / a["train_s"], 1),
                "test_x": round(b["test_s"] / a["test_s"], 1), "total_x": round(b["total_s"] / a["total_s"], 1),
                "same_answers_and_W": bool(same)})
    for r in out:
        print(json.dumps(r), file=sys.stderr)
    return out


def main(argv: list[str]) -> list[dict]:
    quick = "--quick" in argv
    max_n = int(argv[argv.index("--max-n") + 1]) if "--max-n" in argv else (4 if quick else 16)
    min_n = int(argv[argv.index("--min-n") + 1]) if "--min-n" in argv else 4
    ab_n = int(argv[argv.index("--ab-n") + 1]) if "--ab-n" in argv else (4 if quick else 8)
    test = 200 if quick else 1000
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(min_n, max_n + 1):
            row = run_one(n, 3 * n, seed=n, tmp=Path(tmp), test=test)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
            if row["seconds"] > BUDGET_S or row["peak_gb"] > BUDGET_GB or not row["ok"]:
                break
    fits = [r["n"] for r in rows if r["ok"] and r["seconds"] <= BUDGET_S and r["peak_gb"] <= BUDGET_GB]
    rows.append({"bench": "rcnn learner parity: largest n within 10 min and 8 GB", "n": max(fits, default=None),
                 "threads": 1, "cores": os.cpu_count()})
    # after the CLI rows: a child forked from this process would count its pages in its peak
    return rows + (before_after(ab_n, test) if ab_n > 0 else [])


if __name__ == "__main__":
    from rich.console import Console

    for r in main(sys.argv[1:]):
        Console().print(r)
