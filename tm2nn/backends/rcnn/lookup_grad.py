"""Algorithm 1's SGD step on the memory layer through the memoised filter
(:mod:`.lookup_engine`): the forward by table look-up, the backward by the chain rule with
each patch's Jacobian, memoised the same way.

Goel et al.'s Algorithm 1 trains only ``W`` (Definition 5's ``f_mem``).  The loss
``½(y − ŷ)²`` depends on ``W`` through the first grid ``g₀ = [W diag(z) 1]``, then ``L``
applications of the filter, then the head.  The emitted module's backward
(:mod:`tm2nn.emit.torch_loop_grad`) evaluates the 5-layer filter net (width ``d_rc``) at
every cell of every stored trip, twice (checkpointed forward, then backward): at the
parity learner's sizes that is most of a training step.  But the filter is a function of
the short key of a patch (:class:`~.lookup_engine.LookupEngine`), and so is its
derivative: ``∂out_c/∂g[c + δ_k] = ∂f/∂x_k(patch_c)`` for the ``k`` the filter reads
(the other patch cells have zero columns in ``V1``).  :class:`LookupGrad` keeps, beside
the engine's output table, a table of these 5 partials per key, computed **by autograd
on the emitted filter net itself** at that patch, and then runs:

1. *forward*: the engine's trips from ``g₀`` (the module's own memory layer), storing each
   trip's id grid, until the fixed point (``Loop.until_fixed``);
2. ``ŷ`` by the module's own read-out on the last grid, and ``v_L = ∂loss/∂grid_L`` by
   autograd through it;
3. *the fixed-point tail*, as :class:`~tm2nn.emit.torch_loop_grad.FixedPointTail` does it:
   ``v ← J(x*)ᵀ v`` for the trips left, stopping when ``v`` no longer changes;
4. *the trips backward*: ``v_{t−1}[c + δ_k] += J_k(patch_c of grid_{t−1}) · v_t[c]``;
5. ``W.grad`` by autograd through the module's memory layer from ``v₀``.

It is the chain rule on the same values; the sums are taken in another order than
autograd's, so it is used where the caller checks the result bit for bit (Lemma 4, in
:func:`.learner.learn`) and tested against the module's backward
(``tests/backends/rcnn/test_rcnn_goel_odds.py``).
"""

from __future__ import annotations

import numpy as np
import torch

from tm2nn.backends.rcnn.lookup_engine import _BITS, MAX_VALUES, LookupEngine
from tm2nn.emit.torch_net import _net_fm
from tm2nn.nets.grid import PATCH_OFFSETS


class LookupGrad:
    """``∂½(y − ŷ)²/∂W`` of an emitted learner module (:func:`.learner.learner_net`) with
    ``trips`` filter steps, through the memoised filter and its memoised Jacobian (module
    doc).  Raises :class:`~.lookup_engine.Degenerate` where the engine does."""

    def __init__(self, module: torch.nn.Module, trips: int, dtype: torch.dtype) -> None:
        self.module = module
        self.trips = int(trips)
        self.dtype = dtype
        self.pm = module.op("grid").body.op("filter")
        self.eng = LookupEngine(self.pm, trips, dtype)
        self.jkeys = np.zeros(0, dtype=np.int64)            # sorted
        self.jac = np.zeros((0, len(self.eng.read)))        # ∂f/∂x_k per key, k in eng.read order
        self.trips_run: list[int] = []                      # forward trips of each call (fixed point)

    def _jacobian(self, keys: np.ndarray) -> np.ndarray:
        """``[n, 5]``: the filter net's partial derivatives at each key's patch (autograd on
        the emitted body, the unread cells at the padding value), memoised."""
        pos = np.searchsorted(self.jkeys, keys)
        hit = pos < self.jkeys.size
        hit[hit] = self.jkeys[pos[hit]] == keys[hit]
        if not hit.all():
            new = np.unique(keys[~hit])
            patch = np.full((9, new.size), self.eng.pad, dtype=np.float64)
            vals = np.asarray(self.eng.values, dtype=np.float64)
            shift = _BITS * (len(self.eng.read) - 1)
            for k in self.eng.read:
                patch[k] = vals[(new >> shift) & (MAX_VALUES - 1)]
                shift -= _BITS
            x = torch.as_tensor(patch, dtype=self.dtype).requires_grad_(True)
            with torch.enable_grad():
                y = _net_fm(self.pm.body, (x,))[0]
                (gx,) = torch.autograd.grad(y.sum(), x)
            part = gx.to(torch.float64).numpy()[self.eng.read].T  # patches are independent columns
            keys_all = np.concatenate([self.jkeys, new])
            order = np.argsort(keys_all, kind="stable")
            self.jkeys, self.jac = keys_all[order], np.concatenate([self.jac, part])[order]
            pos = np.searchsorted(self.jkeys, keys)
        return self.jac[pos]

    def _vjp(self, ids: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``J(grid)ᵀ v`` for one filter step at the id grid ``ids`` ``[H, W]``."""
        h, w = ids.shape
        J = self._jacobian(self.eng._keys(ids[None]).reshape(-1))
        out = np.zeros((h + 2, w + 2))
        flat_v = v.reshape(-1)
        for j, k in enumerate(self.eng.read):
            di, dj = PATCH_OFFSETS[k]
            out[1 + di:1 + di + h, 1 + dj:1 + dj + w] += (J[:, j] * flat_v).reshape(h, w)
        return out[1:-1, 1:-1]

    def step(self, z: torch.Tensor, y: float) -> torch.Tensor:
        """One example's backward: ``W.grad`` (accumulated, as ``loss.backward()`` would)
        for ``z`` ``[1, d+1]`` and label ``y``; returns ``ŷ`` ``[1, 1]`` (detached)."""
        grid0 = self.module.op("memory")(z)                         # [1, H, W], a function of W
        ids = self.eng.encode(grid0.detach().to(torch.float64).cpu().numpy())[0]
        grids = [ids]
        fixed_at = None
        for i in range(1, self.trips + 1):
            nxt = self.eng.step(grids[-1][None])[0]
            if np.array_equal(nxt, grids[-1]):
                fixed_at = i
                break
            grids.append(nxt)
        self.trips_run.append(self.trips if fixed_at is None else fixed_at)
        last = torch.as_tensor(self.eng.decode(grids[-1])[None], dtype=self.dtype).requires_grad_(True)
        with torch.enable_grad():
            y_hat = self.module.op("prediction")(last)
            (0.5 * (float(y) - y_hat[0, 0]) ** 2).backward()
        v = last.grad[0].to(torch.float64).numpy()
        if fixed_at is not None:  # the fixed trip, then the tail: J(x*)ᵀ until v is stable
            for _ in range(self.trips - fixed_at):
                w = self._vjp(grids[-1], v)
                if np.array_equal(w, v):
                    break
                v = w
            v = self._vjp(grids[-1], v)
        for t in range(len(grids) - 1, 0, -1):  # trip t maps grids[t−1] to grids[t]
            v = self._vjp(grids[t - 1], v)
        grid0.backward(torch.as_tensor(v[None], dtype=grid0.dtype))
        return y_hat.detach()
