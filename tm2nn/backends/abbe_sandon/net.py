"""The emulation net G_n of Abbe & Sandon §4.1 (Lemma 3, used by Theorem 4), assembled
from the parts in this package, as an explicit labelled graph with exact edge weights.

What is built (Lemma 3's proof, piece by piece)
-----------------------------------------------
* **Memory components** -- ``m + m'`` copies of M_s (Definition 6, :func:`.gadgets.ms_gadget`),
  all copies of v0 merged into one vertex ``v0`` and all copies of v6 merged into the
  output vertex ``out``.  The first ``m`` copies ``mem[i]`` store the learner's memory
  bits (bit = sign of w(v0, v1), :func:`.gadgets.ms_bit`); the other ``m'`` are the
  extraneous ones that make exactly ``m'`` copies active in every step.
* **Input vertices** -- one per net input ``x ++ r ++ r'`` (Theorem 4 feeds
  ``(2x - 1, 2r - 1, 2r' - 1)``), and a **constant vertex** ``const`` (output 1) with an
  edge of weight 2 to ``v0`` (so v0 outputs f(2) = 2, Lemma 2 hypothesis 3).
* **Computation section** -- Lemma 1's gate units (:func:`.gates.gate`) for the circuit
  of ``r(x, b)``, which reads the net inputs and the read vertices v1 of the first m
  copies; each copy's ``vc`` / ``vc'`` has an edge of weight 1/2 from its r-output and
  weight 1 from the constant, so it outputs 0 or 2 (Lemma 2 hypothesis 4).

``r`` lists ``h(x, b)`` and half the vc/vc' values: with ``d = b XOR g(x, b)`` (the bits
to change) and ``h = h(x, b)``, a copy is *active* on the +P side (vc = 0) when it is to
be flipped and the net will output +1 (h = 1), on the -P side (vc' = 0) when h = 0:

* ``mem[i]``:   vc/2 = NOT(d_i AND h),   vc'/2 = NOT(d_i AND NOT h);
* extraneous ``ext[e]``, e = 1..m:  active_e = [popcount(d) <= m - e];
  vc/2 = NOT(active_e AND h), vc'/2 = NOT(active_e AND NOT h);
* extraneous ``ext*`` (the other m' - m): always active, vc/2 = NOT h, vc'/2 = h.

So ``|d| + (m - |d|) + (m' - m) = m'`` copies are active, each adds ``±P = ±1/m'`` to the
output vertex, which gets 2h - 1 exactly (Lemma 3: "exactly 1/(2^243 3^1641/2 s^364)
memory components get flipped in each time step"); on a wrong output every active copy
flips (Lemma 2), so mem[i] changes exactly where d_i = 1.

Departures (named; docs/abbe_sandon.md "The net G_n and training")
-----------------------------------------------------------------
1. **Multiplicity.** The m' - m always-active extraneous copies are one block of
   vertices with ``mult = m' - m`` (~1.3e79): they start equal and always receive equal
   controls, hence equal updates, so the block is an *exact* representation of them
   (forward: the block adds ``mult * w y`` into the merged output vertex; backward: each
   copy's gradient is the block's; :mod:`.train`).  Which extraneous copies are flipped
   is the paper's "the next m' - |d|" realised as "ext[1..m-|d|] and the whole block".
2. **Gate lowering.** h and g are composed into one circuit for r by the learner builder
   (constant folding, structural hashing -- so r's identical outputs for the block are one
   gate), lowered by :func:`tm2nn.passes.basis.to_basis` to AND/OR of fan-in 2, NOT, BUF and
   constants (Lemma 1 has AND, OR, NOT of fan-in 2).  BUF is ``gate("AND", 1)`` (weight 1);
   CONST0/CONST1 are a unit with only a bias edge ``-2``/``+2`` from the constant vertex (ours).
3. **Reading the encodings** (Lemma 1's proof: "compensate ... by changing the weights of
   the edges from these vertices"): a gate operand that is a port gets the weight
   ``a_p * w`` where ``a_p`` maps the port's encoding onto ±2 -- ``a = 2`` for a net input
   (±1), ``a = -2/s'`` for a memory read (v1 outputs ``+s'`` for 0 and ``-s'`` for 1,
   ``s' = (18 sqrt3 s)^3``, Figure 2); both encodings are symmetric, so no bias changes.
4. **Initial memory.** Lemma 3 has b_0 = 0; a learner may declare ``init`` bits (Theorem 4
   allows any b^0): such a copy starts with the +P path v0..v6 negated (the state one
   flip would leave), and its bit is read against the bit-0 weights.
5. r's output h(x, b) is kept as a gate unit with no out-edges, as Lemma 3 lists it;
   the net never reads it (the output comes from the memory components).

Weights are exact: :class:`.exact.Mono` inside the copies and on the memory-read edges,
Python ints and Fractions elsewhere.  :meth:`Net.size_report` gives the size rows that
``tm2nn info --backend abbe-sandon`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from tm2nn.ir.circuit import Circuit
from tm2nn.ir.learner import Learner
from tm2nn.learners.builder import CircuitBuilder, ge_const, popcount
from tm2nn.passes.basis import to_basis

from . import gates as gate_units
from .constants import Sec41, log10_23
from .exact import SRelation
from .gadgets import MS_PATH_PLUS, Gadget, ms_bit, ms_gadget

Number = Any

#: the 10 vertices of a copy of M_s that are not merged (v0 and v6 are)
_OWN = ("vc", "vc'", "v1", "v2", "v3", "v3'", "v4", "v4'", "v5", "v5'")


@dataclass
class Copy:
    """One copy (or block of identical copies) of M_s inside the net."""

    label: str  # "mem[i]", "ext[e]" or "ext*"
    role: str  # "memory" or "extraneous"
    mult: int
    vertex: dict[str, int]  # M_s vertex name -> net vertex id (v0 -> the merged v0, v6 -> out)
    edge: dict[tuple[str, str], int]  # M_s edge -> net edge id
    template: Gadget  # the bit-0 M_s (its weights are the "initial" ones ms_bit reads against)


@dataclass
class Net:
    """G_n as a labelled weighted graph (see the module doc).

    Vertices ``0 .. V-1`` in topological order; ``kind[v]`` is ``const``, ``input``,
    ``gate``, ``control`` (a copy's vc/vc'), ``v0``, ``gadget`` or ``out``.  Edge ``e`` goes
    ``src[e] -> dst[e]`` with weight ``w[e]``; ``part[e]`` is ``read``, ``gate``,
    ``control``, ``v0`` or ``gadget`` (the 12 edges of a copy of M_s).
    ``mult[v]`` is how many identical vertices ``v`` stands for (1 except the ext* block)."""

    learner: Learner
    sec: Sec41
    names: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    mult: list[int] = field(default_factory=list)
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    w: list[Number] = field(default_factory=list)
    part: list[str] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    const: int = -1
    v0: int = -1
    out: int = -1
    copies: list[Copy] = field(default_factory=list)
    r_circuit: Circuit | None = None
    r_outputs: dict[str, int] = field(default_factory=dict)  # r-output label -> gate vertex
    gate_of: dict[str, int] = field(default_factory=dict)  # lowered signal -> gate vertex

    # ------------------------------------------------------------ construction helpers
    def add_vertex(self, name: str, kind: str, mult: int = 1) -> int:
        self.names.append(name)
        self.kind.append(kind)
        self.mult.append(mult)
        return len(self.names) - 1

    def add_edge(self, u: int, v: int, w: Number, part: str) -> int:
        self.src.append(u)
        self.dst.append(v)
        self.w.append(w)
        self.part.append(part)
        return len(self.src) - 1

    # ------------------------------------------------------------ views
    @property
    def memory_copies(self) -> list[Copy]:
        return [c for c in self.copies if c.role == "memory"]

    def gadget(self, c: Copy) -> Gadget:
        """The copy as a :class:`.gadgets.Gadget` with its current weights (for ms_bit and
        the closed-form cross-checks); ``multiplicity`` is the copy's."""
        g = c.template.copy()
        g.weights = {e: self.w[i] for e, i in c.edge.items()}
        g.multiplicity = c.mult
        return g

    def memory_bits(self) -> list[int]:
        """The stored memory, decoded from the first m copies' weights (:func:`ms_bit`)."""
        return [ms_bit(self.gadget(c)) for c in self.memory_copies]

    def gadget_edges(self) -> set[int]:
        return {i for c in self.copies for i in c.edge.values()}

    # ------------------------------------------------------------ size
    def size_report(self) -> list[tuple[str, str, str]]:
        """(quantity, this net, paper) rows for ``tm2nn info``."""
        lr, sec = self.learner, self.sec
        m, mp = lr.m, sec.m_prime
        n_gates = sum(1 for k in self.kind if k == "gate")
        true_vertices = sum(self.mult)
        true_edges = sum(max(self.mult[self.src[e]], self.mult[self.dst[e]]) for e in range(len(self.src)))
        distinct = len({(self.w[e] if not isinstance(self.w[e], int) else Fraction(self.w[e]))
                        for e in range(len(self.src))})
        g = log10_23(-244, -1643 / 2) - 362 * sec.log10_s()
        return [
            ("net inputs (x, r, r')", f"{len(self.inputs)}", "n (+2 random bits, Theorem 4)"),
            ("memory bits m", f"{m}", "m_n"),
            ("copies of M_s", f"m + m' = {m} + {mp:.4g}", "m + m' (Lemma 3)"),
            ("  stored separately", f"{len(self.copies)} (m memory, m extraneous, 1 block x {mp - m:.4g})",
             "-"),
            ("m'", f"{mp:.6g}", "max(m, ceil(2^-243 3^-1641/2 (18 sqrt3)^364))"),
            ("gate units (r circuit)", f"{n_gates}", "<= gates of r (Lemma 1)"),
            ("vertices", f"{true_vertices:.6g}", "n + 1 + gates + 10(m + m') + 2"),
            ("  stored", f"{len(self.names)}", "-"),
            ("edges", f"{true_edges:.6g}", "-"),
            ("  stored", f"{len(self.src)}", "-"),
            ("distinct weights", f"{distinct}", "-"),
            ("s", f"{float(sec.s):.6g}", "(2^-243 3^-1641/2 / m')^(1/364)"),
            ("gamma", f"{10 ** (g - int(g)):.4f}e{int(g)}", "2^-244 3^-1643/2 s^-362 (Lemma 2)"),
            ("P = 1/m' (per active copy)", f"{1 / mp:.4g}", "2^243 3^1641/2 s^364"),
        ]

    def info(self) -> dict:
        rows = self.size_report()
        return {k.strip(): v for k, v, _ in rows}


