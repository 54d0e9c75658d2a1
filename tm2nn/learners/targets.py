"""Sample generators for ``--target``: streams ``((x, r, r'), y)`` as in Theorem 4
(Abbe & Sandon §4.1): x uniform on {0,1}^n, r and r' uniform bits, y = F(x).

``--target parity:SECRET``: ``y = <s, x> mod 2``.  SECRET is either a bit string of
length n (``parity:10110000``, character i is ``s_i``) or a comma-separated list of
the indices in the subset (``parity:0,2,3``; ``parity:`` with nothing is the empty
parity, always 0).  A string of 0/1 characters whose length is not n is read as an
index list only if it contains a comma, so ``parity:1`` with n = 8 is an error.

``--target const:B``: the constant label B (0 or 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.errors import Tm2nnError


@dataclass(frozen=True)
class Target:
    """A target function F: {0,1}^n -> {0,1}."""

    name: str
    n: int
    secret: tuple[int, ...]  # parity: s_i per input bit
    offset: int = 0  # y = (<s, x> + offset) mod 2

    def __call__(self, xs) -> np.ndarray:
        """Labels, bool ``[...]`` for inputs ``[..., n]``."""
        xs = np.asarray(xs, dtype=np.int64)
        return (xs @ np.asarray(self.secret, dtype=np.int64) + self.offset) % 2 == 1


@dataclass(frozen=True)
class Samples:
    """A sample stream, bits as bool: ``xs [T, n]``, ``ys [T]``, ``rs [T, k]``, ``r2s [T]``."""

    xs: np.ndarray
    ys: np.ndarray
    rs: np.ndarray
    r2s: np.ndarray

    def signs(self) -> tuple[np.ndarray, np.ndarray]:
        """The net's training pairs ``((2x-1, 2r-1, 2r'-1), 2y-1)`` as float32 arrays."""
        z = np.concatenate([self.xs, self.rs, self.r2s[:, None]], axis=1).astype(np.float32)
        return 2 * z - 1, 2 * self.ys.astype(np.float32) - 1


def parse_target(spec: str, n: int) -> Target:
    """``parity:SECRET`` or ``const:B`` for n input bits (see the module doc)."""
    kind, sep, arg = spec.partition(":")
    arg = arg.strip()
    if kind == "const" and arg in ("0", "1"):
        return Target(spec, n, (0,) * n, int(arg))
    if kind != "parity" or not sep:
        raise Tm2nnError(f"unknown target {spec!r} (known: parity:SECRET, e.g. parity:1011 or "
                         "parity:0,2; const:0, const:1)")
    if arg and set(arg) <= {"0", "1"} and "," not in arg:
        if len(arg) != n:
            raise Tm2nnError(f"target {spec!r}: the secret has {len(arg)} bits, the learner has {n} inputs "
                             "(write a subset as indices with commas: parity:0,2)")
        return Target(spec, n, tuple(int(c) for c in arg))
    secret = [0] * n
    for part in filter(None, (p.strip() for p in arg.split(","))):
        if not part.isdigit() or int(part) >= n:
            raise Tm2nnError(f"target {spec!r}: {part!r} is not an input index 0..{n - 1}")
        secret[int(part)] = 1
    return Target(spec, n, tuple(secret))


def parity_target(secret, n: int | None = None) -> Target:
    """A parity target from a 0/1 sequence (or a bit string)."""
    bits = tuple(int(c) for c in secret)
    if n is not None and len(bits) != n:
        raise ValueError(f"secret has {len(bits)} bits, expected {n}")
    return Target("parity:" + "".join(map(str, bits)), len(bits), bits)


def samples(target: Target, T: int, seed: int, random_bits: int = 0) -> Samples:
    """``T`` samples with x, r (``random_bits`` wide) and r' uniform, from ``seed``."""
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 2, size=(T, target.n)).astype(bool)
    rs = rng.integers(0, 2, size=(T, random_bits)).astype(bool)
    r2s = rng.integers(0, 2, size=T).astype(bool)
    return Samples(xs, target(xs), rs, r2s)


__all__ = ["Target", "Samples", "parse_target", "parity_target", "samples"]
