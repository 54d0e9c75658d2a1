"""Elementary activations of the registry (:mod:`tm2nn.nets.activations`): the square root
and the reciprocal of Welper's extended network ((1): "ReLU, square root and product
non-linearities"; App. C divides by ``x^T x`` and by a norm)."""

from __future__ import annotations

import numpy as np
import torch


def sqrt(x):
    return np.sqrt(x)


def sqrt_torch(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(x)


def reciprocal(x):
    return 1.0 / np.asarray(x)


def reciprocal_torch(x: torch.Tensor) -> torch.Tensor:
    return torch.reciprocal(x)
