"""abbe-sandon backend: SGD on the compiled emulation net learns parity (issue 6, the
paper's headline, Abbe & Sandon §4.1 Example 1 with Theorem 4).

For each n: a random secret subset of ⌈n/2⌉ of the n bits (seeded; low-degree parities
are easy for any net), the Gaussian-elimination learner
``parity_learner(n)`` (examples/parity8.circ is n = 8), its net G_n (Lemma 3), and
plain SGD with the paper's learning rate on a stream of ``12n`` samples
``((2x−1, 2r′−1), ±y)``; the net is checked against the learner at every step (output,
decoded memory, weights outside the memory gadgets).  Then:

* ``test_accuracy`` on 1000 fresh uniform inputs;
* ``samples_used``: the step of the last memory change, against the ≈2n of Example 1
  (each stored sample needs a wrong output, and during learning the output is the coin
  r′, wrong half the time);
* the baseline: a plain one-hidden-layer MLP with as many parameters as the net has
  stored edges, trained by Adam and by SGD (200 epochs) on the samples the compiled net
  used (the first ``samples_used``), and, for context, on the whole stream of ``12n``;
  scored on the same kind of fresh inputs.  Abbe & Sandon's negative results say such a
  net, from a generic start, stays near 50 % on parities of growing support.

The net runs in exact arithmetic (docs/abbe_sandon.md: §4.1's constants do not fit
float64, and its flips are unstable in floats); the times are the exact engine's.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

NS = (8, 12)
TEST = 1000


def bench_one(n: int, seed: int = 0) -> dict:
    import numpy as np
    from mlp_baseline import baseline

    from tm2nn.backends.abbe_sandon.net import build_net
    from tm2nn.backends.abbe_sandon.train import Engine, net_inputs, train
    from tm2nn.learners.examples import parity_learner
    from tm2nn.learners.targets import parse_target, samples

    rng = np.random.default_rng(seed)
    chosen = set(rng.choice(n, size=(n + 1) // 2, replace=False).tolist())
    secret = "".join("1" if i in chosen else "0" for i in range(n))
    lr = parity_learner(n)
    tg = parse_target(f"parity:{secret}", n)
    stream = samples(tg, 12 * n, seed, random_bits=len(lr.random))
    t0 = time.perf_counter()
    net = build_net(lr)
    t_build = time.perf_counter() - t0
    eng = Engine(net)
    t0 = time.perf_counter()
    rep = train(net, stream.xs, stream.ys, stream.rs, stream.r2s if lr.coin else None, engine=eng)
    t_train = time.perf_counter() - t0
    assert rep.mismatch is None, rep.mismatch
    test = samples(tg, TEST, seed + 1, random_bits=len(lr.random))
    z = net_inputs(test.xs, np.zeros((TEST, len(lr.random)), bool), np.zeros((TEST, len(lr.coin)), bool))
    t0 = time.perf_counter()
    right = sum(eng.predict(z[i]) == int(test.ys[i]) for i in range(TEST))
    t_test = time.perf_counter() - t0
    row = {"bench": f"abbe-sandon parity n={n}", "secret": secret, "memory_bits": lr.m,
           "stored_edges": len(net.src), "samples": len(stream.xs), "samples_used": rep.samples_used,
           "two_n": 2 * n, "test_accuracy": right / TEST, "mismatches": 0,
           "build_s": round(t_build, 2), "train_s": round(t_train, 2), "test_s": round(t_test, 2),
           "total_s": round(t_build + t_train + t_test, 2)}
    x01 = stream.xs.astype(np.int64)
    mask = np.array([int(c) for c in secret])
    used = baseline(x01[:rep.samples_used], mask, params=len(net.src), test=TEST, seed=seed)
    row.update({k: v for k, v in used.items() if "test" in k or k == "mlp_params"})
    every = baseline(x01, mask, params=len(net.src), test=TEST, seed=seed)
    row.update({f"{k}_all_{len(x01)}": v for k, v in every.items() if "test" in k})
    return row


def main(argv: list[str]) -> list[dict]:
    ns = NS[:1] if "--quick" in argv else NS
    rows = []
    for n in ns:
        rows.append(bench_one(n))
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


if __name__ == "__main__":
    from rich.console import Console

    for r in main(sys.argv[1:]):
        Console().print(r)
