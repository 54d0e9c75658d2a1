"""All-layer margin of relu-circuit nets: certified lower bounds.

Wei, Chen & Ma define the parameter-space all-layer margin (eq. 2.1)
``ρ(θ, x, y) = min ‖δ‖₂ s.t. (y - 1/2)·F(x, θ + δ) ≤ 0`` and lower-bound it through
per-layer perturbation bounds (Theorem D.6, Lemma D.9: if every layer's parameters may
move by ``a_i`` without changing the output, then ``ρ ≥ min_i a_i``).  We measure the
*per-layer* version: the smallest ``ε`` such that some perturbation with
``‖δ_B‖₂ ≤ ε`` for **every** parameter block ``B`` flips an output bit.  Blocks are App.
D's groups: ``f_i`` = (W1, b1, W2, b2) of circuit layer i, ``ζ_i`` = the correction's
two affine layers, and ``out`` = the final ``2z - 1``.  Perturbations are dense: every
entry of every weight matrix and bias, the zeros of the sparse construction included.
Since ``max_B ‖δ_B‖ ≤ ‖δ‖₂``, the per-layer margin is at most Wei's ``ρ`` (Lemma D.9).

* :func:`certified_radius` — a rigorous lower bound computed from the net's actual
  weights (derivation in docs/relu_circuit.md): with corrections, the Theorem D.6
  argument made concrete; without, Lipschitz error propagation through all layers.
* :func:`theorem_d6_bound` — the paper's own bound (D.5), with the constants of
  Conditions D.3/D.4 computed from the weights (looser: one constant per kind of layer).
* :func:`correction_radius` — Definition D.1's σζ of a correction, read from its weights.
* :func:`certified_margin` — the backend's ``certified_margin`` analysis: the radius and (D.5).

The attacks that bound the margin from above are :mod:`.attacks` (they run torch).  The
generic pieces (affine constants, bisections) are :mod:`tm2nn.verify.margin_toolkit`.
"""

from __future__ import annotations

import math
import time

import numpy as np

from tm2nn.backends.protocol import Model
from tm2nn.backends.relu_circuit import certify
from tm2nn.backends.relu_circuit.build import compile as compile_model
from tm2nn.backends.relu_circuit.build import compile_circuit
from tm2nn.backends.relu_circuit.layers import Block, blocks
from tm2nn.backends.relu_circuit.options import Options
from tm2nn.ir import Circuit
from tm2nn.nets.round import ROUND_RADIUS
from tm2nn.verify.margin_toolkit import (
    AffineBounds,
    affine_bounds,
    fixed_point,
    hypercube_norm,
    not_certified,
    same_parameters,
    sup_below,
    sup_log,
)

#: The error budget the local bound gives the last circuit layer before the ±1 map (a free
#: choice; Prop. 3.4's radius 1/3, which is what the corrections give every other layer).
SIGMA = ROUND_RADIUS


# ---------------------------------------------------------------------------------------------
# Per-affine constants (the margin toolkit's), per parameter group
# ---------------------------------------------------------------------------------------------
def _block_lins(b: Block) -> list[AffineBounds]:
    """The first affine of every block reads a binary vector (a circuit layer), so its
    λ is sqrt(width); the second reads φ(W h + b) of a binary h (App. D, Condition D.4)."""
    out = []
    for t, op in enumerate(b.affines):
        lam = math.sqrt(op.weight.shape[1]) if t == 0 else hypercube_norm(b.affines[t - 1])
        out.append(affine_bounds(op, lam))
    return out


def _plan(compiled: Model):
    """(blocks, their AffineBounds constants, the correction radius of each round block by index)."""
    bl = blocks(compiled.net)
    sig = {i: correction_radius(b) for i, b in enumerate(bl) if b.kind == "round"}
    return bl, [_block_lins(b) for b in bl], sig


# ---------------------------------------------------------------------------------------------
# The correction radius σζ (Definition D.1), read from the weights
# ---------------------------------------------------------------------------------------------
_TOL = 1e-9  # a correction counts as exact when it returns its bit to within this


