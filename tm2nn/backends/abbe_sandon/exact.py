"""Exact arithmetic for the faithful §4.1 memory gadget M_s (Abbe & Sandon, Def. 6 / Lemma 2).

Every number that M_s's forward pass, backward pass and SGD update produce is a *monomial*

    c * 2**a * 3**b * s**k,     c rational, a, b rational, k integer,

because the gadget only multiplies, cubes (f(x) = x**3 on |x| <= 1) and adds terms that are
equal up to sign (the gate at v4 cancels ``w(v3,v4) y3`` against ``w(vc,v4) * 2``; the output
vertex adds ±P's).  :class:`Mono` stores such a number exactly: ``c`` a Fraction carrying all
integer powers of 2 and 3, ``a, b`` in [0, 1), and ``k`` in [0, N) where ``s**N = R`` is the
relation that defines s (Lemma 3: ``s**364 = 2**-243 3**-1641/2 / m'``).  Adding two monomials
whose irrational parts differ raises :class:`NotExact` -- it never happens in Lemma 2's
setting, and a test would see it if it did.  Comparisons with rationals (``|x| <= 1``?) are
exact when the irrational part is 1 and use 60-digit mpmath otherwise (such a number is
irrational, so it never equals the rational it is compared with).

This makes the *paper's own constants* (s ~ 0.032, P = 1/m' with m' ~ 1.3e79, gamma ~ 1e75)
usable exactly, and lets a sum of m' identical contributions be one multiplication.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import floor

import mpmath


def _q(x: Fraction):
    return mpmath.mpf(x.numerator) / x.denominator


#: (Mono, other) -> sign of the difference; comparisons repeat every SGD step
_CMP_CACHE: dict = {}
#: products repeat every SGD step too (the weights only change sign); memoised by value
_MUL_CACHE: dict = {}
_ADD_CACHE: dict = {}
_RELS: dict = {}


class NotExact(ArithmeticError):
    """A sum of monomials with different irrational parts (not representable)."""


@dataclass(frozen=True)
class SRelation:
    """``s**n == coef * 2**a * 3**b`` (coef rational, a, b rational): how s is defined."""

    n: int
    coef: Fraction
    a: Fraction
    b: Fraction


@dataclass(frozen=True)
class Mono:
    c: Fraction
    a: Fraction
    b: Fraction
    k: int
    rel: SRelation

    # -------------------------------------------------------------- construction
    @staticmethod
    def make(c, a, b, k: int, rel: SRelation) -> "Mono":
        c, a, b = Fraction(c), Fraction(a), Fraction(b)
        if c == 0:
            return Mono(Fraction(0), Fraction(0), Fraction(0), 0, rel)
        q, r = divmod(k, rel.n)  # s**k = s**r * (s**n)**q
        if q:
            c *= rel.coef**q
            a += rel.a * q
            b += rel.b * q
        # Move the integer parts of a and b into c.  (Stripping c's own powers of 2 and 3
        # first, as the original version did, changes nothing: c * 2**-e * 2**floor(a + e)
        # = c * 2**floor(a) for an integer e.)  The form is canonical: a, b in [0, 1).
        ia, ib = floor(a), floor(b)
        if ia:
            c = c * (1 << ia) if ia > 0 else c / (1 << -ia)
        if ib:
            c = c * 3**ib if ib > 0 else c / 3**-ib
        return Mono(c, a - ia, b - ib, r, rel)

    def like(self, x) -> "Mono":
        if isinstance(x, Mono):
            return x
        return Mono.make(Fraction(x), 0, 0, 0, self.rel)

    # -------------------------------------------------------------- arithmetic
    def __mul__(self, o):
        key = (id(self.rel), self, o)
        hit = _MUL_CACHE.get(key)
        if hit is None:
            _RELS[id(self.rel)] = self.rel  # keeps the id valid as a key
            o = self.like(o)
            hit = Mono.make(self.c * o.c, self.a + o.a, self.b + o.b, self.k + o.k, self.rel)
            if len(_MUL_CACHE) > 200_000:
                _MUL_CACHE.clear()
            _MUL_CACHE[key] = hit
        return hit

    __rmul__ = __mul__

    def inv(self) -> "Mono":
        if self.c == 0:
            raise ZeroDivisionError("Mono 0")
        # 1/s**k = s**(n-k) / R
        r = self.rel
        k = (r.n - self.k) % r.n
        extra = 1 if self.k else 0
        return Mono.make(1 / self.c / r.coef**extra, -self.a - r.a * extra, -self.b - r.b * extra, k, r)

    def __truediv__(self, o):
        return self * self.like(o).inv()

    def __rtruediv__(self, o):
        return self.like(o) * self.inv()

    def __pow__(self, e: int):
        if not isinstance(e, int):
            raise NotExact("only integer powers are exact")
        if e < 0:
            return self.inv() ** (-e)
        return Mono.make(self.c**e, self.a * e, self.b * e, self.k * e, self.rel)

    def __neg__(self):
        return Mono(-self.c, self.a, self.b, self.k, self.rel)

    def __pos__(self):
        return self

    def __bool__(self):
        return bool(self.c)

    def __add__(self, o):
        key = (id(self.rel), self, o)
        hit = _ADD_CACHE.get(key)
        if hit is None:
            _RELS[id(self.rel)] = self.rel
            hit = self._add(o)
            if len(_ADD_CACHE) > 200_000:
                _ADD_CACHE.clear()
            _ADD_CACHE[key] = hit
        return hit

    def _add(self, o):
        o = self.like(o)
        if o.c == 0:
            return self
        if self.c == 0:
            return o
        if (self.a, self.b, self.k) != (o.a, o.b, o.k):
            raise NotExact(f"adding unlike monomials {self!r} + {o!r}")
        return Mono.make(self.c + o.c, self.a, self.b, self.k, self.rel)

    __radd__ = __add__

    def __sub__(self, o):
        return self + (-self.like(o))

    def __rsub__(self, o):
        return self.like(o) - self

    def __abs__(self):
        return Mono(abs(self.c), self.a, self.b, self.k, self.rel)

    # -------------------------------------------------------------- comparison
    def rational(self) -> Fraction | None:
        """The value as a Fraction when it is rational (irrational part 1), else None."""
        return self.c if (self.a == 0 and self.b == 0 and self.k == 0) else None

    def mp(self, dps: int = 60):
        """The value as an mpmath number (``dps`` digits)."""
        r = self.rel
        with mpmath.workdps(dps):
            s = (_q(r.coef) * mpmath.power(2, _q(r.a)) * mpmath.power(3, _q(r.b))) ** (mpmath.mpf(1) / r.n)
            return _q(self.c) * mpmath.power(2, _q(self.a)) * mpmath.power(3, _q(self.b)) * s**self.k

    def _cmp(self, o) -> int:
        key = (self.rel, self, o if isinstance(o, Mono) else Fraction(o))
        hit = _CMP_CACHE.get(key)
        if hit is None:
            hit = self._cmp_uncached(o)
            if len(_CMP_CACHE) > 100_000:
                _CMP_CACHE.clear()
            _CMP_CACHE[key] = hit
        return hit

    def _cmp_uncached(self, o) -> int:
        if isinstance(o, float):
            o = Fraction(o)
        d = self - o if isinstance(o, Mono) else None
        if d is not None and d.c == 0:
            return 0
        q = self.rational()
        if not isinstance(o, Mono) and q is not None:
            return (q > o) - (q < o)
        for dps in (60, 400, 3000):
            x = self.mp(dps)
            with mpmath.workdps(dps):
                y = o.mp(dps) if isinstance(o, Mono) else _q(Fraction(o))
                if abs(x - y) > mpmath.mpf(10) ** (10 - dps) * (abs(x) + abs(y)):
                    return 1 if x > y else -1
        raise NotExact("comparison undecided at 3000 digits")  # pragma: no cover

    def __lt__(self, o):
        return self._cmp(o) < 0

    def __le__(self, o):
        return self._cmp(o) <= 0

    def __gt__(self, o):
        return self._cmp(o) > 0

    def __ge__(self, o):
        return self._cmp(o) >= 0

    def __eq__(self, o):
        if isinstance(o, Mono):
            return (self.c, self.a, self.b, self.k) == (o.c, o.a, o.b, o.k)
        q = self.rational()
        return q is not None and q == o

    def __hash__(self):
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.c, self.a, self.b, self.k))
            object.__setattr__(self, "_hash", h)
        return h

    def __float__(self):
        return float(self.mp(30))

    def log10(self) -> float:
        return float(mpmath.log10(abs(self.mp(30))))

    def __repr__(self):
        return f"Mono({self.c} * 2^{self.a} * 3^{self.b} * s^{self.k})"
