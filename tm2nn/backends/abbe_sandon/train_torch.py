"""The float64 engine: G_n as an IR net (:mod:`.ir_net`), emitted to torch in float64 and
trained with plain ``torch.optim.SGD``, checked against the learner at every step.

One step on a sample ``(z, y)`` (Theorem 4's ``z = (2x - 1, 2r - 1, 2r' - 1)``,
``y = ±1``): ``opt.zero_grad()``, ``out = module(z)``, ``loss = (out - y)**2`` (the exact
engine's loss, :mod:`.train`), ``loss.backward()``, ``opt.step()`` with
``torch.optim.SGD(module.parameters(), lr=gamma)`` (``gamma = Dyadic.gamma``, no momentum,
no weight decay, batch 1).  The trainable parameters are every edge of G_n: the M_s edges
(the ``[nnz]`` weights of the ``.train`` affines) and every other edge and bias (the
``.gates`` affines, frozen by the construction: their units sit where fpl' = 0,
:mod:`.ir_net`); only the carries (not G_n edges) are fixed tensors.

Checks after each step (:class:`.train.StepChecker`, shared with the exact engine): the
output is ±1 and equals the learner's ``y*_t``; the memory decoded from the first m
copies (w(v0, v1) against its bit-0 sign, :func:`.gadgets.ms_bit`'s rule) equals
``b_t``; every M_s weight is bitwise ± its initial value (Lemma 2's invariant: a flip
is exact); and (``check_weights``) every other weight -- the frozen-by-construction
parameters SGD was given, and the fixed carries -- is bitwise unchanged (Lemma 1: SGD
leaves the gates alone).  The first mismatch stops training.

Export: :func:`learn` hands the net before and after training (the module's weights
written back, :meth:`~tm2nn.emit.torch_net.NetModule.to_net`) to its caller, which
saves it as any model (:meth:`tm2nn.handle.Compiled.save`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable

import numpy as np

from tm2nn import emit, threads
from tm2nn.devices import torch_device

from .gadgets import MS_PATH_PLUS
from .ir_net import IRNet, build_ir_net
from .net import build_net
from .train import (
    Mismatch,
    StepChecker,
    TrainReport,
    held_out_accuracy,
    learn_summary,
    prepare_stream,
)
from .train import train as train_exact

ENGINES = ("exact", "float64")


class TorchEngine:
    """The emitted module, its SGD optimiser and the index maps for decoding (module doc),
    on ``device`` (default: the CPU)."""

    def __init__(self, ir: IRNet, device=None) -> None:
        import torch

        self.ir = ir
        self.torch = torch
        self.device = torch_device(device)
        self.module = emit.to_torch(ir.net, torch.float64, self.device)
        #: the M_s edges' parameters (one per ``.train`` op)
        self.params = {name: self.module.op(name).weight for name in ir.gadget_ops()}
        #: the frozen-by-construction parameters: (op, "weight" | "bias" | "value") -> Parameter
        self.frozen = {(name, t): p for name in ir.frozen_ops()
                       for t, p in self.module.op(name).named_parameters(recurse=False)}
        # position of the IR entry j of each trainable op's weight in its flattened
        # parameter: the ``scatter`` form holds the [nnz] entries in IR order; an op whose
        # matrix stores every entry is ``dense`` (row-major [n_out, n_in])
        self.flat = {}
        for name in ir.trainable_ops():  # the affines
            mod, w = self.module.op(name), ir.net.node(name).weight
            self.flat[name] = (np.arange(w.nnz) if mod.form == "scatter"
                               else w.rows * w.shape[1] + w.cols)
        self.opt = torch.optim.SGD(self.module.parameters(), lr=ir.gamma)
        pnames = {n for n, p in self.module.named_parameters() if p.requires_grad}
        want = {f"{self.module.op_attrs[n]}.weight" for n in self.params}
        want |= {f"{self.module.op_attrs[n]}.{t}" for n, t in self.frozen}
        assert pnames == want, pnames ^ want
        self.buffers0 = {n: b.detach().clone() for n, b in self._frozen()}
        self.frozen0 = {k: p.detach().clone() for k, p in self.frozen.items()}
        self.all0 = self._all_fixed()
        self.abs0 = {n: p.detach().abs().clone() for n, p in self.params.items()}
        self.edge_of = {sl: e for e, sl in enumerate(ir.slot)}
        # memory decoding: each memory copy's w(v0, v1) slot and its bit-0 sign (+)
        lr = ir.learner
        self.mem_slots = [ir.slot[edges[("v0", "v1")]] for edges in ir.mem_edges]
        self.mem_path = [[ir.slot[edges[e]] for e in MS_PATH_PLUS] for edges in ir.mem_edges]
        self.mem_sign0 = [c.template.initial[("v0", "v1")] > 0 for c in ir.graph.memory_copies]
        assert len(self.mem_slots) == lr.m

    def value(self, e: int) -> float:
        """The current weight of expanded edge ``e`` of G_n."""
        name, tensor, j = self.ir.slot[e]
        if tensor in ("bias", "value"):
            return float(self.frozen[(name, tensor)].detach()[j])
        p = self.params[name] if name in self.params else self.frozen[(name, "weight")]
        return float(p.detach().reshape(-1)[int(self.flat[name][j])])

    def weights(self) -> list[float]:
        """Every edge's current weight (expanded G_n order)."""
        return [self.value(e) for e in range(len(self.ir.src))]

    def memory(self) -> list[int]:
        vals = {n: p.detach().reshape(-1).tolist() for n, p in self.params.items()}
        return [0 if (vals[name][self.flat[name][j]] > 0) == s0 else 1
                for (name, _, j), s0 in zip(self.mem_slots, self.mem_sign0)]

    def step(self, z, label: float) -> float:
        torch = self.torch
        self.opt.zero_grad(set_to_none=False)
        y = self.module(torch.as_tensor(np.asarray(z, dtype=np.float64)[None, :], device=self.device))
        loss = (y[0, 0] - float(label)) ** 2
        loss.backward()
        self.opt.step()
        return float(y.detach()[0, 0])

    def predict_rows(self, Z) -> list[int]:
        torch = self.torch
        with torch.no_grad(), self.pinned_threads():
            y = self.module(torch.as_tensor(np.asarray(Z, dtype=np.float64), device=self.device))
        return [1 if v > 0 else 0 for v in y[:, 0].tolist()]

    @contextmanager
    def pinned_threads(self):
        """torch on :mod:`tm2nn.threads`' count for per-step work in the block.  G_n's
        layers are small: a second thread only adds overhead, and with the other core busy
        its barrier waits cost 60x (parity8, 256 predictions: 8 s on 2 threads against
        0.14 s on 1)."""
        threads.use_torch()
        yield

    def exact_flips(self) -> str | None:
        """None if every M_s weight is bitwise ± its initial value, else which is not."""
        for n, p in self.params.items():
            a = p.detach().abs()
            if not self.torch.equal(a, self.abs0[n]):
                j = int((a != self.abs0[n]).reshape(-1).nonzero()[0, 0])
                return (f"{n}[{j}] = {float(p.detach().reshape(-1)[j])!r}, "
                        f"initial ±{float(self.abs0[n].reshape(-1)[j])!r}")
        return None

    def _frozen(self) -> list:
        """The fixed weights (Parameters with ``requires_grad=False``: the carries), which
        SGD is not given; they must never change.  (Buffers are index structure, not
        weights.)"""
        return [(n, p) for n, p in self.module.named_parameters() if not p.requires_grad]

    def _all_fixed(self):
        """The bits of every weight outside the M_s copies, as one int64 tensor (one
        comparison; float64 viewed as int64, so -0.0 != 0.0)."""
        return self.torch.cat([_bits(p) for p in self.frozen.values()] + [_bits(b) for _, b in self._frozen()])

    def changed_buffers(self) -> list[str]:
        """Every weight outside the M_s copies that is not bitwise its initial value: a
        frozen-by-construction entry as its edge ``u -> v`` (``const -> v`` for a bias), a
        fixed tensor (the carries) by name."""
        if self.torch.equal(self._all_fixed(), self.all0):
            return []
        bad = []
        for (name, tensor), p in self.frozen.items():
            now, was = p.detach().reshape(-1), self.frozen0[(name, tensor)].reshape(-1)
            if self.torch.equal(_bits(now), _bits(was)):
                continue
            flat = self.flat[name] if tensor == "weight" else np.arange(len(was))  # bias, value: dense
            pos = {int(f): j for j, f in enumerate(flat)}
            for f in (_bits(now) != _bits(was)).nonzero()[:, 0].tolist():
                e = self.edge_of.get((name, tensor, pos.get(f, -1)))
                where = (f"{self.ir.names[self.ir.src[e]]} -> {self.ir.names[self.ir.dst[e]]}" if e is not None
                         else f"{name}.{tensor}[{f}] (an absent bias edge)")
                bad.append(f"{where}: {float(was[f])!r} -> {float(now[f])!r}")
        return bad + [n for n, b in self._frozen() if not self.torch.equal(_bits(b), _bits(self.buffers0[n]))]


