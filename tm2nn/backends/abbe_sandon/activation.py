"""The activations of Abbe & Sandon §4: ``f`` (§4.1) and ``f*`` (§4.2), fixed in code.

The paper (§4.1, paragraph before Lemma 1) asks for an odd-symmetric ``f : R -> R`` with

* ``f(x) = x**3``            for ``|x| < 1``,
* ``f(x) = 2 sign(x)``       for ``|x| > 3/2``,
* ``f`` smooth and nondecreasing, its values on ``[1, 3/2]`` left open ("some assignment").

and (§4.2, before Definition 7) ``f*`` with, in addition, a dead zone around 0:

* ``f*(x) = 0``              for ``|x| <= A = 2**-121 * 3**-9``,
* ``f*(x) = x**3``           for ``B = 2**-120 * 3**-9 <= |x| <= 1``,
* ``f*(x) = 2 sign(x)``      for ``|x| >= 3/2``, smooth and nondecreasing in between.

**Our choice of the open pieces** (the paper leaves them free; only smoothness and
monotonicity are used).  With the standard C-infinity step

    sigma(u) = 0 (u <= 0),  1 (u >= 1),  1 / (1 + exp(1/u - 1/(1-u)))  (0 < u < 1),

all of whose derivatives vanish at u = 0 and u = 1, we set for ``x >= 0``

* upper piece, ``1 <= x <= C = 2**(1/3)``:  ``f(x) = x**3 (1 - sigma(u)) + 2 sigma(u)``,
  ``u = (x - 1)/(C - 1)``; and ``f(x) = 2`` for ``x >= C`` (C ~ 1.26 < 3/2, so ``f`` is
  already flat on [C, 3/2], which the paper allows).
  *Smooth*: at x = 1 every derivative of sigma vanishes, so f agrees with x**3 to all
  orders; at x = C, 1 - sigma and all its derivatives vanish, so f agrees with 2 to all
  orders.  *Monotone*: ``f' = 3x**2 (1 - sigma) + sigma' (2 - x**3)/(C - 1)`` and both
  terms are >= 0 on [1, C] because ``x**3 <= 2`` there -- that is why the blend ends at
  C = 2**(1/3) and not at 3/2 (a blend up to 3/2 is *not* monotone: 2 - x**3 < 0 there).
* lower piece of ``f*``, ``A <= x <= B``: ``f*(x) = x**3 sigma((x - A)/(B - A))``.
  Smooth at both ends for the same reason; monotone since ``f*' = 3x**2 sigma + x**3
  sigma'/(B-A) >= 0``.

Both functions are odd: ``f(-x) = -f(x)``.  Consequences used by Lemmas 1, 2, 4, 5:
``f'(x) = 0`` exactly for ``|x| >= C`` (so for every gate input, which has ``|x| >= 2``),
``f'(0) = 0``, ``f(±1) = ±1`` and ``f'(±1) = 3`` exactly (so Lemma 2's "derivative of the loss
w.r.t. the output vertex's input is 12" holds), and ``f*'(x) = 0`` exactly for ``|x| <= A``.

Implementations: numpy (``f``, ``df``, ``fstar``, ``dfstar``), torch (``*_torch``, same
formulas, only ops that map 1:1 onto ONNX: Abs, Sign, Where, Pow/Mul, Sigmoid, Div), ONNX
steps (:func:`onnx_f`, :func:`onnx_fstar`) and a scalar version for any
exact/high-precision number type (:func:`f_scalar`, :func:`df_scalar`) used by
:mod:`.exact`.  Importing this module registers ``abbe_sandon_f`` and
``abbe_sandon_fstar`` in the network IR's activation registry
(:func:`tm2nn.nets.activations.register`).

Numbers: ``A ~ 1.9e-41`` is a normal float64 but a *subnormal* float32 (float32's smallest
normal is 1.2e-38), so ``f*`` needs float64 (see docs/abbe_sandon.md).
"""

from __future__ import annotations

import math

import numpy as np

from tm2nn.nets.activations import ActivationFn, Const, Step, register

#: Where the upper smooth piece ends: f = 2 for |x| >= C.  C = 2**(1/3) (see module doc).
C = 2.0 ** (1.0 / 3.0)
#: f*'s dead zone: f* = 0 for |x| <= A (Abbe & Sandon §4.2).
A_STAR = math.ldexp(3.0**-9, -121)
#: f* = x**3 for B <= |x| <= 1 (Abbe & Sandon §4.2).
B_STAR = math.ldexp(3.0**-9, -120)

NAMES = ("as_f", "as_fstar")


