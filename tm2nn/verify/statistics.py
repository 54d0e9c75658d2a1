"""Sample complexity of the compiled nets: Wei, Chen & Ma's Lemma 2.3 with its constants made
explicit, the all-layer-margin loss ℓ_γ of eq. (2.2) on data, and Corollary A.1's bound (A.2).

* :func:`surrogate_loss` — ℓ_γ(ρ) of (2.2): 1 if ρ ≤ 0, 1 − ρ/γ if 0 < ρ < γ, 0 if ρ ≥ γ.
* :func:`surrogate_loss_on` — ℓ_γ on a compiled net and a labelled dataset.  ρ (eq. 2.1)
  is not computable exactly, so each example's ρ is bracketed: the certified margin below
  (it holds at every binary input; ρ = 0 where the net disagrees with the label), the joint
  attacks above (the backend's ``statistics_bracket`` analysis computes both); ℓ_γ
  decreases in ρ, so ``ℓ_γ(ρ_upper) ≤ ℓ_γ(ρ) ≤ ℓ_γ(ρ_lower)``.
* :func:`rademacher_bound`, :func:`sample_complexity` — Lemma 2.3's
  ``n = Õ(α² log p / (γ² ε²))`` with explicit constants (docs/statistics.md derives them).
* :func:`corollary_a1` — (A.2) from per-example margins.
* :func:`statistics_report` — every factor of the bound for one compiled model (α measured,
  γ certified, p, w, d) and the resulting n, next to the paper's theorem (3.1 for circuits,
  4.1 for Turing machines).  ``tm2nn info FILE --statistics`` prints it.

The constants (each is printed as "constant chosen: ..." by the report):

1. Dudley's entropy integral as in Bartlett, Foster & Telgarsky (2017, Lemma A.5):
   ``Rad_n ≤ inf_β (4β + (12/√n) ∫_β^1 sqrt(log N(t)) dt)`` for [0, 1]-valued classes.
2. The cover (proof of Lemma 2.3): ρ is 1-Lipschitz in θ and ℓ_γ is 1/γ-Lipschitz in ρ, so
   an ℓ2 cover of Θ at scale γt covers the loss class at scale t in sup norm; Maurey's
   lemma covers the ℓ1 ball of radius α in R^p at scale s with ``⌈α²/s²⌉ log(2p + 1)``
   (log of the number of centres; they lie in the ball).  One more centre for the zero
   function adds log 2.  So ``sqrt(log N(t)) ≤ A/t + sqrt(log(4p + 2))`` with
   ``A = (α/γ) sqrt(log(2p + 1))``.
3. β = 3A/√n (the optimum) gives
   ``Rad_n ≤ (12A/√n)(1 + log(√n/(3A))) + 12 sqrt(log(4p + 2))/√n`` for √n > 3A: the
   Õ's polylog is the factor ``1 + log(√n/(3A))``.
4. Proposition 2.2's proof: with probability 1 − δ, the empirical minimiser of ℓ_γ has
   0-1 error ≤ ``E ℓ_γ(F*) + 4 Rad_n + 2 sqrt(log(2/δ)/n)``, and ``E ℓ_γ(F*) = 0`` when γ is
   at most the certified margin at every input (Lemma 2.3's condition (2.3) with ε = 0).
   n is the smallest with ``4 Rad_n + 2 sqrt(log(2/δ)/n) ≤ ε``, found by fixed-point
   iteration on √n; δ = 0.01 is Definition 2.1's "probability 0.99".
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tm2nn.datasets import load_csv
from tm2nn.errors import Tm2nnError
from tm2nn.ir import Machine

#: Proposition 2.2's factors: error ≤ E ℓ_γ(F*) + RAD_FACTOR·Rad_n + CONF_FACTOR·sqrt(log(2/δ)/n).
#: (Dudley's 4β and 12/√n are written out in :func:`_dudley`: with them the optimal β is 3A/√n.)
RAD_FACTOR, CONF_FACTOR = 4.0, 2.0

CONSTANTS = (
    "Rad_n <= inf_b 4b + (12/sqrt n) int_b^1 sqrt(log N(t)) dt (Dudley; Bartlett, Foster & Telgarsky "
    "2017, Lemma A.5), at b = 3A/sqrt n",
    "log N(t) <= ceil(alpha^2/(gamma t)^2) log(2p+1) + log 2 (Maurey's cover of the l1 ball; rho is "
    "1-Lipschitz in theta, l_gamma 1/gamma-Lipschitz in rho), A = (alpha/gamma) sqrt(log(2p+1))",
    "error <= E l_gamma(F*) + 4 Rad_n + 2 sqrt(log(2/delta)/n) (proof of Prop. 2.2), E l_gamma(F*) = 0 "
    "since gamma <= the certified margin at every input",
    "the O~'s polylog: the factor 1 + log(sqrt(n)/(3A)) of the Dudley integral; n solved by fixed-point "
    "iteration on sqrt(n)",
)
A2_CONSTANT = ("(A.2): O(.) = the same 4 x Dudley bound with 1/gamma replaced by sqrt(mean 1/rho_i^2), "
               "xi = (log(1/delta) + log n)/sqrt(n) with constant 1")


# ---------------------------------------------------------------------------------------------
# The loss (2.2)
# ---------------------------------------------------------------------------------------------
def _check_gamma(gamma) -> float:
    g = float(gamma)
    if not (g > 0 and math.isfinite(g)):
        raise Tm2nnError(f"gamma must be a positive finite number, got {gamma!r}")
    return g


def surrogate_loss(rho, gamma):
    """ℓ_γ(ρ) of eq. (2.2), elementwise: 1 for ρ ≤ 0, 1 − ρ/γ for 0 < ρ < γ, 0 for ρ ≥ γ
    (a float for a scalar ρ, else an array of ρ's shape)."""
    g = _check_gamma(gamma)
    r = np.asarray(rho, dtype=np.float64)
    if np.isnan(r).any():
        raise Tm2nnError("rho has NaN entries")
    out = np.where(r <= 0, 1.0, np.clip(1.0 - r / g, 0.0, 1.0))
    return float(out) if out.ndim == 0 else out


# ---------------------------------------------------------------------------------------------
# Lemma 2.3 with the constants explicit
# ---------------------------------------------------------------------------------------------
def _check_class(alpha, p) -> tuple[float, int]:
    a = float(alpha)
    if not (a > 0 and math.isfinite(a)):
        raise Tm2nnError(f"alpha (the l1 norm bound) must be a positive finite number, got {alpha!r}")
    if int(p) != p or p < 1:
        raise Tm2nnError(f"p (the parameter count) must be an integer >= 1, got {p!r}")
    return a, int(p)


def _check_prob(name: str, v) -> float:
    x = float(v)
    if not 0 < x <= 1:
        raise Tm2nnError(f"{name} must be in (0, 1], got {v!r}")
    return x


def _dudley(A: float, p: int, n: float) -> float:
    """The explicit bound on Rad_n for covering constant A (module doc, 3); 1 when
    √n ≤ 3A (the integral's optimum lies past the class's diameter: nothing better than
    the trivial bound)."""
    s = math.sqrt(n)
    if s <= 3 * A:
        return 1.0
    # 4β + (12/√n)(A log(1/β) + sqrt(log(4p+2))) at β = 3A/√n
    return (12 * A / s) * (1 + math.log(s / (3 * A))) + 12 * math.sqrt(math.log(4 * p + 2)) / s


def _A(alpha: float, gamma: float, p: int) -> float:
    return alpha / gamma * math.sqrt(math.log(2 * p + 1))


def rademacher_bound(alpha: float, gamma: float, p: int, n: int) -> float:
    """The bound on Rad_n of the ℓ_γ loss class of ``{θ ∈ R^p: ‖θ‖₁ ≤ α}`` (module doc,
    1-3): ``(12A/√n)(1 + log(√n/(3A))) + 12 sqrt(log(4p+2))/√n``, ``A = (α/γ) sqrt(log(2p+1))``."""
    a, p = _check_class(alpha, p)
    if n < 1:
        raise Tm2nnError(f"n must be >= 1, got {n!r}")
    return _dudley(_A(a, _check_gamma(gamma), p), p, float(n))


def lemma23_error(alpha: float, gamma: float, p: int, n: int, delta: float = 0.01) -> float:
    """The 0-1 error bound ``4 Rad_n + 2 sqrt(log(2/δ)/n)`` of the ℓ_γ empirical minimiser after
    n examples, when the construction has margin ≥ γ at every input (module doc, 4)."""
    d = _check_prob("delta", delta)
    return RAD_FACTOR * rademacher_bound(alpha, gamma, p, n) + CONF_FACTOR * math.sqrt(math.log(2 / d) / n)


def sample_complexity(alpha: float, gamma: float, p: int, eps: float, *, delta: float = 0.01) -> dict:
    """Lemma 2.3's ``n = Õ(α² log p / (γ² ε²))`` made explicit: the smallest n with
    ``4 Rad_n + 2 sqrt(log(2/δ)/n) ≤ ε`` (:func:`lemma23_error`).  With √n > 3A this is
    ``√n ≥ [48A(1 + log(√n/(3A))) + 48 sqrt(log(4p+2)) + 2 sqrt(log(2/δ))]/ε``, solved by
    fixed-point iteration on √n (the right side grows like log √n, so the iteration is a
    contraction and increases to the fixed point).

    Returns ``{"n", "A", "rademacher", "confidence", "bound", "iterations", "order"}``:
    ``rademacher`` and ``confidence`` are the two terms at n, ``bound`` their sum (≤ ε), and
    ``order`` the bare ``α² log p/(γ² ε²)`` without constants or log factors."""
    a, p = _check_class(alpha, p)
    g, e, d = _check_gamma(gamma), _check_prob("eps", eps), _check_prob("delta", delta)
    A = _A(a, g, p)
    c = RAD_FACTOR * 12 * math.sqrt(math.log(4 * p + 2)) + CONF_FACTOR * math.sqrt(math.log(2 / d))

    def rhs(s):  # √n·(the error bound at n = s²)/ε: the bound is ≤ ε iff s ≥ rhs(s)
        return (RAD_FACTOR * 12 * A * (1 + math.log(s / (3 * A))) + c) / e

    s, k = 3 * A * (1 + 1e-12), 0
    while k < 200:
        k += 1
        nxt = max(rhs(s), 3 * A * (1 + 1e-12))
        if not math.isfinite(nxt) or abs(nxt - s) <= 1e-13 * s:
            s = nxt
            break
        s = nxt
    ratio = a / g / e
    order = ratio * ratio * (math.log(p) if p > 1 else 1.0)
    if not math.isfinite(s * s):
        return {"n": math.inf, "A": A, "rademacher": None, "confidence": None, "bound": None,
                "iterations": k, "order": order}
    def ok(n):
        return RAD_FACTOR * _dudley(A, p, float(n)) + CONF_FACTOR * math.sqrt(math.log(2 / d) / n) <= e

    # the least integer n near s²: bisection between a failing and a passing one
    lo, hi = max(math.floor(s * s * (1 - 1e-9)) - 1, 1), math.ceil(s * s) + 1
    while not ok(hi):
        lo, hi = hi, 2 * hi
    if ok(lo):
        lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    n = hi
    rad, conf = _dudley(A, p, float(n)), CONF_FACTOR * math.sqrt(math.log(2 / d) / n)
    return {"n": n, "A": A, "rademacher": rad, "confidence": conf, "bound": RAD_FACTOR * rad + conf,
            "iterations": k, "order": order}


def corollary_a1(rho, alpha: float, p: int, *, delta: float = 0.01) -> dict:
    """Corollary A.1's bound (A.2) on the 0-1 test error of a classifier with zero training
    error, from its n per-example margins ρ_i: with ``A_ρ = α sqrt(log(2p+1)) sqrt(mean 1/ρ_i²)``
    (1/γ replaced by the root mean square of 1/ρ_i), ``4·[(12A_ρ/√n)(1 + log(√n/(3A_ρ))) +
    12 sqrt(log(4p+2))/√n] + ξ`` with ``ξ = (log(1/δ) + log n)/√n`` (constants chosen:
    :data:`A2_CONSTANT`).  Needs every ρ_i > 0 (zero training error): otherwise
    ``{"bound": None}``.  ``vacuous`` when the bound is ≥ 1."""
    a, p = _check_class(alpha, p)
    d = _check_prob("delta", delta)
    r = np.asarray(rho, dtype=np.float64).ravel()
    if r.size == 0:
        raise Tm2nnError("corollary_a1 needs at least one margin")
    if np.isnan(r).any():
        raise Tm2nnError("rho has NaN entries")
    n = r.size
    if (r <= 0).any():
        return {"bound": None, "n": n, "why": f"{int((r <= 0).sum())} example(s) with rho <= 0: "
                "(A.2) holds for classifiers with zero training error"}
    rms_inv = float(np.sqrt(np.mean(1.0 / r ** 2)))
    A = a * math.sqrt(math.log(2 * p + 1)) * rms_inv
    xi = (math.log(1 / d) + math.log(n)) / math.sqrt(n)
    bound = RAD_FACTOR * _dudley(A, p, float(n)) + xi
    return {"bound": bound, "n": n, "rms_inverse_margin": rms_inv, "A": A, "xi": xi, "vacuous": bound >= 1}


# ---------------------------------------------------------------------------------------------
# ℓ_γ on data
# ---------------------------------------------------------------------------------------------
def load_dataset(compiled, dataset) -> tuple[np.ndarray, np.ndarray]:
    """``(X, Y)`` as bools, ``[n, inputs]`` and ``[n, outputs]``, from ``dataset``:

    * a pair of arrays (0/1, or ±1 with −1 for 0), Y of shape [n] for one output;
    * a CSV path in the format of :mod:`tm2nn.datasets` (±1 fields): each line the circuit's
      inputs, then its outputs, in declared order (+1 = bit 1, −1 = bit 0)."""
    m = _width(compiled, "inputs")
    k = _width(compiled, "outputs")
    if isinstance(dataset, (str, Path)):
        X, Y = load_csv(dataset)
        a = np.column_stack([X, Y])
        if a.shape[1] != m + k:
            raise Tm2nnError(f"each example of {dataset} has {a.shape[1]} fields; this model needs {m} inputs "
                             f"then {k} outputs = {m + k}", file=str(dataset))
        return a[:, :m] > 0, a[:, m:] > 0
    try:
        X, Y = dataset
    except (TypeError, ValueError):
        raise Tm2nnError("a dataset is a CSV path or a pair (X, Y) of arrays") from None
    X, Y = np.asarray(X), np.asarray(Y)
    if X.size == 0 or Y.size == 0:
        raise Tm2nnError("the dataset has no examples")
    if Y.ndim == 1:
        Y = Y[:, None]
    if X.ndim != 2 or X.shape[1] != m or Y.ndim != 2 or Y.shape != (X.shape[0], k):
        raise Tm2nnError(f"the dataset's arrays have shapes {X.shape} and {Y.shape}; this model takes X of "
                         f"shape [n, {m}] and Y of shape [n, {k}]")
    for name, a in (("X", X), ("Y", Y)):
        vals = set(np.unique(a).tolist())
        if not (vals <= {0, 1} or vals <= {-1, 1}):
            raise Tm2nnError(f"{name} must hold bits (0/1, or ±1 with -1 for 0), got the values {sorted(vals)[:5]}")
    return X > 0, Y > 0


def _width(compiled, which: str) -> int:
    enc = compiled.input_encoding if which == "inputs" else compiled.output_encoding
    if enc.get("kind") != "bits":
        raise Tm2nnError(f"surrogate_loss_on takes circuit models (bit inputs and outputs); this "
                         f"{compiled.backend} model has {enc.get('kind')!r} {which}")
    return len(enc["names"])


def surrogate_loss_on(compiled, dataset, gamma: float, *, seed: int = 0, trials: int = 4,
                      steps: int = 60, delta: float = 0.01) -> dict:
    """The mean ℓ_γ (eq. 2.2) of ``compiled`` on ``dataset`` (:func:`load_dataset`), bracketed:

    * ρ_lower: the certified margin (the backend's ``certified_margin`` analysis, valid at every binary
      input) where the net's output equals the label, 0 where it does not (ρ = 0 there:
      δ = 0 already violates the label);
    * ρ_upper: the smallest joint ℓ2 perturbation the attacks (random directions and the
      gradient attack, ``trials`` starts each) found to flip some output bit, 0 where the net
      is wrong, ∞ where nothing flipped.

    ℓ_γ decreases in ρ, so ``loss_lower = mean ℓ_γ(ρ_upper) ≤ mean ℓ_γ(ρ) ≤ loss_upper =
    mean ℓ_γ(ρ_lower)``.  Also: ``wrong`` (examples the net gets wrong), the per-example
    arrays, and (A.2) (:func:`corollary_a1`) at ρ_lower (rigorous) and at ρ_upper.

    The backend brackets its own models (its ``statistics_bracket`` analysis): a circuit
    net's dataset is bits in and out; a transformer with the θ_cls readout is Theorem 4.1's
    binary classifier F(x) = θ_clsᵀ o_T' ∈ {−1, +1}, its ``dataset`` a pair ``(tapes,
    labels)`` with labels ``"accept"``/``"reject"`` or ±1."""
    g = _check_gamma(gamma)
    bracket = compiled.analysis("statistics_bracket")  # the backend's certificate and attacks
    return bracket(compiled, dataset, g, seed=seed, trials=trials, steps=steps, delta=delta)


def bracketed(compiled, g: float, agree: np.ndarray, cert: float, upper: np.ndarray, delta: float) -> dict:
    """The report of :func:`surrogate_loss_on` from ρ's bracket: ``cert`` below and
    ``upper`` above where the net agrees with the label, ρ = 0 where it does not (a
    backend's ``statistics_bracket`` analysis returns it)."""
    lower = np.where(agree, cert, 0.0)
    upper = np.where(agree, upper, 0.0)
    lo_loss, hi_loss = surrogate_loss(upper, g), surrogate_loss(lower, g)
    alpha, p = _alpha_p(compiled)
    return {
        "gamma": g, "n": int(len(agree)), "wrong": int((~agree).sum()), "certified": cert,
        "loss_lower": float(np.mean(lo_loss)), "loss_upper": float(np.mean(hi_loss)),
        "rho_lower": lower, "rho_upper": upper, "per_example_lower": lo_loss, "per_example_upper": hi_loss,
        "a2_at_rho_lower": corollary_a1(lower, alpha, p, delta=delta),
        "a2_at_rho_upper": corollary_a1(upper, alpha, p, delta=delta),
    }


def _alpha_p(compiled) -> tuple[float, int]:
    fc = compiled.analysis("function_class")(compiled)
    return float(fc["alpha"]), int(fc["p"])


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------
def _theorem(compiled, fc: dict) -> tuple[str, str, dict]:
    """(theorem, its sample-complexity order, its parameters) from the function class, or,
    where the backend does not say, from the source: a Turing machine run for T steps is
    Theorem 4.1's setting, anything else Lemma 2.3's."""
    if fc.get("theorem"):
        return fc["theorem"], fc.get("order", ""), dict(fc.get("scaling", {}))

    src = compiled.source
    if isinstance(src, Machine):
        T = compiled.options.get("steps") or compiled.build.get("options", {}).get("steps")
        return "Theorem 4.1", "poly(k, |A|, log T) log(wd) / eps^2", {
            "k": len(src.states), "|A|": len(src.alphabet), "T": T,
            "log2 T": math.log2(T) if T else None}
    return "Lemma 2.3", "alpha^2 log p / (gamma^2 eps^2)", {}


def statistics_report(compiled, eps: float = 0.1, delta: float = 0.01) -> dict:
    """Every factor of Lemma 2.3's sample complexity for ``compiled`` and the resulting n:
    α, p, w, d from the backend's ``function_class`` analysis, γ = the certified margin
    (the backend's ``certified_margin`` analysis), n from :func:`sample_complexity`, next to the
    paper's theorem (3.1 for circuits: ``poly(s) log(wd)/ε²`` with α ~ s, γ = 1/poly(r, q);
    4.1 for Turing machines: ``poly(k, |A|, log T) log(wd)/ε²``), whose form is shown as
    ``(α/γ)² log(wd)/ε²`` with every constant 1.  ``constants`` lists each constant chosen
    where the paper gives only an order."""
    e, d = _check_prob("eps", eps), _check_prob("delta", delta)
    fc = compiled.analysis("function_class")(compiled)
    cm = compiled.analysis("certified_margin")(compiled)
    if cm.get("certified") is False:  # the net does not compute its source: no margin, no γ
        raise Tm2nnError(f"{cm['message']} ({cm['space']}): Lemma 2.3 needs a net that computes its source",
                         file=getattr(compiled, "path", None))
    gamma = float(cm["radius"])
    if not (gamma > 0 and math.isfinite(gamma)):
        raise Tm2nnError(f"the certified margin of this model is {gamma:g}: Lemma 2.3 needs a positive finite gamma")
    alpha, p, w, depth = float(fc["alpha"]), int(fc["p"]), int(fc["w"]), int(fc["d"])
    sc = sample_complexity(alpha, gamma, p, e, delta=d)
    theorem, order, scaling = _theorem(compiled, fc)
    log_wd = math.log(w * depth) if w * depth > 1 else 0.0
    ratio = alpha / gamma / e
    form = {"(alpha/gamma)^2 log(wd)/eps^2": ratio * ratio * log_wd, "log(wd)": log_wd,
            "log p": math.log(p), "1/gamma": 1 / gamma}
    if scaling.get("s"):
        form["alpha/s"] = alpha / scaling["s"]
    known = {"w", "d", "alpha", "p", "theorem", "order", "scaling", "scaling_how", "how"}
    return {
        "backend": compiled.backend, "source": getattr(compiled.source, "name", None),
        "theorem": theorem, "order": order, "eps": e, "delta": d,
        "w": w, "d": depth, "alpha": alpha, "p": p, "gamma": gamma,
        "gamma_kind": cm.get("kind", "certified margin"),
        "d5": cm.get("d5"),
        "n": sc["n"], "rademacher": sc["rademacher"], "confidence": sc["confidence"], "A": sc["A"],
        "order_value": sc["order"],
        "scaling": scaling, "scaling_how": fc.get("scaling_how", ""), "theorem_form": form,
        "how": dict(fc.get("how", {})),
        "function_class": {k: v for k, v in fc.items() if k not in known},
        "constants": list(CONSTANTS),
    }
