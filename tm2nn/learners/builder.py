"""A Python builder for circuits and learners (Abbe & Sandon §4.1, Lemma 3 / Theorem 4).

The emulation net has Θ(gates) vertices (Remark 10), so the builder keeps circuits
small: it folds constants, hashes structurally (the same gate on the same inputs is
made once), cancels double negations, and keeps XOR at fan-in 2 (a wide parity is a
balanced tree).  AND/OR keep any fan-in.

Signals are :class:`Bit` objects; ``&`` ``|`` ``^`` ``~`` make gates.  A :class:`Vec`
is a tuple of bits (index 0 = least significant for the arithmetic helpers).

Example -- a learning algorithm (Theorem 4's ``A``: it remembers the last label it
learned and predicts it, and is done after 3 learned samples), made into the Lemma 3
learner the net emulates by :func:`tm2nn.learners.theorem4.theorem4`::

    bb = BaseLearnerBuilder("remember")
    bb.input("x", 2)
    y = bb.label()
    lab = bb.memory("lab")
    bb.update(lab, y)                   # A(b, x, y): lab := y
    learner = theorem4(bb.build(predict=lab, samples=3))

:class:`LearnerBuilder` writes a Lemma 3 learner (h, g) directly, for learners whose
memory update does not follow Theorem 4's A'/A'' (tests, other schemes).

Only the cone of each output is kept, so the circuits share nothing but the ports.
:meth:`CircuitBuilder.inline` re-creates a whole circuit in a builder, and
:meth:`CircuitBuilder.cofactor` simplifies bits under facts (constants for signals).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from tm2nn.ir.circuit import Circuit, Gate
from tm2nn.ir.learner import BaseLearner, Learner

_COMMUTATIVE = ("AND", "OR", "XOR")


class Bit:
    """One signal of a :class:`CircuitBuilder`: a port, a gate, or a constant."""

    __slots__ = ("cb", "name", "const")

    def __init__(self, cb: "CircuitBuilder", name: str | None, const: int | None = None):
        self.cb, self.name, self.const = cb, name, const

    def __and__(self, o: "Bit") -> "Bit":
        return self.cb.and_(self, o)

    def __or__(self, o: "Bit") -> "Bit":
        return self.cb.or_(self, o)

    def __xor__(self, o: "Bit") -> "Bit":
        return self.cb.xor(self, o)

    def __invert__(self) -> "Bit":
        return self.cb.not_(self)

    def __repr__(self) -> str:
        return f"Bit({self.const})" if self.const is not None else f"Bit({self.name!r})"


class Vec(tuple):
    """A tuple of :class:`Bit`; element 0 is the least significant bit for arithmetic."""

    def __getitem__(self, i):
        r = tuple.__getitem__(self, i)
        return Vec(r) if isinstance(i, slice) else r

    def __xor__(self, o: "Vec") -> "Vec":
        _same_width(self, o)
        return Vec(a ^ b for a, b in zip(self, o))

    def __and__(self, o) -> "Vec":
        if isinstance(o, Bit):
            return Vec(a & o for a in self)
        _same_width(self, o)
        return Vec(a & b for a, b in zip(self, o))

    def __or__(self, o: "Vec") -> "Vec":
        _same_width(self, o)
        return Vec(a | b for a, b in zip(self, o))

    def __invert__(self) -> "Vec":
        return Vec(~a for a in self)

    def __add__(self, o):  # concatenation, as for tuples
        return Vec(tuple(self) + tuple(o))


def _same_width(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"vector widths differ: {len(a)} and {len(b)}")


class CircuitBuilder:
    """Gates with constant folding and structural hashing; :meth:`circuit` extracts a
    :class:`~tm2nn.ir.Circuit` for chosen outputs."""

    def __init__(self, prefix: str = "n"):
        self.prefix = prefix
        self.zero = Bit(self, None, 0)
        self.one = Bit(self, None, 1)
        self._ports: list[str] = []
        self._names: set[str] = set()
        self._gates: dict[str, Gate] = {}
        self._hash: dict[tuple, Bit] = {}
        self._neg: dict[str, Bit] = {}  # name -> its negation, for gates and ports alike
        self._count = 0

    # ------------------------------------------------------------ signals

    def port(self, name: str) -> Bit:
        if name in self._names:
            raise ValueError(f"signal {name!r} already exists")
        self._names.add(name)
        self._ports.append(name)
        return Bit(self, name)

    def const(self, v: int | bool) -> Bit:
        return self.one if v else self.zero

    def _fresh(self) -> str:
        while True:
            self._count += 1
            name = f"{self.prefix}{self._count}"
            if name not in self._names:
                self._names.add(name)
                return name

    def _gate(self, op: str, ins: Sequence[Bit]) -> Bit:
        names = tuple(b.name for b in ins)
        key = (op, tuple(sorted(names)) if op in _COMMUTATIVE else names)
        hit = self._hash.get(key)
        if hit is not None:
            return hit
        name = self._fresh()
        self._gates[name] = Gate(name, op, names)
        bit = Bit(self, name)
        self._hash[key] = bit
        return bit

    def _own(self, bits: Iterable[Bit]) -> list[Bit]:
        out = []
        for b in bits:
            if not isinstance(b, Bit) or b.cb is not self:
                raise ValueError(f"{b!r} is not a signal of this builder")
            out.append(b)
        return out

    # ------------------------------------------------------------ gates

    def not_(self, a: Bit) -> Bit:
        (a,) = self._own([a])
        if a.const is not None:
            return self.const(1 - a.const)
        hit = self._neg.get(a.name)
        if hit is not None:
            return hit
        r = self._gate("NOT", [a])
        self._neg[a.name] = r
        self._neg[r.name] = a
        return r

    def _and_or(self, op: str, bits: Sequence[Bit]) -> Bit:
        absorbing, neutral = (0, 1) if op == "AND" else (1, 0)
        seen: dict[str, Bit] = {}
        for b in self._own(bits):
            if b.const == absorbing:
                return self.const(absorbing)
            if b.const == neutral:
                continue
            seen.setdefault(b.name, b)
        for name in seen:
            neg = self._neg.get(name)
            if neg is not None and neg.name in seen:
                return self.const(absorbing)  # x & ~x = 0, x | ~x = 1
        if not seen:
            return self.const(neutral)
        if len(seen) == 1:
            return next(iter(seen.values()))
        return self._gate(op, list(seen.values()))

    def and_(self, *bits: Bit) -> Bit:
        """AND of any number of bits (one gate; ``and_()`` is 1)."""
        return self._and_or("AND", _flat(bits))

    def or_(self, *bits: Bit) -> Bit:
        """OR of any number of bits (one gate; ``or_()`` is 0)."""
        return self._and_or("OR", _flat(bits))

    def xor(self, *bits: Bit) -> Bit:
        """Parity of any number of bits: a balanced tree of 2-input XOR gates."""
        parity = 0
        count: dict[str, Bit] = {}
        odd: dict[str, bool] = {}
        for b in self._own(_flat(bits)):
            if b.const is not None:
                parity ^= b.const
                continue
            count[b.name] = b
            odd[b.name] = not odd.get(b.name, False)
        terms = [count[k] for k, v in odd.items() if v]
        live = {t.name for t in terms}
        for t in terms:  # x ^ ~x = 1: cancel complementary pairs
            neg = self._neg.get(t.name)
            if t.name in live and neg is not None and neg.name in live:
                live.discard(t.name)
                live.discard(neg.name)
                parity ^= 1
        kept = [t for t in terms if t.name in live]
        if not kept:
            return self.const(parity)
        while len(kept) > 1:
            nxt = [self._gate("XOR", kept[i:i + 2]) for i in range(0, len(kept) - 1, 2)]
            if len(kept) % 2:
                nxt.append(kept[-1])
            kept = nxt
        return self.not_(kept[0]) if parity else kept[0]

    def mux(self, s: Bit, a: Bit, b: Bit) -> Bit:
        """``a`` if ``s`` else ``b`` (at most 3 gates, plus a ``NOT s`` shared by every mux on s)."""
        s, a, b = self._own([s, a, b])
        if s.const is not None:
            return a if s.const else b
        if a.name == b.name and a.const == b.const:
            return a
        if a.const is not None and b.const is not None:
            return s if a.const else ~s
        if a.const is not None:
            return (s | b) if a.const else (~s & b)
        if b.const is not None:
            return (~s | a) if b.const else (s & a)
        return (s & a) | (~s & b)

    # ------------------------------------------------------------ extraction

    def circuit(self, name: str, inputs: Sequence[str], outputs: Sequence[Bit]) -> Circuit:
        """The circuit over ``inputs`` (port names, in order) computing ``outputs``,
        keeping only the gates in their cone (constants become CONST0/CONST1 gates)."""
        outs = self._own(outputs)
        out_names: list[str] = []
        need: list[str] = []
        consts: dict[int, str] = {}
        gates: list[Gate] = []
        for b in outs:
            if b.const is not None:
                if b.const not in consts:
                    cname = self._fresh()
                    consts[b.const] = cname
                    gates.append(Gate(cname, f"CONST{b.const}", ()))
                out_names.append(consts[b.const])
            else:
                out_names.append(b.name)
                need.append(b.name)
        keep: set[str] = set()
        allowed = set(inputs)
        stack = list(need)
        while stack:
            s = stack.pop()
            if s in keep:
                continue
            if s not in self._gates:
                if s not in allowed:
                    raise ValueError(f"circuit {name!r}: an output depends on {s!r}, "
                                     "which is not one of its inputs")
                continue
            keep.add(s)
            stack.extend(self._gates[s].inputs)
        gates += [g for nm, g in self._gates.items() if nm in keep]  # creation order is topological
        return Circuit(name, tuple(inputs), tuple(out_names), tuple(gates))

    # ------------------------------------------------------------ whole circuits

    def inline(self, c: Circuit, ports: Mapping[str, Bit]) -> list[Bit]:
        """Re-create circuit ``c``'s gates over the bits ``ports`` (one per input of
        ``c``), folding and hashing as usual; returns ``c``'s outputs.  Inlining the
        builder's own circuits again gives back the same gates (structural hashing)."""
        sig: dict[str, Bit] = dict(zip(c.inputs, self._own(ports[p] for p in c.inputs)))
        for gt in c.topo:
            sig[gt.name] = self._make(gt.op, [sig[i] for i in gt.inputs])
        return [sig[o] for o in c.outputs]

    def _make(self, op: str, ins: list[Bit]) -> Bit:
        if op in ("AND", "NAND"):
            b = self.and_(*ins)
        elif op in ("OR", "NOR"):
            b = self.or_(*ins)
        elif op in ("XOR", "XNOR"):
            b = self.xor(*ins)
        elif op in ("NOT", "BUF"):
            b = ins[0]
        elif op in ("CONST0", "CONST1"):
            b = self.const(op == "CONST1")
        else:  # pragma: no cover - validated circuits have no other ops
            raise ValueError(f"unknown gate {op}")
        return ~b if op in ("NAND", "NOR", "XNOR", "NOT") else b

    def implied(self, s: Bit, value: int = 1) -> dict[str, int]:
        """Signals whose values ``s == value`` forces, by unit propagation: through NOT,
        an AND that is 1 (all inputs 1) and an OR that is 0 (all inputs 0).  Sound, not
        complete: every listed signal has the listed value whenever ``s == value``."""
        facts: dict[str, int] = {}
        stack = [(s, int(value))]
        while stack:
            b, v = stack.pop()
            if b.const is not None or b.name in facts:
                continue
            facts[b.name] = v
            neg = self._neg.get(b.name)
            if neg is not None:
                stack.append((neg, 1 - v))
            g = self._gates.get(b.name)
            if g is not None and ((g.op == "AND" and v == 1) or (g.op == "OR" and v == 0)):
                stack.extend((Bit(self, i), v) for i in g.inputs)
        return facts

    def cofactor(self, outs: Sequence[Bit], facts: Mapping[str, int]) -> list[Bit]:
        """``outs`` with the signals in ``facts`` replaced by their constants: the gates
        of their cones are made again (folding and hashing, so an unaffected gate is
        itself).  With ``facts = implied(s, v)``, each result equals its ``out``
        whenever ``s == v``."""
        outs = self._own(outs)
        cone: set[str] = set()
        stack = [b.name for b in outs if b.const is None]
        while stack:
            nm = stack.pop()
            if nm in cone or nm not in self._gates:
                continue
            cone.add(nm)
            stack.extend(self._gates[nm].inputs)
        new: dict[str, Bit] = {nm: self.const(v) for nm, v in facts.items()}
        for nm in [g for g in self._gates if g in cone]:  # creation order is topological
            if nm in new:
                continue
            g = self._gates[nm]
            if any(i in new for i in g.inputs):
                new[nm] = self._make(g.op, [new.get(i) or Bit(self, i) for i in g.inputs])
        return [b if b.const is not None else new.get(b.name, b) for b in outs]