def correction_radius(block: Block) -> float:
    """The correction radius of a ``round`` block, from its weights: the largest σ such that
    ``ζ(ĥ) = h`` for every bit vector h and every ĥ with ``‖ĥ − h‖₂ ≤ σ`` (Definition D.1).

    The block is ``φ(B φ(A z + c) + d)``.  When every hidden unit reads at most one
    coordinate and every output reads only its own coordinate's units (or constant ones),
    ζ acts coordinatewise, ``ζ_j(z) = φ(u_j(z_j))`` with ``u_j`` piecewise linear, and the
    ℓ2 radius is the smallest coordinatewise one (an ℓ2 ball of radius σ lies in the cube
    of half-side σ).  Each distinct ``u_j`` is walked from 0 and from 1 in both directions,
    piece by piece, to the first point where ``φ(u_j) ≠`` the bit.  Prop. 3.4's round
    (c = −1/3, −2/3; B = 3, −3) gives exactly 1/3.  A block that is not coordinatewise
    gets 0 (no radius is certified)."""
    A_op, B_op = block.affines
    A, B = A_op.weight, B_op.weight
    n_h, n = A.shape
    nz = A.vals != 0
    if np.any(np.bincount(A.rows[nz], minlength=n_h) > 1):
        return 0.0
    a, src = np.zeros(n_h), np.full(n_h, -1, dtype=np.int64)
    a[A.rows[nz]], src[A.rows[nz]] = A.vals[nz], A.cols[nz]
    c = A_op.bias
    bnz = B.vals != 0
    rows, cols, vals = B.rows[bnz], B.cols[bnz], B.vals[bnz]
    if np.any((src[cols] >= 0) & (src[cols] != rows)):
        return 0.0
    d = np.asarray(B_op.bias, dtype=np.float64).copy()
    const = src[cols] < 0  # units that read nothing: a constant φ(c_k)
    np.add.at(d, rows[const], vals[const] * np.maximum(c[cols[const]], 0.0))
    order = np.lexsort((cols[~const], rows[~const]))
    rows, cols, vals = rows[~const][order], cols[~const][order], vals[~const][order]
    cnt = np.bincount(rows, minlength=n)
    start = np.concatenate([[0], np.cumsum(cnt)])
    best = math.inf
    for m in np.unique(cnt).tolist():
        js = np.flatnonzero(cnt == m)
        idx = start[js][:, None] + np.arange(m)[None, :]
        sig = np.column_stack([d[js], vals[idx], a[cols[idx]], c[cols[idx]]])
        for row in np.unique(sig, axis=0):
            best = min(best, _exact_radius(row[0], row[1:1 + m], row[1 + m:1 + 2 * m], row[1 + 2 * m:]))
    return float(best) if math.isfinite(best) else 0.0


def _exact_radius(d: float, w: np.ndarray, a: np.ndarray, c: np.ndarray) -> float:
    """The largest σ with ``φ(u(z)) = b`` on ``[b − σ, b + σ]`` for b = 0 and b = 1, where
    ``u(z) = d + Σ_k w_k φ(a_k z + c_k)`` (linear between its kinks ``−c_k/a_k``)."""
    def u(z):
        return d + float(np.sum(w * np.maximum(a * z + c, 0.0)))

    kinks = np.sort(-c[a != 0] / a[a != 0])
    best = math.inf
    for b in (0.0, 1.0):
        good = (lambda v: v <= _TOL) if b == 0.0 else (lambda v: abs(v - 1.0) <= _TOL)
        if not good(u(b)):
            return 0.0
        for s in (-1.0, 1.0):
            ahead = kinks[(kinks - b) * s > 0]
            pts = (ahead if s > 0 else ahead[::-1]).tolist() + [b + s * 1e6]
            prev = b
            for p in pts:
                if not good(u(p)):
                    u0, u1 = u(prev), u(p)
                    t = min(max(-u0 / (u1 - u0), 0.0), 1.0) if b == 0.0 else 0.0
                    best = min(best, abs(prev + t * (p - prev) - b))
                    break
                prev = p
    return best


def _threshold(compiled: Model) -> float:
    """How far an output may move before it can decode wrong: 1/2 for 0/1, 1 for ±1."""
    return 1.0 if compiled.output_encoding.get("values") == "pm1" else 0.5


# ---------------------------------------------------------------------------------------------
# The chained bound (Lemmas D.7/D.8 computed numerically)
# ---------------------------------------------------------------------------------------------
def _val(c, K, eps):
    """Worst case over the split of the block budget: c + eps·‖K_row‖₂ (Cauchy-Schwarz)."""
    with np.errstate(invalid="ignore", over="ignore"):
        v = c + eps * (np.sqrt((K ** 2).sum(-1)) if K.shape[-1] else 0.0)
    return np.where(np.isnan(v), np.inf, v)


