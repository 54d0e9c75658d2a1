"""Interned exact numbers with dense operation tables: the number type of the level engine
(:mod:`.levels`) for Abbe & Sandon's §4.1 net G_n (Lemma 3).

Every number G_n's forward pass, backward pass and SGD update produce is an int, a
Fraction or an irrational :class:`.exact.Mono` ``c 2^a 3^b s^k`` -- and only a few hundred
*distinct* numbers occur (gate values are ±2, M_s weights stay ±initial by Lemma 2, ...).
:class:`Values` gives each distinct number (in the canonical form of :func:`norm`) a small
integer id, and memoises each operation the engine needs in a dense table indexed by ids
(``mul[a, b]`` = the id of ``vals[a] * vals[b]``, ``f[a]``, ...).  An array operation is
then one numpy gather; a table entry that is not yet known (``-1``) is computed once, with
the exact Python arithmetic of the reference engine (:class:`.train.Engine`), and stored.
Nothing is rounded: the table only deduplicates exact computations.

``norm`` is the shared canonical form (also the reference engine's): a Mono whose value is
rational becomes an int or a Fraction, a Fraction with denominator 1 an int; so two equal
numbers have one representation and one id.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable

import numpy as np

from .activation import df_scalar, f_scalar
from .exact import Mono

Number = Any


def norm(x):
    """A Mono with a rational value becomes an int/Fraction (exactly the same number)."""
    if isinstance(x, Mono):
        q = x.rational()
        if q is not None:
            return int(q) if q.denominator == 1 else q
    elif isinstance(x, Fraction) and x.denominator == 1:
        return int(x)
    return x


def f_exact(x, cache: dict):
    """f (:func:`.activation.f_scalar`), with a fast path for integers (|x| >= 2 > C
    gives ±2, |x| <= 1 gives x**3) and a memo for other exact numbers."""
    if type(x) is int:
        return x**3 if -1 <= x <= 1 else (2 if x > 0 else -2)
    hit = cache.get(x)
    if hit is None:
        hit = cache[x] = norm(f_scalar(x))
    return hit


def df_exact(x, cache: dict):
    """f' (:func:`.activation.df_scalar`), likewise."""
    if type(x) is int:
        return 3 * x * x if -1 <= x <= 1 else 0
    hit = cache.get(x)
    if hit is None:
        hit = cache[x] = norm(df_scalar(x))
    return hit