def _flat(bits) -> list[Bit]:
    out: list[Bit] = []
    for b in bits:
        if isinstance(b, Bit):
            out.append(b)
        else:
            out.extend(b)
    return out


# ---------------------------------------------------------------- helpers on vectors


def mux(s: Bit, a: Bit, b: Bit) -> Bit:
    """``a`` if ``s`` else ``b``."""
    return s.cb.mux(s, a, b)


def mux_vec(s: Bit, a: Sequence[Bit], b: Sequence[Bit]) -> Vec:
    """Elementwise ``a`` if ``s`` else ``b`` (2 gates a bit, one shared ``NOT s``)."""
    _same_width(a, b)
    return Vec(s.cb.mux(s, x, y) for x, y in zip(a, b))


def any_(v: Sequence[Bit], cb: CircuitBuilder | None = None) -> Bit:
    """OR of the bits of ``v`` (0 for an empty vector, which needs ``cb``)."""
    cb = cb or v[0].cb
    return cb.or_(*v)


def all_(v: Sequence[Bit], cb: CircuitBuilder | None = None) -> Bit:
    """AND of the bits of ``v`` (1 for an empty vector, which needs ``cb``)."""
    cb = cb or v[0].cb
    return cb.and_(*v)


def eq(a: Sequence[Bit], b: Sequence[Bit]) -> Bit:
    """1 when the vectors are equal: NOR of the elementwise XORs."""
    _same_width(a, b)
    cb = (a or b)[0].cb
    return ~cb.or_(*(x ^ y for x, y in zip(a, b)))