def _propagate(lins: list[AffineBounds], eps: float, pc: np.ndarray, sc: float,
               offset: float) -> tuple[np.ndarray, float]:
    """Push error bounds through one block whose parameters move by ≤ eps (ℓ2, jointly).

    The error is tracked in two forms, each valid for every split ε_1² + ε_2² ≤ ε² of
    the block's budget over its affine layers: per coordinate ``c_j + Σ_t ε_t K_jt`` and
    in ℓ2 ``c + Σ_t ε_t k_t``.  For layer t with input error e (w.r.t. the reference run),
    ``(W + ΔW) h̃ + b + Δb - (W h + b) = W (h̃ - h) + [ΔW Δb][h̃; 1]``, so the new error is
    ≤ |W| e (per coordinate), ≤ ‖W_j‖₂ ‖e‖₂ (row j), ≤ ‖W‖_op ‖e‖₂ (ℓ2), plus ε_t X_t with
    ``X_t = sqrt((λ_t + offset_t + ‖e‖₂)² + 1) ≥ ‖[h̃; 1]‖₂``.  ReLUs are 1-Lipschitz.
    Returns the collapsed (per-coordinate vector, ℓ2 scalar) bounds after the block.
    """
    T = len(lins)
    pK = np.zeros((pc.size, T))
    sk = np.zeros(T)
    off = offset
    with np.errstate(invalid="ignore", over="ignore"):
        for t, L in enumerate(lins):
            e2 = float(_val(np.array(sc), sk, eps))
            X = float(np.hypot(L.lam + off + e2, 1.0))
            # per-coordinate candidates
            ac, aK = L.absmul(pc), L.absmul(pK)
            bc, bK = L.r2 * sc, np.outer(L.r2, sk)
            aK[:, t] = X
            bK[:, t] = X
            ac, bc = np.nan_to_num(ac, nan=np.inf), np.nan_to_num(bc, nan=np.inf)
            pick_a = _val(ac, aK, eps) <= _val(bc, bK, eps)
            pc = np.where(pick_a, ac, bc)
            pK = np.where(pick_a[:, None], aK, bK)
            # ℓ2 candidates
            s_a_c, s_a_k = L.omega * sc, L.omega * sk
            s_a_k[t] = X
            s_b_c = float(np.sqrt(np.sum(pc ** 2)))
            s_b_k = np.sqrt((pK ** 2).sum(0))
            if _val(np.array(s_a_c), s_a_k, eps) <= _val(np.array(s_b_c), s_b_k, eps):
                sc, sk = float(s_a_c), s_a_k
            else:
                sc, sk = s_b_c, s_b_k
            off = L.omega * off
    return _val(pc, pK, eps), float(_val(np.array(sc), sk, eps))


def _chain(bl: list[Block], lins: list[list[AffineBounds]], eps: float, thr: float, sigmas: dict):
    """Evaluate the chained bound at ``eps`` (``sigmas``: each round block's correction
    radius, :func:`correction_radius`).  Returns (ok, index of the first failing
    check or -1, per-check worst values)."""
    width_in = bl[0].affines[0].weight.shape[1] if bl else 0
    pc, sc = np.zeros(width_in), 0.0
    stats = []
    for i, (b, L) in enumerate(zip(bl, lins)):
        if b.kind == "round":
            # Reference run: unperturbed round on the perturbed input g̃; it returns g exactly
            # because the previous check kept every coordinate within 1/3 (Definition D.1).
            # So the error restarts at 0, and the reference input is sc away from g.
            pc, sc = _propagate(L, eps, np.zeros(pc.size), 0.0, offset=sc)
            continue
        pc, sc = _propagate(L, eps, pc, sc, offset=0.0)
        nxt = bl[i + 1].kind if i + 1 < len(bl) else None
        if nxt == "round":
            worst, limit = float(pc.max(initial=0.0)), sigmas[i + 1]
        elif nxt is None:
            worst, limit = float(pc.max(initial=0.0)), thr
        else:
            continue
        stats.append((b.name, worst, limit))
        # round is exact on [bit - 1/3, bit + 1/3] (closed); an output must stay strictly
        # on its side of the threshold.
        ok = worst <= limit if nxt == "round" else worst < limit
        if not ok:
            return False, len(stats) - 1, stats
    return True, -1, stats


