"""Goel et al.'s initialization set ``U_s`` (Algorithm 1, Lemma 2, Lemma 6, Corollary 3)
built explicitly for *our* construction: a finite set of reals, computed from the number
of states ``s`` alone (before any machine is seen), that contains every weight and every
bias of every filter :func:`~.filter_net.build_filter` plants (``Θ_rc``: ``V1…V5`` and
their biases) and of the head :func:`~.head.build_head` (``Θ_head``: ``U1, U2, b1, b2``)
for **any** machine with ``s`` states in B.1.2 form, and ``0`` (Corollary 3 puts 0 in).

**Derivation** (read off :mod:`.filter_net`; docs/rcnn_algorithm1.md has the table).  With
``D = 4 + S`` digits, ``S = state_digits(s)``, ``h = 3^{-(D-1)}``, ``g`` = the largest
power of two ``≤ h/16`` (:func:`~.filter_net.bump_grid`) and ``K = 2``:

* *cell values* ``𝒳_s`` (the ``4s + 10`` values of :func:`.reachable.cell_classes`): they
  depend on the machine only through its state codes, and the B.1.1 code gives the ``s``
  states of *any* machine the same codes — the start ``0`` and ``j`` in binary (±1 digits)
  for ``j < s − 1`` (:func:`~.encoding.cell_code`).  So ``𝒳_s`` is a function of ``s``;
* ``V1``: weight 1, bias ``K``;
* ``V2``: weights ±1, biases ``−(c_v + K − 4g)``, ``−(c_v + K − 2g)``, ``c_v + K + 2g``,
  ``c_v + K + 4g`` for every ``v ∈ 𝒳_s`` (``c_v`` = ``v`` rounded to a multiple of ``g``);
* ``V3``: weights ``±1/(2g)`` and ``−1`` (the ramps), biases ``−1`` and ``4g``;
* ``V4``: weights 1 and 4 (case 4's centre literal), biases ``−(n−1)`` / ``−n`` for the
  units' literal counts ``n``: ``0, −1, −2, −4, −5``;
* ``V5`` (the terms' values): every non-head cell value ``v`` (``base``); γ's head outputs
  ``w/3 + 1/9`` and ``w/3 + 1/9 + 1/27 + q`` (``w ∈ {−1, 0, 1}``, ``q`` a state code);
  the TM corrections ``1/27 + q``; msg 2's ``−1/9 − v`` (``v ∈ {0, ±1/3}``); msg 3's
  ``1/9 + 1/27``; msg 4's ``±1/9``; the slope terms' indicators ``−1/9 − 2g`` (msg 1) and
  ``c_{−1/9} − 2g`` (memory) and their slope units' ``1``; bias 0;
* the head: ``U2 = 1``, ``b2 = 1/6, 0, −1/9, −1/6``, ``U1 = 18, −36, 36, −18``, ``b1 = −1 + 5·2⁻⁵²``
  (:func:`~.head.exact_zero_bias`).

Every number is computed with the same float operations as :mod:`.filter_net`, so
membership is exact (``==``), not approximate.
"""

from __future__ import annotations

import math

import numpy as np

from tm2nn.backends.rcnn.encoding import CellCode, state_digits
from tm2nn.backends.rcnn.filter_net import K_SHIFT, FilterNet, _val, bump_grid
from tm2nn.backends.rcnn.filter_spec import P
from tm2nn.backends.rcnn.head import BREAKS, SLOPES, HeadNet, build_head
from tm2nn.backends.rcnn.reachable import CellClasses, cell_classes
from tm2nn.nets import SparseMatrix


