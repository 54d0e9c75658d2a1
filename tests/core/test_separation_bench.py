"""The separation benchmark's logic on tiny n (bench/bench_separation.py, bench/mlp_baseline.py;
docs/benchmarks.md "Separation"): the online MLP loop reaches the target on an easy parity
and reports an exhausted budget as such; the perturbation hook really changes the updates
(rounding to the grid, bounded noise), and on the float64 emulation net the grid is a no-op
while noise is not."""

from __future__ import annotations

import bench_separation as bs
import numpy as np
import pytest
import torch
from mlp_baseline import (
    MLPOptions,
    Perturb,
    float_params,
    parity_secret,
    perturb_update,
    snap_to_grid,
    train_online,
)


def test_parity_secret_is_a_seeded_half_subset():
    for n in (4, 5, 9, 64):
        m = parity_secret(n, 3)
        assert m.shape == (n,) and set(m.tolist()) <= {0, 1} and m.sum() == (n + 1) // 2
        assert np.array_equal(m, parity_secret(n, 3))
    assert any(not np.array_equal(parity_secret(16, 0), parity_secret(16, s)) for s in range(1, 4))


def test_mlp_learns_an_easy_parity():
    opts = MLPOptions(width=64, batch=32, budget_samples=200_000, budget_s=30, eval_every=1024, eval_size=1000,
                      confirm_size=2000)
    r = train_online(4, parity_secret(4), opts)
    assert r["reached"] and r["status"] == "reached", r
    assert r["accuracy"] >= 0.99 and r["confirm_accuracy"] >= 0.97
    assert r["samples"] < opts.budget_samples and r["samples"] % opts.batch == 0


def test_mlp_budget_exhausted_is_reported():
    opts = MLPOptions(width=16, batch=32, budget_samples=256, eval_every=64, eval_size=500, confirm_size=500)
    r = train_online(6, parity_secret(6), opts)
    assert not r["reached"] and r["status"] == "budget exhausted (samples)", r
    assert r["samples"] == 256 and r["best_accuracy"] < 0.99
    r = train_online(6, parity_secret(6), MLPOptions(width=16, batch=32, budget_s=1e-9, eval_every=64, eval_size=500,
                                                     confirm_size=500))
    assert r["status"] == "budget exhausted (time)" and r["samples"] == 64, r


