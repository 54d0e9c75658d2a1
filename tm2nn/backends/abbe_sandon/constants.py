"""The constants of Abbe & Sandon §4.1 (Lemma 2 / Lemma 3) and §4.2 (Def. 7 / Lemma 4),
computed exactly (integers, Fractions, :class:`.exact.Mono`) and as float64, with the
float64 verdict for each.  ``python -m tm2nn.backends.abbe_sandon.constants`` prints the
table that docs/abbe_sandon.md quotes.

§4.1 (Lemma 3's proof):  m' = max(m, ceil(2**-243 3**-1641/2 (18 sqrt3)**364)),
s = (2**-243 3**-1641/2 / m')**(1/364),  gamma = 2**-244 3**-1643/2 s**-362.
Since (18 sqrt3)**364 = 2**364 3**910, the bound is 2**121 3**(179/2) = sqrt(2**242 3**179),
an irrational number, so ceil = isqrt(2**242 3**179) + 1.

§4.2 (Def. 7, Lemma 4): gamma = 2**(716/3) 3**24, f*'s dead zone A = 2**-121 3**-9, the
noise budgets eps <= 2**-134 3**-11 and eps' <= 2**-123 3**-11.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .exact import Mono, SRelation

LOG10_2, LOG10_3 = math.log10(2), math.log10(3)


def log10_23(a: float, b: float) -> float:
    """log10(2**a 3**b)."""
    return a * LOG10_2 + b * LOG10_3


def m_prime_bound() -> int:
    """ceil(2**-243 3**-1641/2 (18 sqrt3)**364) = ceil(sqrt(2**242 3**179)) (Lemma 3's proof)."""
    n = 2**242 * 3**179
    r = math.isqrt(n)
    return r if r * r == n else r + 1


def m_prime(m: int) -> int:
    """Lemma 3: m' = max(m, bound) -- the number of gadgets flipped in every step."""
    return max(int(m), m_prime_bound())


@dataclass(frozen=True)
class Sec41:
    """Exact §4.1 constants for a given m' (as :class:`Mono`s over s's defining relation)."""

    m_prime: int
    rel: SRelation

    @staticmethod
    def for_m(m: int) -> "Sec41":
        mp = m_prime(m)
        # s**364 = 2**-243 3**-1641/2 / m'
        return Sec41(mp, SRelation(364, Fraction(1, mp), Fraction(-243), Fraction(-1641, 2)))

    def one(self) -> Mono:
        return Mono.make(1, 0, 0, 0, self.rel)

    def num(self, c, a=0, b=0, k=0) -> Mono:
        """c * 2**a * 3**b * s**k as a Mono."""
        return Mono.make(c, a, b, k, self.rel)

    @property
    def s(self) -> Mono:
        return self.num(1, 0, 0, 1)

    @property
    def gamma(self) -> Mono:
        """Lemma 2: gamma = 2**-244 3**-1643/2 s**-362."""
        return self.num(1, -244, Fraction(-1643, 2), 0) / self.num(1, 0, 0, 362)

    @property
    def P(self) -> Mono:
        """One active gadget's input to the output vertex: 2**243 3**1641/2 s**364 (= 1/m')."""
        return self.num(1, 243, Fraction(1641, 2), 364)

    def log10_s(self) -> float:
        return (log10_23(-243, -1641 / 2) - math.log10(self.m_prime)) / 364

    def float_s(self) -> float:
        """s in float64, computed in log space (the factors 2**-243 3**-1641/2 ~ 1e-464 and
        3**1641/2 ~ 1e391 do not fit in float64 on their own; s does)."""
        return 10.0 ** self.log10_s()

    def float_gamma(self) -> float:
        return 10.0 ** (log10_23(-244, -1643 / 2) - 362 * self.log10_s())


# ---------------------------------------------------------------- §4.2
#: Lemma 4's learning rate gamma = 2**(716/3) 3**24 (~ 1.9e83; fits float64).
GAMMA_42 = 2.0 ** (716 / 3) * 3.0**24
#: Lemma 4's noise budgets.
EPS_42 = math.ldexp(3.0**-11, -134)
EPS_PRIME_42 = math.ldexp(3.0**-11, -123)


def remark9_m_prime(p: float) -> float:
    """Remark 9: the smallest m' if the activation were sign(x)|x|**p near 0 instead of x**3.

    Def. 6 generalised so that Lemma 2's flip still works with one gamma: the weight of the
    t-th path edge must satisfy w_t**2 proportional to p**(6-t) (the degree of w_t in the path's
    output is p**(6-t)), i.e. w_t = p**((6-t)/2) s; v1 must stay in the power region,
    2 w_1 = 2 p**(5/2) s <= 1.  Then m' = 1/P at the largest such s.  (Our generalisation;
    for p = 3 it reproduces the paper's bound.)  Computed in log10."""
    lg = math.log10
    ls = -lg(2) - 2.5 * lg(p)  # s at the boundary
    # z1 = 2 w1 = 1 at the boundary; y_t = z_t**p; z_t = w_t y_{t-1}; P = w6 y5
    lz = 0.0
    for t in range(2, 7):
        ly = p * lz  # y_{t-1}
        lz = (6 - t) / 2 * lg(p) + ls + ly  # z_t
    return 10.0 ** (-lz)


def table(m: int = 1) -> list[tuple[str, str, str, str]]:
    """(name, exact form, log10, float64 verdict) rows for the docs."""
    c = Sec41.for_m(m)
    fmin, fmax = math.log10(2.2250738585072014e-308), math.log10(1.7976931348623157e308)

    def verdict(l10: float) -> str:
        if l10 < math.log10(5e-324):
            return "underflows float64"
        if l10 < fmin:
            return "subnormal float64"
        if l10 > fmax:
            return "overflows float64"
        return "fits float64" + ("" if -37.9 < l10 < 38.5 else " (not float32)")

    s = c.log10_s()
    rows = [
        ("2^-243 3^-1641/2", "Lemma 3", log10_23(-243, -1641 / 2)),
        ("3^1641/2", "Lemma 2 proof", log10_23(0, 1641 / 2)),
        ("m' bound", "ceil(sqrt(2^242 3^179))", math.log10(c.m_prime)),
        ("s", "(2^-243 3^-1641/2/m')^(1/364)", s),
        ("s' = (18 sqrt3 s)^3 (read value)", "Fig. 2", 3 * (math.log10(18 * math.sqrt(3)) + s)),
        ("gamma (4.1)", "2^-244 3^-1643/2 s^-362", log10_23(-244, -1643 / 2) - 362 * s),
        ("P = 1/m' (gadget -> output)", "2^243 3^1641/2 s^364", -math.log10(c.m_prime)),
        ("|w(vc,v4)|", "2^26 3^91 s^40", log10_23(26, 91) + 40 * s),
        ("y4 (active)", "2^81 3^273 s^120", log10_23(81, 273) + 120 * s),
        ("gamma (4.2)", "2^(716/3) 3^24", log10_23(716 / 3, 24)),
        ("A (f* dead zone)", "2^-121 3^-9", log10_23(-121, -9)),
        ("|w(vc,v4)| (M')", "2^-81 3^-9", log10_23(-81, -9)),
        ("contribution at t0 (M')", "2^-242 3^-29", log10_23(-242, -29)),
        ("eps (4.2 noise)", "2^-134 3^-11", log10_23(-134, -11)),
        ("eps' (4.2 output slack)", "2^-123 3^-11", log10_23(-123, -11)),
        ("Remark 9, p = 11/9: m'", "our generalisation", math.log10(remark9_m_prime(11 / 9))),
        ("Remark 9, p = 3: m' (check)", "= bound", math.log10(remark9_m_prime(3))),
    ]
    return [(n, e, f"{v:.2f}", verdict(v)) for n, e, v in rows]


if __name__ == "__main__":  # pragma: no cover
    for row in table():
        print(" | ".join(row))