def eq_const(v: Sequence[Bit], k: int) -> Bit:
    """1 when the unsigned number ``v`` (bit 0 least significant) equals ``k``."""
    cb = v[0].cb
    if k < 0 or k >> len(v):
        return cb.zero
    return cb.and_(*(b if (k >> i) & 1 else ~b for i, b in enumerate(v)))


def ge_const(v: Sequence[Bit], k: int) -> Bit:
    """1 when the unsigned number ``v`` is at least ``k`` (a chain from the top bit)."""
    cb = v[0].cb
    if k <= 0:
        return cb.one
    if k >> len(v):
        return cb.zero
    # v >= k  <=>  scanning from the most significant bit, v has a 1 where k has a 0
    # before the first position where k has a 1 and v a 0 -- or v == k.
    res = cb.one  # "the bits below i make v >= k" for the empty suffix: equal, so >=
    for i in range(len(v)):
        b, kb = v[i], (k >> i) & 1
        res = (b & res) if kb else (b | res)
    return res


def increment(v: Sequence[Bit], en: Bit | None = None) -> tuple[Vec, Bit]:
    """``v + en`` (en defaults to 1), wrapping; returns ``(sum, carry_out)``.
    A half-adder chain: 2 gates a bit."""
    cb = v[0].cb
    carry = cb.one if en is None else en
    out = []
    for b in v:
        out.append(b ^ carry)
        carry = b & carry
    return Vec(out), carry