# ---------------------------------------------------------------- the circuit for r
def r_circuit(lr: Learner) -> tuple[Circuit, list[str]]:
    """Lemma 3's r(x, b) as one circuit over the learner's ports ``x ++ r ++ r' ++ b``.

    Outputs (labels returned alongside): ``h``; then per memory copy ``mem[i].vc``,
    ``mem[i].vc'``; per extraneous copy ``ext[e].vc``, ``ext[e].vc'`` (e = 1..m); then
    ``ext*.vc``, ``ext*.vc'`` -- each the *half* value (1 -> the vertex gets 2, 0 -> 0)."""
    cb = CircuitBuilder(prefix="r")
    ports = {p: cb.port(p) for p in lr.ports}
    (h,) = cb.inline(lr.h, ports)
    gs = cb.inline(lr.g, ports)
    m = lr.m
    d = [ports[b] ^ gi for b, gi in zip(lr.memory, gs)]
    outs, labels = [h], ["h"]
    for i, di in enumerate(d):
        outs += [~(di & h), ~(di & ~h)]
        labels += [f"mem[{i}].vc", f"mem[{i}].vc'"]
    count = popcount(d)
    for e in range(1, m + 1):
        active = ~ge_const(count, m - e + 1)
        outs += [~(active & h), ~(active & ~h)]
        labels += [f"ext[{e}].vc", f"ext[{e}].vc'"]
    outs += [~h, h]
    labels += ["ext*.vc", "ext*.vc'"]
    c = cb.circuit(f"{lr.name}_r", lr.ports, outs)
    return to_basis(c), labels


