"""Inputs in, reports out: the encodings a compiled model records in its metadata.

An encoding is a JSON-able dict with a ``"kind"``.  Every kind knows how to turn
a user's ``--input`` string into the model's input vector, and the model's output
vector into the report ARCHITECTURE.md defines (``{"outputs": ...}`` for circuits,
the run report for machines).  ``tm2nn eval`` works from these dicts alone.
"""

from __future__ import annotations

import numpy as np

from tm2nn.errors import Tm2nnError
from tm2nn.report import Report


def parse_bits(text: str, n: int, what: str = "input") -> np.ndarray:
    """A '0'/'1' string of length ``n`` (spaces and '_' ignored) -> bool array."""
    bits = []
    for i, ch in enumerate(text):
        if ch in " _":
            continue
        if ch not in "01":
            raise Tm2nnError(f"{what}: expected 0 or 1, got {ch!r}", file=what, line=1, col=i + 1, snippet=text)
        bits.append(ch == "1")
    if len(bits) != n:
        raise Tm2nnError(f"{what}: the circuit has {n} inputs, got {len(bits)} bits", file=what, line=1, col=1, snippet=text)
    return np.array(bits, dtype=bool)


def _codec(enc: dict):
    """(encode one string, decode one bit vector) for an encoding, built once per call site."""
    kind = enc.get("kind")
    if kind == "bits":
        n = len(enc["names"])
        return (lambda text: parse_bits(text, n),
                lambda bits: {"outputs": "".join("1" if b else "0" for b in bits)})
    raise Tm2nnError(f"this model uses the encoding {kind!r}, which this tm2nn cannot handle")


def encode(enc: dict, text: str) -> np.ndarray:
    """One input string -> float32 input vector."""
    return encode_many(enc, [text])[0]


def encode_many(enc: dict, texts: list[str]) -> np.ndarray:
    """Input strings -> float32 matrix, one row per string."""
    if not texts:
        return np.zeros((0, 0), np.float32)
    enc_one, _ = _codec(enc)
    return np.stack([np.asarray(enc_one(t), dtype=np.float32) for t in texts])


def output_bits(enc: dict, y: np.ndarray) -> np.ndarray:
    """Threshold raw outputs to booleans (the constructions output 0/1, or ±1 with a
    ``threshold`` of 0)."""
    return np.asarray(y) > float(enc.get("threshold", 0.5))


def decode(enc: dict, y: np.ndarray) -> dict:
    """One output vector -> report."""
    return decode_many(enc, np.asarray(y)[None, :])[0]


def decode_many(enc: dict, y: np.ndarray) -> list[dict]:
    """Output matrix -> one report per row."""
    if enc.get("kind") == "values":  # real outputs, reported as they are (rounded to 1e-6)
        return [{"outputs": [round(float(v), 6) for v in row]} for row in np.asarray(y)]
    _, dec_one = _codec(enc)
    return [dec_one(bits) for bits in output_bits(enc, y)]


# -- the codec of a circuit net (0/1 vectors in declared port order): the protocol's BITS ------
def encode_bits(compiled, texts: list[str]) -> np.ndarray:
    """The net's input matrix for ``texts`` (its input encoding)."""
    return encode_many(compiled.input_encoding, texts)


def run_bits(compiled, texts: list[str], engine: str, progress=None) -> list[Report]:
    """Encode ``texts``, run ``engine``, decode one ``{"outputs": ...}`` report each."""
    y = compiled.runner(engine)(encode_bits(compiled, texts))
    return [Report(r) for r in decode_many(compiled.output_encoding, y)]


def describe_bits(compiled) -> dict:
    """How a ``bits`` circuit's report is read: output i from dimension i of the output."""
    enc = compiled.output_encoding
    if enc.get("kind") != "bits":
        raise Tm2nnError(f"the {compiled.backend} backend does not describe how its {enc.get('kind')!r} output "
                         "is decoded")
    y = compiled.net.outputs[0]
    names = ", ".join(enc["names"][:4]) + (", ..." if len(enc["names"]) > 4 else "")
    return {"fields": {"outputs": {
        "value": y, "labels": list(compiled.net.spaces[y].labels),
        "rule": f"character i of 'outputs' is '1' when dimension i of {y!r} exceeds {enc['threshold']}, "
                f"else '0'; dimension i is the circuit's output i in declared order ({names})"}}}
