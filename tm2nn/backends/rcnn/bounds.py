"""Sizes of the filter network against the paper's numbers (Goel et al., Algorithm 1,
Lemma 5, Lemma 6, Corollary 3): what ``tm2nn info`` prints for the RCNN filter.

**Ours** (:func:`filter_size`), for a machine with ``s`` states (in B.1.2 form) and every
value of the analysed domain (:mod:`.reachable`):

* bumps: centre ``4s + 9``, above ``4s + 8``, below ``4s + 6``, left ``4s + 4``, right
  ``4s + 5`` — ``20s + 32`` in all;
* widths of ``V1…V5``: ``6`` (the five cells, and the centre again for the ramps),
  ``80s + 130`` (four ReLUs per bump, one per ramp), ``20s + 34`` (bumps and two ramps),
  ``8s + 18`` (units), ``1``; so ``d_rc = 80s + 130``;
* distinct weight values at most ``24s + 72`` (``4`` breakpoints for each of the ``4s + 10``
  cell values, ``8s + 18`` output values, and 14 small constants), nonzero parameters
  ``O(s)``; Definition 5's dense count is ``3·d_rc² + 14·d_rc + 1 = O(s²)``.

**The paper's** (:func:`paper_bounds`): Algorithm 1 takes ``d_rc = 100s`` and
``d_head = 100``; Definition 5's shapes at that width have ``3·d_rc² + 14·d_rc + 1``
filter parameters (``≈ 3·10⁴s²``, not the ``10⁴s²`` of B's proof of Theorem 1) and
``3·d_head + 1`` in the head; Lemma 5, applied as B.4 says ("with X = Y being
all rational numbers with precision O(log s) in base 3"), has ``|X| = |X_i|^9`` patches for
``|X_i| = |V_s| + 1`` values per coordinate (``V_s`` the ``3^{D-1}`` codes, ``+1`` for ``p``),
and widths ``d1 = 10·9·|X|``, ``d2 = 6·9·|X|``; Lemma 6 bounds the distinct values per
matrix and Corollary 3 by ``24|X_i| + 5`` in all (B.4 quotes ``24·16·s + 5``).  We also give
Lemma 5 and Corollary 3 evaluated on *our* domain (``|X|`` = reachable patches, ``|X_i|`` =
reachable cell values), and check every parameter against our ``U_s``
(:mod:`.u_set`, Lemma 6 / Corollary 3 built from ``s`` alone).
"""

from __future__ import annotations

import math

import numpy as np

from tm2nn.backends.rcnn.encoding import state_digits
from tm2nn.backends.rcnn.filter_net import FilterNet, build_filter
from tm2nn.backends.rcnn.filter_spec import machine_table
from tm2nn.backends.rcnn.head import build_head
from tm2nn.backends.rcnn.u_set import membership
from tm2nn.ir.machine import GridMachine, Rule


def width_formula(s: int) -> dict:
    """The exact widths of :func:`~.filter_net.build_filter` for ``s`` states."""
    return {"V1": 6, "V2": 80 * s + 130, "V3": 20 * s + 34, "V4": 8 * s + 18, "V5": 1,
            "d_rc": 80 * s + 130, "bumps": 20 * s + 32, "cell_values": 4 * s + 10,
            "distinct_values_max": 24 * s + 72}


def def5_filter_params(d_rc: int) -> int:
    """Goel et al., Definition 5 (biases as footnote 6): ``Θ_rc``'s parameters at width
    ``d_rc`` — ``V1`` d_rc×9, ``V2…V4`` d_rc×d_rc, ``V5`` 1×d_rc, four ``d_rc`` biases and
    one: ``3·d_rc² + 14·d_rc + 1``."""
    return 9 * d_rc + 3 * d_rc * d_rc + d_rc + 4 * d_rc + 1


def def5_head_params(d_head: int) -> int:
    """Goel et al., Definition 5: ``Θ_head``'s parameters, ``U2`` d_head×1, ``U1``
    1×d_head and their biases: ``3·d_head + 1``."""
    return 3 * d_head + 1