# ---------------------------------------------------------------------------------------------
# The local bound (Theorem D.6's per-layer budgets, (D.6)-(D.8), with concrete constants)
# ---------------------------------------------------------------------------------------------
def _local(bl: list[Block], lins: list[list[AffineBounds]], thr: float, share: float, sigmas: dict):
    """Per-group budgets (the decoupled induction of Lemmas D.7/D.8, all in ℓ2).

    Hypothesis at circuit layer i: its pre-correction output is within σ_i in ℓ2 of the
    exact bits (σ_i = the radius of the correction that follows, 1/3 for Prop. 3.4; at the
    last layer 1/2 for 0/1 outputs, 1/3 before the ±1 map).  Layer i's own perturbation may use ``share·σ_i`` of that (the
    first layer all of it); the rest, ``(1 - share)·σ_i``, is left for the error δ_i the
    perturbed correction ζ_(i-1) passes on, amplified by f_i's Lipschitz constant
    Λ_i = ‖W2‖·‖W1‖, so ``δ_i = (1 - share)·σ_i / Λ_i``.
    """
    fs = [i for i, b in enumerate(bl) if b.kind == "f"]
    q = len(fs)
    has_out = any(b.kind == "out" for b in bl)
    sig = [sigmas.get(i + 1, SIGMA) for i in fs]
    if q:  # an output must stay strictly on its side: keep a hair below the threshold
        sig[-1] = SIGMA if has_out else thr * (1 - 1e-9)
    delta = [0.0] * q
    for j in range(1, q):
        L1, L2 = lins[fs[j]]
        delta[j] = (1.0 - share) * sig[j] / max(L1.omega * L2.omega, 1e-300)
    rows = []
    for j, i in enumerate(fs):
        L1, L2 = lins[i]
        d = delta[j]
        own = sig[j] * (share if j else 1.0)

        def f_err(e, L1=L1, L2=L2, d=d):
            x1 = math.hypot(L1.lam + d, 1.0)
            x2 = math.hypot(L2.lam + L1.omega * d + e * x1, 1.0)
            return e * math.hypot(L2.omega * x1, x2)

        slope = math.hypot(L2.omega * math.hypot(L1.lam + d, 1.0), math.hypot(L2.lam, 1.0))
        row = {"layer": bl[i].layer, "width": L1.n_out, "lambda": L1.lam,
               "lipschitz": L1.omega * L2.omega, "eps_f": sup_below(f_err, own, slope)}
        if i + 1 < len(bl) and bl[i + 1].kind == "round":
            A, B = lins[i + 1]
            s_in = sig[j]

            def z_err(e, A=A, B=B, s_in=s_in):
                xa = math.hypot(A.lam + s_in, 1.0)
                xb = math.hypot(B.lam + A.omega * s_in + e * xa, 1.0)
                return e * math.hypot(B.omega * xa, xb)

            slope = math.hypot(B.omega * math.hypot(A.lam + s_in, 1.0), math.hypot(B.lam, 1.0))
            row["eps_zeta"] = sup_below(z_err, delta[j + 1], slope)
        rows.append(row)
    out_eps = None
    if has_out and q:
        (O,) = lins[-1]
        x_out = math.hypot(O.lam + sig[-1], 1.0)
        out_eps = max(thr - O.omega * sig[-1], 0.0) / x_out
    vals = [r["eps_f"] for r in rows] + [r["eps_zeta"] for r in rows if "eps_zeta" in r]
    if out_eps is not None:
        vals.append(out_eps)
    return min(vals, default=math.inf), rows, out_eps


