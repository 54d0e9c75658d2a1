"""Gradients of an emitted module against finite differences, in float64 (issue 35).

The constructions are piecewise linear (ReLU, hard-max) and their exact points sit on the
kinks (a rounding gadget's input is an integer), where a finite difference and autograd
legitimately differ.  So the check first moves every weight by a small random amount (a
generic point: no value within reach of a step ``eps`` is on a kink, and hard-max ties are
broken), then compares, for random directions ``d``,

    (L(θ + eps·d) − L(θ − eps·d)) / 2eps   with   Σ_P <∂L/∂P, d_P>,

where ``L = Σ r·y`` over the module's float outputs, for random ``r``.  A parameter whose
``grad`` is None counts as 0.  Welper's stop-gradient (``StopGradient``) passes a value
whose derivative is 0 by definition, so the finite differences hold the stopped values at
those of the unperturbed pass (replayed through forward hooks): the function autograd
differentiates.
"""

from __future__ import annotations

import torch

from tm2nn.emit.torch_ops import StopGradientModule


def _loss(module, xs, rs) -> torch.Tensor:
    ys = module(*xs)
    ys = ys if isinstance(ys, tuple) else (ys,)
    return sum((y * r).sum() for y, r in zip((y for y in ys if y.is_floating_point()), rs))


class _Replay:
    """Forward hooks on every stop-gradient: record its outputs, then return them again in
    the same order on later passes."""

    def __init__(self, module) -> None:
        self.mods = [m for m in module.modules() if isinstance(m, StopGradientModule)]
        self.seen: dict = {m: [] for m in self.mods}
        self.replay = False
        self.at: dict = {}
        self.handles = [m.register_forward_hook(self.hook) for m in self.mods]

    def hook(self, mod, args, out):
        if not self.replay:
            self.seen[mod].append(out.detach().clone())
            return None
        k = self.at.get(mod, 0)
        self.at[mod] = k + 1
        return self.seen[mod][k]

    def start(self) -> None:
        self.replay, self.at = True, {}

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def check_gradients(module, xs, *, seed: int = 0, noise: float = 1e-3, eps: float = 1e-6,
                    directions: int = 2, per_tensor: int | None = None, rtol: float = 1e-5) -> dict:
    """Compare autograd with finite differences (module doc) along ``directions`` random
    directions over all parameters and one random direction per parameter tensor (the
    first ``per_tensor`` tensors, all when None).  Raises AssertionError naming the
    direction that disagrees; returns ``{"checked": n, "worst": relative error}``."""
    module = module.double()
    gen = torch.Generator().manual_seed(seed)
    params = [(n, p) for n, p in module.named_parameters() if p.numel()]
    with torch.no_grad():  # a generic point near the construction
        for _, p in params:
            p.add_(noise * (1 + p.abs()) * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    for _, p in params:
        p.requires_grad_(True)
    replay = _Replay(module)
    try:
        with torch.no_grad():
            probe = module(*xs)
        replay.seen = {m: [] for m in replay.mods}
        probe = probe if isinstance(probe, tuple) else (probe,)
        rs = [torch.randn(y.shape, generator=gen, dtype=y.dtype) for y in probe if y.is_floating_point()]
        loss = _loss(module, xs, rs)
        module.zero_grad(set_to_none=True)
        loss.backward()
        grads = {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)) for n, p in params}
        replay.start()
        scale = float(loss.detach().abs()) + 1.0

        def along(d: dict) -> tuple[float, float]:
            with torch.no_grad():
                out = []
                for sign in (1.0, -1.0):
                    for n, p in params:
                        if n in d:
                            p.add_(sign * eps * d[n])
                    replay.start()
                    out.append(float(_loss(module, xs, rs)))
                    for n, p in params:
                        if n in d:
                            p.sub_(sign * eps * d[n])
            fd = (out[0] - out[1]) / (2 * eps)
            ad = sum(float((grads[n] * v).sum()) for n, v in d.items())
            return fd, ad

        worst, checked = 0.0, 0
        dirs = [{n: torch.randn(p.shape, generator=gen, dtype=p.dtype) for n, p in params} for _ in range(directions)]
        dirs += [{n: torch.randn(p.shape, generator=gen, dtype=p.dtype)} for n, p in params[:per_tensor]]
        for d in dirs:
            fd, ad = along(d)
            err = abs(fd - ad) / (abs(ad) + 1e-3 * scale * eps / 1e-6)
            where = next(iter(d)) if len(d) == 1 else "all parameters"
            assert abs(fd - ad) <= rtol * (abs(ad) + abs(fd)) + 1e-7 * scale, \
                f"{where}: finite difference {fd!r} != autograd {ad!r}"
            worst, checked = max(worst, err), checked + 1
        return {"checked": checked, "worst": worst}
    finally:
        replay.close()