def filter_size(net: FilterNet) -> dict:
    """Measured sizes of ``net``: widths, ``d_rc``, parameters (Definition 5's dense
    shapes, and nonzero), distinct weight values (all layers, biases included; per
    layer too), and the float margins."""
    Ws, bs = net.sparse, net.biases
    d = net.d_rc
    dense = def5_filter_params(d)
    per_layer = []
    allv = []
    for W, b in zip(Ws, bs):  # the stored nonzeros (d_rc runs to 10^4-10^5 rows)
        v = np.concatenate([W.vals, b[b != 0]])
        per_layer.append(int(np.unique(v).size))
        allv.append(v)
    nonzero = sum(int(v.size) for v in allv)
    return {
        "states": net.n_states,
        "digits": net.n_digits,
        "widths": list(net.widths),
        "d_rc": d,
        "units": net.widths[3],
        "params_dense": dense,
        "params_nonzero": nonzero,
        "distinct_values": int(np.unique(np.concatenate(allv)).size),
        "distinct_values_per_layer": per_layer,
        "spacing": net.spacing,
        "bump_grid": net.g,
        "input_tolerance": net.tolerance,
    }


def paper_bounds(s: int, reachable_patches: int | None = None,
                 reachable_values: int | None = None) -> dict:
    """The paper's numbers for ``s`` states, with our digit count ``D = 4 + S``
    (module docstring).  Huge counts are given as ``log10``."""
    D = 4 + state_digits(s)
    xi = 3 ** (D - 1) + 1
    log_x = 9 * math.log10(xi)
    out = {
        "alg1_d_rc": 100 * s,
        "alg1_d_head": 100,
        "alg1_params_filter": def5_filter_params(100 * s),
        "alg1_params_head": def5_head_params(100),
        "lemma5_log10_X": log_x,
        "lemma5_log10_d1": math.log10(10 * 9) + log_x,
        "lemma5_log10_d2": math.log10(6 * 9) + log_x,
        "lemma6_U": {"W1": 4 * xi + 2, "W1'": 12 * xi, "W1+": 4, "W2'": 4 * 2 * xi, "W2+": 1},
        "cor3_U": 24 * xi + 5,
        "b4_quoted_U": 24 * 16 * s + 5,
        "X_i": xi,
    }
    if reachable_patches is not None:
        out["lemma5_on_domain_d1"] = 10 * 9 * reachable_patches
        out["lemma5_on_domain_d2"] = 6 * 9 * reachable_patches
    if reachable_values is not None:
        out["cor3_U_on_domain"] = 24 * reachable_values + 5
    return out


def size_report(net: FilterNet, reachable_patches: int | None = None) -> dict:
    """``tm2nn info`` for the filter: our sizes next to the paper's bounds, and the head."""
    cells = 4 * net.n_states + 10
    head = build_head()
    u = membership(net, head)
    return {
        "ours": filter_size(net),
        "formula": width_formula(net.n_states),
        "paper": paper_bounds(net.n_states, reachable_patches, cells),
        "head": {"d_head": head.d_head, "paper_d_head": 100, "relus_b3": 6},
        "u_set": {"all_in": u["all_in"], "size": u["size"], "cor3_bound": u["cor3_bound"],
                  "missing": sorted(u["missing"])},
    }


def sample_machine(s: int) -> GridMachine:
    """A grid machine over ``_ - +`` with ``s ≥ 2`` states and a rule for every live
    (state, symbol) pair: the first step a no-op (B.1.2), then states that write, move in
    all four directions and pass on; the last state halts.  For size tables by ``s``."""
    if s < 2:
        raise ValueError("sample_machine needs s >= 2")
    states = tuple(f"q{i}" for i in range(s))
    rules = [Rule("q0", a, a, "S", states[1 % s]) for a in "_-+"]
    moves = "RDLUS"
    for i in range(1, s - 1):
        for j, a in enumerate("_-+"):
            rules.append(Rule(states[i], a, "-+"[(i + j) % 2], moves[(i + j) % 5],
                              states[(i + 1 + j) % s] if (i + j) % 3 else states[i + 1]))
    return GridMachine(f"sample{s}", ("_", "-", "+"), "_", states, "q0",
                       {states[-1]: "accept"}, tuple(rules))


