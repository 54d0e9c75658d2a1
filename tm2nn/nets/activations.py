"""The registry of elementwise activations that an :class:`~tm2nn.nets.ops.Activation` op
may name (``fn``).  Each entry has three implementations of one formula:

* ``numpy(x)``  -- float64 reference (what ``tests/test_emit.py``'s ``np_eval`` uses);
* ``torch(x)``  -- any float dtype; autograd must give the entry's derivative (the
  Abbe & Sandon activations are written with Abs/Sign/Where/Clamp/Sigmoid/Pow only, so
  the gradient of every flat piece is exactly 0 and of a monomial piece exactly its
  closed form);
* ``onnx(x, const)`` -- a list of emitter steps ``(step, op_type, inputs, attrs)`` built
  from standard ONNX ops (Abs, Sign, Clip, Less, LessOrEqual, GreaterOrEqual, And, Where,
  Sub, Mul, Div, Sigmoid, Sqrt, Reciprocal; all in opset 13); ``inputs`` name the op's input ``x``, an
  earlier step as ``"@step"`` or a scalar constant ``const(tag, value)``.  The last
  step is the value.  ONNX models are float32 (the emitter's convention).

Entries load their numpy/torch code lazily from the backend that defines the function
(``nets`` does not import the backends at import time).

Registered:

* ``abbe_sandon_f``     -- f of Abbe & Sandon §4.1 (x**3 on |x| < 1, ±2 beyond C = 2**(1/3),
  C-infinity blend; :mod:`tm2nn.backends.abbe_sandon.activation`);
* ``abbe_sandon_fstar`` -- f* of §4.2 (f with the dead zone |x| <= 2**-121 3**-9);
* ``abbe_sandon_fpl``   -- the piecewise-linear dyadic activation of the float64
  parametrisation of Def. 6 / Lemma 2 (:mod:`tm2nn.backends.abbe_sandon.float64`);
* ``sqrt``, ``reciprocal`` -- the square root and division of Welper's extended network
  ((1), §5.4, App. C; :mod:`tm2nn.nets.elementary`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

Step = tuple[str, str, list, dict]
Const = Callable[[str, float], str]


@dataclass(frozen=True)
class ActivationFn:
    """One registered activation: name, citation, and where its code lives."""

    name: str
    cite: str
    module: str
    numpy_attr: str
    torch_attr: str
    onnx: Callable[[str, Const], list[Step]]

    def _mod(self):
        return importlib.import_module(self.module)

    def numpy(self, x):
        return getattr(self._mod(), self.numpy_attr)(x)

    def torch(self, x):
        return getattr(self._mod(), self.torch_attr)(x)


# ---------------------------------------------------------------- ONNX formulas
def _sigma_steps(u: str, const: Const, p: str) -> list[Step]:
    """The C-infinity step sigma(u) of activation.py (``_sigma_torch``), value ``@{p}sig``."""
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
    """``f`` as in ``activation.f_torch``; its value is ``@f``, |x| is ``@abs``."""
    from tm2nn.backends.abbe_sandon.activation import C

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


def onnx_abbe_sandon_f(x: str, const: Const) -> list[Step]:
    return _f_body(x, const)


def onnx_abbe_sandon_fstar(x: str, const: Const) -> list[Step]:
    """``fstar_torch``.  ``u = (a - A)/(B - A)`` is written ``(a - A)/A`` (B = 2A, so
    ``B - A = A`` exactly): the two agree in float64 and the second does not overflow
    in float32, where A ~ 1.9e-41 is subnormal."""
    from tm2nn.backends.abbe_sandon.activation import A_STAR, B_STAR

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


def onnx_abbe_sandon_fpl(x: str, const: Const) -> list[Step]:
    from tm2nn.backends.abbe_sandon.float64 import onnx_steps_fpl

    return onnx_steps_fpl(x, const)


def onnx_sqrt(x: str, const: Const) -> list[Step]:
    return [("sqrt", "Sqrt", [x], {})]


def onnx_reciprocal(x: str, const: Const) -> list[Step]:
    return [("reciprocal", "Reciprocal", [x], {})]


REGISTRY: dict[str, ActivationFn] = {
    a.name: a
    for a in (
        ActivationFn("abbe_sandon_f", "Abbe & Sandon §4.1 (activation f before Lemma 1)",
                     "tm2nn.backends.abbe_sandon.activation", "f", "f_torch", onnx_abbe_sandon_f),
        ActivationFn("abbe_sandon_fstar", "Abbe & Sandon §4.2 (activation f* before Def. 7)",
                     "tm2nn.backends.abbe_sandon.activation", "fstar", "fstar_torch", onnx_abbe_sandon_fstar),
        ActivationFn("abbe_sandon_fpl", "float64 parametrisation of Abbe & Sandon Def. 6 / Lemma 2 "
                     "(docs/abbe_sandon.md, 'float64 parametrisation')",
                     "tm2nn.backends.abbe_sandon.float64", "fpl", "fpl_torch", onnx_abbe_sandon_fpl),
        ActivationFn("sqrt", "Welper (1): square-root non-linearity (f_TM = sqrt(2 l_TM) f_perp, §5.4)",
                     "tm2nn.nets.elementary", "sqrt", "sqrt_torch", onnx_sqrt),
        ActivationFn("reciprocal", "Welper App. C: the division x^T v / x^T x and the normalisation of f_perp",
                     "tm2nn.nets.elementary", "reciprocal", "reciprocal_torch", onnx_reciprocal),
    )
}


def get(name: str) -> ActivationFn:
    """The registered activation ``name`` (KeyError naming the known ones otherwise)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown activation {name!r}; registered: {sorted(REGISTRY)}") from None
