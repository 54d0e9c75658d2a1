"""Goel et al.'s Algorithm 1 as the paper states it — ``Θ_rc`` and ``Θ_head`` drawn
uniformly from ``U_s`` (:mod:`.u_set`), SGD on the memory layer (:func:`.learner.learn`) —
with Corollary 2's random restarts and validation selection, and Theorem 1's and
Corollary 2's numbers for our construction (docs/rcnn_algorithm1.md).

**The draw's shape (a named departure).**  Algorithm 1 samples *every* entry of
Definition 5's dense shapes (``V2…V4`` are ``d_rc × d_rc``: millions of entries).  We draw
at the planted net's **support** — its nonzero pattern, biases included — and leave the
other entries 0.  The support is a function of the machine's table (which units exist),
so this leaks structure the paper's draw does not get; it makes the draw cheap (a sparse
filter, the same cost as the planted one) and the odds finite in print.  The report gives
the odds that a draw equals the planted filter both ways: ``|U_s|^{−P}`` for the support's
``P`` parameters and for Definition 5's dense count.

**Numbers** (:func:`theorem1_numbers`, :func:`corollary2_numbers`): Theorem 1's success
probability ``s^{−c2 s²}`` is the chance to draw the planted parameters, ``|U_s|^{−P}``, so
``c2 = P ln|U_s| / (s² ln s)``; the precision ``⌈log s⌉ + c3`` from the bits the float
emission needs for ``D`` digits; Corollary 2's restarts ``M = ⌈ln(2/δ)/p⌉`` and
validation size ``N = ⌈2 ln(2M/δ)/ε²⌉`` from B.5's proof, with the constants ``c1``
(``s^{c1 s} = 1/p``) and ``c2'`` (``N ≤ c2' s ln s ln(1/δ)/ε²``) they give.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from tm2nn.backends.rcnn import learner as learner_mod
from tm2nn.backends.rcnn.bounds import def5_filter_params, def5_head_params
from tm2nn.backends.rcnn.build import CELL, body_of, filter_body
from tm2nn.backends.rcnn.filter_net import FilterNet, build_filter, bump_grid
from tm2nn.backends.rcnn.filter_spec import machine_table
from tm2nn.backends.rcnn.head import HeadNet, build_head
from tm2nn.backends.rcnn.learner_form import Shape, check_learner_form
from tm2nn.backends.rcnn.u_set import cor3_bound, log10_odds, membership, u_set
from tm2nn.nets import Affine, Net, Port, ReLU, Space, SparseMatrix

#: Algorithm 1: the head's width ``d_head`` (``F^{d+1, m+1, 100s, 100, L}``).
ALG1_D_HEAD = 100


def alg1_d_rc(s: int) -> int:
    """Algorithm 1: ``d_rc = 100 s``."""
    return 100 * s


def def5_params(d_rc: int, d_head: int) -> int:
    """Goel et al., Definition 5 (biases as footnote 6): ``Θ_rc`` at width ``d_rc`` and
    ``Θ_head`` at width ``d_head`` (:func:`.bounds.def5_filter_params`,
    :func:`.bounds.def5_head_params`)."""
    return def5_filter_params(d_rc) + def5_head_params(d_head)


# -- the draw ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Support:
    """Where the planted parameters are nonzero: a boolean mask per weight and bias of
    ``V1…V5`` and of the head (``U2, b2, U1, b1``), and the planted net's labels."""

    filter_masks: tuple[tuple[np.ndarray, np.ndarray], ...]
    head_masks: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    labels: tuple[tuple[str, ...], ...]
    head_labels: tuple[str, ...]

    @property
    def n_filter(self) -> int:
        return int(sum(int(w.sum()) + int(b.sum()) for w, b in self.filter_masks))

    @property
    def n_head(self) -> int:
        return int(sum(int(m.sum()) for m in self.head_masks))

    @property
    def n_params(self) -> int:
        return self.n_filter + self.n_head


def support_of(net: FilterNet, head: HeadNet) -> Support:
    """Goel et al., Algorithm 1's initialization, at our shape (a departure; module
    docstring): the planted filter's and head's nonzero pattern, weights and biases."""
    masks = tuple((W != 0, b != 0) for W, b in zip(net.weights, net.biases))
    hm = (head.U2 != 0, head.b2 != 0, head.U1 != 0, head.b1 != 0)
    return Support(masks, hm, net.labels, head.labels)


