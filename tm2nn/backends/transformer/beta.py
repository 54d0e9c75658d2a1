"""How cold must softmax attention be?  The smallest β for which the softmax
transformer (Wei, Chen & Ma, App. C's remark: softmax approaches hard-max as β grows)
matches the interpreter at every step on a set of inputs.

Mismatches are monotone in β in practice (a larger β is closer to hard-max), so we
double β until it verifies, then bisect on a log scale to within ``rel_tol``.
"""

from __future__ import annotations

from tm2nn.backends.transformer.model import compile as compile_model
from tm2nn.backends.transformer.model import options
from tm2nn.backends.transformer.reference import TraceChecker
from tm2nn.backends.transformer.runtime import BATCH, encode, torch_runner
from tm2nn.errors import Tm2nnError


def mismatches(model, inputs: list[str]) -> int:
    """How many of ``inputs`` the model's torch module (float32) runs differently from the
    interpreter (:class:`.reference.TraceChecker`: every step, then the report), in
    batches.  ``model`` is the model's data (``net``, encodings, ``source``)."""
    if not inputs:
        raise Tm2nnError("the verification compared no input (the given inputs): give at least one input")
    checker, run = TraceChecker(model), torch_runner(model.net)
    n = 0
    for s in range(0, len(inputs), BATCH):
        part = inputs[s:s + BATCH]
        diffs, _dev = checker.compare(run(encode(model, part)), part, checker.prepare(part))
        n += sum(d is not None for d in diffs)
    return n


def find_beta(compile_at, inputs=None, samples: int = 256, seed: int | None = None, *,
              start: float = 1.0, max_beta: float = 1e4, rel_tol: float = 0.02) -> dict:
    """``compile_at(beta) -> Model``; each model is checked in torch on ``inputs`` (default:
    ``samples`` of the verifier's input space) by :func:`mismatches`.  Returns ``{"beta", "below", "tried", ...}``
    where ``beta`` is the smallest verified β found (None if even ``max_beta`` fails)
    and ``below`` the largest failing β tried."""
    first = compile_at(start)
    if inputs is None:  # the verifier's own input space, fixed once for every beta
        inputs, mode, seed = TraceChecker(first).space().pick(samples, seed)
    else:
        inputs, mode = list(inputs), "given"
    tried: list[tuple[float, int]] = []

    def bad(beta: float) -> int:
        c = first if beta == start else compile_at(beta)
        n = mismatches(c, inputs)
        tried.append((beta, n))
        return n

    lo, hi = None, start
    while bad(hi) > 0:
        lo, hi = hi, hi * 2
        if hi > max_beta:
            return {"beta": None, "below": lo, "tried": tried, "n_inputs": len(inputs), "mode": mode, "seed": seed}
    while lo is not None and hi / lo > 1 + rel_tol:
        mid = (lo * hi) ** 0.5
        if bad(mid) > 0:
            lo = mid
        else:
            hi = mid
    return {"beta": hi, "below": lo, "tried": tried, "n_inputs": len(inputs), "mode": mode, "seed": seed}


def softmax_beta(ir, values: dict, *, inputs, samples, seed) -> dict:
    """The backend's ``find_beta`` analysis: :func:`find_beta` over the model compiled from
    ``ir`` with the compile options ``values`` and softmax attention at each β."""
    def at(beta):
        return compile_model(ir, options(**{**values, "attention": "softmax", "beta": beta}))
    return find_beta(at, inputs=inputs, samples=samples, seed=seed)