def size_table(states=(2, 4, 8, 16)) -> list[dict]:
    """:func:`size_report` for :func:`sample_machine` of each ``s``."""
    return [size_report(build_filter(machine_table(sample_machine(s)))) for s in states]


def _sci(log10: float) -> str:
    return f"~10^{log10:.1f}"


def bounds_rows(rep: dict) -> list[tuple[str, str, str]]:
    """``tm2nn info``'s rows ``(quantity, this network, paper)`` from :func:`size_report`:
    Definition 5's widths and parameters against Algorithm 1, Lemma 5's widths (on all of
    𝒳 as B.4 applies it, and on our analysed domain), and the distinct weight values
    against Lemma 6 and Corollary 3 (``|U| ≤ 24|𝒳_i| + 5``)."""
    o, p, h = rep["ours"], rep["paper"], rep["head"]
    s = o["states"]
    xi_ours = 4 * s + 10
    w = o["widths"]
    lemma6 = ", ".join(f"{k} ≤ {v:,}" for k, v in p["lemma6_U"].items())
    rows = [
        ("states s (B.1.2 form), digits D (B.1.1)", f"{s}, {o['digits']}", ""),
        ("values per patch coordinate |𝒳_i|", f"{xi_ours:,} reachable",
         f"{p['X_i']:,} (all 3^(D-1) codes and p, B.4)"),
        ("d_rc (Def. 5 width)", f"{o['d_rc']:,}", f"{p['alg1_d_rc']:,} (Alg. 1: 100s)"),
        ("widths V1..V5", " / ".join(f"{x:,}" for x in w),
         f"Lemma 5 on 𝒳: d1 {_sci(p['lemma5_log10_d1'])}, d2 {_sci(p['lemma5_log10_d2'])}"
         + (f"; on our domain: d1 {p['lemma5_on_domain_d1']:,}, d2 {p['lemma5_on_domain_d2']:,}"
            if "lemma5_on_domain_d1" in p else "")),
        ("parameters, Def. 5 dense shapes", f"{o['params_dense']:,}",
         f"{p['alg1_params_filter']:,} (Def. 5 at Alg. 1's d_rc = 100s: 3d²+14d+1; "
         f"+ {p['alg1_params_head']} in f_head at d_head = 100)"),
        ("parameters, nonzero", f"{o['params_nonzero']:,}", ""),
        ("distinct weight values, all layers", f"{o['distinct_values']:,}",
         f"Cor. 3: ≤ 24|𝒳_i|+5 = {p['cor3_U']:,} (B.4 quotes 24·16s+5 = {p['b4_quoted_U']:,});"
         f" on our domain {p['cor3_U_on_domain']:,}"),
        ("every weight and bias in U_s (Lemma 6, Cor. 3)",
         ("all in U_s: yes" if rep["u_set"]["all_in"] else
          f"all in U_s: NO ({', '.join(rep['u_set']['missing'])})") + f", |U_s| = {rep['u_set']['size']:,}",
         f"bound 24|𝒳_i|+5 = {rep['u_set']['cor3_bound']:,}"),
        ("distinct values per layer V1..V5", " / ".join(str(x) for x in o["distinct_values_per_layer"]),
         f"Lemma 6: {lemma6}"),
        ("f_head width d_head (B.2)", f"{h['d_head']}", f"{h['paper_d_head']} (Alg. 1)"),
        ("input tolerance (1.5 g, exact bumps)", f"{o['input_tolerance']:.3g}", ""),
    ]
    return rows
