"""The mixed conditional-gradient / gradient update of Welper (3), (14) and (22).

* A *simplex* parameter ``s`` (a vertex ``e_v`` of the standard simplex) takes the
  Frank–Wolfe step with ``alpha = 1``: ``s <- argmin_{sigma in S} d_{sigma - s} l(s)``.
  The loss is affine on the corner ``S_v^mu`` around the vertex (§4.2), so the one-sided
  derivative toward ``e_u`` is ``<grad l(e_v), e_u - e_v>`` with the gradient autograd
  takes at the vertex (every ReLU of App. A is away from its kink there, or flat on the
  whole corner), and the minimiser is the vertex ``e_u`` with the smallest ``grad_u``.
  If no vertex is strictly below the current one (``grad_u >= grad_v``), ``sigma = s``
  itself is a minimiser (its derivative is 0) and ``s`` stays: this is how a halting
  vertex stays put, and how ``s`` keeps still in the first step of §5.2, where its
  gradient is 0.  (The paper prints ``s - [argmin - s]``; with its own proof of Prop. 4.2
  the step is ``s + (argmin - s)``, see docs/gd_trace.md decision 2.)
* Every other parameter takes a plain gradient step ``t <- t - alpha * grad`` with its
  own rate (``1/gamma`` for ``T`` and ``H``, ``1`` for ``z``).

A tie between two best vertices below the current one would make the step ambiguous;
the constructions' weights rule it out ((10), (18)), and :class:`ConditionalGradient`
raises if it ever happens.

:class:`ConditionalGradient` is a ``torch.optim.Optimizer``; the class is made when first
used, so that importing the backend (``tm2nn --help`` lists every backend's options) does
not load torch.
"""

from __future__ import annotations

from functools import cache

#: two gradient entries closer than this are equal: the Frank–Wolfe vertex stays put, or
#: the step is ambiguous (the weights' gaps are at least gamma; model files record it)
FW_TOL = 1e-9


class AmbiguousStep(RuntimeError):
    """Two vertices minimise the directional derivative: the construction's margins
    ((10), (18)) were violated.  ``step``: the optimizer step it happened at, where the
    caller knows it (:func:`.machine_mode.run_gd` sets it; ``verify`` reports it there)."""

    step: int | None = None


@cache
def _optimizer_class() -> type:
    """:class:`ConditionalGradient`, a ``torch.optim.Optimizer`` (torch loads here)."""
    import torch

    class ConditionalGradient(torch.optim.Optimizer):
        """``torch.optim`` optimizer for (3): param groups with ``kind="simplex"`` take the
        Frank–Wolfe vertex step, groups with ``kind="gd"`` take ``p -= lr * grad``."""

        def __init__(self, params, tol: float = FW_TOL):
            super().__init__(params, {"kind": "gd", "lr": 1.0})
            for g in self.param_groups:
                if g["kind"] not in ("simplex", "gd"):
                    raise ValueError(f"param group kind must be 'simplex' or 'gd', not {g['kind']!r}")
            self.tol = tol
            self.last_vertex: dict[int, int] = {}

        @torch.no_grad()
        def step(self, closure=None):  # noqa: D102 - see the class docstring
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            for g in self.param_groups:
                for p in g["params"]:
                    grad = torch.zeros_like(p) if p.grad is None else p.grad
                    if g["kind"] == "gd":
                        p.sub_(g["lr"] * grad)
                        continue
                    v = int(torch.argmax(p))
                    best = float(grad.min())
                    if float(grad[v]) <= best + self.tol:
                        u = v
                    else:
                        cand = torch.nonzero(grad <= best + self.tol).flatten()
                        if cand.numel() != 1:
                            raise AmbiguousStep(f"conditional-gradient vertex is not unique: "
                                                f"{cand.tolist()[:5]} tie at derivative {best:.6g}")
                        u = int(cand[0])
                    p.zero_()
                    p[u] = 1.0
                    self.last_vertex[id(p)] = u
            return loss

    return ConditionalGradient


def __getattr__(name: str):
    if name == "ConditionalGradient":
        return _optimizer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def conditional_gradient(params, tol: float = FW_TOL):
    """A :class:`ConditionalGradient` over ``params`` (param groups, see the class)."""
    return _optimizer_class()(params, tol)
