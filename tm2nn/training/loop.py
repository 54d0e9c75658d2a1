"""The training loop shared by the constructions (issue 38, Deliver 1).

A backend's ``training`` hook (:attr:`tm2nn.backends.protocol.Backend.training`) turns a
compiled model and the :class:`~tm2nn.training.options.TrainOptions` into a :class:`Task`:
the trained tensors (the construction's shape, or its width-padded variant), the
construction's values in the same shapes, the loss of a batch of inputs, the error on a
list of inputs (compared with the reference interpreter) and the model the current weights
make.  :func:`fit` runs Adam or SGD over the training inputs, measures every epoch
(:class:`Epoch`) and keeps the best weights: the lowest test error, then the lowest
training loss.  Ctrl-C inside :func:`tm2nn.interrupt.graceful` stops at the end of the
current step, and the best weights are kept.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from tm2nn import interrupt
from tm2nn.training.options import INIT_STREAM, ORDER_STREAM, TrainOptions, parse_init

#: the training error is measured on at most this many training inputs (see :func:`fit`)
TRAIN_PROBE = 16384


@dataclass
class Task:
    """What a backend's ``training`` hook returns (see the module doc).

    ``params``: name -> trained tensor (a leaf that requires grad); ``reference``: name ->
    the construction's values in the same shape (zeros in padding); ``grad_masks``: name ->
    0/1 mask of the entries that train (absent: every entry); ``loss(texts) -> scalar``;
    ``errors(texts) -> (wrong inputs, wrong steps, steps)`` against the interpreter;
    ``model() -> Model | None``: the current weights as a model of the construction's shape
    (None for a padded net); ``scratch``: name -> (fan_in) for He-scaled random starts."""

    params: dict
    reference: dict
    loss: Callable
    errors: Callable
    model: Callable
    fan_in: dict
    grad_masks: dict = field(default_factory=dict)
    #: zero entries that a perturbed start leaves at zero (a padded net's extra units)
    keep_zero: dict = field(default_factory=dict)
    what: str = ""


@dataclass
class Epoch:
    epoch: int
    loss: float
    train_error: float
    test_error: float
    test_step_error: float
    l2: float
    max_abs: float
    seconds: float
    margin: object = None


def initialise(task: Task, opts: TrainOptions) -> None:
    """Set the trained tensors to ``--init``'s start: the construction's values, plus
    N(0, EPS²) noise on every trained entry (``perturbed:EPS``; entries in ``keep_zero``
    stay 0), or He-scaled Gaussian values (``scratch``)."""
    kind, eps = parse_init(opts.init)
    g = torch.Generator().manual_seed(opts.seed * 8 + INIT_STREAM)
    with torch.no_grad():
        for name, p in task.params.items():
            ref = task.reference[name].to(p.dtype)
            mask = task.grad_masks.get(name)
            if kind == "construction":
                p.copy_(ref)
                continue
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if kind == "perturbed":
                val = ref + eps * noise
                if name in task.keep_zero:
                    val = torch.where(task.keep_zero[name], torch.zeros_like(val), val)
            else:
                val = noise * math.sqrt(2.0 / max(1, task.fan_in.get(name, 1)))
            if mask is not None:  # frozen entries keep the construction's value
                val = torch.where(mask, val, ref)
            p.copy_(val)


def distance(task: Task) -> tuple[float, float]:
    """(L2, max-abs) of the trained tensors minus the construction's."""
    sq, mx = 0.0, 0.0
    with torch.no_grad():
        for name, p in task.params.items():
            d = (p - task.reference[name].to(p.dtype)).abs()
            if d.numel():
                sq += float((d * d).sum())
                mx = max(mx, float(d.max()))
    return math.sqrt(sq), mx


def _snapshot(task: Task) -> dict:
    return {k: p.detach().clone() for k, p in task.params.items()}


def _restore(task: Task, snap: dict) -> None:
    with torch.no_grad():
        for k, p in task.params.items():
            p.copy_(snap[k])


def _rate(errs: tuple) -> tuple[float, float]:
    wrong, wrong_steps, steps = errs[0], errs[1], errs[2]
    n = errs[3] if len(errs) > 3 else None
    return (wrong / n if n else 0.0), (wrong_steps / steps if steps else 0.0)


