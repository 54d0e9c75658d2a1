"""Inputs in, reports out: the encodings a compiled model records in its metadata.

An encoding is a JSON-able dict with a ``"kind"``.  Every kind knows how to turn
a user's ``--input`` string into the model's input vector, and the model's output
vector into the report ARCHITECTURE.md defines (``{"outputs": ...}`` for circuits,
the run report for machines).  ``tm2nn eval`` works from these dicts alone.
"""

from __future__ import annotations

import numpy as np

from tm2nn.errors import Tm2nnError


def encode(enc: dict, text: str) -> np.ndarray:
    """One input string -> float32 input vector."""
    kind = enc.get("kind")
    if kind == "bits":
        from tm2nn.api import parse_bits

        return parse_bits(text, len(enc["names"])).astype(np.float32)
    if kind == "unrolled_tm":
        from tm2nn.passes.unroll import UnrollLayout

        return UnrollLayout.from_json(enc["layout"]).encode(text).astype(np.float32)
    raise Tm2nnError(f"this model uses the input encoding {kind!r}, which this tm2nn cannot encode")


def encode_many(enc: dict, texts: list[str]) -> np.ndarray:
    return np.stack([encode(enc, t) for t in texts]) if texts else np.zeros((0, 0), np.float32)


def output_bits(enc: dict, y: np.ndarray) -> np.ndarray:
    """Threshold raw outputs to booleans (the constructions output 0/1, or ±1)."""
    return np.asarray(y) > float(enc.get("threshold", 0.5))


def decode(enc: dict, y: np.ndarray) -> dict:
    """One output vector -> report."""
    kind = enc.get("kind")
    bits = output_bits(enc, y)
    if kind == "bits":
        return {"outputs": "".join("1" if b else "0" for b in bits)}
    if kind == "unrolled_tm":
        from tm2nn.passes.unroll import UnrollLayout

        return UnrollLayout.from_json(enc["layout"]).decode(bits)
    raise Tm2nnError(f"this model uses the output encoding {kind!r}, which this tm2nn cannot decode")
