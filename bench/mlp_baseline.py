"""The baseline of the separation benchmark (issue 18, ``bench/bench_separation.py``): a
plain one-hidden-layer ReLU MLP trained **online on fresh samples** on the same parity
targets as the Abbe–Sandon emulation net, and the perturbed-update regime (noise or
limited precision) that both nets are trained under.

* :func:`parity_secret` is the one place where a benchmark secret is drawn (a seeded
  random ⌈n/2⌉-subset of the n bits, as in ``bench/bench_abbe_sandon.py``).
* :func:`train_online` draws a fresh batch every step (never a fixed training set), checks
  the accuracy on held-out inputs every ``eval_every`` samples and stops at the target
  accuracy or when the budget of samples or wall time is spent.
* :class:`Perturb` / :func:`perturb_update` are the regime of Abbe & Sandon's robustness
  statements, applied to every weight after each optimiser step: Theorem 5 (§4.2) lets
  each weight's update be perturbed by ``δ ∈ [-b, b]`` per step (``kind="uniform"``),
  Theorem 3 (§5.1, eq. (11)) adds Gaussian noise ``Z⁽ᵗ⁾`` (``kind="gaussian"``), and
  limited precision rounds each update to a grid (``grid``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

OPTIMIZERS = ("adam", "sgd")
#: Default learning rates (chosen on n = 12..24, docs/benchmarks.md "Separation").
DEFAULT_LR = {"adam": 1e-3, "sgd": 0.05}
KINDS = ("uniform", "gaussian")


def parity_secret(n: int, seed: int = 0) -> np.ndarray:
    """The benchmark secret: a 0/1 mask of a random ⌈n/2⌉-subset of the n bits,
    ``numpy.random.default_rng(seed).choice(n, size=(n + 1) // 2, replace=False)``
    (low-degree parities are easy for any net)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(n, dtype=np.int64)
    mask[rng.choice(n, size=(n + 1) // 2, replace=False)] = 1
    return mask


def secret_string(mask) -> str:
    """The mask as the bit string of ``--target parity:SECRET``."""
    return "".join(str(int(b)) for b in mask)


@dataclass(frozen=True)
class Perturb:
    """A perturbed update, applied to every weight after each optimiser step.

    ``noise`` is the per-weight, per-step size b: ``kind="uniform"`` adds ``U[-b, b]``
    (Theorem 5's ``δ ∈ [-1/(n² t_n), 1/(n² t_n)]`` with ``b = 1/(n² t_n)``),
    ``kind="gaussian"`` adds ``N(0, b²)`` (Theorem 3's ``Z⁽ᵗ⁾``).  ``grid > 0`` rounds
    each update (new weight minus old) to the nearest multiple of ``grid`` before the
    noise is added, with the initial weights rounded onto the grid: limited precision.
    """

    noise: float = 0.0
    kind: str = "uniform"
    grid: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Perturb.kind must be one of {KINDS}, got {self.kind!r}")
        if not (self.noise >= 0 and self.grid >= 0):
            raise ValueError(f"Perturb noise and grid must be >= 0, got {self.noise!r}, {self.grid!r}")

    @property
    def active(self) -> bool:
        return self.noise > 0 or self.grid > 0

    def label(self) -> str:
        parts = []
        if self.grid:
            parts.append(f"grid 2^{np.log2(self.grid):g}" if np.log2(self.grid).is_integer() else f"grid {self.grid:g}")
        if self.noise:
            parts.append(f"{self.kind} noise {self.noise:.2g}")
        return ", ".join(parts) or "clean"


def float_params(module) -> list:
    """The weights the perturbation acts on: every parameter SGD is given
    (``requires_grad``).  In the MLP that is every weight and bias; in the float64 G_n it
    is every edge, the M_s edges and those frozen by the construction alike (the noise of
    Theorems 3 and 5 perturbs every edge, not only those SGD moves), but not the carries
    of ``ir_net``'s layering, which are no edges of G_n."""
    return [p for p in module.parameters() if p.requires_grad and p.dtype.is_floating_point]


def snap_to_grid(params, grid: float) -> None:
    """Round the weights onto the grid (limited precision's initial weights)."""
    import torch

    if grid > 0:
        with torch.no_grad():
            for p in params:
                p.copy_(torch.round(p / grid) * grid)


def perturb_update(params, before, perturb: Perturb, gen) -> None:
    """Replace each weight ``p`` (``before`` its values before the optimiser step) by
    ``before + round_grid(p - before) + noise`` (:class:`Perturb`); ``gen`` is the
    ``torch.Generator`` of the noise."""
    import torch

    with torch.no_grad():
        for p, b in zip(params, before):
            d = p - b
            if perturb.grid > 0:
                d = torch.round(d / perturb.grid) * perturb.grid
            if perturb.noise > 0:
                if perturb.kind == "uniform":
                    z = torch.rand(d.shape, generator=gen, dtype=d.dtype) * 2 - 1
                else:
                    z = torch.randn(d.shape, generator=gen, dtype=d.dtype)
                d = d + perturb.noise * z
            p.copy_(b + d)


@dataclass
class MLPOptions:
    """One online run: the net ``n -> width -> 1`` (ReLU, PyTorch's default
    initialisation, float32, squared loss on ±1 labels, the emulation net's loss), the
    optimiser, and the budget."""

    width: int = 512
    batch: int = 64
    optimizer: str = "adam"
    lr: float | None = None  # None: DEFAULT_LR[optimizer]
    budget_samples: int = 10_000_000
    budget_s: float = 120.0
    target: float = 0.99
    eval_every: int = 8192  # samples between held-out checks
    eval_size: int = 4096  # held-out inputs of the stopping check
    confirm_size: int = 10_000  # further fresh inputs scored once at the end
    threads: int = 1
    seed: int = 0
    perturb: Perturb = field(default_factory=Perturb)

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        for name in ("width", "batch", "budget_samples", "eval_every", "eval_size", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"MLPOptions.{name} must be >= 1, got {getattr(self, name)!r}")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.optimizer]


def _draw(n: int, k: int, mask, gen):
    """``k`` fresh uniform inputs in ±1 and their ±1 parity labels (+1 for odd, the
    emulation net's ``2F(x) - 1``)."""
    import torch

    x = torch.randint(0, 2, (k, n), generator=gen, dtype=torch.float32)
    return 2 * x - 1, 2 * torch.remainder(x @ mask, 2) - 1


def _accuracy(model, x, y) -> float:
    import torch

    with torch.no_grad():
        return float(((model(x)[:, 0] >= 0).float() * 2 - 1 == y).float().mean())


def train_online(n: int, mask, opts: MLPOptions | None = None) -> dict:
    """Train the MLP online on the parity over ``mask`` (0/1, length n): a fresh batch of
    ``opts.batch`` uniform inputs every step, ``opts.perturb`` applied after each step.

    Returns ``reached`` (the held-out accuracy hit ``opts.target``), ``samples`` and
    ``seconds`` (training time, checks included) at that check or when the budget ran out,
    ``status`` (``"reached"``, ``"budget exhausted (samples)"``, ``"budget exhausted
    (time)"`` or ``"diverged"``), ``accuracy`` (the last check), ``best_accuracy`` and
    ``confirm_accuracy`` (the final net on ``opts.confirm_size`` further fresh inputs).
    """
    import torch

    opts = opts or MLPOptions()
    threads = torch.get_num_threads()
    torch.set_num_threads(opts.threads)
    try:
        torch.manual_seed(opts.seed)
        gen = torch.Generator().manual_seed(opts.seed)
        noise_gen = torch.Generator().manual_seed(opts.perturb.seed + 1)
        m = torch.as_tensor(np.asarray(mask), dtype=torch.float32)
        model = torch.nn.Sequential(torch.nn.Linear(n, opts.width), torch.nn.ReLU(), torch.nn.Linear(opts.width, 1))
        params = float_params(model)
        snap_to_grid(params, opts.perturb.grid)
        lr = opts.learning_rate
        opt = (torch.optim.Adam(params, lr=lr) if opts.optimizer == "adam" else torch.optim.SGD(params, lr=lr))
        x_eval, y_eval = _draw(n, opts.eval_size, m, gen)
        seen, since, best, acc, status = 0, 0, 0.0, 0.0, ""
        t0 = time.perf_counter()
        while True:
            x, y = _draw(n, opts.batch, m, gen)
            loss = ((model(x)[:, 0] - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            before = [p.detach().clone() for p in params] if opts.perturb.active else None
            opt.step()
            if before is not None:
                perturb_update(params, before, opts.perturb, noise_gen)
            seen += opts.batch
            since += opts.batch
            if since >= opts.eval_every or seen >= opts.budget_samples:
                since = 0
                acc = _accuracy(model, x_eval, y_eval)
                best = max(best, acc)
                if not np.isfinite(loss.item()):
                    status = "diverged"
                elif acc >= opts.target:
                    status = "reached"
                elif seen >= opts.budget_samples:
                    status = "budget exhausted (samples)"
                elif time.perf_counter() - t0 >= opts.budget_s:
                    status = "budget exhausted (time)"
                if status:
                    break
        seconds = time.perf_counter() - t0
        x_c, y_c = _draw(n, opts.confirm_size, m, gen)
        return {"reached": status == "reached", "status": status, "samples": seen, "seconds": round(seconds, 2),
                "accuracy": round(acc, 4), "best_accuracy": round(best, 4),
                "confirm_accuracy": round(_accuracy(model, x_c, y_c), 4),
                "width": opts.width, "batch": opts.batch, "optimizer": opts.optimizer, "lr": lr,
                "params": sum(p.numel() for p in params), "threads": opts.threads}
    finally:
        torch.set_num_threads(threads)


__all__ = ["OPTIMIZERS", "DEFAULT_LR", "Perturb", "MLPOptions", "parity_secret", "secret_string", "float_params",
           "snap_to_grid", "perturb_update", "train_online"]
