"""The gd-trace backend's input encodings of Welper §5's extended network (the kinds
``"signs"`` and ``"reals"``; its output is the generic ``"values"``): a user's input
string is the dataset's ``n x M`` features, as ``+`` / ``-`` signs (±1 data) or as
comma-separated numbers (App. B fixed-point data)."""

from __future__ import annotations

import numpy as np

from tm2nn.errors import Tm2nnError


def signs(text: str, n: int) -> np.ndarray:
    """``n`` characters ``+``/``-`` -> ±1 (a located error otherwise)."""
    for i, ch in enumerate(text):
        if ch not in "+-":
            raise Tm2nnError(f"input: {ch!r} is not + or - (the model reads {n} feature signs)",
                             file="input", line=1, col=i + 1, snippet=text)
    if len(text) != n:
        raise Tm2nnError(f"input: the model reads {n} feature signs, got {len(text)}",
                         file="input", line=1, col=max(1, len(text)), snippet=text)
    return np.array([1.0 if ch == "+" else -1.0 for ch in text], dtype=np.float32)


def reals(text: str, n: int) -> np.ndarray:
    """``n`` comma-separated finite numbers (a located error otherwise)."""
    out, col = [], 1
    for f in text.split(","):
        try:
            v = float(f)
        except ValueError:
            v = float("nan")
        if not np.isfinite(v):
            raise Tm2nnError(f"input: {f.strip() or 'an empty field'!r} is not a finite number (the model reads "
                             f"{n} comma-separated numbers)", file="input", line=1, col=col, snippet=text)
        out.append(v)
        col += len(f) + 1
    if len(out) != n:
        raise Tm2nnError(f"input: the model reads {n} comma-separated numbers, got {len(out)}",
                         file="input", line=1, col=1, snippet=text)
    return np.array(out, dtype=np.float64)


#: an input encoding's kind -> how one input string becomes the features
KINDS = {"signs": signs, "reals": reals}


def encode_features(enc: dict, texts: list[str]) -> np.ndarray:
    """Input strings -> the extended network's float32 input, one row per string (the
    dataset's features in ``enc["names"]``' order)."""
    kind = enc.get("kind")
    if kind not in KINDS:
        raise Tm2nnError(f"this model uses the encoding {kind!r}, which this tm2nn cannot handle")
    if not texts:
        return np.zeros((0, 0), np.float32)
    one, n = KINDS[kind], len(enc["names"])
    return np.stack([np.asarray(one(t, n), dtype=np.float32) for t in texts])
