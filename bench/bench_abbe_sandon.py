"""abbe-sandon backend: plain SGD on the compiled emulation net learns parity, in exact
arithmetic (Abbe & Sandon §4.1, Lemma 3 / Theorem 4, Example 1; issues 6 and 18).

For each n: a random secret subset of ⌈n/2⌉ of the n bits (seeded; low-degree parities
are easy for any net), the Gaussian-elimination learner ``parity_learner(n)``
(examples/parity8.circ is n = 8), its net G_n (Lemma 3) and plain SGD with Lemma 2's
learning rate on a stream of ``12n`` samples ``((2x−1, 2r′−1), ±y)``, run by the level
engine (:mod:`tm2nn.backends.abbe_sandon.levels`) and checked against the learner
(``run_learner``) at every step: output, decoded memory, weights outside the memory
gadgets.  Reported per n:

* ``samples_used``: the step of the last memory change, against the ≈2n of Example 1;
* ``test_accuracy`` on 1000 fresh uniform inputs, ``mismatches`` (0 or 1: training
  stops at the first);
* ``build_s`` (G_n and the engine's level plan), ``train_s`` (the stream, the learner's
  reference run and every per-step check), ``test_s``, ``total_s``;
* at n ≤ 12 (``REF_NS``) the reference engine (``train.Engine``, vertex by vertex) trains
  on the same stream in the same run: ``ref_train_s`` and ``speedup``.

The baseline against ordinary networks is ``bench/bench_separation.py``, which calls
:func:`bench_one`.  ``--quick``: n = 8 only; ``--max-n N``: every n of ``NS + BEYOND`` up
to N (default 64).
"""

from __future__ import annotations

import json
import os
import sys
import time

NS = (8, 12, 16, 24, 32, 48, 64)
BEYOND = (96, 128)
REF_NS = (8, 12)
TEST = 1000


def _setup(n: int, seed: int):
    """(secret, learner, target, training stream) for parity at n."""
    from mlp_baseline import parity_secret, secret_string

    from tm2nn.learners.examples import parity_learner
    from tm2nn.learners.targets import parse_target, samples

    secret = secret_string(parity_secret(n, seed))
    lr = parity_learner(n)
    tg = parse_target(f"parity:{secret}", n)
    return secret, lr, tg, samples(tg, 12 * n, seed, random_bits=len(lr.random))


def bench_one(n: int, seed: int = 0) -> dict:
    """Build G_n for parity at n, train on 12n samples with every step checked, test on
    1000 fresh inputs (module doc)."""
    from tm2nn.backends.abbe_sandon.levels import LevelEngine
    from tm2nn.backends.abbe_sandon.net import build_net
    from tm2nn.backends.abbe_sandon.train import predict, train
    from tm2nn.learners.targets import samples

    load = os.getloadavg()[0]
    secret, lr, tg, stream = _setup(n, seed)
    t0 = time.perf_counter()
    net = build_net(lr)
    eng = LevelEngine(net)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    rep = train(net, stream.xs, stream.ys, None, stream.r2s if lr.coin else None, engine=eng)
    t_train = time.perf_counter() - t0
    test = samples(tg, TEST, seed + 1, random_bits=len(lr.random))
    t0 = time.perf_counter()
    acc = float((predict(net, test.xs, engine=eng) == test.ys).mean()) if rep.mismatch is None else float("nan")
    t_test = time.perf_counter() - t0
    row = {"bench": f"abbe-sandon parity n={n}", "n": n, "secret": secret, "memory_bits": lr.m,
           "stored_edges": len(net.src), "levels": len(eng.plan), "samples": len(stream.xs),
           "samples_used": rep.samples_used, "two_n": 2 * n, "test_accuracy": acc,
           "mismatches": 0 if rep.mismatch is None else 1,
           "build_s": round(t_build, 2), "train_s": round(t_train, 2), "test_s": round(t_test, 2),
           "total_s": round(t_build + t_train + t_test, 2), "steps_per_s": round(rep.steps / t_train, 1),
           "batches": eng.batches, "load1": round(load, 2)}
    if rep.mismatch is not None:
        row["mismatch"] = f"step {rep.mismatch.step}: {rep.mismatch.what}: {rep.mismatch.detail}"
    return row


def reference_train_s(n: int, seed: int = 0) -> float:
    """Seconds for the reference engine (vertex by vertex) to train on bench_one's stream,
    with the same checks; raises if it does not emulate the learner."""
    from tm2nn.backends.abbe_sandon.net import build_net
    from tm2nn.backends.abbe_sandon.train import Engine, train

    _, lr, _, stream = _setup(n, seed)
    net = build_net(lr)
    t0 = time.perf_counter()
    rep = train(net, stream.xs, stream.ys, None, stream.r2s if lr.coin else None, engine=Engine(net))
    assert rep.mismatch is None, rep.mismatch
    return time.perf_counter() - t0


def main(argv: list[str]) -> list[dict]:
    max_n = 64
    if "--max-n" in argv:
        max_n = int(argv[argv.index("--max-n") + 1])
    ns = (8,) if "--quick" in argv else tuple(n for n in NS + BEYOND if n <= max_n)
    rows = []
    for n in ns:
        row = bench_one(n)
        if n in REF_NS:
            ref = reference_train_s(n)
            row.update(ref_train_s=round(ref, 2), speedup=round(ref / row["train_s"], 1))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


if __name__ == "__main__":
    from rich.console import Console
    from rich.table import Table

    t = Table(title="abbe-sandon: parity by SGD on G_n, exact, every step checked")
    cols = ["n", "samples", "samples_used", "test_accuracy", "mismatches", "build_s", "train_s", "test_s",
            "total_s", "speedup", "load1"]
    for c in cols:
        t.add_column(c)
    for r in main(sys.argv[1:]):
        t.add_row(*(str(r.get(c, "-")) for c in cols))
    Console().print(t)
