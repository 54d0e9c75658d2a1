"""The separation benchmark (issue 18): the Abbe–Sandon emulation net against a plain MLP
trained online on fresh samples, on the same parity secrets, clean and in the perturbed
regimes of the paper's robustness statements.

For each n (8, 12, 16, 24, 32, 48, 64; the secret is :func:`mlp_baseline.parity_secret`,
the parity of a seeded random ⌈n/2⌉-subset):

* **clean, emulation net**: ``bench_abbe_sandon.bench_one(n, seed)``: G_n of the
  Gaussian-elimination learner (Abbe & Sandon §4.1, Lemma 3 / Theorem 4, Example 1) in
  exact arithmetic, plain SGD on a stream of 12n samples, checked against the learner at
  every step; its samples used (last memory change) and time.
* **clean, MLP**: :func:`mlp_baseline.train_online` with Adam and with plain SGD, a fresh
  batch every step, until 99 % held-out accuracy or the budget (samples, seconds).

and for n up to ``--perturbed-max-n`` (24), both nets, the emulation net being the float64
G_n (``ir_net.py``: the only engine that takes real-valued perturbations; the exact
engine's numbers are c·2^a·3^b·s^k with Lemma 3's irrational s):

* **noise** (Theorem 5, §4.2): every weight gets ``U[-b, b]`` added after every step,
  ``b = 1/(n² t_n)`` with ``t_n = 12n`` (the emulation net's stream): the level at which
  the paper's noise-tolerant emulation (Lemma 6) still learns.
* **grid** (limited precision): every update rounded to the grid ``2^-4k`` of the float64
  G_n's weights (``float64.Dyadic.for_m``: its smallest weight is ``s^4``), the initial
  weights rounded onto it.  The MLP's Adam rate is raised to the grid (Adam's step is
  about ``lr`` per weight, so below half the grid every update rounds to 0: that frozen
  run is shown once, at the smallest n).

The perturbed G_n is compared with the learner at every step by Theorem 5's criterion
(:func:`emulation_perturbed`), then scored on 1000 fresh inputs.  Results and the commands:
docs/benchmarks.md, "Separation".  Torch runs on ``--threads`` threads (default 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mlp_baseline import (  # noqa: E402
    DEFAULT_LR,
    MLPOptions,
    Perturb,
    float_params,
    parity_secret,
    perturb_update,
    secret_string,
    snap_to_grid,
    train_online,
)

NS = (8, 12, 16, 24, 32, 48, 64)
REGIMES = ("clean", "noise", "grid")
NETS = ("emulation", "mlp")
TEST = 1000


@dataclass
class SepOptions:
    """What one benchmark run covers (the flags of :func:`parse`)."""

    ns: tuple[int, ...] = NS
    seed: int = 0
    regimes: tuple[str, ...] = REGIMES
    nets: tuple[str, ...] = NETS
    perturbed_max_n: int = 24  # largest n of the perturbed regimes (both nets)
    noise: float | None = None  # the noise regime's b; None: Theorem 5's noise_level(n)
    mlp: MLPOptions = field(default_factory=MLPOptions)
    lrs: dict = field(default_factory=dict)  # optimizer -> learning rate (absent: DEFAULT_LR)


def noise_level(n: int) -> float:
    """Theorem 5's per-weight, per-step bound ``1/(n² t_n)`` with ``t_n = 12n``."""
    return 1.0 / (n * n * 12 * n)


def grid_step(n: int) -> float:
    """The float64 G_n's weight grid ``s^4 = 2^-4k`` for ``parity_learner(n)``."""
    from tm2nn.backends.abbe_sandon.float64 import Dyadic
    from tm2nn.learners.examples import parity_learner

    return Dyadic.for_m(parity_learner(n).m).control


# ------------------------------------------------------------------ emulation net
def emulation_clean(n: int, seed: int) -> dict:
    """``bench_abbe_sandon.bench_one`` (the exact engine), with the secret cross-checked."""
    import bench_abbe_sandon

    row = bench_abbe_sandon.bench_one(n, seed)
    want = secret_string(parity_secret(n, seed))
    assert row["secret"] == want, (row["secret"], want)
    return {"net": "emulation (exact)", "status": "reached" if row["test_accuracy"] >= 0.99 else "failed",
            "samples": row["samples_used"], "stream": row["samples"], "seconds": row["total_s"],
            "accuracy": row["test_accuracy"], "mismatches": row["mismatches"]}