def draw(support: Support, U: np.ndarray, rng: np.random.Generator):
    """Goel et al., Algorithm 1 ("all entries … are sampled uniformly from U_s"), at the
    support: ``([(V1, b1), …, (V5, b5)], HeadNet)`` with every supported entry an i.i.d.
    uniform element of ``U`` and every other entry 0."""
    def one(mask):
        out = np.zeros(mask.shape)
        out[mask] = rng.choice(U, int(mask.sum()))
        return out

    layers = [(one(w), one(b)) for w, b in support.filter_masks]
    U2, b2, U1, b1 = (one(m) for m in support.head_masks)
    return layers, HeadNet(U2, b2, U1, b1, support.head_labels)


def head_net(h: HeadNet) -> Net:
    """Goel et al., Definition 5 / B.3: ``f_head(c) = U1 σ(U2 c + b2) + b1`` on one cell,
    as :func:`.learner.head_body` builds it, for any weights ``h`` (a draw)."""
    hidden = Space(tuple(h.labels))
    return Net("f_head", (Port("cell", CELL),), (
        Affine("U2", ("cell",), weight=SparseMatrix.from_dense(h.U2), bias=h.b2, out=hidden),
        ReLU("relu", ("U2",)),
        Affine("U1", ("relu",), weight=SparseMatrix.from_dense(h.U1), bias=h.b1, out=learner_mod.OUT),
    ), ("U1",))


@dataclass
class Candidate:
    """One filter Algorithm 1 trains: a label (``"draw 3"``, ``"planted"``), the filter net
    and the head (``None``: the planted head :func:`.learner.head_body`); for a draw, how
    many stored entries were drawn (``randomised``) and how many of them differ from the
    planted value (``changed``; a draw can hit the planted value)."""

    label: str
    body: Net
    head: Net | None = None
    randomised: int | None = None
    changed: int | None = None


def _entries(layers, head: HeadNet) -> list[np.ndarray]:
    """``V1, b1, …, V5, b5, U2, b2, U1, b1``: the order of :class:`Support`'s masks."""
    return [np.asarray(a, dtype=np.float64) for W, b in layers for a in (W, b)] + [
        np.asarray(a, dtype=np.float64) for a in (head.U2, head.b2, head.U1, head.b1)]