def optimizer(params: list, opts: TrainOptions):
    """``torch.optim.Adam`` or plain ``torch.optim.SGD`` at ``opts.lr``."""
    if opts.optimizer == "sgd":
        return torch.optim.SGD(params, lr=opts.lr)
    return torch.optim.Adam(params, lr=opts.lr)


def fit(task: Task, opts: TrainOptions, train: list[str], test: list[str], *, margin=None, progress=None,
        on_epoch=None) -> dict:
    """Train (module doc).  ``margin() -> value`` is called after each epoch when given;
    ``progress(done, total, description)`` follows the optimizer steps; ``on_epoch(Epoch)``
    sees each row; ``opts.budget`` seconds end the run after the step that passes them.
    Returns ``{"epochs": [Epoch], "best": Epoch, "interrupted": bool, "start": Epoch, "updates": int
    (optimizer steps taken), "train_probe": int (inputs the training error is measured on),
    "stopped_by": "epochs" | "updates" | "budget" | "interrupt"}``; the task's tensors hold the best
    weights.  ``opts.updates`` optimizer steps end the run, mid-epoch if need be.  The training
    error and the start's loss are measured on the first :data:`TRAIN_PROBE` training inputs (all
    of them when fewer):
    the inputs are i.i.d. draws, so that is an unbiased estimate, and a 10⁶-sample run does not
    spend its time re-running every training input after every epoch."""
    params = list(task.params.values())
    for name, p in task.params.items():
        m = task.grad_masks.get(name)
        if m is not None:
            p.register_hook(lambda g, m=m: g * m.to(g.dtype))
    opt = optimizer(params, opts)
    order = torch.Generator().manual_seed(opts.seed * 8 + ORDER_STREAM)
    per_epoch = math.ceil(len(train) / opts.batch)
    total = per_epoch * opts.epochs if opts.updates is None else min(per_epoch * opts.epochs, opts.updates)
    probe = train[:TRAIN_PROBE]

    def measure(k: int, loss: float, t0: float) -> Epoch:
        tr, _ = _rate(task.errors(probe))
        te, te_steps = _rate(task.errors(test)) if test else (float("nan"), float("nan"))
        l2, mx = distance(task)
        row = Epoch(k, loss, tr, te, te_steps, l2, mx, time.perf_counter() - t0)
        row.margin = margin() if margin is not None else None
        if on_epoch is not None:
            on_epoch(row)
        return row

    t0 = time.perf_counter()
    with torch.no_grad():  # the start's loss on the probe too: over 10^6 inputs it took 100 s
        start_loss = float(task.loss(probe))
    start = measure(0, start_loss, t0)
    rows, best, snap, interrupted, done, stopped = [start], start, _snapshot(task), False, 0, "epochs"
    for k in range(1, opts.epochs + 1):
        perm = torch.randperm(len(train), generator=order).tolist()
        total_loss, n = 0.0, 0
        for b in range(per_epoch):
            chunk = [train[i] for i in perm[b * opts.batch:(b + 1) * opts.batch]]
            opt.zero_grad()
            loss = task.loss(chunk)
            loss.backward()
            opt.step()
            total_loss += float(loss.detach()) * len(chunk)
            n += len(chunk)
            done += 1
            if progress is not None:
                progress(done, total, f"epoch {k}/{opts.epochs}, loss {total_loss / n:.3g}")
            if interrupt.requested():
                interrupted = True
                break
            if opts.budget is not None and time.perf_counter() - t0 > opts.budget:
                stopped = "budget"
                break
            if done == opts.updates:
                stopped = "updates"
                break
        row = measure(k, total_loss / max(n, 1), t0)
        rows.append(row)
        if (row.test_error, row.loss) < (best.test_error, best.loss) or math.isnan(best.test_error):
            best, snap = row, _snapshot(task)
        if interrupted or stopped != "epochs":
            break
    _restore(task, snap)
    return {"epochs": rows, "best": best, "interrupted": interrupted, "start": start, "updates": done,
            "train_probe": len(probe), "stopped_by": "interrupt" if interrupted else stopped}
