"""Issue 38, experiment c: Goel et al.'s odds, observed.

Theorem 1 says a filter and head drawn uniformly from ``U_s`` (Algorithm 1's
initialisation) make the RCNN compute the learner with probability at least
``s^{−c2 s²}``: for our construction the chance ``|U_s|^{−k}`` that the ``k`` drawn
entries all hit their planted values (docs/rcnn_algorithm1.md).  Corollary 2 restarts
``R`` times and keeps the best on a validation set.  Here only a **fraction** of the
planted ``Θ_rc, Θ_head`` (8,052 stored entries for the example learner) is drawn
(``tm2nn learn --random-fraction F``), the rest planted, and for each fraction ``R``
restarts run Algorithm 1 (SGD on the memory layer) and are scored:

* a restart **succeeds** when Lemma 4 held bit for bit at every SGD step (``memorized``)
  and its validation error is 0 on ``examples/learner_match_valid.csv``, which is the
  whole input space {±1}² labelled by the interpreter (both labels present);
* Corollary 2's selection succeeds when the restart it picks succeeds (the CLI's exit 0).

Each row is the run of

    tm2nn learn examples/learner_match.tm --train examples/learner_match.csv \\
        --validation examples/learner_match_valid.csv --restarts R --random-fraction F --seed S --json

(in-process, through the same :func:`tm2nn.backends.rcnn.algorithm1.algorithm1` call),
next to Theorem 1's ``|U_s|^{−k}`` and Corollary 2's ``1 − (1 − p)^R`` for it.

Run alone: ``python bench/learning_goel.py [--full]`` (quick: 5 fractions × 4 restarts,
about a minute; full: 11 fractions × 20 restarts).  ``quick()`` and ``full()`` return the
rows (printed one JSON object a line); ``--write`` also rewrites section c of ``docs/learning.md``;
``--from FILE`` re-renders the rows a run printed into FILE instead of running.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from pathlib import Path

from tm2nn.fileio import write_atomic

ROOT = Path(__file__).resolve().parents[1]
LEARNER, TRAIN, VALID = "examples/learner_match.tm", "examples/learner_match.csv", "examples/learner_match_valid.csv"
#: randomised entries k (of P = 8,052): fractions k / P, then 1
QUICK_K = (0, 1, 4, 64, None)
FULL_K = (0, 1, 2, 4, 8, 16, 32, 64, 256, 1024, None)


def _load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def sweep(ks, restarts: int, seed: int = 0) -> list[dict]:
    """One row per randomised count ``k`` (``None``: every entry, Algorithm 1's draw)."""
    import numpy as np
    import torch

    from tm2nn import threads
    from tm2nn.backends.rcnn.algorithm1 import algorithm1, support_of
    from tm2nn.backends.rcnn.filter_net import build_filter
    from tm2nn.backends.rcnn.filter_spec import machine_table
    from tm2nn.backends.rcnn.head import build_head
    from tm2nn.datasets import load_csv
    from tm2nn.syntax import load

    g = load(ROOT / LEARNER)
    X, Y = load_csv(ROOT / TRAIN)
    Xv, Yv = load_csv(ROOT / VALID)
    P = support_of(build_filter(machine_table(g)), build_head()).n_params
    rows = []
    for k in ks:
        frac = 1.0 if k is None else k / P
        t0 = time.perf_counter()
        load0 = _load_avg()
        with np.errstate(all="ignore"):
            rep = algorithm1(g, X, Y, Xv, Yv, restarts=restarts, seed=seed, fraction=frac, dtype=torch.float64)
        secs = time.perf_counter() - t0
        ok = [c["memorized"] and c["validation_error"] == 0.0 for c in rep["candidates"]]
        ch = rep["chosen"]
        log10_p = rep["theorem1"]["log10_success_fraction"]
        p = 10.0 ** log10_p
        # 1 − (1 − p)^R, as log10 (≈ log10(R·p) once p is far below 1/R)
        log10_cor2 = (math.log10(-math.expm1(restarts * math.log1p(-p))) if log10_p > -12 else
                      math.log10(restarts) + log10_p) if p < 1 else 0.0
        rows.append({
            "bench": f"goel odds: k = {rep['randomised']} of {P} drawn", "fraction": frac, "randomised": rep["randomised"],
            "params": P, "restarts": restarts, "seed": seed,
            "succeeded": int(sum(ok)), "success_rate": sum(ok) / restarts,
            "changed_mean": float(np.mean([c["changed"] for c in rep["candidates"]])),
            "finite_share": float(np.mean([c["finite_predictions"] for c in rep["candidates"]])),
            "val_errors": sorted(c["validation_error"] for c in rep["candidates"]),
            "selection_succeeded": bool(ch["memorized"] and ch["validation_error"] == 0.0),
            "log10_theorem1": log10_p, "log10_corollary2": log10_cor2, "u_size": rep["u_set"]["size"],
            "succeeded_changed_min": min((c["changed"] for c, s in zip(rep["candidates"], ok) if s), default=None),
            "command": f"tm2nn learn {LEARNER} --train {TRAIN} --validation {VALID} --restarts {restarts} "
                       f"--random-fraction {frac:.6g} --seed {seed} --json",
            "seconds": round(secs, 2), "seconds_per_draw": round(secs / max(restarts, 1), 3),
            "load": load0, "threads": threads.count(),
        })
        print(rows[-1]["bench"], rows[-1]["succeeded"], "/", restarts, f"{secs:.1f} s", file=sys.stderr)
    return rows


def quick() -> list[dict]:
    return sweep(QUICK_K, restarts=4)


def full() -> list[dict]:
    return sweep(FULL_K, restarts=20)


def full_markdown() -> list[str]:
    """``full()`` as markdown lines (bench/bench_learning.py's section protocol)."""
    return ["### c. Goel's odds, observed", "", *table(full()).splitlines()]


def _p(log10: float) -> str:
    if log10 == 0:
        return "1"
    e = math.floor(log10)
    mant = round(10 ** (log10 - e), 1)
    if mant >= 10:
        mant, e = mant / 10, e + 1
    return f"{mant:.1f}·10^{e}"


def table(rows: list[dict]) -> str:
    """The markdown table of ``rows`` (docs/learning.md, section c)."""
    out = ["| k drawn | `--random-fraction` | restarts succeeded | Theorem 1: P(draw = planted) = \\|U_s\\|^−k | "
           "Corollary 2: P(some restart planted) | selection | entries changed (mean) | finite outputs | "
           "validation errors | seed | time (per draw) | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['randomised']:,} | {r['fraction']:.6g} | **{r['succeeded']} / {r['restarts']}** | "
            f"{_p(r['log10_theorem1'])} | {_p(r['log10_corollary2'])} | "
            f"{'succeeded' if r['selection_succeeded'] else 'failed'} | {r['changed_mean']:.1f} | "
            f"{100 * r['finite_share']:.0f} % | {', '.join(f'{v:g}' for v in r['val_errors'])} | {r['seed']} | "
            f"{r['seconds']:.1f} s ({r['seconds_per_draw']:.2f} s) | {r['load']} |")
    return "\n".join(out)


def write_doc(rows: list[dict], path: Path, mode: str) -> None:
    """Replace section c of ``path`` (docs/learning.md: from its "## c." heading to the next
    "## " heading) with the table and what it shows."""
    cmd = rows[0]["command"].rsplit(" --random-fraction", 1)[0]
    text = f"""## c. Goel's odds, observed

`bench/learning_goel.py {'--full ' if mode == 'full' else ''}--write`, {time.strftime('%Y-%m-%d')}, {platform.node() or 'this machine'}
({os.cpu_count()} cores, torch on {rows[0]['threads']} thread(s), float64; the 1-minute load average is in each
row). The learner is `{LEARNER}` (s = 23 states, |U_s| = {rows[0]['u_size']}), trained on `{TRAIN}` and scored
on `{VALID}`, which is its whole input space {{±1}}² labelled by the interpreter. Of the
P = {rows[0]['params']:,} stored entries of the planted filter and head, k are drawn uniformly from U_s
(Theorem 1's initialisation) and the rest stay planted (`--random-fraction k/P`); each of the
restarts draws its own k entries and values (`default_rng((seed, r))`, nested: a smaller k's entries are
part of a larger k's), trains the memory layer by Algorithm 1, and succeeds when Lemma 4 held bit for bit
at every step and its validation error is 0. Each row is `{cmd} --random-fraction k/P --seed S --json`.

{table(rows)}

**Observed.** {_observed(rows)}

**Not observed.** Theorem 1's event itself, a draw equal to the planted filter, at any k ≥ 1: every
successful restart had changed entries (see above), so its success shows that those entries did not
matter on the inputs met, not that the draw found the planted values. {_unmeasured(rows)} Nothing at Definition 5's dense shapes
was run (the draw is at the planted support, docs/rcnn_algorithm1.md), and only SGD on the memory
layer (Algorithm 1), not on the filter.
"""
    old = path.read_text()
    start = old.index("## c. ")
    end = old.find("\n## ", start + 1)
    write_atomic(path, old[:start] + text + ("" if end < 0 else old[end + 1:]))


def _observed(rows: list[dict]) -> str:
    worked = [r for r in rows if r["succeeded"] and r["randomised"] > 0]
    none = [r for r in rows if not r["succeeded"]]
    text = []
    if worked:
        text.append("Restarts succeeded with k = " + ", ".join(
            f"{r['randomised']:,} ({r['succeeded']} of {r['restarts']}, every one with at least "
            f"{r['succeeded_changed_min']} entr{'y' if r['succeeded_changed_min'] == 1 else 'ies'} changed; "
            f"Theorem 1: {_p(r['log10_theorem1'])})" for r in worked)
            + ": far more often than Theorem 1's probability, which is a lower bound (the planted filter "
              "is not the only one that works on the inputs met).")
    if none:
        first = min(r["randomised"] for r in none)
        above = all(not r["succeeded"] for r in rows if r["randomised"] >= first)
        text.append(f"{'From' if above else 'At'} k = {first:,}{' on' if above else ''}, no restart of "
                    f"{none[0]['restarts']} succeeded (a rate below about "
                    f"3/{none[0]['restarts']} at 95 % confidence, which Theorem 1's "
                    f"{_p(min(r['log10_theorem1'] for r in none if r['randomised'] == first))} or less does not "
                    "contradict).")
    fin = [f"{r['randomised']:,}: {100 * r['finite_share']:.0f} %" for r in rows if r["finite_share"] < 1]
    if fin:
        text.append("The share of restarts with finite outputs falls as k grows (" + ", ".join(fin)
                    + "): the drawn weights reach 1/(2g) and the grid blows up.")
    agree = all(r["selection_succeeded"] == (r["succeeded"] > 0) for r in rows)
    text.append("Corollary 2's selection succeeded exactly in the rows where some restart did." if agree else
                "Corollary 2's selection missed a successful restart in some row (see the selection column).")
    return " ".join(text)


def _unmeasured(rows: list[dict]) -> str:
    none = [r["randomised"] for r in rows if not r["succeeded"]]
    if not none:
        return "Every row had a success."
    return (f"No success at k = {', '.join(f'{k:,}' for k in none)}, so the odds there are not measured, only "
            "bounded by the restarts run.")


def render(path_in: Path) -> list[dict]:
    """Rows printed by an earlier run (one JSON object a line)."""
    import json

    return [json.loads(line) for line in path_in.read_text().splitlines() if line.startswith("{")]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    import json

    mode = "full" if "--full" in sys.argv else "quick"
    if "--from" in sys.argv:  # re-render the rows an earlier run printed
        result = render(Path(sys.argv[sys.argv.index("--from") + 1]))
    else:
        result = full() if mode == "full" else quick()
    for row in result:
        print(json.dumps(row))
    if "--write" in sys.argv:
        write_doc(result, ROOT / "docs" / "learning.md", mode)