def partial_draw(support: Support, U: np.ndarray, planted: FilterNet, head: HeadNet, fraction: float,
                 seed: int, r: int):
    """Goel et al., Theorem 1's initialisation on a chosen ``fraction`` of the parameters
    (issue 38; Algorithm 1 is ``fraction = 1``): :func:`draw` with ``default_rng((seed, r))``
    gives every supported entry of ``Θ_rc`` and ``Θ_head`` a uniform value from ``U``;
    ``k = round(fraction · P)`` of the ``P`` supported entries, the first ``k`` of a
    permutation drawn with ``default_rng((seed, r, 1))``, keep it, the others keep the
    planted value.  So for one ``(seed, r)`` the randomised entries of a smaller fraction
    are a subset of a larger one's, with the same values (a coupled sweep), and
    ``fraction = 1`` is exactly :func:`draw`.  Returns ``(layers, HeadNet, k, changed)``
    (``changed``: entries whose value differs from the planted one)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the randomised fraction is in [0, 1], not {fraction}")
    layers, drawn_head = draw(support, U, np.random.default_rng((seed, r)))
    P = support.n_params
    k = int(round(fraction * P))
    chosen = np.zeros(P, dtype=bool)
    chosen[np.random.default_rng((seed, r, 1)).permutation(P)[:k]] = True
    masks = [m for w, b in support.filter_masks for m in (w, b)] + list(support.head_masks)
    out, off, changed = [], 0, 0
    for a, d, m in zip(_entries(zip(planted.weights, planted.biases), head), _entries(layers, drawn_head), masks):
        a = a.copy()
        n = int(m.sum())
        new = np.where(chosen[off:off + n], d[m], a[m])
        changed += int((new != a[m]).sum())
        a[m] = new
        out.append(a)
        off += n
    pairs = [(out[2 * i], out[2 * i + 1]) for i in range(5)]
    return pairs, HeadNet(*out[10:], support.head_labels), k, changed


def draw_candidate(support: Support, U: np.ndarray, seed: int, r: int, *, fraction: float = 1.0,
                   planted: FilterNet | None = None, head: HeadNet | None = None) -> Candidate:
    """Restart ``r``'s draw (numpy ``default_rng((seed, r))``, so each draw is reproducible
    on its own), as a filter net with the planted net's labels (:func:`.build.filter_body`);
    with ``fraction < 1`` only that share of the entries is drawn, the rest planted
    (:func:`partial_draw`, which needs the ``planted`` filter and ``head``)."""
    if planted is not None and head is not None:
        layers, h, k, changed = partial_draw(support, U, planted, head, fraction, seed, r)
    elif fraction < 1.0:
        raise ValueError("a partial draw needs the planted filter and head")
    else:
        layers, h = draw(support, U, np.random.default_rng((seed, r)))
        k = support.n_params
        changed = None
    body = filter_body(layers, [list(lab) for lab in support.labels[:4]])
    return Candidate(f"draw {r}", body, head_net(h), randomised=k, changed=changed)


def partial_candidate(g, fraction: float, seed: int) -> Candidate:
    """One filter and head for the learner ``g``: ``fraction`` of the planted ``Θ_rc, Θ_head``
    drawn from ``U_s`` (:func:`partial_draw`, restart 0 of ``seed``), the rest planted."""
    planted = build_filter(machine_table(g))
    head = build_head()
    return draw_candidate(support_of(planted, head), u_set(planted.n_states), seed, 0, fraction=fraction,
                          planted=planted, head=head)


# -- validation --------------------------------------------------------------------------------
def zero_one_error(y_hat: np.ndarray, y: np.ndarray) -> float:
    """Corollary 2's validation score: the 0/1 error of ``sign(ŷ)`` (``ŷ ≥ 0`` is +1, as
    :func:`.learner.run` reads it) against the labels ``y``; an inf/nan ``ŷ`` is an error."""
    y_hat = np.asarray(y_hat, dtype=np.float64)
    y = np.asarray(y)
    if len(y) == 0:
        return 0.0
    ok = np.isfinite(y_hat)
    pred = np.where(y_hat >= 0, 1, -1)
    return float(np.mean(~ok | (pred != y)))


def train_and_score(g, X, Y, Xv, Yv, candidates: list[Candidate], *, depth: int, work: int,
                    dtype=torch.float64, progress=None, device=None, parts=("memory",)) -> list[dict]:
    """Goel et al., Algorithm 1 then B.5's validation: train each candidate's memory layer
    (:func:`.learner.learn` with its filter and head) and score it on ``(Xv, Yv)``
    (:func:`zero_one_error`).  One dict per candidate: label, validation error, memorized
    (Lemma 4's check), finite predictions, seconds; ``_trained`` holds the model.  Each
    trains on ``device`` (default: the CPU); ``parts`` is what SGD trains
    (:data:`.learner_form.PARTS`)."""
    out = []
    with learner_mod.step_threads(), np.errstate(all="ignore"):
        for k, c in enumerate(candidates):
            t0 = time.perf_counter()
            tr = learner_mod.learn(g, X, Y, depth=depth, work=work, dtype=dtype, filter_body=c.body,
                                   head_body=c.head, device=device, parts=parts)
            y_hat = tr.predict(Xv)  # inf/nan kept; a random draw's grid falls back to the module
            out.append({"label": c.label, "validation_error": zero_one_error(y_hat, Yv),
                        "memorized": bool(tr.memorized), "finite_predictions": float(np.isfinite(y_hat).mean())
                        if len(y_hat) else 1.0, "seconds": time.perf_counter() - t0, "_trained": tr,
                        "randomised": c.randomised, "changed": c.changed})
            if progress is not None:
                progress(k + 1, len(candidates))
    return out


def select(results: list[dict]) -> int:
    """Corollary 2 (B.5): the candidate with the lowest validation error (the first of
    equals)."""
    if not results:
        raise ValueError("no candidates to select from")
    errs = [r["validation_error"] for r in results]
    return int(np.argmin(errs))


# -- Theorem 1 and Corollary 2 -----------------------------------------------------------------
def precision_bits(D: int) -> int:
    """Goel et al., Theorem 1 ("bit precision ⌈log s⌉ + c3") for our emission: the
    significand bits (the implicit one included) needed for B.1.1's ``D`` digits: every
    bump breakpoint ``c_v + K ± 2g, ± 4g`` lies in ``[1, 4)`` and is a multiple of ``g`` (:func:`~.filter_net.bump_grid`), and a ``p``-bit float holds every
    multiple of ``g`` in ``[2, 4)`` iff ``2^{2−p} ≤ g``: ``p = 2 + log2(1/g) =
    2 + ⌈4 + (D−1) log2 3⌉``.  float32 (24) gives ``D ≤ 12``, as docs/rcnn.md says."""
    return 2 + int(round(-math.log2(bump_grid(D))))


def theorem1_numbers(s: int, D: int, n_support: int, n_dense: int, U_size: int) -> dict:
    """Goel et al., Theorem 1 for our construction: the success probability
    ``s^{−c2 s²}`` = the chance ``|U_s|^{−P}`` that the draw is the planted filter, with
    ``c2 = P ln|U_s| / (s² ln s)``, for the support draw this module does and for
    Definition 5's dense draw; the precision ``⌈log s⌉ + c3`` in base-3 digits (B.1.1's
    unit, ``D = ⌈log2(s−1)⌉ + 4``) and in binary significand bits (:func:`precision_bits`)."""
    ls = math.log(s) if s > 1 else float("nan")

    def c2(P):
        return P * math.log(U_size) / (s * s * ls)

    log2s = math.ceil(math.log2(s)) if s > 1 else 0
    bits = precision_bits(D)
    return {
        "log10_success_support": log10_odds(n_support, U_size),
        "log10_success_dense": log10_odds(n_dense, U_size),
        "c2_support": c2(n_support),
        "c2_dense": c2(n_dense),
        "precision_digits": D,
        "c3_digits": D - log2s,
        "precision_bits": bits,
        "c3_bits": bits - log2s,
        "float32_ok": bits <= 24,
    }


def corollary2_numbers(s: int, log10_p: float, eps: float, delta: float) -> dict:
    """Goel et al., Corollary 2 via B.5's proof, for success probability ``p``
    (``log10_p``): ``M`` restarts with ``(1 − p)^M ≤ e^{−pM} ≤ δ/2``, so
    ``M = ⌈ln(2/δ)/p⌉``; ``N`` validation points with ``2√(ln(2M/δ)/(2N)) ≤ ε``, so
    ``N = ⌈2 ln(2M/δ)/ε²⌉``.  In the paper's forms: ``M = s^{c1 s} ln(2/δ)`` with
    ``c1 = ln(1/p)/(s ln s)``, and for ``δ ≤ 1/2``
    ``N ≤ c2' s ln s ln(1/δ)/ε² + 1`` with ``c2' = 2(c1/ln 2 + 4/(s ln s))``
    (``ln 2 + ln ln(2/δ) + ln(1/δ) ≤ 4 ln(1/δ)`` and ``c1 s ln s ≤ c1 s ln s ln(1/δ)/ln 2``).
    The paper leaves its ``c1, c2`` unspecified.  Huge numbers as ``log10``."""
    ln_inv_p = -log10_p * math.log(10)
    ln_M = math.log(math.log(2 / delta)) + ln_inv_p          # ln M (before the ceiling)
    ln_2M_delta = math.log(2) + ln_M + math.log(1 / delta)
    N = math.ceil(2 * ln_2M_delta / eps ** 2)
    sl = s * math.log(s)
    c1 = ln_inv_p / sl
    return {
        "eps": eps, "delta": delta,
        "log10_restarts": ln_M / math.log(10),
        "validation_size": N,
        "c1": c1,
        "c2_prime": 2 * (c1 / math.log(2) + 4 / sl),
        "validation_size_paper_form": math.ceil(2 * (c1 / math.log(2) + 4 / sl) * sl
                                                * math.log(1 / delta) / eps ** 2) + 1,
    }


# -- the pipeline ------------------------------------------------------------------------------
def algorithm1(g, X, Y, Xv, Yv, *, restarts: int, seed: int = 0, offer_planted: bool = False,
               steps: int | None = None, work: int = 1, dtype=torch.float64, eps: float = 0.1, device=None,
               delta: float = 0.1, progress=None, fraction: float = 1.0, parts=("memory",)) -> dict:
    """Goel et al., Corollary 2 around Algorithm 1: for ``r = 0 … restarts−1`` draw
    ``Θ_rc, Θ_head`` uniformly from ``U_s`` at the planted support (:func:`draw_candidate`),
    train the memory layer on ``(X, Y)`` (:func:`.learner.learn`), score on ``(Xv, Yv)``,
    and select the lowest validation error (:func:`select`).  With ``offer_planted`` the
    planted filter is one more candidate, labelled ``"planted"`` (off by default: a real
    run never sees it).  Depth and step bound as :func:`.learner.run` chooses them.
    ``fraction < 1`` draws only that share of the supported entries, planting the rest
    (:func:`partial_draw`); ``parts`` is what SGD trains (:func:`.learner.learn`).

    The report is JSON-able apart from keys starting with ``_`` (``_trained``: the chosen
    model).  :func:`format_report` gives its lines."""
    t_start = time.perf_counter()
    check_learner_form(g)
    X = np.asarray(X, dtype=np.int64)
    Y = np.asarray(Y, dtype=np.int64)
    Xv = np.asarray(Xv, dtype=np.int64).reshape(-1, X.shape[1])
    Yv = np.asarray(Yv, dtype=np.int64)
    if restarts < 0:
        raise ValueError("restarts must be >= 0")
    m, d = X.shape
    if steps is None:
        steps = learner_mod.step_bound(g, X, Y, Shape(m, d, 0))
    depth = learner_mod.depth_for(steps, m)

    planted = build_filter(machine_table(g))
    head = build_head()
    s, D = planted.n_states, planted.n_digits
    U = u_set(s)
    sup = support_of(planted, head)
    inside = membership(planted, head, U)["all_in"]
    cands = [draw_candidate(sup, U, seed, r, fraction=fraction, planted=planted, head=head)
             for r in range(restarts)]
    if offer_planted:
        cands.append(Candidate("planted", body_of(planted), None))  # the net built above, not a second build
    results = train_and_score(g, X, Y, Xv, Yv, cands, depth=depth, work=work, dtype=dtype, device=device,
                              progress=progress, parts=parts)
    best = select(results) if results else None

    n_dense = def5_params(max(alg1_d_rc(s), planted.d_rc), ALG1_D_HEAD)
    th1 = theorem1_numbers(s, D, sup.n_params, n_dense, int(U.size))
    cor2 = corollary2_numbers(s, th1["log10_success_support"], eps, delta)
    th1["log10_success_fraction"] = log10_odds(int(round(fraction * sup.n_params)), int(U.size))
    draws = [r["seconds"] for r in results if r["label"] != "planted"]
    rep = {
        "states": s, "digits": D, "examples": int(m), "features": int(d), "validation_size": int(len(Yv)),
        "steps": int(steps), "filter_steps": int(depth), "working_columns": int(work),
        "restarts": int(restarts), "seed": int(seed), "planted_offered": bool(offer_planted),
        "fraction": float(fraction), "randomised": int(round(fraction * sup.n_params)), "sgd_on": list(parts),
        "u_set": {"size": int(U.size), "cor3_bound": cor3_bound(s), "planted_in_u_set": bool(inside)},
        "draw": {
            "shape": "planted support (nonzero pattern), a departure from Def. 5's dense draw",
            "params_support": sup.n_params, "params_support_filter": sup.n_filter,
            "params_support_head": sup.n_head,
            "params_dense": n_dense, "dense_d_rc": max(alg1_d_rc(s), planted.d_rc), "dense_d_head": ALG1_D_HEAD,
            "log10_odds_support": th1["log10_success_support"],
            "log10_odds_dense": th1["log10_success_dense"],
        },
        "candidates": [{k: v for k, v in r.items() if not k.startswith("_")} for r in results],
        "chosen": None if best is None else {"index": best, "label": results[best]["label"],
                                             "validation_error": results[best]["validation_error"],
                                             "memorized": results[best]["memorized"]},
        "theorem1": th1,
        "corollary2": cor2,
        "seconds": time.perf_counter() - t_start,
        "seconds_per_draw": (sum(draws) / len(draws)) if draws else None,
        "_trained": None if best is None else results[best]["_trained"],
    }
    return rep


def _sci(log10: float) -> str:
    e = math.floor(log10)
    return f"{10 ** (log10 - e):.2f}e{e:+d}" if abs(log10) < 300 else f"10^{log10:,.1f}"


def format_report(rep: dict) -> list[str]:
    """The human lines of :func:`algorithm1`'s report (what ``tm2nn learn`` prints)."""
    s, th, c2, dr, u = rep["states"], rep["theorem1"], rep["corollary2"], rep["draw"], rep["u_set"]
    lines = [
        f"Algorithm 1 with {rep['restarts']} random restart(s), seed {rep['seed']}: s = {s} states, "
        f"D = {rep['digits']} digits, {rep['examples']} examples, {rep['validation_size']} validation points, "
        f"L = {rep['filter_steps']} filter steps",
        f"U_s: {u['size']:,} values (Cor. 3 bound 24|X_i|+5 = {u['cor3_bound']:,}); planted filter in U_s: "
        f"{'yes' if u['planted_in_u_set'] else 'NO'}",
        f"draw at the planted support: {dr['params_support']:,} parameters "
        f"({dr['params_support_filter']:,} filter + {dr['params_support_head']} head); "
        f"P(draw = planted) = |U_s|^-{dr['params_support']:,} = {_sci(dr['log10_odds_support'])}",
        f"Def. 5 dense draw (d_rc = {dr['dense_d_rc']:,}, d_head = {dr['dense_d_head']}): "
        f"{dr['params_dense']:,} parameters, P = {_sci(dr['log10_odds_dense'])}",
    ]
    if rep["fraction"] < 1.0:
        lines.append(f"partial draw: fraction {rep['fraction']:g} = {rep['randomised']:,} of "
                     f"{dr['params_support']:,} entries drawn from U_s, the rest planted; "
                     f"P(draw = planted) = {_sci(th['log10_success_fraction'])}")
    if rep["sgd_on"] != ["memory"]:
        lines.append(f"SGD trains: {', '.join(rep['sgd_on'])} (Algorithm 1 trains the memory layer only)")
    for c in rep["candidates"]:
        lines.append(f"  {c['label']:>9}: validation error {c['validation_error']:.3f}, "
                     f"memorized {'yes' if c['memorized'] else 'no'}, finite outputs "
                     f"{100 * c['finite_predictions']:.0f}%, {c['seconds']:.2f} s")
    ch = rep["chosen"]
    lines.append("chosen: none (no candidates)" if ch is None else
                 f"chosen: {ch['label']} (validation error {ch['validation_error']:.3f})")
    lines += [
        f"Theorem 1: success probability s^(-c2 s^2) = {_sci(th['log10_success_support'])} with "
        f"c2 = {th['c2_support']:.4g} (support draw); dense draw c2 = {th['c2_dense']:.4g}, "
        f"{_sci(th['log10_success_dense'])}",
        f"Theorem 1: precision ceil(log2 s) + c3 = {th['precision_digits']} base-3 digits (c3 = {th['c3_digits']}), "
        f"{th['precision_bits']} significand bits (c3 = {th['c3_bits']}; float32 "
        f"{'suffices' if th['float32_ok'] else 'does not suffice'})",
        f"Corollary 2 (eps = {c2['eps']}, delta = {c2['delta']}): restarts s^(c1 s) ln(2/delta) = "
        f"{_sci(c2['log10_restarts'])} with c1 = {c2['c1']:.4g}; validation size "
        f"2 ln(2M/delta)/eps^2 = {c2['validation_size']:,} (c2' = {c2['c2_prime']:.4g})",
    ]
    return lines