def _bits(t):
    """A float64 tensor's bit patterns (int64), flattened: equality of these is bitwise."""
    import torch

    return t.detach().reshape(-1).view(torch.int64)


def train(ir: IRNet, xs, ys, rs=None, r2s=None, *, check_weights: bool = True,
          progress: Callable[[int, float], None] | None = None, engine: TorchEngine | None = None) -> TrainReport:
    """Train the float64 G_n on the stream with ``torch.optim.SGD``, comparing with the
    learner after every step (module doc; the same checks and report as :func:`.train.train`)."""

    ref, Z, ys = prepare_stream(ir.learner, xs, ys, rs, r2s)
    eng = engine or TorchEngine(ir)
    chk = StepChecker(ir.learner, ref, ys, eng.memory(), progress)
    with eng.pinned_threads():
        for t in range(len(Z)):
            out = eng.step(Z[t], 1.0 if ys[t] else -1.0)
            if not chk.step(t, out if out not in (1.0, -1.0) else int(out), eng.memory):
                break
            bad = eng.exact_flips()
            if bad is not None:
                chk.report.mismatch = Mismatch(t + 1, "value", f"an M_s weight is not ± its initial value: {bad}")
                break
            if check_weights and not chk.weights(t, eng.changed_buffers()):
                break
            chk.tick(t)
    return chk.finish()