def add(a: Sequence[Bit], b: Sequence[Bit], cin: Bit | None = None) -> tuple[Vec, Bit]:
    """Ripple-carry ``a + b + cin``; returns ``(sum, carry_out)``."""
    _same_width(a, b)
    cb = a[0].cb
    carry = cb.zero if cin is None else cin
    out = []
    for x, y in zip(a, b):
        t = x ^ y
        out.append(t ^ carry)
        carry = (x & y) | (t & carry)
    return Vec(out), carry


def popcount(bits: Sequence[Bit]) -> Vec:
    """The number of 1s among ``bits`` as an unsigned vector (an adder tree)."""
    cb = bits[0].cb
    vecs = [Vec([b]) for b in bits]
    while len(vecs) > 1:
        nxt = []
        for i in range(0, len(vecs) - 1, 2):
            a, b = vecs[i], vecs[i + 1]
            w = max(len(a), len(b))
            a = Vec(list(a) + [cb.zero] * (w - len(a)))
            b = Vec(list(b) + [cb.zero] * (w - len(b)))
            s, carry = add(a, b)
            nxt.append(Vec(list(s) + [carry]))
        if len(vecs) % 2:
            nxt.append(vecs[-1])
        vecs = nxt
    return vecs[0]


def prefix_or(v: Sequence[Bit]) -> Vec:
    """``p[i] = v[0] | ... | v[i]`` (a chain: one 2-input OR a bit)."""
    out, acc = [], None
    for b in v:
        acc = b if acc is None else (acc | b)
        out.append(acc)
    return Vec(out)