def state_code(s: int) -> CellCode:
    """Goel et al., B.1.1/B.1.2 ("States"): the state code every machine with ``s`` states
    gets from :func:`~.encoding.cell_code` — start ``0``, non-start state ``j`` is ``j`` in
    binary with digits ±1 — for placeholder state names (only ``s`` matters)."""
    if s < 1:
        raise ValueError("a machine has at least one state")
    k = state_digits(s)
    table = np.zeros((s, k), dtype=np.int8)
    j = np.arange(s - 1)
    bits = (j[:, None] >> np.arange(k - 1, -1, -1)[None, :]) & 1
    table[1:] = (2 * bits - 1).astype(np.int8)
    return CellCode(tuple(f"q{i}" for i in range(s)), "q0", "_", table)


def cell_values(s: int) -> CellClasses:
    """Goel et al., Lemma 6's ``𝒳_i`` for our construction: the ``4s + 10`` cell values of
    :func:`.reachable.cell_classes` (``p`` included) for ``s`` states."""
    return cell_classes(state_code(s))


def n_digits(s: int) -> int:
    """B.1.1: ``D = 4 + S`` base-3 digits for ``s`` states."""
    return 4 + state_digits(s)


def u_set_parts(s: int) -> dict[str, np.ndarray]:
    """Goel et al., Lemma 6 / Corollary 3, for :func:`~.filter_net.build_filter` and
    :func:`~.head.build_head`: the values each layer of the construction can use for a
    machine with ``s`` states, by layer (module docstring).  Built from ``s`` alone."""
    classes = cell_values(s)
    D = classes.n_digits
    g = bump_grid(D)
    t2, t3 = 3 ** (D - 3), 3 ** (D - 4)  # 1/9 and 1/27 in packed units
    cells = [int(v) for v in classes.of(*(k for k in classes.values))]

    def value(v: int) -> float:  # as build_filter's value()
        return 1.0 / 6.0 if v == P else _val(v, D)

    def center(v: int) -> float:  # as build_filter's center()
        return float(np.round(value(v) / g) * g)

    # V2's biases: -sides[k] * (c + offs[k]) with c = c_v + K (build_filter)
    offs, sides = (-4 * g, -2 * g, 2 * g, 4 * g), (1.0, 1.0, -1.0, -1.0)
    breaks = [-sides[k] * ((center(v) + K_SHIFT) + offs[k]) for v in cells for k in range(4)]

    # V5: the terms' values
    states = [int(q) for q in _state_packed(s)]
    plain = [int(v) for k in ("Z", "M", "W", "E", "C", "Cw") for v in classes.values[k]]
    heads = [w * 3 ** (D - 2) + t2 for w in (-1, 0, 1)]
    heads += [w * 3 ** (D - 2) + t2 + t3 + q for w in (-1, 0, 1) for q in states]
    outs = [_val(n, D) for n in plain + heads]
    outs += [_val(t3 + q, D) for q in states]                               # f̄_TM, head beside
    outs += [_val(-t2 - v, D) for v in (0, 3 ** (D - 2), -3 ** (D - 2))]    # msg 2
    outs += [_val(t2 + t3, D), _val(t2, D), -_val(t2, D)]                   # msg 3, msg 4
    e = -t2  # the memory value −1/9: base indicator and msg 1's indicator (slope terms)
    outs += [_val(e, D) - value(e) + center(e) - 2 * g, _val(-t2, D) - value(0) + center(0) - 2 * g, 1.0]

    head = build_head()
    return {
        "zero": np.array([0.0]),
        "V1": np.array([1.0, K_SHIFT]),
        "V2": np.array([1.0, -1.0] + breaks),
        "V3": np.array([1.0 / (2 * g), -1.0 / (2 * g), -1.0, 4 * g]),
        "V4": np.array([1.0, 4.0, 0.0, -1.0, -2.0, -4.0, -5.0]),
        "V5": np.array(outs + [0.0]),
        "head": np.concatenate([head.U2.ravel(), -np.array(BREAKS), np.array(SLOPES), head.b1]),
    }


def _state_packed(s: int) -> np.ndarray:
    """B.1.1: the packed state digits (digits ``4 … D−1``) of every state code for ``s``
    states, as :func:`.reachable.cell_classes` computes them."""
    code = state_code(s)
    D = code.n_digits
    w = 3 ** np.arange(D - 5, D - 5 - code.n_state_digits, -1, dtype=np.int64)
    return (code.table.astype(np.int64) * w).sum(-1)


