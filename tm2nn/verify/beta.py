"""How cold must softmax attention be?  The smallest β for which the softmax
transformer matches the interpreter at every step on a set of inputs.

Mismatches are monotone in β in practice (a larger β is closer to hard-max), so we
double β until it verifies, then bisect on a log scale to within ``rel_tol``.
"""

from __future__ import annotations


def find_beta(compile_at, inputs=None, samples: int = 256, seed: int | None = None, *,
              start: float = 1.0, max_beta: float = 1e4, rel_tol: float = 0.02) -> dict:
    """``compile_at(beta) -> Compiled``.  Returns ``{"beta", "below", "tried", ...}``
    where ``beta`` is the smallest verified β found (None if even ``max_beta`` fails)
    and ``below`` the largest failing β tried."""
    from tm2nn.verify.check import verify_compiled

    first = compile_at(start)
    if inputs is None:  # the verifier's own input space, fixed once for every beta
        inputs, mode, seed = first.spec.reference(first).space().pick(samples, seed)
    else:
        inputs, mode = list(inputs), "given"
    tried: list[tuple[float, int]] = []

    def bad(beta: float) -> int:
        c = first if beta == start else compile_at(beta)
        n = verify_compiled(c, inputs=inputs, use_onnx=False).engines["torch"]
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