# ---------------------------------------------------------------- G_n
def _exact(x: float) -> int | Fraction:
    q = Fraction(x)
    return int(q) if q.denominator == 1 else q


def build_net(lr: Learner, m_prime: int | None = None, *, gadget=None, read_value: Number = None) -> Net:
    """G_n for the learner ``lr`` (Lemma 3's proof; departures in the module doc).

    ``m_prime`` overrides m' (only for experiments: Lemma 2 needs s < 1/(18 sqrt3), which
    the paper's m' guarantees; the default is Lemma 3's).  ``gadget(s)`` (default
    :func:`.gadgets.ms_gadget`) makes the bit-0 copy of M_s and ``read_value`` is v1's
    output for bit 0 (default Figure 2's s'): the float64 parametrisation
    (:mod:`.ir_net`) passes its dyadic M_s and 2s, with the graph unchanged."""
    sec = Sec41.for_m(lr.m) if m_prime is None else _sec_for(lr.m, m_prime)
    net = Net(lr, sec)
    s = sec.s
    ms_gadget_ = ms_gadget if gadget is None else gadget
    # s' = (18 sqrt3 s)^3, v1's output for bit 0
    s_read = sec.num(18, 0, Fraction(1, 2), 1) ** 3 if read_value is None else read_value

    net.const = net.add_vertex("const", "const")
    net.inputs = [net.add_vertex(f"in:{p}", "input") for p in lr.net_inputs]
    net.v0 = net.add_vertex("v0", "v0")
    net.add_edge(net.const, net.v0, 2, "v0")  # Lemma 3: "an edge of weight 2 from the constant vertex to v0"

    # memory copies first (their v1 is read by the computation section)
    m, mp = lr.m, sec.m_prime
    template = ms_gadget_(s)
    specs = [(f"mem[{i}]", "memory", 1, lr.init[i]) for i in range(m)]
    specs += [(f"ext[{e}]", "extraneous", 1, 0) for e in range(1, m + 1)]
    if mp - m > 0:
        specs.append(("ext*", "extraneous", mp - m, 0))
    pending = []
    for label, role, mult, bit in specs:
        vid = {"v0": net.v0}
        for vn in _OWN:
            kind = "control" if vn in ("vc", "vc'") else "gadget"
            vid[vn] = net.add_vertex(f"{label}.{vn}", kind, mult)
        pending.append((label, role, mult, bit, vid))

    # the computation section for r (Lemma 1)
    rc, labels = r_circuit(lr)
    net.r_circuit = rc
    port_src: dict[str, tuple[int, Number]] = {}
    for p, v in zip(lr.net_inputs, net.inputs):
        port_src[p] = (v, 2)  # ±1 -> ±2
    for i, b in enumerate(lr.memory):
        port_src[b] = (pending[i][4]["v1"], -2 / s_read)  # +s' (bit 0) -> -2, -s' (bit 1) -> +2

    def operand(sig: str, w: Number, unit: int) -> None:
        if sig in port_src:
            u, a = port_src[sig]
            net.add_edge(u, unit, a * w if not isinstance(a, int) else _exact(a * w), "read")
        else:
            net.add_edge(net.gate_of[sig], unit, _exact(w), "gate")

    def make_unit(name: str, op: str, ins: tuple[str, ...]) -> int:
        v = net.add_vertex(f"gate:{name}", "gate")
        if op in ("CONST0", "CONST1"):
            net.add_edge(net.const, v, 2 if op == "CONST1" else -2, "gate")
            return v
        unit = gate_units.gate("AND", 1) if op == "BUF" else gate_units.gate(op, len(ins))
        for sig, w in zip(ins, unit.weights):
            operand(sig, w, v)
        if unit.bias:
            net.add_edge(net.const, v, _exact(unit.bias), "gate")
        return v

    for gt in rc.topo:
        net.gate_of[gt.name] = make_unit(gt.name, gt.op, gt.inputs)
    for label, sig in zip(labels, rc.outputs):
        if sig not in net.gate_of:  # an output that is a port: a BUF unit reads it
            net.gate_of[sig] = make_unit(f"buf:{sig}", "BUF", (sig,))
        net.r_outputs[label] = net.gate_of[sig]

    net.out = net.add_vertex("out", "out")
    for label, role, mult, bit, vid in pending:
        vid["v6"] = net.out
        g = ms_gadget_(s)
        w = dict(g.weights)
        if bit:
            for e in MS_PATH_PLUS:
                w[e] = -w[e]
        edge = {e: net.add_edge(vid[e[0]], vid[e[1]], w[e], "gadget") for e in template.weights}
        for ctl in ("vc", "vc'"):  # Lemma 3: weight 1/2 from r's output, 1 from the constant
            net.add_edge(net.r_outputs[f"{label}.{ctl}"], vid[ctl], Fraction(1, 2), "control")
            net.add_edge(net.const, vid[ctl], 1, "control")
        net.copies.append(Copy(label, role, mult, vid, edge, g))
    _toposort(net)
    return net


