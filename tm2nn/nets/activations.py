"""The registry of elementwise activations that an :class:`~tm2nn.nets.ops.Activation` op
may name (``fn``).  Each entry has three implementations of one formula:

* ``numpy(x)``  -- float64 reference (what ``tests/core/emit/test_emit.py``'s ``np_eval`` uses);
* ``torch(x)``  -- any float dtype; autograd must give the entry's derivative (written
  with Abs/Sign/Where/Clamp/Sigmoid/Pow only where a function is piecewise, so the
  gradient of every flat piece is exactly 0 and of a monomial piece exactly its closed
  form);
* ``onnx(x, const)`` -- a list of emitter steps ``(step, op_type, inputs, attrs)`` built
  from standard ONNX ops (Abs, Sign, Clip, Less, LessOrEqual, GreaterOrEqual, And, Where,
  Sub, Mul, Div, Sigmoid, Sqrt, Reciprocal; all in opset 13); ``inputs`` name the op's input ``x``, an
  earlier step as ``"@step"`` or a scalar constant ``const(tag, value)``.  The last
  step is the value.  ONNX models are float32 (the emitter's convention).

The registry is open: a construction registers its own activations with :func:`register`
when its module is imported (the backend registry imports it before a model of that
backend is built or loaded).  An entry's numpy/torch code is found by module and
attribute name and loaded on first use.

Registered here: ``sqrt``, ``reciprocal`` -- the square root and division of Welper's
extended network ((1), §5.4, App. C; :mod:`tm2nn.nets.elementary`).
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
def onnx_sqrt(x: str, const: Const) -> list[Step]:
    return [("sqrt", "Sqrt", [x], {})]


def onnx_reciprocal(x: str, const: Const) -> list[Step]:
    return [("reciprocal", "Reciprocal", [x], {})]


REGISTRY: dict[str, ActivationFn] = {
    a.name: a
    for a in (
        ActivationFn("sqrt", "Welper (1): square-root non-linearity (f_TM = sqrt(2 l_TM) f_perp, §5.4)",
                     "tm2nn.nets.elementary", "sqrt", "sqrt_torch", onnx_sqrt),
        ActivationFn("reciprocal", "Welper App. C: the division x^T v / x^T x and the normalisation of f_perp",
                     "tm2nn.nets.elementary", "reciprocal", "reciprocal_torch", onnx_reciprocal),
    )
}


def register(fn: ActivationFn) -> ActivationFn:
    """Add ``fn`` under ``fn.name`` (again from the same module: replaced, e.g. when the
    module is reloaded); a name another module registered already is an error."""
    old = REGISTRY.get(fn.name)
    if old is not None and old.module != fn.module:
        raise ValueError(f"activation {fn.name!r} is registered already (by {old.module})")
    REGISTRY[fn.name] = fn
    return fn


def get(name: str) -> ActivationFn:
    """The registered activation ``name`` (KeyError naming the known ones otherwise)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown activation {name!r}; registered: {sorted(REGISTRY)}") from None


__all__ = ["ActivationFn", "Const", "REGISTRY", "Step", "get", "register"]