def lowest_one(v: Sequence[Bit]) -> Vec:
    """One-hot of the lowest set bit of ``v`` (all 0 when ``v`` is 0)."""
    p = prefix_or(v)
    return Vec([v[0]] + [v[i] & ~p[i - 1] for i in range(1, len(v))])


# ---------------------------------------------------------------- learners


class _GroupBuilder(CircuitBuilder):
    """What both learner builders share: named groups of port bits, memory bits with
    their initial values, and one update per memory bit."""

    GROUPS: tuple[str, ...] = ()

    def __init__(self, name: str, prefix: str = "n"):
        super().__init__(prefix)
        self.name = name
        self._groups: dict[str, list[str]] = {g: [] for g in self.GROUPS}
        self._init: dict[str, int] = {}
        self._next: dict[str, Bit] = {}
        self._mem_bits: dict[str, Bit] = {}

    def _declare(self, group: str, name: str, width: int | None) -> Bit | Vec:
        names = [name] if width is None else [f"{name}[{i}]" for i in range(width)]
        bits = [self.port(n) for n in names]
        self._groups[group] += names
        return bits[0] if width is None else Vec(bits)

    def input(self, name: str, width: int | None = None) -> Bit | Vec:
        """Data input bits x (``name[0..width-1]``, or one bit ``name``)."""
        return self._declare("input", name, width)

    def random(self, name: str, width: int | None = None) -> Bit | Vec:
        """The algorithm's random bits r (Theorem 4, Remark 10)."""
        return self._declare("random", name, width)

    def memory(self, name: str, width: int | None = None, init: int | Sequence[int] = 0) -> Bit | Vec:
        """Memory bits b; ``init`` is one 0/1 for all of them or one per bit."""
        v = self._declare("memory", name, width)
        bits = [v] if width is None else list(v)
        inits = [init] * len(bits) if isinstance(init, int) else list(init)
        if len(inits) != len(bits):
            raise ValueError(f"init for {name!r} has {len(inits)} values, the group has {len(bits)} bits")
        for b, i in zip(bits, inits):
            self._init[b.name] = int(i)
            self._mem_bits[b.name] = b
        return v

    def update(self, mem: Bit | Sequence[Bit], new: Bit | Sequence[Bit]) -> None:
        """Memory ``mem`` becomes ``new`` when the memory is updated."""
        mems = [mem] if isinstance(mem, Bit) else list(mem)
        news = [new] if isinstance(new, Bit) else list(new)
        _same_width(mems, news)
        for m_, n_ in zip(self._own(mems), self._own(news)):
            if m_.name not in self._mem_bits:
                raise ValueError(f"{m_!r} is not a memory bit")
            if m_.name in self._next:
                raise ValueError(f"memory bit {m_.name!r} already has an update")
            self._next[m_.name] = n_

    def _next_memory(self) -> list[Bit]:
        return [self._next.get(b, self._mem_bits[b]) for b in self._groups["memory"]]

    def _memory_init(self) -> tuple[int, ...]:
        return tuple(self._init[b] for b in self._groups["memory"])


