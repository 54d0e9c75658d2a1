"""Lower any Circuit to the gate basis of Wei, Chen & Ma (§3, Lemma B.1 / Prop. B.2).

Their layers are built from AND and OR gates with exactly two inputs, NOT, and ID
(identity) gates; Prop. B.2 gives one ReLU for each: ``AND(x1, x2) = φ(x1 + x2 - 1)``,
``OR(x1, x2) = 1 - φ(1 - x1 - x2)``, ``NOT(x) = 1 - x``.  :func:`to_basis` returns an
equivalent circuit that uses only

* ``AND`` and ``OR`` with exactly 2 inputs,
* ``NOT`` and ``BUF`` (= ID),
* ``CONST0`` and ``CONST1``.  Constants are kept as they are: they read nothing, and
  the ReLU backend implements them with a bias alone (a zero weight row and bias 0 or 1),
  so they need no rewrite.

Rewrites (``k`` = fan-in; "depth" is the depth the rewrite adds on top of its
deepest input, "size" the gates it costs):

==========================  ===================================================  =============  ===================
original gate               lowered to                                           depth          size
==========================  ===================================================  =============  ===================
``AND``/``OR``, k = 1       ``BUF``                                              1              1
``AND``/``OR``, k >= 2      balanced binary tree of 2-input gates                ⌈log2 k⌉       k - 1
``NAND``/``NOR``, k = 1     ``NOT``                                              1              1
``NAND``/``NOR``, k >= 2    ``NOT`` of the balanced AND/OR tree                  ⌈log2 k⌉ + 1   k
``XOR``, k = 1              ``BUF``                                              1              1
``XNOR``, k = 1             ``NOT``                                              1              1
``XOR(a, b)``               ``OR(AND(a, ¬b), AND(¬a, b))``                       <= 3           3 (+ shared NOTs)
``XNOR(a, b)``              ``OR(AND(a, b), AND(¬a, ¬b))`` (the dual form)       <= 3           3 (+ shared NOTs)
``XOR``/``XNOR``, k >= 2    balanced tree of 2-input XORs (XNOR at the root)      <= 3⌈log2 k⌉   3(k - 1) (+ NOTs)
``NOT``, ``BUF``, consts    unchanged                                            1              1
==========================  ===================================================  =============  ===================

XNOR uses the dual form rather than ``NOT(XOR(a, b))``: it has the same three gates
and the same depth as XOR, where ``NOT(XOR)`` would cost a fourth gate and one more
layer.

**Shared negations.**  The ``¬x`` that XOR/XNOR need is one ``NOT`` gate per signal
for the whole circuit, made the first time it is needed.  An existing ``NOT x`` gate
of the source circuit is reused as ``¬x`` (and ``x`` as the negation of that gate),
and the ``NOT`` at the top of a lowered NAND/NOR serves as the negation of its tree.
So the NOT gates the pass adds number at most one per signal, and ``¬x`` is never
more than one layer deeper than ``x`` (its "<= 3" above; it is 2 when both
negations are already there).

**Bounds.**  Per gate, lowered depth <= deepest lowered input + the depth column; so
the lowered depth of any output is at most the sum of the depth column along the
worst path of the source circuit, and at most ``3⌈log2 k_max⌉ · depth`` overall.
Size is at most the sum of the size column plus one NOT per signal.

**Names.**  Inputs, outputs and their order are unchanged.  The gate that drives a
source signal keeps that signal's name (the root of its tree, the NOT of a NAND, ...).
New internal gates are named ``<gate>%<k>`` (tree nodes and XOR halves, after the
source gate they come from) and ``<signal>%<k>`` (the shared NOT of a signal); ``k``
counts up from 1 and skips any name already in use, so nothing collides.

The pass is linear in the size of the circuit (one visit per gate, O(k) work per
k-input gate, dictionary look-ups only).
"""

from __future__ import annotations

from tm2nn.ir.circuit import Circuit, Gate

BASIS = ("AND", "OR", "NOT", "BUF", "CONST0", "CONST1")


def is_basis(c: Circuit) -> bool:
    """True if ``c`` uses only the basis, with AND/OR of fan-in exactly 2."""
    return all(
        g.op in BASIS and (g.op not in ("AND", "OR") or len(g.inputs) == 2) for g in c.gates
    )


def ceil_log2(k: int) -> int:
    return (k - 1).bit_length() if k > 1 else 0


def depth_cost(op: str, k: int) -> int:
    """The most depth one source gate of type ``op`` with ``k`` inputs adds (module table)."""
    if op in ("NOT", "BUF", "CONST0", "CONST1") or k <= 1:
        return 1
    if op in ("AND", "OR"):
        return ceil_log2(k)
    if op in ("NAND", "NOR"):
        return ceil_log2(k) + 1
    return 3 * ceil_log2(k)  # XOR, XNOR