def perturbed_engine(ir, perturb: Perturb):
    """The float64 engine (``train_torch.TorchEngine``) whose every SGD step is followed by
    :func:`mlp_baseline.perturb_update` on every weight of G_n (M_s edges and frozen
    edges alike, as Theorem 5's noise)."""
    import torch

    from tm2nn.backends.abbe_sandon.train_torch import TorchEngine

    class PerturbedEngine(TorchEngine):
        def __init__(self) -> None:
            super().__init__(ir)
            self.all = float_params(self.module)
            self.gen = torch.Generator().manual_seed(perturb.seed + 1)
            snap_to_grid(self.all, perturb.grid)  # a no-op when G_n's weights lie on the grid

        def step(self, z, label: float) -> float:
            before = [p.detach().clone() for p in self.all]
            out = super().step(z, label)
            perturb_update(self.all, before, perturb, self.gen)
            return out

    return PerturbedEngine()


def emulation_perturbed(n: int, seed: int, perturb: Perturb, threads: int = 1) -> dict:
    """The float64 G_n trained on ``bench_one``'s stream (12n samples) with ``perturb``
    after every step, then scored on 1000 fresh inputs (random bits 0, as ``bench_one``).

    Each step is compared with the learner (``train.StepChecker``) by Theorem 5's
    criterion: the output within 1/2 of the learner's ±1 answer, and the memory decoded
    from the signs of the M_s weights equal to the learner's; the first step where that
    fails is reported, and training goes on unchecked after it.  (The float64 engine's own
    exactness checks -- every M_s weight bitwise ± its start, every other edge unchanged --
    fail at the first noisy step by definition, so they are not the criterion here.)"""
    from tm2nn import threads as tm2nn_threads
    from tm2nn.learners.examples import parity_learner
    from tm2nn.learners.targets import parity_target, samples

    lr = parity_learner(n)
    tg = parity_target(parity_secret(n, seed))
    stream = samples(tg, 12 * n, seed, random_bits=len(lr.random))
    t0 = time.perf_counter()
    tm2nn_threads.set_threads(threads)  # the engine's steps run on tm2nn.threads' count
    try:
        return _emulate(lr, tg, stream, perturb, n, seed, t0)
    finally:
        tm2nn_threads.set_threads(None)


def _emulate(lr, tg, stream, perturb: Perturb, n: int, seed: int, t0: float) -> dict:
    import numpy as np

    from tm2nn.backends.abbe_sandon.ir_net import build_ir_net
    from tm2nn.backends.abbe_sandon.train import StepChecker, held_out_inputs, prepare_stream
    from tm2nn.learners.targets import samples

    eng = perturbed_engine(build_ir_net(lr), perturb)
    ref, Z, ys = prepare_stream(lr, stream.xs, stream.ys, stream.rs, stream.r2s if lr.coin else None)
    chk = StepChecker(lr, ref, ys, eng.memory())
    checking = True
    with eng.pinned_threads():  # as train_torch.train: small layers, threads only add overhead
        for t in range(len(Z)):
            out = eng.step(Z[t], 1.0 if ys[t] else -1.0)
            if checking:
                near = 1 if abs(out - 1) < 0.5 else (-1 if abs(out + 1) < 0.5 else out)
                checking = chk.step(t, near, eng.memory)
    rep = chk.finish()
    test = samples(tg, TEST, seed + 1, random_bits=len(lr.random))
    got = np.concatenate([eng.predict_rows(c) for c in np.array_split(held_out_inputs(lr, test.xs), 4)])
    acc = float(np.mean(got == test.ys.astype(int)))
    bad = rep.mismatch
    return {"net": "emulation (float64)", "status": "reached" if acc >= 0.99 else "failed",
            "samples": rep.samples_used if bad is None else None, "stream": len(Z),
            "seconds": round(time.perf_counter() - t0, 2), "accuracy": acc,
            "checked_steps": len(Z) if bad is None else bad.step - 1,
            "first_mismatch": None if bad is None else f"step {bad.step}, {bad.what}: {bad.detail[:120]}"}