def certified_radius(compiled: Model, corrections: bool | None = None, *, seed: int = 0,
                     general: bool | None = None) -> dict:
    """The certificate for any weights of the construction's shape (issue 38, Deliver 2).

    First the precondition: the net's decoded outputs must equal the reference
    interpreter's on the input space (:func:`.certify.input_space`: every input up to 16,
    else a seeded sample); otherwise ``{"certified": False, "wrong": k, "n": n, "message":
    "not certified: wrong on k of n inputs", "radius": 0}``.  Then the general bound
    (:func:`.certify.general_radius`, any weights, valid on that space), and, when the
    weights are exactly the construction's, the tight bound (:func:`tight_radius`, valid
    on every binary input), which is then the ``radius`` (the general one is ≤ it there:
    tests/backends/relu_circuit/test_certify_general.py).  ``radius_general`` and
    ``radius_tight`` (None for other weights) are both reported; ``general``: compute
    ``radius_general`` for the construction too (None: only where it is the radius)."""
    compiled = _as_variant(compiled, corrections)
    x, labels, space = certify.input_space(compiled, seed)
    wrong, vals = certify.check_correct(compiled, x, labels)
    if wrong.any():
        return not_certified(int(wrong.sum()), len(x), space, first_wrong=np.flatnonzero(wrong)[:8].tolist())
    t0 = time.perf_counter()
    construction = same_parameters(compiled.net, compile_model(compiled.source, certify.options_of(compiled)).net)
    gen = certify.general_radius(compiled, x, vals) if general or (general is None and not construction) else None
    tight = tight_radius(compiled) if construction else None
    out = {"corrections": bool(compiled.options.get("corrections", True)), "pm_one_output": _threshold(compiled) == 1.0}
    if tight is not None:
        out.update(tight)
    out.update({"certified": True, "wrong": 0, "n": len(x), "space": space,
                "weights": "the construction's" if construction else "not the construction's: the general bound",
                "radius": tight["radius"] if tight is not None else gen["radius"],
                "radius_tight": None if tight is None else tight["radius"],
                "radius_general": None if gen is None else gen["radius"],
                "seconds_general": time.perf_counter() - t0})
    return out


def tight_radius(compiled: Model, corrections: bool | None = None) -> dict:
    """A certified lower bound on the per-layer all-layer margin, valid on every binary
    input: if every block's parameters move by at most ``radius`` (ℓ2, dense), no output
    bit changes.  ``corrections`` = None analyses ``compiled`` as built; True/False
    recompiles its source circuit with that option first.

    With corrections the radius is the better of two rigorous bounds: the chained one
    (Lemmas D.7-D.8 with the actual constants, one global bisection) and the local one
    (Theorem D.6: per-group budgets ``eps_f`` (θ_i) and ``eps_zeta`` (ξ_i), minimised,
    Lemma D.9).  Without corrections only the chained bound applies: errors propagate
    through every later layer, so it shrinks with depth.
    """
    compiled = _as_variant(compiled, corrections)
    corr = bool(compiled.options.get("corrections", True))
    bl, lins, sigmas = _plan(compiled)
    thr = _threshold(compiled)
    if not bl:
        return {"corrections": corr, "radius": math.inf, "radius_chain": math.inf,
                "radius_local": None, "per_group": [], "blocks": 0}
    t0 = time.perf_counter()
    chain = sup_log(lambda e: _chain(bl, lins, e, thr, sigmas)[0])
    _, fail, stats = _chain(bl, lins, chain * 1.001 if chain > 0 else 1e-300, thr, sigmas)
    binding = stats[fail][0] if fail >= 0 and fail < len(stats) else None
    local, rows, out_eps, share = None, [], None, None
    if corr:
        best = None
        for s in np.linspace(0.1, 0.9, 9):
            r, rw, oe = _local(bl, lins, thr, float(s), sigmas)
            if best is None or r > best[0]:
                best = (r, rw, oe, float(s))
        local, rows, out_eps, share = best
    radius = max(chain, local or 0.0)
    return {
        "corrections": corr,
        "pm_one_output": thr == 1.0,
        "radius": radius,
        "radius_chain": chain,
        "radius_local": local,
        "local_share": share,
        "binding_check": binding,
        "per_group": rows,
        "eps_out": out_eps,
        "blocks": len(bl),
        "depth_layers": sum(1 for b in bl if b.kind == "f"),
        "max_width": max(L.n_out for ls in lins for L in ls),
        "seconds": time.perf_counter() - t0,
    }