def to_basis(c: Circuit) -> Circuit:
    """An equivalent circuit over AND/OR (2 inputs), NOT, BUF, CONST0, CONST1.

    See the module docstring for every rewrite and its cost.  The result has the same
    name, inputs and outputs (in the same order) as ``c``.
    """
    # New names are <base>%<k>.  When no signal's name has a "%", no new name can clash
    # with a signal or with another new name, and the search for a free one is skipped.
    clash = "%" in "".join(c.inputs) or "%" in "".join([g.name for g in c.gates])
    taken: set[str] = set(c.inputs) | {g.name for g in c.gates} if clash else set()
    counter: dict[str, int] = {}

    def fresh(base: str) -> str:
        k = counter.get(base, 0) + 1
        name = f"{base}%{k}"
        if clash:
            while name in taken:
                k += 1
                name = f"{base}%{k}"
            taken.add(name)
        counter[base] = k
        return name

    out: list[Gate] = []
    # neg[x] = a signal computing NOT x.  Source NOT gates are the negations of their inputs.
    neg: dict[str, str] = {}
    # The source NOT gates the loop below has not reached: one can be the negation an XOR
    # reads before the loop reaches it.  The topological order Circuit gives the result
    # (depth-first, :func:`tm2nn.ir.circuit._topo_sort`) then places it just before that
    # reader and skips it where it is; ``early`` and ``skipped`` record that order, which
    # is handed over with the gates (the result is not validated or sorted again).
    pending: dict[str, Gate] = {}
    early: list[tuple[int, Gate]] = []  # (index in out, gate placed just before out[index])
    skipped: list[int] = []  # the index in out of a gate placed early
    for g in c.gates:
        if g.op == "NOT":
            neg.setdefault(g.inputs[0], g.name)
            neg.setdefault(g.name, g.inputs[0])
            pending[g.name] = g

    def negation(x: str, loc) -> str:
        n = neg.get(x)
        if n is None:
            n = fresh(x)
            out.append(Gate(n, "NOT", (x,), loc))
            neg[x] = n
            neg[n] = x
        return n

    def reads(*xs: str) -> None:
        """The next gate made reads ``xs``: place a source NOT among them not reached yet."""
        for x in xs:
            if x in pending:
                early.append((len(out), pending.pop(x)))

    def xor2(a: str, b: str, name: str, base: str, loc, xnor: bool = False) -> str:
        na, nb = negation(a, loc), negation(b, loc)
        u, v = fresh(base), fresh(base)
        if xnor:  # OR(AND(a, b), AND(¬a, ¬b))
            out.append(Gate(u, "AND", (a, b), loc))
            reads(na, nb)
            out.append(Gate(v, "AND", (na, nb), loc))
        else:  # OR(AND(a, ¬b), AND(¬a, b))
            reads(nb)
            out.append(Gate(u, "AND", (a, nb), loc))
            reads(na)
            out.append(Gate(v, "AND", (na, b), loc))
        out.append(Gate(name, "OR", (u, v), loc))
        return name

    def tree(op: str, xs: tuple[str, ...], root: str, base: str, loc, xnor_root: bool = False) -> str:
        """Balanced binary tree of 2-input ``op`` (AND, OR or XOR) over ``xs`` (len >= 2)."""

        def pair(a: str, b: str, name: str, last: bool) -> str:
            if op == "XOR":
                return xor2(a, b, name, base, loc, xnor=last and xnor_root)
            out.append(Gate(name, op, (a, b), loc))
            return name

        level = list(xs)
        while len(level) > 2:
            nxt = [pair(level[j], level[j + 1], fresh(base), False) for j in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        return pair(level[0], level[1], root, True)

    for g in c.topo:
        op, xs, name, loc = g.op, g.inputs, g.name, g.loc
        k = len(xs)
        if op == "NOT":
            if pending.pop(name, None) is None:  # placed early already
                skipped.append(len(out))
            out.append(g)
        elif op in ("BUF", "CONST0", "CONST1"):
            out.append(g)
        elif k == 1:
            if op in ("AND", "OR", "XOR"):
                out.append(Gate(name, "BUF", xs, loc))
            else:  # NAND, NOR, XNOR of one input
                out.append(Gate(name, "NOT", xs, loc))
                neg.setdefault(xs[0], name)
                neg.setdefault(name, xs[0])
        elif op in ("AND", "OR"):
            if k == 2:  # a basis gate already (the tree of two inputs is the gate itself)
                out.append(g)
            else:
                tree(op, xs, name, name, loc)
        elif op in ("NAND", "NOR"):
            if k == 2:  # tree() of two inputs, without the calls
                t = fresh(name)
                out.append(Gate(t, "AND" if op == "NAND" else "OR", xs, loc))
            else:
                t = tree("AND" if op == "NAND" else "OR", xs, fresh(name), name, loc)
            out.append(Gate(name, "NOT", (t,), loc))
            neg[t] = name
            neg.setdefault(name, t)
        elif op in ("XOR", "XNOR"):
            if k == 2:  # tree() of two inputs, without the calls
                xor2(xs[0], xs[1], name, name, loc, xnor=op == "XNOR")
            else:
                tree("XOR", xs, name, name, loc, xnor_root=op == "XNOR")
        else:  # pragma: no cover - the IR validates op names
            raise ValueError(f"unknown gate type {op!r}")
    # Valid by construction (each gate reads signals of c, gates made before it, or a
    # source NOT gate; every new name is fresh): not validated again.
    return Circuit.trusted(c.name, c.inputs, c.outputs, out, c.loc, dict(c.port_locs),
                           topo=_reorder(out, early, skipped))


def _reorder(out: list[Gate], early: list[tuple[int, Gate]], skipped: list[int]) -> list[Gate]:
    """``out`` with each ``early`` gate placed just before its index and the ``skipped``
    indices left out (both lists in increasing index order)."""
    if not early:
        return out
    events = sorted([(i, g) for i, g in early] + [(j, None) for j in skipped], key=lambda e: e[0])
    topo: list[Gate] = []
    start = 0
    for i, g in events:
        topo += out[start:i]
        if g is None:  # skip out[i]
            start = i + 1
        else:
            topo.append(g)
            start = i
    topo += out[start:]
    return topo
