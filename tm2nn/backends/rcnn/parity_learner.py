"""A parity learner in Goel et al.'s B.1.2 form (XOR input): Gaussian elimination over
GF(2), as ``.tm`` source text (``examples/learner_parity.tm`` is ``parity_learner()``).

Goel, Kakade, Kalai & Zhang, App. B.1.2, fix the form a learner must have for the RCNN
of Theorem 1: a 2D tape holding the "XOR input", a no-op first step, and the "halting
position" (the answer in the top-left input cell, the rest of the input region blank).
Abbe & Sandon's Example 1 learns a parity the same way inside a net emulating a
learner: memorize samples, then express a new input as a linear combination of the
memorized ones (Gaussian elimination over GF(2)) and return the same combination of
their labels.  This module writes that learner as one grid machine, the same states for
every number of examples ``m`` and features ``d`` (Theorem 1 needs the state count ``s``
constant): it finds every edge of the grid by reading, never by counting.

**The grid** (docs/rcnn.md "Learner mode"; :func:`~.learner_form.xor_rows`,
:func:`~.learner_form.layout_text`): rows ``0..m``; column 0 is ``+`` on row 0 and blank
below, column 1 is blank (the frame); input columns ``2..d+2``; one blank working column
``d+3``.  Input row ``a < m`` holds ``y⁽ᵃ⁾x⁽ᵃ⁾_b x_b`` in column ``2+b`` and ``y⁽ᵃ⁾`` in
column ``d+2``; row ``m`` (Algorithm 1's dummy example) holds ``x`` then ``+``.  The head
starts on ``(m, d+2)``.  Signs are bits: ``+`` is 0, ``-`` is 1, so a cell of row ``a`` is
``X(a)_b ⊕ Y(a) ⊕ Q_b`` (``X``, ``Y``, ``Q`` the bits of the example, label and query).

**The algorithm** (every sweep covers whole rows, so the step count depends on ``(m, d)``
only, :func:`parity_learner_steps`):

1. *Decode* (one pass, bottom to top).  The query row ``Q`` bubbles up: for each pair of
   rows (``Q`` below, example row above) a zig-zag left to right swaps them, XORing ``Q``
   into the example on its way down; the way back right to left XORs the example's label
   ``Y(a)`` (met last, at the label column) into its features.  Afterwards row 0 is
   ``[q | 0]`` and rows ``1..m`` are ``[X(a) | Y(a)]``.  The bottom row is marked ``-`` in
   the frame's outer column first (``(m, 0)``): nothing else marks it.
2. *Eliminate* (one pass per feature column ``b``, bottom to top).  The candidate row
   bubbles up: it starts as the bottom row; at each pair (candidate below, row ``R``
   above), if the candidate has a 1 in column ``b`` it is the pivot and moves up,
   ``R ⊕ R_b·pivot`` moving down; otherwise ``R`` becomes the candidate.  At the top pair
   the query row takes ``Q ⊕ Q_b·pivot`` and the pivot becomes a zero row.  So the pivot
   is the bottom-most example with a 1 in column ``b``, every other example and the query
   lose their 1 there, and the rows keep their order.  Column ``b`` is then blank on every
   row (it is 0 on every example): the next pass finds its column as the first non-blank
   cell.  If there is no pivot but ``Q_b = 1``, the query is outside the span of the
   training inputs, and the working cell ``(0, d+3)`` (which also marks the query row)
   says so with ``-``.
3. *Answer*.  When no feature column is left, the label column is blanked bottom to top;
   the answer is ``+`` if the query is outside the span, else the query row's label,
   ``⊕_{a∈T} Y(a)`` for the examples ``T`` the elimination combined into ``x``: for data
   labelled by a parity ``y = ∏_{j∈S} x_j`` that is the parity of ``x``.  It is written on
   the top-left input cell ``(0, 2)``, where the head halts (``plus`` = accept,
   ``minus`` = reject).

With labels that no parity fits, the answer is still exactly
:func:`parity_learner_spec`'s: the label combination of the pivots the elimination
picked (bottom-most first), which then depends on the order of the examples.  With
``m = 0`` it answers ``+``.  One working column suffices.
"""

from __future__ import annotations

import numpy as np

#: bits: ``+`` is 0, ``-`` is 1
_SYM = ("+", "-")
_BIT = {"+": 0, "-": 1}


