"""The worked example of Welper §5: a Turing machine that computes the weights of a tiny
primary network from labelled data.

Data: ``n`` samples ``x_i in {-1, 1}^M`` with labels ``y_i in {-1, 1}``.  The machine
writes ``theta_j = sign(sum_i y_i x_ij)`` (``+1`` on a tie), the weights of the linear
classifier ``f_theta(x) = theta^T x`` (a one-step Hebbian / perceptron-style rule).

Tape: the input is ``y_1 x_11 .. x_1M  y_2 x_21 .. x_2M ..`` over ``+``/``-``
(:func:`dataset_text`).  The machine makes one left-to-right pass per feature ``j``,
counting in its state the samples with ``y_i = x_ij``; the first pass writes an end
marker ``P`` after the input, every pass writes ``theta_j`` (``+``/``-``) after the
marker and walks back to cell 0; finally the input is erased.  The answer is ``theta`` at
cells ``n (M + 1) + 1 .. n (M + 1) + M``.  Four symbols, so the §4.1 lowering uses blocks
of ``w = 2`` cells.
"""

from __future__ import annotations

import numpy as np


def dataset_text(x: np.ndarray, y: np.ndarray) -> str:
    """The machine input for features ``x`` (``n x M``, entries ±1) and labels ``y`` (±1)."""
    x = np.asarray(x)
    y = np.asarray(y).reshape(-1)
    if x.ndim != 2 or len(y) != x.shape[0] or not np.isin(x, (-1, 1)).all() or not np.isin(y, (-1, 1)).all():
        raise ValueError("sign_sum data: x must be n x M and x, y must hold -1/+1 only")
    sym = {1: "+", -1: "-"}
    return "".join(sym[int(y[i])] + "".join(sym[int(v)] for v in x[i]) for i in range(len(y)))


def theta_of(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """What the machine computes: ``sign(sum_i y_i x_ij)`` with ``+1`` on ties."""
    s = (np.asarray(y).reshape(-1, 1) * np.asarray(x)).sum(axis=0)
    return np.where(s >= 0, 1.0, -1.0)


def output_cells(n: int, M: int) -> list[int]:
    """Source cells holding ``theta_1 .. theta_M`` when the machine halts."""
    return [n * (M + 1) + 1 + j for j in range(M)]


def step_bound(n: int, M: int) -> int:
    """Source steps that suffice: per pass at most ``L + M + 1`` right and ``L + M + 2``
    back (``L = n (M + 1)``), then ``L + 1`` to erase."""
    L = n * (M + 1)
    return M * (2 * (L + M) + 4) + L + 2


def cell_bound(n: int, M: int) -> tuple[int, int]:
    """The source cells the head and the written cells stay within: the blank at ``-1``
    (where every walk back turns) to the cell after the last weight (where a pass finds
    the blank and writes), ``L + M``."""
    return -1, n * (M + 1) + M


def sign_sum_machine(n: int, M: int) -> str:
    """The machine (tm DSL text) for ``n`` samples of ``M`` features."""
    if n < 1 or M < 1:
        raise ValueError("sign_sum needs n >= 1 samples and M >= 1 features")
    lines: list[str] = []

    def rule(q, reads, write, move, nxt, note=""):
        lines.append(f"  {q} {' '.join(reads)} -> {write} {move} {nxt}" + (f"   # {note}" if note else ""))

    data = ("+", "-")
    for j in range(1, M + 1):
        # p{j}_o{o}_c{c}[_y{s}]: pass j, offset o in the sample block, c agreements so far,
        # the sample's label s (kept from offset 0 to offset j)
        back = f"back{j}"
        for c in range(n + 1):
            q0 = f"p{j}_o0_c{c}"
            for s_ in data:
                rule(q0, [s_], "*", "R", f"p{j}_o1_c{c}_y{'p' if s_ == '+' else 'm'}",
                     "read the label" if c == 0 else "")
            theta = "+" if 2 * c >= n else "-"
            if j == 1:
                rule(q0, ["_"], "P", "R", f"w{j}_{'p' if theta == '+' else 'm'}", "end of the input: mark it")
            else:
                rule(q0, ["P"], "*", "R", f"w{j}_{'p' if theta == '+' else 'm'}", "end of the input")
            for o in range(1, M + 1):
                for yl in ("p", "m"):
                    q = f"p{j}_o{o}_c{c}_y{yl}"
                    if o < j:
                        rule(q, list(data), "*", "R", f"p{j}_o{o + 1}_c{c}_y{yl}")
                    elif o == j:
                        for s_ in data:
                            c2 = c + ((s_ == "+") == (yl == "p"))
                            rule(q, [s_], "*", "R", f"p{j}_o{o + 1}_c{c2}" if o < M else f"p{j}_o0_c{c2}")
                if o > j:
                    q = f"p{j}_o{o}_c{c}"
                    rule(q, list(data), "*", "R", f"p{j}_o{o + 1}_c{c}" if o < M else f"p{j}_o0_c{c}")
        for t in ("p", "m"):
            rule(f"w{j}_{t}", list(data), "*", "R", f"w{j}_{t}", "skip earlier weights")
            rule(f"w{j}_{t}", ["_"], "+" if t == "p" else "-", "L", back, f"write theta_{j}")
        rule(back, ["+", "-", "P"], "*", "L", back, "walk back to cell 0")
        rule(back, ["_"], "_", "R", f"p{j + 1}_o0_c0" if j < M else "erase")
    rule("erase", list(data), "_", "R", "erase", "erase the input")
    rule("erase", ["P"], "*", "S", "done", "theta is left after the marker")
    head = [
        f"# sign_sum_{n}x{M}: the worked example of Welper §5 (tm2nn.backends.gd_trace.sign_sum).",
        "#",
        f"# It reads {n} samples, each its label y_i then its {M} features x_i1..x_i{M},",
        "# over + and -.",
        "# It writes an end marker P, then theta_j = sign(sum_i y_i x_ij) (+ on a tie) at cells",
        f"# {n * (M + 1) + 1}..{n * (M + 1) + M}, the input erased: the weights of the linear classifier",
        "# f_theta(x) = theta^T x that `tm2nn learn --backend gd-trace` trains by gradient descent.",
        "# Generated by sign_sum_machine(n, M); a test keeps this file equal to it.",
        f"# gd-trace: samples={n} features={M} theta={','.join(map(str, output_cells(n, M)))} "
        f"steps={step_bound(n, M)} cells={','.join(map(str, cell_bound(n, M)))}",
        "#",
        f"# input: {'+' * (n * (M + 1))}",
        f"# output: P{'+' * M}",
        "# outcome: halt",
        "",
        f"machine sign_sum_{n}x{M} {{",
        "  alphabet: + - P _",
        "  blank: _",
        "  start: p1_o0_c0",
        "  halt: done",
        "",
    ]
    return "\n".join(head + lines + ["}", ""])