# ------------------------------------------------------------------ the MLP
def mlp_run(n: int, opts: MLPOptions, perturb: Perturb, lr: float | None = None) -> dict:
    o = replace(opts, perturb=perturb, lr=lr if lr is not None else opts.lr)
    r = train_online(n, parity_secret(n, opts.seed), o)
    return {"net": f"MLP {o.optimizer} (lr {o.learning_rate:.3g})", **r}


def rows_for(n: int, so: SepOptions) -> list[dict]:
    """Every row of one n (module doc), in table order."""
    rows: list[dict] = []
    mlp = so.mlp
    for regime in so.regimes:
        if regime != "clean" and n > so.perturbed_max_n:
            continue
        if regime == "clean":
            perturb = Perturb()
        elif regime == "noise":
            perturb = Perturb(noise=noise_level(n) if so.noise is None else so.noise, seed=so.seed)
        else:
            perturb = Perturb(grid=grid_step(n), seed=so.seed)
        if "emulation" in so.nets:
            rows.append(emulation_clean(n, so.seed) if regime == "clean"
                        else emulation_perturbed(n, so.seed, perturb, mlp.threads))
        for optimizer in ("adam", "sgd") if "mlp" in so.nets else ():
            o = replace(mlp, optimizer=optimizer, lr=so.lrs.get(optimizer))
            rates: list[float | None] = [None]
            if regime == "grid" and optimizer == "adam" and o.learning_rate < perturb.grid:
                # the rate raised to the grid; once, the default rate (its updates round to 0)
                rates = [perturb.grid] + ([None] if n == so.ns[0] else [])
            rows.extend(mlp_run(n, o, perturb, lr) for lr in rates)
        for r in rows:
            r.setdefault("regime", perturb.label())
    for r in rows:
        r["n"] = n
        r["bench"] = f"separation n={n} {r['regime']}: {r['net']}"
    return rows


def _cell(r: dict) -> str:
    """One run as a table cell: samples and time to the target, or how it failed."""
    acc = r.get("confirm_accuracy", r["accuracy"])
    if r["net"].startswith("emulation"):
        if r["status"] == "reached" and not r.get("first_mismatch"):
            return f"{r['samples']:,} of {r['stream']:,} samples, {r['seconds']} s, {100 * acc:.1f} %"
        where = r["first_mismatch"].split(":")[0] if r.get("first_mismatch") else "-"
        return f"fails ({where}), {100 * acc:.1f} %"
    lr = "" if r.get("lr") is None else f"lr {r['lr']:.3g}: "
    if r["status"] == "reached":
        return f"{lr}{r['samples']:,} samples, {r['seconds']} s ({100 * acc:.1f} %)"
    return f"{lr}{r['status']}: {r['samples']:,} samples, {r['seconds']} s, {100 * acc:.1f} %"


def markdown(rows: list[dict]) -> str:
    """The docs table: one line per (n, regime), the emulation net and the MLP (Adam, SGD)
    side by side; the accuracy is on fresh inputs (the MLP's: ``confirm_accuracy``)."""
    out = ["| n | regime | emulation net | MLP, Adam | MLP, SGD |", "|---|---|---|---|---|"]
    lines: dict[tuple, dict[str, list[str]]] = {}
    for r in rows:
        col = "emulation" if r["net"].startswith("emulation") else r.get("optimizer", "")
        lines.setdefault((r["n"], r["regime"]), {}).setdefault(col, []).append(_cell(r))
    for (n, regime), cells in lines.items():
        got = ["; ".join(cells.get(c, ["-"])) for c in ("emulation", "adam", "sgd")]
        out.append(f"| {n} | {regime} | " + " | ".join(got) + " |")
    return "\n".join(out)


