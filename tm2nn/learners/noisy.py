"""Constructors of §4.2 learners (Abbe & Sandon Lemma 6 / Theorem 5,
:class:`~tm2nn.ir.noisy_learner.NoisyLearner`): one circuit ``h_n`` of the ``t`` stored
samples and the final input, over the ports :func:`~tm2nn.ir.noisy_learner.ports`.

* :func:`majority_learner` -- the majority of the stored labels (ties -> 1);
* :func:`parity_learner` -- learn a parity by Gaussian elimination over GF(2) on the t
  stored samples (some s with <x(k), s> = y(k) for all k, free variables 0), output <x, s>;
* :func:`random_learner` -- a random circuit over the ports (for tests).
"""

from __future__ import annotations

import random

from tm2nn.ir.noisy_learner import NoisyLearner, ports
from tm2nn.learners.builder import CircuitBuilder, Vec, ge_const, lowest_one, popcount


def _begin(n: int, t: int, prefix: str):
    cb = CircuitBuilder(prefix=prefix)
    ps = {p: cb.port(p) for p in ports(n, t)}
    xs = [Vec(ps[f"x{k}[{i}]"] for i in range(n)) for k in range(t)]
    ys = [ps[f"y{k}"] for k in range(t)]
    x = Vec(ps[f"x[{i}]"] for i in range(n))
    return cb, xs, ys, x


def majority_learner(n: int, t: int) -> NoisyLearner:
    """h = [#{k : y(k) = 1} >= t/2] (ties -> 1): a sorting-free threshold by counting."""
    cb, _, ys, _ = _begin(n, t, "maj")
    out = ge_const(popcount(list(ys)), (t + 1) // 2)
    return NoisyLearner(f"majority_n{n}_t{t}", n, t, cb.circuit("majority", ports(n, t), [out]))


def parity_learner(n: int, t: int) -> NoisyLearner:
    """Parity learning by Gaussian elimination over GF(2), as one oblivious circuit.

    Augmented rows ``[x(k) | y(k)]``.  For each column c: the pivot is the first row not
    yet used with a 1 in column c (:func:`lowest_one`); it is XORed into every other row
    with a 1 in column c (reduced row echelon form).  At the end s_c = the right-hand side
    of column c's pivot row (0 if c has no pivot), and h = XOR_i x_i s_i.  If the samples
    come from a parity s* and x(0..t-1) span GF(2)^n, then s = s* (so h(x) = <x, s*>)."""
    cb, xs, ys, x = _begin(n, t, "gauss")
    rows = [list(xs[k]) + [ys[k]] for k in range(t)]
    used = [cb.zero] * t
    pivots = []
    for c in range(n):
        sel = lowest_one([rows[r][c] & ~used[r] for r in range(t)])
        piv = [cb.or_(*[sel[r] & rows[r][j] for r in range(t)]) for j in range(n + 1)]
        for r in range(t):
            do = rows[r][c] & ~sel[r]
            rows[r] = [rows[r][j] ^ (piv[j] & do) for j in range(n + 1)]
        used = [used[r] | sel[r] for r in range(t)]
        pivots.append(sel)
    s = [cb.or_(*[pivots[c][r] & rows[r][n] for r in range(t)]) for c in range(n)]
    out = cb.xor(*[x[i] & s[i] for i in range(n)])
    return NoisyLearner(f"parity_gauss_n{n}_t{t}", n, t, cb.circuit("parity_gauss", ports(n, t), [out]))


def random_learner(n: int, t: int, gates: int, seed: int) -> NoisyLearner:
    """A random h: ``gates`` random AND/OR/XOR/NOT gates over the ports (for tests)."""
    rng = random.Random(seed)
    cb, xs, ys, x = _begin(n, t, "rnd")
    sig = [b for v in xs for b in v] + list(ys) + list(x)
    for _ in range(gates):
        op = rng.choice(("AND", "OR", "XOR", "NOT"))
        a, b = rng.choice(sig), rng.choice(sig)
        sig.append({"AND": a & b, "OR": a | b, "XOR": a ^ b, "NOT": ~a}[op])
    return NoisyLearner(f"random_n{n}_t{t}_s{seed}", n, t, cb.circuit("random", ports(n, t), [sig[-1]]))


__all__ = ["majority_learner", "parity_learner", "random_learner"]
