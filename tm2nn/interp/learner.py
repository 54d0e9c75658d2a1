"""Reference interpreter for learners: Lemma 3's recursion (Abbe & Sandon §4.1).

For each step t = 1 .. T (see :mod:`tm2nn.ir.learner`)::

    y*_t = h(x_t, r_t, r'_t, b_{t-1})
    b_t  = b_{t-1} if y*_t == y_t else g(x_t, r_t, r'_t, b_{t-1})

This is what the emulation net is compared with at every step: its output sign with
``y*_t`` and its decoded memory weights with ``b_t``.

Bits are 0/1 (bool or int arrays); the net's ±1 encoding (2v - 1) is the caller's
business.  Steps are sequential, but independent *streams* run together: every
array may carry a leading batch axis B, and each step evaluates ``h`` and ``g`` once,
bit-parallel over all streams (:func:`tm2nn.interp.circuit.eval_circuit`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tm2nn.interp.circuit import eval_circuit
from tm2nn.ir.learner import Learner


@dataclass(frozen=True)
class LearnerRun:
    """A run of :func:`run_learner`.  With a batch axis every array gains a leading B.

    * ``outputs`` bool ``[T]``: ``y*_t``, the learner's output at step t;
    * ``memories`` bool ``[T, m]``: ``b_t``, the memory *after* step t;
    * ``wrong`` bool ``[T]``: ``y*_t != y_t``, the steps where ``g`` was applied
      (the memory may still be unchanged if ``g`` returned it);
    * ``init`` bool ``[m]``: ``b_0``.
    """

    outputs: np.ndarray
    memories: np.ndarray
    wrong: np.ndarray
    init: np.ndarray

    @property
    def final(self) -> np.ndarray:
        """The memory after the last step (``b_0`` when there were no steps)."""
        if self.memories.shape[-2] == 0:
            return np.broadcast_to(self.init, self.memories.shape[:-2] + self.init.shape).copy()
        return self.memories[..., -1, :]


def _bits(a, shape: tuple, what: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.shape != shape:
        raise ValueError(f"{what}: expected shape {shape}, got {arr.shape}")
    if arr.dtype != bool:
        if arr.size and not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{what}: bits must be 0 or 1")
        arr = arr.astype(bool)
    return arr


def _group(lr: Learner, a, k: int, lead: tuple, what: str) -> np.ndarray:
    """Random bits: ``None`` is allowed only for an empty group."""
    if a is None:
        if k:
            raise ValueError(f"{what}: the learner has {k} such bit(s); pass them")
        return np.zeros(lead + (0,), dtype=bool)
    arr = np.asarray(a)
    if k == 1 and arr.shape == lead:
        arr = arr[..., None]
    return _bits(arr, lead + (k,), what)


def run_learner(lr: Learner, xs, ys, rs=None, r2s=None, init=None) -> LearnerRun:
    """Run ``lr`` on a sample stream.

    ``xs`` ``[T, n]`` data bits, ``ys`` ``[T]`` labels, ``rs`` ``[T, len(random)]`` the
    algorithm's random bits (Theorem 4's r; ``None`` if it has none), ``r2s`` ``[T]``
    the coin r' (``None`` if it has none).  A leading batch axis on all of them runs B
    independent streams.  ``init`` overrides ``lr.init`` (``[m]`` or ``[B, m]``).
    """
    xs = np.asarray(xs)
    if xs.ndim not in (2, 3):
        raise ValueError(f"xs: expected [T, n] or [B, T, n], got shape {xs.shape}")
    batched = xs.ndim == 3
    if not batched:
        xs = xs[None]
        ys = np.asarray(ys)[None]
        rs = None if rs is None else np.asarray(rs)[None]
        r2s = None if r2s is None else np.asarray(r2s)[None]
    B, T = xs.shape[:2]
    xs = _bits(xs, (B, T, lr.n), "xs")
    ys = _bits(ys, (B, T), "ys")
    rs = _group(lr, rs, len(lr.random), (B, T), "rs (random bits r)")
    r2s = _group(lr, r2s, len(lr.coin), (B, T), "r2s (coin r')")
    b0 = np.asarray(lr.init if init is None else init)
    mem = np.broadcast_to(_bits(b0, b0.shape, "init"), (B, lr.m)).copy()
    if mem.shape != (B, lr.m):  # pragma: no cover - broadcast_to raises first
        raise ValueError("init has the wrong width")

    outputs = np.zeros((B, T), dtype=bool)
    wrong = np.zeros((B, T), dtype=bool)
    memories = np.zeros((B, T, lr.m), dtype=bool)
    data = np.concatenate([xs, rs, r2s], axis=2)  # [B, T, n + k]
    for t in range(T):
        ports = np.concatenate([data[:, t], mem], axis=1)
        out = eval_circuit(lr.h, ports)[:, 0]
        bad = out != ys[:, t]
        if bad.any():
            nxt = eval_circuit(lr.g, ports[bad])
            mem[bad] = nxt
        outputs[:, t] = out
        wrong[:, t] = bad
        memories[:, t] = mem
    init_arr = np.asarray(b0, dtype=bool)
    if not batched:
        return LearnerRun(outputs[0], memories[0], wrong[0], init_arr)
    return LearnerRun(outputs, memories, wrong, init_arr)


def predict(lr: Learner, memory, xs, rs=None, r2s=None) -> np.ndarray:
    """``h(x, r, r', memory)`` for a batch of test inputs ``xs`` ``[N, n]``: the trained
    learner's answers, bool ``[N]``.  ``memory`` is ``[m]`` (shared) or ``[N, m]``.

    ``rs``/``r2s`` default to all 0.  In the computing phase (Theorem 4's ``A''`` once
    the memory says it is done) ``h`` does not read them; before that the answer is the
    coin, so pass the coins you want."""
    xs = _bits(np.asarray(xs), (len(xs), lr.n), "xs")
    N = xs.shape[0]
    rs = np.zeros((N, len(lr.random)), bool) if rs is None else _group(lr, rs, len(lr.random), (N,), "rs")
    r2s = np.zeros((N, len(lr.coin)), bool) if r2s is None else _group(lr, r2s, len(lr.coin), (N,), "r2s")
    mem = np.asarray(memory)
    mem = _bits(mem, mem.shape, "memory")
    if mem.shape not in ((lr.m,), (N, lr.m)):
        raise ValueError(f"memory: expected shape ({lr.m},) or ({N}, {lr.m}), got {mem.shape}")
    mem = np.broadcast_to(mem, (N, lr.m))
    if N == 0:
        return np.zeros(0, dtype=bool)
    return eval_circuit(lr.h, np.concatenate([xs, rs, r2s, mem], axis=1))[:, 0]


__all__ = ["LearnerRun", "run_learner", "predict"]
