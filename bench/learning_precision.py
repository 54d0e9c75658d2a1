"""Experiment d of issue 38 (docs/learning.md, section d): Wei, Chen & Ma's W8, "log log T
bits of precision suffice", measured.

For each machine and T, the compiled transformer (hard-max, Prop. 3.4 corrections after each
group, as built by ``tm2nn compile --backend transformer --steps T``) runs its input with
every weight and every value an op produces rounded to ``p`` mantissa bits
(:mod:`tm2nn.backends.transformer.precision`: round to nearest, ties to even; exponent
unbounded), and every decoded step is compared with the interpreter's trace.  The row gives
the smallest ``p`` that is exact at every step, the precisions above it (up to
``p_min + ABOVE``, and 23, float32's) that are *not* exact (the pass/fail pattern is not
monotone in p), and log₂ log₂ T beside it.

``quick()`` (bb3, T = 8, 16, 32) runs in ``make bench`` via bench/bench_learning.py;
``full()`` adds bb4 and binary_counter and T up to ``FULL_T``.  Both return rows; run
alone: ``python bench/learning_precision.py [--full] [--max-t T]``.  Single-threaded torch;
the load (``os.getloadavg``) is in every row.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: machine -> (source, the input it runs): the busy beavers on the blank tape, the counter
#: on a 10-digit number (it counts for more than 1,024 steps)
MACHINES = {"bb3": (ROOT / "examples" / "bb3.tm", ""), "bb4": (ROOT / "examples" / "bb4.tm", ""),
            "binary_counter": (ROOT / "examples" / "binary_counter.tm", "0" * 10)}
QUICK_T = (8, 16, 32)
FULL_T = (8, 16, 32, 64, 128, 256, 512, 1024)
#: precisions checked above the smallest exact one (the pattern need not be monotone)
ABOVE = 4
FLOAT32 = 23


def precision_row(name: str, T: int, max_p: int = 16) -> dict:
    """One machine at one T: scan p = 1, 2, ... to the first exact one, then ``ABOVE`` more
    and float32's 23."""
    import torch

    import tm2nn
    from tm2nn.backends.transformer.precision import exact_at

    torch.set_num_threads(1)
    path, text = MACHINES[name]
    t0 = time.perf_counter()
    comp = tm2nn.compile(str(path), backend="transformer", steps=T)
    assert exact_at(comp, [text], None) == [None], "the float64 net must be exact before rounding"
    tried: dict[int, object] = {}
    p_min = None
    for p in range(1, max_p + 1):
        tried[p] = exact_at(comp, [text], p)[0]
        if tried[p] is None:
            p_min = p
            break
    if p_min is not None:
        for p in [*range(p_min + 1, p_min + ABOVE + 1), FLOAT32]:
            tried[p] = exact_at(comp, [text], p)[0]
    first_fail = tried.get(p_min - 1) if p_min and p_min > 1 else None
    return {
        "machine": name, "T": T, "input": text, "p_min": p_min,
        "not_exact_above": sorted(p for p, d in tried.items() if p_min and p > p_min and d is not None),
        "checked": sorted(tried), "log2_log2_T": math.log2(math.log2(T)),
        "below_p_min_fails_at": None if first_fail is None else {"step": first_fail[0], "field": first_fail[1]},
        "seconds": round(time.perf_counter() - t0, 2), "load": round(os.getloadavg()[0], 2), "threads": 1,
        "command": f"python bench/learning_precision.py --machine {name} --t {T}", "seed": None,
    }


def ties_row(name: str, T: int, p: int) -> dict:
    """Why a ``p`` above p_min can fail: the hard-max ties of the ``p``-bit run that the
    float64 run does not have (scores that rounding made equal; ties are averaged)."""
    import torch

    import tm2nn
    from tm2nn.backends.transformer.precision import exact_at, ties_at

    torch.set_num_threads(1)
    path, text = MACHINES[name]
    comp = tm2nn.compile(str(path), backend="transformer", steps=T)
    new = sorted(ties_at(comp, [text], p) - ties_at(comp, [text], None), key=lambda kv: (kv[1], kv[0]))
    first = exact_at(comp, [text], p)[0]
    return {"machine": name, "T": T, "p": p, "exact": first is None,
            "first_failure": None if first is None else {"step": first[0], "field": first[1]},
            "new_ties": [f"{k}@{s}" for k, s in new[:12]], "n_new_ties": len(new),
            "command": f"python bench/learning_precision.py --ties {name} {T} {p}"}


def quick() -> list[dict]:
    return [precision_row("bb3", T) for T in QUICK_T]


def full(max_t: int = FULL_T[-1]) -> list[dict]:
    return [precision_row(m, T) for m in MACHINES for T in FULL_T if T <= max_t]


def table(rows: list[dict]) -> str:
    """The rows as the markdown table of docs/learning.md, section d."""
    out = ["| machine | T | input | fewest exact mantissa bits p | not exact above it (checked to p+4, and 23) "
           "| log2 log2 T | seconds | load (1 min) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['machine']} | {r['T']} | {r['input']!r} | {r['p_min']} | "
                   f"{', '.join(map(str, r['not_exact_above'])) or 'none'} | {r['log2_log2_T']:.2f} | "
                   f"{r['seconds']} | {r['load']} |")
    return "\n".join(out)


def full_markdown() -> list[str]:
    """``full()`` as markdown lines (bench/bench_learning.py's section protocol)."""
    return ["### d. Precision (W8)", "", *table(full()).splitlines()]


# bench/bench_learning.py imports this module while it runs (as __main__ or imported): register
# table d in its section registry when it is there
def main(argv: list[str]) -> int:
    args = list(argv)
    if "--ties" in args:
        i = args.index("--ties")
        print(json.dumps(ties_row(args[i + 1], int(args[i + 2]), int(args[i + 3]))))
        return 0
    if "--machine" in args:
        name, T = args[args.index("--machine") + 1], int(args[args.index("--t") + 1])
        rows = [precision_row(name, T)]
    elif "--full" in args:
        rows = full(int(args[args.index("--max-t") + 1]) if "--max-t" in args else FULL_T[-1])
    else:
        rows = quick()
    for r in rows:
        print(json.dumps(r))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
