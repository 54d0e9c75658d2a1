"""The abbe-sandon backend's encodings (kinds ``"pm1"`` in, ``"sign"`` out): Theorem 4's
net reads each input bit ``b`` as ``2b - 1`` (the vector ``(2x - 1, 2r - 1, 2r' - 1)``) and
its output vertex holds the learner's answer as ±1 (Lemma 3), read as ``"1"`` when it is
above the encoding's ``threshold`` (default 0)."""

from __future__ import annotations

import numpy as np

from tm2nn.codec import encode_many
from tm2nn.errors import Tm2nnError
from tm2nn.report import Report


def encode(enc: dict, texts: list[str]) -> np.ndarray:
    """``'0'``/``'1'`` strings of ``len(enc["names"])`` bits -> float32 rows of ±1."""
    if enc.get("kind") != "pm1":
        raise Tm2nnError(f"this model uses the encoding {enc.get('kind')!r}, which this tm2nn cannot handle")
    bits = encode_many({"kind": "bits", "names": enc["names"]}, texts)
    return (2.0 * bits - 1.0).astype(np.float32) if len(texts) else bits


def decode(enc: dict, y: np.ndarray) -> list[dict]:
    """Output rows -> ``{"outputs": "0110..."}`` each: ``"1"`` where above the threshold."""
    if enc.get("kind") != "sign":
        raise Tm2nnError(f"this model uses the encoding {enc.get('kind')!r}, which this tm2nn cannot handle")
    bits = np.asarray(y) > float(enc.get("threshold", 0.0))
    return [{"outputs": "".join("1" if b else "0" for b in row)} for row in bits]


def run(compiled, texts: list[str], engine: str) -> list[Report]:
    """Encode ``texts``, run them through ``engine``, one report each."""
    y = compiled.runner(engine)(encode(compiled.input_encoding, texts))
    return [Report(r) for r in decode(compiled.output_encoding, y)]