class Values:
    """Exact numbers by id, and memo tables for the engine's operations (module doc).

    Binary tables: ``mul`` (x * y), ``add`` (x + y), ``upd`` (w - gamma * g, the SGD update
    with this table's ``gamma``); unary: ``f``, ``df`` (f and f', :mod:`.activation`) and
    ``pos`` (x > 0, for reading a stored bit, :func:`.gadgets.ms_bit`).  Id 0 is 0.

    Tables are flat: entry (a, b) of a binary table is at ``a * stride + b``, with
    ``stride = cap + 1``; row and column ``cap`` (and a unary table's last entry) stay -1,
    so an unknown entry (-1) fed to a further lookup gives -1 again.  :meth:`raw2` and
    :meth:`raw1` are unchecked lookups (the level engine's hot loop checks its result once
    at the end and recomputes with the checked :meth:`op2` / :meth:`op1`, which fill the
    missing entries, if any -1 is left)."""

    _BIN = ("mul", "add", "upd")
    _UN = ("f", "df", "pos")

    def __init__(self, gamma: Number, capacity: int = 64) -> None:
        self.vals: list[Number] = []
        self.index: dict[Number, int] = {}
        self.gamma = gamma
        self.cap = 0
        self._alloc(capacity)
        self._ops: dict[str, Callable] = {
            "mul": lambda x, y: x * y, "add": lambda x, y: x + y, "upd": lambda w, g: w - self.gamma * g,
            "f": lambda x: f_exact(x, {}), "df": lambda x: df_exact(x, {}), "pos": lambda x: int(x > 0)}
        self._sums: dict = {}
        self._scaled: dict = {}
        self.ZERO = self.id(0)
        self.ONE = self.id(1)

    # ------------------------------------------------------------ ids
    def id(self, x: Number) -> int:
        """The id of an exact number (interned in its :func:`norm` form)."""
        x = norm(x)
        i = self.index.get(x)
        if i is None:
            i = self.index[x] = len(self.vals)
            self.vals.append(x)
            if i >= self.cap:
                self._alloc(2 * self.cap)
        return i

    def ids(self, xs) -> np.ndarray:
        return np.array([self.id(x) for x in xs], dtype=np.int32)

    def _alloc(self, cap: int) -> None:
        """(Re)allocate the tables for ``cap`` ids, keeping the known entries."""
        old, self.cap, self.stride = self.cap, cap, cap + 1
        for name in self._BIN:
            t = np.full((cap + 1, cap + 1), -1, np.int32)
            if old:
                t[:old, :old] = getattr(self, name).reshape(old + 1, old + 1)[:old, :old]
            setattr(self, name, t.reshape(-1))
        for name in self._UN:
            t = np.full(cap + 1, -1, np.int32)
            if old:
                t[:old] = getattr(self, name)[:old]
            setattr(self, name, t)

    # ------------------------------------------------------------ array operations
    def raw2(self, name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Unchecked ``name`` lookup (-1 where unknown, or where ``a`` or ``b`` is -1)."""
        return getattr(self, name).take(a * self.stride + b)

    def raw1(self, name: str, a: np.ndarray) -> np.ndarray:
        return getattr(self, name).take(a)

    def op2(self, name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``name`` (``mul``/``add``/``upd``) elementwise on id arrays (broadcast)."""
        r = self.raw2(name, a, b)
        if r.size and r.min() < 0:
            a, b = np.broadcast_arrays(a, b)
            miss = r < 0
            fn = self._ops[name]
            for x, y in set(zip(a[miss].tolist(), b[miss].tolist())):
                v = self.id(fn(self.vals[x], self.vals[y]))
                getattr(self, name)[x * self.stride + y] = v
            r = self.raw2(name, a, b)
        return r

    def op1(self, name: str, a: np.ndarray) -> np.ndarray:
        """``name`` (``f``/``df``/``pos``) elementwise on an id array (``pos`` gives 0/1)."""
        r = self.raw1(name, a)
        if r.size and r.min() < 0:
            fn = self._ops[name]
            for x in set(a[r < 0].tolist()):
                v = fn(self.vals[x])
                getattr(self, name)[x] = v if name == "pos" else self.id(v)
            r = self.raw1(name, a)
        return r

    def scaled(self, k: int, a: np.ndarray) -> np.ndarray:
        """``k * x`` elementwise (the multiplicity of a block of identical copies)."""
        out = np.empty_like(a)
        for j, x in enumerate(a.tolist()):
            hit = self._scaled.get((k, x))
            if hit is None:
                hit = self._scaled[(k, x)] = self.id(k * self.vals[x])
            out[j] = hit
        return out

    def rowsum(self, t: np.ndarray) -> np.ndarray:
        """Exact sums along the last axis of an id array."""
        acc = t[..., 0]
        for j in range(1, t.shape[-1]):
            acc = self.op2("add", acc, t[..., j])
        return acc

    def weighted_sum(self, ones: np.ndarray, many: np.ndarray = (), counts: list[int] = ()) -> int:
        """The id of ``sum_j vals[ones[j]] + sum_j counts[j] * vals[many[j]]`` (counts may be
        huge ints), memoised on the multiset of terms: a vertex with thousands of in-edges is
        one exact sum of its few distinct terms.  -1 (unknown) if a term is -1."""
        if (len(ones) and ones.min() < 0) or (len(many) and np.min(many) < 0):
            return -1
        u, c = np.unique(ones, return_counts=True)
        tot: dict[int, int] = dict(zip(u.tolist(), c.tolist()))
        for i, k in zip(np.asarray(many).tolist(), counts):
            tot[i] = tot.get(i, 0) + k
        tot.pop(self.ZERO, None)
        key = tuple(sorted(tot.items()))
        hit = self._sums.get(key)
        if hit is None:
            acc = 0
            for i, c in key:
                term = c * self.vals[i] if c != 1 else self.vals[i]
                acc = term if not acc else acc + term
            hit = self._sums[key] = self.id(acc)
        return hit

    def segment_sums(self, seg: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact sums of the ids ``t`` grouped by ``seg``: (the distinct seg values, sum ids)."""
        order = np.argsort(seg, kind="stable")
        seg, t = seg[order], t[order]
        keys, start, count = np.unique(seg, return_index=True, return_counts=True)
        if count.max(initial=0) <= 1:
            return keys, t
        d = int(count.max())
        pad = np.full((len(keys), d), self.ZERO, np.int32)
        pos = np.arange(len(seg)) - np.repeat(start, count)
        pad[np.repeat(np.arange(len(keys)), count), pos] = t
        return keys, self.rowsum(pad)

    def __len__(self) -> int:
        return len(self.vals)


__all__ = ["Values", "norm", "f_exact", "df_exact"]
