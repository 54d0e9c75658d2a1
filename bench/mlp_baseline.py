"""The baseline of the parity benchmark (issue 6): a plain MLP of a given parameter count
trained by SGD or Adam on the same ±1 samples the compiled net saw, then scored on fresh
inputs.  Abbe & Sandon's point (§1, Theorem 3) is that such a net, from a generic
initialisation, stays near chance on parities of growing size while the emulation net
learns them exactly.
"""

from __future__ import annotations

import math

import numpy as np


def hidden_width(n_in: int, params: int) -> int:
    """Hidden units of a one-hidden-layer MLP ``n_in -> h -> 1`` with about ``params``
    parameters: ``h (n_in + 2) + 1 ≈ params``."""
    return max(1, round((params - 1) / (n_in + 2)))


def train_mlp(x: np.ndarray, y: np.ndarray, params: int, optimizer: str = "adam", epochs: int = 200,
              lr: float | None = None, seed: int = 0):
    """Train ``n -> h -> 1`` (ReLU, default PyTorch initialisation) with squared loss on
    ``x`` ``[k, n]`` in ±1 and labels ``y`` ``[k]`` in ±1, full passes over the ``k``
    samples with batch size 1 (as the emulation net sees them).  Returns the model."""
    import torch

    torch.manual_seed(seed)
    n = x.shape[1]
    h = hidden_width(n, params)
    model = torch.nn.Sequential(torch.nn.Linear(n, h), torch.nn.ReLU(), torch.nn.Linear(h, 1)).double()
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr or 1e-3)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr or 1e-2)
    else:
        raise ValueError(f"optimizer must be adam or sgd, got {optimizer!r}")
    xt = torch.from_numpy(np.asarray(x, dtype=np.float64))
    yt = torch.from_numpy(np.asarray(y, dtype=np.float64))
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for i in rng.permutation(len(xt)):
            opt.zero_grad()
            loss = (model(xt[i:i + 1])[0, 0] - yt[i]) ** 2
            loss.backward()
            opt.step()
    return model


def accuracy(model, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of ``x`` where the sign of the output equals ``y`` (±1)."""
    import torch

    with torch.no_grad():
        out = model(torch.from_numpy(np.asarray(x, dtype=np.float64)))[:, 0].numpy()
    return float(np.mean(np.where(out >= 0, 1, -1) == y))


def parity_pm(x01: np.ndarray, secret: np.ndarray) -> np.ndarray:
    """±1 label of parity over ``secret`` (a 0/1 mask) of 0/1 inputs: +1 for odd."""
    return np.where((x01 @ secret) % 2 == 1, 1, -1)


def baseline(x01_train: np.ndarray, secret: np.ndarray, params: int, test: int = 1000, seed: int = 0,
             epochs: int = 200) -> dict:
    """Train Adam and SGD MLPs on the training samples, score both on ``test`` fresh
    inputs; returns accuracies (training and test) and the hidden width."""
    rng = np.random.default_rng(seed + 1)
    n = x01_train.shape[1]
    x_test = rng.integers(0, 2, (test, n))
    out = {"mlp_hidden": hidden_width(n, params), "mlp_params": hidden_width(n, params) * (n + 2) + 1}
    for opt in ("adam", "sgd"):
        model = train_mlp(2 * x01_train - 1, parity_pm(x01_train, secret), params, opt, epochs, seed=seed)
        out[f"mlp_{opt}_train_accuracy"] = round(accuracy(model, 2 * x01_train - 1, parity_pm(x01_train, secret)), 3)
        out[f"mlp_{opt}_test_accuracy"] = round(accuracy(model, 2 * x_test - 1, parity_pm(x_test, secret)), 3)
    assert math.isfinite(out["mlp_adam_test_accuracy"])
    return out