def parse(argv: list[str], strict: bool = True) -> tuple[SepOptions, bool]:
    """Flags -> options (argparse: a bad flag prints usage and exits 2)."""
    ap = argparse.ArgumentParser(prog="bench_separation.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 8, 12, 16; budget 2M samples / 20 s per MLP run")
    ap.add_argument("--max-n", type=int, default=None, help="largest n (default 64, 16 with --quick)")
    ap.add_argument("--ns", default=None, help="comma list of n instead of 8,12,16,24,32,48,64 (e.g. 20,28)")
    ap.add_argument("--width", type=int, default=MLPOptions.width, help="MLP hidden units (default 512)")
    ap.add_argument("--batch", type=int, default=MLPOptions.batch, help="MLP batch (default 64)")
    ap.add_argument("--adam-lr", type=float, default=None, help=f"Adam's rate (default {DEFAULT_LR['adam']:g})")
    ap.add_argument("--sgd-lr", type=float, default=None, help=f"plain SGD's rate (default {DEFAULT_LR['sgd']:g})")
    ap.add_argument("--budget-samples", type=int, default=None, help="samples per MLP run (default 10M)")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds per MLP run (default 120)")
    ap.add_argument("--regimes", default=",".join(REGIMES), help="comma list of clean, noise, grid")
    ap.add_argument("--nets", default=",".join(NETS), help="comma list of emulation, mlp")
    ap.add_argument("--perturbed-max-n", type=int, default=None,
                    help="largest n of the noise and grid regimes (default 24, 12 with --quick)")
    ap.add_argument("--noise", type=float, default=None,
                    help="the noise regime's per-weight, per-step bound b (default Theorem 5's 1/(n^2 t_n))")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", action="store_true", help="print the docs table")
    args, _ = (ap.parse_args(argv), None) if strict else ap.parse_known_args(argv)
    regimes = tuple(r for r in args.regimes.split(",") if r)
    if not regimes or any(r not in REGIMES for r in regimes):
        ap.error(f"--regimes takes a comma list of {', '.join(REGIMES)}, got {args.regimes!r}")
    nets = tuple(r for r in args.nets.split(",") if r)
    if not nets or any(r not in NETS for r in nets):
        ap.error(f"--nets takes a comma list of {', '.join(NETS)}, got {args.nets!r}")
    try:
        ns = NS if args.ns is None else tuple(sorted({int(v) for v in args.ns.split(",") if v.strip()}))
    except ValueError:
        ap.error(f"--ns takes a comma list of integers, got {args.ns!r}")
    if not ns or min(ns) < 2:
        ap.error(f"--ns: every n must be >= 2, got {args.ns!r}")
    for name in ("adam_lr", "sgd_lr"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0, got {v}")
    for name in ("max_n", "budget_samples", "perturbed_max_n", "threads", "width", "batch"):
        v = getattr(args, name)
        if v is not None and v < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    if args.budget_s is not None and not args.budget_s > 0:
        ap.error(f"--budget-s must be > 0, got {args.budget_s}")
    if args.noise is not None and not args.noise > 0:
        ap.error(f"--noise must be > 0, got {args.noise}")
    max_n = args.max_n or (16 if args.quick else max(ns))
    mlp = MLPOptions(width=args.width, batch=args.batch,
                     budget_samples=args.budget_samples or (2_000_000 if args.quick else 10_000_000),
                     budget_s=args.budget_s or (20.0 if args.quick else 120.0), threads=args.threads, seed=args.seed)
    lrs = {k: v for k, v in (("adam", args.adam_lr), ("sgd", args.sgd_lr)) if v is not None}
    so = SepOptions(ns=tuple(n for n in ns if n <= max_n), seed=args.seed, regimes=regimes, nets=nets,
                    perturbed_max_n=args.perturbed_max_n or (12 if args.quick else 24), noise=args.noise,
                    mlp=mlp, lrs=lrs)
    if not so.ns:
        ap.error(f"--max-n {max_n}: no n of {ns} is that small")
    return so, args.markdown


def main(argv: list[str], strict: bool = False) -> list[dict]:
    so, md = parse(argv, strict)
    rows = []
    for n in so.ns:
        for r in rows_for(n, so):
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    if md:
        print(markdown(rows))
    return rows


if __name__ == "__main__":
    import os

    print(f"# load average before: {os.getloadavg()}", file=sys.stderr)
    main(sys.argv[1:], strict=True)
    print(f"# load average after: {os.getloadavg()}", file=sys.stderr)
