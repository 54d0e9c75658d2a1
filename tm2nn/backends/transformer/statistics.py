"""The transformer's ``statistics_bracket`` analysis: the loss ℓ_γ (Wei, Chen & Ma eq. 2.2)
of Theorem 4.1's binary classifier F(x) = θ_clsᵀ o_T' on a machine dataset, with the
all-layer margin ρ of each example bracketed by the certificate (:mod:`.margin`) below
and the attacks (:mod:`.perturbed_decode`) above.  Lemma 2.3's arithmetic and the report
are :mod:`tm2nn.verify.statistics`'s."""

from __future__ import annotations

import math

import numpy as np

from tm2nn.backends.transformer.margin import certified_margin
from tm2nn.backends.transformer.perturbed_decode import attack, blocks_of, net_of
from tm2nn.backends.transformer.runtime import run_taps
from tm2nn.errors import Tm2nnError
from tm2nn.verify.statistics import bracketed


def load_machine_dataset(dataset) -> tuple[list[str], np.ndarray]:
    """``(tapes, labels)`` -> the tapes and the labels as ±1 (``"accept"``/``"reject"``,
    ±1, or 1/0 with 0 for reject)."""
    try:
        texts, labels = dataset
    except (TypeError, ValueError):
        raise Tm2nnError("a machine dataset is a pair (tapes, labels)") from None
    texts = [str(t) for t in texts]
    names = {"accept": 1.0, "reject": -1.0}
    try:
        y = np.array([names[v] if isinstance(v, str) else float(v) for v in labels], dtype=np.float64)
    except KeyError as e:
        raise Tm2nnError(f"a label is 'accept', 'reject', +1 or -1 (or 1/0), got {e.args[0]!r}") from None
    if not texts or len(texts) != len(y):
        raise Tm2nnError(f"the dataset has {len(texts)} tapes and {len(y)} labels (at least one of each, as many)")
    if set(np.unique(y).tolist()) <= {0.0, 1.0}:
        y = 2 * y - 1
    if not set(np.unique(y).tolist()) <= {-1.0, 1.0}:
        raise Tm2nnError(f"labels must be accept/reject, ±1 or 1/0, got the values {sorted(set(y.tolist()))[:5]}")
    return texts, y


def statistics_bracket(compiled, dataset, gamma: float, *, seed: int = 0, trials: int = 4, steps: int = 60,
                       delta: float = 0.01) -> dict:
    """:func:`tm2nn.verify.statistics.surrogate_loss_on` for a transformer with θ_cls (the
    proof of Theorem 4.1): F(x) = θ_clsᵀ o_T' (+1 accept, −1 reject, 0 otherwise,
    :mod:`.cls`); ``dataset`` is a pair ``(tapes, labels)`` (:func:`load_machine_dataset`).

    * ρ_lower: the certified radius where sign F(x) = y (it keeps every decoded field of
      every step, θ_cls's column included, within 1/2 of its exact value, so F keeps its
      sign), 0 where F(x) ≠ y (a 0 from a run that did not accept or reject within T
      disagrees with either label);
    * ρ_upper: the attacks of :func:`.perturbed_decode.attack` with ``target="cls"``
      (``trials`` random directions, ``max(1, trials // 4)`` gradient starts of ``steps``
      steps) find a shared perturbation with every one of the B parameter blocks ≤ ε that
      changes the sign of F; its whole ℓ2 norm is ≤ √B·ε, so ρ ≤ √B·ε (the per-layer ε
      alone bounds the per-layer margin, not ρ of eq. 2.1).

    The certified per-layer radius is ≤ ρ (Lemma D.9's direction), so ρ_lower ≤ ρ ≤ ρ_upper."""
    col = compiled.output_encoding.get("cls_column")
    if col is None:
        raise Tm2nnError("the loss (2.2) of a transformer is of its binary classifier F = θ_clsᵀ o_T: compile "
                         "it with --cls-readout (cls_readout=True)")
    texts, y = load_machine_dataset(dataset)
    F = run_taps(compiled, texts, "torch")[:, -1, int(col)]
    agree = np.sign(np.rint(F)) == y
    cert = float(certified_margin(compiled)["radius"])
    rnd = attack(compiled, texts, 1.0, "random", trials, seed=seed, target="cls")
    grd = attack(compiled, texts, 1.0, "gradient", max(1, trials // 4), steps=steps, seed=seed, target="cls",
                 eps0=rnd["eps"])
    blocks = len(blocks_of(net_of(compiled)))
    upper = np.minimum(rnd["per_input"], grd["per_input"]) * math.sqrt(blocks)
    return {**bracketed(compiled, gamma, agree, cert, upper, delta), "blocks": blocks}
