"""Exact, memory-light backward passes for a :class:`~tm2nn.nets.Loop` in torch.

A loop of ``L`` trips keeps every trip's hidden units for backward: for the RCNN's
learner (Goel et al., Algorithm 1) that is ``L`` filter applications of ``~1.4·d_rc``
floats per cell, gigabytes at useful sizes.  Two exact ways around it:

* **The fixed-point tail** (:class:`FixedPointTail`).  Once a trip returns its input
  (``Loop.until_fixed``), every later trip is the same map ``f`` at the same point ``x*``,
  so their backward is ``v ↦ J(x*)ᵀ`` applied ``r`` times.  It is computed by applying the
  vector–Jacobian product of one recorded trip up to ``r`` times, and stops early when
  ``v`` no longer changes (then every further product gives ``v`` again).  These are the
  same operations, on the same values, that the unrolled backward performs, so the
  gradient is the unrolled one, bit for bit; nothing but one trip is stored.  During
  Algorithm 1's memorization B.2's Jacobian at the fixed point is 0/1 on the diagonal
  (docs/rcnn.md "The filter"), so ``v`` is stable after one product.  Only valid when no
  parameter of the body requires grad (their gradients would sum over the ``r`` trips):
  :func:`tail_allowed` checks it.
* **Checkpointing** (:func:`run_checkpointed`): trips in segments of about ``√L``, each
  recomputed in backward (``torch.utils.checkpoint``); the recomputation repeats the
  forward's operations exactly, so the gradient is again the unrolled one.  Memory is
  ``~2√L`` trips instead of ``L``.
"""

from __future__ import annotations

import math

import torch
from torch.utils.checkpoint import checkpoint


def tail_allowed(body: torch.nn.Module) -> bool:
    """The tail is exact only when the body has no parameter that requires grad."""
    return not any(p.requires_grad for p in body.parameters())


class FixedPointTail(torch.autograd.Function):
    """Identity in forward (``r`` more trips at a fixed point ``x* = f(x*)``); backward
    applies ``J_f(x*)ᵀ`` up to ``r`` times, stopping once ``v`` is unchanged."""

    @staticmethod
    def forward(ctx, x, step, remaining):  # noqa: D401 - autograd's signature
        ctx.step = step
        ctx.remaining = int(remaining)
        ctx.save_for_backward(x)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, v):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xx = x.detach().requires_grad_(True)
            yy = ctx.step(xx)
        for _ in range(ctx.remaining):
            (w,) = torch.autograd.grad(yy, xx, v, retain_graph=True)
            if torch.equal(w, v):  # J v = v: every further product gives v again
                break
            v = w
        return v, None, None


def segment_length(trips: int) -> int:
    """Trips per checkpointed segment: ``⌈√trips⌉``."""
    return max(1, math.isqrt(max(trips - 1, 0)) + 1)


def run_checkpointed(step, x: torch.Tensor, trips: int, until_fixed: bool, progress=None,
                     tail: bool = True) -> torch.Tensor:
    """``step`` applied ``trips`` times with checkpointed segments (module doc); with
    ``until_fixed`` a trip that returns its input ends the loop, and the trips left are
    a :class:`FixedPointTail` (``tail``; else the fixed point's remaining trips are
    applied, checkpointed like the others)."""
    seg = segment_length(trips)
    done = 0

    def run(x0: torch.Tensor, n: int):
        y = x0
        for k in range(1, n + 1):
            z = step(y)
            if until_fixed and not z.is_meta and torch.equal(z, y):
                return z, k, True
            y = z
        return y, n, False

    while done < trips:
        n = min(seg, trips - done)
        seen: list = []

        def segment(t: torch.Tensor, n=n, seen=seen) -> torch.Tensor:
            y, k, fixed = run(t, n)  # the recomputation in backward repeats this exactly
            if not seen:
                seen.append((k, fixed))
            return y

        x = checkpoint(segment, x, use_reentrant=False)
        used, fixed = seen[0]
        done += used
        if progress is not None:
            progress(trips if fixed else done, trips)
        if fixed and tail and done < trips:  # without the tail, the fixed point's trips run on
            x = FixedPointTail.apply(x, step, trips - done)
            break
    return x