def learn(lr, xs, ys, rs, r2s, test_xs, test_ys, test_rs=None, test_r2s=None, *,
          progress: Callable[[int, str], None] | None = None, snapshots=None,
          k: int | None = None, device=None) -> dict:
    """:func:`.train.learn` with the float64 engine (same dict), the module on ``device``
    (default: the CPU).  ``snapshots(ir, net, steps, memory)`` receives the net (with the
    module's weights, :meth:`~tm2nn.emit.torch_net.NetModule.to_net`) before and after
    training."""
    ir = build_ir_net(lr, k)
    eng = TorchEngine(ir, device=device)
    T = len(xs)
    if snapshots:
        snapshots(ir, eng.module.to_net(), 0, eng.memory())

    def on_step(t, acc):
        if progress is not None:
            progress(t, f"training (running accuracy {acc:.2f})")

    rep = train(ir, xs, ys, rs, r2s, progress=on_step, engine=eng)
    if snapshots:
        snapshots(ir, eng.module.to_net(), rep.steps, eng.memory())
    acc = held_out_accuracy(lr, rep, eng.predict_rows, test_xs, test_ys, test_rs, test_r2s, chunk=256,
                            progress=None if progress is None else (lambda i, msg: progress(T + i, msg)))
    return learn_summary(rep, acc, len(test_xs), ir.size_report())


def steps_per_second(lr, T: int = 50, seed: int = 0) -> dict[str, float]:
    """Measured SGD steps per second of both engines on one random stream (for the
    ``--engine`` default; docs/abbe_sandon.md "float64 engine and export")."""
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 2, (T, lr.n)).astype(bool)
    ys = rng.integers(0, 2, T).astype(bool)
    rs = rng.integers(0, 2, (T, len(lr.random))).astype(bool)
    r2s = rng.integers(0, 2, (T, len(lr.coin))).astype(bool)
    out = {}
    t0 = time.perf_counter()
    rep = train_exact(build_net(lr), xs, ys, rs, r2s)
    out["exact"] = rep.steps_per_second
    out["exact_build_s"] = time.perf_counter() - t0 - rep.seconds
    t0 = time.perf_counter()
    ir = build_ir_net(lr)
    eng = TorchEngine(ir)
    out["float64_build_s"] = time.perf_counter() - t0
    rep = train(ir, xs, ys, rs, r2s, engine=eng)
    out["float64"] = rep.steps_per_second
    return out


__all__ = ["ENGINES", "TorchEngine", "train", "learn", "steps_per_second"]