def u_set(s: int) -> np.ndarray:
    """Goel et al., Algorithm 1's ``U_s`` (Lemma 2; Corollary 3's ``U = {0} ∪ ⋃ U(W)``) for
    our construction: sorted distinct float64 values, from ``s`` alone."""
    vals = np.concatenate(list(u_set_parts(s).values())).astype(np.float64)
    vals = np.where(vals == 0, 0.0, vals)  # one zero (−0.0 == 0.0)
    return np.unique(vals)


def cor3_bound(s: int) -> int:
    """Corollary 3: ``|U| ≤ 24|𝒳_i| + 5`` with B.4's ``𝒳_i`` = every ``D``-digit base-3
    code and ``p``: ``|𝒳_i| = 3^{D−1} + 1``."""
    return 24 * (3 ** (n_digits(s) - 1) + 1) + 5


def _tensors(net: FilterNet, head: HeadNet | None) -> dict:
    """``net``'s ``V1…V5`` (sparse) and biases, and the head's ``U2, b2, U1, b1``, by name."""
    out: dict = {}
    for i, (W, b) in enumerate(zip(net.sparse, net.biases), start=1):
        out[f"V{i}"] = W
        out[f"V{i}.bias"] = b
    head = build_head() if head is None else head
    for name in ("U2", "b2", "U1", "b1"):
        out[f"head.{name}"] = getattr(head, name)
    return out


def parameters(net: FilterNet, head: HeadNet | None = None) -> dict[str, np.ndarray]:
    """Every weight and bias (zeros included) of ``net`` (``V1…V5``, ``V1.bias…V5.bias``)
    and of the head (``head.U2``, ``head.b2``, ``head.U1``, ``head.b1``), flattened."""
    return {k: (t.dense() if isinstance(t, SparseMatrix) else np.asarray(t, dtype=np.float64)).ravel()
            for k, t in _tensors(net, head).items()}


def _nonzeros(net: FilterNet, head: HeadNet | None) -> dict[str, tuple[np.ndarray, int]]:
    """:func:`parameters` as ``name -> (the nonzero values, the entry count)``, the
    filter's matrices read from their sparse form (never made dense)."""
    out = {}
    for k, t in _tensors(net, head).items():
        if isinstance(t, SparseMatrix):
            out[k] = (t.vals, t.shape[0] * t.shape[1])
        else:
            v = np.asarray(t, dtype=np.float64).ravel()
            out[k] = (v[v != 0], v.size)
    return out


def membership(net: FilterNet, head: HeadNet | None = None, U: np.ndarray | None = None) -> dict:
    """Goel et al., Lemma 2 / Corollary 3: is every parameter of ``net`` (and the head) in
    ``U_s`` (``s = net.n_states``)?  ``{"all_in", "missing": {layer: values}, "size",
    "cor3_bound"}``."""
    s = net.n_states
    U = u_set(s) if U is None else U
    missing = {}
    zero_in = bool(np.isin(0.0, U))
    for name, (nz, size) in _nonzeros(net, head).items():
        bad = nz[~np.isin(nz, U)]  # the zeros are in U_s (Cor. 3's {0}): checked once, not per entry
        if not zero_in and nz.size < size:
            bad = np.append(bad, 0.0)
        if bad.size:
            missing[name] = np.unique(bad)
    return {"all_in": not missing, "missing": missing, "size": int(U.size), "cor3_bound": cor3_bound(s)}


def log10_odds(n_params: int, size: int) -> float:
    """``log10 |U|^{−P}``: the chance that ``P`` i.i.d. uniform draws from ``U`` all hit
    given values (Theorem 1's proof, B: "each parameter has ``c'_1 s`` potential values")."""
    return -n_params * math.log10(size)