def parity_learner_spec(X, Y, x) -> int:
    """What :func:`parity_learner` answers, in plain Python (±1 in, ±1 out).

    Bits: -1 is 1.  For each feature column ``b`` in turn: the pivot is the example of
    largest index (among those not yet used as pivots) with a 1 in column ``b``; it is
    XORed (features and label) into every other example with a 1 there and into the
    query ``[x | 0]`` if the query has a 1 there, then dropped.  If there is no pivot and
    the query has a 1 in column ``b``, the query is outside the span of the training
    inputs: the answer is +1.  Otherwise the answer is the sign of the query's label bit
    at the end: for data labelled by a parity, the parity of ``x``."""
    x = np.asarray(x, dtype=np.int64)
    X = np.asarray(X, dtype=np.int64).reshape(len(Y), len(x))
    m, d = X.shape
    V = np.concatenate([X, np.asarray(Y, dtype=np.int64).reshape(m, 1)], 1) < 0
    q = np.append(x < 0, False)
    used = np.zeros(m, dtype=bool)
    for b in range(d):
        rows = [a for a in range(m) if V[a, b] and not used[a]]
        if not rows:
            if q[b]:
                return 1
            continue
        p = rows[-1]
        for a in rows[:-1]:
            V[a] ^= V[p]
        if q[b]:
            q ^= V[p]
        used[p] = True
    return -1 if q[d] else 1


def gf2_rank(X) -> int:
    """The rank over GF(2) of ±1 rows ``X`` (``-1`` as bit 1): ``d`` when the training
    inputs span GF(2)^d, so that the learner predicts a parity on every point."""
    M = (np.asarray(X) < 0).astype(np.uint8).reshape(len(X), -1).copy()
    r = 0
    for c in range(M.shape[1]):
        piv = [i for i in range(r, len(M)) if M[i, c]]
        if not piv:
            continue
        M[[r, piv[0]]] = M[[piv[0], r]]
        for i in range(len(M)):
            if i != r and M[i, c]:
                M[i] ^= M[r]
        r += 1
    return r


def parity_learner_steps(m: int, d: int) -> int:
    """The exact number of steps :func:`parity_learner` takes on every grid of ``m``
    examples and ``d`` features, whatever the data and the query:
    ``2md² + 16md + 13m + d² + 6d + 18`` (``3d + 12`` when ``m = 0``).

    Where they go: the decoding pass, ``m(4d + 9) + 2d + 11`` or so (each of the ``m``
    pairs zig-zags over ``d + 1`` columns, 3 steps a column, and comes back); pass ``b``
    of the elimination, about ``m(4k + 5) + m + d + b`` with ``k = d + 1 - b`` columns
    left (a zig-zag, the way back along the candidate's row, and the trip to the bottom
    row); the answer, ``3m + d`` or so."""
    if m == 0:
        return 3 * d + 12
    return 2 * m * d * d + 16 * m * d + 13 * m + d * d + 6 * d + 18


def _flip(s: str, bit: int) -> str:
    return _SYM[_BIT[s] ^ bit]