class LearnerBuilder(_GroupBuilder):
    """Builds a :class:`~tm2nn.ir.Learner`: declare the groups, compute with bits,
    set each memory bit's update with :meth:`update` (Lemma 3's g_n: the memory after
    a *wrong* output), then :meth:`build` with ``h``.

    Groups may be declared in any order and several times each (they concatenate);
    the circuits' ports are always ``x ++ r ++ r' ++ b``.  A memory bit without an
    :meth:`update` keeps its value (its ``g`` output is the bit itself).  To write a
    learning algorithm *without* Theorem 4's phases, use :class:`BaseLearnerBuilder`
    and :func:`tm2nn.learners.theorem4.theorem4`."""

    GROUPS = ("input", "random", "coin", "memory")

    def coin(self, name: str = "rp") -> Bit:
        """The learning-phase coin r' (Theorem 4's A'); at most one."""
        if self._groups["coin"]:
            raise ValueError("a learner has at most one coin bit")
        return self._declare("coin", name, None)

    def build(self, h: Bit, h_name: str | None = None, g_name: str | None = None) -> Learner:
        """The learner with output ``h`` and the updates given so far."""
        gr = self._groups
        ports = gr["input"] + gr["random"] + gr["coin"] + gr["memory"]
        hc = self.circuit(h_name or f"{self.name}_h", ports, [h])
        gc = self.circuit(g_name or f"{self.name}_g", ports, self._next_memory())
        return Learner(self.name, tuple(gr["input"]), tuple(gr["memory"]), hc, gc,
                       random=tuple(gr["random"]), coin=tuple(gr["coin"]), init=self._memory_init())


class BaseLearnerBuilder(_GroupBuilder):
    """Builds a :class:`~tm2nn.ir.learner.BaseLearner` (Theorem 4's ``A``, no phases):
    declare the groups and the label ``y`` (:meth:`label`), set each memory bit's
    update with :meth:`update` (``A(b, x, y, r)``: it may read ``y``), then
    :meth:`build` with the prediction ``A(b, x)`` and a ``done`` bit or a sample
    count.  Only the updates may depend on the label.

    Example -- memorise the last label and predict it, done after 3 learned samples::

        bb = BaseLearnerBuilder("last")
        bb.input("x", 2)
        y = bb.label()
        lab = bb.memory("lab")
        bb.update(lab, y)
        base = bb.build(predict=lab, samples=3)      # then theorem4(base)
    """

    GROUPS = ("input", "random", "label", "memory")

    def label(self, name: str = "y") -> Bit:
        """The sample's label y, an input of the update only; exactly one."""
        if self._groups["label"]:
            raise ValueError("a base learner has one label bit")
        return self._declare("label", name, None)

    def build(self, predict: Bit, done: Bit | None = None, samples: int | None = None) -> BaseLearner:
        """The base learner with prediction ``predict``, the updates given so far and
        either ``done`` (a bit over x, r, b) or ``samples`` (Theorem 4's counter)."""
        gr = self._groups
        if not gr["label"]:
            self.label()
        ports = gr["input"] + gr["random"] + gr["memory"]
        uports = gr["input"] + gr["random"] + gr["label"] + gr["memory"]
        pc = self.circuit(f"{self.name}_predict", ports, [predict])
        dc = None if done is None else self.circuit(f"{self.name}_done", ports, [done])
        uc = self.circuit(f"{self.name}_update", uports, self._next_memory())
        return BaseLearner(self.name, tuple(gr["input"]), tuple(gr["memory"]), pc, uc, done=dc,
                           samples=samples, random=tuple(gr["random"]), label=gr["label"][0],
                           init=self._memory_init())


__all__ = [
    "Bit", "Vec", "CircuitBuilder", "LearnerBuilder", "BaseLearnerBuilder", "mux", "mux_vec", "any_", "all_", "eq",
    "eq_const", "ge_const", "increment", "add", "popcount", "prefix_or", "lowest_one",
]