def _sec_for(m: int, m_prime: int) -> Sec41:
    if m_prime < m:
        raise ValueError("m' must be at least m")
    return Sec41(m_prime, SRelation(364, Fraction(1, m_prime), Fraction(-243), Fraction(-1641, 2)))


def _toposort(net: Net) -> None:
    """Renumber the vertices in a topological order (Kahn), keeping labels attached."""
    V = len(net.names)
    indeg = [0] * V
    succ: list[list[int]] = [[] for _ in range(V)]
    for u, v in zip(net.src, net.dst):
        succ[u].append(v)
        indeg[v] += 1
    order = [v for v in range(V) if indeg[v] == 0]
    i = 0
    while i < len(order):
        for v in succ[order[i]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
        i += 1
    if len(order) != V:  # pragma: no cover - the construction is acyclic
        raise ValueError("G_n has a cycle")
    new = {old: k for k, old in enumerate(order)}
    net.names = [net.names[o] for o in order]
    net.kind = [net.kind[o] for o in order]
    net.mult = [net.mult[o] for o in order]
    net.src = [new[u] for u in net.src]
    net.dst = [new[v] for v in net.dst]
    net.inputs = [new[v] for v in net.inputs]
    net.const, net.v0, net.out = new[net.const], new[net.v0], new[net.out]
    for c in net.copies:
        c.vertex = {k: new[v] for k, v in c.vertex.items()}
    net.r_outputs = {k: new[v] for k, v in net.r_outputs.items()}
    net.gate_of = {k: new[v] for k, v in net.gate_of.items()}


__all__ = ["Net", "Copy", "build_net", "r_circuit"]