# ---------------------------------------------------------------- numpy
def _sigma_np(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The C-infinity step and its derivative, for u in [0, 1] (clipped)."""
    inside = (u > 0) & (u < 1)
    uu = np.where(inside, u, 0.5)
    t = 1.0 / uu - 1.0 / (1.0 - uu)
    with np.errstate(over="ignore"):
        sig = 1.0 / (1.0 + np.exp(t))
    dsig = sig * (1.0 - sig) * (1.0 / uu**2 + 1.0 / (1.0 - uu) ** 2)
    sig = np.where(inside, sig, np.where(u >= 1, 1.0, 0.0))
    dsig = np.where(inside, dsig, 0.0)
    return sig, dsig


def _upper_np(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|x| >= 1 branch for nonnegative a: value and derivative."""
    sig, dsig = _sigma_np((a - 1.0) / (C - 1.0))
    val = a**3 * (1.0 - sig) + 2.0 * sig
    der = 3.0 * a**2 * (1.0 - sig) + dsig * (2.0 - a**3) / (C - 1.0)
    return np.where(a >= C, 2.0, val), np.where(a >= C, 0.0, der)


def f(x) -> np.ndarray:
    """Abbe & Sandon §4.1's activation f (odd; x**3 on (-1, 1); ±2 beyond ±C)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    up, _ = _upper_np(np.maximum(a, 1.0))
    return np.sign(x) * np.where(a < 1.0, a**3, up)


def df(x) -> np.ndarray:
    """f' (even; 3x**2 on (-1, 1); exactly 0 for |x| >= C)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    _, dup = _upper_np(np.maximum(a, 1.0))
    return np.where(a < 1.0, 3.0 * a**2, dup)


def _lower_np(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sig, dsig = _sigma_np((a - A_STAR) / (B_STAR - A_STAR))
    return a**3 * sig, 3.0 * a**2 * sig + a**3 * dsig / (B_STAR - A_STAR)


def fstar(x) -> np.ndarray:
    """Abbe & Sandon §4.2's f*: f with a dead zone f* = 0 on |x| <= 2**-121 3**-9."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    lo, _ = _lower_np(np.minimum(a, 1.0))
    return np.where(a < 1.0, np.sign(x) * lo, f(x))


def dfstar(x) -> np.ndarray:
    """f*' (exactly 0 on the dead zone |x| <= A and for |x| >= C)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    _, dlo = _lower_np(np.minimum(a, 1.0))
    return np.where(a < 1.0, dlo, df(x))


# ---------------------------------------------------------------- torch
def _sigma_torch(u):
    import torch

    inside = (u > 0) & (u < 1)
    uu = torch.where(inside, u, torch.full_like(u, 0.5))
    sig = torch.sigmoid(1.0 / (1.0 - uu) - 1.0 / uu)
    one, zero = torch.ones_like(u), torch.zeros_like(u)
    return torch.where(inside, sig, torch.where(u >= 1, one, zero))


def f_torch(x):
    """f in torch (autograd gives f' = the numpy :func:`df`; checked in the tests)."""
    import torch

    a = torch.abs(x)
    au = torch.clamp(a, 1.0, C)
    sig = _sigma_torch((au - 1.0) / (C - 1.0))
    up = au**3 * (1.0 - sig) + 2.0 * sig
    return torch.sign(x) * torch.where(a < 1.0, a**3, torch.where(a >= C, torch.full_like(a, 2.0), up))


def fstar_torch(x):
    """f* in torch."""
    import torch

    a = torch.abs(x)
    al = torch.clamp(a, A_STAR, B_STAR)
    lo = al**3 * _sigma_torch((al - A_STAR) / (B_STAR - A_STAR))
    small = torch.where(a <= A_STAR, torch.zeros_like(a), torch.where(a < B_STAR, lo, a**3))
    return torch.where(a < 1.0, torch.sign(x) * small, f_torch(x))


# ---------------------------------------------------------------- scalars (exact / mpmath)
def f_scalar(x):
    """f on one number of any ordered field type (Fraction, mpmath.mpf, :class:`.exact.Mono`).

    Exact types only ever meet the pieces given by the paper in closed form (x**3 on
    |x| <= 1, the constant beyond C); the blend in between needs exp and is evaluated in
    float (a number type that must stay exact raises there -- see :mod:`.exact`)."""
    a = abs(x)
    if a <= 1:
        return x**3
    if a >= C:
        return 2 if x > 0 else -2
    if not isinstance(x, (float, int)):
        raise ArithmeticError(f"f's smooth blend on (1, C) is not exact: f({x!r})")
    return float(f(float(x)))


def df_scalar(x):
    """f' on one number (see :func:`f_scalar`)."""
    a = abs(x)
    if a <= 1:
        return 3 * x**2
    if a >= C:
        return 0
    if not isinstance(x, (float, int)):
        raise ArithmeticError(f"f's smooth blend on (1, C) is not exact: f'({x!r})")
    return float(df(float(x)))


# ---------------------------------------------------------------- ONNX
# Emitter steps (see :mod:`tm2nn.nets.activations`): standard ONNX ops only, the same
# formulas as the torch code above, float32 (the ONNX emitter's convention).
def _sigma_steps(u: str, const: Const, p: str) -> list[Step]:
    """The C-infinity step sigma(u) (:func:`_sigma_torch`), value ``@{p}sig``."""
    return [
        (f"{p}gt0", "Greater", [u, const("zero", 0.0)], {}),
        (f"{p}lt1", "Less", [u, const("one", 1.0)], {}),
        (f"{p}inside", "And", [f"@{p}gt0", f"@{p}lt1"], {}),
        (f"{p}uu", "Where", [f"@{p}inside", u, const("half", 0.5)], {}),
        (f"{p}one_minus", "Sub", [const("one", 1.0), f"@{p}uu"], {}),
        (f"{p}inv1", "Div", [const("one", 1.0), f"@{p}one_minus"], {}),
        (f"{p}inv0", "Div", [const("one", 1.0), f"@{p}uu"], {}),
        (f"{p}t", "Sub", [f"@{p}inv1", f"@{p}inv0"], {}),
        (f"{p}sigmoid", "Sigmoid", [f"@{p}t"], {}),
        (f"{p}ge1", "GreaterOrEqual", [u, const("one", 1.0)], {}),
        (f"{p}edge", "Where", [f"@{p}ge1", const("one", 1.0), const("zero", 0.0)], {}),
        (f"{p}sig", "Where", [f"@{p}inside", f"@{p}sigmoid", f"@{p}edge"], {}),
    ]


def _cube(x: str, name: str) -> list[Step]:
    return [(f"{name}.sq", "Mul", [x, x], {}), (name, "Mul", [f"@{name}.sq", x], {})]


def _f_body(x: str, const: Const) -> list[Step]:
    """``f`` as in :func:`f_torch`; its value is ``@f``, |x| is ``@abs``."""
    s: list[Step] = [("abs", "Abs", [x], {}), ("sign", "Sign", [x], {}),
                     ("au", "Clip", ["@abs", const("one", 1.0), const("C", C)], {}),
                     ("au_m1", "Sub", ["@au", const("one", 1.0)], {}),
                     ("u", "Div", ["@au_m1", const("C_minus_1", C - 1.0)], {})]
    s += _sigma_steps("@u", const, "up.")
    s += _cube("@au", "au3")
    s += _cube("@abs", "a3")
    s += [("one_minus_sig", "Sub", [const("one", 1.0), "@up.sig"], {}),
          ("blend.lo", "Mul", ["@au3", "@one_minus_sig"], {}),
          ("blend.hi", "Mul", [const("two", 2.0), "@up.sig"], {}),
          ("up", "Add", ["@blend.lo", "@blend.hi"], {}),
          ("ge_C", "GreaterOrEqual", ["@abs", const("C", C)], {}),
          ("upper", "Where", ["@ge_C", const("two", 2.0), "@up"], {}),
          ("lt1", "Less", ["@abs", const("one", 1.0)], {}),
          ("mag", "Where", ["@lt1", "@a3", "@upper"], {}),
          ("f", "Mul", ["@sign", "@mag"], {})]
    return s


def onnx_f(x: str, const: Const) -> list[Step]:
    """Abbe & Sandon §4.1's f as ONNX steps (:func:`f_torch`)."""
    return _f_body(x, const)


def onnx_fstar(x: str, const: Const) -> list[Step]:
    """:func:`fstar_torch` as ONNX steps.  ``u = (a - A)/(B - A)`` is written ``(a - A)/A``
    (B = 2A, so ``B - A = A`` exactly): the two agree in float64 and the second does not
    overflow in float32, where A ~ 1.9e-41 is subnormal."""
    s = _f_body(x, const)
    s += [("al", "Clip", ["@abs", const("A", A_STAR), const("B", B_STAR)], {}),
          ("al_mA", "Sub", ["@al", const("A", A_STAR)], {}),
          ("v", "Div", ["@al_mA", const("A", A_STAR)], {})]
    s += _sigma_steps("@v", const, "lo.")
    s += _cube("@al", "al3")
    s += [("lo", "Mul", ["@al3", "@lo.sig"], {}),
          ("lt_B", "Less", ["@abs", const("B", B_STAR)], {}),
          ("mid", "Where", ["@lt_B", "@lo", "@a3"], {}),
          ("le_A", "LessOrEqual", ["@abs", const("A", A_STAR)], {}),
          ("small", "Where", ["@le_A", const("zero", 0.0), "@mid"], {}),
          ("signed_small", "Mul", ["@sign", "@small"], {}),
          ("lt1_star", "Less", ["@abs", const("one", 1.0)], {}),
          ("fstar", "Where", ["@lt1_star", "@signed_small", "@f"], {})]
    return s


register(ActivationFn("abbe_sandon_f", "Abbe & Sandon §4.1 (activation f before Lemma 1)",
                      __name__, "f", "f_torch", onnx_f))
register(ActivationFn("abbe_sandon_fstar", "Abbe & Sandon §4.2 (activation f* before Def. 7)",
                      __name__, "fstar", "fstar_torch", onnx_fstar))