def parity_learner() -> str:
    """Goel et al., B.1.2 form with XOR input: the parity learner (Gaussian elimination
    over GF(2), Abbe & Sandon's Example 1), for any number of examples and features.
    See the module docstring for the algorithm and :func:`parity_learner_spec` for what
    it answers."""
    R: list[str] = []
    last = [""]

    def rule(state, read, write, move, nxt, note=""):
        """One rule; a note repeated on the next rule is left off."""
        show = note and note != last[0]
        last[0] = note
        R.append(f"  {state} {read} -> {write} {move} {nxt}" + (f"   # {note}" if show else ""))

    def section(text):
        R.append(f"\n  # {text}")

    section("the no-op first step (B.1.2) on the dummy label '+' at (m, d+2)")
    for s in "+-":
        rule("start", s, s, "S", "mark")
    section("go left along row m; mark the bottom row with '-' in the frame's outer column")
    for s in "+-":
        rule("mark", s, s, "L", "mark")
    rule("mark", "_", "_", "L", "mark0")
    rule("mark0", "_", "-", "R", "dec", "(m, 0): the bottom mark")
    rule("mark0", "+", "+", "R", "none", "m = 0: the top row is the query, answer +")

    section("1. decode: the query row Q bubbles up; pair = Q (lower) under example row a (upper).\n"
            "  # zig-zag left to right: read Q_c below, put it above, put cell xor Q_c below")
    rule("dec", "_", "_", "R", "dlo_p", "column 1 -> the first input column")
    for w in "pn":
        for s in "+-":
            rule(f"dlo_{w}", s, s, "U", f"dup_{_name(s)}")
        rule(f"dlo_{w}", "_", "_", "L", f"dlab_{w}", "the working column: the last cell written is Y(a)")
    for q in "+-":
        for s in "+-":
            rule(f"dup_{_name(q)}", s, q, "D", f"ddn_{_name(_flip(s, _BIT[q]))}")
    for w in "+-":
        for s in "+-":
            rule(f"ddn_{_name(w)}", s, w, "R", f"dlo_{_name(w)}")
    R.append("  # way back right to left: XOR the label Y(a) into the features")
    for y in "+-":
        for s in "+-":
            rule(f"dlab_{_name(y)}", s, s, "L", f"dret_{_name(y)}")
        for s in "+-":
            rule(f"dret_{_name(y)}", s, _flip(s, _BIT[y]), "L", f"dret_{_name(y)}")
        rule(f"dret_{_name(y)}", "_", "_", "U", "dtop")
    rule("dtop", "_", "_", "L", "dtop0")
    rule("dtop0", "_", "_", "R", "dec", "Q is not on the top row yet: the next pair")
    rule("dtop0", "+", "+", "R", "qmark", "Q is on row 0: decoded")
    rule("qmark", "_", "_", "R", "qmark1")
    for s in "+-":
        rule("qmark1", s, s, "R", "qmark1")
    rule("qmark1", "_", "+", "L", "home", "(0, d+3): '+' marks the query row (in the span so far)")

    section("2. eliminate, one pass per feature column: back to (0, 0) along row 0, down to the\n"
            "  # bottom mark, right to the pass's column (the first non-blank cell of row m)")
    for s in "+-":
        rule("home", s, s, "L", "home")
    rule("home", "_", "_", "L", "home_b")
    rule("home_b", "_", "_", "L", "home_b")
    rule("home_b", "+", "+", "D", "down1", "(0, 0)")
    rule("down1", "-", "-", "R", "seek_t", "m = 1: the bottom pair is the top pair")
    rule("down1", "_", "_", "D", "down")
    rule("down", "_", "_", "D", "down")
    rule("down", "-", "-", "R", "seek_n")
    for x in "nt":
        rule(f"seek_{x}", "_", "_", "R", f"seek_{x}")
        for s in "+-":
            rule(f"seek_{x}", s, s, "R", f"peek_{x}")
        for s in "+-":
            rule(f"peek_{x}", s, s, "L", f"piv_{x}", "a feature column is left: a pass")
        rule(f"peek_{x}", "_", "_", "L", "fin", "only the label column is left: answer")

    section("a pair: candidate C (lower row) under R (upper row); the pass's column first.\n"
            "  # modes: N no pivot (nothing changes but column b); P0/P1 C is the pivot, R_b = 0/1;\n"
            "  # at the top pair (R = the query row): TN1 no pivot and Q_b = 1 (x is outside the span),\n"
            "  # TP0/TP1 C is the pivot, Q_b = 0/1")
    for x in "nt":
        for c in "+-":
            rule(f"piv_{x}", c, c, "U", f"pup_{x}_{_name(c)}")
    for r in "+-":
        rule("pup_n_p", r, r, "D", "blank_N", "C is no pivot: R is the next candidate")
    for r in "+-":
        rule("pup_n_n", r, "-", "D", f"blank_P{_BIT[r]}", "C is the pivot: it moves up")
    for c in "+-":
        for r in "+-":
            mode = f"TP{_BIT[r]}" if c == "-" else ("TN1" if r == "-" else "N")
            rule(f"pup_t_{_name(c)}", r, "_", "D", f"blank_{mode}", "the top pair: the query's cell b is blanked")
    modes = ["N", "P0", "P1", "TN1", "TP0", "TP1"]
    for md in modes:
        for s in "+-":
            rule(f"blank_{md}", s, "_", "R", f"z_{md}", "column b is 0 on every row left behind")
    R.append("  # the other columns: read C below, write above, write below")
    for md in modes:
        carry = md[0] == "P" or md[:2] == "TP"
        for c in "+-":
            rule(f"z_{md}", c, c, "U", f"zu_{md}_{_name(c)}" if carry else f"zu_{md}")
        if md == "TN1":
            rule(f"z_{md}", "_", "_", "U", "oos", "the working column: x is outside the span")
        else:
            rule(f"z_{md}", "_", "_", "U", "next1", "the working column: the pair is done")
        for c in ("+-" if carry else "+"):
            for r in "+-":
                if md == "N" or md.startswith("TN"):
                    rule(f"zu_{md}", r, r, "D", f"zd_{md}")
                elif md.startswith("P"):
                    f = int(md[1])
                    low = _flip(r, f * _BIT[c])
                    rule(f"zu_{md}_{_name(c)}", r, c, "D", f"zd_{md}_{_name(low)}")
                else:
                    f = int(md[2])
                    rule(f"zu_{md}_{_name(c)}", r, _flip(r, f * _BIT[c]), "D", f"zd_{md}")
        if md.startswith("P"):
            for low in "+-":
                for s in "+-":
                    rule(f"zd_{md}_{_name(low)}", s, low, "R", f"z_{md}")
        else:
            for s in "+-":
                rule(f"zd_{md}", s, "+" if md.startswith("TP") else s, "R", f"z_{md}")
    R.append("  # the next pair: up two cells of the working column to see whether it is the top pair,\n"
             "  # then left along the candidate's row to the pass's column")
    rule("next1", "_", "_", "U", "next2")
    for s in "+-":
        rule("next1", s, s, "L", "home", "the query row's mark: that was the top pair, the pass is done")
    rule("next2", "_", "_", "D", "next3_n")
    for s in "+-":
        rule("next2", s, s, "D", "next3_t", "the query row's mark: the next pair is the top pair")
    for x in "nt":
        rule(f"next3_{x}", "_", "_", "L", f"back_{x}")
        for s in "+-":
            rule(f"back_{x}", s, s, "L", f"back_{x}")
        rule(f"back_{x}", "_", "_", "R", f"piv_{x}")
    R.append("  # the pass is done: record 'x is outside the span' on the query row's mark")
    for s in "+-":
        rule("oos", s, "-", "L", "home")

    section("3. answer: blank the label column bottom to top; the query row's mark says whether\n"
            "  # x is in the span; then write the answer on (0, 2)")
    for s in "+-":
        rule("fin", s, "_", "U", "fin_up")
        rule("fin_up", s, s, "R", "fin_chk")
    rule("fin_chk", "_", "_", "L", "fin", "an example's row")
    rule("fin_chk", "+", "+", "L", "ans", "the query row, x in the span: the answer is its label")
    rule("fin_chk", "-", "-", "L", "ans_out", "the query row, x outside the span: the answer is +")
    for s in "+-":
        rule("ans", s, "_", "L", f"go_{_name(s)}")
        rule("ans_out", s, "_", "L", "go_p")
    R.append("  # m = 0: blank the query row")
    rule("none", "_", "_", "R", "none1")
    for s in "+-":
        rule("none1", s, "_", "R", "none1")
    rule("none1", "_", "_", "L", "go_p")
    for a in "+-":
        A = _name(a)
        rule(f"go_{A}", "_", "_", "L", f"go_{A}")
        rule(f"go_{A}", "+", "+", "R", f"go1_{A}", "(0, 0)")
        rule(f"go1_{A}", "_", "_", "R", f"say_{A}")
        rule(f"say_{A}", "_", a, "S", "plus" if a == "+" else "minus")

    return _HEADER + ("\nmachine learner_parity {\n  tape: grid\n  alphabet: _ - +\n  blank: _\n"
                      "  start: start\n  accept: plus\n  reject: minus\n" + "\n".join(R) + "\n}\n")


