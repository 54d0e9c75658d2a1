"""Unrolling: a line Machine, T steps, an N-cell tape window -> a Circuit for the configuration after T steps
(the relu-circuit backend's machines; the run-time codec is :mod:`.codec`).

The circuit is the machine's step function stacked T times.  Its semantics are the
reference interpreter's (:func:`tm2nn.interp.run_machine` with ``max_steps=T``)
exactly: both step-count conventions (``missing_rule_counts_step``), halting states,
missing rules (halt), halting is absorbing, stay moves.

Layout
------
* The window is cells ``0 .. N-1``.  The machine starts on window cell ``origin``
  (default ``min(T, N // 2)``: the head can never get more than T cells left of the
  start, so cells further left would be wasted; otherwise the middle).  The input
  string is written from the start cell rightwards, as the interpreter does.
* **Inputs** (``N·K``, cell-major): ``t0[i]:a`` = cell ``i`` holds symbol ``a`` at
  step 0, for every cell ``i`` and every alphabet symbol ``a`` in alphabet order.
  The whole initial window is an input, one-hot per cell; :meth:`UnrollLayout.encode`
  builds it from an input string.
* **Outputs**, in this order:
  ``tape[i]:a`` (``N·K``, one-hot per cell), ``head[i]`` (``N``, one-hot),
  ``state:q`` (every state in declaration order, one-hot), ``halted``,
  ``steps[b]`` (``⌈log2(T+1)⌉`` bits, LSB first) and ``overflow``.
  ``steps`` counts exactly the steps the interpreter counts, so it is
  ``min(T, interpreter steps)``.  ``overflow`` is 1 iff the head would have left the
  window within the T steps; the head outputs are then all 0, the machine freezes
  and the result is not the interpreter's (:meth:`UnrollLayout.decode` says so):
  the tape is the window's when the head left (the leaving step's write included),
  the state the one it left in, and ``steps`` counts the steps up to the leaving one.

Why the construction looks like this
------------------------------------
The circuit is meant for the strictly layered networks of Wei, Chen & Ma (Lemma B.1):
every signal is carried by an identity gate through every layer it skips, so the size
of the layered circuit is about (its depth) x (the signals alive per layer), and the
``N·K`` tape bits alone are alive in every layer.  The depth per step is therefore
what matters, and it must not grow with N: no step reads anything that is computed
by a reduction over the whole window.  Everything global (which state the machine is
in, has it halted, the step counter) is computed *from* the configurations, off the
path from one step to the next.  After :func:`~tm2nn.passes.basis.to_basis` a step
takes a small machine-dependent number of layers (bb4: about 2.3; depth and size of
the steps do not depend on N beyond the cells the head can reach).

Configuration t
---------------
* ``tape[j][a]`` for every cell (a signal per cell and symbol, one-hot per cell);
* ``hs[j, q]``: the head is on cell j in state q -- one signal per *present*
  (cell, state) pair, one-hot over all of them.  Cells -1 and N are the two *sinks*:
  a head that leaves the window stays there forever, in the state it left in.

Which pairs are present is decided statically (an over-approximation, the same for
every input): cell j must be in the head range ``[lo_t, hi_t]`` (``origin`` at t = 0,
growing by one cell per step on each side the machine has moves to, clipped to the
window), and ``(q, (j - origin - t) mod 2)`` must be in ``P_t``, the set of (state,
class) pairs the state graph allows after t steps: a move by d changes a cell's class
``(j - origin - t) mod 2`` by d - 1, so moving heads keep it and staying or frozen
heads (halting states, missing rules) flip it.  ``P_0 = {(start, 0)}``; ``P_t`` is
eventually periodic (a long transient or period is cut short by replacing the rest with
everything reachable).  Typically only half of the cells of the range carry the live
states at a given step.  A present pair that no rule can reach (only near the ends of
the range) gets the step's *known-0* signal: the AND of two head signals of the
previous configuration (the head is in one place), which is as deep as the step
itself, unlike a constant (a shallow signal meeting a deep one would be carried
through all the layers between them).  For the same reason the input symbols of a cell
entering the range are ORed with that 0 before the head can first read them.

Step t (configuration t-1 -> t), on every cell j of the range before it
------------------------------------------------------------------------
* ``fire[j, r] = AND(hs[j, q], tape[j][a])`` for each rule ``r = (q, a -> b, move, p)``
  with (j, q) present: one layer.
* ``stuck[j, q, a] = AND(hs[j, q], tape[j][a])`` for a live q without a rule for a.
* Tape, local: with ``S[a, b]`` the present states whose rule reads a and writes
  ``b != a`` and ``C[b]`` those with a rule reading b that changes it,
  ``tape'[j][b] = OR(AND(tape[j][a], OR(hs[j, q], q in S[a, b])) for a != b,
  AND(tape[j][b], NOR(hs[j, q], q in C[b])))`` (the last term is ``tape[j][b]`` itself
  when C[b] is empty; a cell with no changing rule keeps its symbols).
* Head: ``hs'[j, p] = OR(fire[j - d, r] for rules r entering p with move d,
  stuck[j, p, a], hs[j, p] if p halts)`` over the present sources: a step is one AND
  and an OR of a few terms.  A halting head keeps its place; a missing rule freezes the
  head (and, not being a rule, writes nothing); nothing fires in halting states or in
  the sinks.  So halting and leaving the window are absorbing without any global gating.

Global signals (never read by a later step)
-------------------------------------------
* ``z_t`` = configuration t-1 has stopped: in a halting state, in a sink, or stuck on a
  missing rule (morphett: stuck in configuration t-2, so that the one no-rule step
  counts).  ``z_t = OR(z_{t-1}, e_t)``, ``e_t`` the OR of the step's new events (fires
  entering a halting state or a sink, stuck terms): one layer per step for the chain,
  ``log2`` of the range for each ``e_t`` tree, which only the counter reads.
* Step t is counted iff ``NOT z_t``; the counted steps are a prefix, so the count is
  t exactly when ``last_t = AND(NOT z_t, z_{t+1})`` (``last_T = NOT z_T``), and
  ``steps[b] = OR(last_t : bit b of t set)``, built as one 2-input OR chain per bit
  as the ``last_t`` come in (no signal is carried for more than a step or two).
* ``head[i] = OR_q hs[i, q]``, ``state:q = OR_j hs[j, q]`` (sinks included),
  ``overflow = OR(sink signals)``, ``halted = OR(halting-state signals of
  configuration T, stuck terms of configuration T-1)`` (the interpreter only finds a
  missing rule by trying one more step: reaching a missing-rule configuration exactly at
  step T is not halted); all from configuration T only.

Gate count (exact; :func:`estimate_unroll_size`)
------------------------------------------------
The gates of a step are a few per-cell *templates*: the fire/stuck/tape gates of a cell
depend only on its present states, the head gates only on its class and on which of its
neighbours were in the range, and the cells away from the two ends of the range all
look alike.  A step costs ``Σ (cells of a kind) x (template size)`` plus the sinks,
the known-0 signal and ``z_t``; the estimator evaluates that for any t in O(1) and sums
it over ``1 .. T`` in closed form per residue class (``P_t`` is periodic) between the
few steps where the pattern changes (the range reaching a window edge, the sinks
filling, the end of the transient), so a request is refused (``max_gates``) before
anything is allocated.  In the bulk a step costs, on each cell of the range whose
class carries live states (often every other cell), the fires of their rules, their
stuck terms, a few tape gates and about one OR per present state.

Internal gates are named ``@<t>.<what><cell>...`` (step t), ``@e<t>``, ``@z<t>``,
``@g<t>``, ``@last<t>``, ``@c<t>.<bit>`` (the counter) and ``@zero``; port names never
start with ``@``, so nothing collides.
"""