# ---------------------------------------------------------------------------------------------
# Theorem D.6's bound (D.5), with the constants of Condition D.3/D.4 computed from the weights
# ---------------------------------------------------------------------------------------------
def _gain(omegas: list[float], lams: list[float], eps: float) -> float:
    """The parameter-Lipschitz factor of a chain of affine+ReLU layers: if the layers' own
    parameters move by ε_k with ``Σ ε_k² ≤ eps²``, the output moves by at most
    ``eps·_gain`` in ℓ2.  Layer k adds ``ε_k X_k``, ``X_k = sqrt((λ_k + e_(k-1))² + 1)``
    (λ_k bounds the norm of its unperturbed input, e_(k-1) the error so far), and later
    layers amplify it by their operator norms; Cauchy-Schwarz over the split gives
    ``e ≤ eps·‖c‖`` with ``c_k = X_k·Π_(j>k) ω_j``."""
    sq = 0.0  # ‖c‖²: c ← (ω_k c, X_k)
    for om, lam in zip(omegas, lams):
        x = math.hypot(lam + eps * math.sqrt(sq), 1.0)
        sq = om * om * sq + x * x
    return math.sqrt(sq)


def theorem_d6_bound(compiled: Model) -> dict:
    """Wei, Chen & Ma's bound (D.5) on the all-layer margin, with every constant of
    Conditions D.3/D.4 computed from this net's weights (docs/relu_circuit.md, "Theorem D.6
    with the constants computed"):

        ρ ≥ min{λ/μ0, σζ/μ0, σθ, 1/(2κθ), σζ/(2κθλ), σξ, σh/(2κξλ), σζ/(4λμκξ), 1/(4μκξ)}.

    The paper's layers: f_0 = circuit layer 1 (reads x), f_i = circuit layer i+1, the last
    one with the ±1 map when there is one; ζ_i = the round after circuit layer i+1.

    * λ (D.4): max(1, the largest ‖h_i‖₂ over binary runs) (hypercube bounds);
    * σζ (Def. D.1): :func:`correction_radius`, the smallest over the corrections (1/3);
      with one circuit layer there is no correction and σζ is free: just under the output
      threshold; with several and no corrections, 0 (the identity corrects nothing);
    * μ0: ``_gain`` of f_0 on ‖x‖ ≤ √m, at the fixed point μ0 = gain(min(λ, σζ)/μ0) (the
      largest perturbation (D.6) allows);
    * κθ(σθ): ``_gain`` of f_i at ‖h‖ = 1 (where ``gain/max(‖h‖, 1)`` peaks), max over i ≥ 1;
    * μ(σθ) = max_i Π_k (‖W_k‖ + σθ): f_i's input-Lipschitz constant with perturbed weights,
      valid for every pair of inputs, so σh = ∞ and the term σh/(2κξλ) drops;
    * κξ(σξ): ``_gain`` of ζ at ‖h‖ = 1 for any real input (‖φ(Ah + c)‖ ≤ ‖A‖‖h‖ + ‖φ(c)‖);
    * σθ, σξ are free: each is set to the largest value its own term allows (the fixed point
      of σ = min(the terms that shrink as σ grows)), which maximises the bound.

    Operator norms are Schur's bound sqrt(max row ℓ1 · max column ℓ1), an upper bound, so
    every constant is a valid one and (D.5) a valid lower bound on ρ (eq. 2.1) over the
    paper's parameter groups.  Returns ``{"d5", "binding", "terms", constants...}``."""
    bl, lins, sigmas = _plan(compiled)
    thr = _threshold(compiled)
    fs = [i for i, b in enumerate(bl) if b.kind == "f"]
    rounds = [i for i, b in enumerate(bl) if b.kind == "round"]
    if not fs:
        return {"d5": math.inf, "binding": None, "terms": {}, "note": "no layers"}
    groups = [list(lins[i]) for i in fs]
    for i, b in enumerate(bl):
        if b.kind == "out":
            groups[-1] += lins[i]  # the ±1 map belongs to the last paper layer f_d
    # Condition D.4: the true layer values (bits; ±1 after the map)
    norms = [hypercube_norm(bl[i].affines[-1]) for i in fs]
    if any(b.kind == "out" for b in bl):
        norms[-1] = math.sqrt(bl[-1].affines[0].weight.shape[0])
    lam = max([1.0, *norms])
    below = thr * (1 - 1e-9)  # an output must stay strictly on its side
    if rounds:
        sz, sz_how = min(min(sigmas[i] for i in rounds), below), "the corrections' radius (Def. D.1)"
    elif len(fs) == 1:
        sz, sz_how = below, "free (no correction): just under the output threshold"
    else:
        sz, sz_how = 0.0, "0: no corrections (the identity corrects nothing)"
    cmin = min(lam, sz)

    def gain_f0(eps):
        return _gain([L.omega for L in groups[0]], [L.lam for L in groups[0]], eps)

    g0 = gain_f0(0.0)
    if cmin > 0:
        lo, hi = g0, gain_f0(cmin / g0)
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if mid < gain_f0(cmin / mid) else (lo, mid)
        mu0 = hi
    else:
        mu0 = g0
    terms = {"lambda/mu0": lam / mu0, "sigma_zeta/mu0": sz / mu0}
    # the distinct layers (most are alike): (operator norms, input norm bounds at ‖h‖ = 1)
    rest = {(tuple(L.omega for L in g), (1.0, *(L.lam for L in g[1:]))) for g in groups[1:]}
    zetas = {((lins[i][0].omega, lins[i][1].omega),
              (1.0, lins[i][0].omega + float(np.linalg.norm(np.maximum(bl[i].affines[0].bias, 0.0)))))
             for i in rounds}

    def kappa_theta(st):
        return max(_gain(om, la, st) for om, la in rest)

    def mu(st):
        return max(math.prod(o + st for o in om) for om, _ in rest)

    def kappa_xi(sx):
        return max(_gain(om, la, sx) for om, la in zetas)

    def xi_best(st):  # σξ = min(σζ/(4λμκξ), 1/(4μκξ)) = min(σζ/λ, 1)/(4μκξ(σξ))
        m = mu(st)
        return fixed_point(lambda sx: min(sz / lam, 1.0) / (4 * m * kappa_xi(sx)))

    consts = {"lambda": lam, "sigma_zeta": sz, "sigma_zeta_how": sz_how, "mu0": mu0,
              "sigma_h": math.inf}
    if rest and sz > 0:
        def theta_terms(st):
            k = kappa_theta(st)
            return min(1 / (2 * k), sz / (2 * k * lam), xi_best(st) if rounds else math.inf)

        st = fixed_point(theta_terms)
        k_th, m = kappa_theta(st), mu(st)
        terms.update({"sigma_theta": st, "1/(2 kappa_theta)": 1 / (2 * k_th),
                      "sigma_zeta/(2 kappa_theta lambda)": sz / (2 * k_th * lam)})
        consts.update({"sigma_theta": st, "kappa_theta": k_th, "mu": m})
        if rounds:
            sx = xi_best(st)
            k_xi = kappa_xi(sx)
            terms.update({"sigma_xi": sx, "sigma_h/(2 kappa_xi lambda)": math.inf,
                          "sigma_zeta/(4 lambda mu kappa_xi)": sz / (4 * lam * m * k_xi),
                          "1/(4 mu kappa_xi)": 1 / (4 * m * k_xi)})
            consts.update({"sigma_xi": sx, "kappa_xi": k_xi})
    d5 = min(terms.values())
    # name the term that limits the bound: a free σ sits at a fixed point, equal to one
    binding = min((k for k in terms if not k.startswith("sigma_theta") and k != "sigma_xi"),
                  key=terms.get)
    if terms[binding] > d5 * (1 + 1e-6):
        binding = min(terms, key=terms.get)
    return {"d5": d5, "binding": binding, "terms": terms, **consts,
            "layers": len(fs), "corrections": len(rounds)}


def _as_variant(compiled: Model, corrections: bool | None) -> Model:
    if corrections is None or bool(compiled.options.get("corrections", True)) == bool(corrections):
        return compiled
    if not isinstance(compiled.source, Circuit):
        raise ValueError("can only recompile a circuit with other corrections; compile the "
                         "variant you want and pass it")
    return compile_circuit(compiled.source, Options(corrections=bool(corrections),
                                                    pm_one_output=bool(compiled.options.get("pm_one_output", False))))


def certified_margin(compiled: Model) -> dict:
    """The ``certified_margin`` analysis: the certified all-layer margin
    (:func:`certified_radius`, a lower bound on ρ of eq. 2.1 at every binary input), with
    (D.5) (:func:`theorem_d6_bound`) beside it.  Any weights of the construction's shape get
    a number (the general bound), or ``certified: False`` with the count of wrong inputs."""
    cert = certified_radius(compiled)
    if not cert["certified"]:
        return {**cert, "kind": "not certified"}
    d5 = theorem_d6_bound(compiled)
    return {**cert, "kind": "per-layer: every parameter group moves by <= radius (l2); a lower bound on rho",
            "d5": d5["d5"], "d5_binding": d5["binding"]}
