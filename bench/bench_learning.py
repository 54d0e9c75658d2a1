"""Learning, measured (issue 38, Deliver 3; docs/learning.md): the constructions trained in
their own architecture by ``tm2nn train`` (:func:`tm2nn.api.train`).

Sections are a registry, :data:`SECTIONS`: ``(name, quick, full)``; ``quick()`` returns
rows for ``make bench`` (bench/run_all.py), ``full()`` the markdown of the section's table
(``--full``).  Tables c and d live in bench/learning_goel.py and bench/learning_precision.py
(each also runs alone) and are registered here.

* **a. The basin.**  Start from the construction plus Gaussian noise whose per-tensor ℓ2
  norm is about ε·γ (γ the construction's certified radius, per parameter block; each
  entry's standard deviation is ε·γ/√N with N the largest trained tensor's entry count, so
  no tensor's expected norm exceeds ε·γ), for ε up to and beyond the attack radius of
  ``tm2nn margin``; train; report how often the net ends exact on every input, its distance
  to the construction and the certified margin of the weights it ends with.
* **b. From scratch.**  Test error of the final weights (held-out inputs, drawn on another
  seed stream) against the number of training samples 10²…10⁶ at a fixed Adam-step budget
  (``--updates``), lr tuned on its own seed, seeds 0-2, next to Lemma 2.3's n (b1); widths
  w = r, 4r, 16r (``--pad-width``), Theorem 3.1's log w claim (b2); the transformer (b3); the
  cost of drawing 10⁶ inputs (b0).

Single-threaded torch (``TM2NN_THREADS=1`` is set here); each row prints the load.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning_goel  # noqa: E402  (table c)
import learning_precision  # noqa: E402  (table d)

os.environ.setdefault("TM2NN_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"

C17 = """circuit c17 {
  # ISCAS-85 c17: six NAND gates
  input n1 n2 n3 n6 n7
  output n22 n23
  n10 = NAND(n1, n3)
  n11 = NAND(n3, n6)
  n16 = NAND(n2, n11)
  n19 = NAND(n11, n7)
  n22 = NAND(n10, n16)
  n23 = NAND(n16, n19)
}
"""


def adder_text(n: int) -> str:
    """An n-bit ripple-carry adder in the circuit DSL (examples/ripple_adder4.circ, widened)."""
    lines = [f"circuit ripple_adder{n} {{", f"  input a[{n}] b[{n}] cin", f"  output s[{n}] cout"]
    for i in range(n):
        cin = "cin" if i == 0 else f"c[{i - 1}]"
        lines += [f"  p[{i}] = XOR(a[{i}], b[{i}])", f"  s[{i}] = XOR(p[{i}], {cin})",
                  f"  c[{i}] = OR(AND(a[{i}], b[{i}]), AND(p[{i}], {cin}))"]
    lines += [f"  cout = BUF(c[{n - 1}])", "}"]
    return "\n".join(lines) + "\n"


SECTIONS: list = []


def register(name: str, quick, full) -> None:
    """Add a section: ``quick() -> [row dict]``, ``full() -> [markdown line]``."""
    SECTIONS.append((name, quick, full))


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _sources(tmp: Path) -> dict:
    (tmp / "c17.circ").write_text(C17)
    (tmp / "ripple_adder8.circ").write_text(adder_text(8))
    from gen_circuits import circuit_text, random_layered_circuit

    # 11 random gates in 2 layers (8, then the 3 outputs) over 20 inputs: 9 of them in the outputs' cone
    (tmp / "shallow20.circ").write_bytes(circuit_text(random_layered_circuit(11, 20, 8, seed=10, name="shallow20"),
                                                      "circ"))
    return {"c17": (tmp / "c17.circ", "relu-circuit", {}),
            "ripple_adder4": (EX / "ripple_adder4.circ", "relu-circuit", {}),
            "even_ones (unrolled, T=4)": (EX / "even_ones.tm", "relu-circuit", {"steps": 4}),
            "bb3 (T=12)": (EX / "bb3.tm", "transformer", {"steps": 12}),
            "bb4 (T=16)": (EX / "bb4.tm", "transformer", {"steps": 16}),
            "ripple_adder8": (tmp / "ripple_adder8.circ", "relu-circuit", {}),
            # bench/gen_circuits.py's random_layered_circuit(11, 20, 8, seed=10): 2^20 inputs, 3 outputs
            "shallow20": (tmp / "shallow20.circ", "relu-circuit", {}),
            "binary_increment (T=8)": (EX / "binary_increment.tm", "transformer", {"steps": 8})}


def _gamma_and_scale(path, backend: str, kw: dict) -> tuple[float, int, float | None]:
    """(γ of the construction, the largest trained tensor's entry count, the per-layer
    gradient attack's ε where measured)."""
    from tm2nn import backends
    from tm2nn.api import compile
    from tm2nn.training.options import TrainOptions

    spec = backends.get(backend)
    c = compile(str(path), backend, **{**spec.training.compile, **kw})
    gamma = float(spec.analysis("certified_margin")(compile(str(path), backend, **kw))["radius"])
    task = spec.training.task(c, TrainOptions(), spec.training.Options())
    n = max(p.numel() for p in task.params.values())
    attack = None
    if backend == "relu-circuit" and not kw:
        from tm2nn.api import load
        t = spec.analysis("margin")(load(str(path)), spec.options(), samples=8, trials=2, seed=0)
        attack = float(t.json[0]["eps_gradient"])
    return gamma, n, attack


def _short(m) -> str:
    return f"{m:.3g}" if isinstance(m, float) else str(m).split(";")[0][:60]


def basin(names, eps_list, seeds, epochs: int, samples: int) -> list[dict]:
    from tm2nn.api import train
    from tm2nn.training.session import certified

    rows = []
    with tempfile.TemporaryDirectory() as d:
        src = _sources(Path(d))
        for name in names:
            path, backend, kw = src[name]
            gamma, n, attack = _gamma_and_scale(path, backend, kw)
            lr = 1e-3 if backend == "relu-circuit" else 1e-4
            for eps in eps_list:
                sigma = eps * gamma / math.sqrt(n)
                runs = []
                t0 = time.perf_counter()
                for seed in seeds:
                    res = train(str(path), backend, init=f"perturbed:{sigma:.6g}", seed=seed, samples=samples,
                                epochs=epochs, batch=32, lr=lr, test=1024, margin=False, **kw)
                    r = res.summary
                    r["margin_end"] = certified(res.model, res.model)  # the best weights' certificate
                    runs.append(r)
                exact = [r for r in runs if r["exact"]]
                start_exact = [r for r in runs if r["start"]["test_error"] == 0 and r["start"]["train_error"] == 0]
                rows.append({"bench": f"learning a: {name}", "eps_x_gamma": eps, "gamma": f"{gamma:.3g}",
                             "attack": f"{attack:.3g}" if attack else "-", "sigma": f"{sigma:.3g}",
                             "start_exact": f"{len(start_exact)}/{len(runs)}",
                             "end_exact": f"{len(exact)}/{len(runs)}",
                             "test_error": "/".join(f"{r['test_error']:.3g}" for r in runs),
                             "l2_end": "/".join(f"{r['l2']:.3g}" for r in runs),
                             "l2_start": "/".join(f"{r['start']['l2']:.3g}" for r in runs),
                             "margin_end": _short(runs[0]["margin_end"]),
                             "cmd": f"tm2nn train {Path(path).name} --backend {backend}"
                                    + "".join(f" --{k} {v}" for k, v in kw.items())
                                    + f" --init perturbed:{sigma:.3g} --samples {samples} --epochs {epochs} "
                                      f"--batch 32 --lr {lr:g} --seed S",
                             "seeds": ",".join(map(str, seeds)), "seconds": round(time.perf_counter() - t0, 1),
                             "load": _load(), "threads": runs[0]["threads"]})
    return rows


def _spread(vals: list[float]) -> str:
    """``mean ± sd`` (sample sd over the seeds)."""
    m = statistics.fmean(vals)
    return f"{m:.4f} ± {statistics.stdev(vals):.4f}" if len(vals) > 1 else f"{m:.4f}"


def _class_n(path, backend: str, kw: dict, pad, lem) -> str:
    """Lemma 2.3's n (ε = 0.1) for the dense class F_{w,d,α} at the trained width: the
    construction's α and γ (``lem``, train's ``lemma23``), p the trained entry count of the
    (padded) net, so only p, that is log w, moves with the width (Theorem 3.1)."""
    from tm2nn import backends
    from tm2nn.api import compile
    from tm2nn.training.options import TrainOptions
    from tm2nn.verify.statistics import sample_complexity

    if not isinstance(lem, dict):
        return str(lem)
    spec = backends.get(backend)
    task = spec.training.task(compile(str(path), backend, **{**spec.training.compile, **kw}), TrainOptions(),
                              spec.training.Options(**({"pad_width": pad} if pad else {})))
    p = sum(t.numel() for t in task.params.values())
    return f"{sample_complexity(lem['alpha'], lem['gamma'], p, 0.1)['n']:.3g} (p = {p:,})"


def _final(r: dict) -> tuple[float, float]:
    """(held-out error, held-out bit error) of the FINAL weights: the last epoch's row, not the
    best one (train keeps the weights with the lowest test error, a selection on the test set)."""
    last = r["epochs"][-1]
    return last["test_error"], last["test_step_error"]


def _one(path, backend, kw, n, seed, lr, updates, batch, test, pad) -> dict:
    from tm2nn.api import train

    extra = {"pad_width": pad} if pad else {}
    # epochs: enough for `updates` steps; --updates ends the run there, mid-epoch at large n
    epochs = math.ceil(updates / math.ceil(n / batch))
    r = train(str(path), backend, init="scratch", seed=seed, samples=n, epochs=epochs, updates=updates, batch=batch,
              lr=lr, test=test, margin=False, **kw, **extra).summary
    assert r["updates"] == updates and r["overlap"] == 0, (r["updates"], r["overlap"])  # the design's two premises
    return r


def _tune(path, backend, kw, n, lrs, updates, batch, test, pad) -> tuple[float, str]:
    """The lr of ``lrs`` with the lowest final held-out error (then bit error) at ``n`` samples,
    on seed TUNE_SEED: its own training and test draws, not the reported seeds'."""
    got = {lr: _final(_one(path, backend, kw, n, TUNE_SEED, lr, updates, batch, test, pad)) for lr in lrs}
    best = min(lrs, key=lambda lr: got[lr])
    return best, " ".join(f"{lr:g}:{got[lr][0]:.3f}/{got[lr][1]:.3f}" for lr in lrs)


#: the seed of the lr-tuning runs (the reported rows use seeds 0, 1, 2 ...)
TUNE_SEED = 100


def scratch(name: str, sample_list, seeds, *, pads=(None,), updates: int, batch: int, lrs, tune_n: int,
            test: int = 2048) -> list[dict]:
    """Table b: ``--init scratch`` at a fixed budget of ``updates`` Adam steps of ``batch``
    inputs for every sample count (epochs = updates·batch/n: small n repeats, large n sees
    each input about once, or a part of them when n > updates·batch); lr tuned once per
    circuit and width on ``lrs`` at ``tune_n`` samples (:func:`_tune`); test error of the
    final weights on ``test`` fresh inputs (another seed stream, none a training input; the
    held-out rest of a small space), mean ± sd over ``seeds``."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        path, backend, kw = _sources(Path(d))[name]
        for pad in pads:
            t0 = time.perf_counter()
            lr, grid = _tune(path, backend, kw, tune_n, lrs, updates, batch, test, pad) if len(lrs) > 1 else \
                (lrs[0], "-")
            tuned = time.perf_counter() - t0
            for n in sample_list:
                t0 = time.perf_counter()
                runs = [_one(path, backend, kw, n, seed, lr, updates, batch, test, pad) for seed in seeds]
                errs = [_final(r) for r in runs]
                lem = runs[0]["lemma23"]
                w = f"{pad}r" if pad else "r (construction)"
                rows.append({
                    "bench": f"learning b: {name}", "w": w, "samples": n, "updates": updates,
                    "batch": min(batch, n), "epochs": f"{updates * min(batch, n) / n:.3g}", "lr": f"{lr:g}",
                    "lr_grid": grid, "tune_s": round(tuned, 1),
                    "train_error": _spread([r["epochs"][-1]["train_error"] for r in runs]),
                    "test_error": _spread([e[0] for e in errs]), "test_bit_error": _spread([e[1] for e in errs]),
                    "per_seed": "/".join(f"{e[0]:.3f}" for e in errs),
                    "loss": "/".join(f"{r['epochs'][0]['loss']:.3g}→{r['epochs'][-1]['loss']:.3g}" for r in runs),
                    "test_inputs": "/".join(str(r["test_inputs"]) for r in runs), "test_mode": runs[0]["test_mode"],
                    "lemma23_n": f"{lem['n']:.3g}" if isinstance(lem, dict) else str(lem)[:40],
                    "lemma23_n_w": _class_n(path, backend, kw, pad, lem) if backend == "relu-circuit" else "-",
                    "seeds": ",".join(map(str, seeds)), "seconds": round(time.perf_counter() - t0, 1), "load": _load(),
                    "threads": runs[0]["threads"],
                    "cmd": f"tm2nn train {Path(path).name} --backend {backend}"
                           + "".join(f" --{k} {v}" for k, v in kw.items())
                           + f" --init scratch --samples {n} --epochs {math.ceil(updates / math.ceil(n / batch))} "
                             f"--updates {updates} --batch {batch} --lr {lr:g} --test {test}"
                           + (f" --pad-width {pad}" if pad else "") + " --seed S"})
                print(rows[-1], file=sys.stderr, flush=True)  # a long run's rows as they come
    return rows


def _table(rows: list[dict], keys: list[str]) -> list[str]:
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    return out


A_KEYS = ["bench", "eps_x_gamma", "gamma", "attack", "sigma", "start_exact", "end_exact", "test_error", "l2_start",
          "l2_end", "margin_end", "seeds", "seconds", "load", "threads", "cmd"]
B_KEYS = ["bench", "w", "samples", "updates", "batch", "epochs", "lr", "train_error", "test_error", "test_bit_error",
          "per_seed", "test_inputs", "test_mode", "lemma23_n", "lemma23_n_w", "seeds", "seconds", "load", "threads", "cmd"]
B_TUNE_KEYS = ["bench", "w", "lr", "lr_grid", "tune_s"]
B_LOSS_KEYS = ["bench", "samples", "loss", "test_bit_error"]


def quick_a() -> list[dict]:
    return basin(["c17"], [1.0, 16.0], [0], epochs=3, samples=64)


def full_a() -> list[str]:
    rows = basin(["c17", "ripple_adder4", "even_ones (unrolled, T=4)"], [0.5, 1, 2, 4, 16], [0, 1, 2], epochs=20,
                 samples=256)
    rows += basin(["bb3 (T=12)", "bb4 (T=16)"], [1, 4, 16], [0, 1], epochs=3, samples=64)
    rows += beyond()
    return ["### a. The basin", ""] + _table(rows, A_KEYS)


def beyond() -> list[dict]:
    """Past the break: the ε where the nets above were still exact at the start."""
    rows = basin(["ripple_adder4", "even_ones (unrolled, T=4)"], [64, 256], [0, 1], epochs=20, samples=256)
    return rows + basin(["bb3 (T=12)"], [64, 256], [0, 1], epochs=3, samples=64)


#: table b's designs (docs/learning.md): Adam steps, batch, the lr grid and the n it is tuned at
B_SAMPLES = dict(updates=500, batch=200, lrs=(1e-3, 3e-3, 1e-2), tune_n=10_000)
B_WIDTH = dict(updates=500, batch=20, lrs=(1e-4, 3e-4, 1e-3, 3e-3), tune_n=1_000, test=1024)
B_TRANSFORMER = dict(updates=64, batch=32, lrs=(3e-3, 3e-2), tune_n=1_000, test=256)


def quick_b() -> list[dict]:
    return scratch("shallow20", [100], [0], pads=(4,), updates=100, batch=200, lrs=(3e-3,), tune_n=100)


def _tables(title: str, rows: list[dict], tune: bool = True) -> list[str]:
    out = [f"### {title}", ""] + _table(rows, B_KEYS)
    if tune:
        seen = {(r["bench"], r["w"]): r for r in rows}
        out += ["", "lr tuning (seed 100, its own draws; final held-out error / bit error per lr):", ""]
        out += _table(list(seen.values()), B_TUNE_KEYS)
    return out


def full_b_samples() -> list[str]:
    rows = scratch("shallow20", [100, 1000, 10_000, 100_000, 1_000_000], [0, 1, 2], pads=(4,), **B_SAMPLES)
    rows += scratch("c17", [16, 100], [0, 1, 2], pads=(4,), **{**B_SAMPLES, "tune_n": 100})  # the sanity rows
    return _tables("b1. From scratch: samples", rows)


def full_b_width() -> list[str]:
    rows = scratch("shallow20", [100, 1000, 10_000], [0, 1, 2], pads=(None, 4, 16), **B_WIDTH)
    return _tables("b2. From scratch: width (Theorem 3.1, log w)", rows)


def full_b_transformer() -> list[str]:
    rows = scratch("binary_increment (T=8)", [100, 1000], [0, 1, 2], **B_TRANSFORMER)
    return _tables("b3. From scratch: transformer", rows) + ["", *_table(rows, B_LOSS_KEYS)]


def full_b_draw() -> list[str]:
    """The 10⁶-sample row's inputs: ``InputSpace.sample`` (the stream drawn at once) against
    the per-string ``random`` it reproduces, and the interpreter's targets for them."""
    import itertools

    import numpy as np

    from tm2nn import backends
    from tm2nn.api import compile
    from tm2nn.backends.relu_circuit.train import _targets

    rows = []
    with tempfile.TemporaryDirectory() as d:
        path = _sources(Path(d))["shallow20"][0]
        c = compile(str(path), "relu-circuit")
        space = backends.get("relu-circuit").reference(c).space()
        for n in (100_000, 1_000_000):
            t0 = time.perf_counter()
            slow = list(itertools.islice(space.random([0, 0]), n))
            t1 = time.perf_counter()
            fast = space.sample([0, 0], n)
            t2 = time.perf_counter()
            _targets(c)(fast[:100_000])  # the interpreter's outputs (encode + eval_circuit) for 10⁵ of them
            t3 = time.perf_counter()
            assert slow == fast
            rows.append({"bench": "learning b: draw (shallow20, 20-bit inputs)", "inputs": f"{n:,}",
                         "random_s": round(t1 - t0, 2), "sample_s": round(t2 - t1, 2),
                         "ratio": f"{(t1 - t0) / max(t2 - t1, 1e-9):.1f}x", "targets_1e5_s": round(t3 - t2, 2),
                         "same_stream": bool(np.all([a == b for a, b in zip(slow[:1000], fast[:1000])])),
                         "load": _load(), "threads": 1})
    return ["### b0. Drawing 10⁶ inputs", ""] + _table(rows, list(rows[0]))


register("a. The basin", quick_a, full_a)
register("b. From scratch (samples)", quick_b, full_b_samples)
register("b. From scratch (width)", lambda: [], full_b_width)
register("b. From scratch (transformer)", lambda: [], full_b_transformer)
register("b. From scratch (draw)", lambda: [], full_b_draw)
register("c. Goel's odds", learning_goel.quick, learning_goel.full_markdown)
register("d. Precision (W8)", learning_precision.quick, learning_precision.full_markdown)


def main(argv=None) -> list[dict]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--full" in argv:
        only = [a for a in argv if not a.startswith("--")]
        for name, _quick, full in SECTIONS:
            if not only or any(name.startswith(o) for o in only):
                print("\n".join(full()), flush=True)
                print()
        return []
    rows = []
    for _name, quick, _full in SECTIONS:
        rows += quick()
    return rows


if __name__ == "__main__":
    out = main()
    for r in out:
        print(r)