from __future__ import annotations

from math import gcd

from tm2nn.backends.relu_circuit.codec import UnrollLayout
from tm2nn.errors import Tm2nnError
from tm2nn.ir.circuit import Circuit, Gate
from tm2nn.ir.machine import GridMachine, Machine
from tm2nn.limits import check_memory
from tm2nn.options import OptionError

DEFAULT_MAX_GATES = 5_000_000


def default_origin(steps: int, tape: int) -> int:
    """The start cell used when none is given: ``min(steps, tape // 2)``."""
    return min(steps, tape // 2)


# ---------------------------------------------------------------------------------------
# Static structure of a machine (shared by the builder and the estimator).
# ---------------------------------------------------------------------------------------

_MOVE = {"L": -1, "R": 1, "S": 0}
_MAX_PERIOD = 12  # longer presence periods are merged (see _Shape)
_MAX_TRANSIENT = 64


class _Shape:
    """Index tables of a machine, its presence sequence and the per-cell gate templates."""

    def __init__(self, m: Machine):
        self.m = m
        self.K, self.Q = len(m.alphabet), len(m.states)
        sidx, sym = m.state_index, m.symbol_index
        rules = list(m.rules)
        self.R = len(rules)
        self.r_state = [sidx[r.state] for r in rules]
        self.r_read = [sym[r.read] for r in rules]
        self.r_write = [sym[r.write] for r in rules]
        self.r_move = [_MOVE[r.move] for r in rules]
        self.r_next = [sidx[r.next] for r in rules]
        self.start = sidx[m.start]
        self.halting = frozenset(sidx[q] for q in m.halting)
        self.by: list[list[int]] = [[] for _ in range(self.Q)]
        self.into: list[list[int]] = [[] for _ in range(self.Q)]
        for k in range(self.R):
            self.by[self.r_state[k]].append(k)
            self.into[self.r_next[k]].append(k)
        self.missing = [
            () if q in self.halting
            else tuple(a for a in range(self.K) if a not in {self.r_read[k] for k in self.by[q]})
            for q in range(self.Q)
        ]
        self.frozen = [q in self.halting or bool(self.missing[q]) for q in range(self.Q)]
        self.has_L = -1 in self.r_move
        self.has_R = 1 in self.r_move
        self.morphett = m.missing_rule_counts_step
        # The presence sequence P_t: which (state, class) pairs the head can have after t
        # steps, where a cell's class at step t is (cell - origin - t) mod 2.  A move by d
        # maps class c to c + d - 1 (mod 2); a frozen head (halting state or missing rule)
        # stays, so its class flips.  P_t is eventually periodic: seq[t0:] repeats.  Should
        # the transient or the period be long, P_t from some t on is replaced by the
        # (larger, constant) set of everything reachable from there.
        seq = [frozenset({(self.start, 0)})]
        seen = {seq[0]: 0}
        while True:
            f = self._succ(seq[-1])
            if f in seen and len(seq) - seen[f] <= _MAX_PERIOD:
                self.t0, self.period = seen[f], len(seq) - seen[f]
                break
            if len(seq) >= _MAX_TRANSIENT + 4 * self.Q or f in seen:
                reach, todo = set(f), list(f)
                while todo:
                    for x in self._succ(frozenset([todo.pop()])):
                        if x not in reach:
                            reach.add(x)
                            todo.append(x)
                seq.append(frozenset(reach))
                self.t0, self.period = len(seq) - 1, 1
                break
            seen[f] = len(seq)
            seq.append(f)
        self.seq = seq
        self._states: dict = {}
        self._a: dict = {}
        self._b: dict = {}

    def _succ(self, P: frozenset) -> frozenset:
        nxt = set()
        for q, c in P:
            for k in self.by[q]:
                nxt.add((self.r_next[k], (c + self.r_move[k] - 1) % 2))
            if self.frozen[q]:
                nxt.add((q, (c + 1) % 2))
        return frozenset(nxt)

    def ppi(self, t: int) -> int:
        """Index into ``seq`` of P_t."""
        if t < len(self.seq):
            return t
        return self.t0 + (t - self.t0) % self.period

    def states_at(self, i: int, c: int) -> tuple[int, ...]:
        """The states present on a cell of class ``c`` when P = seq[i]."""
        key = (i, c)
        s = self._states.get(key)
        if s is None:
            s = self._states[key] = tuple(sorted(q for q, cc in self.seq[i] if cc == c))
        return s

    # -- templates ----------------------------------------------------------------------------
    def cell_a(self, qs: tuple[int, ...], final: bool):
        """Gates at one cell whose head states may be ``qs`` (before the step): rule fires,
        missing-rule ("stuck") terms and the new tape symbols.

        Returns ``(ops, stucks, halts, newtape)`` (``halts``: the fires entering a halting
        state); an op is ``(key, op, input keys, name code, port)``
        with input keys ``("h", q)`` (head here in state q) and ``("t", a)`` (symbol a here).
        ``port`` is the symbol index whose ``tape[j]:a`` output the gate drives (final step).
        """
        tpl = self._a.get((qs, final))
        if tpl is not None:
            return tpl
        K = self.K
        ops: list = []
        for q in qs:
            for r in self.by[q]:
                ops.append((("f", r), "AND", (("h", q), ("t", self.r_read[r])), f"f%d.{r}", None))
        halts = tuple(("f", r) for q in qs for r in self.by[q] if self.r_next[r] in self.halting)
        stucks = []
        for q in qs:
            for a in self.missing[q]:
                ops.append((("s", q, a), "AND", (("h", q), ("t", a)), f"s%d.{q}.{a}", None))
                stucks.append(("s", q, a))
        # S[a, b]: the states whose rule reads a and writes b != a.
        S: dict[tuple[int, int], list[int]] = {}
        for q in qs:
            for r in self.by[q]:
                a, b = self.r_read[r], self.r_write[r]
                if a != b:
                    S.setdefault((a, b), []).append(q)
        if not S:
            newtape: list = [("t", b) for b in range(K)]
        else:
            ors: dict[tuple[int, ...], tuple] = {}

            def or_key(X):
                X = tuple(X)
                if len(X) == 1:
                    return ("h", X[0])
                k = ors.get(X)
                if k is None:
                    k = ors[X] = ("o", len(ors))
                    ops.append((k, "OR", tuple(("h", q) for q in X), f"o%d.{k[1]}", None))
                return k

            G = {ab: or_key(S[ab]) for ab in sorted(S)}
            nots: dict[tuple[int, ...], tuple] = {}

            def nor_key(X):
                X = tuple(X)
                k = nots.get(X)
                if k is None:
                    k = nots[X] = ("n", len(nots))
                    code = f"n%d.{k[1]}"
                    if len(X) == 1:
                        ops.append((k, "NOT", (("h", X[0]),), code, None))
                    elif X in ors:
                        ops.append((k, "NOT", (ors[X],), code, None))
                    else:
                        ops.append((k, "NOR", tuple(("h", q) for q in X), code, None))
                return k

            newtape = []
            for b in range(K):
                terms = []
                for a in range(K):
                    if a != b and (a, b) in S:
                        k = ("a", a, b)
                        ops.append((k, "AND", (("t", a), G[a, b]), f"a%d.{a}.{b}", None))
                        terms.append(k)
                # keep b unless a rule reading b changes it (the deepest term: last, see to_basis)
                C = sorted({q for (a, _), X in S.items() if a == b for q in X})
                if C:
                    k = ("a", b, b)
                    ops.append((k, "AND", (("t", b), nor_key(C)), f"a%d.{b}.{b}", None))
                    terms.append(k)
                else:
                    terms.append(("t", b))
                if len(terms) == 1:
                    newtape.append(terms[0])
                else:
                    k = ("u", b)
                    ops.append((k, "OR", tuple(terms), f"u%d.{b}", None))
                    newtape.append(k)
        if final:  # the gate computing each new symbol drives its output; else a BUF does
            made = {op[0]: i for i, op in enumerate(ops)}
            for b, k in enumerate(newtape):
                i = made.get(k)
                if i is None:
                    ops.append((("p", b), "BUF", (k,), None, b))
                else:
                    ops[i] = ops[i][:4] + (b,)
        tpl = self._a[(qs, final)] = (tuple(ops), tuple(stucks), halts, tuple(newtape))
        return tpl

    def cell_b(self, ip: int, ic: int, c: int, flags: tuple[bool, bool, bool]):
        """The terms of the new head signals of one cell of class ``c`` (after the step).

        ``ip``/``ic`` index P before/after the step, ``flags`` say whether cells j-1, j, j+1
        were in the head range before it.  Returns ``((p, terms), ...)`` with terms
        ``("f", dj, r)`` (rule r fired at cell j+dj), ``("s", a)`` (stuck on a here) and
        ``("hold",)`` (a halting head here stays), the number of OR gates they need and
        whether some state has no term at all (near the ends of the range only; its signal
        is then the step's known-0 signal).
        """
        key = (ip, ic, c, flags)
        tpl = self._b.get(key)
        if tpl is not None:
            return tpl
        prev = self.seq[ip]
        out = []
        for p in self.states_at(ic, c):
            terms: list = []
            for r in self.into[p]:
                d = self.r_move[r]
                if flags[1 - d] and (self.r_state[r], (c - d + 1) % 2) in prev:
                    terms.append(("f", -d, r))
            if flags[1] and (p, (c + 1) % 2) in prev:
                terms += [("s", a) for a in self.missing[p]]
                if p in self.halting:
                    terms.append(("hold",))
            out.append((p, tuple(terms)))
        tpl = self._b[key] = (
            tuple(out), sum(len(ts) >= 2 for _, ts in out), any(not ts for _, ts in out)
        )
        return tpl

    def cost_a(self, qs: tuple[int, ...], final: bool) -> int:
        return len(self.cell_a(qs, final)[0])


def _lcm(a: int, b: int) -> int:
    return a * b // gcd(a, b)


def _count_class(lo: int, hi: int, base: int, c: int) -> int:
    """How many cells j in [lo, hi] have (j - base) % 2 == c."""
    n = hi - lo + 1
    if n <= 0:
        return 0
    return (n + ((lo - base) % 2 == c)) // 2


def _bits_upto(n: int, b: int) -> int:
    """How many t in 0..n have bit b set."""
    if n < 0:
        return 0
    p = 1 << (b + 1)
    return (n + 1) // p * (p >> 1) + max(0, (n + 1) % p - (p >> 1))


class _Plan:
    """A machine with a step bound, a window and a start cell: ranges, presence, sinks, costs.

    A window cell j holds a head signal for state q after t steps iff j is in the head
    range ``rng(t)`` and ``(q, (j - o - t) % 2)`` is in P_t.  The two sinks (cells -1 and
    N, off the window) hold the heads that left it: ``sink(side, t)`` are their states.
    """

    def __init__(self, sh: _Shape, T: int, N: int, o: int):
        self.sh, self.T, self.N, self.o = sh, T, N, o
        self.Pi = _lcm(sh.period, 2)  # step costs are periodic-affine with this period
        self.sinks = {-1: self._sink_changes(-1), 1: self._sink_changes(1)}
        self.k = self.first_stop()

    def rng(self, t: int) -> tuple[int, int]:
        """Cells the head can be on after t steps."""
        sh, o = self.sh, self.o
        lo = max(0, o - t) if sh.has_L else o
        hi = min(self.N - 1, o + t) if sh.has_R else o
        return lo, hi

    def cls(self, j: int, t: int) -> int:
        return (j - self.o - t) % 2

    def edge(self, side: int) -> int:
        return 0 if side < 0 else self.N - 1

    def _sink_changes(self, side: int) -> list:
        """``[(t, states)]``: when the states in a sink change (they only grow)."""
        sh = self.sh
        rules = [r for r in range(sh.R) if sh.r_move[r] == side]
        if not rules:
            return []
        e = self.edge(side)
        first = (self.o - e if side < 0 else e - self.o) + 1  # first t with e in rng(t - 1)
        last = min(self.T, max(first - 1, sh.t0) + self.Pi + 1)
        out: list = []
        cur: frozenset = frozenset()
        for t in range(first, last + 1):
            prev, c = sh.seq[sh.ppi(t - 1)], self.cls(e, t - 1)
            new = cur | {sh.r_next[r] for r in rules if (sh.r_state[r], c) in prev}
            if new != cur:
                out.append((t, new))
                cur = new
        return out

    def sink(self, side: int, t: int) -> frozenset:
        s: frozenset = frozenset()
        for tc, states in self.sinks[side]:
            if tc > t:
                break
            s = states
        return s

    def sink_terms(self, side: int, t: int):
        """``((p, terms), ...)`` for the sink's head signals after step t: ``("f", e, r)``
        (rule r fired on the edge cell e) and ``("hold",)``."""
        sh = self.sh
        now, before = self.sink(side, t), self.sink(side, t - 1)
        if not now:
            return ()
        e = self.edge(side)
        lo, hi = self.rng(t - 1)
        prev, c = sh.seq[sh.ppi(t - 1)], self.cls(e, t - 1)
        out = []
        for p in sorted(now):
            terms: list = []
            if lo <= e <= hi:
                terms += [("f", e, r) for r in sh.into[p]
                          if sh.r_move[r] == side and (sh.r_state[r], c) in prev]
            if p in before:
                terms.append(("hold",))
            out.append((p, tuple(terms)))
        return tuple(out)

    # -- gate counts ----------------------------------------------------------------------------
    def step_cost(self, t: int) -> int:
        """Gates built by step t (configuration t-1 -> t), as :func:`unroll` builds them."""
        sh, final = self.sh, t == self.T
        lo0, hi0 = self.rng(t - 1)
        lo1, hi1 = self.rng(t)
        ip, ic = sh.ppi(t - 1), sh.ppi(t)
        n = 0
        for c in (0, 1):
            k = _count_class(lo0, hi0, self.o + t - 1, c)
            if k:
                n += k * sh.cost_a(sh.states_at(ip, c), final)
        if final:
            n += sh.K * (self.N - (hi0 - lo0 + 1))
        special = [0, 0]
        zero = False
        for j in sorted({lo0 - 1, lo0, hi0, hi0 + 1}):
            if lo1 <= j <= hi1:
                c = self.cls(j, t)
                special[c] += 1
                _, k, z = sh.cell_b(ip, ic, c, (lo0 <= j - 1 <= hi0, lo0 <= j <= hi0, lo0 <= j + 1 <= hi0))
                n += k
                zero = zero or z
        for c in (0, 1):
            k = _count_class(lo1, hi1, self.o + t, c) - special[c]
            if k > 0:
                _, g, z = sh.cell_b(ip, ic, c, (True, True, True))
                n += k * g
                zero = zero or z
        for side in (-1, 1):
            n += sum(len(ts) >= 2 for _, ts in self.sink_terms(side, t))
        if not final:  # new cells' deepened input symbols
            new = len({j for j in (lo1, hi1) if not lo0 <= j <= hi0})
            n += new * sh.K
            zero = zero or new > 0
        n += zero and t >= 2 and self.pairs(t - 1) >= 2  # the step's known-0 signal
        n += self.has_events(t) + (t > self.k)  # e_t, z_t
        return n

    def pairs(self, s: int) -> int:
        """How many (cell, state) head signals configuration s has."""
        sh = self.sh
        lo, hi = self.rng(s)
        i = sh.ppi(s)
        n = len(self.sink(-1, s)) + len(self.sink(1, s))
        for c in (0, 1):
            n += _count_class(lo, hi, self.o + s, c) * len(sh.states_at(i, c))
        return n

    def _any(self, s: int, pred) -> bool:
        """Does some cell of configuration s have a head state satisfying ``pred``?"""
        sh = self.sh
        lo, hi = self.rng(s)
        i = sh.ppi(s)
        return any(_count_class(lo, hi, self.o + s, c) and any(pred(q) for q in sh.states_at(i, c))
                   for c in (0, 1))

    def has_events(self, t: int) -> bool:
        """Does z_t have inputs besides z_{t-1}: a rule entering a halting state or a sink at
        step t-1 (the start state for t = 1), or a stuck term of configuration t-1
        (morphett: t-2)?"""
        sh = self.sh
        if t == 1 and sh.start in sh.halting:
            return True
        if t >= 2:
            if self._any(t - 2, lambda q: any(sh.r_next[r] in sh.halting for r in sh.by[q])):
                return True
            for side in (-1, 1):
                if any(x[0] == "f" for _, ts in self.sink_terms(side, t - 1) for x in ts):
                    return True
        s = t - 2 if sh.morphett else t - 1
        return s >= 0 and self._any(s, lambda q: bool(sh.missing[q]))

    def first_stop(self) -> int:
        """The first step t whose z_t is a signal (T + 1 if none is)."""
        sh, T = self.sh, self.T
        span = len(sh.seq) + self.Pi + 3
        starts = [1] + [tc for side in (-1, 1) for tc, _ in self.sinks[side][:1]]
        cands = sorted({t for a in starts for t in range(a, min(T, a + span) + 1)})
        return next((t for t in cands if self.has_events(t)), T + 1)

    def tail_cost(self) -> int:
        """Constants, the step counter and the global outputs (head, state, halted, overflow)."""
        T, B = self.T, self.T.bit_length()
        n = 2 + self.N + self.sh.Q + 2  # @0 and @zero; head[i], state:q, halted, overflow
        k = self.k
        if k > T:
            return n + B  # every steps[b] is a constant
        n += 2 * (T - k + 1) - 1  # NOT z_t (k..T), AND (k..T-1)
        a = max(1, k - 1)  # last_t is a signal for t in a..T
        for b in range(B):
            m = _bits_upto(T, b) - _bits_upto(a - 1, b)
            n += max(1, m - 1)
        return n

    def breaks(self) -> set[int]:
        sh, o, N = self.sh, self.o, self.N
        pts = set(range(0, len(sh.seq) + 8)) | {self.k, self.k + 1}
        for c in (o, N - 1 - o):
            pts.update(range(c - 3, c + 5))
        for side in (-1, 1):
            for tc, _ in self.sinks[side]:
                pts.update(range(tc - 2, tc + 3))
        return pts

    def slow_estimate(self) -> int:
        """The gate count summed step by step (for tests)."""
        if self.T == 0:
            return self.N * self.sh.K + self.N + self.sh.Q + 2
        return sum(self.step_cost(t) for t in range(1, self.T + 1)) + self.tail_cost()

    def estimate(self) -> int:
        T = self.T
        if T == 0:
            return self.N * self.sh.K + self.N + self.sh.Q + 2
        body = _sum_periodic(self.step_cost, 1, T - 1, self.breaks(), self.Pi)
        return body + self.step_cost(T) + self.tail_cost()


def _sum_periodic(f, a: int, b: int, breaks, period: int) -> int:
    """sum(f(t) for t in a..b), f affine along every residue class mod ``period`` between
    consecutive points of ``breaks``."""
    if b < a:
        return 0
    pts = sorted({a, b + 1} | {x for x in breaks if a < x <= b})
    total = 0
    for s, e in zip(pts, pts[1:]):
        if e - s <= 3 * period:
            total += sum(f(t) for t in range(s, e))
            continue
        for r in range(period):
            first = s + r
            n = (e - 1 - first) // period + 1
            f0, f1 = f(first), f(first + period)
            total += n * f0 + (f1 - f0) * n * (n - 1) // 2
    return total


def estimate_unroll_size(m: Machine, steps: int, tape: int, origin: int | None = None) -> int:
    """The number of gates :func:`unroll` will build, computed without building anything.

    Exact for the circuit this module builds; constant time in ``steps`` (a few gate
    templates per step-range segment and residue class).
    """
    _check_args(m, steps, tape, origin)
    o = default_origin(steps, tape) if origin is None else origin
    return _Plan(_Shape(m), steps, tape, o).estimate()


def _check_args(m: Machine, steps: int, tape: int, origin: int | None) -> None:
    if isinstance(m, GridMachine):
        raise Tm2nnError(
            f"machine {m.name!r} has a grid tape: unrolling to a circuit supports line machines only"
        )
    if not isinstance(steps, int) or steps < 0:
        raise OptionError(f"{{steps}} must be >= 0, got {steps}", "steps")
    if not isinstance(tape, int) or tape < 1:
        raise OptionError(f"{{tape}} must be >= 1, got {tape}", "tape")
    if origin is not None and not (0 <= origin < tape):
        raise OptionError(f"{{origin}} must be a cell of the window (0 .. {tape - 1}), got {origin}", "origin")


# ---------------------------------------------------------------------------------------
# The builder.
# ---------------------------------------------------------------------------------------

class _Builder:
    """Gate list plus folding helpers; a signal is a name or a Python bool (a folded constant)."""

    def __init__(self):
        self.gates: list[Gate] = []
        self.nots: dict[str, str] = {}

    def gate(self, name: str, op: str, ins) -> str:
        self.gates.append(Gate(name, op, tuple(ins)))
        return name

    def alias(self, x, name: str, port: bool):
        """``x`` itself, or (for an output port) a BUF/CONST gate named ``name``."""
        if not port:
            return x
        if x is True or x is False:
            return self.gate(name, "CONST1" if x else "CONST0", ())
        return self.gate(name, "BUF", (x,))

    def OR(self, xs, name: str, port: bool = False):
        ys = []
        for x in xs:
            if x is True:
                return self.alias(True, name, port)
            if x is not False:
                ys.append(x)
        if not ys:
            return self.alias(False, name, port)
        if len(ys) == 1:
            return self.alias(ys[0], name, port)
        return self.gate(name, "OR", ys)

    def AND(self, xs, name: str, port: bool = False):
        ys = []
        for x in xs:
            if x is False:
                return self.alias(False, name, port)
            if x is not True:
                ys.append(x)
        if not ys:
            return self.alias(True, name, port)
        if len(ys) == 1:
            return self.alias(ys[0], name, port)
        return self.gate(name, "AND", ys)

    def NOT(self, x, name: str | None = None):
        if x is True or x is False:
            return not x
        n = self.nots.get(x)
        if n is None:
            n = self.gate(name or f"~{x}", "NOT", (x,))
            self.nots[x] = n
        return n


#: Peak bytes per gate of compiling an unrolled circuit (measured; see :func:`unroll`).
UNROLL_BYTES_PER_GATE = 4096


def unroll(
    m: Machine,
    steps: int,
    tape: int,
    origin: int | None = None,
    max_gates: int | None = DEFAULT_MAX_GATES,
) -> tuple[Circuit, UnrollLayout]:
    """The circuit computing ``m``'s configuration after ``steps`` steps on a ``tape``-cell
    window whose start cell is ``origin`` (see the module docstring), and its layout.

    Raises :class:`Tm2nnError` for grid machines, ``steps < 0``, ``tape < 1``, an origin
    outside the window, and -- before building anything -- when the circuit would
    have more than ``max_gates`` gates (None: no limit).
    """
    _check_args(m, steps, tape, origin)
    T, N = steps, tape
    o = default_origin(T, N) if origin is None else origin
    sh = _Shape(m)
    plan = _Plan(sh, T, N, o)
    need = plan.estimate()
    if max_gates is not None and need > max_gates:
        raise OptionError(
            f"unrolling {T} steps over {N} cells needs about {need:,} gates, over the limit "
            f"of {max_gates:,}; raise {{max_gates}} or lower {{steps}} or {{tape}}", "max_gates", "steps", "tape"
        )
    # The memory check stays when max_gates is raised or None.  Compiling an unrolled
    # circuit (layering, net IR, emitters) grew by about 3.7 KB per gate for bb3 at
    # T = 20..60 (peak RSS 76 MB at 3,978 gates, 188 MB at 33,671), so 4 KB per gate.
    check_memory(need * UNROLL_BYTES_PER_GATE, f"unrolling {T:,} steps over {N:,} cells (about {need:,} gates)",
                 ("steps", "tape"))
    layout = UnrollLayout(
        name=m.name, alphabet=m.alphabet, blank=m.blank, states=m.states, halting=m.halting,
        tape=N, origin=o, steps=T, counts_missing=m.missing_rule_counts_step,
    )
    b = _Builder()
    A = m.alphabet
    cur_tape: list[list[str]] = [[f"t0[{i}]:{a}" for a in A] for i in range(N)]

    if T == 0:
        for i in range(N):
            for k, a in enumerate(A):
                b.alias(cur_tape[i][k], f"tape[{i}]:{a}", True)
        for i in range(N):
            b.alias(i == o, f"head[{i}]", True)
        for q in m.states:
            b.alias(q == m.start, f"state:{q}", True)
        b.alias(m.start in m.halting, "halted", True)
        b.alias(False, "overflow", True)
        return _finish(m, layout, b), layout

    gates = b.gates
    halting = sh.halting
    # hs[j] = {state: signal}: the head is on cell j in that state (j = -1, N: the sinks)
    hs: dict[int, dict[int, str]] = {o: {sh.start: b.gate(f"@0.h{o}.{sh.start}", "CONST1", ())}}
    zero = b.gate("@zero", "CONST0", ())
    fresh: list[str] = []  # the last configuration's head OR gates away from the range ends
    events = list(hs[o].values()) if sh.start in halting else []  # entered a halting state
    stuck_prev: list[str] = []
    z: object = False
    B = T.bit_length()
    count: list = [False] * B  # count[bit]: bit of the step count so far

    def known_zero(nil: list, t: int, hs: dict, fresh: list) -> str:
        """Step t's known-0 signal, as deep as configuration t-1: the AND of two of its head
        signals (the head is in one place); ``@zero`` if it has fewer than two."""
        if not nil:
            pool = fresh[:2]
            if len(pool) < 2:
                pool += [x for hj in hs.values() for x in hj.values() if x not in pool]
            nil.append(b.gate(f"@{t}.zero", "AND", pool[:2]) if t >= 2 and len(pool) >= 2 else zero)
        return nil[0]

    def add_last(t: int, last) -> None:
        for bit in range(B):
            if t >> bit & 1:
                port = t == _last_with_bit(T, bit)
                count[bit] = b.OR([count[bit], last], f"steps[{bit}]" if port else f"@c{t}.{bit}", port)

    for t in range(1, T + 1):
        final = t == T
        P = f"@{t}."
        lo0, hi0 = plan.rng(t - 1)
        lo1, hi1 = plan.rng(t)
        ip, ic = sh.ppi(t - 1), sh.ppi(t)
        base0 = o + t - 1
        new_tape = list(cur_tape)
        stuck_now: list[str] = []
        stops: list[str] = []  # fires entering a halting state or a sink
        # fires, stuck terms and the tape, on every cell the head may be on
        for j in range(lo0, hi0 + 1):
            ops, stucks, hfires, newtape = sh.cell_a(sh.states_at(ip, (j - base0) % 2), final)
            if not ops:
                continue
            loc: dict = {("h", q): x for q, x in hs.get(j, {}).items()}
            row = cur_tape[j]
            for a in range(len(A)):
                loc[("t", a)] = row[a]
            for key, op, ins, code, port in ops:
                name = f"tape[{j}]:{A[port]}" if port is not None else P + code % j
                gates.append(Gate(name, op, tuple([loc[x] for x in ins])))
                loc[key] = name
            if stucks:
                stuck_now += [loc[x] for x in stucks]
            if hfires:
                stops += [loc[x] for x in hfires]
            new_tape[j] = [loc[x] for x in newtape]
        if final:
            for i in range(N):
                if not (lo0 <= i <= hi0):
                    for k, a in enumerate(A):
                        b.alias(cur_tape[i][k], f"tape[{i}]:{a}", True)
        # the head after the step
        new_hs: dict[int, dict[int, str]] = {}
        new_fresh: list[str] = []
        nil: list[str] = []  # this step's known-0 signal, made when first needed
        base1 = o + t
        for j in range(lo1, hi1 + 1):
            flags = (lo0 <= j - 1 <= hi0, lo0 <= j <= hi0, lo0 <= j + 1 <= hi0)
            inner = all(flags)
            d: dict[int, str] = {}
            for p, terms in sh.cell_b(ip, ic, (j - base1) % 2, flags)[0]:
                names = []
                for x in terms:
                    if x[0] == "f":
                        names.append(f"{P}f{j + x[1]}.{x[2]}")
                    elif x[0] == "s":
                        names.append(f"{P}s{j}.{p}.{x[1]}")
                    else:
                        names.append(hs[j][p])
                if len(names) >= 2:
                    d[p] = b.gate(f"{P}h{j}.{p}", "OR", names)
                    if inner:
                        new_fresh.append(d[p])
                elif names:
                    d[p] = names[0]
                else:  # no rule brings the head here (an end of the range)
                    d[p] = known_zero(nil, t, hs, fresh)
            if d:
                new_hs[j] = d
        if not final:  # cells entering the range: their input symbols, as deep as the step
            for j in sorted({lo1, hi1}):
                if not lo0 <= j <= hi0:
                    z0 = known_zero(nil, t, hs, fresh)
                    new_tape[j] = [b.gate(f"{P}d{j}.{k}", "OR", (x, z0)) for k, x in enumerate(new_tape[j])]
        for side, cell in ((-1, -1), (1, N)):
            d = {}
            for p, terms in plan.sink_terms(side, t):
                names = []
                for x in terms:
                    if x[0] == "f":
                        names.append(f"{P}f{x[1]}.{x[2]}")
                        stops.append(names[-1])
                    else:
                        names.append(hs[cell][p])
                d[p] = b.gate(f"{P}h{cell}.{p}", "OR", names) if len(names) >= 2 else names[0]
            if d:
                new_hs[cell] = d
        # z_t: configuration t-1 has stopped (in a halting state, off the window, or stuck
        # on a missing rule; morphett: stuck since t-2).  Step t is counted iff not z_t.
        new = events + (stuck_prev if sh.morphett else stuck_now)
        e = b.gate(f"@e{t}", "OR", new) if new else False
        z_last = z
        if z is not False:  # z_t = OR(z_{t-1}, e_t): one layer per step, off the critical path
            z = b.gate(f"@z{t}", "OR", (z, e)) if e is not False else b.gate(f"@z{t}", "BUF", (z,))
        else:
            z = e
        if t >= 2:  # the count is t-1 iff step t-1 is counted and step t is not
            add_last(t - 1, b.AND((b.NOT(z_last, f"@g{t - 1}"), z), f"@last{t - 1}"))
        events, stuck_prev, fresh = stops, stuck_now, new_fresh
        cur_tape, hs = new_tape, new_hs
    add_last(T, b.NOT(z, f"@g{T}"))

    # global outputs, from configuration T
    for i in range(N):
        b.OR(list(hs.get(i, {}).values()), f"head[{i}]", True)
    for q, name in enumerate(m.states):
        b.OR([hj[q] for _, hj in sorted(hs.items()) if q in hj], f"state:{name}", True)
    b.OR([x for _, hj in sorted(hs.items()) for q, x in hj.items() if q in halting] + stuck_prev,
         "halted", True)
    b.OR([x for j in (-1, N) for x in hs.get(j, {}).values()], "overflow", True)
    return _finish(m, layout, b), layout


def _last_with_bit(T: int, bit: int) -> int:
    """The largest t <= T with bit ``bit`` set (T >= 2**bit)."""
    if T >> bit & 1:
        return T
    return ((T >> (bit + 1)) << (bit + 1)) - 1


def _finish(m: Machine, layout: UnrollLayout, b: _Builder) -> Circuit:
    return Circuit(
        f"{m.name}_unrolled_{layout.steps}x{layout.tape}",
        layout.input_names,
        layout.output_names,
        tuple(b.gates),
    )
