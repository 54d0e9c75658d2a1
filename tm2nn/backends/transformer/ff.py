"""Helpers to write feed-forward layers by label: ``{(out_label, in_label): weight}``."""

from __future__ import annotations

import numpy as np

from tm2nn.nets import Affine, Op, ReLU, Space, SparseMatrix


def relu_layer(name: str, x: str, in_space: Space, out_space: Space, weights: dict,
               bias: dict | None = None, cite: str = "") -> list[Op]:
    """``φ(W x + b)`` with ``W``, ``b`` given by labels; returns (affine, relu) ops, the
    ReLU named ``name`` and the affine ``name + ".lin"``."""
    rows, cols, vals = [], [], []
    for (o, i), w in weights.items():
        if w:
            rows.append(out_space.index(o))
            cols.append(in_space.index(i))
            vals.append(float(w))
    b = np.zeros(len(out_space))
    for o, v in (bias or {}).items():
        b[out_space.index(o)] = v
    W = SparseMatrix((len(out_space), len(in_space)), np.array(rows, dtype=np.int64),
                     np.array(cols, dtype=np.int64), np.array(vals))
    return [Affine(f"{name}.lin", (x,), weight=W, bias=b, out=out_space, cite=cite),
            ReLU(name, (f"{name}.lin",))]


def copy(labels, weights: dict) -> dict:
    """Add identity entries ``(label, label)`` to ``weights``."""
    for lab in labels:
        weights[(lab, lab)] = 1.0
    return weights


def group(space: Space, g: str) -> list[str]:
    """The labels of group ``g`` in ``space``, in order."""
    return [space.labels[i] for i in space.groups.get(g, [])]