def _name(s: str) -> str:
    return {"+": "p", "-": "n"}.get(s, s)


_HEADER = """\
# learner_parity: Goel et al.'s learner form (B.1.2, XOR input) for parities: Gaussian
# elimination over GF(2) on the training examples (Abbe & Sandon, Example 1), then the
# prediction by the solution found.  One machine for every number of examples m and
# features d.  Generated by tm2nn.backends.rcnn.parity_learner.parity_learner().
#
# Layout (what the RCNN's memory layer holds after Algorithm 1, Lemma 4, with the frame
# of docs/rcnn.md "The frame"): rows 0..m; column 0 is '+' on the top row and blank below,
# column 1 is blank (the frame); input columns 2..d+2; one blank working column d+3.
# Input row a < m holds y(a)*x(a)_b*x_b in column 2+b and y(a) in column d+2; row m (the
# dummy example (1_d, 1)) holds x, then '+'.  Signs are bits, '+' = 0 and '-' = 1.
#
# 1. Decode: the query row bubbles up to row 0, XORing itself into every example's row
#    on the way; each example's label is then XORed into its features.  Rows 1..m hold
#    the examples [x(a) | y(a)] in bits, row 0 the query [x | 0].
# 2. Eliminate, one pass per feature column b, bottom to top: the bottom-most example
#    with a 1 in column b is the pivot; it bubbles up, XORed into every example above it
#    with a 1 there and finally into the query row (if it has a 1 there), then becomes
#    a zero row.  Column b is then blank.  No pivot but a 1 in the query: x is outside the
#    span of the training inputs, recorded by '-' on (0, d+3).
# 3. Answer: '+' if x is outside the span, else the query row's label (the parity of x
#    when the examples are labelled by a parity), written on (0, 2), the rest of the
#    input region blank: plus = accept, minus = reject.
#
# Every sweep covers whole rows: the step count depends on m and d only,
#   steps = 2*m*d^2 + 16*m*d + 13*m + d^2 + 6*d + 18   (3*d + 12 if m = 0)
# (tm2nn.backends.rcnn.parity_learner.parity_learner_steps), one working column.
#
# Train its RCNN by SGD (Algorithm 1) on a CSV of examples (d signs, then the label)
# and compare with the interpreter:
#   tm2nn learn examples/learner_parity.tm --train examples/learner_parity_n4.csv --test 1000 --json
# train: learner_parity_n4.csv
"""
