"""Wei, Chen & Ma's §3 vs §4 argument, measured (issue 16; docs/margin_study.md).

For T = 8, 16, …, 1024 on examples/binary_counter.tm and examples/bb4.tm, three routes
to a network that runs the machine for T steps:

* ``transformer``: §4 / App. C, hard-max, Prop. 3.4 corrections after each group;
* ``transformer, no corr.``: the same without corrections;
* ``relu-circuit``: §3, the machine unrolled into a circuit of T steps over 2T+1 cells
  (``tm2nn.backends.relu_circuit.unroll``), whose width and depth grow with T.

Each row: the paper's w, d (transformer: paper layers per decoder step; circuit: ReLU
layers), α = ‖θ‖₁, p; the certified all-layer margin γ (per layer, a lower bound:
docs/transformer_margin.md, docs/relu_circuit.md); the attacks' smallest flipping ε (an
upper bound, up to ``ATTACK_MAX_T``); β_min, the smallest softmax β with every step
right on the inputs (transformer rows); and Lemma 2.3's sample bound n at ε = 0.1
(:func:`tm2nn.verify.statistics.sample_complexity`; ∞ when γ collapses to 0).
``--quick`` runs T ≤ 32.  Single-threaded torch; the load is printed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINES = {"binary_counter": (ROOT / "examples" / "binary_counter.tm", ["000000", "0110", "111"]),
            "bb4": (ROOT / "examples" / "bb4.tm", [""])}
STEPS = (8, 16, 32, 64, 128, 256, 512, 1024)
#: attacks decode every step of every input under many perturbations: up to this T
ATTACK_MAX_T = 64
#: beyond it, a light attack at these T (the first input, 4 random directions; the gradient
#: attack's autograd graph over every step is refused by the memory limit there), with
#: corrections only (without, the margin is gone by T = 64 already)
LIGHT_ATTACK_T = (256, 1024)
#: the unrolled circuit has ~T² gates; its certified margin is computed up to this T
RELU_MAX_T = 32
EPS = 0.1


def _n(alpha: float, gamma: float, p: int) -> float:
    from tm2nn.verify.statistics import sample_complexity

    if not (gamma > 0 and math.isfinite(gamma)):
        return math.inf
    return float(sample_complexity(alpha, gamma, p, EPS)["n"])


def transformer_rows(name: str, m, texts: list[str], T: int, attacks: bool, light: bool = False) -> list[dict]:
    import tm2nn
    from tm2nn.backends import get
    from tm2nn.backends.transformer.margin import certified_radius
    from tm2nn.backends.transformer.perturbed_decode import attack

    spec = get("transformer")
    rows = []
    for corr in (True, False):
        t0 = time.perf_counter()
        c = tm2nn.compile(m, "transformer", steps=T, corrections=corr)
        fc = c.analysis("function_class")(c)
        cert = certified_radius(c, per_step=False, budgets=False)["radius"]
        row = {"bench": f"margin study {name} T={T} transformer{'' if corr else ', no corr.'}",
               "machine": name, "route": "transformer" if corr else "transformer, no corr.", "T": T,
               "w": fc["w"], "d": fc["d"], "d_total": fc["d_total"], "alpha": round(fc["alpha"], 1),
               "alpha_per_step": round(fc["alpha_per_step"], 1), "p": fc["p"], "certified": cert}
        if attacks:
            rnd = attack(c, texts, 1.0, "random", 4, seed=0)
            grd = attack(c, texts, 1.0, "gradient", 1, steps=30, seed=0, eps0=rnd["eps"])
            row["attack"] = min(rnd["eps"], grd["eps"])
        elif light and corr:
            row["attack"] = attack(c, texts[:1], 1.0, "random", 4, seed=0)["eps"]
            row["attack_kind"] = "random only"
        beta = spec.analysis("find_beta")(m, {"steps": T, "corrections": corr}, inputs=texts, samples=len(texts), seed=0)
        # β_min: None when even 10^4 fails; "≤ 1" when the first β tried (1) already verifies
        row["beta_min"] = beta["beta"] if beta["beta"] is not None else "> 1e4"
        if beta["beta"] is not None and beta["below"] is None:
            row["beta_min"] = f"≤ {beta['beta']:g}"
        row["n"] = _n(fc["alpha"], cert, fc["p"])
        row["seconds"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
    return rows


def relu_row(name: str, m, texts: list[str], T: int, attacks: bool) -> dict:
    import numpy as np

    import tm2nn
    from tm2nn.backends.relu_circuit.attacks import empirical_margin
    from tm2nn.backends.relu_circuit.codec import encode_tapes
    from tm2nn.backends.relu_circuit.margin import certified_radius

    t0 = time.perf_counter()
    c = tm2nn.compile(m, "relu-circuit", steps=T)
    fc = c.analysis("function_class")(c)
    cert = certified_radius(c)["radius"]
    row = {"bench": f"margin study {name} T={T} relu-circuit", "machine": name, "route": "relu-circuit", "T": T,
           "w": fc["w"], "d": fc["d"], "d_total": fc["d"], "alpha": round(fc["alpha"], 1),
           "alpha_per_step": None, "p": fc["p"], "certified": cert}
    if attacks:
        x = encode_tapes(c.input_encoding, texts) > 0.5
        rnd = empirical_margin(c, np.asarray(x), seed=0, trials=4, method="random")
        grd = empirical_margin(c, np.asarray(x), seed=0, trials=1, method="gradient", steps=60, eps0=rnd["eps"])
        row["attack"] = min(rnd["eps"], grd["eps"])
    row["beta_min"] = None
    row["n"] = _n(fc["alpha"], cert, fc["p"])
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def relu_size_row(name: str, m, T: int) -> dict:
    """Beyond RELU_MAX_T: the unrolled net's size from `tm2nn info` (no margin)."""
    from tm2nn.backends import get

    spec = get("relu-circuit")
    try:
        c = spec.compile(m, spec.options(steps=T))
    except Exception as e:  # refused up front (memory / gate estimate): say so
        return {"bench": f"margin study {name} T={T} relu-circuit", "machine": name, "route": "relu-circuit",
                "T": T, "refused": str(e).splitlines()[0][:120]}
    fc = c.analysis("function_class")(c)
    return {"bench": f"margin study {name} T={T} relu-circuit", "machine": name, "route": "relu-circuit", "T": T,
            "w": fc["w"], "d": fc["d"], "d_total": fc["d"], "alpha": round(fc["alpha"], 1), "p": fc["p"]}


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if v == math.inf:
            return "∞"
        if v == 0:
            return "0"
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(rows: list[dict]) -> str:
    cols = ["machine", "route", "T", "w", "d", "d_total", "alpha", "p", "certified", "attack", "beta_min", "n"]
    head = ["machine", "route", "T", "w", "d", "d·T (total)", "α = ‖θ‖₁", "p", "certified γ", "attack ε",
            "β_min", "n (Lemma 2.3, ε=0.1)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "refused" in r:
            out.append(f"| {r['machine']} | {r['route']} | {r['T']} | refused: {r['refused']} |" + " |" * 8)
            out[-1] = out[-1].replace("tm2nn: error: ", "")
            continue
        # a certified radius of 0: the bound's bisection found none above 1e-300 (float64's range)
        cells = ["< 1e-300" if k == "certified" and r.get(k) == 0 else _fmt(r.get(k)) for k in cols]
        if r.get("attack_kind"):
            cells[cols.index("attack")] += f" ({r['attack_kind']})"
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str]) -> list[dict]:
    import torch

    from tm2nn.syntax import load

    torch.set_num_threads(1)
    steps = [t for t in STEPS if t <= 32] if "--quick" in argv else STEPS
    load_avg = os.getloadavg()[0]
    rows = []
    for name, (path, texts) in MACHINES.items():
        m = load(path)
        for T in steps:
            rows += transformer_rows(name, m, texts, T, attacks=T <= ATTACK_MAX_T, light=T in LIGHT_ATTACK_T)
            rows.append(relu_row(name, m, texts, T, attacks=T <= ATTACK_MAX_T) if T <= RELU_MAX_T
                        else relu_size_row(name, m, T))
            for r in rows[-3:]:
                print(json.dumps(r), file=sys.stderr)
    print(f"\nload average at start: {load_avg:.2f}, torch threads 1\n", file=sys.stderr)
    print(table(rows), file=sys.stderr)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "margin_study.json").write_text(json.dumps(rows, indent=2, default=str))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