def _one_step(perturb: Perturb, lr: float = 1e-3):
    """One Adam step on a tiny MLP with and without ``perturb``: (before, plain, perturbed)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    params = float_params(model)
    snap_to_grid(params, perturb.grid)
    before = [p.detach().clone() for p in params]
    opt = torch.optim.Adam(params, lr=lr)
    x = torch.randn(16, 6)
    ((model(x)[:, 0] - 1) ** 2).mean().backward()
    opt.step()
    plain = [p.detach().clone() for p in params]
    perturb_update(params, before, perturb, torch.Generator().manual_seed(1))
    return before, plain, [p.detach().clone() for p in params]


def test_noise_hook_changes_every_update_within_its_bound():
    b = 1e-3
    before, plain, noisy = _one_step(Perturb(noise=b))
    for p, q in zip(plain, noisy):
        d = (q - p).abs()
        assert (d > 0).all() and (d <= b).all()
    _, plain_g, gauss = _one_step(Perturb(noise=b, kind="gaussian"))
    assert all(not torch.equal(p, q) for p, q in zip(plain_g, gauss))


def test_grid_hook_rounds_updates():
    g = 2.0**-8
    before, plain, rounded = _one_step(Perturb(grid=g), lr=3e-3)
    assert all(torch.equal(torch.round(b / g) * g, b) for b in before)  # initial weights on the grid
    changed = False
    for b, p, q in zip(before, plain, rounded):
        d = q - b
        assert torch.equal(torch.round(d / g) * g, d)  # every update a multiple of the grid
        changed |= not torch.equal(p, q)
    assert changed  # Adam's 3e-3 step is not a multiple of 2^-8: rounding moved it
    # Adam's default rate is below half the grid: every update rounds to 0
    before, plain, rounded = _one_step(Perturb(grid=g), lr=1e-3)
    assert all(torch.equal(b, q) for b, q in zip(before, rounded))
    assert any(not torch.equal(b, p) for b, p in zip(before, plain))


def test_perturb_rejects_bad_options():
    with pytest.raises(ValueError):
        Perturb(kind="laplace")
    with pytest.raises(ValueError):
        Perturb(noise=-1.0)
    with pytest.raises(ValueError):
        MLPOptions(optimizer="lbfgs")


def test_emulation_grid_is_exact_and_noise_is_not():
    """float64 G_n (n = 4, grid 2^-4): rounding to its weight grid leaves the run unchanged
    (every step passes the checks, 100 %); noise of 1e-12 per weight breaks the memory."""
    g = bs.grid_step(4)
    assert g == 2.0**-4
    r = bs.emulation_perturbed(4, 0, Perturb(grid=g))
    assert r["first_mismatch"] is None and r["checked_steps"] == r["stream"] == 48 and r["accuracy"] == 1.0
    r = bs.emulation_perturbed(4, 0, Perturb(noise=1e-12))
    assert r["first_mismatch"] is not None and r["checked_steps"] < r["stream"]


def test_cli_flags(capsys):
    so, md = bs.parse(["--quick", "--budget-samples", "1000", "--regimes", "clean,grid", "--nets", "mlp"])
    assert so.ns == (8, 12, 16) and so.mlp.budget_samples == 1000 and so.regimes == ("clean", "grid") and not md
    assert so.nets == ("mlp",) and so.perturbed_max_n == 12
    so, _ = bs.parse(["--max-n", "24", "--budget-s", "5", "--noise", "1e-17"])
    assert so.ns == (8, 12, 16, 24) and so.mlp.budget_s == 5 and so.noise == 1e-17 and so.perturbed_max_n == 24
    so, _ = bs.parse(["--ns", "20,6", "--width", "64", "--batch", "16", "--adam-lr", "0.002"])
    assert so.ns == (6, 20) and (so.mlp.width, so.mlp.batch) == (64, 16) and so.lrs == {"adam": 0.002}
    for bad in (["--ns", "x"], ["--ns", "1"], ["--width", "0"], ["--sgd-lr", "-1"], ["--regimes", "loud"], ["--nets", "svm"], ["--max-n", "4"], ["--budget-samples", "0"], ["--noise", "0"], ["--bogus"]):
        with pytest.raises(SystemExit) as e:
            bs.parse(bad)
        assert e.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_markdown_rows():
    rows = [{"n": 8, "regime": "clean", "net": "emulation (exact)", "status": "reached", "samples": 17,
             "stream": 96, "seconds": 0.4, "accuracy": 1.0},
            {"n": 8, "regime": "clean", "net": "MLP adam (lr 0.001)", "optimizer": "adam", "lr": 0.001,
             "status": "reached", "samples": 40960, "seconds": 0.4, "accuracy": 1.0, "confirm_accuracy": 0.999},
            {"n": 8, "regime": "noise", "net": "emulation (float64)", "status": "failed", "samples": None,
             "stream": 96, "seconds": 3.0, "accuracy": 0.5, "first_mismatch": "step 3, memory: x"},
            {"n": 8, "regime": "noise", "net": "MLP sgd (lr 0.05)", "optimizer": "sgd", "lr": 0.05,
             "status": "budget exhausted (samples)", "samples": 256, "seconds": 1.0, "accuracy": 0.5,
             "confirm_accuracy": 0.49}]
    md = bs.markdown(rows).splitlines()
    assert len(md) == 4
    assert md[2] == "| 8 | clean | 17 of 96 samples, 0.4 s, 100.0 % | lr 0.001: 40,960 samples, 0.4 s (99.9 %) | - |"
    assert md[3] == ("| 8 | noise | fails (step 3, memory), 50.0 % | - | "
                     "lr 0.05: budget exhausted (samples): 256 samples, 1.0 s, 49.0 % |")


def test_rows_cover_every_regime():
    mlp = MLPOptions(width=16, batch=32, budget_samples=512, eval_every=256, eval_size=256, confirm_size=256)
    so = bs.SepOptions(ns=(4,), nets=("mlp",), mlp=mlp, lrs={"sgd": 0.01}, perturbed_max_n=4)
    rows = bs.rows_for(4, so)
    got = [(r["regime"], r["optimizer"], r["lr"]) for r in rows]
    b = bs.noise_level(4)
    assert got == [("clean", "adam", 1e-3), ("clean", "sgd", 0.01),
                   (f"uniform noise {b:.2g}", "adam", 1e-3), (f"uniform noise {b:.2g}", "sgd", 0.01),
                   ("grid 2^-4", "adam", 2.0**-4), ("grid 2^-4", "adam", 1e-3), ("grid 2^-4", "sgd", 0.01)]
    assert all(r["n"] == 4 and r["samples"] <= 512 for r in rows)
    so.perturbed_max_n = 3  # the perturbed regimes stop above it
    assert [r["regime"] for r in bs.rows_for(4, so)] == ["clean", "clean"]
